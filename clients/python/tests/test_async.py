"""The asyncio client against the real daemon (plain asyncio.run: no pytest plugin needed)."""

import asyncio
import os
from pathlib import Path

import pytest
from conftest import (
    CLIENT_SUMMARIZER_CONFIG,
    MODEL_SUMMARY,
    PROMPT_SECTIONS,
    long_conversation,
    openai_conversation,
    tool_log,
)

from satchel_client import (
    AsyncClient,
    ConnectionClosed,
    FileNotFound,
    PathOutsideWorkspace,
    RequestCancelled,
    StaleSession,
    UnknownSession,
)


def test_spawn_initialize_prepare_read(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file) as client:
            assert (await client.initialize())["server_name"] == "satchel"
            log = tool_log()
            result = await client.prepare("async", messages=openai_conversation(log))
            (offloaded,) = [a for a in result["actions"] if a["kind"] == "offloaded"]
            page = await client.read(offloaded["file"], max_bytes=len(log.encode()))
            assert page["content"] == log and page["eof"]
            assert (await client.inspect("async"))["messages"] == 3
            compacted = await client.compact("async")
            assert compacted["session_id"] == "async"

    asyncio.run(main())


def test_gather_gets_each_call_its_own_reply(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def one(client: AsyncClient, i: int) -> None:
        session = f"task-{i}"
        messages = openai_conversation(tool_log(lines=3000 if i % 3 == 0 else 10, tag=f"a{i}_"))
        result = await client.prepare(session, messages=messages)
        assert result["session_id"] == session and f"a{i}_" in result["messages"][-1]["content"]
        with pytest.raises(UnknownSession) as e:
            await client.inspect(f"missing-{i}")
        assert f"missing-{i}" in e.value.message

    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file) as client:
            await asyncio.gather(*(one(client, i) for i in range(36)))

    asyncio.run(main())


def test_expect_messages_passes_through(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file) as client:
            first = await client.prepare("counted", messages=[{"role": "user", "content": "Hello?"}])
            held = first["reconciliation"]["session_messages"]
            reply = [{"role": "assistant", "content": "Hello."}]
            second = await client.prepare("counted", append=reply, expect_messages=held)
            assert second["reconciliation"]["session_messages"] == held + 1
            with pytest.raises(StaleSession) as stale:
                await client.prepare("counted", append=reply, expect_messages=held)
            assert stale.value.data["details"] == {"expected": held, "session_messages": held + 1}
            assert (await client.inspect("counted"))["messages"] == held + 1

    asyncio.run(main())


def test_sections_usage_and_calibration(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file) as client:
            messages = [{"role": "user", "content": "Fix the ParseError in src/parser.py."}]
            result = await client.prepare("assembly", messages=messages, sections=PROMPT_SECTIONS, usage=120)
            counted = result["tokens"]["total"]
            assert await client.report_usage("assembly", counted + 7) is None
            inspected = await client.inspect("assembly", query_hint="and src/lexer.py?")
            assert inspected["calibration"]["last"]["provider_tokens"] == counted + 7
            calibration = await client.usage("assembly", counted + 9)
            assert calibration["last"]["provider_tokens"] == counted + 9
            # The spec; fails while the daemon does not assemble sections yet.
            assert isinstance(result.get("system"), str), f"no assembled system prompt: {sorted(result)}"
            keys = [s["key"] for s in result["prompt"]["sections"]]
            assert all(section["key"] in keys for section in PROMPT_SECTIONS), keys

    asyncio.run(main())


def test_candidates_observe_evaluate_list(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file) as client:
            evidence = {"failure": "pytest failed: no module named yaml", "fix": "pip install pyyaml"}
            observed = await client.candidates_observe("Install pyyaml before the tests", "lesson", evidence=evidence)
            assert (await client.candidates_evaluate())["changes"] == []  # one observation is never promoted
            await client.candidates_observe("Install pyyaml before the tests", "lesson", evidence=evidence)
            (change,) = (await client.candidates_evaluate())["changes"]
            assert (change["id"], change["to"]) == (observed["candidate"]["id"], "promoted")
            (listed,) = (await client.candidates_list(state="promoted"))["candidates"]
            assert listed["evidence"][0]["fix"] == "pip install pyyaml"

    asyncio.run(main())


