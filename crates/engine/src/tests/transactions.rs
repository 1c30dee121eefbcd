//! A call takes effect whole or not at all. `check_no_effect` runs a call that must fail
//! after a session was set up, and checks that the log is byte for byte what it was and that
//! the session still holds what it held.

use std::fs;

use satchel_core::summary::llm::{ChatMessage, Completer, CompletionError};
use satchel_protocol::Config;
use satchel_protocol::config::SummarizerKind;
use serde_json::Value;

use super::*;
use crate::{CallToken, ModelSource};

/// Sends `held`, then runs `fail` (which must fail with an error `expect` accepts), and
/// checks that the failed call left no trace: the log is byte-identical, and a resend of
/// `held` reuses every message and appends none.
fn check_no_effect(
    harness: &Harness,
    held: &[Value],
    fail: impl FnOnce(&Harness) -> Result<Prepared, EngineError>,
    expect: impl FnOnce(&EngineError) -> bool,
) {
    let before = harness.prepare(held);
    let log = harness.log();
    let error = fail(harness).expect_err("the call fails");
    assert!(expect(&error), "unexpected error: {error}");
    assert_eq!(harness.log(), log, "the log is as it was before the call");
    let again = harness.prepare(held);
    assert_eq!(
        counts(&again),
        (held.len(), before.reconciliation.session_messages, 0, 0)
    );
    assert_eq!(returned(&again), returned(&before));
}

#[test]
fn a_call_cancelled_before_it_runs_has_no_effect() {
    let harness = Harness::new(Config::default());
    let held = conversation(2, 100);
    let mut longer = held.clone();
    longer.push(user("Now run clippy."));
    check_no_effect(
        &harness,
        &held,
        |h| {
            let call = CallContext::detached();
            assert!(call.token.cancel());
            h.try_prepare(&longer, &call)
        },
        |e| matches!(e, EngineError::Cancelled),
    );
}

/// A model that cancels the call it summarises for, then fails (the summariser falls back to
/// the extractive summary): the cancel lands after the call's records were logged.
struct CancellingModel(CallToken);

impl Completer for CancellingModel {
    fn complete(&self, _: &[ChatMessage], _: u64) -> Result<String, CompletionError> {
        self.0.cancel();
        Err(CompletionError("cancelled by the test".into()))
    }

    fn name(&self) -> String {
        "cancelling".into()
    }
}

impl ModelSource for CancellingModel {
    fn completer(&self, _: SummarizerKind, _: &Config) -> Result<Box<dyn Completer + '_>, String> {
        Ok(Box::new(CancellingModel(self.0.clone())))
    }
}

#[test]
fn a_call_cancelled_while_it_summarises_rolls_its_records_back() {
    let mut config = small_window();
    config.summary.summarizer = SummarizerKind::Client;
    let harness = Harness::new(config);
    // Under the threshold; the next turn crosses it.
    let held = conversation(2, 2_500);
    let longer = conversation(8, 2_500);
    check_no_effect(
        &harness,
        &held,
        |h| {
            let token = CallToken::new();
            let model = CancellingModel(token.clone());
            let call = CallContext {
                models: &model,
                token,
                ..CallContext::detached()
            };
            h.try_prepare(&longer, &call)
        },
        |e| matches!(e, EngineError::Cancelled),
    );
    assert!(harness.archive().is_empty(), "nothing was archived");
}

#[test]
fn a_failed_archive_write_rolls_the_call_back() {
    let harness = Harness::new(small_window());
    let held = conversation(2, 2_500);
    let longer = conversation(8, 2_500);
    // The archive file cannot be written: a directory is in its place.
    let archive = harness.path(&format!("dialog/{DAY}.jsonl"));
    fs::create_dir_all(&archive).unwrap();
    check_no_effect(
        &harness,
        &held,
        |h| h.try_prepare(&longer, &CallContext::detached()),
        |e| matches!(e, EngineError::Storage(_)),
    );
    // Once the archive can be written, the same call goes through.
    fs::remove_dir(&archive).unwrap();
    let result = harness.prepare(&longer);
    assert!(result.compact_summary.is_some());
    assert_eq!(counts(&result).2, longer.len() - held.len());
}

