// Long-term memory (`memory.*`, `context.prepare`'s `memory`) against the real daemon.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import { InvalidParams, MemoryUnavailable, SatchelError } from '../dist/index.js';
import { DAILY_LOGS, MEMORY_ENV, MEMORY_NOTE, spawnClient, tempDir } from './helpers.mjs';

test('memoryWrite, then memorySearch finds the line, memoryGet reads it, memoryAppend adds to it', async () => {
  const workspace = tempDir();
  const client = spawnClient({ workspace, env: MEMORY_ENV });
  try {
    const path = 'memory/projects/infra.md';
    const written = await client.memoryWrite({ path, content: MEMORY_NOTE });
    assert.deepEqual([written.path, written.bytes, written.lines], [path, Buffer.byteLength(MEMORY_NOTE), 6]);
    assert.ok(written.chunks_indexed >= 1 && !written.warnings, JSON.stringify(written));
    assert.equal(readFileSync(join(workspace, path), 'utf8'), MEMORY_NOTE);

    // Searchable as soon as the write resolves, cited by file and line.
    const found = await client.memorySearch({ query: 'zanzibar', mode: 'bm25' });
    assert.equal(found.mode, 'bm25');
    assert.equal(found.results.length, 1, JSON.stringify(found));
    const [hit] = found.results;
    assert.deepEqual([hit.path, hit.start_line, hit.end_line, hit.source], [path, 6, 6, 'bm25']);
    assert.ok(hit.snippet.includes('zanzibar') && hit.score > 0 && hit.score <= 1, JSON.stringify(hit));

    const lines = await client.memoryGet({ path, start_line: hit.start_line, end_line: hit.end_line });
    assert.deepEqual(lines, { path, start_line: 6, end_line: 6, total_lines: 6, text: '- The staging database is called zanzibar.\n' });

    const appended = await client.memoryAppend({ path, text: '- Backups run nightly to the bucket kestrel.\n' });
    assert.equal(appended.lines, 7);
    const again = await client.memorySearch({ query: 'kestrel backups', mode: 'bm25', max_results: 3, min_score: 0 });
    assert.deepEqual(again.results.map((h) => [h.path, h.start_line]), [[path, 7]]);
    const whole = await client.memoryGet({ path });
    assert.equal(whole.text, `${MEMORY_NOTE}- Backups run nightly to the bucket kestrel.\n`);
    assert.deepEqual([whole.start_line, whole.end_line, whole.total_lines], [1, 7, 7]);
  } finally {
    await client.close();
  }
});

test('memoryMerge folds the daily logs up to `through` into MEMORY.md, once', async () => {
  const client = spawnClient({ env: MEMORY_ENV });
  try {
    await client.memoryWrite({ path: 'MEMORY.md', content: '# MEMORY\n\n## Notes\n\n- The CI box has 2 cores.\n' });
    for (const [path, content] of Object.entries(DAILY_LOGS)) await client.memoryWrite({ path, content });

    const merged = await client.memoryMerge({ through: '2026-01-06' });
    assert.deepEqual(merged.merged, ['memory/2026-01-05.md', 'memory/2026-01-06.md']);
    // SQLite (once: the second day repeats it) and French; the day's goal stays in its log.
    assert.deepEqual([merged.added, merged.duplicates, merged.summarizer], [2, 1, 'extractive']);
    assert.equal(typeof merged.backup, 'string', 'a backup of the previous MEMORY.md');

    const memory = (await client.memoryGet({ path: 'MEMORY.md' })).text;
    assert.ok(memory.includes('- The user prefers answers in French. (from memory/2026-01-06.md)'), memory);
    assert.ok(memory.includes('- Use SQLite for the session index. (from memory/2026-01-05.md)'), memory);
    assert.ok(memory.includes('- The CI box has 2 cores.'), memory);
    assert.ok(!memory.includes('ship the release') && !memory.includes('after the merged days'), memory);
    const hits = await client.memorySearch({ query: 'French answers', mode: 'bm25' });
    assert.ok(hits.results.some((h) => h.path === 'MEMORY.md'), JSON.stringify(hits));

    const twice = await client.memoryMerge({ through: '2026-01-06' });
    assert.deepEqual([twice.added, twice.duplicates], [0, 3]);
    assert.equal((await client.memoryGet({ path: 'MEMORY.md' })).text, memory);
  } finally {
    await client.close();
  }
});

