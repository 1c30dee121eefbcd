//! Black-box tests of what `satchel inspect` shows (issue 17 item 4): the messages split by
//! role, the numbers as sent with each offload's saving, the `loaded` flag, the per-request
//! config remembered across a restart, and `--watch` from before a session exists.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::socket::{SMALL_WINDOW, chat, failed, inspect, inspect_rpc, path_str, serve_with_socket, succeeded};
use crate::support::builders::{assistant, openai_calls, tool_result, user};
use crate::support::{REPLY_TIMEOUT, prepare, satchel_bin};

/// `n` tokens as inspect writes them: `950`, `2.1k`, `128k`.
fn k(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else {
        format!("{:.1}k", n as f64 / 1000.0).replace(".0k", "k")
    }
}

/// `n` bytes as inspect writes them: `950 B`, `3.4 KB`, `1.2 MB`.
fn size(n: u64) -> String {
    let (value, unit) = match n {
        0..1_000 => return format!("{n} B"),
        1_000..1_000_000 => (n as f64 / 1e3, "KB"),
        _ => (n as f64 / 1e6, "MB"),
    };
    format!("{value:.1} {unit}").replace(".0 ", " ")
}

/// A command's output of about `bytes` bytes, its lines numbered.
fn output(tag: &str, bytes: usize) -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < bytes {
        i += 1;
        text.push_str(&format!(
            "[{tag} {i:05}] compiling crates/parser/src/module_{}.rs ... ok\n",
            i % 31
        ));
    }
    text
}

/// An OpenAI tool loop with two offloaded bash results: a big one that has left the recent
/// window (with `pruning_recent_n: 2`) and a smaller recent one.
fn tool_loop() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        user("Build the parser crate."),
        openai_calls(&[("call_1", "bash", json!({"command": "cargo build -p parser"}))]),
        tool_result("call_1", &output("build", 120_000)),
        assistant("The build passes. Now the tests."),
        user("Run them."),
        openai_calls(&[("call_2", "bash", json!({"command": "cargo test -p parser"}))]),
        tool_result("call_2", &output("test", 8_000)),
    ]
}

/// The legend line of a part of the window (`"  U   user  1.5k  1.2%"`).
fn legend<'a>(out: &'a str, glyph: char, name: &str) -> &'a str {
    let prefix = format!("  {glyph}   {name} ");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no legend line for {name}: {out}"))
}

#[test]
fn inspect_splits_messages_by_role_and_shows_what_is_sent_of_each_offload() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sock = path_str(&socket);
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let prepared = daemon.call(
        "context.prepare",
        json!({"session_id": "build", "messages": tool_loop(), "config": {"pruning_recent_n": 2}}),
    );
    let inspected = inspect_rpc(&mut daemon, "build");
    assert_eq!(inspected["loaded"], true);

    // The messages zone by role, adding up to it.
    let roles = &inspected["message_tokens"];
    let [user, assistant, results] = ["user", "assistant", "tool_results"].map(|r| roles[r].as_u64().unwrap());
    assert_eq!(
        user + assistant + results,
        inspected["tokens"]["messages"].as_u64().unwrap()
    );
    assert!(user > 0 && assistant > 0 && results > user + assistant, "{roles}");

    // Each offload's sent size is the text the prepared request really carries.
    let offloaded = inspected["offloaded"].as_array().unwrap();
    assert_eq!(offloaded.len(), 2);
    for (o, (call, phase)) in offloaded.iter().zip([("call_1", "old"), ("call_2", "recent")]) {
        let sent = prepared["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["tool_call_id"] == call)
            .and_then(|m| m["content"].as_str())
            .unwrap();
        assert_eq!(o["sent_bytes"], sent.len(), "{o}");
        assert_eq!(o["phase"], phase, "{o}");
        assert_eq!(o["tool"], "bash", "{o}");
    }
    let bytes = |o: &Value, key: &str| o[key].as_u64().unwrap();
    let full: u64 = offloaded.iter().map(|o| bytes(o, "total_bytes")).sum();
    let sent: u64 = offloaded.iter().map(|o| bytes(o, "sent_bytes")).sum();
    assert!(sent < full / 10, "the old excerpt is small: {sent} of {full}");

    // What a user sees: the bar's roles, the tool results' saving, the table largest first.
    let out = succeeded(&inspect(None, &["build", "--socket", sock]));
    let bar = out.lines().find(|l| l.starts_with("  [")).unwrap();
    for glyph in ['U', 'A', 'R'] {
        assert!(bar.contains(glyph), "{glyph}: {bar}");
    }
    assert!(!bar.contains('M'), "the messages are split: {bar}");
    for (glyph, name, tokens) in [
        ('U', "user", user),
        ('A', "assistant", assistant),
        ('R', "tool results", results),
    ] {
        let line = legend(&out, glyph, name);
        assert_eq!(
            line.split_whitespace().nth(name.split(' ').count() + 1),
            Some(k(tokens).as_str()),
            "{line}"
        );
    }
    assert!(
        legend(&out, 'R', "tool results").ends_with(&format!(
            "(2 of them offloaded: {} sent of {}, {} saved)",
            size(sent),
            size(full),
            size(full - sent)
        )),
        "{out}"
    );
    assert!(
        out.contains("(counted as sent: an offloaded tool result counts as its excerpt"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "\noffloaded results 2: {} in full, {} sent, {} saved\n",
            size(full),
            size(sent),
            size(full - sent)
        )),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("  offload:")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    let big = &offloaded[0];
    let expected = format!(
        "offload:0 r3 bash old {} {} {} {}",
        size(bytes(big, "total_bytes")),
        size(bytes(big, "sent_bytes")),
        size(bytes(big, "total_bytes") - bytes(big, "sent_bytes")),
        big["file"].as_str().unwrap()
    );
    assert!(
        rows[0]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .starts_with(&expected),
        "largest saving first: {expected:?} in {out}"
    );
    assert!(rows[1].trim_start().starts_with("offload:1 "), "{out}");
    daemon.shutdown();
}

