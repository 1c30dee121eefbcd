//! Storage hardening, against the real binary: a full disk or an I/O error at any durable
//! step loses nothing that was acknowledged and leaves every session loadable, and the
//! workspace is the user's alone whatever the umask.
//!
//! Faults are injected with `SATCHEL_FAILPOINTS` (see `satchel_storage::failpoints`: `POINT:KIND@HITS`
//! fails the HITS-th time the daemon reaches a durable step), and, where the test may mount
//! one, for real on a 4 MiB tmpfs filled up with a filler file. The client of these tests
//! behaves as an agent would: a call that failed is sent again, with `expect_messages`, so a
//! failed call that had taken effect anyway shows up as a stale-session error.
//!
//! `surface` does the same for the calls beyond `context.prepare` (memory files, candidates,
//! pins, purges, expansions).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Rng;
use crate::support::builders::{assistant, call_message, result_message, user};
use crate::support::checks::{error_code, is_summary_message, n, restore_excerpts, same_modulo_summary};
use crate::support::trajectories::Format;
use crate::support::{Daemon, REPLY_TIMEOUT, SocketClient, actions, archive_lines, satchel_bin, wait_for_path};

mod surface;

const SESSION: &str = "hardening";
/// -32004: the disk refused a write; nothing was changed.
const STORAGE_FAILURE: i64 = -32004;
/// The exit status of a daemon a `crash` failpoint stopped.
const CRASH_EXIT_STATUS: i32 = 86;
/// The fast token estimate: no encoder to build at each of the many starts.
const FAST: (&str, &str) = ("SATCHEL_TOKENIZER", "estimate");
/// A small window, so that a few turns compact.
const SMALL_WINDOW: [(&str, &str); 3] = [
    ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
    ("SATCHEL_SUMMARY_MAX_TOKENS", "600"),
    FAST,
];

// ---------------------------------------------------------------------------------------------
// The conversation and its client
// ---------------------------------------------------------------------------------------------

/// A paragraph of about `bytes` bytes, different for every `turn`.
fn prose(turn: usize, who: &str, bytes: usize) -> String {
    let mut text = format!("Turn {turn}, {who}: ");
    let mut i = 0;
    while text.len() < bytes {
        i += 1;
        text.push_str(&format!(
            "step {i} of turn {turn} looks at module_{} and its tests. ",
            (turn * 7 + i) % 41
        ));
    }
    text
}

/// The messages of turn `i`: a user request and a reply, or, with `tools`, every third turn a
/// tool call whose 5 KB output is offloaded to a file.
fn turn(i: usize, tools: bool) -> Vec<Value> {
    if tools && i % 3 == 2 {
        let id = format!("call_{i}");
        let mut output = String::new();
        while output.len() < 5_000 {
            output.push_str(&format!(
                "[turn {i}] line {:04}: checking module_{} ... ok\n",
                output.len() / 50,
                i % 13
            ));
        }
        return vec![
            call_message(
                Format::Openai,
                &id,
                "bash",
                &json!({"command": format!("cargo test {i}")}),
                "Running the tests.",
            ),
            result_message(Format::Openai, &id, &output),
        ];
    }
    vec![user(&prose(i, "user", 600)), assistant(&prose(i, "assistant", 600))]
}

/// What became of a call.
enum Outcome {
    /// Answered with a result: the messages are acknowledged.
    Done(Value),
    /// Answered with an error (always -32004 here): the messages are not in the session.
    Failed(Value),
    /// The daemon died before answering: whether the messages are in is unknown.
    Crashed,
}

/// An agent's view of one session: the messages acknowledged so far, in order.
struct Client {
    history: Vec<Value>,
}

impl Client {
    fn new() -> Client {
        Client { history: Vec::new() }
    }

