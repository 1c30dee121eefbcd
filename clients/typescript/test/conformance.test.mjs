// Conformance with LSP conventions, checked against the real daemon by a third-party client:
// vscode-jsonrpc (the library of VS Code's language clients, Content-Length framing) talks to
// `satchel --workspace <tmp> serve` on stdio. It covers initialize, context.prepare (a fixture,
// and one real trajectory from ../shared/data when it exists), work-done progress under a token
// the daemon creates (`window/workDoneProgress/create`) or the client gives (`workDoneToken`),
// cancellation both ways (the client's `$/cancelRequest` from a CancellationTokenSource,
// `window/workDoneProgress/cancel`, and the daemon's `$/cancelRequest` for a `summarizer.complete`
// it stopped waiting for), and the extractive fallback when the client's model never answers.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import jsonrpc from 'vscode-jsonrpc/node';

import { REPO_DIR, bigLog, serveVscode } from './helpers.mjs';

const {
  CancellationTokenSource,
  ProgressType,
  ResponseError,
} = jsonrpc;

const REQUEST_CANCELLED = -32800;
const CAPABILITIES = { summarizer_complete: true, window: { workDoneProgress: true } };
const SESSION = 'conformance';
/** Per-call config that makes `context.compact` summarise with the client's model, in stages. */
const STAGED = {
  summarizer: 'client',
  max_input_length: 8192,
  tokenizer: 'estimate',
  llm_input_budget_tokens: 1000,
  llm_max_output_tokens: 100,
};
const SUMMARY = '## Goal\n- Make the parser crate build again\n\n## Progress\n### Done\n- [x] Read the build log\n\n## Next Steps\n1. Run the tests again\n';
/** The real trajectories, outside the repository; never copied into it. */
const SHARED_TRAJECTORY = join(REPO_DIR, '../shared/data/trajectories/sweagent__swe-agent__test-repo-i1.json');

/** `satchel --workspace <tmp> serve` on stdio, with a vscode-jsonrpc connection on it (not listening yet). */
function startDaemon(env = {}) {
  const daemon = serveVscode('satchel-conformance-', env);
  // Progress under a token nobody registered a handler for: a conformance failure.
  const unhandledProgress = [];
  daemon.connection.onUnhandledProgress((params) => unhandledProgress.push(params));
  return { ...daemon, unhandledProgress };
}

/** Runs `body` against a fresh daemon; prints the daemon's log when it fails; checks a clean exit. */
async function withDaemon(env, body) {
  const daemon = startDaemon(env);
  try {
    await body(daemon);
  } catch (error) {
    console.error(`satchel stderr (tail):\n${daemon.stderr()}`);
    throw error;
  } finally {
    assert.deepEqual(await daemon.close(), { code: 0, signal: null });
  }
}

async function initialize(connection, capabilities = CAPABILITIES) {
  const init = await connection.sendRequest('initialize', {
    client_info: { name: 'vscode-jsonrpc conformance' },
    capabilities,
  });
  assert.equal(init.server_name, 'satchel');
  assert.match(init.protocol_version, /^0\.\d+\.\d+$/);
  for (const method of ['context.prepare', 'context.compact', 'context.inspect', 'context.read']) {
    assert.ok(init.methods.includes(method), `initialize lists ${method}: ${init.methods}`);
  }
  return init;
}

/** 61 messages, about 6,000 estimated tokens: under any threshold, long enough for a staged summary. */
function longHistory() {
  const detail = 'the lexer reports an unexpected token in module parser::expr; '.repeat(5);
  const messages = [{ role: 'system', content: 'You are a careful coding agent.' }];
  for (let turn = 0; turn < 30; turn++) {
    messages.push({ role: 'user', content: `Step ${turn}: fix the next build error. ${detail}` });
    messages.push({ role: 'assistant', content: `Step ${turn} is fixed: ${detail}` });
  }
  return messages;
}

/** Creates the session from `longHistory()`, without compacting. */
async function createLongSession(connection, session_id = SESSION) {
  const history = longHistory();
  const prepared = await connection.sendRequest('context.prepare', { session_id, messages: history });
  assert.ok(!prepared.actions.some((a) => a.kind === 'compacted'), 'the setup compacted already');
  return history;
}

/** The session's compactions, as `context.inspect` reports them. */
async function compactions(connection, session_id = SESSION) {
  const inspect = await connection.sendRequest('context.inspect', { session_id });
  return inspect.compactions ?? [];
}

/**
 * Asserts LSP work-done progress: one `begin` (cancellable, titled), `report`s whose percentages
 * never go back and reach 100, and one `end`, in that order.
 */
