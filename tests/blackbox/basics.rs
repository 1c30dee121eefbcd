//! Basics: `initialize` and the configuration layers, framing, offloading and the two
//! truncation phases (OpenAI and Anthropic), Markdown and `read_file`, content-addressed
//! storage, reconciliation of resent histories, crash recovery, `context.read`, error codes,
//! batches and cancels, end of input, token zones. Each test spawns the real `satchel serve` on
//! a fresh temporary workspace and checks, over JSON-RPC on stdio, a behaviour an agent or an
//! editor plugin relies on.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::builders::{assistant, openai_calls, tool_result, user};
use crate::support::checks::error_code;
use crate::support::{
    CONTEXT_READ_PATH, Daemon, Framing, MARKER, actions, append, number_after, prepare, quoted_after, reconstruct,
};

// ---------------------------------------------------------------------------------------------
// Conversation builders
// ---------------------------------------------------------------------------------------------

/// `user → assistant calls bash → tool result`: the smallest conversation with a tool output.
fn bash_conversation(output: &str) -> Vec<Value> {
    vec![
        user("run the tests"),
        openai_calls(&[("call_1", "bash", json!({"command": "cargo test"}))]),
        tool_result("call_1", output),
    ]
}

/// A build log of at least `min_bytes`: many lines with non-ASCII text (so byte and char
/// positions differ) and an error as its very last line, the part an agent must not lose.
fn multibyte_build_log(tag: &str, min_bytes: usize) -> String {
    let mut log = String::with_capacity(min_bytes + 200);
    let mut i = 0;
    while log.len() < min_bytes {
        i += 1;
        log.push_str(&format!("{tag} {i:05} compiling café-crate — 日本語のテスト ... ok\n"));
    }
    log.push_str(&last_line(tag));
    log
}

fn last_line(tag: &str) -> String {
    format!("error: {tag} failed (exit status 101)\n")
}

/// ASCII text of exactly `len` bytes, in lines.
fn sized_text(len: usize) -> String {
    let line = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
    line.repeat(len / line.len() + 1)[..len].to_owned()
}

// ---------------------------------------------------------------------------------------------
// Calls and result inspection
// ---------------------------------------------------------------------------------------------

/// The string at `pointer` in returned message `index`.
fn text_at<'a>(result: &'a Value, index: usize, pointer: &str) -> &'a str {
    result["messages"][index]
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap()
}

/// What a truncation notice states, read the way an agent would.
#[derive(Debug)]
struct Notice {
    /// Bytes of the original kept at the start.
    head: usize,
    /// Bytes of the original kept at the end (0 without a tail).
    tail: usize,
    /// Workspace-relative file holding the full text.
    file: String,
}

fn notice(excerpt: &str) -> Notice {
    let at = excerpt
        .find(MARKER)
        .unwrap_or_else(|| panic!("no truncation notice in {excerpt:.200}"));
    let notice = &excerpt[at..];
    Notice {
        head: number_after(notice, "covers the next ").expect("head byte count"),
        tail: number_after(notice, "The last ").unwrap_or(0),
        file: quoted_after(notice, CONTEXT_READ_PATH).expect("file path"),
    }
}

/// Asserts `excerpt` is a truncation of `original` keeping at most `limit` bytes, whose head
/// ends on a line and whose tail is the real end of the output; returns the notice.
fn assert_excerpt(excerpt: &str, original: &str, limit: usize) -> Notice {
    let n = notice(excerpt);
    assert!(
        n.head > 0 && n.head + n.tail <= limit,
        "kept {} + {} bytes, limit {limit}",
        n.head,
        n.tail
    );
    assert_eq!(
        &excerpt[..n.head],
        &original[..n.head],
        "head is the start of the output"
    );
    assert!(original[..n.head].ends_with('\n'), "head ends on a whole line");
    assert!(
        excerpt.ends_with(&original[original.len() - n.tail..]),
        "tail is the end of the output"
    );
    n
}

/// Asserts `file` is a content-addressed offload file holding exactly `original`.
fn assert_offload_file(workspace: &Path, file: &str, original: &str) {
    let name = file
        .strip_prefix("tool_result/")
        .and_then(|f| f.strip_suffix(".txt"))
        .expect("tool_result/*.txt");
    assert!(
        name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()),
        "{file}"
    );
    let bytes = std::fs::read(workspace.join(file)).unwrap();
    assert!(bytes == original.as_bytes(), "{file} does not hold the original bytes");
}

fn offload_files(workspace: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace.join("tool_result"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The daemon still answers a normal request.
fn assert_alive(d: &mut Daemon) {
    assert_eq!(d.call("initialize", json!({}))["server_name"], "satchel");
}

// ---------------------------------------------------------------------------------------------
// 1. initialize and configuration layers
// ---------------------------------------------------------------------------------------------

#[test]
fn initialize_reports_identity_and_spec_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let init = d.call("initialize", json!({"client_info": {"name": "blackbox"}}));
    assert_eq!(init["server_name"], "satchel");
    assert!(!init["protocol_version"].as_str().unwrap().is_empty());
    let canonical = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(Path::new(init["workspace"].as_str().unwrap()), canonical);
    let config = &init["config"];
    assert_eq!(config["pruning_recent_n"], 2);
    assert_eq!(config["pruning_old_msg_max_bytes"], 3000);
    assert_eq!(config["pruning_recent_msg_max_bytes"], 50000);
    assert_eq!(config["max_input_length"], 131072);
    assert_eq!(config["offload_retention_days"], 5.0);
    assert_eq!(config["offload_notice_path"], "absolute");
    let methods = init["methods"].as_array().unwrap();
    for method in ["initialize", "context.prepare", "context.read"] {
        assert!(methods.contains(&json!(method)), "{method} missing from {methods:?}");
    }
    d.shutdown();
}

#[test]
fn workspace_file_and_environment_override_defaults() {
    let dir = tempfile::tempdir().unwrap();
    // The file sets two keys; the environment overrides one of them (env beats file).
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"pruning_recent_n": 4, "pruning_old_msg_max_bytes": 2500}"#,
    )
    .unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_PRUNING_RECENT_N", "3")]);
    let config = d.call("initialize", json!({}))["config"].clone();
    assert_eq!(config["pruning_recent_n"], 3);
    assert_eq!(config["pruning_old_msg_max_bytes"], 2500);
    assert_eq!(
        config["pruning_recent_msg_max_bytes"], 50000,
        "untouched keys keep their defaults"
    );
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 2. Framing
// ---------------------------------------------------------------------------------------------

