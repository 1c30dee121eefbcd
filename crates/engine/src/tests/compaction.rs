//! Compaction through `prepare`: `check_compaction` sends a history over the threshold of a
//! small window, snapshots the report (the clock and ids are fixed, so it is deterministic),
//! checks the archive, and reloads the session on a new engine.

use satchel_protocol::{Action, CompactionReport};
use serde_json::Value;

use super::*;

/// Sends `messages` to a small window, where they must compact; snapshots the compaction's
/// report and the summary message as `name`; checks that every compacted message is in the
/// archive as it was sent; then restarts the engine and checks that a resend finds the same
/// summary and request. Returns the report.
fn check_compaction(messages: &[Value], name: &str) -> CompactionReport {
    let mut harness = Harness::new(small_window());
    let result = harness.prepare(messages);
    let reports: Vec<&CompactionReport> = result
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Compacted(report) => Some(report),
            _ => None,
        })
        .collect();
    let [report] = reports[..] else {
        panic!("one compaction, got {:?}", result.actions);
    };
    let summary_message = returned(&result)[0].clone();
    insta::assert_snapshot!(
        name,
        format!(
            "{}\n\n{}",
            serde_json::to_string_pretty(report).unwrap(),
            summary_message["content"].as_str().expect("a summary text")
        )
    );
    assert_eq!(
        report.tokens_after, result.tokens.total,
        "the report tells the size returned"
    );
    assert!(result.tokens.total < report.tokens_before);
    assert!(result.over_limit.is_none(), "{:?}", result.over_limit);

    // Every compacted message is archived whole, in order; the request stays live.
    let archive = harness.archive();
    let range = report.archive.as_ref().expect("an archive range");
    let indices: Vec<usize> = archive.iter().map(|l| l["index"].as_u64().unwrap() as usize).collect();
    assert_eq!(indices, (range.first_index..=range.last_index).collect::<Vec<_>>());
    assert_eq!((range.start_line, range.end_line), (1, report.messages));
    for archived in &archive {
        let index = archived["index"].as_u64().unwrap() as usize;
        assert_eq!(archived["compaction_id"], report.id.as_str());
        assert_eq!(archived["message"], messages[index], "archived as sent");
    }
    assert_eq!(
        returned(&result)[1],
        messages[0],
        "the request is kept after the summary"
    );

    // A new engine on the workspace finds the same session.
    harness.restart();
    let again = harness.prepare(messages);
    assert_eq!(again.compact_summary, result.compact_summary);
    assert_eq!(returned(&again), returned(&result));
    assert_eq!(counts(&again), (messages.len(), messages.len(), 0, 0));
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    let inspected = harness.inspect();
    assert_eq!(inspected.archived_messages, report.messages);
    assert_eq!(inspected.compactions, std::slice::from_ref(report));
    report.clone()
}

#[test]
fn a_long_tool_loop_compacts_its_older_turns() {
    let report = check_compaction(&conversation(8, 2_500), "tool_loop");
    assert_eq!(report.summarizer, "extractive");
    assert!(!report.manual);
}

#[test]
fn offloaded_results_are_archived_in_full() {
    // Outputs past the old-phase limit: offloaded, then archived with their full text.
    let report = check_compaction(&conversation(4, 6_000), "offloaded_tool_loop");
    assert!(report.messages >= 3);
}

#[test]
fn a_session_compacts_again_and_the_summary_carries_both() {
    let mut harness = Harness::new(small_window());
    let mut messages = conversation(8, 2_500);
    harness.prepare(&messages);
    for turn in 8..16 {
        let id = format!("call_{turn}");
        messages.push(run(&id, &format!("cargo test -p parser module_{turn}")));
        messages.push(output(&id, &big_output(turn, 2_500)));
        harness.prepare(&messages);
    }
    let inspected = harness.inspect();
    assert!(inspected.compactions.len() >= 2, "{:?}", inspected.compactions);
    let ids: Vec<&str> = inspected.compactions.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids[..2], ["c0001", "c0002"]);
    let summary = inspected.summary.expect("a summary");
    assert_eq!(summary.archive.len(), inspected.compactions.len());
    // Every message compacted so far is archived once, in index order; the request stays.
    let indices: Vec<u64> = harness.archive().iter().map(|l| l["index"].as_u64().unwrap()).collect();
    assert_eq!(indices, (1..=inspected.archived_messages as u64).collect::<Vec<_>>());
    harness.restart();
    assert_eq!(harness.inspect().summary, Some(summary));
}