    /// Sends `batch` after the acknowledged history (`append` with `expect_messages`, or the
    /// whole list while the session does not exist yet) and waits for what becomes of it.
    fn send(&mut self, d: &mut Daemon, batch: &[Value]) -> Outcome {
        let params = if self.history.is_empty() {
            json!({"session_id": SESSION, "messages": batch})
        } else {
            json!({"session_id": SESSION, "append": batch, "expect_messages": self.history.len()})
        };
        let id = d.request("context.prepare", params);
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let reply = loop {
            match d.next_frame_within(Duration::from_millis(100)) {
                Ok((_, frame)) if frame["id"] == json!(id) => break frame,
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => return Outcome::Crashed,
                Err(RecvTimeoutError::Timeout) => {
                    assert!(Instant::now() < deadline, "no reply within {REPLY_TIMEOUT:?}");
                }
            }
        };
        if let Some(error) = reply.get("error") {
            assert_eq!(
                error_code(error),
                STORAGE_FAILURE,
                "only the disk may fail these calls (a stale session means a failed call took effect): {reply}"
            );
            return Outcome::Failed(error.clone());
        }
        self.history.extend_from_slice(batch);
        Outcome::Done(reply["result"].clone())
    }

    /// Sends `batch` until it is acknowledged (at most `tries` times); returns the errors of
    /// the failed attempts and the result.
    fn send_until_done(&mut self, d: &mut Daemon, batch: &[Value], tries: usize) -> (Vec<Value>, Value) {
        let mut errors = Vec::new();
        for _ in 0..tries {
            match self.send(d, batch) {
                Outcome::Done(result) => return (errors, result),
                Outcome::Failed(error) => errors.push(error),
                Outcome::Crashed => panic!("the daemon died; errors so far: {errors:?}"),
            }
        }
        panic!("not acknowledged in {tries} tries: {errors:?}")
    }

    /// After a crash: the whole list, in which the daemon recognises whatever of `pending`
    /// it had logged, so that it counts once either way.
    fn resend_after_crash(&mut self, d: &mut Daemon, pending: &[Value]) -> Value {
        let mut all = self.history.clone();
        all.extend_from_slice(pending);
        let result = d.call("context.prepare", json!({"session_id": SESSION, "messages": all}));
        let reconciliation = &result["reconciliation"];
        assert_eq!(n(&reconciliation["replaced"]), 0, "{reconciliation}");
        assert_eq!(
            n(&reconciliation["session_messages"]) as usize,
            all.len(),
            "{reconciliation}"
        );
        self.history = all;
        result
    }
}

/// The session log of the test's session: every line a record, the last one whole.
fn assert_log_loadable(workspace: &Path) -> Vec<Value> {
    let path = workspace.join("sessions").join(format!("{SESSION}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the session log ends with a torn record"
    );
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("session log line {}: {e}: {line}", i + 1))
        })
        .collect()
}

