// The real daemon driven by a third-party JSON-RPC client: vscode-jsonrpc, the library VS Code's
// language clients use (Content-Length framing, `$/cancelRequest` from a CancellationToken).
// It checks that cancellation is honest: -32800 means the call had no effect, a result means it
// did, and the session always holds exactly what the client was told.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import jsonrpc from 'vscode-jsonrpc/node';

import { serveVscode } from './helpers.mjs';

const { CancellationTokenSource, ResponseError } = jsonrpc;

const REQUEST_CANCELLED = -32800;
const STALE_SESSION = -32009;
const CONFIG = { tokenizer: 'estimate' };

/** `satchel --workspace <tmp> serve` on stdio, with a vscode-jsonrpc connection listening on it. */
function startDaemon() {
  const daemon = serveVscode('satchel-vscode-');
  daemon.connection.listen();
  return daemon;
}

/** Mulberry32: a small seeded generator, so a failing run can be replayed with SATCHEL_TEST_SEED. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const turn = (i) => [
  { role: 'user', content: `Question ${i}: what does step ${i} of the build do?` },
  { role: 'assistant', content: `Step ${i} compiles module_${i} and links it. ${'detail '.repeat(i % 7)}` },
];

/** Resends the full history: the session must hold exactly it, no more and no less. */
async function assertSessionHolds(connection, session_id, history, why) {
  const full = await connection.sendRequest('context.prepare', { session_id, messages: history, config: CONFIG });
  assert.deepEqual(
    {
      session_messages: full.reconciliation.session_messages,
      reused: full.reconciliation.reused,
      appended: full.reconciliation.appended,
      replaced: full.reconciliation.replaced,
    },
    { session_messages: history.length, reused: history.length, appended: 0, replaced: 0 },
    why,
  );
}

test('vscode-jsonrpc: a cancelled context.prepare had no effect, an answered one took effect', async (t) => {
  const seed = Number(process.env.SATCHEL_TEST_SEED ?? Math.floor(Math.random() * 2 ** 32));
  t.diagnostic(`seed ${seed} (replay with SATCHEL_TEST_SEED=${seed})`);
  const next = random(seed);
  const daemon = startDaemon();
  const { connection } = daemon;
  try {
    const init = await connection.sendRequest('initialize', { client_info: { name: 'vscode-jsonrpc test' } });
    assert.equal(init.server_name, 'satchel');

    const session_id = 'vscode-cancel';
    const history = turn(0);
    const created = await connection.sendRequest('context.prepare', { session_id, messages: history, config: CONFIG });
    assert.equal(created.session_id, session_id);
    assert.equal(created.reconciliation.session_messages, 2);
    assert.equal(created.reconciliation.appended, 2);

    const outcomes = { result: 0, cancelled: 0 };
    const TRIALS = 60;
    for (let trial = 1; trial <= TRIALS; trial++) {
      const append = turn(trial);
      // Every fifth trial cancels right after sending (delay 0, same tick); the others after 0-30 ms.
      const delay = trial % 5 === 0 ? 0 : Math.floor(next() * 31);
      const context = `trial ${trial}, cancel after ${delay} ms, seed ${seed}`;
      const source = new CancellationTokenSource();
      const pending = connection.sendRequest('context.prepare', { session_id, append, config: CONFIG }, source.token);
      let timer;
      if (delay === 0) source.cancel();
      else timer = setTimeout(() => source.cancel(), delay);
      try {
        const result = await pending;
        history.push(...append);
        outcomes.result++;
        assert.equal(result.session_id, session_id, context);
        assert.equal(result.reconciliation.session_messages, history.length, context);
        assert.equal(result.reconciliation.appended, 2, context);
      } catch (error) {
        if (!(error instanceof ResponseError) || error.code !== REQUEST_CANCELLED) {
          throw new Error(`${context}: expected a result or -32800, got ${error?.code}: ${error?.message}`, {
            cause: error,
          });
        }
        outcomes.cancelled++; // the history stays as it was
      } finally {
        clearTimeout(timer);
        source.dispose();
      }
      await assertSessionHolds(connection, session_id, history, context);
    }

    t.diagnostic(`${outcomes.result} answered, ${outcomes.cancelled} cancelled out of ${TRIALS}`);
    assert.ok(outcomes.result > 0, `no trial was answered (seed ${seed})`);
    assert.ok(outcomes.cancelled > 0, `no trial was cancelled (seed ${seed})`);
    assert.equal(history.length, 2 + 2 * outcomes.result);
  } catch (error) {
    console.error(`satchel stderr (tail):\n${daemon.stderr()}`);
    throw error;
  } finally {
    assert.deepEqual(await daemon.close(), { code: 0, signal: null });
  }
});

test('vscode-jsonrpc: append with a stale expect_messages is refused with -32009 and changes nothing', async () => {
  const daemon = startDaemon();
  const { connection } = daemon;
  try {
    const session_id = 'vscode-stale';
    const history = turn(0);
    await connection.sendRequest('context.prepare', { session_id, messages: history, config: CONFIG });

    const refused = await connection
      .sendRequest('context.prepare', { session_id, append: turn(1), expect_messages: 4, config: CONFIG })
      .then(
        (result) => assert.fail(`a stale expect_messages was accepted: ${JSON.stringify(result.reconciliation)}`),
        (error) => error,
      );
    assert.ok(refused instanceof ResponseError, `not a ResponseError: ${refused}`);
    assert.equal(refused.code, STALE_SESSION);
    assert.deepEqual(refused.data?.details, { expected: 4, session_messages: 2 });
    await assertSessionHolds(connection, session_id, history, 'after the refused append');

    // The right count is accepted.
    const appended = await connection.sendRequest('context.prepare', {
      session_id,
      append: turn(1),
      expect_messages: 2,
      config: CONFIG,
    });
    history.push(...turn(1));
    assert.equal(appended.reconciliation.session_messages, 4);
    await assertSessionHolds(connection, session_id, history, 'after the accepted append');
  } catch (error) {
    console.error(`satchel stderr (tail):\n${daemon.stderr()}`);
    throw error;
  } finally {
    assert.deepEqual(await daemon.close(), { code: 0, signal: null });
  }
});
