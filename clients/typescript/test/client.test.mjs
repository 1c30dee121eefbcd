// The client against the real daemon (SATCHEL_BIN, default <repo>/target/debug/satchel).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  ConnectionClosed,
  FileNotFound,
  InvalidParams,
  METHODS,
  MethodNotFound,
  PathOutsideWorkspace,
  PayloadTooLarge,
  SatchelClient,
  SatchelError,
  StaleSession,
  UnknownSession,
} from '../dist/index.js';
import { PROMPT_SECTIONS, anthropicConversation, bigLog, longChat, openaiConversation, spawnClient } from './helpers.mjs';

/** Reads a whole offloaded file back through `context.read`, slice by slice. */
async function readAll(client, path) {
  let text = '';
  for (let offset = 0; ; ) {
    const slice = await client.read({ path, byte_offset: offset, max_bytes: 20_000 });
    assert.equal(slice.byte_offset, offset);
    text += slice.content;
    if (slice.eof) return text;
    offset = slice.next_byte_offset;
  }
}

test('spawn + initialize reports the server and its methods', async () => {
  const client = spawnClient();
  const init = await client.initialize({ client_info: { name: 'satchel-client tests' } });
  assert.equal(init.server_name, 'satchel');
  assert.match(init.protocol_version, /^\d+\.\d+\.\d+$/);
  assert.equal(typeof init.config.max_input_length, 'number');
  for (const method of METHODS) assert.ok(init.methods.includes(method), method);
  assert.equal(await client.close(), 0);
});

test('prepare (OpenAI) offloads a big tool output, and read rebuilds it byte for byte', async () => {
  const client = spawnClient();
  await client.initialize();
  const output = bigLog();
  const res = await client.prepare({ session_id: 'openai-1', messages: openaiConversation(output) });
  assert.equal(res.format, 'openai');
  assert.equal(res.messages.length, 3);
  const offloaded = res.actions.find((a) => a.kind === 'offloaded');
  assert.ok(offloaded, JSON.stringify(res.actions));
  assert.equal(offloaded.total_bytes, Buffer.byteLength(output));
  assert.ok(res.actions.some((a) => a.kind === 'truncated' && a.phase === 'recent'));
  const excerpt = res.messages[2].content;
  assert.ok(excerpt.includes('<<<TRUNCATED>>>') && excerpt.includes(offloaded.file), excerpt.slice(0, 200));
  assert.ok(excerpt.length < output.length);
  assert.equal(await readAll(client, offloaded.file), output);

  const inspect = await client.inspect({ session_id: 'openai-1' });
  assert.equal(inspect.messages, 3);
  assert.deepEqual(inspect.offloaded.map((o) => o.file), [offloaded.file]);
  assert.ok(['low', 'medium', 'high', 'critical'].includes(inspect.pressure));
  await client.close();
});

test('prepare (Anthropic) keeps the format and offloads the tool_result', async () => {
  const client = spawnClient();
  await client.initialize();
  const output = bigLog();
  const res = await client.prepare({ session_id: 'anthropic-1', messages: anthropicConversation(output) });
  assert.equal(res.format, 'anthropic');
  const block = res.messages[2].content[0];
  assert.equal(block.type, 'tool_result');
  assert.equal(block.tool_use_id, 'toolu_1');
  const offloaded = res.actions.find((a) => a.kind === 'offloaded');
  assert.ok(offloaded);
  assert.equal(await readAll(client, offloaded.file), output);
  const again = await client.prepare({ session_id: 'anthropic-1', append: [{ role: 'assistant', content: 'One test fails.' }] });
  assert.equal(again.reconciliation.session_messages, 4);
  await client.close();
});

test('error responses become SatchelError subclasses', async () => {
  const client = spawnClient();
  await client.initialize();
  const rejectsWith = (promise, Class, code) =>
    assert.rejects(promise, (e) => e instanceof Class && e instanceof SatchelError && e.code === code && e.name === Class.name);
  await rejectsWith(client.inspect({ session_id: 'nobody' }), UnknownSession, -32001);
  await rejectsWith(client.read({ path: '../etc/passwd' }), PathOutsideWorkspace, -32002);
  await rejectsWith(client.read({ path: 'tool_result/missing.txt' }), FileNotFound, -32003);
  await rejectsWith(client.call('context.nothing', {}), MethodNotFound, -32601);
  await assert.rejects(client.call('context.prepare', { session_id: 's', messagez: [] }), (e) => {
    assert.ok(e instanceof InvalidParams);
    assert.equal(e.data?.details?.field, 'messagez');
    return true;
  });
  await client.close();

  const small = spawnClient({ args: ['--max-message-bytes', '4096'] });
  await rejectsWith(small.prepare({ session_id: 'big', messages: openaiConversation(bigLog(200)) }), PayloadTooLarge, -32007);
  assert.equal((await small.inspect({ session_id: 'big' }).catch((e) => e)).code, -32001, 'the daemon keeps serving');
  await small.close();
});