/// Checks, on a daemon started after the faults, that the session loads and holds every
/// acknowledged message exactly once, in order: resending the whole history reuses all of it,
/// the compacted ones are in the archive (once, as sent) and the others come back as sent.
/// Returns how many archive lines belong to no compaction of the session (lines of a
/// compaction rolled back after its archive write).
fn assert_every_message_once(d: &mut Daemon, workspace: &Path, history: &[Value]) -> usize {
    let last = d.call("context.prepare", json!({"session_id": SESSION, "messages": history}));
    let reconciliation = &last["reconciliation"];
    assert_eq!(
        (
            n(&reconciliation["reused"]) as usize,
            n(&reconciliation["appended"]),
            n(&reconciliation["replaced"]),
            n(&reconciliation["session_messages"]) as usize
        ),
        (history.len(), 0, 0, history.len()),
        "the session holds exactly the acknowledged messages: {reconciliation}"
    );
    let records = assert_log_loadable(workspace);
    let ids = |kind: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["record"] == kind)
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let done: HashSet<String> = ids("compaction_done").into_iter().collect();
    assert_eq!(ids("compaction_begun").len(), done.len(), "no compaction left pending");

    let mut archived = BTreeMap::new();
    let mut orphans = 0;
    for (file, line, value) in archive_lines(workspace) {
        if value["session_id"] != SESSION {
            continue;
        }
        if !done.contains(value["compaction_id"].as_str().unwrap()) {
            orphans += 1;
            continue;
        }
        let index = n(&value["index"]) as usize;
        assert!(index < history.len(), "{file}:{line}: index {index} was never sent");
        assert_eq!(
            value["message"], history[index],
            "{file}:{line}: archived message {index} differs"
        );
        assert!(
            archived.insert(index, ()).is_none(),
            "{file}:{line}: message {index} archived twice"
        );
    }
    let live: Vec<usize> = (0..history.len()).filter(|i| !archived.contains_key(i)).collect();
    let inspect = d.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(n(&inspect["messages"]) as usize, live.len(), "live messages");
    assert_eq!(
        n(&inspect["archived_messages"]) as usize,
        archived.len(),
        "archived messages"
    );
    let returned: Vec<&Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !is_summary_message(m))
        .collect();
    assert_eq!(returned.len(), live.len(), "the request is the live messages");
    for (message, &index) in returned.into_iter().zip(&live) {
        let restored = restore_excerpts(d, Format::Openai, message);
        assert!(
            same_modulo_summary(&restored, &history[index]),
            "message {index} came back changed:\n{restored}\nvs\n{}",
            history[index]
        );
    }
    orphans
}

/// The `compacted` actions of a `prepare` result.
fn compactions(result: &Value) -> usize {
    actions(result, "compacted").len()
}

/// A daemon on `workspace` with `failpoints` armed (none when empty) and `env`.
fn start(workspace: &Path, failpoints: &str, env: &[(&str, &str)]) -> Daemon {
    let mut env = env.to_vec();
    if !failpoints.is_empty() {
        env.push(("SATCHEL_FAILPOINTS", failpoints));
    }
    Daemon::start(workspace, &env)
}

/// A daemon without failpoints whose log (at `info`) goes to `log`.
fn start_logging(workspace: &Path, env: &[(&str, &str)], log: &Path) -> Daemon {
    let mut env = env.to_vec();
    env.push(("SATCHEL_LOG", "info"));
    Daemon::start_logging_to(workspace, &env, log)
}

