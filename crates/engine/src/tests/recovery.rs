//! Recovery: a compaction a crash interrupted after its `compaction_begun` record is finished
//! when the session is next loaded. `check_recovery` runs a compaction, rewinds the log and
//! the archive to a crash point, restarts the engine, and compares the outcome with the
//! compaction that was not interrupted.

use std::fs;

use satchel_protocol::{ArchiveLine, ArchiveRange, ExpandParams};
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
        finished.get("more_ranges"),
        None,
        "{crash:?}: one run, recorded as before"
    );
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

/// `context.prepare` of session `session` with the full history `messages`.
fn prepare_session(harness: &Harness, session: &str, messages: &[Value]) -> Prepared {
    let ticket = harness.engine.ticket(session).expect("a ticket");
    let params = PrepareParams {
        session_id: session.into(),
        ..params(Some(messages), None)
    };
    harness
        .engine
        .prepare(ticket, params, &harness.config, &CallContext::detached())
        .expect("prepare succeeds")
        .result
}

/// Session A's compaction (of [`conversation`]`(8, 2_500)`), cut by a crash after two archive lines.
struct Interrupted {
    /// A's history.
    messages: Vec<Value>,
    /// Its compaction's id.
    compaction: String,
    /// Messages it compacted, and the first and last of them.
    compacted: usize,
    first_index: usize,
    last_index: usize,
    /// Lines B archived after A's first two.
    b_lines: usize,
}

/// A's compaction cut by a crash after two archive lines (and half a third); after the restart
/// session B compacts first; then the engine restarts again, under a window A's whole span
/// fits in, with A not loaded yet.
fn interrupted_then_another_session_archives(harness: &mut Harness) -> Interrupted {
    let messages = conversation(8, 2_500);
    harness.prepare(&messages);
    let archive_path = harness.path(&format!("dialog/{DAY}.jsonl"));
    let archive = fs::read_to_string(&archive_path).expect("the compaction archived");
    let done = harness.records().last().expect("a log").clone();
    assert_eq!(done["record"], "compaction_done");
    let compaction = done["id"].as_str().unwrap().to_owned();
    let index = |key: &str| done["range"][key].as_u64().unwrap() as usize;
    let compacted = index("messages");
    assert!(compacted > 3, "{done}");

    // The crash: A's log ends with `compaction_begun`, the archive with two of its lines and
    // a torn third.
    let log = String::from_utf8(harness.log()).unwrap();
    let without_done = &log[..log.trim_end_matches('\n').rfind('\n').unwrap() + 1];
    fs::write(harness.engine.workspace().layout().session_log(SESSION), without_done).unwrap();
    let lines: Vec<&str> = archive.split_inclusive('\n').collect();
    fs::write(
        &archive_path,
        format!("{}{}{}", lines[0], lines[1], &lines[2][..lines[2].len() / 2]),
    )
    .unwrap();

    // After the restart session B compacts first; A is not loaded yet. (The restarted engine
    // counts ids from the start again: skip A's.)
    harness.restart();
    harness.engine.ids.next_id();
    let mut other = conversation(8, 2_400);
    other[0] = user("Port the lexer to the new token API.");
    prepare_session(harness, "b", &other);
    let after_b = harness.archive();
    assert_eq!(after_b[2]["session_id"], "b", "B's lines follow A's two whole ones");
    assert_ne!(after_b[2]["compaction_id"], compaction.as_str());

    harness.config.window.max_input_length = 131_072;
    harness.restart();
    Interrupted {
        messages,
        compaction,
        compacted,
        first_index: index("first_index"),
        last_index: index("last_index"),
        b_lines: after_b.len() - 2,
    }
}

