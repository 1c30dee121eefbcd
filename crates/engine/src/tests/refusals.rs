//! A refused call changes nothing: not the log, and not what only memory holds (the last
//! request, which the prompt cache's stable prefix and `context.usage` need; the peak; the
//! prompt report). Each refusal runs between two prepares of a session, and the second
//! prepare's reply, the usage report and `context.inspect` must equal a control session's
//! that never saw the refused call.

use proptest::prelude::*;
use satchel_protocol::{ExpandParams, ExpandRange, PinParams, PurgeParams, UnpinParams, UsageParams};
use serde_json::{Value, json};

use super::*;

/// Every kind of call a client can get refused, on a session that exists.
#[derive(Debug, Clone, Copy)]
enum Refused {
    InspectUnknownSection,
    PinMessageOutOfRange,
    PinUnknownResult,
    PinEmptyText,
    UnpinUnknown,
    PurgeUnknownResult,
    ExpandUnknownCompaction,
    ExpandBadRange,
    AppendBogusRole,
    AppendNotAnObject,
    BothMessagesAndAppend,
    StaleExpectedCount,
    WrongFormat,
    BadSectionWithNewMessages,
    BadSystemWithNewMessages,
    OwnSectionKeyWithNewMessages,
    ZeroUsage,
}

const ALL: [Refused; 17] = [
    Refused::InspectUnknownSection,
    Refused::PinMessageOutOfRange,
    Refused::PinUnknownResult,
    Refused::PinEmptyText,
    Refused::UnpinUnknown,
    Refused::PurgeUnknownResult,
    Refused::ExpandUnknownCompaction,
    Refused::ExpandBadRange,
    Refused::AppendBogusRole,
    Refused::AppendNotAnObject,
    Refused::BothMessagesAndAppend,
    Refused::StaleExpectedCount,
    Refused::WrongFormat,
    Refused::BadSectionWithNewMessages,
    Refused::BadSystemWithNewMessages,
    Refused::OwnSectionKeyWithNewMessages,
    Refused::ZeroUsage,
];

fn sections() -> Vec<Value> {
    vec![
        json!({"key": "rules", "content": "Answer in English. Run the tests before you commit.", "priority": 80}),
        json!({"key": "repo", "content": "The parser lives in crates/parser.", "priority": 60, "paths": ["crates/**"]}),
    ]
}

/// A prepare of the harness's session with the client's sections.
fn prepare_with_sections(harness: &Harness, messages: Option<&[Value]>, append: Option<&[Value]>) -> Prepared {
    let mut p = params(messages, append);
    p.sections = Some(sections().iter().map(raw).collect());
    harness.call(p, &CallContext::detached()).expect("prepare succeeds")
}

impl Harness {
    /// Makes the call `refused`, which must be refused for its params.
    fn refuse(&self, refused: Refused) {
        let ticket = || self.engine.ticket(SESSION).expect("a ticket");
        let session_id = SESSION.to_owned();
        let next = [user("and the lexer too")];
        let error = match refused {
            Refused::InspectUnknownSection => self
                .engine
                .inspect(
                    ticket(),
                    InspectParams {
                        session_id,
                        query_hint: None,
                        detail_key: Some("nope".into()),
                    },
                )
                .map(drop),
            Refused::PinMessageOutOfRange => self.engine.pin(ticket(), pin(Some(999), None, None)).map(drop),
            Refused::PinUnknownResult => self.engine.pin(ticket(), pin(None, None, Some("r99"))).map(drop),
            Refused::PinEmptyText => self.engine.pin(ticket(), pin(None, Some("  "), None)).map(drop),
            Refused::UnpinUnknown => self
                .engine
                .unpin(
                    ticket(),
                    UnpinParams {
                        session_id,
                        pin_id: "p9".into(),
                    },
                )
                .map(drop),
            Refused::PurgeUnknownResult => self
                .engine
                .purge(
                    ticket(),
                    PurgeParams {
                        session_id,
                        result_id: "r99".into(),
                    },
                )
                .map(drop),
            Refused::ExpandUnknownCompaction => self
                .engine
                .expand(
                    ticket(),
                    ExpandParams {
                        session_id,
                        compaction_id: Some("nope".into()),
                        archive: None,
                        max_tokens: None,
                    },
                )
                .map(drop),
            Refused::ExpandBadRange => self
                .engine
                .expand(
                    ticket(),
                    ExpandParams {
                        session_id,
                        compaction_id: None,
                        archive: Some(ExpandRange {
                            file: format!("dialog/{DAY}.jsonl"),
                            start_line: 5,
                            end_line: 2,
                        }),
                        max_tokens: None,
                    },
                )
                .map(drop),
            Refused::AppendBogusRole => self
                .call(
                    params(None, Some(&[user("ok"), json!({"role": "bogus", "content": "?"})])),
                    &CallContext::detached(),
                )
                .map(drop),
            Refused::AppendNotAnObject => self
                .call(
                    params(None, Some(&[user("ok"), json!("text")])),
                    &CallContext::detached(),
                )
                .map(drop),
            Refused::BothMessagesAndAppend => self
                .call(params(Some(&next), Some(&next)), &CallContext::detached())
                .map(drop),
            Refused::StaleExpectedCount => {
                let mut p = params(None, Some(&next));
                p.expect_messages = Some(10_000);
                self.call(p, &CallContext::detached()).map(drop)
            }
            Refused::WrongFormat => {
                let mut p = params(None, Some(&next));
                p.format = FormatHint::Anthropic;
                self.call(p, &CallContext::detached()).map(drop)
            }
            Refused::BadSectionWithNewMessages => {
                let mut p = params(None, Some(&next));
                p.sections = Some(vec![raw(&json!({"key": "x", "content": "y", "priority": 200}))]);
                self.call(p, &CallContext::detached()).map(drop)
            }
            Refused::BadSystemWithNewMessages => {
                let mut p = params(None, Some(&next));
                p.system = Some(json!(42));
                self.call(p, &CallContext::detached()).map(drop)
            }
            Refused::OwnSectionKeyWithNewMessages => {
                // `task-focus` is the key of satchel's own section of this request.
                let mut p = params(None, Some(&next));
                p.sections = Some(vec![raw(
                    &json!({"key": "task-focus", "content": "mine", "priority": 50}),
                )]);
                self.call(p, &CallContext::detached()).map(drop)
            }
            Refused::ZeroUsage => {
                let mut p = params(None, Some(&next));
                p.usage = Some(satchel_protocol::ProviderUsage { input_tokens: 0 });
                self.call(p, &CallContext::detached()).map(drop)
            }
        };
        match error {
            Err(e) if e.is_refusal() => {}
            other => panic!("{refused:?} must be refused, got {other:?}"),
        }
    }

