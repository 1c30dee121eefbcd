//! Recovery: a compaction a crash interrupted after its `compaction_begun` record is finished
//! when the session is next loaded. `check_recovery` runs a compaction, rewinds the log and
//! the archive to a crash point, restarts the engine, and compares the outcome with the
//! compaction that was not interrupted.

use std::fs;

use serde_json::Value;

use super::*;

/// Where the crash hit.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// After `compaction_begun`, before any archive line was written.
    BeforeArchive,
    /// After the first `lines` archive lines were written.
    MidArchive { lines: usize },
    /// After the archive append, before `compaction_done`.
    BeforeDone,
}

/// Compacts `messages` on a small window, simulates `crash`, restarts, and checks that the
/// load finishes the compaction as it would have ended: the same archive lines, a
/// `compaction_done` record with the same range, the same summary and request.
fn check_recovery(messages: &[Value], crash: Crash) {
    let mut harness = Harness::new(small_window());
    let result = harness.prepare(messages);
    let log = String::from_utf8(harness.log()).unwrap();
    let archive_path = harness.path(&format!("dialog/{DAY}.jsonl"));
    let archive = fs::read_to_string(&archive_path).expect("the compaction archived");
    let records = harness.records();
    let done = records.last().expect("a log").clone();
    assert_eq!(done["record"], "compaction_done", "the compaction's end is logged last");

    // The crash: the log ends with `compaction_begun`, the archive as far as it got.
    let without_done = &log[..log.trim_end_matches('\n').rfind('\n').unwrap() + 1];
    fs::write(harness.engine.workspace().layout().session_log(SESSION), without_done).unwrap();
    let kept_lines = match crash {
        Crash::BeforeArchive => 0,
        Crash::MidArchive { lines } => lines,
        Crash::BeforeDone => archive.lines().count(),
    };
    let partial: String = archive.split_inclusive('\n').take(kept_lines).collect();
    fs::write(&archive_path, &partial).unwrap();
    assert_eq!(harness.records().last().unwrap()["record"], "compaction_begun");

    harness.restart();
    let inspected = harness.inspect();
    assert_eq!(inspected.summary, result.compact_summary, "{crash:?}: the same summary");
    assert_eq!(
        fs::read_to_string(&archive_path).unwrap(),
        archive,
        "{crash:?}: the archive as the compaction would have left it"
    );
    let records = harness.records();
    let finished = records.last().unwrap();
    assert_eq!(finished["record"], "compaction_done");
    assert_eq!(finished["id"], done["id"]);
    assert_eq!(finished["range"], done["range"]);
    assert_eq!(
        finished.get("tokens_after"),
        None,
        "a restart does not know the size after"
    );
    // Finished once: a second load has nothing left to do.
    harness.restart();
    harness.inspect();
    assert_eq!(harness.records(), records);

    // The session goes on as if nothing had happened.
    let again = harness.prepare(messages);
    assert_eq!(returned(&again), returned(&result));
    assert_eq!(counts(&again), (messages.len(), messages.len(), 0, 0));
}

#[test]
fn a_compaction_interrupted_before_archiving_is_finished_on_load() {
    check_recovery(&conversation(8, 2_500), Crash::BeforeArchive);
}

#[test]
fn a_compaction_interrupted_mid_archive_archives_only_what_is_missing() {
    check_recovery(&conversation(8, 2_500), Crash::MidArchive { lines: 2 });
}

#[test]
fn a_compaction_interrupted_before_its_end_record_archives_nothing_twice() {
    check_recovery(&conversation(8, 2_500), Crash::BeforeDone);
}

#[test]
fn offloaded_messages_are_recovered_from_their_files() {
    check_recovery(&conversation(4, 6_000), Crash::BeforeArchive);
}

#[test]
fn a_torn_last_record_is_dropped_on_load() {
    let mut harness = Harness::new(Config::default());
    let messages = conversation(2, 100);
    harness.prepare(&messages);
    let log = harness.log();
    let path = harness.engine.workspace().layout().session_log(SESSION);
    let mut torn = log.clone();
    torn.extend_from_slice(br#"{"record":"message","hash":"#);
    fs::write(&path, torn).unwrap();
    harness.restart();
    assert_eq!(harness.inspect().messages, messages.len());
    assert_eq!(harness.log(), log, "the torn tail is cut off");
}
