//! Black-box tests of the local socket (`satchel serve --socket`), the events it pushes
//! (`context.watch`), `context.sessions`, and the `satchel inspect` CLI that attaches to it.
//! Each test spawns the real binary on a fresh temporary workspace.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::builders::{assistant, openai_calls, tool_result, user};
use crate::support::{Daemon, Framing, Rpc, SocketClient, prepare, satchel_bin, wait_for_path};

/// A window small enough for a manual compaction of a short chat (reserve 409 tokens).
pub(crate) const SMALL_WINDOW: [(&str, &str); 1] = [("SATCHEL_MAX_INPUT_LENGTH", "4096")];
/// How long a process may take to exit after being told to.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

pub(crate) fn default_socket(workspace: &Path) -> PathBuf {
    workspace.join("run").join("satchel.sock")
}

pub(crate) fn daemon_file(workspace: &Path) -> PathBuf {
    workspace.join("run").join("daemon.json")
}

fn daemon_info(workspace: &Path) -> Value {
    let text = fs::read_to_string(daemon_file(workspace)).expect("run/daemon.json exists");
    serde_json::from_str(&text).expect("run/daemon.json is JSON")
}

/// Starts `serve --socket [PATH]` and waits for its first stdio reply: the socket is bound
/// and `run/daemon.json` written before stdio is served.
pub(crate) fn serve_with_socket(workspace: &Path, env: &[(&str, &str)], socket: Option<&Path>) -> Daemon {
    let mut args = vec!["--socket"];
    if let Some(path) = socket {
        args.push(path.to_str().expect("UTF-8 temp path"));
    }
    let mut daemon = Daemon::start_with_args(workspace, env, &args);
    daemon.call("initialize", json!({}));
    daemon
}

/// `satchel --workspace W serve ARGS` with stdin closed: a daemon that is refused exits with
/// an error; one that is not would serve stdio, see EOF at once and exit 0.
fn serve_once(workspace: &Path, args: &[&str]) -> Output {
    Command::new(satchel_bin())
        .arg("--workspace")
        .arg(workspace)
        .arg("serve")
        .args(args)
        .env("SATCHEL_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run satchel serve")
}

/// `satchel [--workspace W] inspect ARGS`.
pub(crate) fn inspect(workspace: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(satchel_bin());
    if let Some(workspace) = workspace {
        cmd.arg("--workspace").arg(workspace);
    }
    cmd.arg("inspect")
        .args(args)
        .env("SATCHEL_LOG", "warn")
        .env_remove("SATCHEL_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("run satchel inspect")
}

/// Stdout of a command that must succeed.
pub(crate) fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 stdout")
}

/// Stderr of a command that must fail.
pub(crate) fn failed(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "unexpectedly succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

fn assert_private_socket(path: &Path) {
    let meta = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(meta.file_type().is_socket(), "{} is not a socket", path.display());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "{} must be user-only",
        path.display()
    );
}

fn same_file(a: &Path, b: &Path) -> bool {
    fs::canonicalize(a)
        .ok()
        .is_some_and(|a| fs::canonicalize(b).ok() == Some(a))
}

/// A plain chat of `n` messages of about 60 tokens each, user first.
pub(crate) fn chat(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let text = format!(
                "Turn {i}: {}",
                "the parser crate needs its lexer rewritten for the new token kinds. ".repeat(5)
            );
            if i % 2 == 0 { user(&text) } else { assistant(&text) }
        })
        .collect()
}

/// First lines of [`offloaded_build_log`], recognisable in `--detail offload:N`.
const LOG_HEAD: [&str; 2] = ["BUILD LOG of crates/parser", "   Compiling lexer v0.3.1 (crates/lexer)"];

