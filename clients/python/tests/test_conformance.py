"""Conformance with LSP conventions, checked against the real daemon by a third-party client.

python-lsp-jsonrpc (``pylsp_jsonrpc``, the JSON-RPC layer of python-lsp-server: Content-Length
framing, an ``Endpoint`` that answers server→client requests from a dispatcher) drives
``satchel --workspace <tmp> serve`` on stdio: initialize, context.prepare (a fixture, and one real
trajectory from ../shared/data when it exists), work-done progress under a token satchel creates
with ``window/workDoneProgress/create``, cancellation both ways, and a ``summarizer.complete``
that never answers, which satchel cancels on timeout before falling back to the extractive summary.

pylsp_jsonrpc's own client-side cancel (``future.cancel()``) sends ``$/cancelRequest`` but then
drops the reply (and its reader thread fails on it), so the tests send ``$/cancelRequest`` with
``Endpoint.notify`` and keep waiting for the reply, as the protocol asks a client to.
"""

import itertools
import json
import os
import subprocess
import threading
import time
from concurrent import futures
from pathlib import Path

import pytest
from conftest import REPO, tool_log
from pylsp_jsonrpc.endpoint import Endpoint
from pylsp_jsonrpc.exceptions import JsonRpcException
from pylsp_jsonrpc.streams import JsonRpcStreamReader, JsonRpcStreamWriter

REQUEST_CANCELLED = -32800
CAPABILITIES = {"summarizer_complete": True, "window": {"workDoneProgress": True}}
SESSION = "conformance"
#: Per-call config that makes context.compact summarise with the client's model, in stages.
STAGED = {
    "summarizer": "client",
    "max_input_length": 8192,
    "tokenizer": "estimate",
    "llm_input_budget_tokens": 1000,
    "llm_max_output_tokens": 100,
}
SUMMARY = (
    "## Goal\n- Make the parser crate build again\n\n## Progress\n### Done\n- [x] Read the build log\n\n"
    "## Next Steps\n1. Run the tests again\n"
)
#: The real trajectories live outside the repository and are never copied into it.
SHARED_TRAJECTORY = REPO.parent / "shared" / "data" / "trajectories" / "sweagent__swe-agent__test-repo-i1.json"
WAIT = 30


class Daemon:
    """``satchel serve`` on stdio with a pylsp_jsonrpc endpoint on it.

    ``handlers`` is the endpoint's dispatcher: satchel's requests (``summarizer.complete``,
    ``window/workDoneProgress/create``) and notifications (``$/progress``) by method.
    """

    def __init__(self, satchel_bin, workspace, log_file, handlers, env=None):
        self.process = subprocess.Popen(
            [satchel_bin, "--workspace", str(workspace), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log_file, "wb"),
            env={**os.environ, **(env or {})},
        )
        self.log_file = log_file
        self._ids = itertools.count(1)
        self._sending = threading.Lock()
        self._last_id = None
        self.writer = JsonRpcStreamWriter(self.process.stdin)
        self.endpoint = Endpoint(handlers, self.writer.write, id_generator=self._next_id)
        self.reader = JsonRpcStreamReader(self.process.stdout)
        self.thread = threading.Thread(target=self.reader.listen, args=(self.endpoint.consume,), daemon=True)
        self.thread.start()

    def _next_id(self):
        self._last_id = next(self._ids)
        return self._last_id

    def send(self, method, params):
        """Sends a request; returns its id and the future of its result."""
        with self._sending:
            future = self.endpoint.request(method, params)
            return self._last_id, future

    def call(self, method, params, timeout=WAIT):
        return self.send(method, params)[1].result(timeout=timeout)

    def cancel(self, request_id):
        self.endpoint.notify("$/cancelRequest", {"id": request_id})

    def close(self):
        self.process.stdin.close()
        code = self.process.wait(timeout=WAIT)
        self.thread.join(timeout=WAIT)
        self.endpoint.shutdown()
        assert code == 0, Path(self.log_file).read_text(errors="replace")[-4000:]


