"""The official SDKs (Python `anthropic` and `openai`) through `satchel proxy`, unchanged but for
their base URL, to a scripted model server on loopback written here.

Each SDK runs a tool loop (non-streaming) and a streamed answer in its API: Anthropic
Messages, OpenAI Chat Completions and OpenAI Responses. The SDKs parse what the proxy relays
(so a stream that is not byte-faithful SSE fails here), the upstream receives valid requests
with the client's key, an upstream 429 reaches the SDK as its own RateLimitError, and the key
is in no workspace file and not in the proxy's log. Needs SATCHEL_BIN (scripts/test sets it).
"""

import json
import os
import pathlib
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import openai
import pytest

SECRET = "sk-test-SECRET-sdk-5c2a"
TOOL_CALLS = 2
BIG_OUTPUT = "".join(f"line {i:05} of a long build log: ok\n" for i in range(3000))


class Upstream:
    """A scripted model server: records each request, answers per API and per `stream`."""

    def __init__(self):
        self.received = []
        self.fail_next = None
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.received.append((self.path, dict(self.headers), body))
                if upstream.fail_next:
                    status, upstream.fail_next = upstream.fail_next, None
                    return self.reply(status, {"error": {"type": "rate_limit_error", "message": "slow down"}})
                path = self.path.split("?")[0]
                if path == "/v1/messages":
                    events, reply = anthropic_reply(body)
                elif path == "/v1/chat/completions":
                    events, reply = chat_reply(body)
                elif path == "/v1/responses":
                    events, reply = responses_reply(body)
                else:
                    return self.reply(404, {"error": {"message": "no such path"}})
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for event in events:
                        chunk = event.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        time.sleep(0.02)
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.reply(200, reply)

            def reply(self, status, value):
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def sse(event, data):
    return (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"


def anthropic_reply(body):
    results = sum(
        1 for m in body["messages"] if isinstance(m["content"], list)
        for b in m["content"] if b.get("type") == "tool_result"
    )
    usage = {"input_tokens": 1234, "output_tokens": 5}
    if results < TOOL_CALLS and not body.get("stream"):
        content = [{"type": "tool_use", "id": f"toolu_{results}", "name": "bash", "input": {"command": f"make step{results}"}}]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": "FINAL: fixed"}]
        stop = "end_turn"
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    start = dict(message, content=[], stop_reason=None)
    events = [
        sse("message_start", {"type": "message_start", "message": start}),
        sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "FINAL: "}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "fixed"}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}}),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return events, message


def chat_reply(body):
    results = sum(1 for m in body["messages"] if m["role"] == "tool")
    usage = {"prompt_tokens": 1234, "completion_tokens": 5, "total_tokens": 1239}
    if results < TOOL_CALLS and not body.get("stream"):
        message = {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{results}", "type": "function",
                   "function": {"name": "bash", "arguments": json.dumps({"command": f"make step{results}"})}}]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "FINAL: fixed"}
        finish = "stop"
    reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
             "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
    events = [
        sse(None, dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": "FINAL: "}, "finish_reason": None}])),
        sse(None, dict(chunk, choices=[{"index": 0, "delta": {"content": "fixed"}, "finish_reason": "stop"}])),
        sse(None, dict(chunk, choices=[], usage=usage)),
        "data: [DONE]\n\n",
    ]
    return events, reply


def responses_reply(body):
    outputs = sum(1 for item in body["input"] if item.get("type") == "function_call_output")
    usage = {"input_tokens": 1234, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1239}
    text = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "FINAL: fixed", "annotations": []}]}
    if outputs < TOOL_CALLS and not body.get("stream"):
        output = [{"type": "reasoning", "id": f"rs_{outputs}", "summary": [], "encrypted_content": "gAAAAsigned"},
                  {"type": "function_call", "id": f"fc_{outputs}", "call_id": f"call_{outputs}", "name": "bash",
                   "arguments": json.dumps({"command": f"make step{outputs}"}), "status": "completed"}]
    else:
        output = [text]
    response = {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", "model": body["model"],
                "output": output, "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    events = [
        sse("response.created", {"type": "response.created", "sequence_number": 0, "response": dict(response, status="in_progress", output=[], usage=None)}),
        sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "FINAL: ", "logprobs": []}),
        sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "fixed", "logprobs": []}),
        sse("response.completed", {"type": "response.completed", "sequence_number": 3, "response": dict(response, output=[text])}),
    ]
    return events, response


