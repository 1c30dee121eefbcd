// The README's examples, run as written against the package installed the way a user installs it:
// the full example as is, and every other `js`/`ts` block after a prelude that spawns a daemon and
// defines the names the snippets take from their surroundings.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { PACKAGE_DIR, SATCHEL_BIN, tempDir } from './helpers.mjs';

const readme = readFileSync(join(PACKAGE_DIR, 'README.md'), 'utf8');
/** Every ```js and ```ts block, in order. */
const blocks = [...readme.matchAll(/```(js|ts)\n([^]*?)```/g)].map((m) => m[2]);

// npm's own variables (set when this runs under `npm test`) would point the install elsewhere.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_')));
let project;

before(() => {
  // A fresh project with the package installed from its folder (npm links it; dist/ is built).
  project = tempDir('satchel-ts-project-');
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'example', private: true }));
  execFileSync('npm', ['install', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', PACKAGE_DIR], {
    cwd: project,
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
});

/** Runs `source` as an ES module in the project; returns its stdout. */
function run(name, source, extraEnv = {}) {
  writeFileSync(join(project, name), source);
  try {
    return execFileSync(process.execPath, [name], {
      cwd: project,
      env: { ...env, SATCHEL_BIN, ...extraEnv },
      encoding: 'utf8',
      timeout: 60_000,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (e) {
    assert.fail(`${name} failed:\n${source}\n--- stdout\n${e.stdout}\n--- stderr\n${e.stderr}`);
  }
}

test('the README example runs as written', () => {
  const example = blocks.find((block) => block.startsWith('// example.mjs'));
  assert.ok(example, 'README.md has a ```js block starting with `// example.mjs`');
  const output = run('example.mjs', example);
  assert.match(output, /^\d+ of 131072 tokens\n<<<TRUNCATED>>>\n/);
  assert.match(output, /contains 3001 lines in total/);
  assert.match(output, /tool_result\/[0-9a-f]+\.txt/);
  assert.match(output, /\(exit status, errors\) stays visible\.\n$/, 'the whole notice, up to the tail');
});

/**
 * What the snippets take from their surroundings: a client on a fresh workspace with a small window
 * (so a full history compacts), a session `chat-42` holding the first two messages of `fullHistory`
 * (`result` is that prepare's), the next two as `newMessages`, prompt `sections`, and stand-ins for
 * the caller's model (`model`) and OpenAI client (`openai`).
 */
const PRELUDE = `import { SatchelClient as SatchelClient_ } from 'satchel-client';
import { mkdtempSync as mkdtempSync_ } from 'node:fs';
import { tmpdir as tmpdir_ } from 'node:os';
import { join as join_ } from 'node:path';
const satchel = SatchelClient_.spawn({ workspace: mkdtempSync_(join_(tmpdir_(), 'satchel-readme-')) });
const fullHistory = Array.from({ length: 28 }, (_, i) =>
  i % 2 === 0
    ? { role: 'user', content: 'Step ' + i + ': explain src/module_' + i + '.rs. ' + 'word '.repeat(150) }
    : { role: 'assistant', content: 'Module ' + i + ' parses the input. ' + 'detail '.repeat(150) });
const newMessages = fullHistory.slice(2, 4);
let result = await satchel.prepare({ session_id: 'chat-42', messages: fullHistory.slice(0, 2) });
const sections = [
  { key: 'memory:soul', content: 'You are a careful engineer.', priority: 100, protected: true, source_type: 'memory' },
  { key: 'git:status', content: 'On branch main.', priority: 40, source_type: 'git' },
];
const model = async ({ system, messages }) => ({ content: 'Done.', usage: { input_tokens: 1200 } });
const openai = { calls: 0, chat: { completions: { create: async ({ messages, max_tokens }) => {
  openai.calls++;
  return { choices: [{ message: { content: '## Goal\\n- Explain every module\\n' } }] };
} } } };
`;
const POSTLUDE = `
console.log('#done ' + JSON.stringify({ exit: await satchel.close(), openaiCalls: openai.calls }));
`;
/** Makes compaction happen on `fullHistory`; memory search ranks by BM25 alone. */
const SNIPPET_ENV = { SATCHEL_MAX_INPUT_LENGTH: '4096', SATCHEL_SUMMARY_MAX_TOKENS: '800', SATCHEL_EMBEDDING_BACKEND: 'none' };

test('every other js/ts block of the README runs as written', async (t) => {
  const snippets = blocks.filter((block) => !block.startsWith('// example.mjs'));
  assert.ok(snippets.length >= 6, `only ${snippets.length} snippets found`);
  for (const [i, snippet] of snippets.entries()) {
    await t.test(`snippet ${i + 1}: ${snippet.split('\n')[0]}`, () => {
      const output = run(`snippet-${i + 1}.mjs`, PRELUDE + snippet + POSTLUDE, SNIPPET_ENV);
      const done = output.match(/^#done (.*)$/m);
      assert.ok(done, output);
      const { exit, openaiCalls } = JSON.parse(done[1]);
      assert.equal(exit, 0);
      if (snippet.includes('openai.')) {
        assert.ok(openaiCalls >= 1, 'the summariser was asked');
        assert.match(output, /\[ 'client' \]/);
      }
      if (snippet.includes('memorySearch')) assert.match(output, /^memory\/2026-11-24\.md:1 /m);
    });
  }
});