/// A build log of about 4 KB: over the offload threshold (3,000 + 100 bytes by default).
pub(crate) fn offloaded_build_log() -> String {
    let mut log = format!("{}\n{}\n", LOG_HEAD[0], LOG_HEAD[1]);
    let mut i = 0;
    while log.len() < 4_000 {
        i += 1;
        log.push_str(&format!(
            "[{i:03}] checking crates/parser/src/module_{}.rs ... ok\n",
            i % 17
        ));
    }
    log.push_str("error[E0308]: mismatched types --> crates/parser/src/lexer.rs:42:13\n");
    log
}

/// An OpenAI tool loop whose one tool result is a large build log (offloaded).
pub(crate) fn build_conversation() -> Vec<Value> {
    vec![
        user("Fix the build of the parser crate."),
        openai_calls(&[("call_1", "bash", json!({"command": "cargo build -p parser"}))]),
        tool_result("call_1", &offloaded_build_log()),
        assistant("The lexer returns the wrong token type at line 42."),
    ]
}

pub(crate) fn inspect_rpc(conn: &mut impl Rpc, session: &str) -> Value {
    conn.call_method("context.inspect", json!({"session_id": session}))
}

/// The number in the zone table row of `zone` (`"summary       123   4.5%"`).
fn zone_row(out: &str, zone: &str) -> Option<u64> {
    out.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() != Some(zone) {
            return None;
        }
        words.next()?.parse().ok()
    })
}

/// Checks the list view of `satchel inspect SESSION` against `context.inspect`.
fn assert_list_view(out: &str, inspected: &Value) {
    let tokens = &inspected["tokens"];
    let session = inspected["session_id"].as_str().unwrap();
    assert!(out.contains(&format!("session {session} ")), "{out}");
    assert!(
        out.contains(&format!("context  {} / {} tokens", tokens["total"], tokens["limit"])),
        "token total and limit: {out}"
    );
    let pressure = inspected["pressure"].as_str().unwrap().to_uppercase();
    assert!(out.contains(&format!("pressure {pressure} ")), "pressure word: {out}");
    let compactions = inspected["compactions"].as_array().unwrap().len();
    assert!(out.contains(&format!("compactions {compactions} ")), "{out}");
    assert!(out.contains("zone "), "zone table header: {out}");
    for zone in ["system", "tools", "summary", "compactable", "reserved"] {
        assert_eq!(zone_row(out, zone), tokens[zone].as_u64(), "zone {zone}: {out}");
    }
}

// ---------------------------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------------------------

#[test]
fn default_socket_is_private_recorded_and_removed_when_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &[], None);
    let socket = default_socket(dir.path());
    assert_private_socket(&socket);

    let info = daemon_info(dir.path());
    assert_eq!(info["pid"], json!(daemon.pid()));
    let recorded = PathBuf::from(info["socket"].as_str().expect("socket path"));
    assert!(recorded.is_absolute(), "{info}");
    assert!(same_file(&recorded, &socket), "{info}");
    let version = daemon.call("initialize", json!({}))["server_version"].clone();
    assert_eq!(info["version"], version);
    assert!(info["started_at"].as_str().is_some_and(|s| s.contains('T')), "{info}");

    let mut client = SocketClient::connect(&socket);
    let over_socket = client.call("initialize", json!({}));
    assert_eq!(over_socket["server_name"], "satchel");
    assert!(same_file(
        Path::new(over_socket["workspace"].as_str().unwrap()),
        dir.path()
    ));

    // An attached client does not keep the daemon alive once its editor goes away.
    daemon.shutdown();
    assert!(!socket.exists(), "socket removed on exit");
    assert!(!daemon_file(dir.path()).exists(), "run/daemon.json removed on exit");
}