/// The config line of the list view.
fn config_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("config   "))
        .unwrap_or_else(|| panic!("no config line: {out}"))
}

#[test]
fn inspect_remembers_the_config_overrides_across_a_restart_and_flags_sessions_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sock = path_str(&socket);
    let overrides = json!({"max_input_length": 16384, "offload_notice_path": "relative"});
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let prepared = daemon.call(
        "context.prepare",
        json!({"session_id": "tuned", "messages": tool_loop(), "config": overrides,
               "system": "Work in small steps."}),
    );
    assert_eq!(prepared["tokens"]["limit"], 16384);
    let inspected = inspect_rpc(&mut daemon, "tuned");
    assert_eq!(inspected["config_overrides"], overrides);
    let out = succeeded(&inspect(None, &["tuned", "--socket", sock]));
    assert_eq!(
        config_line(&out),
        "config   overrides of the last prepare: max_input_length=16384, offload_notice_path=relative"
    );
    assert!(
        out.contains(" / 16.4k tokens used"),
        "the window is the overridden one: {out}"
    );
    assert!(out.contains("of the 16384-token window)"), "so is the prompt's: {out}");
    daemon.shutdown();

    // After a restart: not loaded (a flag, not zeros), the overrides still known.
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let inspected = inspect_rpc(&mut daemon, "tuned");
    assert_eq!(inspected["loaded"], false);
    assert_eq!(inspected["config_overrides"], overrides);
    assert_eq!(
        inspected["message_tokens"],
        json!({"user": 0, "assistant": 0, "tool_results": 0})
    );
    assert!(inspected["offloaded"][0].get("sent_bytes").is_none(), "{inspected}");
    let out = succeeded(&inspect(None, &["tuned", "--socket", sock]));
    assert!(config_line(&out).contains("max_input_length=16384"), "{out}");
    assert!(
        out.contains("context  not loaded since the daemon started; its numbers come with its next call"),
        "{out}"
    );
    let table = out.lines().find(|l| l.starts_with("  offload:0 ")).unwrap();
    assert_eq!(
        table.split_whitespace().nth(3),
        Some("-"),
        "no phase while not loaded: {table}"
    );

    // A prepare without overrides clears them, durably too.
    prepare(&mut daemon, "tuned", &tool_loop());
    assert_eq!(inspect_rpc(&mut daemon, "tuned")["config_overrides"], json!({}));
    daemon.shutdown();
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    assert_eq!(inspect_rpc(&mut daemon, "tuned")["config_overrides"], json!({}));
    let out = succeeded(&inspect(None, &["tuned", "--socket", sock]));
    assert_eq!(
        config_line(&out),
        "config   the daemon's (the last prepare sent no overrides)"
    );
    let log = fs::read_to_string(dir.path().join("sessions/tuned.jsonl")).unwrap();
    assert_eq!(
        log.matches(r#""record":"request_config""#).count(),
        2,
        "logged when changed only"
    );
    daemon.shutdown();
}

/// `satchel inspect SESSION --watch --socket SOCKET`, its stdout read line by line.
fn watch(socket: &Path, session: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(satchel_bin())
        .args(["inspect", session, "--watch", "--socket", path_str(socket)])
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn satchel inspect --watch");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn next_line(lines: &mpsc::Receiver<String>) -> String {
    lines.recv_timeout(REPLY_TIMEOUT).expect("a line from inspect --watch")
}

/// An event line: `HH:MM:SS  KIND  ...`, the time checked and cut off.
fn event<'a>(line: &'a str, kind: &str) -> &'a str {
    let (time, rest) = line.split_at(8);
    assert!(
        time.chars()
            .enumerate()
            .all(|(i, c)| if i % 3 == 2 { c == ':' } else { c.is_ascii_digit() }),
        "a time first: {line}"
    );
    assert!(rest.starts_with(&format!("  {kind} ")), "{kind}: {line}");
    rest
}

