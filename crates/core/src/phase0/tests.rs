//! Phase 0 extraction: one `check` helper takes a span and the memory lines it must yield.

use serde_json::{Value, json};

use super::*;

/// An OpenAI assistant message with one call `id` of `name`.
fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]})
}

fn result(id: &str, output: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": output})
}

/// A span of `calls` (name, arguments), each answered with "ok".
fn calls(calls: &[(&str, Value)]) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .flat_map(|(i, (name, args))| {
            let id = format!("c{i}");
            [call(&id, name, args.clone()), result(&id, "ok")]
        })
        .collect()
}

fn check(messages: &[Value], format: MessageFormat, expect: &[&str]) {
    let got = extract(messages, format).lines();
    assert_eq!(got, expect, "phase 0 of {messages:#?}");
}

#[test]
fn write_tools_name_their_files() {
    check(
        &calls(&[
            ("write_file", json!({"path": "src/a.rs", "content": "x"})),
            ("edit_file", json!({"file_path": "src/b.rs", "old": "x", "new": "y"})),
            ("Write", json!({"file_path": "/repo/c.py", "content": ""})),
            (
                "Edit",
                json!({"file_path": "/repo/c.py", "old_string": "a", "new_string": "b"}),
            ),
            ("MultiEdit", json!({"file_path": "d.ts", "edits": []})),
            ("create_file", json!({"filename": "notes.md"})),
            (
                "str_replace_editor",
                json!({"command": "create", "path": "/w/e.rs", "file_text": ""}),
            ),
            (
                "str_replace_based_edit_tool",
                json!({"command": "str_replace", "path": "/w/f.rs"}),
            ),
            (
                "str_replace_based_edit_tool",
                json!({"command": "insert", "path": "/w/g.rs"}),
            ),
        ]),
        MessageFormat::Openai,
        &[
            "Modified file: src/a.rs",
            "Modified file: src/b.rs",
            "Modified file: /repo/c.py",
            "Modified file: d.ts",
            "Modified file: notes.md",
            "Modified file: /w/e.rs",
            "Modified file: /w/f.rs",
            "Modified file: /w/g.rs",
        ],
    );
}

#[test]
fn viewing_and_reading_change_no_file() {
    check(
        &calls(&[
            (
                "str_replace_based_edit_tool",
                json!({"command": "view", "path": "/w/a.rs"}),
            ),
            ("str_replace_editor", json!({"command": "undo_edit", "path": "/w/a.rs"})),
            ("read_file", json!({"path": "src/lib.rs"})),
            ("grep", json!({"pattern": "fn main", "path": "src"})),
        ]),
        MessageFormat::Openai,
        &[],
    );
}

#[test]
fn patches_name_every_file_in_their_headers() {
    let codex = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/new.rs\n+fn f() {}\n\
                 *** Delete File: old.rs\n*** Update File: src/m.rs\n*** Move to: src/moved.rs\n*** End Patch";
    let unified = "--- a/lib/x.py\t2026-01-01\n+++ b/lib/x.py\t2026-01-02\n@@ -1 +1 @@\n-a\n+b\n\
                   --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye";
    let messages = [
        call("p1", "apply_patch", json!({"input": codex})),
        result("p1", "Done!"),
        call("p2", "apply_patch", json!({"patch": unified})),
        result("p2", "ok"),
        // A custom tool's arguments are the raw patch, not JSON.
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "p3", "type": "function",
            "function": {"name": "apply_patch", "arguments": "*** Begin Patch\n*** Add File: raw.txt\n+hi\n*** End Patch"}}]}),
        result("p3", "ok"),
    ];
    check(
        &messages,
        MessageFormat::Openai,
        &[
            "Modified file: src/a.rs",
            "Modified file: src/new.rs",
            "Modified file: old.rs",
            "Modified file: src/m.rs",
            "Modified file: src/moved.rs",
            "Modified file: lib/x.py",
            "Modified file: gone.txt",
            "Modified file: raw.txt",
        ],
    );
}