function assertProgressSequence(values, why) {
  const kinds = values.map((v) => v.kind);
  assert.ok(kinds.length >= 3, `${why}: ${JSON.stringify(kinds)}`);
  assert.equal(kinds[0], 'begin', why);
  assert.equal(kinds.at(-1), 'end', why);
  assert.equal(kinds.filter((k) => k === 'begin').length, 1, why);
  assert.equal(kinds.filter((k) => k === 'end').length, 1, why);
  assert.ok(kinds.slice(1, -1).every((k) => k === 'report'), `${why}: ${JSON.stringify(kinds)}`);
  assert.equal(values[0].title, `Compacting ${SESSION}`);
  assert.equal(values[0].cancellable, true);
  const percentages = values.slice(1, -1).map((v) => v.percentage);
  assert.ok(percentages.every((p) => Number.isInteger(p) && p >= 0 && p <= 100), `${why}: ${percentages}`);
  for (let i = 1; i < percentages.length; i++) {
    assert.ok(percentages[i - 1] <= percentages[i], `${why}: percentages go back: ${percentages}`);
  }
  assert.equal(percentages.at(-1), 100, `${why}: ${percentages}`);
}

test('conformance: initialize and context.prepare of a fixture, offloaded output read back byte for byte', async () => {
  await withDaemon({}, async ({ connection }) => {
    connection.listen();
    await initialize(connection);
    const output = bigLog(3000);
    const messages = [
      { role: 'system', content: 'You are a coding agent. Use the bash tool.' },
      { role: 'user', content: 'Run the tests and tell me what fails.' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"command":"cargo test"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: output },
    ];
    const prepared = await connection.sendRequest('context.prepare', { session_id: 'fixture', messages });
    assert.equal(prepared.session_id, 'fixture');
    assert.equal(prepared.format, 'openai');
    assert.deepEqual(prepared.reconciliation, { session_messages: 4, reused: 0, appended: 4, replaced: 0 });
    assert.equal(prepared.messages.length, 4);
    assert.deepEqual(prepared.messages.slice(0, 3), messages.slice(0, 3), 'fields satchel does not manage come back untouched');
    const offloaded = prepared.actions.find((a) => a.kind === 'offloaded');
    assert.ok(offloaded, JSON.stringify(prepared.actions));
    assert.equal(offloaded.index, 3);
    assert.ok(prepared.messages[3].content.length < output.length, 'the output was cut');
    assert.ok(prepared.tokens.total <= prepared.tokens.limit);

    // The full output is one context.read away.
    let content = '';
    let byte_offset = 0;
    for (;;) {
      const read = await connection.sendRequest('context.read', { path: offloaded.file, byte_offset });
      content += read.content;
      if (read.eof) break;
      byte_offset = read.next_byte_offset;
    }
    assert.equal(content, output);

    // Sending the same list again changes nothing.
    const again = await connection.sendRequest('context.prepare', { session_id: 'fixture', messages });
    assert.deepEqual(again.reconciliation, { session_messages: 4, reused: 4, appended: 0, replaced: 0 });
  });
});

test('conformance: a real trajectory replayed one message at a time (../shared/data)', async (t) => {
  if (!existsSync(SHARED_TRAJECTORY)) {
    t.skip(`no shared data at ${SHARED_TRAJECTORY}: the real-trajectory replay is skipped`);
    return;
  }
  const trajectory = JSON.parse(readFileSync(SHARED_TRAJECTORY, 'utf8'));
  t.diagnostic(`replaying ${trajectory.id}: ${trajectory.messages.length} messages`);
  await withDaemon({}, async ({ connection }) => {
    connection.listen();
    await initialize(connection);
    const session_id = 'trajectory';
    const config = { max_input_length: 4096, tokenizer: 'estimate' };
    const sent = [];
    const kinds = new Set();
    let last;
    for (const message of trajectory.messages) {
      const params =
        sent.length === 0
          ? { session_id, messages: [message], config }
          : { session_id, append: [message], expect_messages: sent.length, config };
      last = await connection.sendRequest('context.prepare', params);
      sent.push(message);
      assert.equal(last.reconciliation.session_messages, sent.length);
      assert.equal(last.format, 'openai');
      last.actions.forEach((a) => kinds.add(a.kind));
      if (!last.over_limit) {
        assert.ok(last.tokens.total <= last.tokens.limit, `message ${sent.length}: ${JSON.stringify(last.tokens)}`);
      }
      // Every tool result in the request answers a call of the request.
      const calls = new Set(last.messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id)));
      for (const m of last.messages.filter((m) => m.role === 'tool')) {
        assert.ok(calls.has(m.tool_call_id), `message ${sent.length}: an orphan tool result ${m.tool_call_id}`);
      }
    }
    assert.ok(kinds.has('compacted'), `a 4,096-token window compacts this run: ${[...kinds]}`);
    assert.ok(last.compact_summary, 'the summary is reported');
    const done = await compactions(connection, session_id);
    assert.ok(done.length >= 1);
    // The full history is still the session's: resending it reuses every message.
    const resent = await connection.sendRequest('context.prepare', { session_id, messages: trajectory.messages, config });
    assert.equal(resent.reconciliation.reused, trajectory.messages.length);
    assert.equal(resent.reconciliation.appended, 0);
  });
});

