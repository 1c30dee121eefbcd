//! Limits at the edge: what the daemon accepts it can store and load again, and what it
//! refuses it refuses with the right code and a short message. Messages nested past the depth
//! limit, huge session ids and field values, `context.read` paths that cannot name a file, the
//! key a bad configuration value is reported under, a dialog archive behind a symlink, and a
//! handler that panics (made to, with `SATCHEL_PANIC_METHODS`): still one reply per request.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::builders::{assistant, user};
use crate::support::checks::{error_code, session_records};
use crate::support::{Daemon, Framing, append, archive_lines, prepare};

/// Most levels of arrays and objects a message may nest (`protocol/README.md`).
const MAX_DEPTH: usize = 64;
/// Most characters of an input an error message quotes.
const MAX_QUOTE: usize = 200;
/// Most bytes of an error message about a huge input, its own words included.
const SHORT_ERROR: usize = 1_000;

/// A user message nested `depth` levels deep, the message object being the first level.
fn nested_message(depth: usize) -> Value {
    let mut inner = json!("the bottom");
    for _ in 1..depth {
        inner = json!([inner]);
    }
    let mut message = user("a deep one");
    message["metadata"] = inner;
    message
}

/// The error's `data.details.field`.
fn field(error: &Value) -> &str {
    error["data"]["details"]["field"]
        .as_str()
        .unwrap_or_else(|| panic!("no field named: {error}"))
}

fn message(error: &Value) -> &str {
    error["message"].as_str().unwrap()
}

/// An invalid-params error naming `expected`, with a message of at most [`SHORT_ERROR`] bytes.
fn assert_invalid(error: &Value, expected: &str) {
    assert_eq!(error_code(error), -32602, "{error}");
    assert_eq!(field(error), expected, "{error}");
    assert_short(error);
}

/// An error message of at most [`SHORT_ERROR`] bytes.
fn assert_short(error: &Value) {
    assert!(message(error).len() <= SHORT_ERROR, "{} bytes", message(error).len());
}

#[test]
fn messages_nested_past_the_limit_are_refused_and_the_session_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let start = [user("hello"), assistant("hi")];
    prepare(&mut d, "deep", &start);

    // 126 levels: the log line holding it would be past serde_json's limit of 127.
    let too_deep = nested_message(126);
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "deep", "append": [user("fine"), too_deep]}),
    );
    assert_invalid(&error, "append[1]");
    assert!(message(&error).contains(&MAX_DEPTH.to_string()), "{error}");
    let mut resent = start.to_vec();
    resent.push(nested_message(MAX_DEPTH + 1));
    let error = d.call_err("context.prepare", json!({"session_id": "deep", "messages": resent}));
    assert_invalid(&error, "messages[2]");
    // Far past any parser's limit: refused the same way, not as a parse failure.
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "deep", "append": [nested_message(1_000)]}),
    );
    assert_invalid(&error, "append[0]");
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "deep", "append": [user("x")], "system": nested_message(100)}),
    );
    assert_invalid(&error, "system");
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "deep", "append": [user("x")], "tools": [{"name": "t"}, nested_message(100)]}),
    );
    assert_invalid(&error, "tools[1]");
    // Nothing was stored by any of them.
    let inspect = d.call("context.inspect", json!({"session_id": "deep"}));
    assert_eq!(inspect["messages"], 2, "{inspect}");

    // At the limit: accepted, stored, archived, and all of it readable again.
    let at_limit = nested_message(MAX_DEPTH);
    let mut later = vec![at_limit.clone()];
    for i in 0..12 {
        later.push(assistant(&format!("reply {i} {}", "words ".repeat(60))));
        later.push(user(&format!("question {i} {}", "words ".repeat(60))));
    }
    let result = append(&mut d, "deep", &later);
    assert_eq!(result["messages"][2], at_limit);
    d.shutdown();

    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let result = d.call(
        "context.prepare",
        json!({"session_id": "deep", "append": [assistant("after a restart")], "expect_messages": 2 + later.len()}),
    );
    assert_eq!(result["messages"][2], at_limit, "reloaded from the log");
    let compacted = d.call(
        "context.compact",
        json!({"session_id": "deep", "config": {"max_input_length": 2048}}),
    );
    assert!(compacted["compacted"].as_u64().unwrap() >= 3, "{compacted}");
    d.shutdown();

    let records = session_records(dir.path(), "deep");
    assert!(records.iter().any(|r| r["message"] == at_limit), "in the session log");
    let archived = archive_lines(dir.path());
    assert!(
        archived.iter().any(|(_, _, line)| line["message"] == at_limit),
        "in the archive"
    );
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let inspect = d.call("context.inspect", json!({"session_id": "deep"}));
    assert!(inspect["archived_messages"].as_u64().unwrap() >= 3, "{inspect}");
    d.shutdown();
}

