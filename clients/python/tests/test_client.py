"""The blocking Client against the real daemon."""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import (
    CLIENT_SUMMARIZER_CONFIG,
    MODEL_SUMMARY,
    PROMPT_SECTIONS,
    README,
    anthropic_conversation,
    long_conversation,
    openai_conversation,
    tool_log,
)

from satchel_client import (
    Client,
    ConnectionClosed,
    FileNotFound,
    InvalidParams,
    MethodNotFound,
    PathOutsideWorkspace,
    PayloadTooLarge,
    RequestCancelled,
    SatchelError,
    StaleSession,
    UnknownSession,
)


def test_spawn_and_initialize(client: Client, workspace: Path) -> None:
    result = client.initialize()
    assert result["server_name"] == "satchel"
    assert Path(result["workspace"]) == workspace.resolve()
    assert "context.prepare" in result["methods"]
    assert result["config"]["max_input_length"] > 0


def test_prepare_openai_offloads_and_read_rebuilds_the_output(client: Client) -> None:
    log = tool_log()
    result = client.prepare("openai-session", messages=openai_conversation(log))
    assert result["format"] == "openai"
    assert result["tokens"]["total"] == sum(result["tokens"][z] for z in ("system", "tools", "summary", "messages"))
    (offloaded,) = [a for a in result["actions"] if a["kind"] == "offloaded"]
    assert offloaded["total_bytes"] == len(log.encode())
    excerpt = result["messages"][-1]["content"]
    assert "<<<TRUNCATED>>>" in excerpt and offloaded["file"] in excerpt
    assert len(excerpt) < len(log)

    # Page through the file the notice names: the pieces are the original, byte for byte.
    pieces, offset = [], 0
    while True:
        page = client.read(offloaded["file"], byte_offset=offset, max_bytes=16_000)
        pieces.append(page["content"])
        if page["eof"]:
            break
        offset = page["next_byte_offset"]
    assert "".join(pieces) == log

    by_line = client.read(offloaded["file"], start_line=4999)
    assert by_line["content"].endswith("FAILED test_parse: expected 3, got 4")


