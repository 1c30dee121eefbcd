// The official Node OpenAI SDK (`openai`, pinned in package.json) through `satchel proxy`,
// unchanged but for its base URL, to a scripted model server on loopback written here: a
// Chat Completions tool loop whose long tool outputs reach the model cut, a streamed Chat
// answer and a streamed Responses answer parsed by the SDK (so the relay must be faithful
// SSE), an upstream 429 raised as the SDK's own RateLimitError, and the client's key in no
// workspace file and not in the proxy's log. Needs SATCHEL_BIN (scripts/test sets it).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import OpenAI, { RateLimitError } from 'openai';

const SECRET = 'sk-test-SECRET-node-91fe';
const TOOL_CALLS = 2;
const BIG_OUTPUT = Array.from({ length: 3000 }, (_, i) => `line ${i} of a long build log: ok\n`).join('');

const sse = (data, event) => (event ? `event: ${event}\n` : '') + `data: ${JSON.stringify(data)}\n\n`;

/** The scripted model: records each request and answers Chat Completions or Responses. */
function upstream() {
  const received = [];
  let failNext = null;
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk) => (text += chunk));
    req.on('end', async () => {
      const body = JSON.parse(text);
      received.push({ path: req.url, headers: req.headers, body });
      if (failNext) {
        res.writeHead(failNext, { 'content-type': 'application/json', 'retry-after': '0' });
        failNext = null;
        return res.end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error' } }));
      }
      const usage = { prompt_tokens: 1234, completion_tokens: 5, total_tokens: 1239 };
      if (req.url === '/v1/chat/completions' && !body.stream) {
        const results = body.messages.filter((m) => m.role === 'tool').length;
        const message =
          results < TOOL_CALLS
            ? { role: 'assistant', content: null, tool_calls: [{ id: `call_${results}`, type: 'function', function: { name: 'bash', arguments: `{"command":"make step${results}"}` } }] }
            : { role: 'assistant', content: 'FINAL: fixed' };
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: body.model, choices: [{ index: 0, message, finish_reason: 'stop' }], usage }));
      }
      let events;
      if (req.url === '/v1/chat/completions') {
        const chunk = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 0, model: body.model };
        events = [
          sse({ ...chunk, choices: [{ index: 0, delta: { role: 'assistant', content: 'FINAL: ' }, finish_reason: null }] }),
          sse({ ...chunk, choices: [{ index: 0, delta: { content: 'fixed' }, finish_reason: 'stop' }] }),
          sse({ ...chunk, choices: [], usage }),
          'data: [DONE]\n\n',
        ];
      } else {
        const message = { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'FINAL: fixed', annotations: [] }] };
        const response = { id: 'resp_1', object: 'response', created_at: 0, status: 'completed', model: body.model, output: [message], usage: { input_tokens: 1234, output_tokens: 5, total_tokens: 1239 } };
        events = [
          sse({ type: 'response.created', sequence_number: 0, response: { ...response, status: 'in_progress', output: [], usage: null } }, 'response.created'),
          sse({ type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'FINAL: ' }, 'response.output_text.delta'),
          sse({ type: 'response.output_text.delta', sequence_number: 2, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'fixed' }, 'response.output_text.delta'),
          sse({ type: 'response.completed', sequence_number: 3, response }, 'response.completed'),
        ];
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const event of events) {
        res.write(event);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      res.end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, received, url: `http://127.0.0.1:${server.address().port}`, fail: (status) => (failNext = status) }),
    ),
  );
}

/** `satchel proxy` on a free port in a fresh workspace, in front of `upstreamUrl`. */
async function startProxy(upstreamUrl) {
  const dir = mkdtempSync(join(tmpdir(), 'satchel-sdk-'));
  const workspace = join(dir, 'ws');
  const log = join(dir, 'proxy.log');
  const child = spawn(process.env.SATCHEL_BIN, ['--workspace', workspace, 'proxy', '--listen', '127.0.0.1:0', '--log-file', log], {
    env: { ...process.env, SATCHEL_PROXY_UPSTREAM_OPENAI: upstreamUrl, SATCHEL_PROXY_UPSTREAM_ANTHROPIC: upstreamUrl, SATCHEL_LOG: 'debug' },
    stdio: 'ignore',
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const { listen } = JSON.parse(readFileSync(join(workspace, 'run', 'proxy.json'), 'utf8'));
      return { url: `http://${listen}`, workspace, log, child };
    } catch {
      assert.ok(Date.now() < deadline, 'satchel proxy did not start');
      assert.equal(child.exitCode, null, 'satchel proxy exited');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

function filesUnder(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

test('the Node OpenAI SDK runs a tool loop and streams through satchel proxy', async () => {
  const model = await upstream();
  const proxy = await startProxy(model.url);
  try {
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: SECRET, maxRetries: 0 });
    const messages = [
      { role: 'system', content: 'You fix builds.' },
      { role: 'user', content: 'Fix the build.' },
    ];
    const tools = [{ type: 'function', function: { name: 'bash', parameters: { type: 'object' } } }];
    let message;
    for (let i = 0; i <= TOOL_CALLS; i++) {
      const { data, response } = await client.chat.completions
        .create({ model: 'gpt-test', messages, tools, prompt_cache_key: 'node-chat' })
        .withResponse();
      assert.equal(response.headers.get('x-satchel-session'), 'node-chat');
      message = data.choices[0].message;
      if (!message.tool_calls) break;
      messages.push(message);
      messages.push({ role: 'tool', tool_call_id: message.tool_calls[0].id, content: BIG_OUTPUT });
    }
    assert.equal(message.content, 'FINAL: fixed');
    const sent = model.received.at(-1).body.messages;
    assert.ok(JSON.stringify(sent).length < JSON.stringify(messages).length, 'the long tool outputs reached the model cut');

    let text = '';
    let usage;
    for await (const chunk of await client.chat.completions.create({ model: 'gpt-test', messages, stream: true, stream_options: { include_usage: true } })) {
      text += chunk.choices[0]?.delta?.content ?? '';
      usage = chunk.usage ?? usage;
    }
    assert.equal(text, 'FINAL: fixed');
    assert.equal(usage.prompt_tokens, 1234);

    const input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Fix the build.' }] }];
    let streamed = '';
    let completed;
    for await (const event of await client.responses.create({ model: 'gpt-test', instructions: 'You fix builds.', input, stream: true, store: false })) {
      if (event.type === 'response.output_text.delta') streamed += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    assert.equal(streamed, 'FINAL: fixed');
    assert.equal(completed.usage.input_tokens, 1234);

    model.fail(429);
    await assert.rejects(client.chat.completions.create({ model: 'gpt-test', messages }), RateLimitError);

    for (const request of model.received) {
      assert.equal(request.headers.authorization, `Bearer ${SECRET}`, 'the key reached the upstream');
    }
  } finally {
    proxy.child.kill('SIGTERM');
    await new Promise((resolve) => proxy.child.once('exit', resolve));
    model.server.close();
  }
  for (const file of [...filesUnder(proxy.workspace), proxy.log]) {
    assert.ok(!readFileSync(file).includes(SECRET), `${file} holds the client's key`);
  }
});