#[test]
fn each_reply_uses_the_framing_of_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let sent = [
        (1, Framing::Ndjson),
        (2, Framing::ContentLength),
        (3, Framing::Ndjson),
        (4, Framing::ContentLength),
    ];
    for (id, framing) in sent {
        d.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {}}),
            framing,
        );
    }
    let mut replies: Vec<(i64, Framing)> = (0..sent.len())
        .map(|_| {
            let (framing, reply) = d.next_frame();
            assert_eq!(reply["result"]["server_name"], "satchel", "{reply}");
            (reply["id"].as_i64().unwrap(), framing)
        })
        .collect();
    replies.sort_by_key(|(id, _)| *id);
    assert_eq!(replies, sent.to_vec());
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 3–4. Offload and the two truncation phases (OpenAI format)
// ---------------------------------------------------------------------------------------------

/// The recent window moving with every message (`pruning_phase_batch` 1, not the default
/// steps of 8), so that the phase tests see a result turn old as soon as messages follow it.
const EVERY_MESSAGE: [(&str, &str); 1] = [("SATCHEL_PRUNING_PHASE_BATCH", "1")];

#[test]
fn large_tool_result_is_offloaded_then_truncated_further_when_old() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &EVERY_MESSAGE);
    let log = multibyte_build_log("first", 120_000);
    assert!(log.len() > 120_000 && log.len() < 130_000);

    // Phase one: the result is recent, so it keeps up to 50 000 bytes.
    let first = prepare(&mut d, "s1", &bash_conversation(&log));
    assert_eq!(first["format"], "openai");
    let excerpt = text_at(&first, 2, "/content").to_owned();
    let recent = assert_excerpt(&excerpt, &log, 50_000);
    assert!(
        excerpt.ends_with(&last_line("first")),
        "the error at the end stays visible"
    );
    assert_offload_file(dir.path(), &recent.file, &log);

    let offloaded = actions(&first, "offloaded");
    assert_eq!(offloaded.len(), 1, "{}", first["actions"]);
    assert_eq!(offloaded[0]["index"], 2);
    assert_eq!(offloaded[0]["pointer"], "/content");
    assert_eq!(offloaded[0]["file"], recent.file);
    assert_eq!(offloaded[0]["total_bytes"], log.len());
    assert_eq!(offloaded[0]["total_lines"], log.lines().count());
    assert_eq!(offloaded[0]["newly_written"], true);
    let truncated = actions(&first, "truncated");
    assert_eq!(truncated.len(), 1, "{}", first["actions"]);
    assert_eq!(truncated[0]["phase"], "recent");
    assert_eq!(truncated[0]["index"], 2);
    assert_eq!(truncated[0]["kept_bytes"], recent.head + recent.tail);
    assert_eq!(truncated[0]["total_bytes"], log.len());
    assert_eq!(
        reconstruct(&mut d, &excerpt),
        log,
        "head + context.read give back the output exactly"
    );

    // Phase two: two newer messages push the result out of the recent window (n = 2).
    let second = append(
        &mut d,
        "s1",
        &[assistant("The last test failed."), user("Please fix it.")],
    );
    assert_eq!(second["messages"].as_array().unwrap().len(), 5);
    let old_excerpt = text_at(&second, 2, "/content").to_owned();
    let old = assert_excerpt(&old_excerpt, &log, 3_000);
    assert_eq!(old.file, recent.file, "the same file backs both phases");
    assert!(old_excerpt.ends_with(&last_line("first")));
    let truncated = actions(&second, "truncated");
    assert_eq!(truncated.len(), 1, "{}", second["actions"]);
    assert_eq!(truncated[0]["phase"], "old");
    assert_eq!(truncated[0]["index"], 2);
    assert_eq!(truncated[0]["file"], recent.file);
    assert_eq!(truncated[0]["kept_bytes"], old.head + old.tail);
    assert!(actions(&second, "offloaded").is_empty(), "nothing new to offload");
    assert_eq!(reconstruct(&mut d, &old_excerpt), log);
    assert_eq!(offload_files(dir.path()).len(), 1);
    d.shutdown();
}