/// The change of a total, as a watch line writes it: `+1.8k`, `-29.2k`.
fn change(now: u64, before: u64) -> String {
    if now >= before {
        format!("+{}", k(now - before))
    } else {
        format!("-{}", k(before - now))
    }
}

#[test]
fn inspect_watch_waits_for_the_session_and_prints_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut daemon = serve_with_socket(dir.path(), &SMALL_WINDOW, Some(&socket));
    let (mut early, lines) = watch(&socket, "later");
    assert_eq!(
        next_line(&lines),
        "waiting for session later: it does not exist yet; its events follow"
    );

    let total = |r: &Value| r["tokens"]["total"].as_u64().unwrap();
    let first = prepare(&mut daemon, "later", &chat(4));
    let line = next_line(&lines);
    let rest = event(&line, "prepare");
    assert!(rest.contains(" +4 messages      4 live "), "{line}");
    assert!(
        rest.contains(&format!(
            "total {:>6} ({:>6}) of 4.1k",
            k(total(&first)),
            change(total(&first), 0)
        )),
        "{line}"
    );
    assert!(
        rest.ends_with("pressure LOW") && !rest.contains('\x1b'),
        "no colour off a terminal: {line}"
    );

    let second = prepare(&mut daemon, "later", &chat(6));
    let line = next_line(&lines);
    let rest = event(&line, "prepare");
    assert!(rest.contains(" +2 messages      6 live "), "{line}");
    assert!(
        rest.contains(&format!("({:>6})", change(total(&second), total(&first)))),
        "{line}"
    );

    let compacted = daemon.call("context.compact", json!({"session_id": "later"}));
    let line = next_line(&lines);
    let rest = event(&line, "compacting");
    assert!(
        rest.ends_with(", asked for"),
        "the start of a manual compaction: {line}"
    );
    let line = next_line(&lines);
    let rest = event(&line, "compact");
    let now = inspect_rpc(&mut daemon, "later");
    let left = now["messages"].as_u64().unwrap();
    assert!(rest.contains(&format!(" -{} messages ", 6 - left)), "{line}");
    let after = compacted["compaction"]["tokens_after"].as_u64().unwrap();
    assert!(
        rest.contains(&format!("({:>6})", change(after, total(&second)))),
        "{line}"
    );
    let id = compacted["compaction"]["id"].as_str().unwrap();
    assert!(rest.contains(&format!("compacted, now 1 compaction, {id} ")), "{line}");

    // A watch of a session that exists prints its view first, then the changes since it.
    let (mut late, lines) = watch(&socket, "later");
    let view = next_line(&lines);
    assert!(view.starts_with("session later "), "{view}");
    while !next_line(&lines).starts_with("detail keys:") {}
    daemon.call(
        "context.prepare",
        json!({"session_id": "later", "append": [assistant("Done.")]}),
    );
    let line = next_line(&lines);
    assert!(event(&line, "prepare").contains(" +1 message "), "{line}");

    for child in [&mut early, &mut late] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    daemon.shutdown();
}

/// `satchel inspect S --detail section:KEY` with a key the session does not have shows the
/// daemon's refusal, which lists the session's sections (it said "no system prompt sections
/// yet" for a session with five, from a second inspect that no longer saw them).
#[test]
fn inspect_detail_of_an_unknown_section_lists_the_sections_the_session_has() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sock = path_str(&socket);
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let keys = ["soul", "agents", "tools", "memory:today", "policy:push"];
    let sections: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| json!({"key": key, "content": format!("Section {key}: rule {i}."), "priority": 50 + i}))
        .collect();
    for json_flag in [&[][..], &["--json"][..]] {
        // Prepared again each time: a refused call may send the session back to its log
        // (issue 27 item 2), and the inspect that follows would find no sections at all.
        daemon.call(
            "context.prepare",
            json!({"session_id": "five", "messages": [user("hi")], "sections": sections}),
        );
        let mut args = vec!["--socket", sock, "five", "--detail", "section:nope"];
        args.extend_from_slice(json_flag);
        let stderr = failed(&inspect(None, &args));
        assert!(!stderr.contains("no system prompt sections yet"), "{stderr}");
        assert!(stderr.contains("nope"), "{stderr}");
        for key in keys {
            assert!(stderr.contains(key), "{key} not listed: {stderr}");
        }
    }
    // A known key is shown in full.
    daemon.call(
        "context.prepare",
        json!({"session_id": "five", "messages": [user("hi")], "sections": sections}),
    );
    let out = succeeded(&inspect(None, &["--socket", sock, "five", "--detail", "section:tools"]));
    assert!(out.contains("Section tools: rule 2."), "{out}");
    daemon.shutdown();
}
