"""Shared fixtures: the real satchel binary, a fresh workspace per test, and test conversations.

The tests talk to the real daemon, not a mock, because the client's job is to match what
the daemon actually sends (ids, out-of-order replies, its own requests, error codes).
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from satchel_client import Client

#: clients/python/tests -> the repository root.
REPO = Path(__file__).resolve().parents[3]
PROTOCOL = REPO / "protocol" / "openrpc.json"
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="session")
def satchel_bin() -> str:
    path = os.environ.get("SATCHEL_BIN") or str(REPO / "target" / "debug" / "satchel")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no satchel binary at {path}: run `cargo build -p satchel` or set SATCHEL_BIN")
    return path


@pytest.fixture(scope="session")
def serve_help(satchel_bin: str) -> str:
    return subprocess.run([satchel_bin, "serve", "--help"], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def openrpc() -> dict:
    return json.loads(PROTOCOL.read_text(encoding="utf-8"))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def socket_path():
    """A socket path well under the ~107-byte limit of Unix socket addresses (pytest's
    tmp_path is too long once satchel adds the temporary name it binds before renaming)."""
    directory = tempfile.mkdtemp(prefix="satchel-py-", dir="/tmp")
    yield Path(directory) / "s.sock"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    """satchel's stderr, kept out of pytest's output but there to read when a test fails."""
    return tmp_path / "satchel.log"


@pytest.fixture
def client(satchel_bin: str, workspace: Path, log_file: Path):
    with Client.spawn(satchel_bin, workspace=workspace, stderr=log_file) as c:
        yield c


def tool_log(lines: int = 5000, tag: str = "") -> str:
    """A test log far over the 50,000-byte offload limit, with its failure at the end."""
    return "\n".join(f"test_{tag}{i} ... ok" for i in range(lines)) + f"\nFAILED test_{tag}parse: expected 3, got 4"


def openai_conversation(log: str) -> list:
    return [
        {"role": "user", "content": "Run the tests and fix what fails."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": log},
    ]


def anthropic_conversation(log: str) -> list:
    return [
        {"role": "user", "content": "Run the tests and fix what fails."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running them."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "pytest"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": log}]},
    ]


def long_conversation(turns: int = 14) -> list:
    """Plain turns that overflow a 4,096-token window, so satchel compacts."""
    messages = []
    for i in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Step {i}: please refactor module_{i}.py so parse_{i}() handles empty input. "
                + "The parser must stay backwards compatible with the old config format. " * 12,
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": f"Done with step {i}: parse_{i}() now returns an empty list for empty input. "
                + "I kept the old code path for legacy configs and added a regression test. " * 12,
            }
        )
    return messages


#: A summary in the format satchel's model prompt asks for (it checks the `##` sections).
MODEL_SUMMARY = """## Goal
- Refactor the parsers to handle empty input (client model)

## Constraints & Preferences
- Stay backwards compatible with the old config format

## Progress
### Done
- [x] Refactored the first modules

### In Progress
- [ ] The remaining modules

### Blocked
- (none)

## Key Decisions
- **Keep the legacy path**: old configs must still load

## Next Steps
1. Continue with the next module

## Critical Context
- (none)
"""

#: Makes compaction happen on `long_conversation` and asks the client for the summary.
CLIENT_SUMMARIZER_CONFIG = {"summarizer": "client", "max_input_length": 4096, "summary_max_tokens": 800}


#: Three system-prompt sections as an AceClaw-style client sends them with every prepare.
PROMPT_SECTIONS = [
    {
        "key": "memory:soul",
        "content": "You are a careful engineer. Never push to main without review.",
        "priority": 100,
        "protected": True,
        "source_type": "memory",
        "reason": "identity",
    },
    {
        "key": "rules:python",
        "content": "Python rules: format with black, type every function, keep tests under tests/.",
        "priority": 88,
        "source_type": "rules",
        "paths": ["src/**/*.py", "tests/**/*.py"],
    },
    {
        "key": "git:status",
        "content": "On branch main. Modified: src/parser.py (ParseError handling).",
        "priority": 40,
        "source_type": "git",
        "scope": "task-local",
    },
]


#: Memory tests rank by BM25 alone, whatever embedding key the environment holds: the results
#: do not depend on a network or a model.
MEMORY_ENV = {"SATCHEL_EMBEDDING_BACKEND": "none"}

#: A memory file; line 6 holds the fact the tests search for.
MEMORY_NOTE = """# Project notes

## Decisions

- We deploy with the blue-green script on Fridays.
- The staging database is called zanzibar.
"""

#: Daily logs for `memory.merge`: two inside the merged days (one entry repeated across them),
#: and one after `through`, which the merge must leave alone.
DAILY_LOGS = {
    "memory/2026-01-05.md": "## Decisions\n\n- Use SQLite for the session index.\n",
    "memory/2026-01-06.md": (
        "## Preferences\n\n- The user prefers answers in French.\n- Use SQLite for the session index.\n"
        "\n## Goal\n\n- ship the release\n"
    ),
    "memory/2026-01-07.md": "## Notes\n\n- Written after the merged days.\n",
}


@pytest.fixture
def memory_client(satchel_bin: str, workspace: Path, log_file: Path):
    with Client.spawn(satchel_bin, workspace=workspace, env=MEMORY_ENV, stderr=log_file) as c:
        yield c
