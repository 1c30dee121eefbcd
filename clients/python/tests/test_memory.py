"""Long-term memory (`memory.*`, `context.prepare`'s `memory`) against the real daemon."""

import asyncio
from pathlib import Path

import pytest
from conftest import DAILY_LOGS, MEMORY_ENV, MEMORY_NOTE

from satchel_client import AsyncClient, Client, InvalidParams, MemoryUnavailable, SatchelError


def test_write_search_get_append(memory_client: Client, workspace: Path) -> None:
    path = "memory/projects/infra.md"
    written = memory_client.memory_write(path, MEMORY_NOTE)
    assert written["path"] == path
    assert (written["bytes"], written["lines"]) == (len(MEMORY_NOTE.encode()), 6)
    assert written["chunks_indexed"] >= 1 and not written.get("warnings")
    assert (workspace / path).read_text(encoding="utf-8") == MEMORY_NOTE

    # Searchable as soon as the write returns, cited by file and line.
    found = memory_client.memory_search("zanzibar", mode="bm25")
    assert found["mode"] == "bm25"
    (hit,) = found["results"]
    assert (hit["path"], hit["start_line"], hit["end_line"], hit["source"]) == (path, 6, 6, "bm25")
    assert "zanzibar" in hit["snippet"] and 0 < hit["score"] <= 1

    # The hit's lines, read back.
    lines = memory_client.memory_get(path, start_line=hit["start_line"], end_line=hit["end_line"])
    assert lines == {
        "path": path,
        "start_line": 6,
        "end_line": 6,
        "total_lines": 6,
        "text": "- The staging database is called zanzibar.\n",
    }

    appended = memory_client.memory_append(path, "- Backups run nightly to the bucket kestrel.\n")
    assert appended["lines"] == 7 and appended["chunks_indexed"] >= 1
    (hit,) = memory_client.memory_search("kestrel backups", mode="bm25", max_results=3, min_score=0.0)["results"]
    assert (hit["path"], hit["start_line"]) == (path, 7)
    whole = memory_client.memory_get(path)
    assert whole["text"] == MEMORY_NOTE + "- Backups run nightly to the bucket kestrel.\n"
    assert (whole["start_line"], whole["end_line"], whole["total_lines"]) == (1, 7, 7)


def test_merge_folds_the_daily_logs_into_memory_md(memory_client: Client) -> None:
    memory_client.memory_write("MEMORY.md", "# MEMORY\n\n## Notes\n\n- The CI box has 2 cores.\n")
    for path, text in DAILY_LOGS.items():
        memory_client.memory_write(path, text)

    merged = memory_client.memory_merge(through="2026-01-06")
    assert merged["merged"] == ["memory/2026-01-05.md", "memory/2026-01-06.md"]
    # SQLite (once: the second day repeats it) and French; the day's goal stays in its log.
    assert (merged["added"], merged["duplicates"]) == (2, 1)
    assert merged["summarizer"] == "extractive"
    assert merged.get("backup"), f"no backup of the previous MEMORY.md: {merged}"

    memory = memory_client.memory_get("MEMORY.md")["text"]
    assert "- The user prefers answers in French. (from memory/2026-01-06.md)" in memory
    assert "- Use SQLite for the session index. (from memory/2026-01-05.md)" in memory
    assert "- The CI box has 2 cores." in memory
    assert "ship the release" not in memory and "after the merged days" not in memory
    # Merged entries are searchable in MEMORY.md.
    hits = memory_client.memory_search("French answers", mode="bm25")["results"]
    assert "MEMORY.md" in [h["path"] for h in hits]

    again = memory_client.memory_merge(through="2026-01-06")
    assert (again["added"], again["duplicates"]) == (0, 3)
    assert memory_client.memory_get("MEMORY.md")["text"] == memory


def test_status_names_the_index(memory_client: Client) -> None:
    memory_client.memory_write("MEMORY.md", MEMORY_NOTE)
    status = memory_client.memory_status()
    assert status["index_path"] == "index/memory.sqlite"
    assert status["modes"] == ["bm25"]
    assert status["embedding"] is None  # SATCHEL_EMBEDDING_BACKEND=none
    assert isinstance(status["index"], dict) and isinstance(status["watcher"], dict)


def test_a_path_outside_the_memory_files_is_invalid_params(memory_client: Client, workspace: Path) -> None:
    for call in (
        lambda: memory_client.memory_write("../x.md", "escape"),
        lambda: memory_client.memory_append("../x.md", "escape"),
        lambda: memory_client.memory_write("notes.txt", "not markdown under memory/"),
        lambda: memory_client.memory_get("../x.md"),
    ):
        with pytest.raises(InvalidParams) as invalid:
            call()
        assert invalid.value.code == -32602 and isinstance(invalid.value, SatchelError)
    assert not (workspace.parent / "x.md").exists()
    assert not (workspace / "notes.txt").exists()


def test_prepare_recalls_memory_into_the_system_prompt(memory_client: Client) -> None:
    memory_client.memory_write("MEMORY.md", MEMORY_NOTE)
    messages = [{"role": "user", "content": "Which database does staging use?"}]
    result = memory_client.prepare("recall", messages=messages, memory={})
    assert "The staging database is called zanzibar." in result["system"]
    assert "memory:recall" in [s["key"] for s in result["prompt"]["sections"]]
    # Without `memory`, nothing is recalled.
    plain = memory_client.prepare("plain", messages=messages)
    assert "zanzibar" not in str(plain.get("system") or "")


def test_memory_unavailable_when_the_index_is_off(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    env = {**MEMORY_ENV, "SATCHEL_MEMORY_INDEX_ENABLED": "false"}
    with Client.spawn(satchel_bin, workspace, env=env, stderr=log_file) as client:
        # The files work without the index.
        assert client.memory_write("MEMORY.md", MEMORY_NOTE)["chunks_indexed"] == 0
        assert client.memory_get("MEMORY.md", start_line=6)["text"] == "- The staging database is called zanzibar.\n"
        for call in (
            lambda: client.memory_search("zanzibar"),
            client.memory_status,
            lambda: client.memory_merge(through="2026-01-06"),
            lambda: client.prepare("s", messages=[{"role": "user", "content": "zanzibar?"}], memory=True),
        ):
            with pytest.raises(MemoryUnavailable) as unavailable:
                call()
            assert unavailable.value.code == -32010


def test_async_memory_methods(satchel_bin: str, workspace: Path, log_file: Path) -> None:
    async def main() -> None:
        async with AsyncClient.spawn(satchel_bin, workspace, env=MEMORY_ENV, stderr=log_file) as client:
            await client.memory_write("MEMORY.md", MEMORY_NOTE)
            found = await client.memory_search("zanzibar", mode="bm25")
            (hit,) = found["results"]
            assert (hit["path"], hit["start_line"], hit["source"]) == ("MEMORY.md", 6, "bm25")
            assert (await client.memory_get("MEMORY.md", 6, 6))["text"].endswith("zanzibar.\n")
            assert (await client.memory_append("MEMORY.md", "- Backups go to kestrel.\n"))["lines"] == 7
            for path, text in DAILY_LOGS.items():
                await client.memory_write(path, text)
            merged = await client.memory_merge("2026-01-06")
            assert merged["added"] == 2
            assert (await client.memory_status())["index_path"] == "index/memory.sqlite"
            with pytest.raises(InvalidParams):
                await client.memory_write("../x.md", "escape")
            messages = [{"role": "user", "content": "Which database does staging use?"}]
            result = await client.prepare("recall", messages=messages, memory=True)
            assert "zanzibar" in result["system"]

    asyncio.run(main())