#[test]
fn the_read_file_path_of_a_notice_is_absolute_unless_configured_relative() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let log = multibyte_build_log("abs", 60_000);

    // By default the agent's own `read_file` gets a path it can open from anywhere.
    let first = prepare(&mut d, "s1", &bash_conversation(&log));
    let excerpt = text_at(&first, 2, "/content").to_owned();
    let n = assert_excerpt(&excerpt, &log, 50_000);
    let absolute = quoted_after(&excerpt, "file_path=").expect("read_file path");
    assert!(Path::new(&absolute).is_absolute(), "{absolute}");
    assert_eq!(
        Path::new(&absolute),
        dir.path().canonicalize().unwrap().join(&n.file),
        "the workspace root joined with the file context.read takes"
    );
    assert!(
        std::fs::read(&absolute).unwrap() == log.as_bytes(),
        "{absolute} holds the original bytes"
    );
    assert_eq!(
        reconstruct(&mut d, &excerpt),
        log,
        "context.read keeps the relative path"
    );

    // `relative` gives the old form, in the same session (a re-render) and in a new one.
    let relative = json!({"offload_notice_path": "relative"});
    for session in ["s1", "s2"] {
        let result = d.call(
            "context.prepare",
            json!({"session_id": session, "messages": bash_conversation(&log), "config": relative}),
        );
        let excerpt = text_at(&result, 2, "/content");
        assert!(
            excerpt.contains(&format!(
                "`read_file` with file_path={} start_line=",
                Value::from(n.file.as_str())
            )),
            "{session}: {excerpt:.300}"
        );
        assert!(!excerpt.contains(&absolute), "{session}");
        assert_eq!(
            quoted_after(excerpt, CONTEXT_READ_PATH).as_deref(),
            Some(n.file.as_str())
        );
    }

    // An unknown value is refused by name.
    let bad = d.call_err(
        "context.prepare",
        json!({"session_id": "s3", "messages": bash_conversation(&log), "config": {"offload_notice_path": "cwd"}}),
    );
    assert!(bad.to_string().contains("offload_notice_path"), "{bad}");
    d.shutdown();
}

#[test]
fn result_within_the_slack_is_never_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &EVERY_MESSAGE);
    // 3 050 bytes is within 100 bytes of the old-phase limit; 5 000 is clearly past it, and
    // 3 150 just past it: offloaded (a phase may cut it), but sent whole, since its excerpt,
    // notice included, would save nothing (it would only lose its middle).
    let (within, past, just_past) = (sized_text(3_050), sized_text(5_000), sized_text(3_150));
    let messages = vec![
        user("show both"),
        openai_calls(&[
            ("c1", "bash", json!({"command": "a"})),
            ("c2", "bash", json!({"command": "b"})),
            ("c3", "bash", json!({"command": "c"})),
        ]),
        tool_result("c1", &within),
        tool_result("c2", &past),
        tool_result("c3", &just_past),
    ];
    let first = prepare(&mut d, "slack", &messages);
    assert_eq!(first["messages"], json!(messages), "both are whole while recent");
    let offloaded = actions(&first, "offloaded");
    assert_eq!(
        offloaded.len(),
        2,
        "only the results a phase may cut are saved: {}",
        first["actions"]
    );
    assert_eq!(
        (offloaded[0]["index"].clone(), offloaded[1]["index"].clone()),
        (json!(3), json!(4))
    );

    let second = append(&mut d, "slack", &[assistant("ok"), user("next")]);
    assert_eq!(
        text_at(&second, 2, "/content"),
        within,
        "within the slack: whole even when old"
    );
    assert_excerpt(text_at(&second, 3, "/content"), &past, 3_000);
    assert_eq!(
        text_at(&second, 4, "/content"),
        just_past,
        "just past the slack: a cut would not pay for its notice"
    );
    let truncated = actions(&second, "truncated");
    assert_eq!(truncated.len(), 1, "{}", second["actions"]);
    assert_eq!(offload_files(dir.path()).len(), 2);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 5. Anthropic format
// ---------------------------------------------------------------------------------------------

#[test]
fn anthropic_tool_results_are_offloaded_and_unmanaged_fields_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let (as_string, as_blocks) = (
        multibyte_build_log("string", 70_000),
        multibyte_build_log("blocks", 70_000),
    );
    let results = json!({
        "role": "user",
        "x_client_meta": {"turn": 7},
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": as_string, "is_error": true,
             "cache_control": {"type": "ephemeral"}},
            {"type": "tool_result", "tool_use_id": "toolu_2",
             "content": [{"type": "text", "text": as_blocks}, {"type": "text", "text": "short note"}]},
        ],
    });
    let messages = vec![
        user("build and check"),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Running both."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "make"}},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "make check"}},
        ]}),
        results.clone(),
    ];
    let out = prepare(&mut d, "anthropic", &messages);
    assert_eq!(out["format"], "anthropic");
    let pointers = [
        ("/content/0/content", &as_string),
        ("/content/1/content/0/text", &as_blocks),
    ];
    for (pointer, original) in pointers {
        let excerpt = text_at(&out, 2, pointer).to_owned();
        let n = assert_excerpt(&excerpt, original, 50_000);
        assert_offload_file(dir.path(), &n.file, original);
        assert_eq!(reconstruct(&mut d, &excerpt), *original);
        let offloaded = actions(&out, "offloaded");
        assert!(
            offloaded.iter().any(|a| a["pointer"] == pointer && a["file"] == n.file),
            "{}",
            out["actions"]
        );
    }
    // With the managed texts blanked, the message must be exactly what the client sent:
    // cache_control, is_error, the unknown key and the short text block all survive.
    let mut returned = out["messages"][2].clone();
    let mut sent = results;
    for (pointer, _) in pointers {
        *returned.pointer_mut(pointer).unwrap() = json!("");
        *sent.pointer_mut(pointer).unwrap() = json!("");
    }
    assert_eq!(returned, sent);
    assert_eq!(out["messages"].as_array().unwrap()[..2], messages[..2]);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 6. Markdown and read_file