@pytest.fixture()
def proxy(tmp_path):
    upstream = Upstream()
    workspace = tmp_path / "ws"
    log = tmp_path / "proxy.log"
    env = dict(os.environ, SATCHEL_PROXY_UPSTREAM_ANTHROPIC=upstream.url, SATCHEL_PROXY_UPSTREAM_OPENAI=upstream.url,
               SATCHEL_LOG="debug")
    process = subprocess.Popen(
        [os.environ["SATCHEL_BIN"], "--workspace", str(workspace), "proxy", "--listen", "127.0.0.1:0",
         "--log-file", str(log)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    info = workspace / "run" / "proxy.json"
    deadline = time.time() + 30
    while True:
        try:
            listen = json.loads(info.read_text())["listen"]
            break
        except (OSError, ValueError, KeyError):
            assert time.time() < deadline, "satchel proxy did not start"
            assert process.poll() is None, "satchel proxy exited"
            time.sleep(0.05)
    yield f"http://{listen}", upstream, workspace
    process.terminate()
    process.wait(timeout=10)
    for path in [*workspace.rglob("*"), log]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"{path} holds the client's key"


def keys_only_to_upstream(upstream, header):
    assert upstream.received, "the upstream was reached"
    for _, headers, _ in upstream.received:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert SECRET in lowered[header], "the client's key reached the upstream"


def test_anthropic_sdk_tool_loop_stream_and_errors(proxy):
    url, upstream, _ = proxy
    client = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
    messages = [{"role": "user", "content": "Fix the build."}]
    for _ in range(TOOL_CALLS + 1):
        raw = client.messages.with_raw_response.create(
            model="claude-test", max_tokens=100, messages=messages, system="You fix builds.",
            tools=[{"name": "bash", "input_schema": {"type": "object"}}])
        assert raw.headers["x-satchel-session"]
        reply = raw.parse()
        if reply.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": reply.content[0].id, "content": BIG_OUTPUT}]})
    assert reply.content[0].text == "FINAL: fixed"
    last = upstream.received[-1][2]["messages"]
    assert len(json.dumps(last)) < len(json.dumps(messages)), "the long tool outputs reached the model cut"
    with client.messages.stream(model="claude-test", max_tokens=100, messages=messages) as stream:
        assert "".join(stream.text_stream) == "FINAL: fixed"
        assert stream.get_final_message().usage.input_tokens == 1234
    upstream.fail_next = 429
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="claude-test", max_tokens=10, messages=messages)
    keys_only_to_upstream(upstream, "x-api-key")


def test_openai_sdk_chat_tool_loop_and_stream(proxy):
    url, upstream, _ = proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
    messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "Fix the build."}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    for _ in range(TOOL_CALLS + 1):
        reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=tools, prompt_cache_key="sdk-chat")
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": BIG_OUTPUT})
    assert message.content == "FINAL: fixed"
    sent = upstream.received[-1][2]["messages"]
    assert len(json.dumps(sent)) < len(json.dumps(messages)), "the long tool outputs reached the model cut"
    chunks = list(client.chat.completions.create(model="gpt-test", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "FINAL: fixed"
    assert chunks[-1].usage.prompt_tokens == 1234
    upstream.fail_next = 429
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-test", messages=messages)
    keys_only_to_upstream(upstream, "authorization")


def test_openai_sdk_responses_tool_loop_and_stream(proxy):
    url, upstream, _ = proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the build."}]}]
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
    for _ in range(TOOL_CALLS + 1):
        raw = client.responses.with_raw_response.create(
            model="gpt-test", instructions="You fix builds.", input=items, tools=tools, store=False,
            prompt_cache_key="sdk-responses")
        assert raw.headers["x-satchel-session"] == "sdk-responses"
        reply = raw.parse()
        calls = [o for o in reply.output if o.type == "function_call"]
        if not calls:
            break
        items.extend(o.model_dump(exclude_none=True) for o in reply.output)
        items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": BIG_OUTPUT})
    assert reply.output_text == "FINAL: fixed"
    sent = upstream.received[-1][2]
    assert sent["instructions"] == "You fix builds."
    assert [i["type"] for i in sent["input"]].count("reasoning") == TOOL_CALLS, "signed reasoning is forwarded"
    assert len(json.dumps(sent["input"])) < len(json.dumps(items)), "the long tool outputs reached the model cut"
    events = list(client.responses.create(model="gpt-test", input=items, stream=True, store=False))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "FINAL: fixed"
    assert events[-1].response.usage.input_tokens == 1234
    keys_only_to_upstream(upstream, "authorization")
