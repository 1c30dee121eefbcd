// What the shim adds around the protocol: the daemon's log level, a clear error for a missing
// binary, per-call timeouts and AbortSignal (`$/cancelRequest`), and setSummarizer's wire traffic
// (the same as the Python client's set_summarizer).
import assert from 'node:assert/strict';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import {
  CANCEL_GRACE_MS,
  ConnectionClosed,
  OutcomeUnknown,
  RequestCancelled,
  SatchelClient,
  SpawnFailed,
} from '../dist/index.js';
import { SATCHEL_BIN, longChat, spawnClient, tempDir } from './helpers.mjs';

/** An executable shell script in a fresh directory. */
function script(body) {
  const path = join(tempDir('satchel-ts-bin-'), 'satchel');
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

/** A stand-in for satchel that records the SATCHEL_LOG it was given, then runs the real one. */
const recordingLogLevel = () => script(`printf '%s' "\${SATCHEL_LOG-<unset>}" > "$0.log"\nexec '${SATCHEL_BIN}' "$@"`);

/** A stand-in for satchel that records every line the client sends it (in `<path>.in`). */
const recordingInput = () => script(`tee "$0.in" | '${SATCHEL_BIN}' "$@"`);

/** The JSON-RPC messages the client sent to a `recordingInput` daemon. */
const sent = (bin) =>
  readFileSync(`${bin}.in`, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));

async function withEnv(name, value, body) {
  const before = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  try {
    return await body();
  } finally {
    if (before === undefined) delete process.env[name];
    else process.env[name] = before;
  }
}

// ---- the daemon's log level ----

test('satchel logs warnings only by default; the environment or the env option overrides it', async () => {
  const levelWith = async (env, options = {}) =>
    withEnv('SATCHEL_LOG', env, async () => {
      const bin = recordingLogLevel();
      const client = spawnClient({ satchel: bin, ...options });
      await client.initialize();
      assert.equal(await client.close(), 0);
      return readFileSync(`${bin}.log`, 'utf8');
    });
  assert.equal(await levelWith(undefined), 'warn');
  assert.equal(await levelWith('debug'), 'debug', "the caller's environment wins over the default");
  assert.equal(await levelWith('debug', { env: { SATCHEL_LOG: 'info' } }), 'info', 'the env option wins over both');
});

// ---- a missing binary ----