@pytest.fixture
def start(satchel_bin, workspace, log_file):
    started = []

    def start(handlers=None, env=None):
        daemon = Daemon(satchel_bin, workspace, log_file, handlers or {}, env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def initialize(daemon, capabilities=CAPABILITIES):
    init = daemon.call("initialize", {"client_info": {"name": "pylsp_jsonrpc conformance"}, "capabilities": capabilities})
    assert init["server_name"] == "satchel"
    assert init["protocol_version"].startswith("0.")
    for method in ("context.prepare", "context.compact", "context.inspect", "context.read"):
        assert method in init["methods"]
    return init


def long_history():
    """61 messages, about 6,000 estimated tokens: under any threshold, long enough for a staged summary."""
    detail = "the lexer reports an unexpected token in module parser::expr; " * 5
    messages = [{"role": "system", "content": "You are a careful coding agent."}]
    for turn in range(30):
        messages.append({"role": "user", "content": f"Step {turn}: fix the next build error. {detail}"})
        messages.append({"role": "assistant", "content": f"Step {turn} is fixed: {detail}"})
    return messages


def create_long_session(daemon):
    history = long_history()
    prepared = daemon.call("context.prepare", {"session_id": SESSION, "messages": history})
    assert not any(a["kind"] == "compacted" for a in prepared["actions"]), "the setup compacted already"
    return history


def compactions(daemon, session_id=SESSION):
    return daemon.call("context.inspect", {"session_id": session_id}).get("compactions") or []


def assert_progress_sequence(values):
    """One begin (cancellable), reports whose percentages never go back and reach 100, one end."""
    kinds = [v["kind"] for v in values]
    assert len(kinds) >= 3 and kinds[0] == "begin" and kinds[-1] == "end", kinds
    assert kinds.count("begin") == 1 and kinds.count("end") == 1, kinds
    assert all(k == "report" for k in kinds[1:-1]), kinds
    assert values[0]["title"] == f"Compacting {SESSION}"
    assert values[0]["cancellable"] is True
    percentages = [v["percentage"] for v in values[1:-1]]
    assert all(isinstance(p, int) and 0 <= p <= 100 for p in percentages), percentages
    assert percentages == sorted(percentages), f"percentages go back: {percentages}"
    assert percentages[-1] == 100, percentages


def never_answered(asked, cancelled):
    """A summarizer.complete handler that never answers: the endpoint gets a Future that only a
    ``$/cancelRequest`` from satchel ends (the endpoint cancels it)."""

    def handler(params):
        assert params["messages"] and params["max_tokens"] > 0
        n = len(asked) + 1
        asked.append(n)
        future = futures.Future()
        future.add_done_callback(lambda f: cancelled.append(n) if f.cancelled() else None)
        return future

    return handler


def wait_until(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_initialize_and_prepare_a_fixture(start):
    daemon = start()
    initialize(daemon)
    output = tool_log(5000)
    messages = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Run the tests and tell me what fails."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"pytest"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": output},
    ]
    prepared = daemon.call("context.prepare", {"session_id": "fixture", "messages": messages})
    assert prepared["format"] == "openai"
    assert prepared["reconciliation"] == {"session_messages": 4, "reused": 0, "appended": 4, "replaced": 0}
    assert prepared["messages"][:3] == messages[:3]
    offloaded = next(a for a in prepared["actions"] if a["kind"] == "offloaded")
    assert offloaded["index"] == 3
    assert len(prepared["messages"][3]["content"]) < len(output)
    content, offset = "", 0
    while True:
        read = daemon.call("context.read", {"path": offloaded["file"], "byte_offset": offset})
        content += read["content"]
        if read["eof"]:
            break
        offset = read["next_byte_offset"]
    assert content == output
    again = daemon.call("context.prepare", {"session_id": "fixture", "messages": messages})
    assert again["reconciliation"] == {"session_messages": 4, "reused": 4, "appended": 0, "replaced": 0}


