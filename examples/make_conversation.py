"""Generates conversation.openai.json, the example conversation bundled into `satchel demo`.

Synthetic (written for satchel, no third-party text): an agent fixes a failing test, with the
kinds of tool output that fill context windows: a long test log whose error is at the end, a
source file read, a Markdown guide, a grep, and a second long log.
Run: python3 examples/make_conversation.py
"""
import json
import pathlib

def test_log(failing: bool) -> str:
    lines = [f"   Compiling dep-{i:03} v0.{i % 7}.{i % 5}" for i in range(120)]
    lines.append("    Finished `test` profile [unoptimized + debuginfo] target(s) in 41.27s")
    lines.append("     Running unittests src/lib.rs (target/debug/deps/parser-3f9a1c2b)")
    lines.append("running 1400 tests")
    for i in range(1400):
        name = f"parser::tests::case_{i:04}_{'utf8' if i % 9 == 0 else 'ascii'}_roundtrip"
        lines.append(f"test {name} ... ok")
    if failing:
        lines += [
            "test parser::tests::handles_unicode ... FAILED",
            "",
            "failures:",
            "",
            "---- parser::tests::handles_unicode stdout ----",
            "thread 'parser::tests::handles_unicode' panicked at src/lexer.rs:142:9:",
            "byte index 7 is not a char boundary; it is inside 'é' (bytes 6..8) of `naïve café`",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
            "",
            "failures:",
            "    parser::tests::handles_unicode",
            "",
            "test result: FAILED. 1400 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.31s",
            "",
            "error: test failed, to rerun pass `-p parser --lib`",
        ]
    else:
        lines += [
            "test parser::tests::handles_unicode ... ok",
            "",
            "test result: ok. 1401 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.28s",
        ]
    return "\n".join(lines) + "\n"

LEXER = "\n".join(
    ["//! Lexer for the configuration language.", "", "use crate::token::{Token, Span};", ""]
    + [f"fn helper_{i}(input: &str) -> usize {{ input.len() + {i} }}" for i in range(60)]
    + [
        "pub fn next_token(input: &str, pos: usize) -> Option<(Token, Span)> {",
        "    let rest = &input[pos..];",
        "    let end = pos + 1; // BUG: assumes one byte per character",
        "    Some((Token::Char(input[pos..end].to_string()), Span::new(pos, end)))",
        "}",
    ]
) + "\n"

GUIDE = "\n".join(
    ["# Contributing to parser", "", "## Rules", "", "- Never change the public API without an RFC.",
     "- Every bug fix comes with a regression test.", "- Run `cargo test -p parser` before pushing.", ""]
    + [f"### Section {i}\n\nGuidance paragraph {i}: keep functions small, document invariants, prefer `char_indices` over byte arithmetic when slicing text.\n" for i in range(40)]
)

GREP = "\n".join(f"src/{f}.rs:{10 + i}:    let end = pos + {i % 3 + 1}; // byte arithmetic" for i, f in enumerate(["lexer", "span", "token", "cursor"] * 30)) + "\n"

def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

messages = [
    {"role": "system", "content": "You are a careful coding agent. Use the tools to inspect and change the repository."},
    {"role": "user", "content": "The test `parser::tests::handles_unicode` fails since yesterday. Find out why and fix it. Don't change the public API."},
    {"role": "assistant", "content": "Let me run the test suite first.", "tool_calls": [call("call_1", "bash", {"command": "cargo test -p parser 2>&1"})]},
    {"role": "tool", "tool_call_id": "call_1", "content": test_log(failing=True)},
    {"role": "assistant", "content": "The panic is in src/lexer.rs:142. Reading the file and the contribution guide.",
     "tool_calls": [call("call_2", "read_file", {"path": "src/lexer.rs"}), call("call_3", "read_file", {"path": "CONTRIBUTING.md"})]},
    {"role": "tool", "tool_call_id": "call_2", "content": LEXER},
    {"role": "tool", "tool_call_id": "call_3", "content": GUIDE},
    {"role": "assistant", "content": None, "tool_calls": [call("call_4", "bash", {"command": "grep -rn 'pos + ' src/"})]},
    {"role": "tool", "tool_call_id": "call_4", "content": GREP},
    {"role": "assistant", "content": "next_token assumes one byte per character. I'll advance by the length of the next char instead.",
     "tool_calls": [call("call_5", "apply_patch", {"path": "src/lexer.rs", "patch": "-    let end = pos + 1;\n+    let end = pos + rest.chars().next()?.len_utf8();"})]},
    {"role": "tool", "tool_call_id": "call_5", "content": "Patched src/lexer.rs (1 hunk)."},
    {"role": "assistant", "content": None, "tool_calls": [call("call_6", "bash", {"command": "cargo test -p parser 2>&1"})]},
    {"role": "tool", "tool_call_id": "call_6", "content": test_log(failing=False)},
    {"role": "assistant", "content": "Fixed: `next_token` in src/lexer.rs now advances by `len_utf8()` of the next character, so multi-byte input no longer slices inside a character. All 1401 tests pass; the public API is unchanged.", "cache_control": {"type": "ephemeral"}},
    {"role": "user", "content": "Thanks! Please also add a regression test for CJK input."},
]

out = pathlib.Path(__file__).with_name("conversation.openai.json")
out.write_text(json.dumps({"messages": messages}, indent=1, ensure_ascii=False) + "\n")
print(f"wrote {out} ({out.stat().st_size} bytes, {len(messages)} messages)")