test('a missing binary rejects every call with SpawnFailed, naming the path and how to set it', async () => {
  const client = SatchelClient.spawn({ satchel: '/nonexistent/satchel', stderr: 'ignore' });
  const error = await client.initialize().then(
    () => assert.fail('initialize resolved'),
    (e) => e,
  );
  assert.ok(error instanceof SpawnFailed && error instanceof ConnectionClosed, String(error));
  assert.equal(error.code, 'ENOENT');
  assert.equal(error.path, '/nonexistent/satchel');
  assert.equal(error.source, 'option');
  assert.match(error.message, /^satchel executable not found: tried \/nonexistent\/satchel \(the `satchel` option\)/);
  assert.match(error.message, /SATCHEL_BIN/);
  assert.match(error.message, /spawn\(\{ satchel: /);
  await assert.rejects(client.sessions(), SpawnFailed, 'later calls too');
  assert.equal(await client.close(), null);
});

test('a missing SATCHEL_BIN, or no satchel on the PATH, says where it looked', async () => {
  const fromEnv = await withEnv('SATCHEL_BIN', '/nonexistent/from-env/satchel', () =>
    SatchelClient.spawn({ stderr: 'ignore' }).initialize().catch((e) => e),
  );
  assert.ok(fromEnv instanceof SpawnFailed);
  assert.equal(fromEnv.source, 'env');
  assert.match(fromEnv.message, /tried \/nonexistent\/from-env\/satchel \(from SATCHEL_BIN\)/);

  const fromPath = await withEnv('SATCHEL_BIN', undefined, () =>
    withEnv('PATH', tempDir(), () => SatchelClient.spawn({ stderr: 'ignore' }).initialize().catch((e) => e)),
  );
  assert.ok(fromPath instanceof SpawnFailed);
  assert.equal(fromPath.source, 'path');
  assert.match(fromPath.message, /tried `satchel` on the PATH/);
});

// ---- timeouts and AbortSignal ----

const CLIENT_SUMMARY = { summarizer: 'client', max_input_length: 4096, summary_max_tokens: 800 };

/**
 * A daemon whose client summariser stalls until released: a `context.prepare` that compacts stays
 * before its commit point for as long as the test wants.
 */
async function stalledSummarizer() {
  const client = spawnClient();
  let release;
  const released = new Promise((resolve) => (release = resolve));
  let asked;
  const summarizing = new Promise((resolve) => (asked = resolve));
  await client.setSummarizer(async () => {
    asked();
    await released;
    return '## Goal\n- Explain every module\n';
  });
  const history = longChat();
  const first = await client.prepare({ session_id: 'slow', messages: history.slice(0, 2), config: CLIENT_SUMMARY });
  assert.equal(first.reconciliation.session_messages, 2);
  return { client, history, release, summarizing };
}

test('timeoutMs: satchel cancels the call, which rejects with RequestCancelled and had no effect', async () => {
  const { client, history, release } = await stalledSummarizer();
  const started = Date.now();
  const error = await client
    .prepare({ session_id: 'slow', messages: history, config: CLIENT_SUMMARY }, { timeoutMs: 300 })
    .catch((e) => e);
  assert.ok(error instanceof RequestCancelled, String(error));
  assert.equal(error.code, -32800);
  assert.match(error.message, /^context\.prepare: no reply within 300 ms; cancelled, and the call had no effect$/);
  assert.ok(Date.now() - started < CANCEL_GRACE_MS, 'satchel answered the cancel at once');
  release();
  // The session is as before the cancelled call; a resend does the whole work.
  assert.equal((await client.inspect({ session_id: 'slow' })).messages, 2);
  const again = await client.prepare({ session_id: 'slow', messages: history, config: CLIENT_SUMMARY }, { timeoutMs: 60_000 });
  assert.equal(again.reconciliation.reused, 2);
  assert.equal(again.reconciliation.session_messages, history.length);
  assert.equal(await client.close(), 0);
});

test('AbortSignal: aborting sends $/cancelRequest; RequestCancelled carries the reason as its cause', async () => {
  const { client, history, release, summarizing } = await stalledSummarizer();
  const controller = new AbortController();
  const call = client.prepare({ session_id: 'slow', messages: history, config: CLIENT_SUMMARY }, { signal: controller.signal });
  await summarizing; // the call is in progress on the daemon
  const reason = new Error('the user pressed Esc');
  controller.abort(reason);
  const error = await call.catch((e) => e);
  assert.ok(error instanceof RequestCancelled, String(error));
  assert.match(error.message, /^context\.prepare: aborted; cancelled, and the call had no effect$/);
  assert.equal(error.cause, reason);
  release();
  assert.equal((await client.inspect({ session_id: 'slow' })).messages, 2);
  assert.equal((await client.initialize({}, { signal: controller.signal }).catch((e) => e)).constructor, RequestCancelled);
  assert.equal((await client.initialize({}, { signal: new AbortController().signal })).server_name, 'satchel');
  assert.equal(await client.close(), 0);
});

test('an already aborted signal rejects at once and sends nothing', async () => {
  const bin = recordingInput();
  const client = spawnClient({ satchel: bin });
  const reason = new Error('never mind');
  const error = await client.sessions({}, { signal: AbortSignal.abort(reason) }).catch((e) => e);
  assert.ok(error instanceof RequestCancelled);
  assert.match(error.message, /aborted before it was sent; the call had no effect/);
  assert.equal(error.cause, reason);
  await client.initialize();
  assert.equal(await client.close(), 0);
  assert.deepEqual(sent(bin).map((m) => m.method), ['initialize']);
});

test('a call answered in time resolves; its timer and abort listener are released', async () => {
  const bin = recordingInput();
  const client = spawnClient({ satchel: bin });
  const controller = new AbortController();
  // A timer left running would keep this test file alive for an hour.
  const init = await client.initialize({}, { timeoutMs: 3_600_000, signal: controller.signal });
  assert.equal(init.server_name, 'satchel');
  controller.abort(); // too late to matter: nothing is sent
  assert.equal(await client.close(), 0);
  assert.deepEqual(sent(bin).map((m) => m.method), ['initialize']);
});

test('no answer to the cancel: OutcomeUnknown (the connection closed, or the grace period passed)', async () => {
  // A "daemon" that reads the request and the $/cancelRequest, then exits without answering.
  const closing = SatchelClient.spawn({ satchel: script('head -n 2 > "$0.in"') });
  const closed = await closing.call('context.sessions', {}, { timeoutMs: 100 }).catch((e) => e);
  assert.ok(closed instanceof OutcomeUnknown, String(closed));
  assert.ok(closed.cause instanceof ConnectionClosed);
  assert.match(closed.message, /^context\.sessions: no reply within 100 ms, and the connection closed before satchel answered its \$\/cancelRequest/);
  assert.match(closed.message, /the outcome is unknown \(retry context\.prepare with the full `messages` list/);
  await closing.close();

  // One that reads everything and never answers.
  const bin = script('cat > "$0.in"');
  const silent = SatchelClient.spawn({ satchel: bin });
  const started = Date.now();
  const timedOut = await silent.call('context.sessions', {}, { timeoutMs: 100 }).catch((e) => e);
  assert.ok(timedOut instanceof OutcomeUnknown, String(timedOut));
  assert.ok(Date.now() - started >= 100 + CANCEL_GRACE_MS - 50);
  assert.match(timedOut.message, new RegExp(`did not answer its \\$/cancelRequest within ${CANCEL_GRACE_MS} ms`));
  await silent.close();
  const messages = sent(bin);
  assert.deepEqual(messages[1], { jsonrpc: '2.0', method: '$/cancelRequest', params: { id: messages[0].id } });
});

// ---- setSummarizer: what it sends, and when (as the Python client's set_summarizer) ----

test('setSummarizer sends initialize declaring summarizer_complete at once, and later initialize calls too', async () => {
  const bin = recordingInput();
  const client = spawnClient({ satchel: bin });
  const init = await client.setSummarizer(() => 'summary');
  assert.equal(init.server_name, 'satchel', 'resolves with the initialize result');
  await client.initialize({ client_info: { name: 'my agent' } });
  await client.initialize({ capabilities: { summarizer_complete: false } }); // an explicit value wins
  assert.equal(await client.close(), 0);
  assert.deepEqual(
    sent(bin).map(({ method, params }) => ({ method, params })),
    [
      {
        method: 'initialize',
        params: { client_info: { name: 'satchel-client (typescript)', version: '0.1.0' }, capabilities: { summarizer_complete: true, window: { workDoneProgress: true } } },
      },
      { method: 'initialize', params: { client_info: { name: 'my agent' }, capabilities: { summarizer_complete: true, window: { workDoneProgress: true } } } },
      {
        method: 'initialize',
        params: { client_info: { name: 'satchel-client (typescript)', version: '0.1.0' }, capabilities: { summarizer_complete: false, window: { workDoneProgress: true } } },
      },
    ],
  );
});

test('a summariser set after a plain initialize is used (setSummarizer re-declares the capability)', async () => {
  const client = spawnClient();
  await client.initialize(); // declares nothing
  let asked = 0;
  await client.setSummarizer((messages, maxTokens) => {
    asked++;
    assert.equal(typeof maxTokens, 'number');
    return '## Goal\n- Explain every module\n';
  });
  const res = await client.prepare({ session_id: 'late', messages: longChat(), config: CLIENT_SUMMARY });
  assert.equal(res.actions.find((a) => a.kind === 'compacted')?.summarizer, 'client');
  assert.ok(asked >= 1);
  await client.close();
});

test('a summariser that returns no string is an error reply: satchel falls back to extractive', async () => {
  const client = spawnClient();
  await client.setSummarizer(() => 42);
  const res = await client.prepare({ session_id: 'bad', messages: longChat(), config: CLIENT_SUMMARY });
  assert.match(res.actions.find((a) => a.kind === 'compacted').summarizer, /^extractive \(fallback: .*TypeError: the summarizer returned number, not a string/);
  await client.close();
});
