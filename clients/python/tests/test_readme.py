"""Every ``python`` block of the README, run as written against the real daemon.

Self-contained examples run as they are; snippets run after the names they take from their
surroundings (``satchel``, ``result``, ``new_messages``, ``model``, ...) are defined, with stand-ins
for the caller's model and OpenAI client.
"""

import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import MODEL_SUMMARY, README, long_conversation

from satchel_client import Client

#: Every ```python block (some are indented inside a list item), in order.
BLOCKS = [
    textwrap.dedent(m.group(2))
    for m in re.finditer(r"^( *)```python\n(.*?)^\1```", README.read_text(encoding="utf-8"), re.M | re.S)
]


def test_the_readme_has_its_examples() -> None:
    assert len(BLOCKS) >= 6, BLOCKS
    assert any("AsyncClient" in block and "asyncio.run(main())" in block for block in BLOCKS), "the async example"


class FakeOpenAI:
    """Answers ``chat.completions.create`` with a summary, counting the calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, model: str, messages: list, max_tokens: int) -> SimpleNamespace:
        assert isinstance(messages, list) and isinstance(max_tokens, int)
        self.calls += 1
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=MODEL_SUMMARY))])


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_readme_block_runs_as_written(index: int, satchel_bin: str, tmp_path: Path, monkeypatch, capsys) -> None:
    block = BLOCKS[index]
    monkeypatch.setenv("SATCHEL_BIN", satchel_bin)
    monkeypatch.setenv("SATCHEL_HOME", str(tmp_path / "home"))
    # A small window, so a full history compacts; memory search ranks by BM25 alone.
    monkeypatch.setenv("SATCHEL_MAX_INPUT_LENGTH", "4096")
    monkeypatch.setenv("SATCHEL_SUMMARY_MAX_TOKENS", "800")
    monkeypatch.setenv("SATCHEL_EMBEDDING_BACKEND", "none")
    monkeypatch.chdir(tmp_path)
    history = long_conversation()
    openai_client = FakeOpenAI()
    with Client.spawn(workspace=tmp_path / "snippets", stderr=tmp_path / "satchel.log") as satchel:
        # The snippets' surroundings: a session "chat-42" holding the first two messages.
        namespace = {
            "__name__": "__readme__",
            "satchel": satchel,
            "result": satchel.prepare("chat-42", messages=history[:2]),
            "new_messages": history[2:4],
            "full_history": history,
            "history": history,
            "soul": "You are a careful engineer.",
            "rules": "Format with black; type every function.",
            "status": "On branch main.",
            "model": lambda system, messages: SimpleNamespace(
                content="Done.", usage=SimpleNamespace(input_tokens=1200)
            ),
            "openai_client": openai_client,
        }
        exec(compile(block, f"README.md block {index + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    if "<<<TRUNCATED>>>" in block:
        assert re.search(r"^\d+ tokens of \d+$", out, re.M) and "context.read" in out, out
    if "AsyncClient" in block:
        assert re.search(r"^async-a \d+ tokens; async-b \d+ tokens$", out, re.M), out
        assert "['async-a', 'async-b']" in out, out
    if "openai_client" in block:
        assert openai_client.calls >= 1, "the summarizer was never asked"
    if "memory_search" in block:
        assert re.search(r"^memory/2026-11-24\.md:1 ", out, re.M), out
        assert "zanzibar" in namespace["text"]
    if "StaleSession" in block:
        assert namespace["result"]["reconciliation"]["session_messages"] == 4
    if "report_usage" in block:
        assert namespace["result"]["system"]