/// Waits until the start-up offload sweep is logged; fails if it failed.
fn assert_sweep_succeeded(log: &Path) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(!text.contains("offload sweep failed"), "{text}");
        if text.contains("offload sweep") {
            return;
        }
        assert!(Instant::now() < deadline, "no offload sweep logged:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Defect 1: a failed session-log append
// ---------------------------------------------------------------------------------------------

/// The issue's first defect, under injected faults: appends fail (-32004) while the "disk is
/// full", the client sends the failed turn again once it is not, and after a restart the
/// session loads, every acknowledged message is there once, and the offload sweep works.
#[test]
fn a_failed_session_log_append_is_undone_and_the_session_reloads() {
    for spec in [
        "append:torn@4-6",
        "append:enospc@4-6",
        "append-sync:eio@4-6",
        // The undo fails too: the tail is cut before the log is used again.
        "append:torn@4-6,undo:eio@1-3",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let mut d = start(ws, spec, &[FAST]);
        let mut client = Client::new();
        let mut i = 0;
        let errors = loop {
            assert!(i < 20, "{spec}: no append failed");
            let (errors, _) = client.send_until_done(&mut d, &turn(i, false), 10);
            i += 1;
            if !errors.is_empty() {
                break errors;
            }
        };
        assert!(errors.len() >= 3, "{spec}: {errors:?}");
        let message = errors[0]["message"].as_str().unwrap();
        assert!(
            message.contains("undo"),
            "{spec}: the error says what became of the append: {message}"
        );
        assert!(message.contains(&format!("{SESSION}.jsonl")), "{spec}: {message}");
        for _ in 0..2 {
            client.send_until_done(&mut d, &turn(i, false), 1);
            i += 1;
        }
        d.shutdown();
        assert_log_loadable(ws);

        let log = ws.join("daemon.log");
        let mut d = start_logging(ws, &[FAST], &log);
        assert_sweep_succeeded(&log);
        assert_eq!(assert_every_message_once(&mut d, ws, &client.history), 0, "{spec}");
        d.shutdown();
    }
}

// ---------------------------------------------------------------------------------------------
// Defect 2: a failed archive write during a compaction
// ---------------------------------------------------------------------------------------------

/// The second defect, under injected faults: the second compaction's archive write
/// fails (torn, or its fsync), the call fails and changes nothing, the same daemon compacts
/// again later (appending after what the failure left), and nothing is lost or glued.
#[test]
fn a_failed_archive_write_loses_nothing_and_the_next_compaction_lands_whole() {
    for spec in ["archive:torn@2", "archive-sync:eio@2", "archive:torn@2,undo:eio@1"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let mut d = start(ws, spec, &SMALL_WINDOW);
        let mut client = Client::new();
        let mut compacted = 0;
        let mut failed = None;
        for i in 0.. {
            assert!(i < 80, "{spec}: no archive write failed ({compacted} compactions)");
            let (errors, result) = client.send_until_done(&mut d, &turn(i, false), 3);
            compacted += compactions(&result);
            if let Some(error) = errors.first() {
                assert_eq!(compacted, 2, "{spec}: the retry compacts ({errors:?})");
                failed = Some(error.clone());
                // What the failure left behind: whole lines only (this reads every line).
                archive_lines(ws);
                break;
            }
        }
        let message = failed.unwrap()["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("dialog/"),
            "{spec}: the archive write failed: {message}"
        );
        assert!(message.contains("undo"), "{spec}: {message}");
        // Enough turns for another compaction by the same daemon.
        let mut i = client.history.len();
        while compacted < 4 {
            assert!(i < 200, "{spec}: no further compaction");
            let (_, result) = client.send_until_done(&mut d, &turn(i, false), 1);
            compacted += compactions(&result);
            i += 1;
        }
        d.shutdown();

        let mut d = start(ws, "", &SMALL_WINDOW);
        assert_eq!(assert_every_message_once(&mut d, ws, &client.history), 0, "{spec}");
        d.shutdown();
    }
}

/// A crash in the middle of an append (half the bytes written, then the process gone) leaves
/// a torn tail: the restarted daemon loads the session, finishes an interrupted compaction
/// without gluing a line to the fragment, and counts the unanswered call once.
#[test]
fn a_crash_in_the_middle_of_an_append_is_recovered_without_loss() {
    for (spec, torn_file) in [
        ("archive:crash@2", "dialog"),
        ("append:crash@6", "sessions"),
        ("append-sync:crash@6", ""),
        ("offload:crash@2", ""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let mut d = start(ws, spec, &SMALL_WINDOW);
        let mut client = Client::new();
        let mut i = 0;
        let pending = loop {
            assert!(i < 80, "{spec}: the daemon did not crash");
            let batch = turn(i, true);
            i += 1;
            match client.send(&mut d, &batch) {
                Outcome::Done(_) => {}
                Outcome::Failed(error) => panic!("{spec}: {error}"),
                Outcome::Crashed => break batch,
            }
        };
        let status = d.wait_exit(REPLY_TIMEOUT);
        assert_eq!(status.code(), Some(CRASH_EXIT_STATUS), "{spec}");
        if !torn_file.is_empty() {
            let torn = std::fs::read_dir(ws.join(torn_file))
                .unwrap()
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .any(|bytes| !bytes.is_empty() && !bytes.ends_with(b"\n"));
            assert!(torn, "{spec}: the crash left a torn tail in {torn_file}/");
        }

        let mut d = start(ws, "", &SMALL_WINDOW);
        client.resend_after_crash(&mut d, &pending);
        for _ in 0..4 {
            client.send_until_done(&mut d, &turn(i, true), 1);
            i += 1;
        }
        d.shutdown();
        let mut d = start(ws, "", &SMALL_WINDOW);
        assert_eq!(assert_every_message_once(&mut d, ws, &client.history), 0, "{spec}");
        d.shutdown();
    }
}

// ---------------------------------------------------------------------------------------------
// Random faults at every durable step
// ---------------------------------------------------------------------------------------------

/// Every durable step, with how many times a round of calls reaches it (about).
const POINTS: [(&str, u64); 9] = [
    ("append", 14),
    ("append-sync", 14),
    ("archive", 4),
    ("archive-sync", 4),
    ("offload", 5),
    ("offload-sync", 5),
    ("memory", 4),
    ("memory-sync", 4),
    ("undo", 3),
];
const KINDS: [&str; 3] = ["enospc", "eio", "torn"];
/// Calls per daemon; the failpoints of a daemon are drawn for its calls.
const CALLS_PER_ROUND: usize = 10;
const ROUNDS: usize = 8;

/// Many calls, each daemon armed with about one random fault per call (any step, any kind),
/// the daemon restarted (or killed) between rounds: after a final restart, every acknowledged
/// message is in the session exactly once, and every failed call changed nothing.
#[test]
fn random_faults_at_every_durable_step_lose_nothing_acknowledged() {
    let seeds: Vec<u64> = match std::env::var("SATCHEL_FAULT_SEED") {
        Ok(seed) => vec![seed.parse().expect("SATCHEL_FAULT_SEED is a number")],
        Err(_) => vec![0x5EED_0001, 0x5EED_0002],
    };
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let mut rng = Rng(seed);
        let mut client = Client::new();
        let (mut acknowledged, mut failed, mut turn_no) = (0, 0, 0);
        let mut pending: Option<Vec<Value>> = None;
        for round in 0..ROUNDS {
            let spec: Vec<String> = (0..CALLS_PER_ROUND)
                .map(|_| {
                    let (point, hits) = POINTS[rng.below(POINTS.len() as u64) as usize];
                    let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
                    format!("{point}:{kind}@{}", 1 + rng.below(hits))
                })
                .collect();
            let spec = spec.join(",");
            let mut d = start(ws, &spec, &SMALL_WINDOW);
            for _ in 0..CALLS_PER_ROUND {
                let batch = pending.take().unwrap_or_else(|| {
                    turn_no += 1;
                    turn(turn_no, true)
                });
                match client.send(&mut d, &batch) {
                    Outcome::Done(_) => acknowledged += 1,
                    Outcome::Failed(_) => {
                        failed += 1;
                        pending = Some(batch);
                    }
                    Outcome::Crashed => panic!("seed {seed:#x} round {round} ({spec}): the daemon died"),
                }
            }
            if rng.below(2) == 0 {
                d.shutdown();
            } else {
                d.kill();
            }
            assert_log_loadable(ws);
        }
        let mut d = start(ws, "", &SMALL_WINDOW);
        let orphans = assert_every_message_once(&mut d, ws, &client.history);
        d.shutdown();
        eprintln!(
            "seed {seed:#x}: {acknowledged} calls acknowledged, {failed} failed by injected faults, \
             {} messages, {orphans} archive lines of rolled-back compactions",
            client.history.len()
        );
        assert!(
            failed > 0 && acknowledged > failed,
            "seed {seed:#x}: {failed} failed, {acknowledged} acknowledged"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A real full disk: a small tmpfs
// ---------------------------------------------------------------------------------------------

/// A tmpfs mounted for one test, unmounted when dropped.
pub(crate) struct Tmpfs {
    pub(crate) dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `4m`) at `dir`, or says why it cannot (not root, a
    /// container without the capability, no `mount`).
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir: dir.to_owned() })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Mounts a 4 MiB tmpfs in `dir`, or prints why the test is skipped.
pub(crate) fn small_disk(dir: &Path, test: &str) -> Option<Tmpfs> {
    let mount_point = dir.join("disk");
    std::fs::create_dir(&mount_point).unwrap();
    match Tmpfs::mount(&mount_point, "4m") {
        Ok(tmpfs) => Some(tmpfs),
        Err(why) => {
            eprintln!("SKIPPED {test}: no small tmpfs to fill: {why}");
            None
        }
    }
}

/// Fills the file system of `dir` with the file `filler` until it refuses another byte.
pub(crate) fn fill(filler: &Path) {
    let mut file = std::fs::File::create(filler).unwrap();
    for chunk in [64 << 10, 4 << 10, 256, 1] {
        let bytes = vec![b'x'; chunk];
        while file.write_all(&bytes).is_ok() {}
    }
    // A failed write_all may have written part of a chunk: that is fine, the disk is full.
    let _ = file.sync_all();
}

/// Frees `bytes` of the filler.
fn free(filler: &Path, bytes: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(filler).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(bytes)).unwrap();
}

/// The first defect on a real full disk: appends fail with -32004 while it is full,
/// nothing of them stays in the log, and once space is freed the same daemon goes on; after a
/// restart the session loads with every acknowledged message once.
#[test]
fn a_full_tmpfs_during_appends_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = small_disk(dir.path(), "a_full_tmpfs_during_appends_loses_nothing") else {
        return;
    };
    let ws = disk.dir.join("ws");
    let filler = disk.dir.join("filler");
    let mut d = start(&ws, "", &[FAST]);
    let mut client = Client::new();
    for i in 0..2 {
        client.send_until_done(&mut d, &turn(i, false), 1);
    }
    fill(&filler);
    let mut i = 2;
    let error = loop {
        assert!(i < 40, "appends kept succeeding on a full disk");
        match client.send(&mut d, &turn(i, false)) {
            Outcome::Done(_) => i += 1,
            Outcome::Failed(error) => break error,
            Outcome::Crashed => panic!("the daemon died"),
        }
    };
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("No space left") && message.contains("undo"),
        "{message}"
    );
    assert_log_loadable(&ws);
    // Still full: it fails again, and changes nothing.
    assert!(matches!(client.send(&mut d, &turn(i, false)), Outcome::Failed(_)));
    assert_log_loadable(&ws);

    std::fs::remove_file(&filler).unwrap();
    for _ in 0..3 {
        client.send_until_done(&mut d, &turn(i, false), 1);
        i += 1;
    }
    d.shutdown();
    let log = dir.path().join("daemon.log");
    let mut d = start_logging(&ws, &[FAST], &log);
    assert_sweep_succeeded(&log);
    assert_eq!(assert_every_message_once(&mut d, &ws, &client.history), 0);
    d.shutdown();
}

