//! Reconciliation: [`Session::align`] on sessions built by hand (`check_align`), then through
//! `prepare` (`check_resend`), where the counts a client reads come from it.

use satchel_core::hash::{MessageHash, text_hash};
use satchel_protocol::{CompactSummary, Config, MessageFormat};
use satchel_storage::{OffloadStore, Workspace};
use serde_json::Value;
use serde_json::value::RawValue;

use super::*;
use crate::session::{Alignment, Entry, IncomingHashes, Session};

/// A session holding `held`, sent as [`raw`] writes them, with its first `compacted`
/// messages compacted away under a summary.
fn held_session(offloads: OffloadStore, held: &[Value], compacted: usize) -> Session {
    let format = Some(MessageFormat::Openai);
    let mut session = Session::new(format, offloads);
    let hashes: Vec<MessageHash> = held.iter().map(MessageHash::of_value).collect();
    let text_hashes: Vec<Option<u128>> = held.iter().map(|m| Some(text_hash(raw(m).get()))).collect();
    let entries = held
        .iter()
        .zip(&hashes)
        .enumerate()
        .skip(compacted)
        .map(|(index, (message, hash))| Entry::new(index, *hash, message.clone(), Vec::new(), Some(raw(message))))
        .collect();
    session.take_in(
        Alignment::Extends { consumed: 0 },
        &hashes,
        &text_hashes,
        entries,
        format,
    );
    if compacted > 0 {
        session.set_summary(Some(CompactSummary {
            goal: vec!["Fix the failing tests in crates/parser.".into()],
            ..CompactSummary::default()
        }));
    }
    session
}

/// Aligns `incoming` (JSON texts) with a session holding `held`, its first `compacted`
/// messages compacted, and checks the alignment. Returns the session, to look further.
fn check_align(held: &[Value], compacted: usize, incoming: &[Box<RawValue>], expect: Alignment) -> Session {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let offloads = OffloadStore::new(&Workspace::open(dir.path()).expect("a workspace"));
    let mut session = held_session(offloads, held, compacted);
    let mut hashes = IncomingHashes::new(incoming);
    assert_eq!(session.align(&mut hashes, &Config::default()), expect);
    session
}

fn texts(messages: &[Value]) -> Vec<Box<RawValue>> {
    messages.iter().map(raw).collect()
}

/// Six messages: a request and two tool turns, then a final answer.
fn history() -> Vec<Value> {
    vec![
        user("Fix the failing tests in crates/parser."),
        run("c1", "cargo test -p parser"),
        output("c1", "test lexer::eof ... FAILED"),
        run("c2", "cat crates/parser/src/lexer.rs"),
        output("c2", "pub fn eof() -> bool { false }"),
        say("The lexer never reports the end of input; fixing it."),
    ]
}

#[test]
fn an_empty_session_takes_everything_as_new() {
    check_align(&[], 0, &texts(&history()), Alignment::Extends { consumed: 0 });
}

#[test]
fn a_resend_of_the_same_list_extends_it() {
    let held = history();
    check_align(&held, 0, &texts(&held), Alignment::Extends { consumed: 6 });
    let mut longer = held.clone();
    longer.push(user("Now run clippy."));
    check_align(&held, 0, &texts(&longer), Alignment::Extends { consumed: 6 });
}

#[test]
fn the_same_messages_in_other_bytes_match_by_structure_and_are_remembered() {
    let held = history();
    // Pretty-printed: other bytes, the same message.
    let pretty: Vec<Box<RawValue>> = held
        .iter()
        .map(|m| RawValue::from_string(serde_json::to_string_pretty(m).unwrap()).unwrap())
        .collect();
    let session = check_align(&held, 0, &pretty, Alignment::Extends { consumed: 6 });
    // The exact text now decides the next resend in those bytes.
    let expect: Vec<Option<u128>> = pretty.iter().map(|t| Some(text_hash(t.get()))).collect();
    let remembered: Vec<Option<u128>> = (0..session.history_len()).map(|j| session.text_hash(j)).collect();
    assert_eq!(remembered, expect);
}

#[test]
fn a_changed_or_missing_message_diverges_where_it_differs() {
    let held = history();
    let mut changed = held.clone();
    changed[3] = run("c2", "cat crates/parser/src/lib.rs");
    check_align(&held, 0, &texts(&changed), Alignment::DivergesAt { at: 3 });
    check_align(&held, 0, &texts(&held[..4]), Alignment::DivergesAt { at: 4 });
    check_align(
        &held,
        0,
        &texts(&[user("Something else.")]),
        Alignment::DivergesAt { at: 0 },
    );
}