// ---------------------------------------------------------------------------------------------

#[test]
fn read_file_is_whole_while_recent_and_markdown_keeps_more_when_old() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &EVERY_MESSAGE);
    let guide: String = (1..)
        .map(|i| format!("## Section {i}\n\nHow to do step {i}, explained.\n\n"))
        .take(1500)
        .collect();
    let guide = guide[..guide[..60_000].rfind('\n').unwrap() + 1].to_owned();
    let code = sized_text(20_000);
    assert!(guide.len() > 59_000 && guide.len() <= 60_000);
    let messages = vec![
        user("read the guide and the code"),
        openai_calls(&[
            ("r1", "read_file", json!({"path": "notes/GUIDE.md"})),
            ("r2", "read_file", json!({"path": "src/big.rs"})),
        ]),
        tool_result("r1", &guide),
        tool_result("r2", &code),
    ];

    // Recent: what the agent asked to read is shown whole…
    let recent = prepare(&mut d, "reads", &messages);
    assert_eq!(recent["messages"], json!(messages));
    assert!(actions(&recent, "truncated").is_empty(), "{}", recent["actions"]);
    // …but saved already, since the file on disk may change before it is truncated.
    let offloaded = actions(&recent, "offloaded");
    assert_eq!(offloaded.len(), 2, "{}", recent["actions"]);
    for (action, original) in offloaded.iter().zip([&guide, &code]) {
        assert_offload_file(dir.path(), action["file"].as_str().unwrap(), original);
    }

    // Old: Markdown falls to its own 50 000-byte limit, source code to 3 000.
    let old = append(&mut d, "reads", &[assistant("Done reading."), user("Now refactor.")]);
    let guide_excerpt = text_at(&old, 2, "/content");
    let n = assert_excerpt(guide_excerpt, &guide, 50_000);
    assert!(n.head + n.tail > 3_000, "Markdown keeps more than the plain old limit");
    let code_excerpt = text_at(&old, 3, "/content");
    let n = assert_excerpt(code_excerpt, &code, 3_000);
    assert_offload_file(dir.path(), &n.file, &code);
    let phases: Vec<_> = actions(&old, "truncated")
        .iter()
        .map(|a| (a["index"].clone(), a["phase"].clone()))
        .collect();
    assert_eq!(phases, [(json!(2), json!("old")), (json!(3), json!("old"))]);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 7. Content-addressed storage
// ---------------------------------------------------------------------------------------------

#[test]
fn identical_outputs_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let output = multibyte_build_log("same", 80_000);
    let twice = vec![
        user("run it twice"),
        openai_calls(&[
            ("c1", "bash", json!({"command": "x"})),
            ("c2", "bash", json!({"command": "x"})),
        ]),
        tool_result("c1", &output),
        tool_result("c2", &output),
    ];
    let first = prepare(&mut d, "twice", &twice);
    let written: Vec<_> = actions(&first, "offloaded")
        .iter()
        .map(|a| a["newly_written"].clone())
        .collect();
    assert_eq!(written, [json!(true), json!(false)]);
    let other = prepare(&mut d, "other-session", &bash_conversation(&output));
    assert_eq!(actions(&other, "offloaded")[0]["newly_written"], false);

    let files = offload_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let file = format!("tool_result/{}", files[0]);
    for excerpt in [
        text_at(&first, 2, "/content"),
        text_at(&first, 3, "/content"),
        text_at(&other, 2, "/content"),
    ] {
        assert_eq!(notice(excerpt).file, file);
    }
    assert_offload_file(dir.path(), &file, &output);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 8. Reconciliation of full message lists
// ---------------------------------------------------------------------------------------------

fn reconciliation(result: &Value) -> (u64, u64, u64, u64) {
    let r = &result["reconciliation"];
    let get = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
    (get("reused"), get("appended"), get("replaced"), get("session_messages"))
}

#[test]
fn resent_histories_are_reconciled_not_reprocessed() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let log = multibyte_build_log("reconcile", 60_000);
    let mut messages = bash_conversation(&log);

    let first = prepare(&mut d, "r", &messages);
    assert_eq!(reconciliation(&first), (0, 3, 0, 3));

    // The same list again: nothing is processed, the output is identical.
    let again = prepare(&mut d, "r", &messages);
    assert_eq!(reconciliation(&again), (3, 0, 0, 3));
    assert_eq!(again["messages"], first["messages"]);
    assert!(again["actions"].as_array().unwrap().is_empty(), "{}", again["actions"]);

    // One more message: only it is new.
    messages.push(assistant("The tests fail."));
    let more = prepare(&mut d, "r", &messages);
    assert_eq!(reconciliation(&more), (3, 1, 0, 4));

    // The client rewrote its last message: it replaces the held one.
    *messages.last_mut().unwrap() = assistant("The tests fail in module b.");
    let rewritten = prepare(&mut d, "r", &messages);
    assert_eq!(reconciliation(&rewritten), (3, 1, 1, 4));
    assert_eq!(rewritten["messages"][3], messages[3]);

    // A client that stores satchel's rendered view and sends it back is recognised.
    let rendered = rewritten["messages"].as_array().unwrap().clone();
    assert_ne!(
        rendered[2], messages[2],
        "the view differs from the original (it holds an excerpt)"
    );
    let echoed = prepare(&mut d, "r", &rendered);
    assert_eq!(reconciliation(&echoed), (4, 0, 0, 4));
    assert_eq!(echoed["messages"], rewritten["messages"]);
    // …and the session still holds the full original, not the excerpt it was sent.
    assert_eq!(reconstruct(&mut d, text_at(&echoed, 2, "/content")), log);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 9. Crash recovery