/// The second defect on a real full disk: a compaction whose archive write runs out of
/// space fails and changes nothing; once space is freed the same daemon compacts again,
/// appending after what the failure left, and nothing is lost or glued to a fragment.
#[test]
fn a_full_tmpfs_during_a_compaction_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = small_disk(dir.path(), "a_full_tmpfs_during_a_compaction_loses_nothing") else {
        return;
    };
    let ws = disk.dir.join("ws");
    let filler = disk.dir.join("filler");
    let mut d = start(&ws, "", &SMALL_WINDOW);
    let mut client = Client::new();
    // One compaction first, so the archive file exists and its line count is known.
    let mut i = 0;
    let mut compacted = 0;
    let mut last = Value::Null;
    let mut turn_tokens = 0;
    loop {
        assert!(i < 60, "no compaction");
        // Stop where one more turn and a half would cross the threshold again.
        if compacted > 0 && turn_tokens > 0 {
            let (total, threshold) = (n(&last["tokens"]["total"]), n(&last["tokens"]["threshold"]));
            if total + turn_tokens + turn_tokens / 2 >= threshold {
                break;
            }
        }
        let before = last["tokens"]["total"].as_u64().unwrap_or(0);
        let (_, result) = client.send_until_done(&mut d, &turn(i, false), 1);
        i += 1;
        compacted += compactions(&result);
        if compactions(&result) == 0 && before > 0 {
            turn_tokens = n(&result["tokens"]["total"]) - before;
        }
        last = result;
    }
    // Two turns: they cross the threshold for sure. The disk has room for the call's own
    // records (its messages, the compaction's start), not for the archive lines of the whole
    // compacted span.
    let crossing: Vec<Value> = turn(i, false).into_iter().chain(turn(i + 1, false)).collect();
    i += 1;
    fill(&filler);
    free(&filler, 8 << 10);
    let error = match client.send(&mut d, &crossing) {
        Outcome::Failed(error) => error,
        Outcome::Done(result) => panic!("the compaction fit on the full disk: {}", result["tokens"]),
        Outcome::Crashed => panic!("the daemon died"),
    };
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("dialog/") && message.contains("undo"), "{message}");
    archive_lines(&ws); // whole lines only
    assert_log_loadable(&ws);

    std::fs::remove_file(&filler).unwrap();
    let (_, result) = client.send_until_done(&mut d, &crossing, 1);
    assert_eq!(compactions(&result), 1, "the same daemon compacts once there is room");
    i += 1;
    for _ in 0..3 {
        client.send_until_done(&mut d, &turn(i, false), 1);
        i += 1;
    }
    d.shutdown();
    let mut d = start(&ws, "", &SMALL_WINDOW);
    assert_eq!(assert_every_message_once(&mut d, &ws, &client.history), 0);
    d.shutdown();
}