#[test]
fn a_divergence_inside_the_compacted_part_resets_the_session() {
    let held = history();
    let mut changed = held.clone();
    changed[1] = run("c1", "cargo build");
    check_align(&held, 3, &texts(&changed), Alignment::Reset);
    let mut changed = held.clone();
    changed[4] = output("c2", "pub fn eof() -> bool { true }");
    check_align(&held, 3, &texts(&changed), Alignment::DivergesAt { at: 4 });
    // The full original history is still recognised, compacted part included.
    check_align(&held, 3, &texts(&held), Alignment::Extends { consumed: 6 });
}

#[test]
fn satchel_s_own_output_is_recognised_summary_message_included() {
    let held = history();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let offloads = OffloadStore::new(&Workspace::open(dir.path()).expect("a workspace"));
    let mut session = held_session(offloads, &held, 3);
    let config = Config::default();
    let rendered: Vec<Value> = session
        .render(&config, false)
        .to_json()
        .0
        .iter()
        .map(|m| serde_json::from_str(m.get()).unwrap())
        .collect();
    assert_eq!(rendered.len(), 4, "the summary message and the three live messages");
    assert_eq!(rendered[1..], held[3..]);
    let mut resent = rendered.clone();
    resent.push(user("Now run clippy."));
    // `last_output` is empty, as after a restart: align renders the request again.
    check_align(&held, 3, &texts(&resent), Alignment::Extends { consumed: 4 });
    // The rendering with its last message changed is neither the history nor the output.
    let mut changed = rendered;
    changed[3] = say("Something else.");
    check_align(&held, 3, &texts(&changed), Alignment::Reset);
}

/// Sends `first`, then `then`, both full histories, and checks the counts of the second call:
/// (session_messages, reused, appended, replaced).
fn check_resend(harness: &Harness, first: &[Value], then: &[Value], expect: (usize, usize, usize, usize)) {
    harness.prepare(first);
    let again = harness.prepare(then);
    assert_eq!(counts(&again), expect);
}

#[test]
fn resends_are_reconciled_in_prepare() {
    let held = history();
    let mut longer = held.clone();
    longer.push(user("Now run clippy."));
    check_resend(&Harness::new(Config::default()), &held, &held, (6, 6, 0, 0));
    check_resend(&Harness::new(Config::default()), &held, &longer, (7, 6, 1, 0));
    let mut changed = held.clone();
    changed[3] = run("c2", "cat crates/parser/src/lib.rs");
    check_resend(&Harness::new(Config::default()), &held, &changed, (6, 3, 3, 3));
    check_resend(&Harness::new(Config::default()), &held, &held[..2], (2, 2, 0, 4));
}

#[test]
fn a_resend_of_the_truncated_output_reuses_every_message() {
    let harness = Harness::new(Config::default());
    // Outputs over every limit: what satchel returns differs from what was sent.
    let sent = conversation(3, 60_000);
    let first = returned(&harness.prepare(&sent));
    assert_ne!(first, sent);
    let mut resent = first.clone();
    resent.push(user("Go on."));
    let again = harness.prepare(&resent);
    assert_eq!(counts(&again), (8, 7, 1, 0));
}

#[test]
fn a_divergence_inside_the_compacted_part_starts_the_session_over() {
    let harness = Harness::new(small_window());
    let sent = conversation(8, 2_500);
    let result = harness.prepare(&sent);
    assert!(
        result.compact_summary.is_some(),
        "the window is small enough to compact"
    );
    let mut changed = sent.clone();
    changed[1] = run("call_0", "cargo build -p parser");
    let again = harness.prepare(&changed);
    assert_eq!(counts(&again), (17, 0, 17, 17));
    assert!(harness.records().iter().any(|r| r["record"] == "reset"));
}

#[test]
fn a_resend_of_the_compacted_output_is_recognised_before_and_after_a_restart() {
    let mut harness = Harness::new(small_window());
    let sent = conversation(8, 2_500);
    let first = returned(&harness.prepare(&sent));
    assert!(first[0]["content"].as_str().unwrap().starts_with("# Summary"));
    let mut resent = first.clone();
    resent.push(user("Go on."));
    let again = harness.prepare(&resent);
    assert_eq!(counts(&again), (sent.len() + 1, first.len(), 1, 0));
    // After a restart the last output is rendered again from the log to be recognised.
    harness.restart();
    resent.push(say("Done."));
    let after_restart = harness.prepare(&resent);
    assert_eq!(after_restart.reconciliation.reused, resent.len() - 1);
    assert_eq!(after_restart.reconciliation.appended, 1);
}