#[test]
fn explicit_socket_path_and_sigterm_stop_a_socket_only_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // Missing directories are created.
    let socket = elsewhere.path().join("a").join("b").join("s.sock");
    let mut daemon = Daemon::start_with_args(dir.path(), &[], &["--socket", path_str(&socket), "--no-stdio"]);
    wait_for_path(&daemon_file(dir.path()));
    assert_private_socket(&socket);
    let info = daemon_info(dir.path());
    assert_eq!(info["pid"], json!(daemon.pid()));
    assert!(
        same_file(Path::new(info["socket"].as_str().unwrap()), &socket),
        "{info}"
    );
    assert!(!default_socket(dir.path()).exists(), "only the requested socket");

    let mut client = SocketClient::connect(&socket);
    let result = prepare(&mut client, "s", &[user("hello")]);
    assert_eq!(result["reconciliation"]["appended"], 1);

    let killed = Command::new("kill")
        .args(["-TERM", &daemon.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let status = daemon.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    assert!(!socket.exists(), "socket removed on SIGTERM");
    assert!(!daemon_file(dir.path()).exists(), "run/daemon.json removed on SIGTERM");
}

#[test]
fn several_connections_at_once_all_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &[], None);
    let socket = default_socket(dir.path());
    let mut clients: Vec<SocketClient> = (0..8).map(|_| SocketClient::connect(&socket)).collect();
    // Half of them speak Content-Length: the socket takes the same framings as stdio.
    for client in clients.iter_mut().skip(4) {
        client.framing = Framing::ContentLength;
    }
    // Every connection has a request in flight before any reply is read.
    let ids: Vec<u64> = clients
        .iter_mut()
        .enumerate()
        .map(|(n, client)| {
            let messages = [user(&format!("client {n} says hello")), assistant("hi")];
            client.request(
                "context.prepare",
                json!({"session_id": format!("conn-{n}"), "messages": messages}),
            )
        })
        .collect();
    for (n, (client, id)) in clients.iter_mut().zip(ids).enumerate() {
        let (framing, reply) = client.next_frame();
        assert_eq!(reply["id"], json!(id), "{reply}");
        assert_eq!(framing, client.framing, "reply in the framing of its request");
        assert_eq!(reply["result"]["session_id"], format!("conn-{n}"), "{reply}");
        assert_eq!(reply["result"]["reconciliation"]["session_messages"], 2);
    }
    let listed = daemon.call("context.sessions", json!({}));
    let names: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..8).map(|n| format!("conn-{n}")).collect();
    assert_eq!(names, expected, "every connection's session, sorted");
    drop(clients);
    // The daemon outlives its socket clients and keeps serving.
    let mut late = SocketClient::connect(&socket);
    assert_eq!(inspect_rpc(&mut late, "conn-3")["messages"], 2);
    daemon.shutdown();
}

#[test]
fn stdio_and_socket_share_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &[], None);
    let mut client = SocketClient::connect(&default_socket(dir.path()));

    // Driven over stdio, seen over the socket.
    let prepared = prepare(&mut daemon, "editor", &build_conversation());
    let seen = inspect_rpc(&mut client, "editor");
    assert_eq!(seen["tokens"], prepared["tokens"]);
    assert_eq!(seen["messages"], 4);
    assert_eq!(seen["offloaded"].as_array().unwrap().len(), 1, "{seen}");
    assert_eq!(
        seen,
        inspect_rpc(&mut daemon, "editor"),
        "the same state on both transports"
    );

    // Driven over the socket, seen over stdio; the socket client can continue the stdio session.
    let prepared = prepare(&mut client, "agent", &chat(3));
    let seen = inspect_rpc(&mut daemon, "agent");
    assert_eq!(seen["tokens"], prepared["tokens"]);
    assert_eq!(seen["messages"], 3);
    let appended = client.call(
        "context.prepare",
        json!({"session_id": "editor", "append": [user("Now run the tests.")]}),
    );
    assert_eq!(appended["reconciliation"]["session_messages"], 5);
    assert_eq!(inspect_rpc(&mut daemon, "editor")["tokens"], appended["tokens"]);

    // An offloaded file is readable from either side.
    let file = seen_file(&inspect_rpc(&mut daemon, "editor"));
    let read = client.call("context.read", json!({"path": file, "max_bytes": 200}));
    assert!(read["content"].as_str().unwrap().starts_with(LOG_HEAD[0]), "{read}");

    let sessions = client.call("context.sessions", json!({}));
    assert_eq!(sessions, daemon.call("context.sessions", json!({})));
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 2, "{sessions}");
    daemon.shutdown();
}