    fn report_usage(&self, input_tokens: u64) -> satchel_protocol::Calibration {
        let ticket = self.engine.ticket(SESSION).expect("a ticket");
        let params = UsageParams {
            session_id: SESSION.into(),
            input_tokens,
        };
        self.engine
            .report_usage(ticket, params, &crate::CallToken::new())
            .expect("the usage of the last request is taken")
    }
}

fn pin(message_index: Option<usize>, text: Option<&str>, result_id: Option<&str>) -> PinParams {
    PinParams {
        session_id: SESSION.into(),
        message_index,
        text: text.map(str::to_owned),
        result_id: result_id.map(str::to_owned),
        label: None,
    }
}

/// What a client sees of a session after the second prepare: the reply, `context.usage` of
/// it, and `context.inspect`.
fn observed(harness: &Harness, rest: &[Value]) -> (Value, Value, Value) {
    let second = prepare_with_sections(harness, None, Some(rest));
    let usage = harness.report_usage(second.tokens.total + 17);
    let reply = serde_json::to_value(&second).expect("a reply serialises");
    let usage = serde_json::to_value(usage).expect("a calibration serialises");
    let inspect = serde_json::to_value(harness.inspect()).expect("inspect serialises");
    (reply, usage, inspect)
}

/// Runs `refused` between two prepares of `messages` (split at `cut`) and compares with a
/// control session.
fn check_refusal_changes_nothing(refused: Refused, turns: usize, output_bytes: usize, cut: usize) {
    let messages = conversation(turns, output_bytes);
    // At least one tool call before the cut, so the session's format is known.
    let cut = cut.clamp(3, messages.len() - 1);
    let (head, rest) = messages.split_at(cut);
    let control = Harness::new(small_window());
    let subject = Harness::new(small_window());
    for harness in [&control, &subject] {
        prepare_with_sections(harness, Some(head), None);
    }
    let log = subject.log();
    subject.refuse(refused);
    assert_eq!(subject.log(), log, "{refused:?}: the log is as it was");
    let expected = observed(&control, rest);
    let got = observed(&subject, rest);
    assert_eq!(got.0, expected.0, "{refused:?}: the next prepare's reply");
    assert_eq!(
        got.1, expected.1,
        "{refused:?}: the usage of the request prepared before"
    );
    assert_eq!(got.2, expected.2, "{refused:?}: context.inspect");
}

#[test]
fn every_kind_of_refused_call_leaves_the_session_as_it_was() {
    for refused in ALL {
        check_refusal_changes_nothing(refused, 6, 2_500, 7);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn a_refused_call_between_two_prepares_changes_no_reply(
        which in 0..ALL.len(),
        turns in 2usize..10,
        output_bytes in 50usize..6_000,
        cut in 1usize..20,
    ) {
        check_refusal_changes_nothing(ALL[which], turns, output_bytes, cut);
    }
}