test('conformance: progress begin, reports, end under a token created with window/workDoneProgress/create', async () => {
  await withDaemon({}, async ({ connection, unhandledProgress }) => {
    const events = [];
    const created = [];
    const progress = new Map();
    connection.onRequest('window/workDoneProgress/create', ({ token }) => {
      assert.ok(typeof token === 'string' || Number.isInteger(token), `a progress token: ${token}`);
      assert.ok(!progress.has(token), 'a fresh token');
      created.push(token);
      events.push(['create', token]);
      const values = [];
      progress.set(token, values);
      connection.onProgress(new ProgressType(), token, (value) => {
        values.push(value);
        events.push([value.kind, token]);
      });
      return null;
    });
    connection.onRequest('summarizer.complete', (params) => {
      assert.ok(Array.isArray(params.messages) && params.messages.length > 0);
      assert.ok(params.max_tokens > 0);
      events.push(['summarizer.complete']);
      return { text: SUMMARY };
    });
    connection.listen();
    await initialize(connection);
    await createLongSession(connection);

    const result = await connection.sendRequest('context.compact', { session_id: SESSION, config: STAGED });
    assert.equal(result.compaction.summarizer, 'client');
    assert.ok(result.compacted > 0);
    assert.equal(created.length, 1, 'one token per compaction');
    const values = progress.get(created[0]);
    assertProgressSequence(values, 'created token');
    const stages = events.filter(([e]) => e === 'summarizer.complete').length;
    assert.ok(stages >= 2, `a staged summary: ${stages} stage(s)`);
    assert.ok(values.length >= 2 + stages, 'a report per stage');
    // create, then begin, then every model call, then end.
    const at = (kind) => events.findIndex(([e]) => e === kind);
    assert.ok(at('create') < at('begin'), JSON.stringify(events));
    assert.ok(at('begin') < at('summarizer.complete'), JSON.stringify(events));
    assert.ok(events.findLastIndex(([e]) => e === 'summarizer.complete') < at('end'), JSON.stringify(events));
    assert.deepEqual(unhandledProgress, []);
    assert.equal((await compactions(connection)).length, 1);
  });
});

test('conformance: progress under the workDoneToken of context.compact, nothing created', async () => {
  await withDaemon({}, async ({ connection, unhandledProgress }) => {
    const created = [];
    connection.onRequest('window/workDoneProgress/create', ({ token }) => {
      created.push(token);
      return null;
    });
    connection.onRequest('summarizer.complete', () => ({ text: SUMMARY }));
    const token = 'conformance-token-1';
    const values = [];
    connection.onProgress(new ProgressType(), token, (value) => values.push(value));
    connection.listen();
    // Without window.workDoneProgress: the token in the params is enough.
    await initialize(connection, { summarizer_complete: true });
    await createLongSession(connection);
    const result = await connection.sendRequest('context.compact', {
      session_id: SESSION,
      config: STAGED,
      workDoneToken: token,
    });
    assert.equal(result.compaction.summarizer, 'client');
    assert.deepEqual(created, [], 'no token is created when the client gave one');
    assertProgressSequence(values, 'workDoneToken');
    assert.deepEqual(unhandledProgress, []);
  });
});