fn seen_file(inspected: &Value) -> String {
    inspected["offloaded"][0]["file"]
        .as_str()
        .expect("an offloaded file")
        .to_owned()
}

#[test]
fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("stale.sock");
    drop(UnixListener::bind(&socket).unwrap());
    assert!(
        fs::symlink_metadata(&socket).unwrap().file_type().is_socket(),
        "a stale socket is left"
    );

    let daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    assert_private_socket(&socket);
    let mut client = SocketClient::connect(&socket);
    assert_eq!(client.call("initialize", json!({}))["server_name"], "satchel");
    daemon.shutdown();
    assert!(!socket.exists());
}

#[test]
fn what_kill_9_leaves_behind_is_reported_then_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_with_socket(dir.path(), &[], None);
    prepare(&mut first, "s", &[user("hello")]);
    let first_pid = first.pid();
    first.kill();
    // The socket and daemon.json outlive a killed daemon; inspect says it cannot connect.
    assert!(default_socket(dir.path()).exists());
    assert_eq!(daemon_info(dir.path())["pid"], json!(first_pid));
    let stderr = failed(&inspect(Some(dir.path()), &[]));
    assert!(stderr.contains("connecting to"), "{stderr}");

    // The lock died with the process: a new daemon starts and takes over the stale socket.
    let mut second = serve_with_socket(dir.path(), &[], None);
    assert_eq!(daemon_info(dir.path())["pid"], json!(second.pid()));
    assert_private_socket(&default_socket(dir.path()));
    let listed = succeeded(&inspect(Some(dir.path()), &[]));
    assert!(listed.lines().any(|l| l.starts_with("s ")), "{listed}");
    second.call("context.sessions", json!({}));
    second.shutdown();
}

#[test]
fn a_second_daemon_on_the_workspace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let first = serve_with_socket(dir.path(), &[], None);
    let socket = default_socket(dir.path());
    let info = daemon_info(dir.path());
    let first_socket = info["socket"].as_str().unwrap().to_owned();

    let second_socket = other.path().join("second.sock");
    for args in [vec!["--socket"], vec!["--socket", path_str(&second_socket)], vec![]] {
        let stderr = failed(&serve_once(dir.path(), &args));
        assert!(
            stderr.contains("another satchel is serving workspace"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("pid {}", first.pid())),
            "names the pid: {stderr}"
        );
        assert!(stderr.contains(&first_socket), "names the socket: {stderr}");
    }
    assert!(!second_socket.exists(), "the refused daemon bound nothing");
    // The first one is untouched.
    assert_private_socket(&socket);
    assert_eq!(daemon_info(dir.path()), info);
    let mut client = SocketClient::connect(&socket);
    assert_eq!(client.call("context.sessions", json!({}))["sessions"], json!([]));
    first.shutdown();
}

#[test]
fn a_path_that_is_not_a_socket_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    fs::write(&path, "keep me").unwrap();
    let stderr = failed(&serve_once(dir.path(), &["--socket", path_str(&path)]));
    assert!(stderr.contains("exists and is not a socket"), "{stderr}");
    assert!(stderr.contains(path_str(&path)), "{stderr}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "keep me", "the file is untouched");
    assert!(!daemon_file(dir.path()).exists());

    let subdir = dir.path().join("a-directory");
    fs::create_dir(&subdir).unwrap();
    let stderr = failed(&serve_once(dir.path(), &["--socket", path_str(&subdir)]));
    assert!(stderr.contains("exists and is not a socket"), "{stderr}");
    assert!(subdir.is_dir());
}