/// Issue 27 item 10: session A's compaction is cut by a crash after two archive lines (and
/// half a third), session B compacts after the restart, then A is loaded and its compaction
/// finished. The recorded ranges hold only A's lines (two runs, B's lines between them), the
/// summary and inspect show both, nothing is archived twice, and `context.expand` by the
/// compaction's id brings back every message it compacted.
#[test]
fn a_compaction_finished_after_another_session_archived_records_only_its_own_lines() {
    let mut harness = Harness::new(small_window());
    let Interrupted {
        messages,
        compaction,
        compacted,
        first_index,
        last_index,
        b_lines,
    } = interrupted_then_another_session_archives(&mut harness);
    // A is loaded (by inspect), and its compaction finished.
    let inspected = harness.inspect();
    let finished = harness.records().last().unwrap().clone();
    assert_eq!(finished["record"], "compaction_done");
    assert_eq!(finished["id"], compaction.as_str());
    let mut ranges: Vec<ArchiveRange> = vec![serde_json::from_value(finished["range"].clone()).unwrap()];
    if let Some(more) = finished.get("more_ranges") {
        ranges.extend(serde_json::from_value::<Vec<ArchiveRange>>(more.clone()).unwrap());
    }
    let file = format!("dialog/{DAY}.jsonl");
    let range = |start_line, end_line, first_index, last_index, messages| ArchiveRange {
        file: file.clone(),
        start_line,
        end_line,
        first_index,
        last_index,
        messages,
    };
    let rest_start = 2 + b_lines + 1;
    assert_eq!(
        ranges,
        [
            range(1, 2, first_index, first_index + 1, 2),
            range(
                rest_start,
                rest_start + compacted - 3,
                first_index + 2,
                last_index,
                compacted - 2
            )
        ],
        "two runs, each of A's lines only"
    );
    let archived = harness.archive();
    for run in &ranges {
        for line in &archived[run.start_line - 1..run.end_line] {
            assert_eq!(
                (line["session_id"].as_str(), line["compaction_id"].as_str()),
                (Some(SESSION), Some(compaction.as_str()))
            );
        }
    }
    let mut a_indices: Vec<u64> = archived
        .iter()
        .filter(|l| l["session_id"] == SESSION)
        .map(|l| l["index"].as_u64().unwrap())
        .collect();
    a_indices.dedup();
    assert_eq!(a_indices.len(), compacted, "every message archived once");
    assert_eq!(archived.len(), compacted + b_lines);

    // Inspect and the summary's path guide show both runs; requests' lines are exact.
    assert_eq!(inspected.compactions[0].archive.as_ref(), Some(&ranges[0]));
    assert_eq!(inspected.compactions[0].more_archive, ranges[1..]);
    let summary = inspected.summary.expect("a summary");
    assert_eq!(summary.archive, ranges);
    for request in &summary.requests {
        if let Some(ArchiveLine { line, .. }) = request.archived {
            assert_eq!(archived[line - 1]["index"], request.index, "{request:?}");
        }
    }
    let text = satchel_core::summary::render::summary_message_text(&summary);
    for run in &ranges {
        let guide = format!(
            "lines {}-{}: messages {}-{} ({} messages)",
            run.start_line, run.end_line, run.first_index, run.last_index, run.messages
        );
        assert!(text.contains(&guide), "{guide} in\n{text}");
    }

    // `context.expand` by the compaction's id reads both runs, also after a restart.
    let ticket = harness.engine.ticket(SESSION).unwrap();
    let expanded = harness
        .engine
        .expand(
            ticket,
            ExpandParams {
                session_id: SESSION.into(),
                compaction_id: Some(compaction.clone()),
                archive: None,
                max_tokens: None,
            },
        )
        .expect("the compaction expands");
    assert_eq!((expanded.messages, expanded.left_out), (compacted, 0), "{expanded:?}");
    assert_eq!(expanded.archive, ranges[0]);
    assert_eq!(expanded.more_archive, ranges[1..]);
    let logged = harness.records().last().unwrap().clone();
    assert_eq!(logged["record"], "expand");
    assert_eq!(
        (&logged["start_line"], &logged["more_runs"]),
        (
            &json!(ranges[0].start_line),
            &json!([{"start_line": ranges[1].start_line, "end_line": ranges[1].end_line}])
        ),
        "the expansion is logged run by run, so a restart reads it again"
    );
    harness.restart();
    let next = harness.prepare(&messages);
    assert_eq!(next.tokens.expanded, expanded.tokens);
    let sent = returned(&next);
    assert_eq!(
        sent[1..=compacted],
        messages[first_index..=last_index],
        "A's messages, in order, right after the summary"
    );
}

/// A log an older satchel wrote records such a compaction as one range across B's lines:
/// `context.expand` by its id still brings back exactly A's messages, run by run.
#[test]
fn a_range_recorded_across_another_sessions_lines_still_expands_to_its_own() {
    let mut harness = Harness::new(small_window());
    let Interrupted {
        compaction,
        compacted,
        first_index,
        last_index,
        b_lines,
        ..
    } = interrupted_then_another_session_archives(&mut harness);
    harness.inspect();
    let file = format!("dialog/{DAY}.jsonl");
    let end_line = compacted + b_lines;
    let old = json!({"record": "compaction_done", "id": compaction, "range": {"file": file,
        "start_line": 1, "end_line": end_line, "first_index": first_index, "last_index": last_index,
        "messages": compacted}});
    let log = String::from_utf8(harness.log()).unwrap();
    let without_done = &log[..log.trim_end_matches('\n').rfind('\n').unwrap() + 1];
    fs::write(
        harness.engine.workspace().layout().session_log(SESSION),
        format!("{without_done}{old}\n"),
    )
    .unwrap();
    harness.restart();

    let ticket = harness.engine.ticket(SESSION).unwrap();
    let expanded = harness
        .engine
        .expand(
            ticket,
            ExpandParams {
                session_id: SESSION.into(),
                compaction_id: Some(compaction),
                archive: None,
                max_tokens: None,
            },
        )
        .expect("the compaction expands");
    assert_eq!((expanded.messages, expanded.left_out), (compacted, 0), "{expanded:?}");
    let runs: Vec<(usize, usize)> = std::iter::once(&expanded.archive)
        .chain(&expanded.more_archive)
        .map(|r| (r.start_line, r.end_line))
        .collect();
    assert_eq!(runs, [(1, 2), (2 + b_lines + 1, end_line)]);
}
