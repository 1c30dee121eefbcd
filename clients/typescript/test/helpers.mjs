// Shared by the tests: the real satchel binary, fresh workspaces, and conversations.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import jsonrpc from 'vscode-jsonrpc/node';

import { SatchelClient } from '../dist/index.js';

export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const REPO_DIR = resolve(PACKAGE_DIR, '../..');
export const SATCHEL_BIN = process.env.SATCHEL_BIN ?? join(REPO_DIR, 'target/debug/satchel');
if (!existsSync(SATCHEL_BIN)) {
  throw new Error(`no satchel binary at ${SATCHEL_BIN}: run \`cargo build -p satchel\` or set SATCHEL_BIN`);
}

const made = [];
process.on('exit', () => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));
/** A fresh temporary directory, removed when the test file's process exits. */
export const tempDir = (prefix = 'satchel-ts-') => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
};

/**
 * `satchel --workspace <tmp> serve` on stdio for a third-party JSON-RPC client, with `env` added:
 * the child, its workspace, the last 20 KB of its stderr, and a promise of its exit status.
 */
export function spawnServe(prefix, env = {}) {
  const workspace = tempDir(prefix);
  const child = spawn(SATCHEL_BIN, ['--workspace', workspace, 'serve'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-20_000);
  });
  const exited = new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  return { child, workspace, stderr: () => stderr, exited };
}

/**
 * `satchel --workspace <tmp> serve` on stdio with a vscode-jsonrpc connection on it (not
 * listening yet), and `close()`: ends the connection and stdin (the daemon's only stop
 * signal), resolving with the exit status.
 */
export function serveVscode(prefix, env = {}) {
  const { child, workspace, stderr, exited } = spawnServe(prefix, env);
  const { StreamMessageReader, StreamMessageWriter, createMessageConnection } = jsonrpc;
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  return {
    connection,
    workspace,
    stderr,
    async close() {
      connection.end();
      child.stdin.end();
      const status = await exited;
      connection.dispose();
      return status;
    },
  };
}

/** A daemon on a fresh workspace, its log discarded. */
export const spawnClient = (options = {}) =>
  SatchelClient.spawn({ satchel: SATCHEL_BIN, workspace: tempDir(), stderr: 'ignore', ...options });

/** A test log of `lines` lines (about 46 bytes each), big enough to be offloaded. */
export const bigLog = (lines = 3000) =>
  Array.from({ length: lines }, (_, i) => `test case_${i} ... ok (${(i * 7) % 1000} ms)`).join('\n') +
  '\nerror: test failed, to rerun pass `--lib`\n';

export function openaiConversation(output) {
  return [
    { role: 'user', content: 'Run the tests and tell me what fails.' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'shell', arguments: '{"cmd":"cargo test"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: output },
  ];
}

export function anthropicConversation(output) {
  return [
    { role: 'user', content: [{ type: 'text', text: 'Run the tests and tell me what fails.' }] },
    {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'toolu_1', name: 'shell', input: { cmd: 'cargo test' } }],
    },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: output }] },
  ];
}

/** 28 chatty messages, about 9,000 tokens: over the threshold of a 4,096-token window. */
export function longChat() {
  const messages = [];
  for (let i = 0; i < 14; i++) {
    messages.push({ role: 'user', content: `Step ${i}: look at src/module_${i}.rs and explain it. ${`word${i} `.repeat(150)}` });
    messages.push({ role: 'assistant', content: `Module ${i} parses the input. ${`detail${i} `.repeat(150)}` });
  }
  return messages;
}

/** Three system-prompt sections, as an AceClaw-style client sends them with every prepare. */
export const PROMPT_SECTIONS = [
  {
    key: 'memory:soul',
    content: 'You are a careful engineer. Never push to main without review.',
    priority: 100,
    protected: true,
    source_type: 'memory',
    reason: 'identity',
  },
  {
    key: 'rules:rust',
    content: 'Rust rules: run cargo fmt and clippy, no unwrap in library code, tests under tests/.',
    priority: 88,
    source_type: 'rules',
    paths: ['src/**/*.rs', 'tests/**/*.rs'],
  },
  {
    key: 'git:status',
    content: 'On branch main. Modified: src/parser.rs (ParseError handling).',
    priority: 40,
    source_type: 'git',
    scope: 'task-local',
  },
];

/** Memory tests rank by BM25 alone, whatever embedding key the environment holds. */
export const MEMORY_ENV = { SATCHEL_EMBEDDING_BACKEND: 'none' };

/** A memory file; line 6 holds the fact the tests search for. */
export const MEMORY_NOTE = `# Project notes

## Decisions

- We deploy with the blue-green script on Fridays.
- The staging database is called zanzibar.
`;

/** Daily logs for `memory.merge`: two inside the merged days (one entry repeated), one after `through`. */
export const DAILY_LOGS = {
  'memory/2026-01-05.md': '## Decisions\n\n- Use SQLite for the session index.\n',
  'memory/2026-01-06.md':
    '## Preferences\n\n- The user prefers answers in French.\n- Use SQLite for the session index.\n\n## Goal\n\n- ship the release\n',
  'memory/2026-01-07.md': '## Notes\n\n- Written after the merged days.\n',
};