#[test]
fn a_socket_path_over_107_bytes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("d".repeat(100)).join("satchel.sock");
    assert!(path_str(&long).len() > 107);
    let stderr = failed(&serve_once(dir.path(), &["--socket", path_str(&long)]));
    assert!(stderr.contains("longer than 107 bytes"), "{stderr}");
    assert!(!long.exists());
    assert!(!daemon_file(dir.path()).exists());

    // 107 bytes exactly is fine.
    let base = dir.path().join("x");
    let fill = 107 - path_str(&base).len() - "/satchel.sock".len();
    let exact = PathBuf::from(format!("{}{}/satchel.sock", path_str(&base), "x".repeat(fill)));
    assert_eq!(path_str(&exact).len(), 107);
    let daemon = serve_with_socket(dir.path(), &[], Some(&exact));
    assert_private_socket(&exact);
    daemon.shutdown();
}

// ---------------------------------------------------------------------------------------------
// context.watch and context.sessions
// ---------------------------------------------------------------------------------------------

#[test]
fn watch_pushes_prepare_and_compact_events_of_that_session_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &SMALL_WINDOW, None);
    let socket = default_socket(dir.path());
    let mut watcher = SocketClient::connect(&socket);
    // A session may be watched before it exists.
    assert_eq!(
        watcher.call("context.watch", json!({"session_id": "chat"})),
        json!({"watching": true})
    );
    // A second watcher that goes away must not disturb anyone.
    let mut gone = SocketClient::connect(&socket);
    gone.call("context.watch", json!({"session_id": "chat"}));
    drop(gone);

    let messages = chat(12);
    let prepared = prepare(&mut daemon, "chat", &messages);
    let event = watcher.next_notification();
    assert_eq!(event["jsonrpc"], "2.0");
    assert_eq!(event["method"], "context.event");
    let params = &event["params"];
    assert_eq!(params["session_id"], "chat");
    assert_eq!(params["kind"], "prepare");
    assert_eq!(params["tokens"], prepared["tokens"]);
    assert_eq!(params["messages"], 12);
    assert_eq!(params["compactions"], 0);
    assert_eq!(params["pressure"], inspect_rpc(&mut daemon, "chat")["pressure"]);
    assert_eq!(params["actions"], json!([]));

    // Another session's calls are not pushed to this watcher.
    prepare(&mut daemon, "other", &[user("unrelated")]);
    assert_eq!(watcher.notification_within(Duration::from_millis(300)), None);

    let compacted = daemon.call("context.compact", json!({"session_id": "chat"}));
    assert!(compacted["compacted"].as_u64().unwrap() > 0, "{compacted}");
    // First the compaction's start, while the call runs, then the call's own event.
    let started = watcher.next_notification();
    assert_eq!(started["params"]["kind"], "compaction_started", "{started}");
    assert_eq!(started["params"]["compaction"]["manual"], true, "{started}");
    let event = watcher.next_notification();
    let params = &event["params"];
    assert_eq!(params["kind"], "compact");
    assert_eq!(params["compaction"]["id"], compacted["compaction"]["id"]);
    assert_eq!(params["compactions"], 1);
    assert_eq!(params["actions"], json!(["compacted"]));
    let after = inspect_rpc(&mut watcher, "chat");
    assert_eq!(params["tokens"], after["tokens"]);
    assert_eq!(params["tokens"]["total"], compacted["compaction"]["tokens_after"]);
    assert_eq!(params["messages"], after["messages"]);

    // A prepare from the socket itself is pushed too, with the actions it took.
    let more = [messages.clone(), build_conversation()].concat();
    let prepared = prepare(&mut watcher, "chat", &more);
    let event = watcher.next_notification();
    assert_eq!(event["params"]["kind"], "prepare");
    assert_eq!(event["params"]["tokens"], prepared["tokens"]);
    assert_eq!(event["params"]["actions"], json!(["offloaded"]));
    daemon.shutdown();
}