def test_call_timeout_cancels_the_call(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def slow(messages, max_tokens):
            await release.wait()
            return MODEL_SUMMARY

        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file, summarizer=slow) as client:
            params = {"session_id": "slow", "messages": long_conversation(), "config": CLIENT_SUMMARIZER_CONFIG}
            with pytest.raises(asyncio.TimeoutError) as timed_out:
                await client.call("context.prepare", params, timeout=0.5)
            assert isinstance(timed_out.value.__cause__, RequestCancelled)
            release.set()
            # The cancelled call created nothing.
            with pytest.raises(UnknownSession):
                await client.inspect("slow")

    asyncio.run(main())


def test_errors_map_to_classes(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        client = await AsyncClient.spawn(satchel_bin, workspace, stderr=log_file)
        try:
            results = await asyncio.gather(
                client.read("/etc/passwd"), client.read("missing.txt"), return_exceptions=True
            )
            assert isinstance(results[0], PathOutsideWorkspace) and isinstance(results[1], FileNotFound)
        finally:
            await client.aclose()
        assert client.process is not None and client.process.returncode == 0
        with pytest.raises(ConnectionClosed):
            await client.inspect("s")

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_summarizer_callback(satchel_bin: str, workspace: Path, log_file: Path, kind: str) -> None:
    calls = []

    async def summarize_async(messages, max_tokens):
        calls.append(max_tokens)
        await asyncio.sleep(0)
        return MODEL_SUMMARY

    def summarize_sync(messages, max_tokens):  # runs in a worker thread
        calls.append(max_tokens)
        return MODEL_SUMMARY

    summarize = summarize_async if kind == "async" else summarize_sync

    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file, summarizer=summarize) as client:
            progress = []
            client.on_notification("$/progress", progress.append)
            result = await client.prepare("summarized", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
            (compacted,) = [a for a in result["actions"] if a["kind"] == "compacted"]
            assert compacted["summarizer"] == "client"
            assert calls and progress

    asyncio.run(main())


def test_cancelling_a_call_leaves_the_client_usable(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def slow(messages, max_tokens):
            await release.wait()
            return MODEL_SUMMARY

        async with AsyncClient.spawn(satchel_bin, workspace, stderr=log_file, summarizer=slow) as client:
            busy = asyncio.ensure_future(
                client.prepare("slow", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
            )
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(busy), 0.5)
            busy.cancel()
            with pytest.raises(asyncio.CancelledError):
                await busy
            release.set()
            assert (await client.initialize())["server_name"] == "satchel"

    asyncio.run(main())


def test_connect_to_the_socket(
    satchel_bin: str, serve_help: str, socket_path: Path, workspace: Path, log_file: Path
) -> None:
    if "--socket" not in serve_help:
        pytest.skip("this satchel has no `serve --socket` yet (`satchel serve --help` does not mention it)")
    sock = socket_path

    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, args=["--socket", str(sock)], stderr=log_file) as agent:
            await agent.prepare("shared", messages=openai_conversation(tool_log(lines=10)))
            for _ in range(400):
                if os.path.exists(sock):
                    break
                await asyncio.sleep(0.05)
            async with AsyncClient.connect(sock) as observer:
                assert (await observer.inspect("shared"))["messages"] == 3
                events: "asyncio.Queue[dict]" = asyncio.Queue()
                observer.on_notification("context.event", events.put_nowait)
                await observer.watch("shared")
                await agent.prepare("shared", append=[{"role": "assistant", "content": "Done."}])
                event = await asyncio.wait_for(events.get(), 10)
                assert (event["session_id"], event["messages"]) == ("shared", 4)
            assert (await agent.inspect("shared"))["messages"] == 4

    asyncio.run(main())