def test_prepare_anthropic_keeps_the_format(client: Client) -> None:
    log = tool_log(tag="a")
    result = client.prepare("anthropic-session", messages=anthropic_conversation(log), format="anthropic")
    assert result["format"] == "anthropic"
    block = result["messages"][-1]["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1"
    text = block["content"] if isinstance(block["content"], str) else block["content"][0]["text"]
    assert "<<<TRUNCATED>>>" in text
    # append adds to the same session; inspect sees all of it.
    client.prepare("anthropic-session", append=[{"role": "assistant", "content": "One test fails."}])
    inspected = client.inspect("anthropic-session")
    assert inspected["messages"] == 4 and inspected["format"] == "anthropic"
    assert [o["total_bytes"] for o in inspected["offloaded"]] == [len(log.encode())]


def test_errors_raise_the_class_of_their_code(client: Client) -> None:
    with pytest.raises(UnknownSession) as unknown:
        client.prepare("never-seen", append=[{"role": "user", "content": "hi"}])
    assert unknown.value.code == -32001 and "never-seen" in unknown.value.message
    with pytest.raises(PathOutsideWorkspace):
        client.read("../outside.txt")
    with pytest.raises(FileNotFound):
        client.read("tool_result/missing.txt")
    with pytest.raises(InvalidParams) as invalid:
        client.call("context.prepare", {"session_id": "s", "messages": [], "bogus": 1})
    assert invalid.value.data["details"]["field"] == "bogus"
    with pytest.raises(MethodNotFound):
        client.call("context.nope", {})
    assert isinstance(invalid.value, SatchelError)
    # The client still works after errors.
    assert client.initialize()["server_name"] == "satchel"


def test_append_with_expect_messages_never_appends_twice(client: Client) -> None:
    first = client.prepare("counted", messages=[{"role": "user", "content": "Hello?"}])
    held = first["reconciliation"]["session_messages"]
    assert held == 1
    reply = [{"role": "assistant", "content": "Hello."}]
    second = client.prepare("counted", append=reply, expect_messages=held)
    assert second["reconciliation"]["session_messages"] == 2
    # The same append again, as a retry after a lost reply would send it: refused, nothing appended.
    with pytest.raises(StaleSession) as stale:
        client.prepare("counted", append=reply, expect_messages=held)
    assert stale.value.code == -32009 and isinstance(stale.value, SatchelError)
    assert stale.value.data["name"] == "StaleSession"
    assert stale.value.data["details"] == {"expected": 1, "session_messages": 2}
    assert client.inspect("counted")["messages"] == 2
    # The count from the error is the one to append from.
    held = stale.value.data["details"]["session_messages"]
    third = client.prepare("counted", append=[{"role": "user", "content": "Bye."}], expect_messages=held)
    assert third["reconciliation"]["session_messages"] == 3


def test_prepare_assembles_sections_and_takes_usage(client: Client) -> None:
    """Sections and the provider's usage on prepare, usage as a notification in between."""
    keys = [section["key"] for section in PROMPT_SECTIONS]
    messages = [{"role": "user", "content": "Fix the ParseError in src/parser.py and run the tests."}]
    first = client.prepare("assembly", messages=messages, sections=PROMPT_SECTIONS)
    assert isinstance(first.get("system"), str), f"no assembled system prompt: {sorted(first)}"
    for section in PROMPT_SECTIONS:  # all three fit the default budget whole
        assert section["content"] in first["system"]
    assert "prompt" in first, f"no prompt report: {sorted(first)}"
    prompt = first["prompt"]
    assert prompt["sessionId"] == "assembly"
    reported = [s["key"] for s in prompt["sections"]]
    assert [k for k in reported if k in keys] == keys, reported  # in the order sent
    soul = next(s for s in prompt["sections"] if s["key"] == "memory:soul")
    assert soul["protected"] and soul["included"] and not soul["truncated"]
    assert prompt["truncatedSectionKeys"] == []

    # The model call's usage, as clients usually report it: a notification, no reply.
    client.report_usage("assembly", first["tokens"]["total"] + 50)
    second = client.prepare(
        "assembly",
        append=[{"role": "assistant", "content": "Done: ParseError is raised for empty input."}],
        sections=PROMPT_SECTIONS,
        usage={"input_tokens": first["tokens"]["total"] + 80},
        expect_messages=1,
    )
    assert second["reconciliation"]["session_messages"] == 2
    assert isinstance(second.get("system"), str), f"no assembled system prompt: {sorted(second)}"
    assert "prompt" in second, f"no prompt report: {sorted(second)}"
    assert [s["key"] for s in second["prompt"]["sections"] if s["key"] in keys] == keys

    inspected = client.inspect("assembly", detail_key="rules:python")
    assert inspected["calibration"]["samples"] >= 1
    assert inspected["monitor"]["current_tokens"] > 0
    assert "sections" in inspected, f"no prompt in inspect: {sorted(inspected)}"
    assert inspected["sessionId"] == "assembly"
    assert inspected["detail"]["key"] == "rules:python"
    assert inspected["detail"]["original_content"] == PROMPT_SECTIONS[1]["content"]


def test_a_learned_lesson_is_promoted_and_injected(client: Client) -> None:
    lesson = "Run `cargo fmt --all` before `cargo clippy`: clippy -D warnings fails on unformatted code"
    observed = client.candidates_observe(
        lesson,
        "lesson",
        symbols=["ParserConfig"],
        evidence={"failure": "cargo clippy -- -D warnings failed", "fix": "cargo fmt --all"},
    )
    candidate = observed["candidate"]
    assert (candidate["state"], candidate["text"], observed["merged"]) == ("shadow", lesson, False)
    assert client.candidates_list(state="promoted")["candidates"] == []
    # One observation is never promoted, even with its failure and fix.
    assert client.candidates_evaluate()["changes"] == []

    # Observed a second time (by another client: no session id), it is.
    again = client.candidates_observe(
        lesson, "lesson", evidence={"failure": "cargo clippy -- -D warnings failed", "fix": "cargo fmt --all"}
    )
    assert (again["merged"], again["candidate"]["observations"]) == (True, 2)
    (change,) = client.candidates_evaluate()["changes"]
    assert (change["id"], change["from"], change["to"]) == (candidate["id"], "shadow", "promoted")
    listed = client.candidates_list(state="promoted")
    assert [c["id"] for c in listed["candidates"]] == [candidate["id"]] and listed["rejected"] == []

    # The next request's system prompt carries it.
    question = {"role": "user", "content": "Why does `ParserConfig` fail to build?"}
    result = client.prepare("learned", messages=[question], system="Be careful.")
    assert result["prompt"]["injectedCandidateIds"] == [candidate["id"]]
    assert lesson in result["system"]
    assert client.candidates_feedback(candidate["id"], "success")["candidate"]["successes"] == 1
    assert client.candidates_remove(candidate["id"]) == {"removed": True}
    assert client.candidates_list()["candidates"] == []


def test_usage_notification_and_request_calibrate(client: Client) -> None:
    result = client.prepare("usage", messages=[{"role": "user", "content": "Hello there, how are you?"}])
    counted = result["tokens"]["total"]
    before = client.inspect("usage")["calibration"]
    assert before["factor"] == 1.0 and before["samples"] == 0
    assert client.report_usage("usage", counted + 3) is None  # a notification: nothing to wait for
    # Calls on a session run in the order they were sent, so inspect sees the notification.
    after = client.inspect("usage")["calibration"]
    assert after["samples"] >= 1 and after["last"]["provider_tokens"] == counted + 3
    calibration = client.usage("usage", counted + 5)
    assert calibration["last"]["provider_tokens"] == counted + 5
    assert 0.5 <= calibration["factor"] <= 2.0
    with pytest.raises(UnknownSession):
        client.usage("no-such-session", 10)


def test_request_over_the_size_limit_raises_payload_too_large(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    # satchel cannot read the id of a request over the limit and answers with `id: null`;
    # the client still hands the error to the call that caused it.
    with Client.spawn(satchel_bin, workspace, args=["--max-message-bytes", "4096"], stderr=log_file) as client:
        with pytest.raises(PayloadTooLarge):
            client.prepare("big", messages=[{"role": "user", "content": "x" * 10_000}])
        assert client.prepare("small", messages=[{"role": "user", "content": "hi"}])["session_id"] == "small"


def test_concurrent_calls_from_threads_get_their_own_replies(client: Client) -> None:
    def work(i: int) -> None:
        session = f"thread-{i}"
        # Mix slow (big offload), fast and failing calls so replies come back out of order.
        messages = openai_conversation(tool_log(lines=3000 if i % 3 == 0 else 10, tag=f"t{i}_"))
        result = client.prepare(session, messages=messages)
        assert result["session_id"] == session
        assert f"t{i}_" in result["messages"][-1]["content"]
        assert client.inspect(session)["session_id"] == session
        with pytest.raises(UnknownSession) as e:
            client.inspect(f"missing-{i}")
        assert f"missing-{i}" in e.value.message

    with ThreadPoolExecutor(max_workers=12) as pool:
        for future in [pool.submit(work, i) for i in range(36)]:
            future.result()


def test_client_summarizer_answers_summarizer_complete(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    calls = []
    progress = []

    def summarize(messages, max_tokens):
        calls.append((messages, max_tokens))
        return MODEL_SUMMARY

    with Client.spawn(satchel_bin, workspace, stderr=log_file, summarizer=summarize) as client:
        client.on_notification("$/progress", progress.append)
        result = client.prepare("summarized", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
    (compacted,) = [a for a in result["actions"] if a["kind"] == "compacted"]
    assert compacted["summarizer"] == "client"
    assert calls, "summarizer.complete was never sent"
    messages, max_tokens = calls[0]
    assert [m["role"] for m in messages] == ["system", "user"] and isinstance(max_tokens, int)
    assert any("client model" in goal for goal in result["compact_summary"]["goal"])
    # LSP work-done progress under the token satchel created: begin, reports, end at 100.
    kinds = [p["value"]["kind"] for p in progress]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds, kinds
    assert len({p["token"] for p in progress}) == 1 and progress[0]["token"].startswith("satchel-progress-")
    assert [p["value"].get("percentage") for p in progress if p["value"]["kind"] == "report"][-1] == 100


def test_failing_summarizer_is_an_error_reply_and_satchel_falls_back(
    satchel_bin: str, workspace: Path, log_file: Path
) -> None:
    def summarize(messages, max_tokens):
        raise RuntimeError("model unavailable")

    with Client.spawn(satchel_bin, workspace, stderr=log_file) as client:
        client.set_summarizer(summarize)
        result = client.prepare("fallback", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
    (compacted,) = [a for a in result["actions"] if a["kind"] == "compacted"]
    assert compacted["summarizer"].startswith("extractive (fallback")
    assert "model unavailable" in compacted["summarizer"]


def test_context_manager_shuts_the_daemon_down(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    with Client.spawn(satchel_bin, workspace, stderr=log_file) as client:
        client.prepare("s", messages=[{"role": "user", "content": "hi"}])
        process = client.process
        assert process is not None and process.poll() is None
    assert process.returncode == 0
    with pytest.raises(ConnectionClosed):
        client.inspect("s")
    client.close()  # twice is fine


def test_a_daemon_that_dies_fails_waiting_calls(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    # The summarizer runs while `context.prepare` waits: a good moment to kill the daemon.
    def kill_daemon(messages, max_tokens):
        assert client.process is not None
        client.process.send_signal(signal.SIGKILL)
        client.process.wait()
        return MODEL_SUMMARY

    client = Client.spawn(satchel_bin, workspace, stderr=log_file, summarizer=kill_daemon)
    with client:
        with pytest.raises(ConnectionClosed, match="exited with code -9"):
            client.prepare("doomed", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
        with pytest.raises(ConnectionClosed):
            client.inspect("doomed")


def test_missing_binary_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="SATCHEL_BIN"):
        Client.spawn(tmp_path / "no-such-satchel")


def test_spawn_uses_satchel_bin_and_env(satchel_bin: str, workspace: Path, log_file: Path, monkeypatch) -> None:
    monkeypatch.setenv("SATCHEL_BIN", satchel_bin)
    with Client.spawn(workspace=workspace, env={"SATCHEL_PRUNING_RECENT_N": "3"}, stderr=log_file) as client:
        assert client.initialize()["config"]["pruning_recent_n"] == 3


def test_call_timeout_cancels_the_call_which_then_had_no_effect(
    satchel_bin: str, workspace: Path, log_file: Path
) -> None:
    # A summarizer that stalls keeps `context.prepare` busy (before its commit point) past the
    # caller's timeout; the client cancels it and satchel confirms with -32800.
    release = threading.Event()

    def slow(messages, max_tokens):
        release.wait(10)
        return MODEL_SUMMARY

    with Client.spawn(satchel_bin, workspace, stderr=log_file, summarizer=slow) as client:
        history = long_conversation()
        first = client.prepare("slow", messages=history[:2], config=CLIENT_SUMMARIZER_CONFIG)
        assert first["reconciliation"]["session_messages"] == 2
        params = {"session_id": "slow", "messages": history, "config": CLIENT_SUMMARIZER_CONFIG}
        with pytest.raises(TimeoutError) as timed_out:
            client.call("context.prepare", params, timeout=0.5)
        assert isinstance(timed_out.value.__cause__, RequestCancelled), timed_out.value
        assert timed_out.value.__cause__.code == -32800
        assert "no effect" in str(timed_out.value)
        release.set()
        # The session is as before the cancelled call, and a resend processes everything anew.
        assert client.inspect("slow")["messages"] == 2
        again = client.prepare("slow", messages=history, config=CLIENT_SUMMARIZER_CONFIG)
        assert again["reconciliation"]["reused"] == 2
        assert again["reconciliation"]["session_messages"] == len(history)
        assert client.initialize()["server_name"] == "satchel"


def wait_for_socket(path: Path, process=None) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        if process is not None and process.poll() is not None:
            pytest.fail(f"satchel exited with {process.returncode} before creating {path}")
        assert time.monotonic() < deadline, f"satchel did not create {path}"
        time.sleep(0.05)


def test_connect_to_the_socket_shares_sessions(
    satchel_bin: str, serve_help: str, socket_path: Path, workspace: Path, log_file: Path
) -> None:
    if "--socket" not in serve_help:
        pytest.skip("this satchel has no `serve --socket` yet (`satchel serve --help` does not mention it)")
    sock = socket_path
    with Client.spawn(satchel_bin, workspace, args=["--socket", str(sock)], stderr=log_file) as agent:
        agent.prepare("shared", messages=openai_conversation(tool_log(lines=10)))
        wait_for_socket(sock, agent.process)
        assert os.stat(sock).st_mode & 0o777 == 0o600
        with Client.connect(sock) as observer:
            assert observer.inspect("shared")["messages"] == 3
            assert [s["session_id"] for s in observer.sessions()["sessions"] if s["live"]] == ["shared"]
            # A live view: the observer watches while the agent drives the session over stdio.
            events: "queue.Queue[dict]" = queue.Queue()
            observer.on_notification("context.event", events.put)
            assert observer.watch("shared")["watching"] is True
            agent.prepare("shared", append=[{"role": "assistant", "content": "Done."}])
            event = events.get(timeout=10)
            assert (event["session_id"], event["kind"], event["messages"]) == ("shared", "prepare", 4)
            assert observer.inspect("shared")["messages"] == 4
            with pytest.raises(UnknownSession):
                observer.inspect("nobody")
        # Closing the observer leaves the daemon serving the agent.
        assert agent.inspect("shared")["messages"] == 4


def test_the_readme_example_runs_as_written(satchel_bin: str, tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "SATCHEL_BIN": satchel_bin, "SATCHEL_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-c", example],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"^\d+ tokens of \d+$", run.stdout, re.M) and "<<<TRUNCATED>>>" in run.stdout
    assert "context.read" in run.stdout


def test_log_file_receives_satchel_stderr(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    with Client.spawn(satchel_bin, workspace, env={"SATCHEL_LOG": "info"}, stderr=log_file) as client:
        client.initialize()
    assert "satchel serving" in log_file.read_text()