#[test]
fn a_failed_offload_write_rolls_the_call_back() {
    let harness = Harness::new(Config::default());
    let held = conversation(1, 100);
    let mut longer = held.clone();
    longer.push(run("c9", "cargo test"));
    longer.push(output("c9", &big_output(9, 10_000)));
    // Offloaded texts cannot be written: a file is where their directory should be.
    let dir = harness.engine.workspace().layout().offload_dir();
    let _ = fs::remove_dir_all(&dir);
    fs::write(&dir, "not a directory").unwrap();
    check_no_effect(
        &harness,
        &held,
        |h| h.try_prepare(&longer, &CallContext::detached()),
        |e| matches!(e, EngineError::Storage(_)),
    );
}

#[test]
fn a_result_too_large_to_deliver_fails_the_call_before_it_takes_effect() {
    let harness = Harness::new(Config::default());
    let held = conversation(2, 100);
    let mut longer = held.clone();
    longer.push(user(&"a long request ".repeat(400)));
    check_no_effect(
        &harness,
        &held,
        |h| {
            let call = CallContext {
                max_result_bytes: Some(4_000),
                ..CallContext::detached()
            };
            h.try_prepare(&longer, &call)
        },
        |e| matches!(e, EngineError::ResultTooLarge { limit: 4_000, .. }),
    );
}

#[test]
fn a_compaction_whose_result_could_not_be_delivered_is_not_committed() {
    let harness = Harness::new(small_window());
    let held = conversation(2, 100);
    let longer = conversation(12, 3_000);
    check_no_effect(
        &harness,
        &held,
        |h| {
            let call = CallContext {
                max_result_bytes: Some(8_000),
                ..CallContext::detached()
            };
            h.try_prepare(&longer, &call)
        },
        |e| matches!(e, EngineError::ResultTooLarge { .. }),
    );
    assert!(harness.archive().is_empty(), "nothing was archived");
}

#[test]
fn a_compaction_whose_done_record_fails_takes_its_archive_lines_back() {
    use satchel_storage::failpoints::{self, Fault, Hits, Point};
    let harness = Harness::new(small_window());
    let held = conversation(2, 100);
    let longer = conversation(12, 3_000);
    let scope = harness.path("");
    let before = failpoints::hits(Point::SessionWrite, Some(&scope));
    // This call's log writes: its messages, `compaction_begun`, then `compaction_done`.
    let fault = failpoints::arm(Point::SessionWrite, Fault::Enospc, Hits::nth(before + 4), Some(&scope));
    check_no_effect(
        &harness,
        &held,
        |h| h.try_prepare(&longer, &CallContext::detached()),
        |e| matches!(e, EngineError::Storage(_)),
    );
    drop(fault);
    assert!(
        harness.archive().is_empty(),
        "the rolled-back compaction's lines were taken back"
    );
    let retried = harness.prepare(&longer);
    assert!(
        retried
            .actions
            .iter()
            .any(|a| matches!(a, satchel_protocol::Action::Compacted(_))),
        "the retry compacts"
    );
    let mut indices: Vec<u64> = harness.archive().iter().filter_map(|l| l["index"].as_u64()).collect();
    let archived = indices.len();
    indices.dedup();
    assert_eq!(indices.len(), archived, "every message archived once");
}

/// A model that panics: a bug in a summariser must not leave a half-made call behind.
struct PanickingModel;

impl Completer for PanickingModel {
    fn complete(&self, _: &[ChatMessage], _: u64) -> Result<String, CompletionError> {
        panic!("a summariser bug");
    }

    fn name(&self) -> String {
        "panicking".into()
    }
}

impl ModelSource for PanickingModel {
    fn completer(&self, _: SummarizerKind, _: &Config) -> Result<Box<dyn Completer + '_>, String> {
        Ok(Box::new(PanickingModel))
    }
}

#[test]
fn a_call_that_panics_has_no_effect() {
    let mut config = small_window();
    config.summary.summarizer = SummarizerKind::Client;
    let harness = Harness::new(config);
    let held = conversation(2, 2_500);
    let longer = conversation(8, 2_500);
    let before = harness.prepare(&held);
    let log = harness.log();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let call = CallContext {
            models: &PanickingModel,
            ..CallContext::detached()
        };
        harness.try_prepare(&longer, &call)
    }));
    assert!(panicked.is_err(), "the summariser's panic reaches the caller");
    assert_eq!(harness.log(), log, "the log is as it was before the call");
    assert!(harness.archive().is_empty(), "nothing was archived");
    let again = harness.prepare(&held);
    assert_eq!(counts(&again), (held.len(), held.len(), 0, 0));
    assert_eq!(returned(&again), returned(&before));
}