// ---------------------------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------------------------

/// `satchel serve --socket --no-stdio` on `workspace` under `umask`, through a shell.
fn spawn_under_umask(umask: &str, workspace: &Path) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(satchel_bin())
        .arg("--workspace")
        .arg(workspace)
        .args(["serve", "--socket", "--no-stdio"])
        .envs(SMALL_WINDOW)
        .env("SATCHEL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sh")
}

/// Every directory and file under `root`, with its mode.
fn modes(root: &Path) -> Vec<(PathBuf, bool, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        found.push((path.clone(), meta.is_dir(), meta.permissions().mode() & 0o7777));
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    found
}

/// Under umask 000 (and the usual 022) every directory satchel creates is 0700 and every
/// file 0600: session logs, the archive, offloaded outputs, memory, the lock, the socket and
/// `run/daemon.json`.
#[test]
fn workspace_files_are_user_only_whatever_the_umask() {
    for umask in ["000", "022"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let mut child = spawn_under_umask(umask, &ws);
        wait_for_path(&ws.join("run/daemon.json"));
        wait_for_path(&ws.join("run/satchel.sock"));
        let mut client = SocketClient::connect(&ws.join("run/satchel.sock"));
        let mut history = Vec::new();
        let mut compacted = 0;
        for i in 0.. {
            assert!(i < 60, "umask {umask}: no compaction");
            history.extend(turn(i, true));
            let result = client.call("context.prepare", json!({"session_id": SESSION, "messages": history}));
            compacted += compactions(&result);
            if compacted > 0 && i >= 3 {
                break;
            }
        }
        let found = modes(&ws);
        let _ = child.kill();
        let _ = child.wait();
        for sub in ["sessions", "tool_result", "dialog", "run"] {
            assert!(
                found.iter().any(|(p, _, _)| p.ends_with(sub)),
                "umask {umask}: no {sub}/"
            );
        }
        for file in ["run/satchel.lock", "run/satchel.sock", "run/daemon.json"] {
            assert!(
                found.iter().any(|(p, _, _)| p.ends_with(file)),
                "umask {umask}: no {file}"
            );
        }
        for (path, is_dir, mode) in found {
            let expected = if is_dir { 0o700 } else { 0o600 };
            assert_eq!(mode, expected, "umask {umask}: {} is {mode:o}", path.display());
        }
    }
}

