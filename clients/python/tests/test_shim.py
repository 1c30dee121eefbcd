"""What the shim adds around the protocol, the same in the TypeScript client: the daemon's log
level, and what ``set_summarizer`` sends and when."""

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from conftest import CLIENT_SUMMARIZER_CONFIG, MODEL_SUMMARY, long_conversation

from satchel_client import AsyncClient, Client


def script(directory: Path, body: str) -> Path:
    """An executable shell script standing in for satchel."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "satchel"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def recording_log_level(tmp_path: Path, satchel_bin: str) -> Path:
    """Records the SATCHEL_LOG it was given in ``<path>.log``, then runs the real satchel."""
    return script(tmp_path / "bin", f'printf \'%s\' "${{SATCHEL_LOG-<unset>}}" > "$0.log"\nexec \'{satchel_bin}\' "$@"')


def recording_input(tmp_path: Path, satchel_bin: str) -> Path:
    """Records every line the client sends in ``<path>.in``, and passes it on to the real satchel."""
    return script(tmp_path / "bin", f'tee "$0.in" | \'{satchel_bin}\' "$@"')


def sent(bin_: Path) -> list:
    return [json.loads(line) for line in Path(f"{bin_}.in").read_text().splitlines() if line]


@pytest.mark.parametrize(
    "environment, env, expected",
    [(None, None, "warn"), ("debug", None, "debug"), ("debug", {"SATCHEL_LOG": "info"}, "info")],
    ids=["default", "environment", "env-option"],
)
def test_satchel_logs_warnings_only_unless_told(
    satchel_bin: str, tmp_path: Path, monkeypatch, environment, env, expected
) -> None:
    if environment is None:
        monkeypatch.delenv("SATCHEL_LOG", raising=False)
    else:
        monkeypatch.setenv("SATCHEL_LOG", environment)
    bin_ = recording_log_level(tmp_path, satchel_bin)
    with Client.spawn(bin_, tmp_path / "ws", env=env, stderr=tmp_path / "log") as client:
        client.initialize()
    assert Path(f"{bin_}.log").read_text() == expected

    async def main() -> None:
        async with AsyncClient.spawn(bin_, tmp_path / "ws", env=env, stderr=tmp_path / "log") as client:
            await client.initialize()

    asyncio.run(main())
    assert Path(f"{bin_}.log").read_text() == expected


def test_the_default_log_has_no_info_lines(satchel_bin: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SATCHEL_LOG", raising=False)
    log = tmp_path / "satchel.log"
    with Client.spawn(satchel_bin, tmp_path / "ws", stderr=log) as client:
        client.prepare("s", messages=[{"role": "user", "content": "hi"}])
    assert " INFO " not in log.read_text()


def test_a_missing_satchel_bin_names_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SATCHEL_BIN", str(tmp_path / "no-such-satchel"))
    with pytest.raises(FileNotFoundError, match="no-such-satchel.*SATCHEL_BIN"):
        Client.spawn()


# --- set_summarizer: what it sends, and when (as the TypeScript client's setSummarizer) ---

EXPECTED_INITIALIZE = [
    {"client_info": {"name": "satchel-client (python)", "version": "0.1.0"}, "capabilities": {"summarizer_complete": True, "window": {"workDoneProgress": True}}},
    {"client_info": {"name": "my agent"}, "capabilities": {"summarizer_complete": True, "window": {"workDoneProgress": True}}},
    {"client_info": {"name": "satchel-client (python)", "version": "0.1.0"}, "capabilities": {"summarizer_complete": False, "window": {"workDoneProgress": True}}},
]


def test_set_summarizer_sends_initialize_declaring_it_at_once(satchel_bin: str, tmp_path: Path) -> None:
    bin_ = recording_input(tmp_path, satchel_bin)
    with Client.spawn(bin_, tmp_path / "ws", stderr=tmp_path / "log") as client:
        assert client.set_summarizer(lambda messages, max_tokens: "summary")["server_name"] == "satchel"
        client.initialize(client_info={"name": "my agent"})
        client.initialize(capabilities={"summarizer_complete": False})  # an explicit value wins
    messages = sent(bin_)
    assert [m["method"] for m in messages] == ["initialize"] * 3
    assert [m["params"] for m in messages] == EXPECTED_INITIALIZE


def test_async_set_summarizer_sends_the_same(satchel_bin: str, tmp_path: Path) -> None:
    bin_ = recording_input(tmp_path, satchel_bin)

    async def main() -> None:
        async with AsyncClient.spawn(bin_, tmp_path / "ws", stderr=tmp_path / "log") as client:
            assert (await client.set_summarizer(lambda messages, max_tokens: "summary"))["server_name"] == "satchel"
            await client.initialize(client_info={"name": "my agent"})
            await client.initialize(capabilities={"summarizer_complete": False})

    asyncio.run(main())
    assert [m["params"] for m in sent(bin_)] == EXPECTED_INITIALIZE


def test_a_summarizer_set_after_a_plain_initialize_is_used(satchel_bin: str, tmp_path: Path) -> None:
    asked = []
    with Client.spawn(satchel_bin, tmp_path / "ws", stderr=tmp_path / "log") as client:
        client.initialize()  # declares nothing
        client.set_summarizer(lambda messages, max_tokens: asked.append(max_tokens) or MODEL_SUMMARY)
        result = client.prepare("late", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
    (compacted,) = [a for a in result["actions"] if a["kind"] == "compacted"]
    assert compacted["summarizer"] == "client" and asked


def test_a_summarizer_that_returns_no_str_is_an_error_reply(satchel_bin: str, tmp_path: Path) -> None:
    with Client.spawn(satchel_bin, tmp_path / "ws", stderr=tmp_path / "log") as client:
        client.set_summarizer(lambda messages, max_tokens: 42)
        result = client.prepare("bad", messages=long_conversation(), config=CLIENT_SUMMARIZER_CONFIG)
    (compacted,) = [a for a in result["actions"] if a["kind"] == "compacted"]
    assert compacted["summarizer"].startswith("extractive (fallback")
    assert "TypeError: the summarizer returned int, not str" in compacted["summarizer"]
