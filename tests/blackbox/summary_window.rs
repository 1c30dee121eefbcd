//! How compaction's summary behaves against the window, through the real binary: its budget
//! scales with the window, a compaction that cannot make the request smaller is skipped once
//! and not retried on every call, each compaction's `tokens_after` is the size of the request
//! returned, and the daily memory note holds only what is new.

use serde_json::{Value, json};

use crate::support::builders::{call_message, tool_result, user};
use crate::support::trajectories::Format;
use crate::support::{Daemon, actions};

/// An assistant turn running `command` with the `bash` tool under call `id`.
fn bash_call(id: &str, command: &str) -> Value {
    call_message(
        Format::Openai,
        id,
        "bash",
        &json!({"command": command}),
        "Let's run it.",
    )
}

/// Appends `messages` to session `s` (creating it on the first call) with `config`.
fn prepare_configured(d: &mut Daemon, first: bool, messages: Vec<Value>, config: &Value) -> Value {
    let key = if first { "messages" } else { "append" };
    d.call(
        "context.prepare",
        json!({"session_id": "s", key: messages, "config": config}),
    )
}

/// A coding loop: each step runs a build over a long output.
fn step(i: usize) -> Vec<Value> {
    let id = format!("c{i}");
    let output = format!(
        "compiling module {i}\n{}\nFinished module {i}",
        "warning: unused variable\n".repeat(40)
    );
    vec![
        bash_call(&id, &format!("cargo build -p module_{i}")),
        tool_result(&id, &output),
    ]
}

/// Runs 40 build steps in session `s`, the user's messages from `requests` (by step) coming
/// first in their step; hands every result to `check` and returns how many compactions ran.
fn build_loop(
    d: &mut Daemon,
    config: &Value,
    requests: impl Fn(usize) -> Option<Value>,
    mut check: impl FnMut(&Value),
) -> usize {
    let mut compactions = 0;
    for i in 0..40 {
        let mut messages: Vec<Value> = requests(i).into_iter().collect();
        messages.extend(step(i));
        let result = prepare_configured(d, i == 0, messages, config);
        compactions += actions(&result, "compacted").len();
        check(&result);
    }
    assert!(compactions >= 2, "the test lost its point: {compactions} compactions");
    compactions
}

#[test]
fn the_summary_budget_is_at_most_a_quarter_of_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    // At most a quarter of the window, whatever the share and the floor: a 2048-token window gets 512.
    let config = json!({"max_input_length": 2048});
    let request =
        |i| (i == 0).then(|| user("Build every module and keep the warnings as they are, do not silence them."));
    build_loop(&mut d, &config, request, |result| {
        assert!(
            result["tokens"]["summary"].as_u64().unwrap() <= 512,
            "{}",
            result["tokens"]
        );
        for compacted in actions(result, "compacted") {
            assert_eq!(
                compacted["tokens_after"], result["tokens"]["total"],
                "tokens_after is the size of the request returned"
            );
        }
    });
    d.shutdown();
}

#[test]
fn a_compaction_that_cannot_shrink_the_request_is_not_retried_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let config = json!({"max_input_length": 1024});
    // A small step, then one big result that must stay (it is the newest turn): all a
    // compaction could replace is the small step, and its summary would be larger.
    let big: String = (0..160).map(|i| format!("line {i} of the build log\n")).collect();
    let first = prepare_configured(
        &mut d,
        true,
        vec![
            user("Build the parser."),
            bash_call("a", "ls"),
            tool_result("a", "src"),
            bash_call("b", "cargo build -p parser"),
            tool_result("b", &big),
        ],
        &config,
    );
    assert!(first["tokens"]["total"].as_u64().unwrap() >= 819, "{}", first["tokens"]);
    let skipped = actions(&first, "compaction_failed");
    assert_eq!(skipped.len(), 1, "{first}");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("compaction skipped: the summary"),
        "{}",
        skipped[0]
    );
    assert!(actions(&first, "compacted").is_empty());
    // The next calls add little: the compaction is not tried again (no summariser run, no
    // report), until a summary's worth of new messages has accrued.
    let mut retried_at = None;
    for i in 0..40 {
        let id = format!("s{i}");
        let result = prepare_configured(
            &mut d,
            false,
            vec![bash_call(&id, "cargo check"), tool_result(&id, "ok")],
            &config,
        );
        if !actions(&result, "compaction_failed").is_empty() || !actions(&result, "compacted").is_empty() {
            retried_at = Some(i);
            break;
        }
        if let Some(reason) = result["over_limit"].as_str() {
            assert!(reason.contains("could not make the request smaller"), "{reason}");
        }
    }
    let retried_at = retried_at.expect("tried again once enough had accrued");
    assert!(retried_at >= 5, "retried after only {retried_at} small steps");
    d.shutdown();
}

#[test]
fn the_daily_memory_note_holds_only_what_is_new() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let config = json!({"max_input_length": 2048});
    let constraint = "Never silence a compiler warning with an allow attribute.";
    let request = |i| match i {
        0 => Some(user(&format!("Build every module. {constraint}"))),
        // A later request, so the first (the newest user message until then) can be compacted.
        3 => Some(user("Also build the docs when the modules are done.")),
        _ => None,
    };
    build_loop(&mut d, &config, request, |_| {});
    d.shutdown();
    let notes: String = std::fs::read_dir(dir.path().join("memory"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(notes.matches("## Compaction of session `s`").count() >= 1, "{notes}");
    assert_eq!(
        notes.matches(&format!("\n- {constraint}\n")).count(),
        1,
        "the constraint is noted once:\n{notes}"
    );
    assert_eq!(
        notes.matches("\n- Build every module.").count(),
        1,
        "the request is noted once:\n{notes}"
    );
    assert_eq!(
        notes.matches("cargo build -p module_0`").count(),
        1,
        "what was done is noted once:\n{notes}"
    );
}