// ---------------------------------------------------------------------------------------------

#[test]
fn session_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let log = multibyte_build_log("crash", 90_000);
    let mut d = Daemon::start(dir.path(), &[]);
    let before = prepare(&mut d, "crash", &bash_conversation(&log));
    let file = notice(text_at(&before, 2, "/content")).file;
    d.kill();

    // A new daemon finds the session on disk: `append` works without resending anything.
    let mut d = Daemon::start(dir.path(), &[]);
    let after = append(&mut d, "crash", &[assistant("Looking at the failure.")]);
    assert_eq!(reconciliation(&after), (0, 1, 0, 4));
    let returned = after["messages"].as_array().unwrap();
    assert_eq!(
        returned[..3],
        before["messages"].as_array().unwrap()[..],
        "same messages, same excerpt"
    );
    assert_eq!(notice(text_at(&after, 2, "/content")).file, file);
    assert_eq!(reconstruct(&mut d, text_at(&after, 2, "/content")), log);
    d.shutdown();
}

/// The offloaded texts are written on a background thread while the call goes on: if they
/// cannot be written, the call fails, nothing that refers to them is logged, and the same
/// call succeeds once the disk is back.
#[test]
fn an_offload_that_cannot_be_written_fails_the_call_and_logs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = multibyte_build_log("disk", 90_000);
    let mut d = Daemon::start(dir.path(), &[]);
    assert_alive(&mut d); // the workspace is set up
    let tool_results = dir.path().join("tool_result");
    std::fs::remove_dir_all(&tool_results).unwrap();
    std::fs::write(&tool_results, b"not a directory").unwrap();

    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "disk", "messages": bash_conversation(&log)}),
    );
    assert_eq!(error_code(&error), -32004, "{error}");
    assert_alive(&mut d);
    let session_log = dir.path().join("sessions").join("disk.jsonl");
    let logged = std::fs::read_to_string(&session_log).unwrap_or_default();
    assert!(
        !logged.contains("tool_result/"),
        "the log refers to a file that was never written: {logged}"
    );
    assert_eq!(
        d.call_err(
            "context.prepare",
            json!({"session_id": "disk", "append": [user("next")]})
        )["code"],
        -32001,
        "the failed call left no session behind"
    );

    std::fs::remove_file(&tool_results).unwrap();
    std::fs::create_dir(&tool_results).unwrap();
    let result = prepare(&mut d, "disk", &bash_conversation(&log));
    let file = notice(text_at(&result, 2, "/content")).file;
    assert_offload_file(dir.path(), &file, &log);
    d.kill();
    let mut d = Daemon::start(dir.path(), &[]);
    let after = append(&mut d, "disk", &[assistant("Looking at it.")]);
    assert_eq!(reconstruct(&mut d, text_at(&after, 2, "/content")), log);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 10. context.read
// ---------------------------------------------------------------------------------------------

#[test]
fn context_read_is_confined_to_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    // A first reply means the daemon has created `tool_result/`.
    assert_alive(&mut d);
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        dir.path().join("tool_result/link.txt"),
    )
    .unwrap();

    for path in [
        "../x",
        "/etc/passwd",
        "tool_result/../../etc/passwd",
        "tool_result/link.txt",
    ] {
        let error = d.call_err("context.read", json!({"path": path}));
        assert_eq!(error_code(&error), -32002, "{path}: {error}");
    }
    let missing = d.call_err(
        "context.read",
        json!({"path": "tool_result/0123456789abcdef0123456789abcdef.txt"}),
    );
    assert_eq!(error_code(&missing), -32003, "{missing}");
    d.shutdown();
}

#[test]
fn context_read_refuses_the_signing_key_under_any_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    assert_alive(&mut d);
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("candidates.key"), "KEY-MATERIAL-0123456789abcdef012").unwrap();
    std::os::unix::fs::symlink(keys.join("candidates.key"), dir.path().join("tool_result/k.txt")).unwrap();
    for path in ["keys/candidates.key", "./keys/candidates.key", "tool_result/k.txt"] {
        let error = d.call_err("context.read", json!({"path": path}));
        assert_eq!(error_code(&error), -32002, "{path}: {error}");
        assert!(!error.to_string().contains("KEY-MATERIAL"), "{error}");
    }
    d.shutdown();
}

#[test]
fn context_read_serves_offloaded_files_by_line_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let log = multibyte_build_log("read", 60_000);
    let out = prepare(&mut d, "read", &bash_conversation(&log));
    let file = notice(text_at(&out, 2, "/content")).file;

    let line3 = log.match_indices('\n').nth(1).unwrap().0 + 1;
    let slice = d.call("context.read", json!({"path": file, "start_line": 3, "max_bytes": 500}));
    let content = slice["content"].as_str().unwrap();
    assert!(
        !content.is_empty() && content.len() <= 500 && content.ends_with('\n'),
        "{slice}"
    );
    assert_eq!(content, &log[line3..line3 + content.len()]);
    assert_eq!(slice["start_line"], 3);
    assert_eq!(slice["byte_offset"], line3);
    assert_eq!(slice["total_bytes"], log.len());
    assert_eq!(slice["total_lines"], log.lines().count());
    assert_eq!(slice["eof"], false);

    // An offset inside "é" would split a character.
    let inside_char = log.find('é').unwrap() + 1;
    let error = d.call_err("context.read", json!({"path": file, "byte_offset": inside_char}));
    assert_eq!(error_code(&error), -32602, "{error}");
    assert!(error["message"].as_str().unwrap().contains("byte_offset"), "{error}");
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 11. Error codes
// ---------------------------------------------------------------------------------------------

