//! Black-box tests of the command line as a user meets it: output into a closed pipe, one-line
//! errors, the demo's isolation, clean stops on SIGTERM and SIGINT, `satchel inspect` without a
//! daemon, `satchel config`, warnings about unknown `SATCHEL_` variables and a bad
//! `SATCHEL_LOG`, comma-separated lists and the user's configuration file.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::socket::{daemon_file, default_socket, path_str};
use crate::support::builders::user;
use crate::support::{Daemon, prepare, satchel_bin, wait_for_path};

/// How long a process may take to exit after being told to.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// `satchel ARGS` with an environment that reads nothing of the user's: no `SATCHEL_HOME`,
/// a user configuration directory that holds nothing (unless `env` sets another), logs at
/// `warn`, a backtrace asked for (so that one would show if a panic happened).
fn satchel(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(satchel_bin());
    cmd.args(args)
        .env_remove("SATCHEL_HOME")
        .env("XDG_CONFIG_HOME", "/nonexistent-satchel-test-config")
        .env("SATCHEL_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    satchel(args, env).output().expect("run satchel")
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that a command failed with exit status 1 and exactly one stderr line
/// `satchel: …`, and returns that line.
fn one_line_error(output: &Output) -> String {
    let stderr = stderr_of(output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("satchel: "), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Caused by"),
        "{stderr}"
    );
    lines[0].to_owned()
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = rustix::pipe::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

// ---------------------------------------------------------------------------------------------
// Closed pipes
// ---------------------------------------------------------------------------------------------

#[test]
fn demo_into_a_reader_that_stops_after_one_line_exits_quietly() {
    let home = tempfile::tempdir().unwrap();
    let mut child = satchel(&["demo"], &[("SATCHEL_HOME", path_str(home.path()))])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn satchel demo");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("satchel "), "{first}");
    drop(stdout); // `| head -1`
    let output = child.wait_with_output().unwrap();
    let stderr = stderr_of(&output);
    assert!(output.status.success(), "exit {}: {stderr}", output.status);
    assert!(!stderr.contains("panicked") && !stderr.contains("satchel:"), "{stderr}");
    assert_eq!(fs::read_dir(home.path()).unwrap().count(), 0, "SATCHEL_HOME untouched");

    // Into a pipe already closed: the first write fails, and that is not an error either.
    let output = satchel(&["demo"], &[]).stdout(closed_pipe()).output().unwrap();
    let stderr = stderr_of(&output);
    assert!(output.status.success(), "exit {}: {stderr}", output.status);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn inspect_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start_with_args(dir.path(), &[], &["--socket"]);
    prepare(&mut daemon, "s", &[user("hello")]);
    for args in [vec!["inspect"], vec!["inspect", "s"], vec!["inspect", "s", "--json"]] {
        let mut full = vec!["--workspace", path_str(dir.path())];
        full.extend(args.iter().copied());
        let output = satchel(&full, &[]).stdout(closed_pipe()).output().unwrap();
        let stderr = stderr_of(&output);
        assert!(output.status.success(), "{args:?}: exit {}: {stderr}", output.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    daemon.shutdown();
}

// ---------------------------------------------------------------------------------------------
// User errors
// ---------------------------------------------------------------------------------------------

#[test]
fn user_errors_are_one_line_and_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // A workspace that cannot be one.
    let bad = dir.path().join("file");
    fs::write(&bad, "not a directory").unwrap();
    let inside = bad.join("ws");
    let line = one_line_error(&run(&["--workspace", path_str(&inside), "serve"], &[]));
    assert!(line.contains(path_str(&inside)), "{line}");

    // A configuration file that cannot be read, or is not JSON, or has a bad value.
    let ws = dir.path().join("ws");
    fs::create_dir_all(ws.join("config.json")).unwrap();
    let line = one_line_error(&run(&["--workspace", path_str(&ws), "serve"], &[]));
    assert!(line.contains("config.json"), "{line}");
    let line = one_line_error(&run(&["--workspace", path_str(&ws), "config"], &[]));
    assert!(line.contains("config.json"), "{line}");
    fs::remove_dir(ws.join("config.json")).unwrap();
    fs::write(ws.join("config.json"), "{not json").unwrap();
    let line = one_line_error(&run(&["--workspace", path_str(&ws), "serve"], &[]));
    assert!(line.contains("config.json"), "{line}");
    fs::write(ws.join("config.json"), r#"{"pruning_recent_n": "many"}"#).unwrap();
    let line = one_line_error(&run(&["--workspace", path_str(&ws), "serve"], &[]));
    assert!(line.contains("pruning_recent_n"), "{line}");

    // A variable with a bad value names the key.
    let empty = dir.path().join("empty");
    let line = one_line_error(&run(
        &["--workspace", path_str(&empty), "serve"],
        &[("SATCHEL_MAX_INPUT_LENGTH", "lots")],
    ));
    assert!(line.contains("max_input_length"), "{line}");

    // Inspect without a daemon.
    let line = one_line_error(&run(&["--workspace", path_str(&empty), "inspect"], &[]));
    assert!(line.contains("no daemon running on"), "{line}");

    // A usage error is clap's, with its exit status 2.
    let output = run(&["--no-such-option"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr_of(&output));
    let output = run(&["serve", "--no-stdio"], &[]);
    assert_eq!(output.status.code(), Some(2), "--no-stdio requires --socket");
}

// ---------------------------------------------------------------------------------------------
// The demo is isolated
// ---------------------------------------------------------------------------------------------

#[test]
fn the_demo_never_touches_satchel_home_nor_reads_the_users_configuration() {
    let home = tempfile::tempdir().unwrap();
    let xdg = tempfile::tempdir().unwrap();
    // Configuration that would break the demo's daemons if they read it.
    fs::create_dir_all(xdg.path().join("satchel")).unwrap();
    fs::write(xdg.path().join("satchel").join("config.json"), "{broken").unwrap();
    let output = run(
        &["demo"],
        &[
            ("SATCHEL_HOME", path_str(home.path())),
            ("XDG_CONFIG_HOME", path_str(xdg.path())),
            ("SATCHEL_MAX_INPUT_LENGTH", "not a number"),
            ("SATCHEL_PRUNING_ENABLED", "false"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}\n{stdout}", stderr_of(&output));
    assert!(stdout.contains("identical to the original: yes"), "{stdout}");
    assert!(stdout.contains("identical output: yes"), "{stdout}");
    assert_eq!(fs::read_dir(home.path()).unwrap().count(), 0, "SATCHEL_HOME untouched");
    // Its temporary workspace is gone afterwards.
    let workspace = stdout
        .lines()
        .next()
        .and_then(|l| l.split("workspace ").nth(1))
        .expect("the first line names the workspace");
    assert!(!Path::new(workspace).exists(), "{workspace} removed");
    assert!(!workspace.starts_with(path_str(home.path())), "{workspace}");

    // With --workspace the demo runs there, and leaves it.
    let given = tempfile::tempdir().unwrap();
    let output = run(&["--workspace", path_str(given.path()), "demo"], &[]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(given.path().join("sessions").is_dir());
}

// ---------------------------------------------------------------------------------------------
// Signals and inspect without a daemon
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_and_sigint_stop_a_stdio_and_socket_daemon_cleanly() {
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let mut daemon = Daemon::start_with_args(dir.path(), &[], &["--socket"]);
        daemon.call("initialize", json!({}));
        let socket = default_socket(dir.path());
        wait_for_path(&daemon_file(dir.path()));
        assert!(socket.exists());
        let sent = Command::new("kill")
            .args(["-s", signal, &daemon.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        let status = daemon.wait_exit(EXIT_TIMEOUT);
        assert!(status.success(), "SIG{signal} is a clean stop: {status}");
        assert!(!socket.exists(), "socket removed on SIG{signal}");
        assert!(
            !daemon_file(dir.path()).exists(),
            "run/daemon.json removed on SIG{signal}"
        );
        // And then nothing runs there.
        let line = one_line_error(&run(&["--workspace", path_str(dir.path()), "inspect"], &[]));
        assert_eq!(
            line.split(" (").next().unwrap(),
            format!("satchel: no daemon running on {}", dir.path().display())
        );
    }
}

#[test]
fn inspect_against_a_stale_daemon_file_says_no_daemon_is_running() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start_with_args(dir.path(), &[], &["--socket"]);
    daemon.call("initialize", json!({}));
    daemon.kill();
    assert!(
        daemon_file(dir.path()).exists(),
        "kill -9 leaves run/daemon.json behind"
    );
    let line = one_line_error(&run(&["--workspace", path_str(dir.path()), "inspect", "s"], &[]));
    assert!(
        line.starts_with(&format!("satchel: no daemon running on {} (", dir.path().display())),
        "{line}"
    );
    assert!(line.to_lowercase().contains("connection refused"), "{line}");

    // The socket file gone too.
    fs::remove_file(default_socket(dir.path())).unwrap();
    let line = one_line_error(&run(&["--workspace", path_str(dir.path()), "inspect"], &[]));
    assert!(line.contains("no daemon running on"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The row of `key` in `satchel config`'s table, split on whitespace.
fn row<'a>(table: &'a str, key: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("no row for {key}:\n{table}"))
        .split_whitespace()
        .collect()
}

#[test]
fn config_shows_each_keys_value_default_source_and_variable() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let xdg = dir.path().join("xdg");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(xdg.join("satchel")).unwrap();
    // The user's file is the lower layer: the workspace's wins where both set a key.
    fs::write(
        xdg.join("satchel").join("config.json"),
        r#"{"llm_model": "user-model", "pruning_recent_n": 4}"#,
    )
    .unwrap();
    fs::write(
        ws.join("config.json"),
        r#"{"pruning_recent_n": 5, "llm_extra_headers": {"X-Secret": "s3cret"}}"#,
    )
    .unwrap();
    let env = [
        ("XDG_CONFIG_HOME", path_str(&xdg)),
        ("SATCHEL_SUMMARY_MAX_TOKENS", "1800"),
        ("SATCHEL_MARKDOWN_TOOL_NAMES", "read_skill,load_skill"),
    ];
    let output = run(&["--workspace", path_str(&ws), "config"], &env);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let table = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        row(&table, "pruning_recent_n"),
        ["pruning_recent_n", "5", "2", "file", "SATCHEL_PRUNING_RECENT_N"]
    );
    assert_eq!(
        row(&table, "summary_max_tokens"),
        ["summary_max_tokens", "1800", "0", "env", "SATCHEL_SUMMARY_MAX_TOKENS"]
    );
    assert_eq!(row(&table, "llm_model")[1..4], ["user-model", "gpt-4o-mini", "file"]);
    assert_eq!(
        row(&table, "max_input_length"),
        [
            "max_input_length",
            "131072",
            "131072",
            "default",
            "SATCHEL_MAX_INPUT_LENGTH"
        ]
    );
    assert_eq!(row(&table, "markdown_tool_names")[1], r#"["read_skill","load_skill"]"#);
    assert!(!table.contains("s3cret"), "header values are redacted:\n{table}");
    // Each key's description follows its row.
    let lines: Vec<&str> = table.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("max_input_length ")).unwrap();
    assert_eq!(lines[at + 1].trim(), "Model context window size in tokens.");
    // The layers, in order.
    let user_file = xdg.join("satchel").join("config.json");
    let (user_at, ws_at) = (
        table.find(path_str(&user_file)).expect("names the user's file"),
        table
            .find(path_str(&ws.join("config.json")))
            .expect("names the workspace file"),
    );
    assert!(user_at < ws_at, "{table}");

    let output = run(&["--workspace", path_str(&ws), "config", "--json"], &env);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let keys = document["keys"].as_array().unwrap();
    let key = |name: &str| keys.iter().find(|k| k["key"] == name).unwrap().clone();
    let recent = key("pruning_recent_n");
    assert_eq!(
        (
            &recent["value"],
            &recent["default"],
            &recent["source"],
            &recent["variable"]
        ),
        (&json!(5), &json!(2), &json!("file"), &json!("SATCHEL_PRUNING_RECENT_N"))
    );
    assert_eq!(recent["file"], json!(ws.join("config.json")));
    assert_eq!(key("llm_model")["file"], json!(user_file));
    assert_eq!(key("summary_max_tokens")["source"], "env");
    assert_eq!(key("tokenizer")["source"], "default");
    assert!(key("tokenizer")["description"].as_str().unwrap().len() > 10);
    assert_eq!(key("llm_base_url")["daemon_only"], true);
    assert_eq!(document["files"][0]["path"], json!(user_file));
    assert_eq!(document["files"][1]["found"], true);
}

#[test]
fn the_daemon_reads_the_users_file_under_the_workspaces_and_comma_lists() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    fs::create_dir_all(xdg.join("satchel")).unwrap();
    fs::write(
        xdg.join("satchel").join("config.json"),
        r#"{"llm_model": "user-model", "pruning_recent_n": 4}"#,
    )
    .unwrap();
    let ws = dir.path().join("ws");
    fs::create_dir_all(&ws).unwrap();
    fs::write(ws.join("config.json"), r#"{"pruning_recent_n": 5}"#).unwrap();
    let mut daemon = Daemon::start(
        &ws,
        &[
            ("XDG_CONFIG_HOME", path_str(&xdg)),
            ("SATCHEL_MARKDOWN_TOOL_NAMES", "read_skill, load_skill"),
            ("SATCHEL_READ_FILE_TOOL_NAMES", r#"["cat"]"#),
        ],
    );
    let config = daemon.call("initialize", json!({}))["config"].clone();
    assert_eq!(config["llm_model"], "user-model");
    assert_eq!(config["pruning_recent_n"], 5);
    assert_eq!(config["markdown_tool_names"], json!(["read_skill", "load_skill"]));
    assert_eq!(config["read_file_tool_names"], json!(["cat"]));
    daemon.shutdown();
}

#[test]
fn unknown_satchel_variables_and_a_bad_log_filter_are_warned_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let ws = dir.path().join("ws");
    let mut daemon = Daemon::start_logging_to(
        &ws,
        &[
            ("SATCHEL_PRUNING_RECENT", "3"),
            ("SATCHEL_WIBBLE", "1"),
            ("SATCHEL_BIN", "/somewhere/satchel"),
            ("SATCHEL_TOKENIZER", "estimate"),
            ("SATCHEL_LLM_API_KEY_ENV", "SATCHEL_CLI_TEST_KEY"),
            ("SATCHEL_CLI_TEST_KEY", "k"),
            ("XDG_CONFIG_HOME", "/nonexistent-satchel-test-config"),
        ],
        &log,
    );
    daemon.call("initialize", json!({}));
    daemon.shutdown();
    let stderr = fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("unknown environment variable"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].contains("SATCHEL_PRUNING_RECENT:")
            && warnings[0].contains("did you mean SATCHEL_PRUNING_RECENT_N?"),
        "{stderr}"
    );
    assert!(warnings[1].contains("SATCHEL_WIBBLE"), "{stderr}");
    assert_eq!(stderr.lines().count(), 2, "nothing else at warn: {stderr}");

    // A log filter that is not one: warned about, and the default (info) used.
    let log = dir.path().join("stderr-2.log");
    let mut daemon = Daemon::start_logging_to(&ws, &[("SATCHEL_LOG", "verbose")], &log);
    daemon.call("initialize", json!({}));
    daemon.shutdown();
    let stderr = fs::read_to_string(&log).unwrap();
    let refused: Vec<&str> = stderr.lines().filter(|l| l.contains("SATCHEL_LOG")).collect();
    assert_eq!(refused.len(), 1, "{stderr}");
    assert!(
        refused[0].contains("WARN") && refused[0].contains("verbose"),
        "{stderr}"
    );
    assert!(stderr.contains("satchel serving"), "logs at info: {stderr}");
}

/// The user's configuration file is optional: when `$HOME` cannot be searched (here a `HOME`
/// that is a file, which even root cannot search; and, unless root, a directory without
/// permissions) the daemon starts without it and says so once, at warn.
#[test]
fn a_home_that_cannot_be_searched_is_skipped_with_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home_file = dir.path().join("home-file");
    fs::write(&home_file, "not a directory").unwrap();
    let locked = dir.path().join("locked-home");
    fs::create_dir_all(locked.join(".config/satchel")).unwrap();
    fs::write(locked.join(".config/satchel/config.json"), r#"{"pruning_recent_n": 4}"#).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    // Root searches any directory: only the file then shows the refusal.
    let denied = fs::read_dir(&locked).is_err();
    let mut homes = vec![home_file];
    if denied {
        homes.push(locked.clone());
    } else {
        eprintln!("running as root: a directory without permissions can still be searched; checking the file only");
    }
    for (i, home) in homes.iter().enumerate() {
        let ws = dir.path().join(format!("ws{i}"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("config.json"), r#"{"pruning_recent_n": 5}"#).unwrap();
        let log = dir.path().join(format!("stderr-{i}.log"));
        let mut daemon = Daemon::start_logging_to(&ws, &[("HOME", path_str(home)), ("XDG_CONFIG_HOME", "")], &log);
        let config = daemon.call("initialize", json!({}))["config"].clone();
        assert_eq!(config["pruning_recent_n"], 5, "the workspace's file is read");
        daemon.shutdown();
        let stderr = fs::read_to_string(&log).unwrap();
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "{stderr}");
        let user_file = home.join(".config/satchel/config.json");
        assert!(
            warnings[0].contains(&format!("skipping the user configuration {}", user_file.display())),
            "{stderr}"
        );
    }
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o700)).unwrap();
}

/// CoPaw's own settings start the daemon: `agents.language` in `config.json` (the language of
/// its prompts) and the documented pair `COPAW_MEMORY_COMPACT_THRESHOLD` +
/// `COPAW_MEMORY_COMPACT_RATIO`, both honoured (compaction at whichever is reached first).
#[test]
fn copaws_language_and_its_threshold_with_its_ratio_start_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    fs::create_dir_all(&ws).unwrap();
    fs::write(
        ws.join("config.json"),
        r#"{"agents": {"language": "zh", "running": {"max_input_length": 128000}}}"#,
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let env = [
        ("COPAW_MEMORY_COMPACT_THRESHOLD", "100000"),
        ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
        ("SATCHEL_LOG", "info"),
        ("XDG_CONFIG_HOME", "/nonexistent-satchel-test-config"),
    ];
    let mut daemon = Daemon::start_logging_to(&ws, &env, &log);
    let config = daemon.call("initialize", json!({}))["config"].clone();
    assert_eq!(config["summary_language"], "zh", "{config}");
    assert_eq!(config["max_input_length"], 128000, "{config}");
    // 0.7 of 128000 is 89600 tokens, before 100000: the ratio governs.
    assert_eq!(config["compact_threshold_ratio"], 0.7, "{config}");
    daemon.shutdown();
    let stderr = fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert!(
        stderr.contains("COPAW_MEMORY_COMPACT_THRESHOLD") && stderr.contains("whichever is reached first"),
        "the log says how the two were combined: {stderr}"
    );

    // A threshold below the ratio's governs.
    let env = [
        ("COPAW_MEMORY_COMPACT_THRESHOLD", "64000"),
        ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
        ("XDG_CONFIG_HOME", "/nonexistent-satchel-test-config"),
    ];
    let mut daemon = Daemon::start(&ws, &env);
    let config = daemon.call("initialize", json!({}))["config"].clone();
    assert_eq!(config["compact_threshold_ratio"], 0.5, "{config}");
    daemon.shutdown();
}