/// A workspace whose own subdirectory is a symbolic link is refused at start-up, with a
/// message that says why.
#[test]
fn a_symlinked_workspace_directory_is_refused() {
    for sub in ["sessions", "tool_result", "dialog", "memory", "run"] {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), ws.join(sub)).unwrap();
        let output = Command::new(satchel_bin())
            .arg("--workspace")
            .arg(&ws)
            .arg("serve")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{sub}: started on a symlinked {sub}/");
        assert!(
            stderr.contains("symbolic link") && stderr.contains(sub),
            "{sub}: the refusal says why: {stderr}"
        );
        assert_eq!(
            std::fs::read_dir(elsewhere.path()).unwrap().count(),
            0,
            "{sub}: nothing written through the link"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Temp files of interrupted atomic writes
// ---------------------------------------------------------------------------------------------

/// The names the daemon gives the temp file of an atomic write (`.<name>.<32 hex>.tmp`).
fn is_atomic_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > 38
}

/// Every temp file of an atomic write under `dir`, at any depth, following no link.
fn atomic_temps(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(atomic_temps(&entry.path()));
        } else if kind.is_file() && is_atomic_temp(&entry.file_name().to_string_lossy()) {
            found.push(entry.path());
        }
    }
    found
}

/// Atomic writes a crash interrupts (a memory file in a subdirectory, `MEMORY.md`, the
/// candidates store) leave their temp files; the next start removes them, and nothing else:
/// not a file of the user's that looks a little like one, not one behind a symbolic link, not
/// what the writes before the crashes wrote.
#[test]
fn start_up_removes_the_temp_files_of_writes_a_crash_interrupted_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mut d = start(&ws, "", &[FAST]);
    d.call(
        "memory.write",
        json!({"path": "memory/notes/kept.md", "content": "- written before the crashes\n"}),
    );
    d.shutdown();
    // Not ours: a user's files, and a temp-like file behind a link out of the workspace.
    let outside = tempfile::tempdir().unwrap();
    let beyond_link = outside.path().join(".x.md.0123456789abcdef0123456789abcdef.tmp");
    std::fs::write(&beyond_link, "theirs").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("memory/linked")).unwrap();
    let users = [
        ws.join("memory/notes/.draft.md.tmp"),
        ws.join("memory/notes/draft.tmp"),
        ws.join(".scratch.0123456789abcdef.tmp"),
    ];
    for path in &users {
        std::fs::write(path, "the user's").unwrap();
    }

    let crashes = [
        (
            "memory.write",
            json!({"path": "memory/notes/a.md", "content": "- lost in a crash\n"}),
        ),
        (
            "memory.write",
            json!({"path": "MEMORY.md", "content": "- lost in a crash\n"}),
        ),
        (
            "candidates.observe",
            json!({"text": "Prefer rg over grep", "kind": "preference"}),
        ),
    ];
    let mut left: Vec<PathBuf> = Vec::new();
    for (method, params) in crashes {
        // Each start removes what the crash before it left.
        let mut d = start(&ws, "atomic:crash", &[FAST]);
        d.request(method, params);
        assert_eq!(d.wait_exit(REPLY_TIMEOUT).code(), Some(CRASH_EXIT_STATUS), "{method}");
        for temp in &left {
            assert!(!temp.exists(), "{} stayed", temp.display());
        }
        left = atomic_temps(&ws);
        assert_eq!(left.len(), 1, "{method} left its temp file: {left:?}");
    }
    assert!(left[0].to_string_lossy().contains("/.candidates.jsonl."), "{left:?}");

    let log = dir.path().join("restart.log");
    let mut d = start_logging(&ws, &[FAST], &log);
    let kept = d.call("memory.get", json!({"path": "memory/notes/kept.md"}));
    assert!(kept.to_string().contains("written before the crashes"), "{kept}");
    d.shutdown();
    assert_eq!(atomic_temps(&ws), Vec::<PathBuf>::new());
    for path in users.iter().chain([&beyond_link]) {
        assert!(path.exists(), "{} was removed", path.display());
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("removed the temp files of writes a crash interrupted") && l.contains("removed=1")),
        "{log}"
    );
}
