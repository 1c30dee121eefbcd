//! `context.expand`: a compacted span comes back from the archive into the next request only,
//! pairs intact, within its budget, and a restart in between keeps it pending.

use satchel_protocol::{Action, CompactionReport, ExpandParams, ExpandRange, ExpandResult};
use serde_json::Value;

use super::*;

/// A session of the small window that compacted once; returns its compaction and history.
fn compacted(harness: &Harness) -> (CompactionReport, Vec<Value>) {
    let messages = conversation(8, 2_500);
    let result = harness.prepare(&messages);
    let report = result
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Compacted(report) => Some(report.clone()),
            _ => None,
        })
        .expect("the history compacts");
    (report, messages)
}

fn expand(harness: &Harness, params: ExpandParams) -> Result<ExpandResult, EngineError> {
    let ticket = harness.engine.ticket(SESSION)?;
    harness.engine.expand(ticket, params)
}

fn refused_with(harness: &Harness, params: ExpandParams) -> String {
    match expand(harness, params) {
        Err(EngineError::InvalidParams { field, message }) => format!("{field}: {message}"),
        other => panic!("refused, got {other:?}"),
    }
}

fn by_id(id: &str, max_tokens: Option<u64>) -> ExpandParams {
    ExpandParams {
        session_id: SESSION.into(),
        compaction_id: Some(id.into()),
        archive: None,
        max_tokens,
    }
}

#[test]
fn an_expanded_span_is_carried_by_the_next_request_only() {
    let mut config = small_window();
    config.render.offload_notice_path = OffloadNoticePath::Relative;
    let mut harness = Harness::new(config);
    let (report, messages) = compacted(&harness);
    let range = report.archive.clone().expect("archived");
    let added = expand(&harness, by_id(&report.id, Some(1_500))).expect("expand");
    assert!(added.messages > 0 && added.tokens <= 1_500, "{added:?}");
    assert_eq!(
        added.archive.end_line, range.end_line,
        "the newest part of the span is kept"
    );
    assert_eq!(added.left_out + added.messages, report.messages);

    // A restart before the next call keeps it pending.
    harness.restart();
    let next = harness.prepare(&messages);
    let sent = returned(&next);
    assert!(next.tokens.expanded > 0, "{:?}", next.tokens);
    assert_eq!(next.tokens.total, {
        let t = &next.tokens;
        t.system + t.tools + t.summary + t.expanded + t.messages
    });
    // Right after the summary: the archived messages, byte-exact where nothing was cut.
    let span = &sent[1..1 + added.messages];
    let first = added.archive.first_index;
    for (offset, message) in span.iter().enumerate() {
        let original = &messages[first + offset];
        if added.truncated_results == 0 {
            assert_eq!(message, original);
        } else {
            assert_eq!(message["role"], original["role"]);
        }
    }
    // Pairs intact: every tool result of the span follows its call.
    assert_ne!(span[0]["role"], "tool", "{:?}", span[0]);

    // Once: the call after it does not carry it, and a restart does not bring it back.
    let after = harness.prepare(&messages);
    assert_eq!(after.tokens.expanded, 0);
    assert_eq!(returned(&after).len(), sent.len() - added.messages);
    harness.restart();
    assert_eq!(harness.prepare(&messages).tokens.expanded, 0);
}

#[test]
fn an_archive_range_of_the_session_expands_and_others_are_refused() {
    let harness = Harness::new(small_window());
    let (report, _) = compacted(&harness);
    let range = report.archive.expect("archived");
    let params = |file: &str, start_line, end_line| ExpandParams {
        session_id: SESSION.into(),
        compaction_id: None,
        archive: Some(ExpandRange {
            file: file.into(),
            start_line,
            end_line,
        }),
        max_tokens: None,
    };
    let added = expand(&harness, params(&range.file, range.end_line - 1, range.end_line)).expect("the last pair");
    assert_eq!(added.messages, 2);
    // A range that would cut a tool result from its call is refused, saying why.
    let alone = refused_with(&harness, params(&range.file, range.end_line, range.end_line));
    assert!(alone.contains("no part of the span starts with a tool call"), "{alone}");

    let refused = |p: ExpandParams| refused_with(&harness, p);
    assert!(refused(params("dialog/../sessions/s.jsonl", 1, 2)).starts_with("archive.file: no archive file"));
    assert!(refused(params("../../etc/passwd", 1, 2)).starts_with("archive.file"));
    assert!(refused(params(&range.file, 0, 2)).starts_with("archive: start_line"));
    assert!(refused(params(&range.file, range.end_line + 5, range.end_line + 9)).contains("has no archive line"));
    assert!(refused(by_id("c9999", None)).contains("no compaction c9999 in this session"));
    let tight = refused(by_id(&report.id, Some(1)));
    assert!(
        tight.starts_with("max_tokens: the span does not fit the budget of 1 tokens"),
        "{tight}"
    );
    assert!(
        tight.contains("its newest turn that keeps tool calls with their results takes"),
        "{tight}"
    );
    let both = ExpandParams {
        compaction_id: Some(report.id.clone()),
        ..params(&range.file, 1, 2)
    };
    assert!(refused(both).contains("exactly one"));
}

#[test]
fn a_compaction_reports_what_its_summary_no_longer_names() {
    // A tight summary budget: the command list is compressed, so commands go unnamed.
    let mut config = small_window();
    config.summary.summary_max_tokens = 150;
    let harness = Harness::new(config);
    let (report, _) = compacted(&harness);
    assert!(!report.dropped.is_empty(), "{report:?}");
    let summary = harness.inspect().summary.expect("a summary");
    let text = satchel_core::summary::render::summary_message_text(&summary);
    let archive: Vec<String> = harness.archive().iter().map(|l| l["message"].to_string()).collect();
    for dropped in &report.dropped {
        assert!(!text.contains(&dropped.text), "{dropped:?} is in the summary:\n{text}");
        assert!(
            archive.iter().any(|line| line.contains(&dropped.text)),
            "{dropped:?} comes from the span"
        );
    }
    // Kept with the compaction across a restart.
    let mut harness = harness;
    harness.restart();
    assert_eq!(harness.inspect().compactions[0].dropped, report.dropped);
}

#[test]
fn the_budget_section_tells_the_model_its_window_and_how_to_get_a_span_back() {
    let mut config = small_window();
    config.sections.budget_section_enabled = true;
    config.summary.summary_max_tokens = 150;
    let harness = Harness::new(config);
    let system_of = |result: &Prepared| -> String {
        let raw = result.system.as_ref().expect("an assembled system prompt");
        serde_json::from_str::<Value>(raw.get())
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = harness.prepare(&conversation(1, 100));
    let text = system_of(&first);
    assert!(
        text.starts_with("## Context budget (satchel)\n\nAbout 0% of the 4k-token window"),
        "{text}"
    );
    assert!(!text.contains("context.expand"), "no compaction yet: {text}");

    let (report, messages) = compacted(&harness);
    let next = harness.prepare(&messages);
    let text = system_of(&next);
    assert!(
        text.contains(&format!(
            "The last compaction ({}) summarised {} messages.",
            report.id, report.messages
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{{\"compaction_id\": \"{}\"}}", report.id)),
        "{text}"
    );
    assert!(text.contains(&format!("`{}`", report.dropped[0].text)), "{text}");
}