def test_real_trajectory_replay(start):
    if not SHARED_TRAJECTORY.exists():
        pytest.skip(f"no shared data at {SHARED_TRAJECTORY}: the real-trajectory replay is skipped")
    trajectory = json.loads(SHARED_TRAJECTORY.read_text(encoding="utf-8"))
    daemon = start()
    initialize(daemon)
    config = {"max_input_length": 4096, "tokenizer": "estimate"}
    sent, kinds = [], set()
    for message in trajectory["messages"]:
        if sent:
            params = {"session_id": "trajectory", "append": [message], "expect_messages": len(sent), "config": config}
        else:
            params = {"session_id": "trajectory", "messages": [message], "config": config}
        result = daemon.call("context.prepare", params)
        sent.append(message)
        assert result["reconciliation"]["session_messages"] == len(sent)
        kinds.update(a["kind"] for a in result["actions"])
        if not result.get("over_limit"):
            assert result["tokens"]["total"] <= result["tokens"]["limit"], result["tokens"]
        calls = {c["id"] for m in result["messages"] for c in m.get("tool_calls") or []}
        assert all(m["tool_call_id"] in calls for m in result["messages"] if m["role"] == "tool")
    assert "compacted" in kinds, kinds
    assert compactions(daemon, "trajectory")
    resent = daemon.call("context.prepare", {"session_id": "trajectory", "messages": trajectory["messages"], "config": config})
    assert resent["reconciliation"]["reused"] == len(trajectory["messages"])
    assert resent["reconciliation"]["appended"] == 0


def test_progress_under_a_created_token(start):
    events, progress = [], {}

    def create(params):
        token = params["token"]
        assert isinstance(token, (str, int)) and token not in progress
        progress[token] = []
        events.append(("create", token))
        return None

    def on_progress(params):
        assert params["token"] in progress, f"progress under a token never created: {params}"
        progress[params["token"]].append(params["value"])
        events.append((params["value"]["kind"], params["token"]))

    def summarize(params):
        events.append(("summarizer.complete", None))
        return {"text": SUMMARY}

    daemon = start(
        {"window/workDoneProgress/create": create, "$/progress": on_progress, "summarizer.complete": summarize}
    )
    initialize(daemon)
    create_long_session(daemon)
    result = daemon.call("context.compact", {"session_id": SESSION, "config": STAGED})
    assert result["compaction"]["summarizer"] == "client"
    assert result["compacted"] > 0
    assert len(progress) == 1, "one token per compaction"
    (values,) = progress.values()
    assert_progress_sequence(values)
    kinds = [e for e, _ in events]
    stages = kinds.count("summarizer.complete")
    assert stages >= 2, f"a staged summary: {kinds}"
    assert kinds.index("create") < kinds.index("begin") < kinds.index("summarizer.complete"), kinds
    assert len(kinds) - 1 - kinds[::-1].index("summarizer.complete") < kinds.index("end"), kinds
    assert len(compactions(daemon)) == 1


def test_progress_under_the_clients_work_done_token(start):
    created, values = [], []

    def on_progress(params):
        assert params["token"] == 7, params
        values.append(params["value"])

    daemon = start(
        {
            "window/workDoneProgress/create": lambda params: created.append(params) or None,
            "$/progress": on_progress,
            "summarizer.complete": lambda params: {"text": SUMMARY},
        }
    )
    initialize(daemon, {"summarizer_complete": True})
    create_long_session(daemon)
    result = daemon.call("context.compact", {"session_id": SESSION, "config": STAGED, "workDoneToken": 7})
    assert result["compaction"]["summarizer"] == "client"
    assert created == [], "no token is created when the client gave one"
    assert_progress_sequence(values)


