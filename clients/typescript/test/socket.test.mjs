// connect() to `satchel serve --socket PATH`, sharing sessions with the stdio client that started it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';

import { SatchelClient } from '../dist/index.js';
import { SATCHEL_BIN, bigLog, openaiConversation, spawnClient, tempDir } from './helpers.mjs';

const help = execFileSync(SATCHEL_BIN, ['serve', '--help'], { encoding: 'utf8' });
const skip = help.includes('--socket') ? false : '`satchel serve --help` does not mention --socket';

test('connect(socket) sees the sessions driven over stdio', { skip }, async () => {
  const socket = join(tempDir(), 'satchel.sock');
  const editor = spawnClient({ args: ['--socket', socket] });
  await editor.initialize();
  for (let i = 0; !existsSync(socket); i++) {
    assert.ok(i < 200, `no socket at ${socket} after 10 s`);
    await sleep(50);
  }
  assert.equal(statSync(socket).mode & 0o777, 0o600);

  const tool = await SatchelClient.connect(socket);
  assert.equal((await tool.initialize()).server_name, 'satchel');
  const events = [];
  tool.onNotification('context.event', (event) => events.push(event));

  const output = bigLog();
  const prepared = await editor.prepare({ session_id: 'shared', messages: openaiConversation(output) });
  const inspect = await tool.inspect({ session_id: 'shared' });
  assert.equal(inspect.messages, 3);
  assert.equal(inspect.tokens.total, prepared.tokens.total);
  const file = inspect.offloaded[0].file;
  assert.equal((await tool.read({ path: file, max_bytes: 100 })).total_bytes, Buffer.byteLength(output));
  assert.ok((await tool.sessions()).sessions.some((s) => s.session_id === 'shared' && s.live));

  assert.equal((await tool.watch({ session_id: 'shared' })).watching, true);
  await editor.prepare({ session_id: 'shared', append: [{ role: 'assistant', content: 'One test fails.' }] });
  for (let i = 0; events.length === 0; i++) {
    assert.ok(i < 100, 'no context.event after 5 s');
    await sleep(50);
  }
  assert.equal(events[0].session_id, 'shared');
  assert.equal(events[0].messages, 4);

  assert.equal(await tool.close(), null);
  assert.equal(await editor.close(), 0);
});

test('connect() to a missing socket rejects', async () => {
  await assert.rejects(SatchelClient.connect(join(tempDir(), 'none.sock')), /ENOENT/);
});