#[test]
fn every_error_code_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);

    d.send_raw(b"{bad json\n");
    let (_, reply) = d.next_frame();
    assert_eq!(
        (error_code(&reply["error"]), &reply["id"]),
        (-32700, &Value::Null),
        "{reply}"
    );
    assert_alive(&mut d);

    d.send_raw(b"{\"foo\":1,\"id\":6}\n");
    let (_, reply) = d.next_frame();
    assert_eq!(
        (error_code(&reply["error"]), &reply["id"]),
        (-32600, &json!(6)),
        "{reply}"
    );
    assert_alive(&mut d);

    assert_eq!(error_code(&d.call_err("context.summon", json!({}))), -32601);

    let no_session = d.call_err("context.prepare", json!({"messages": [user("hi")]}));
    assert_eq!(error_code(&no_session), -32602);
    assert!(
        no_session["message"].as_str().unwrap().contains("session_id"),
        "{no_session}"
    );

    let both = d.call_err(
        "context.prepare",
        json!({"session_id": "e", "messages": [user("a")], "append": [user("b")]}),
    );
    assert_eq!(error_code(&both), -32602, "{both}");

    let unknown_key = json!({"session_id": "e", "messages": [user("a")], "config": {"pruning_recnt": 1}});
    let error = d.call_err("context.prepare", unknown_key);
    assert_eq!(error_code(&error), -32602);
    assert!(error["message"].as_str().unwrap().contains("pruning_recnt"), "{error}");

    // By position, even with every field in order: the protocol takes params by name only.
    let positional = d.call_err("context.prepare", json!(["e", [user("a")]]));
    assert_eq!(error_code(&positional), -32602, "{positional}");
    assert!(
        positional["message"].as_str().unwrap().contains("object"),
        "{positional}"
    );

    let unknown = d.call_err(
        "context.prepare",
        json!({"session_id": "never-created", "append": [user("a")]}),
    );
    assert_eq!(error_code(&unknown), -32001, "{unknown}");

    let evil = d.call_err(
        "context.prepare",
        json!({"session_id": "../evil", "messages": [user("a")]}),
    );
    assert_eq!(error_code(&evil), -32602, "{evil}");
    assert!(!dir.path().join("evil.jsonl").exists());

    // The transport's limit is 64 MiB and cannot be lowered from outside, so go just past it.
    // The line is streamed and discarded by the daemon, never buffered whole.
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        d.send_raw(&chunk);
    }
    d.send_raw(b"xxxxxxxxxx\n");
    let (_, reply) = d.next_frame();
    assert_eq!(
        (error_code(&reply["error"]), &reply["id"]),
        (-32007, &Value::Null),
        "{reply}"
    );

    // After all of that, real work still succeeds.
    let ok = prepare(&mut d, "e", &bash_conversation(&multibyte_build_log("after", 60_000)));
    assert_eq!(actions(&ok, "offloaded").len(), 1);
    d.shutdown();
}

#[test]
fn the_message_size_limit_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_args(dir.path(), &[], &["--max-message-bytes", "4096"]);
    let big = json!({"session_id": "small", "messages": [user(&"x".repeat(10_000))]});
    for framing in [Framing::Ndjson, Framing::ContentLength] {
        d.framing = framing;
        d.request("context.prepare", big.clone());
        let (reply_framing, error) = d.next_frame();
        assert_eq!(
            (error_code(&error["error"]), reply_framing),
            (-32007, framing),
            "{error}"
        );
    }
    let ok = prepare(&mut d, "small", &[user("fits")]);
    assert_eq!(ok["reconciliation"]["session_messages"], 1);
    d.shutdown();
}

#[test]
fn a_reply_over_the_size_limit_is_an_error_not_a_cut_frame() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_args(dir.path(), &[], &["--max-message-bytes", "4096"]);
    let first = prepare(&mut d, "grows", &[user(&"a".repeat(2_000))]);
    assert_eq!(first["reconciliation"]["session_messages"], 1);
    // Each request fits; the reply carries the whole history and does not.
    let error = d.call_err(
        "context.prepare",
        json!({"session_id": "grows", "append": [assistant(&"b".repeat(2_500))]}),
    );
    assert_eq!(error_code(&error), -32008, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("nothing was changed"),
        "{error}"
    );
    // The refused call took no effect: a retry cannot duplicate, and the session is as it was.
    let resent = prepare(&mut d, "grows", &[user(&"a".repeat(2_000))]);
    assert_eq!(
        (
            resent["reconciliation"]["reused"].as_u64(),
            resent["reconciliation"]["appended"].as_u64(),
            resent["reconciliation"]["replaced"].as_u64(),
            resent["reconciliation"]["session_messages"].as_u64()
        ),
        (Some(1), Some(0), Some(0), Some(1)),
        "{resent}"
    );
    assert_alive(&mut d);
    d.shutdown();
}