#[test]
fn commands_skip_navigation_and_short_ones_and_are_cut() {
    let long = format!("cargo test --workspace -- {}", "x".repeat(120));
    let cut = format!("Executed: {}…", &long[..99]);
    check(
        &calls(&[
            ("bash", json!({"command": "cd /repo/crates/core"})),
            ("bash", json!({"command": "ls -la src/summary/extract"})),
            ("bash", json!({"command": "lsof -i :8080 -P -n"})),
            ("bash", json!({"command": "git status"})),
            ("shell", json!({"command": ["bash", "-lc", "cargo build --release"]})),
            ("execute_bash", json!({"command": "python -m pytest tests/"})),
            ("run_command", json!({"cmd": "npm run lint -- --fix"})),
            (
                "run_shell_command",
                json!({"command": "make -j8 all\n  && make install"}),
            ),
            (
                "Bash",
                json!({"command": "git diff --stat HEAD~3", "description": "diff"}),
            ),
            ("terminal", json!({"command": long})),
            ("bash", json!({"command": "python -m pytest tests/"})),
            ("read_file", json!({"command": "cargo test --all-targets"})),
        ]),
        MessageFormat::Openai,
        &[
            "Executed: cargo build --release",
            "Executed: python -m pytest tests/",
            "Executed: npm run lint -- --fix",
            "Executed: make -j8 all && make install",
            "Executed: git diff --stat HEAD~3",
            &cut,
        ],
    );
}

#[test]
fn errors_come_from_flags_and_from_failed_outcomes() {
    let messages = vec![
        json!({"role": "user", "content": "fix the build"}),
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cargo build -p satchel"}},
            {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "src/missing.rs"}},
            {"type": "tool_use", "id": "t3", "name": "Grep", "input": {"pattern": "error"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "   Compiling satchel\nerror[E0425]: cannot find value `x` in this scope\n  --> src/lib.rs:3:5"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": true, "content": [{"type": "text", "text": "File does not exist."}]},
            {"type": "tool_result", "tool_use_id": "t3", "content": "src/a.rs:12: error handling lives here"}]}),
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t4", "name": "Bash", "input": {"command": "cargo build -p satchel"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t4", "is_error": true, "content": format!("error: {}", "y".repeat(300))}]}),
    ];
    let phase0 = extract(&messages, MessageFormat::Anthropic);
    assert_eq!(phase0.commands, ["cargo build -p satchel"], "de-duplicated");
    assert_eq!(phase0.errors.len(), 3);
    assert!(phase0.errors[2].chars().count() <= 200 && phase0.errors[2].ends_with('…'));
    insta::assert_snapshot!("anthropic_errors", phase0.lines().join("\n"));
}

#[test]
fn a_span_that_starts_with_a_compacted_summary_is_skipped() {
    let mut span = calls(&[("bash", json!({"command": "cargo test --workspace"}))]);
    span.insert(
        0,
        json!({"role": "user", "content": "[COMPACTED]\n\n# Summary of previous conversation\n…"}),
    );
    check(&span, MessageFormat::Openai, &[]);
    // AceClaw's shape: a continuation instruction, then the marked assistant message.
    span[0] = json!({"role": "user", "content": "This session is being continued from a previous conversation."});
    span.insert(
        1,
        json!({"role": "assistant", "content": [{"type": "text", "text": "[COMPACTED]\n\nsummary"}]}),
    );
    span.insert(0, json!({"role": "system", "content": "You are a coding agent."}));
    check(&span, MessageFormat::Openai, &[]);
    // A marker later in the span is only a quote.
    span.remove(2);
    span.push(json!({"role": "user", "content": "[COMPACTED] means a summary"}));
    check(&span, MessageFormat::Openai, &["Executed: cargo test --workspace"]);
}

#[test]
fn an_empty_span_yields_nothing() {
    let phase0 = extract(&[], MessageFormat::Openai);
    assert!(phase0.is_empty());
    assert!(phase0.lines().is_empty());
}