#[test]
fn sessions_lists_live_numbers_and_stored_sessions_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &[], None);
    let beta = prepare(&mut daemon, "beta", &chat(3));
    let alpha = prepare(&mut daemon, "alpha", &chat(2));
    let mut client = SocketClient::connect(&default_socket(dir.path()));
    let listed = client.call("context.sessions", json!({}));
    assert_eq!(
        listed,
        json!({"sessions": [
            {"session_id": "alpha", "live": true, "messages": 2, "tokens": alpha["tokens"]["total"],
             "pressure": "low", "compactions": 0},
            {"session_id": "beta", "live": true, "messages": 3, "tokens": beta["tokens"]["total"],
             "pressure": "low", "compactions": 0},
        ]})
    );
    drop(client);
    daemon.shutdown();

    let mut daemon = serve_with_socket(dir.path(), &[], None);
    let mut client = SocketClient::connect(&default_socket(dir.path()));
    let stored = |id: &str| {
        json!({"session_id": id, "live": false, "messages": null, "tokens": null, "pressure": null,
               "compactions": null})
    };
    assert_eq!(
        client.call("context.sessions", json!({})),
        json!({"sessions": [stored("alpha"), stored("beta")]})
    );
    // Inspecting loads a session: it is live, with no request counted since the restart.
    assert_eq!(inspect_rpc(&mut client, "beta")["messages"], 3);
    let listed = daemon.call("context.sessions", json!({}));
    assert_eq!(listed["sessions"][0], stored("alpha"));
    assert_eq!(
        listed["sessions"][1],
        json!({"session_id": "beta", "live": true, "messages": 3, "tokens": null, "pressure": null,
               "compactions": 0})
    );
    daemon.shutdown();
}