#[test]
fn values_of_the_wrong_type_are_reported_by_field_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    // (params, the field the client must be told about)
    let cases = [
        (
            json!({"session_id": "cfg", "messages": [user("a")], "config": {"pruning_recent_n": "x"}}),
            "pruning_recent_n",
        ),
        (
            json!({"session_id": "cfg", "messages": [user("a")], "config": {"pruning_enabled": 1}}),
            "pruning_enabled",
        ),
        (json!({"session_id": 5, "messages": [user("a")]}), "session_id"),
    ];
    // Collected rather than asserted one by one, so a failure shows every case.
    let mut unnamed = Vec::new();
    for (params, field) in cases {
        let error = d.call_err("context.prepare", params);
        assert_eq!(error_code(&error), -32602, "{error}");
        if !error["message"].as_str().unwrap().contains(field) {
            unnamed.push(format!("{field}: {error}"));
        }
    }
    assert!(
        unnamed.is_empty(),
        "errors that do not name the field:\n{}",
        unnamed.join("\n")
    );
    assert_alive(&mut d);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 12. Batches, notifications, cancellation
// ---------------------------------------------------------------------------------------------

#[test]
fn batches_notifications_and_unknown_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let batch = json!([
        {"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 12, "method": "context.read", "params": {"path": "tool_result/none.txt"}},
    ]);
    d.send(&batch, Framing::Ndjson);
    let (_, replies) = d.next_frame();
    let replies = replies
        .as_array()
        .unwrap_or_else(|| panic!("a batch gets an array: {replies}"));
    assert_eq!(replies.len(), 2);
    let mut by_id: Vec<&Value> = replies.iter().collect();
    by_id.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(by_id[0]["result"]["server_name"], "satchel");
    assert_eq!(error_code(&by_id[1]["error"]), -32003);

    // Neither a notification nor a cancel of an unknown id gets a reply: the next two frames
    // are the replies to the two requests sent after them, in order.
    let note = json!({"jsonrpc": "2.0", "method": "context.prepare", "params": {"session_id": "n", "messages": []}});
    d.send(&note, Framing::Ndjson);
    d.send(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 424242}}),
        Framing::ContentLength,
    );
    d.send(
        &json!({"jsonrpc": "2.0", "id": 21, "method": "initialize", "params": {}}),
        Framing::Ndjson,
    );
    assert_eq!(d.next_frame().1["id"], 21);
    d.send(
        &json!({"jsonrpc": "2.0", "id": 22, "method": "initialize", "params": {}}),
        Framing::Ndjson,
    );
    assert_eq!(d.next_frame().1["id"], 22);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 13. End of input and a clean stdout
// ---------------------------------------------------------------------------------------------

#[test]
fn stdin_eof_flushes_pending_replies_and_exits_zero_with_only_json_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("stderr.log");
    let workspace = dir.path().join("ws");
    // Own process (not the harness) so the whole of stdout can be checked after exit; logs go
    // to a file so a chatty daemon can never block on a full stderr pipe.
    let mut child = Command::new(crate::support::satchel_bin())
        .arg("--workspace")
        .arg(&workspace)
        .arg("serve")
        .env("SATCHEL_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let log = multibyte_build_log("eof", 100_000);
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "context.read", "params": {"path": "../x"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "context.prepare",
               "params": {"session_id": "eof", "messages": bash_conversation(&log)}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Read concurrently: the replies are larger than a pipe buffer.
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    for request in &requests {
        stdin.write_all(format!("{request}\n").as_bytes()).unwrap();
    }
    drop(stdin); // EOF right after the last request, before its reply can have been written.
    let status = child.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(status.success(), "satchel exited with {status}");

    let replies: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line:.200}")))
        .collect();
    let mut ids: Vec<i64> = replies.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3]);
    let prepared = replies.iter().find(|r| r["id"] == 3).unwrap();
    assert_eq!(
        actions(&prepared["result"], "offloaded").len(),
        1,
        "{:.300}",
        prepared.to_string()
    );

    let logs = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(
        logs.contains("DEBUG"),
        "debug logging was on, and went to stderr only: {logs:.500}"
    );
}

// ---------------------------------------------------------------------------------------------
// 14. Token usage
// ---------------------------------------------------------------------------------------------

fn zones(result: &Value) -> (u64, u64, u64, u64) {
    let t = &result["tokens"];
    let get = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
    let zones = (get("system"), get("tools"), get("messages"), get("total"));
    assert_eq!(
        zones.3,
        zones.0 + zones.1 + zones.2,
        "total is the sum of the zones: {t}"
    );
    zones
}