test('memoryStatus names the index and the modes that are on', async () => {
  const client = spawnClient({ env: MEMORY_ENV });
  try {
    await client.memoryWrite({ path: 'MEMORY.md', content: MEMORY_NOTE });
    const status = await client.memoryStatus();
    assert.equal(status.index_path, 'index/memory.sqlite');
    assert.deepEqual(status.modes, ['bm25']);
    assert.equal(status.embedding, null); // SATCHEL_EMBEDDING_BACKEND=none
    assert.equal(typeof status.index, 'object');
    assert.equal(typeof status.watcher, 'object');
  } finally {
    await client.close();
  }
});

test('a path outside the memory files rejects with InvalidParams', async () => {
  const workspace = tempDir();
  const client = spawnClient({ workspace, env: MEMORY_ENV });
  try {
    const invalid = (e) => e instanceof InvalidParams && e instanceof SatchelError && e.code === -32602;
    await assert.rejects(client.memoryWrite({ path: '../x.md', content: 'escape' }), invalid);
    await assert.rejects(client.memoryAppend({ path: '../x.md', text: 'escape' }), invalid);
    await assert.rejects(client.memoryWrite({ path: 'notes.txt', content: 'not markdown under memory/' }), invalid);
    await assert.rejects(client.memoryGet({ path: '../x.md' }), invalid);
    assert.ok(!existsSync(join(dirname(workspace), 'x.md')));
    assert.ok(!existsSync(join(workspace, 'notes.txt')));
  } finally {
    await client.close();
  }
});

test('prepare with `memory: {}` recalls the fact into the system prompt', async () => {
  const client = spawnClient({ env: MEMORY_ENV });
  try {
    await client.memoryWrite({ path: 'MEMORY.md', content: MEMORY_NOTE });
    const messages = [{ role: 'user', content: 'Which database does staging use?' }];
    const res = await client.prepare({ session_id: 'recall', messages, memory: {} });
    assert.equal(typeof res.system, 'string', `no system: ${Object.keys(res)}`);
    assert.ok(res.system.includes('The staging database is called zanzibar.'), res.system);
    assert.ok(res.prompt.sections.some((s) => s.key === 'memory:recall'));
    const plain = await client.prepare({ session_id: 'plain', messages });
    assert.ok(!String(plain.system ?? '').includes('zanzibar'), 'nothing recalled without `memory`');
  } finally {
    await client.close();
  }
});

test('with the index off, search rejects with MemoryUnavailable and the files still work', async () => {
  const client = spawnClient({ env: { ...MEMORY_ENV, SATCHEL_MEMORY_INDEX_ENABLED: 'false' } });
  try {
    assert.equal((await client.memoryWrite({ path: 'MEMORY.md', content: MEMORY_NOTE })).chunks_indexed, 0);
    assert.equal((await client.memoryGet({ path: 'MEMORY.md', start_line: 6 })).text, '- The staging database is called zanzibar.\n');
    const unavailable = (e) => e instanceof MemoryUnavailable && e.code === -32010 && e.name === 'MemoryUnavailable';
    await assert.rejects(client.memorySearch({ query: 'zanzibar' }), unavailable);
    await assert.rejects(client.memoryStatus(), unavailable);
    await assert.rejects(client.memoryMerge(), unavailable);
    const messages = [{ role: 'user', content: 'zanzibar?' }];
    await assert.rejects(client.prepare({ session_id: 's', messages, memory: {} }), unavailable);
  } finally {
    await client.close();
  }
});
