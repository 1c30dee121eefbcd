//! A cached rendering is valid for the configuration it was made under, all of it (issue 27,
//! item 12): the same `context.prepare` returns the same bytes from a warm daemon, whose
//! renderings were made under an earlier call's configuration, as from a restarted one that
//! renders everything afresh. The report: a per-request `markdown_file_extensions` that makes
//! a `read_file` result Markdown (whole up to 50,000 bytes once old, not cut at 3,000) got
//! the 3,711-byte excerpt cached before from the warm daemon, and the full 12,500 bytes after
//! a restart, because the cache key left that key out.

use satchel_protocol::Config;
use serde_json::{Value, json};

use crate::support::Daemon;
use crate::support::builders::{call_message, result_message, user};
use crate::support::trajectories::{Format, result_text_pointers};

/// Bytes of the log the agent reads: over the plain old-phase limit (3,000), under the
/// Markdown one (50,000).
const LOG_BYTES: usize = 12_500;

/// An agent that read `logs/app.log` and talked on for long enough that the read is in the
/// old phase (eight messages: the recent window is the last two).
fn conversation(format: Format) -> Vec<Value> {
    let log: String = (0..)
        .map(|i| format!("2026-11-27T20:{:02}:{:02} INFO worker {i} done\n", i / 60 % 60, i % 60))
        .scan(0, |bytes, line: String| {
            *bytes += line.len();
            (*bytes <= LOG_BYTES).then_some(line)
        })
        .collect();
    let mut messages = vec![
        user("Why did the worker stop?"),
        call_message(
            format,
            "read_1",
            "read_file",
            &json!({"path": "logs/app.log"}),
            "Reading the log.",
        ),
        result_message(format, "read_1", &log),
    ];
    for turn in 0..5 {
        messages.push(match turn % 2 {
            0 => json!({"role": "assistant", "content": format!("Step {turn} looks fine.")}),
            _ => user(&format!("Go on with step {turn}.")),
        });
    }
    assert_eq!(messages.len(), 8);
    messages
}

/// `context.prepare` of the whole conversation, with `config` overrides when given.
fn prepare(daemon: &mut Daemon, format: Format, config: Option<Value>) -> Value {
    let mut params = json!({"session_id": "s", "messages": conversation(format), "format": format.wire_name()});
    if let Some(config) = config {
        params["config"] = config;
    }
    daemon.call("context.prepare", params)
}

/// The text of the `read_file` result in a returned request.
fn log_text(result: &Value, format: Format) -> &str {
    let message = &result["messages"][2];
    let pointers = result_text_pointers(message, format);
    let pointer = pointers.iter().next().expect("a tool result");
    message
        .pointer(pointer)
        .and_then(Value::as_str)
        .expect("the result's text")
}

fn same_call_same_bytes(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let mut extensions = Config::default().render.markdown_file_extensions;
    extensions.push(".log".into());
    let markdown_logs = json!({"markdown_file_extensions": extensions});

    let mut daemon = Daemon::start(dir.path(), &[]);
    // Under the defaults the old `read_file` result is cut: this rendering is cached.
    let plain = prepare(&mut daemon, format, None);
    assert!(
        log_text(&plain, format).len() < 4_000,
        "{format:?}: the log is cut by default"
    );
    let warm = prepare(&mut daemon, format, Some(markdown_logs.clone()));
    daemon.shutdown();

    let mut daemon = Daemon::start(dir.path(), &[]);
    let restarted = prepare(&mut daemon, format, Some(markdown_logs));
    daemon.shutdown();

    assert!(
        log_text(&restarted, format).len() > LOG_BYTES - 100,
        "{format:?}: a `.log` read is Markdown under the override and stays whole"
    );
    assert_eq!(
        log_text(&warm, format).len(),
        log_text(&restarted, format).len(),
        "{format:?}: the warm daemon returns another rendering of the read than a restarted one"
    );
    assert_eq!(
        warm["messages"], restarted["messages"],
        "{format:?}: the same call returns other messages from a warm daemon than from a restarted one"
    );
}

#[test]
fn openai_warm_and_restarted_daemons_render_alike_under_a_request_override() {
    same_call_same_bytes(Format::Openai);
}

#[test]
fn anthropic_warm_and_restarted_daemons_render_alike_under_a_request_override() {
    same_call_same_bytes(Format::Anthropic);
}