#[test]
fn token_usage_is_split_by_zone_and_follows_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    // Repeated words: one token each for o200k, while the estimate is bytes / 4.
    let messages = vec![user(&"word ".repeat(1000)), assistant("Understood.")];

    let plain = prepare(&mut d, "t1", &messages);
    let (system, tools, msgs, _) = zones(&plain);
    assert_eq!((system, tools), (0, 0));
    assert!(msgs > 1000, "{}", plain["tokens"]);
    assert_eq!(plain["tokens"]["tokenizer"], "o200k_base");
    assert_eq!(plain["tokens"]["limit"], 131072);

    let tool = json!({"type": "function", "function": {"name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}});
    let with_zones = d.call(
        "context.prepare",
        json!({"session_id": "t2", "messages": messages, "system": "You are a careful coding agent.",
               "tools": [tool]}),
    );
    let (system2, tools2, msgs2, _) = zones(&with_zones);
    assert!(system2 > 0 && tools2 > 0, "{}", with_zones["tokens"]);
    assert_eq!(msgs2, msgs, "the messages zone does not change");

    // A system-role message counts in the system zone, not in messages.
    let mut with_system = vec![json!({"role": "system", "content": "Be brief."})];
    with_system.extend(messages.iter().cloned());
    let (system3, _, msgs3, _) = zones(&prepare(&mut d, "t3", &with_system));
    assert!(system3 > 0);
    assert_eq!(msgs3, msgs);

    let estimated = d.call(
        "context.prepare",
        json!({"session_id": "t1", "messages": messages, "config": {"tokenizer": "estimate"}}),
    );
    assert_eq!(estimated["tokens"]["tokenizer"], "estimate");
    let (_, _, msgs4, _) = zones(&estimated);
    assert_ne!(msgs4, msgs, "a different tokenizer gives different counts");
    assert!(msgs4 >= 1250, "5 000 bytes / 4: {}", estimated["tokens"]);
    d.shutdown();
}

/// A first pass over a long history is parsed, rendered and counted on several cores; a
/// step of one turn on one. Both must give the same request.
#[test]
fn a_multi_megabyte_first_pass_gives_the_request_that_turn_by_turn_steps_give() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let config = json!({"max_input_length": 4_000_000});
    let mut history = Vec::new();
    for turn in 0..60 {
        let id = format!("call_{turn}");
        history.push(user(&format!("step {turn}: build it")));
        history.push(openai_calls(&[(&id, "bash", json!({"command": "cargo build"}))]));
        history.push(tool_result(&id, &multibyte_build_log(&format!("turn{turn}"), 40_000)));
    }
    let bytes: usize = history.iter().map(|m| m.to_string().len()).sum();
    assert!(bytes > 2 << 20, "over the 1 MiB a batch needs to be shared: {bytes}");

    let whole = d.call(
        "context.prepare",
        json!({"session_id": "whole", "messages": history, "config": config}),
    );
    let mut turns = history.chunks(3);
    let mut stepped = d.call(
        "context.prepare",
        json!({"session_id": "stepped", "messages": turns.next().unwrap(), "config": config}),
    );
    for turn in turns {
        stepped = d.call(
            "context.prepare",
            json!({"session_id": "stepped", "append": turn, "config": config}),
        );
    }
    assert_eq!(actions(&whole, "compacted").len(), 0, "the window holds it all");
    assert_eq!(whole["messages"], stepped["messages"]);
    assert_eq!(whole["tokens"], stepped["tokens"]);
    assert_eq!(actions(&whole, "offloaded").len(), 60);
    // Old outputs are cut, the last one is whole-ish, and every one ends with its error line.
    for turn in [0, 29, 59] {
        let output = text_at(&whole, 3 * turn + 2, "/content");
        assert!(output.ends_with(&last_line(&format!("turn{turn}"))), "turn {turn}");
    }
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// Blank text blocks (Anthropic)
// ---------------------------------------------------------------------------------------------

/// Anthropic rejects a text block with no text or only whitespace (400 "text content blocks
/// must be non-empty" / "must contain non-whitespace text"), and some agents send one before a
/// tool call. The request comes without it, the repair is reported, and the session keeps what
/// the client sent.
#[test]
fn anthropic_blank_text_blocks_leave_the_request_not_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_MAX_INPUT_LENGTH", "4096")]);
    let text = |t: &str| json!({"type": "text", "text": t});
    let call = json!({"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}});
    let result = json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "flag.txt"});
    let history = vec![
        json!({"role": "user", "content": [text("Find the flag.")]}),
        json!({"role": "assistant", "content": [text("\n"), call.clone()]}),
        json!({"role": "user", "content": [result.clone(), text(""), text(" \t")]}),
        json!({"role": "assistant", "content": [text("Found it.")]}),
    ];
    let params = json!({"session_id": "blank", "messages": history, "format": "anthropic"});
    let first = d.call("context.prepare", params.clone());
    let expected = json!([
        history[0],
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
        history[3],
    ]);
    assert_eq!(first["messages"], expected);
    let repairs = |reply: &Value| -> Vec<(String, u64)> {
        actions(reply, "repaired")
            .iter()
            .map(|a| (a["repair"].as_str().unwrap().to_owned(), a["index"].as_u64().unwrap()))
            .collect()
    };
    let dropped = |index: u64| ("dropped_empty_text".to_owned(), index);
    assert_eq!(repairs(&first), [dropped(1), dropped(2), dropped(2)]);

    // The session holds the original: resent as is, every message is recognised.
    let again = d.call("context.prepare", params);
    assert_eq!(again["reconciliation"]["reused"], 4);
    assert_eq!(again["reconciliation"]["appended"], 0);
    assert_eq!(again["messages"], expected);
    assert_eq!(
        repairs(&again),
        repairs(&first),
        "each request is repaired and reported"
    );

    // A message of blank text only is not sent empty: it goes, and the user turns around it
    // join, as for an empty message.
    let more = [
        json!({"role": "user", "content": [text(" ")]}),
        json!({"role": "user", "content": "Submit it."}),
    ];
    let next = d.call(
        "context.prepare",
        json!({"session_id": "blank", "append": more, "expect_messages": 4}),
    );
    let messages = next["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{next}");
    assert_eq!(messages[4], more[1]);
    assert_eq!(
        repairs(&next),
        [
            dropped(1),
            dropped(2),
            dropped(2),
            dropped(4),
            ("merged_same_role".to_owned(), 4)
        ]
    );
    let inspect = d.call("context.inspect", json!({"session_id": "blank"}));
    assert_eq!(inspect["messages"], 6, "the session keeps every message sent");

    // What is compacted is archived as sent, blank blocks included.
    d.call("context.compact", json!({"session_id": "blank"}));
    let archived = crate::support::archived(dir.path(), "blank");
    assert!(!archived.is_empty(), "context.compact archived nothing");
    let sent: Vec<&Value> = history.iter().chain(&more).collect();
    for (index, line) in archived {
        assert_eq!(&line["message"], sent[index], "archived message {index}");
    }
    d.shutdown();
}