// ---------------------------------------------------------------------------------------------
// satchel inspect
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_renders_lists_json_and_details() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = serve_with_socket(dir.path(), &SMALL_WINDOW, None);
    let socket = default_socket(dir.path());
    let sock = path_str(&socket);
    prepare(&mut daemon, "build", &build_conversation());
    prepare(&mut daemon, "chat", &chat(12));
    let compacted = daemon.call("context.compact", json!({"session_id": "chat"}));
    let chat_now = prepare(&mut daemon, "chat", &[chat(12), vec![user("And now?")]].concat());

    // The list view, through --socket and through discovery alike.
    let inspected = inspect_rpc(&mut daemon, "chat");
    assert_eq!(inspected["tokens"], chat_now["tokens"]);
    let by_socket = succeeded(&inspect(None, &["chat", "--socket", sock]));
    assert_list_view(&by_socket, &inspected);
    assert!(by_socket.contains("compaction:0"), "{by_socket}");
    assert_eq!(succeeded(&inspect(Some(dir.path()), &["chat"])), by_socket);
    let build = inspect_rpc(&mut daemon, "build");
    let build_view = succeeded(&inspect(Some(dir.path()), &["build"]));
    assert_list_view(&build_view, &build);
    assert!(build_view.contains("offloaded results 1"), "{build_view}");
    assert!(build_view.contains(&seen_file(&build)), "{build_view}");

    // --json is context.inspect as is.
    let json_out = succeeded(&inspect(None, &["chat", "--socket", sock, "--json"]));
    assert_eq!(serde_json::from_str::<Value>(&json_out).unwrap(), inspected);

    // --detail summary is the summary text the model reads.
    let summary = succeeded(&inspect(None, &["chat", "--socket", sock, "--detail", "summary"]));
    assert!(summary.starts_with("# Summary of previous conversation"), "{summary}");
    assert_eq!(
        summary.trim_end(),
        compacted["summary_text"].as_str().unwrap().trim_end()
    );
    let summary_before = succeeded(&inspect(None, &["build", "--socket", sock, "--detail", "summary"]));
    assert!(summary_before.contains("no summary yet"), "{summary_before}");
    // What an instruction did is shown after the text the model reads.
    prepare(&mut daemon, "steer", &chat(12));
    daemon.call(
        "context.compact",
        json!({"session_id": "steer", "instruction": "focus on errors"}),
    );
    let steered = succeeded(&inspect(None, &["steer", "--socket", sock, "--detail", "summary"]));
    assert!(
        steered
            .ends_with("(instruction of the latest compaction: \"focus on errors\"; served first: errors, blocked)\n"),
        "{steered}"
    );

    // --detail compaction:0 is the compaction record: text, and as sent with --json.
    let record = succeeded(&inspect(
        None,
        &["chat", "--socket", sock, "--detail", "compaction:0", "--json"],
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&record).unwrap(),
        inspected["compactions"][0]
    );
    let record = succeeded(&inspect(None, &["chat", "--socket", sock, "--detail", "compaction:0"]));
    assert!(record.starts_with("compaction:0  "), "{record}");
    assert!(record.contains("  summarizer  "), "{record}");

    // --detail offload:0 names the file and shows its first lines.
    let offload = succeeded(&inspect(Some(dir.path()), &["build", "--detail", "offload:0"]));
    assert!(offload.contains(&seen_file(&build)), "{offload}");
    let head = offload.split("--- first lines of").nth(1).expect("a head section");
    let mut lines = head.lines().skip(1);
    assert_eq!(lines.next(), Some(LOG_HEAD[0]), "{offload}");
    assert_eq!(lines.next(), Some(LOG_HEAD[1]), "{offload}");

    for bad in ["offload:5", "compaction:1", "nonsense"] {
        let stderr = failed(&inspect(None, &["build", "--socket", sock, "--detail", bad]));
        assert!(!stderr.is_empty(), "{bad}");
    }

    // Without a session: the sessions of the daemon.
    let listed = succeeded(&inspect(None, &["--socket", sock]));
    let row = |id: &str| {
        listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no row for {id}: {listed}"))
            .to_owned()
    };
    let chat_row: Vec<String> = row("chat").split_whitespace().map(str::to_owned).collect();
    assert_eq!(
        chat_row,
        [
            "chat".to_owned(),
            inspected["messages"].to_string(),
            inspected["tokens"]["total"].to_string(),
            "1".to_owned(),
            inspected["pressure"].as_str().unwrap().to_uppercase(),
        ]
    );
    assert!(row("build").contains(&build["tokens"]["total"].to_string()));
    let json_list = succeeded(&inspect(Some(dir.path()), &["--json"]));
    assert_eq!(
        serde_json::from_str::<Value>(&json_list).unwrap(),
        daemon.call("context.sessions", json!({}))
    );

    // An unknown session is an error that says so.
    let stderr = failed(&inspect(None, &["nope", "--socket", sock]));
    assert!(stderr.contains("unknown session \"nope\""), "{stderr}");
    daemon.shutdown();
}

#[test]
fn inspect_without_a_running_daemon_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = failed(&inspect(Some(dir.path()), &[]));
    assert!(stderr.contains("no running daemon found"), "{stderr}");
    assert!(stderr.contains("daemon.json"), "says where it looked: {stderr}");
    let stderr = failed(&inspect(Some(dir.path()), &["s"]));
    assert!(stderr.contains("no running daemon found"), "{stderr}");

    let missing = dir.path().join("missing.sock");
    let stderr = failed(&inspect(None, &["--socket", path_str(&missing)]));
    assert!(stderr.contains("connecting to"), "{stderr}");
    assert!(stderr.contains(path_str(&missing)), "{stderr}");

    // A daemon serving stdio only has no socket to attach to.
    let mut daemon = Daemon::start(dir.path(), &[]);
    daemon.call("initialize", json!({}));
    let stderr = failed(&inspect(Some(dir.path()), &[]));
    assert!(stderr.contains("no running daemon found"), "{stderr}");
    daemon.shutdown();
}