#[test]
fn huge_inputs_get_short_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let huge = "s".repeat(100 * 1024);
    for (method, params) in [
        ("context.prepare", json!({"session_id": huge, "messages": [user("hi")]})),
        ("context.prepare", json!({"session_id": huge, "append": [user("hi")]})),
        ("context.inspect", json!({"session_id": huge})),
        ("context.compact", json!({"session_id": huge})),
    ] {
        let error = d.call_err(method, params);
        assert_invalid(&error, "session_id");
        assert!(
            message(&error).contains(&huge[..MAX_QUOTE]),
            "quotes the id's start: {error}"
        );
    }
    // With spaces and quotes too: the quote is cut however the id is made.
    let spaced = "a \"b\" ".repeat(20_000);
    let error = d.call_err("context.inspect", json!({"session_id": spaced}));
    assert_invalid(&error, "session_id");

    // Values and names that serde quotes in its messages.
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "s", "messages": [user("hi")], "format": huge}),
    );
    assert_invalid(&error, "format");
    let mut params = json!({"session_id": "s", "messages": [user("hi")]});
    params[huge.as_str()] = json!(1);
    let error = d.call_err("context.prepare", params);
    assert_eq!(error_code(&error), -32602, "{error}");
    assert_short(&error);
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "s", "messages": [user("hi")], "config": {huge.as_str(): 1}}),
    );
    // The message lists every config key beside the quote: longer, but still quoting little.
    assert_eq!(error_code(&error), -32602, "{error}");
    assert!(
        message(&error).len() <= 3 * SHORT_ERROR,
        "{} bytes",
        message(&error).len()
    );
    assert!(!message(&error).contains(&huge[..MAX_QUOTE + 1]), "{error}");
    assert!(field(&error).len() <= SHORT_ERROR, "{error}");

    let path = format!("tool_result/{}", "p".repeat(100 * 1024));
    let error = d.call_err("context.read", json!({"path": path}));
    assert_eq!(error_code(&error), -32003, "{}", message(&error));
    assert_short(&error);
    d.shutdown();
}

#[test]
fn context_read_of_a_path_that_cannot_name_a_file_is_a_path_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    // A first reply means the daemon has created `tool_result/`.
    d.call("initialize", json!({}));
    let tool_result = dir.path().join("tool_result");
    std::fs::write(tool_result.join("a.txt"), "hello").unwrap();
    std::os::unix::fs::symlink("loop_b", tool_result.join("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", tool_result.join("loop_b")).unwrap();

    let long_name = format!("tool_result/{}.txt", "n".repeat(300));
    let long_path = format!("tool_result/{}", ["d"; 3_000].join("/"));
    for path in [
        "tool_result/loop_a",
        "tool_result/loop_a/x.txt",
        &long_name,
        &long_path,
        "tool_result/a.txt/x",
        "tool_result/a.txt/",
    ] {
        let error = d.call_err("context.read", json!({"path": path}));
        assert_eq!(error_code(&error), -32003, "{}: {error}", &path[..path.len().min(40)]);
        assert_short(&error);
    }
    let read = d.call("context.read", json!({"path": "tool_result/a.txt"}));
    assert_eq!(read["content"], "hello");
    d.shutdown();
}

#[test]
fn a_bad_configuration_value_is_reported_under_its_own_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    for (key, value) in [
        ("markdown_old_msg_max_bytes", json!(0)),
        ("pruning_old_msg_max_bytes", json!(0)),
        ("llm_max_output_tokens", json!(10)),
        ("llm_input_budget_tokens", json!(10)),
    ] {
        let error = d.call_err(
            "context.prepare",
            json!({"session_id": "s", "messages": [user("hi")], "config": {key: value}}),
        );
        assert_invalid(&error, &format!("config.{key}"));
    }
    d.shutdown();
    // And in the daemon's own configuration: it refuses to start, naming the key.
    let log = dir.path().join("stderr.log");
    let mut d = Daemon::start_logging_to(dir.path(), &[("SATCHEL_MARKDOWN_OLD_MSG_MAX_BYTES", "0")], &log);
    assert!(!d.wait_exit(Duration::from_secs(60)).success());
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("markdown_old_msg_max_bytes"), "{stderr}");
}

/// Starts a daemon that must refuse to start; returns its stderr.
fn refused_start(workspace: &Path, env: &[(&str, &str)]) -> String {
    let log = workspace
        .parent()
        .unwrap()
        .join(format!("{}.stderr", workspace.file_name().unwrap().to_string_lossy()));
    let mut d = Daemon::start_logging_to(workspace, env, &log);
    let status = d.wait_exit(Duration::from_secs(60));
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "started: {stderr}");
    stderr
}

#[test]
fn a_dialog_archive_behind_a_symlink_is_refused_at_start() {
    let outside = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();

    // The archive directory itself is a link.
    let workspace = parent.path().join("linked");
    std::fs::create_dir(&workspace).unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.join("dialog")).unwrap();
    let stderr = refused_start(&workspace, &[]);
    assert!(
        stderr.contains("dialog") && stderr.contains("symbolic link"),
        "{stderr}"
    );

    // A directory on the way to a configured `dialog_path` is.
    let workspace = parent.path().join("parent_linked");
    std::fs::create_dir(&workspace).unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.join("archive")).unwrap();
    let stderr = refused_start(&workspace, &[("SATCHEL_DIALOG_PATH", "archive/dialog")]);
    assert!(
        stderr.contains("archive") && stderr.contains("symbolic link"),
        "{stderr}"
    );

    let written: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert!(written.is_empty(), "nothing written through the links: {written:?}");
}