test('append with expect_messages: a stale count rejects with StaleSession and appends nothing', async () => {
  const client = spawnClient();
  await client.initialize();
  const first = await client.prepare({ session_id: 'counted', messages: [{ role: 'user', content: 'Hello?' }] });
  const held = first.reconciliation.session_messages;
  assert.equal(held, 1);
  const reply = [{ role: 'assistant', content: 'Hello.' }];
  const second = await client.prepare({ session_id: 'counted', append: reply, expect_messages: held });
  assert.equal(second.reconciliation.session_messages, 2);
  // The same append again, as a retry after a lost reply would send it.
  await assert.rejects(client.prepare({ session_id: 'counted', append: reply, expect_messages: held }), (e) => {
    assert.ok(e instanceof StaleSession && e instanceof SatchelError, String(e));
    assert.deepEqual([e.name, e.code], ['StaleSession', -32009]);
    assert.deepEqual(e.data.details, { expected: 1, session_messages: 2 });
    return true;
  });
  assert.equal((await client.inspect({ session_id: 'counted' })).messages, 2, 'nothing was appended');
  const third = await client.prepare({ session_id: 'counted', append: [{ role: 'user', content: 'Bye.' }], expect_messages: 2 });
  assert.equal(third.reconciliation.session_messages, 3);
  await client.close();
});

test('reportUsage sends a context.usage notification; usage() answers the calibration', async () => {
  const client = spawnClient();
  await client.initialize();
  const res = await client.prepare({ session_id: 'usage', messages: [{ role: 'user', content: 'Hello there, how are you?' }] });
  const counted = res.tokens.total;
  const before = await client.inspect({ session_id: 'usage' });
  assert.deepEqual([before.calibration.factor, before.calibration.samples], [1, 0]);
  assert.equal(client.reportUsage('usage', counted + 3), undefined, 'a notification: nothing to wait for');
  // Calls on a session run in the order they were sent, so inspect sees the notification.
  const after = (await client.inspect({ session_id: 'usage' })).calibration;
  assert.ok(after.samples >= 1, JSON.stringify(after));
  assert.equal(after.last.provider_tokens, counted + 3);
  const calibration = await client.usage({ session_id: 'usage', input_tokens: counted + 5 });
  assert.equal(calibration.last.provider_tokens, counted + 5);
  assert.ok(calibration.factor >= 0.5 && calibration.factor <= 2, String(calibration.factor));
  await assert.rejects(client.usage({ session_id: 'nobody', input_tokens: 10 }), UnknownSession);
  await client.close();
});

test('prepare with sections returns the assembled system prompt and its report', async () => {
  const client = spawnClient();
  await client.initialize();
  const keys = PROMPT_SECTIONS.map((s) => s.key);
  const messages = [{ role: 'user', content: 'Fix the ParseError in src/parser.rs and run the tests.' }];
  try {
    const first = await client.prepare({ session_id: 'assembly', messages, sections: PROMPT_SECTIONS });
    client.reportUsage('assembly', first.tokens.total + 50);
    const second = await client.prepare({
      session_id: 'assembly',
      append: [{ role: 'assistant', content: 'Done: ParseError is raised for empty input.' }],
      expect_messages: 1,
      sections: PROMPT_SECTIONS,
      usage: { input_tokens: first.tokens.total + 80 },
    });
    assert.equal(second.reconciliation.session_messages, 2);
    for (const res of [first, second]) {
      assert.equal(typeof res.system, 'string', `no assembled system prompt: ${Object.keys(res)}`);
      for (const section of PROMPT_SECTIONS) assert.ok(res.system.includes(section.content), section.key);
      assert.ok(res.prompt, `no prompt report: ${Object.keys(res)}`);
      assert.equal(res.prompt.sessionId, 'assembly');
      const reported = res.prompt.sections.map((s) => s.key).filter((k) => keys.includes(k));
      assert.deepEqual(reported, keys, 'every section, in the order sent');
      assert.deepEqual(res.prompt.truncatedSectionKeys, []);
    }
    const inspected = await client.inspect({ session_id: 'assembly', detail_key: 'rules:rust' });
    assert.ok(inspected.calibration.samples >= 1);
    assert.ok(inspected.monitor.current_tokens > 0);
    assert.equal(inspected.sessionId, 'assembly');
    assert.ok(Array.isArray(inspected.sections), `no prompt in inspect: ${Object.keys(inspected)}`);
    assert.equal(inspected.detail?.key, 'rules:rust');
    assert.equal(inspected.detail.original_content, PROMPT_SECTIONS[1].content);
  } finally {
    await client.close();
  }
});