/// The acceptance: while a client drives a session over stdio, `satchel inspect
/// --socket` in another process shows that session's live numbers.
#[test]
fn inspect_shows_the_live_numbers_of_a_session_driven_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let mut messages = vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    for turn in 0..4 {
        messages.push(user(&format!("Step {turn}: look at the next failing test.")));
        if turn == 2 {
            messages.extend(build_conversation().into_iter().skip(1));
        }
        let prepared = daemon.call(
            "context.prepare",
            json!({"session_id": "agent-run", "messages": messages,
                   "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}),
        );
        let tokens = &prepared["tokens"];
        let out = succeeded(&inspect(None, &["agent-run", "--socket", path_str(&socket)]));
        assert!(
            out.contains(&format!("context  {} / {} tokens", tokens["total"], tokens["limit"])),
            "turn {turn}: {out}"
        );
        assert_eq!(zone_row(&out, "system"), tokens["system"].as_u64(), "{out}");
        assert_eq!(zone_row(&out, "tools"), tokens["tools"].as_u64(), "{out}");
        assert!(out.contains(&format!("{} messages live", messages.len())), "{out}");
        messages.push(assistant(&format!("Step {turn} done.")));
    }
    daemon.shutdown();
}

/// Issue 17 item 4: the session view opens with a bar of the window and a legend per part,
/// counts read "1 message" / "2 messages", there is no colour off a terminal, and a session
/// not loaded since the daemon restarted says so instead of showing zeros.
#[test]
fn inspect_shows_the_window_bar_plurals_and_sessions_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let sock = path_str(&socket);
    let mut daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let one = prepare(&mut daemon, "one", &[user("Where is the lexer?")]);
    prepare(
        &mut daemon,
        "two",
        &[
            json!({"role": "system", "content": "You are a careful coding agent."}),
            user("Where is the lexer?"),
            assistant("In src/lexer.rs."),
        ],
    );

    let out = succeeded(&inspect(None, &["one", "--socket", sock]));
    assert!(!out.contains('\x1b'), "no colour off a terminal: {out}");
    assert!(out.contains("): 1 message live, 0 archived"), "{out}");
    let bar = out
        .lines()
        .find(|l| l.starts_with("  [") && l.ends_with(']'))
        .unwrap_or_else(|| panic!("no bar: {out}"));
    assert_eq!(bar.chars().count(), 64, "60 cells: {bar}");
    let tokens = &one["tokens"];
    let legend = |name: &str| {
        out.lines()
            .find(|l| l.len() > 4 && l[4..].starts_with(name) && l[4 + name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no legend line for {name}: {out}"))
            .to_owned()
    };
    for name in [
        "system",
        "sections",
        "tools",
        "summary",
        "messages",
        "free space",
        "compaction buffer",
    ] {
        assert!(legend(name).contains('%'), "{name}: {out}");
    }
    let k = |n: u64| {
        if n < 1000 {
            n.to_string()
        } else {
            format!("{:.1}k", n as f64 / 1000.0).replace(".0k", "k")
        }
    };
    assert!(
        legend("messages").contains(&format!(" {} ", k(tokens["messages"].as_u64().unwrap()))),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "window   {} / {} tokens used",
            k(tokens["total"].as_u64().unwrap()),
            k(tokens["limit"].as_u64().unwrap())
        )),
        "{out}"
    );
    let two = succeeded(&inspect(None, &["two", "--socket", sock]));
    assert!(two.contains("): 3 messages live"), "{two}");
    daemon.shutdown();

    // After a restart: not loaded, and said so, in the list and in the session view.
    let daemon = serve_with_socket(dir.path(), &[], Some(&socket));
    let listed = succeeded(&inspect(None, &["--socket", sock]));
    assert!(
        listed.contains("not loaded since the daemon started; its numbers come with its next call"),
        "{listed}"
    );
    let out = succeeded(&inspect(None, &["one", "--socket", sock]));
    assert!(
        out.contains("context  not loaded since the daemon started; its numbers come with its next call"),
        "{out}"
    );
    assert!(!out.contains("zone "), "no table of zeros: {out}");
    daemon.shutdown();
}