/// Every request gets exactly one reply, even when its handler panics: -32603 under the
/// request's own id, on the jsonrpsee path, on `context.prepare`'s direct path and on its
/// fallback through jsonrpsee; the arrival order of later calls does not stall, and the panic
/// is in the log.
#[test]
fn a_handler_that_panics_is_answered_with_an_internal_error_under_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let env = [
        ("SATCHEL_PANIC_METHODS", "memory.get,context.prepare,context.sessions"),
        ("SATCHEL_TOKENIZER", "estimate"),
    ];
    let mut d = Daemon::start_logging_to(dir.path(), &env, &log);
    let prepare = json!({"session_id": "p", "messages": [user("hi")]});
    // The direct path reads the envelope itself; an unknown member sends the call through
    // jsonrpsee instead.
    let direct = json!({"jsonrpc": "2.0", "id": "direct-1", "method": "context.prepare", "params": prepare});
    let mut fallback = direct.clone();
    fallback["id"] = json!(-7.5);
    fallback["extra"] = json!(true);
    d.send_raw(format!("{direct}\n{fallback}\n").as_bytes());
    let ids: Vec<u64> = vec![
        d.request("memory.get", json!({"path": "MEMORY.md"})),
        d.request("context.sessions", json!({})),
        // An ordered call behind the panicking ones: the arrival chain goes on.
        d.request("context.inspect", json!({"session_id": "p"})),
    ];
    let mut replies = Vec::new();
    while replies.len() < 5 {
        let (_, frame) = d.next_frame();
        replies.push(frame);
    }
    let reply_to = |id: &Value| {
        let found: Vec<&Value> = replies.iter().filter(|r| &r["id"] == id).collect();
        assert_eq!(found.len(), 1, "one reply to {id}: {replies:?}");
        found[0].clone()
    };
    for id in [json!("direct-1"), json!(-7.5), json!(ids[0]), json!(ids[1])] {
        let reply = reply_to(&id);
        assert_eq!(error_code(&reply["error"]), -32603, "{reply}");
        let text = message(&reply["error"]);
        assert!(
            text.contains("failed unexpectedly") && !text.contains("on purpose"),
            "{text}"
        );
    }
    // The session was never prepared: inspect answers for itself.
    assert_eq!(error_code(&reply_to(&json!(ids[2]))["error"]), -32001);
    assert!(
        d.next_frame_within(Duration::from_millis(300)).is_err(),
        "no extra reply (jsonrpsee's id-null one)"
    );
    // The daemon keeps serving.
    assert!(d.call("initialize", json!({}))["methods"].is_array());
    d.shutdown();
    let log = std::fs::read_to_string(&log).unwrap();
    for method in ["memory.get", "context.prepare", "context.sessions"] {
        assert!(
            log.lines()
                .any(|l| l.contains("ERROR") && l.contains("the handler panicked") && l.contains(method)),
            "{method}: {log}"
        );
    }
}

/// A request whose id (or another member routing reads) is not UTF-8 gets -32700 with id
/// null in its own framing, never silence (jsonrpsee took such a message for a notification).
#[test]
fn a_request_whose_id_is_not_utf8_gets_a_parse_error_with_a_null_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let bodies: [&[u8]; 4] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":\"fz-1000\xff0001\",\"method\":\"context.sessions\",\"params\":{}}",
        b"{\"id\":\"\xd0\xb8\xd0-10000002-\xe2\x9c\x93\",\"jsonrpc\":\"2.0\",\"method\":\"context.inspect\",\"params\":{\"session_id\":\"s\"}}",
        b"{\"jsonrpc\":\"2.0\",\"id\":\"a\xed\xa0\x80\",\"method\":\"memory.get\",\"params\":{\"path\":\"MEMORY.md\"}}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"context.prepare\",\"params\":{},\"id\":\"\xc0\xaf\"}",
    ];
    for (i, body) in bodies.iter().enumerate() {
        let mut frame = Vec::new();
        if i % 2 == 0 {
            frame.extend_from_slice(body);
            frame.push(b'\n');
        } else {
            frame.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            frame.extend_from_slice(body);
        }
        d.send_raw(&frame);
        let (framing, reply) = d.next_frame();
        assert_eq!(
            framing,
            if i % 2 == 0 {
                Framing::Ndjson
            } else {
                Framing::ContentLength
            }
        );
        assert_eq!(reply["id"], Value::Null, "{}: {reply}", String::from_utf8_lossy(body));
        assert_eq!(error_code(&reply["error"]), -32700, "{reply}");
    }
    assert!(
        d.next_frame_within(Duration::from_millis(200)).is_err(),
        "one reply each"
    );
    assert!(d.call("context.sessions", json!({}))["sessions"].is_array());
    d.shutdown();
}