def test_a_cancelled_prepare_has_no_effect(start):
    asked, cancelled, prepare = [], [], {}
    summarize = never_answered(asked, cancelled)

    def summarize_then_cancel(params):
        future = summarize(params)
        # The model call is pending: the prepare has not reached its commit point.
        daemon.cancel(prepare["id"])
        return future

    daemon = start({"summarizer.complete": summarize_then_cancel}, env={"SATCHEL_LLM_TIMEOUT_SECS": "60"})
    initialize(daemon)
    history = create_long_session(daemon)
    append = [{"role": "user", "content": "One more step. " + "context " * 4000}, {"role": "assistant", "content": "Done."}]
    config = {**STAGED, "llm_input_budget_tokens": 32000}
    prepare["id"], pending = daemon.send(
        "context.prepare", {"session_id": SESSION, "append": append, "expect_messages": len(history), "config": config}
    )
    with pytest.raises(JsonRpcException) as error:
        pending.result(timeout=WAIT)
    assert error.value.code == REQUEST_CANCELLED
    assert asked == [1]
    assert wait_until(lambda: cancelled == [1]), "satchel cancels the summarizer request of a cancelled call"
    assert compactions(daemon) == []
    resent = daemon.call("context.prepare", {"session_id": SESSION, "messages": history})
    assert resent["reconciliation"] == {
        "session_messages": len(history),
        "reused": len(history),
        "appended": 0,
        "replaced": 0,
    }

    # A cancel right behind a plain prepare: either outcome, each honest.
    for trial in range(10):
        message = [{"role": "user", "content": f"Trial {trial}."}]
        request_id, pending = daemon.send(
            "context.prepare", {"session_id": SESSION, "append": message, "expect_messages": len(history)}
        )
        daemon.cancel(request_id)
        try:
            result = pending.result(timeout=WAIT)
            history += message
            assert result["reconciliation"]["session_messages"] == len(history)
        except JsonRpcException as e:
            assert e.code == REQUEST_CANCELLED, e
        check = daemon.call("context.prepare", {"session_id": SESSION, "messages": history})
        assert check["reconciliation"]["session_messages"] == len(history), trial
        assert check["reconciliation"]["appended"] == 0, trial


def test_progress_cancel_by_token(start):
    asked, cancelled = [], []

    def on_progress(params):
        if params["value"]["kind"] == "begin":
            assert params["value"]["cancellable"] is True
            daemon.endpoint.notify("window/workDoneProgress/cancel", {"token": params["token"]})

    daemon = start(
        {
            "window/workDoneProgress/create": lambda params: None,
            "$/progress": on_progress,
            "summarizer.complete": never_answered(asked, cancelled),
        },
        env={"SATCHEL_LLM_TIMEOUT_SECS": "60"},
    )
    initialize(daemon)
    create_long_session(daemon)
    _, pending = daemon.send("context.compact", {"session_id": SESSION, "config": STAGED})
    with pytest.raises(JsonRpcException) as error:
        pending.result(timeout=15)
    assert error.value.code == REQUEST_CANCELLED
    assert wait_until(lambda: cancelled == asked), (asked, cancelled)
    assert compactions(daemon) == []


def test_a_summariser_that_never_answers_is_cancelled_on_timeout(start):
    asked, cancelled = [], []
    daemon = start({"summarizer.complete": never_answered(asked, cancelled)}, env={"SATCHEL_LLM_TIMEOUT_SECS": "1"})
    initialize(daemon, {"summarizer_complete": True})
    create_long_session(daemon)
    started = time.monotonic()
    result = daemon.call("context.compact", {"session_id": SESSION, "config": STAGED})
    backend = result["compaction"]["summarizer"]
    assert backend.startswith("extractive (fallback: ") and "did not answer in time" in backend, backend
    assert result["compacted"] > 0
    assert time.monotonic() - started < 20
    assert asked == [1, 2], "one attempt and one retry"
    assert wait_until(lambda: cancelled == [1, 2]), f"each abandoned request is cancelled: {cancelled}"
    assert len(compactions(daemon)) == 1