test('candidates: a lesson observed twice is promoted, listed and injected', async () => {
  const client = spawnClient();
  const lesson = 'Run `cargo fmt --all` before `cargo clippy`: clippy -D warnings fails on unformatted code';
  try {
    const observed = await client.candidatesObserve({
      text: lesson,
      kind: 'lesson',
      symbols: ['ParserConfig'],
      evidence: { failure: 'cargo clippy -- -D warnings failed', fix: 'cargo fmt --all' },
    });
    const { id } = observed.candidate;
    assert.deepEqual([observed.candidate.state, observed.merged], ['shadow', false]);
    assert.deepEqual((await client.candidatesList({ state: 'promoted' })).candidates, []);
    // One observation is never promoted, even with its failure and fix.
    assert.deepEqual((await client.candidatesEvaluate()).changes, []);

    // Observed a second time (by another client: no session id), it is.
    const again = await client.candidatesObserve({
      text: lesson,
      kind: 'lesson',
      evidence: { failure: 'cargo clippy -- -D warnings failed', fix: 'cargo fmt --all' },
    });
    assert.deepEqual([again.merged, again.candidate.observations], [true, 2]);
    const evaluated = await client.candidatesEvaluate();
    assert.deepEqual(evaluated.changes.map((c) => [c.id, c.from, c.to]), [[id, 'shadow', 'promoted']]);
    const listed = await client.candidatesList({ state: 'promoted' });
    assert.deepEqual([listed.candidates.map((c) => c.id), listed.rejected], [[id], []]);

    // The next request's system prompt carries it.
    const messages = [{ role: 'user', content: 'Why does `ParserConfig` fail to build?' }];
    const res = await client.prepare({ session_id: 'learned', messages, system: 'Be careful.' });
    assert.deepEqual(res.prompt?.injectedCandidateIds, [id]);
    assert.ok(res.system.includes(lesson), res.system);
    assert.equal((await client.candidatesFeedback({ id, outcome: 'success' })).candidate.successes, 1);
    assert.deepEqual(await client.candidatesRemove({ id }), { removed: true });
    assert.deepEqual((await client.candidatesList()).candidates, []);
  } finally {
    await client.close();
  }
});

test('concurrent calls with Promise.all are matched to their replies', async () => {
  const client = spawnClient();
  await client.initialize();
  const sessions = Array.from({ length: 16 }, (_, i) => `par-${i}`);
  const results = await Promise.all(
    sessions.map((session_id, i) => client.prepare({ session_id, messages: openaiConversation(bigLog(100 + 200 * i)) })),
  );
  assert.deepEqual(results.map((r) => r.session_id), sessions);
  const inspects = await Promise.all(sessions.map((session_id) => client.inspect({ session_id })));
  assert.deepEqual(inspects.map((r) => r.session_id), sessions);
  await client.close();
});

const CLIENT_SUMMARY = { summarizer: 'client', max_input_length: 4096, summary_max_tokens: 800 };

test('setSummarizer answers summarizer.complete, and the compaction says "client"', async () => {
  const client = spawnClient();
  const asked = [];
  client.setSummarizer(async (messages, maxTokens) => {
    asked.push({ messages, maxTokens });
    return '## Goal\n- Explain every module\n\n## Progress\n### Done\n- [x] Read `src/module_0.rs`\n\n## Next Steps\n1. Continue\n';
  });
  const progress = [];
  const unsubscribe = client.onNotification('$/progress', (params) => progress.push(params));
  await client.initialize();
  const res = await client.prepare({ session_id: 'sum', messages: longChat(), config: CLIENT_SUMMARY });
  const compacted = res.actions.find((a) => a.kind === 'compacted');
  assert.ok(compacted, JSON.stringify(res.actions));
  assert.equal(compacted.summarizer, 'client');
  assert.ok(asked.length >= 1);
  assert.equal(typeof asked[0].maxTokens, 'number');
  assert.ok(asked[0].messages.every((m) => typeof m.role === 'string' && typeof m.content === 'string'));
  assert.ok(res.compact_summary.goal.some((g) => g.includes('Explain every module')));
  // LSP work-done progress under the token satchel created: begin, reports, end at 100.
  const kinds = progress.map((p) => p.value.kind);
  assert.equal(kinds[0], 'begin');
  assert.equal(kinds.at(-1), 'end');
  assert.equal(new Set(progress.map((p) => p.token)).size, 1);
  assert.ok(progress[0].token.startsWith('satchel-progress-'), progress[0].token);
  assert.equal(progress.filter((p) => p.value.kind === 'report').at(-1).value.percentage, 100);
  unsubscribe();
  await client.close();
});

test('a throwing request handler becomes an error response (the daemon falls back)', async () => {
  const client = spawnClient();
  client.setSummarizer(() => {
    throw new Error('model unavailable');
  });
  await client.initialize();
  const res = await client.prepare({ session_id: 'sum', messages: longChat(), config: CLIENT_SUMMARY });
  const compacted = res.actions.find((a) => a.kind === 'compacted');
  assert.match(compacted.summarizer, /^extractive \(fallback: .*model unavailable/);
  await client.close();
});

test('close() waits for the daemon to exit; later calls reject', async () => {
  const client = spawnClient();
  await client.initialize();
  const inFlight = client.prepare({ session_id: 'last', messages: openaiConversation('short output') });
  assert.equal(await client.close(), 0);
  assert.equal((await inFlight).session_id, 'last', 'in-flight requests are answered before exit');
  await assert.rejects(client.inspect({ session_id: 'last' }), ConnectionClosed);
});

test('a missing executable rejects calls instead of hanging', async () => {
  const client = SatchelClient.spawn({ satchel: '/nonexistent/satchel' });
  await assert.rejects(client.initialize(), /ENOENT/);
  assert.equal(await client.close(), null);
});