test('conformance: a context.prepare cancelled with a CancellationTokenSource has no effect', async () => {
  await withDaemon({ SATCHEL_LLM_TIMEOUT_SECS: '60' }, async ({ connection }) => {
    let source;
    const summariserCancelled = [];
    // The prepare compacts with the client's model; the cancel comes while that model call
    // is pending, before the commit point, so it must win.
    connection.onRequest('summarizer.complete', (_params, token) => {
      source.cancel();
      return new Promise((resolve) => {
        token.onCancellationRequested(() => {
          summariserCancelled.push(true);
          resolve(new ResponseError(REQUEST_CANCELLED, 'cancelled'));
        });
      });
    });
    connection.listen();
    await initialize(connection);
    const history = await createLongSession(connection);
    const append = [
      { role: 'user', content: 'One more step. ' + 'context '.repeat(4000) },
      { role: 'assistant', content: 'Done.' },
    ];
    const config = { ...STAGED, max_input_length: 8192, llm_input_budget_tokens: 32000 };
    source = new CancellationTokenSource();
    const pending = connection.sendRequest(
      'context.prepare',
      { session_id: SESSION, append, expect_messages: history.length, config },
      source.token,
    );
    await assert.rejects(pending, (error) => error instanceof ResponseError && error.code === REQUEST_CANCELLED);
    // satchel stops waiting for the model call of a cancelled call and tells the client.
    for (let i = 0; i < 100 && summariserCancelled.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(summariserCancelled.length, 1, 'the summariser request was cancelled by satchel');
    // No effect: the session holds the history as it was, nothing compacted.
    assert.equal((await compactions(connection)).length, 0);
    const resent = await connection.sendRequest('context.prepare', { session_id: SESSION, messages: history });
    assert.deepEqual(resent.reconciliation, {
      session_messages: history.length,
      reused: history.length,
      appended: 0,
      replaced: 0,
    });

    // A cancel sent in the same tick as a plain prepare: either outcome, each honest.
    for (let trial = 0; trial < 10; trial++) {
      const message = [{ role: 'user', content: `Trial ${trial}.` }];
      const racing = new CancellationTokenSource();
      const request = connection.sendRequest(
        'context.prepare',
        { session_id: SESSION, append: message, expect_messages: history.length },
        racing.token,
      );
      racing.cancel();
      try {
        const result = await request;
        history.push(...message);
        assert.equal(result.reconciliation.session_messages, history.length);
      } catch (error) {
        assert.ok(error instanceof ResponseError && error.code === REQUEST_CANCELLED, `${error}`);
      }
      const check = await connection.sendRequest('context.prepare', { session_id: SESSION, messages: history });
      assert.equal(check.reconciliation.session_messages, history.length, `trial ${trial}`);
      assert.equal(check.reconciliation.appended, 0, `trial ${trial}`);
    }
  });
});

test('conformance: window/workDoneProgress/cancel cancels the call reporting under the token', async () => {
  await withDaemon({ SATCHEL_LLM_TIMEOUT_SECS: '60' }, async ({ connection }) => {
    const summariserCancelled = [];
    connection.onRequest('window/workDoneProgress/create', ({ token }) => {
      connection.onProgress(new ProgressType(), token, (value) => {
        if (value.kind === 'begin') {
          assert.equal(value.cancellable, true);
          connection.sendNotification('window/workDoneProgress/cancel', { token });
        }
      });
      return null;
    });
    connection.onRequest('summarizer.complete', (_params, token) => {
      return new Promise((resolve) => {
        token.onCancellationRequested(() => {
          summariserCancelled.push(true);
          resolve(new ResponseError(REQUEST_CANCELLED, 'cancelled'));
        });
      });
    });
    connection.listen();
    await initialize(connection);
    await createLongSession(connection);
    let timer;
    const tooLate = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('no reply within 15 s: the token cancelled nothing')), 15_000);
    });
    try {
      await assert.rejects(
        Promise.race([connection.sendRequest('context.compact', { session_id: SESSION, config: STAGED }), tooLate]),
        (error) => error instanceof ResponseError && error.code === REQUEST_CANCELLED,
      );
    } finally {
      clearTimeout(timer);
    }
    assert.equal((await compactions(connection)).length, 0, 'no effect');
  });
});

test('conformance: a summariser that never answers is cancelled by satchel and the compaction falls back', async () => {
  await withDaemon({ SATCHEL_LLM_TIMEOUT_SECS: '1' }, async ({ connection }) => {
    let asked = 0;
    const cancelled = [];
    connection.onRequest('summarizer.complete', (_params, token) => {
      const n = ++asked;
      // Never answered; vscode-jsonrpc cancels the token on satchel's `$/cancelRequest`.
      return new Promise((resolve) => {
        token.onCancellationRequested(() => {
          cancelled.push(n);
          resolve(new ResponseError(REQUEST_CANCELLED, 'cancelled'));
        });
      });
    });
    connection.listen();
    await initialize(connection, { summarizer_complete: true });
    await createLongSession(connection);
    const started = Date.now();
    const result = await connection.sendRequest('context.compact', { session_id: SESSION, config: STAGED });
    const backend = result.compaction.summarizer;
    assert.ok(backend.startsWith('extractive (fallback: '), backend);
    assert.match(backend, /did not answer in time/);
    assert.ok(result.compacted > 0);
    assert.ok(Date.now() - started < 20_000);
    assert.equal(asked, 2, 'one attempt and one retry');
    // The cancel of the last request may arrive just after the reply.
    for (let i = 0; i < 100 && cancelled.length < asked; i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(cancelled, [1, 2], 'each abandoned request is cancelled');
    assert.equal((await compactions(connection)).length, 1);
  });
});
