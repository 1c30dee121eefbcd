//! A compaction's new lessons become learning candidates, once each; the gates run after the
//! compaction; a lesson is promoted only once two sessions learned it, and a promoted
//! candidate is a section of the next request of every session.

use satchel_protocol::{CandidateKind, CandidateState, EvaluateParams, ListParams};
use serde_json::{Value, json};

use super::*;

/// Sends the full history `messages` of `session`.
fn prepare_in(harness: &Harness, session: &str, messages: &[Value]) -> Prepared {
    let ticket = harness.engine.ticket(session).unwrap();
    let params = PrepareParams {
        session_id: session.into(),
        ..params(Some(messages), None)
    };
    let Outcome { result, .. } = harness
        .engine
        .prepare(ticket, params, &harness.config, &CallContext::detached())
        .unwrap();
    result
}

/// The system prompt a request of `session` gets.
fn system_of(harness: &Harness, session: &str) -> String {
    let asked = prepare_in(harness, session, &[user("What should I work on next?")]);
    asked.system.map(|s| s.get().to_owned()).unwrap_or_default()
}

fn lessons(harness: &Harness) -> Vec<satchel_protocol::Candidate> {
    let listed = harness.engine.candidates_list(ListParams { state: None }).unwrap();
    listed
        .candidates
        .into_iter()
        .filter(|c| c.kind == CandidateKind::Lesson)
        .collect()
}

/// `turns` tool turns of another module's tests, each big enough for the small window to
/// compact the earlier ones.
fn more_work(messages: &mut Vec<Value>, turns: std::ops::Range<usize>) {
    for turn in turns {
        let id = format!("call_{turn}");
        messages.push(run(&id, &format!("cargo test -p app module_{turn}")));
        messages.push(output(&id, &big_output(turn, 2_500)));
    }
}

/// A failing `cargo build`, an edit of `Cargo.toml`, a passing build, then enough tool turns
/// for the small window to compact the lesson away.
fn fixed_build_then_work() -> Vec<Value> {
    let mut messages = vec![
        user("Add tracing to the app and make the build pass."),
        run("c1", "cargo build"),
        output(
            "c1",
            "   Compiling app v0.1.0\nerror[E0432]: unresolved import `tracing`\n --> src/main.rs:1:5\nerror: could not compile `app`",
        ),
        json!({"role": "assistant", "content": "The crate is missing; I'll add it.", "tool_calls": [{"id": "c2",
            "type": "function", "function": {"name": "str_replace_based_edit_tool", "arguments": json!({
                "command": "str_replace", "path": "Cargo.toml", "old_str": "[dependencies]",
                "new_str": "[dependencies]\ntracing = \"0.1\""}).to_string()}}]}),
        output("c2", "The file Cargo.toml has been edited."),
        run("c3", "cargo build"),
        output("c3", "   Compiling app v0.1.0\n    Finished `dev` profile in 2.1s"),
    ];
    more_work(&mut messages, 4..12);
    messages
}

#[test]
fn a_compactions_lesson_becomes_a_candidate_once() {
    let harness = Harness::new(small_window());
    let messages = fixed_build_then_work();
    harness.prepare(&messages);
    let listed = harness.engine.candidates_list(ListParams { state: None }).unwrap();
    let lessons: Vec<_> = listed
        .candidates
        .iter()
        .filter(|c| c.kind == CandidateKind::Lesson)
        .collect();
    assert_eq!(lessons.len(), 1, "{listed:?}");
    let lesson = lessons[0];
    assert!(
        lesson.text.starts_with("`cargo build` failed: error[E0432]"),
        "{}",
        lesson.text
    );
    assert_eq!(lesson.state, CandidateState::Shadow);
    assert_eq!(lesson.evidence[0].session_id.as_deref(), Some(SESSION));
    assert!(
        lesson.evidence[0].fix.as_deref().unwrap().contains("Cargo.toml"),
        "{lesson:?}"
    );

    // A later compaction of the same session does not observe it again.
    let mut more = messages.clone();
    for turn in 12..20 {
        let id = format!("call_{turn}");
        more.push(run(&id, &format!("cargo test -p app module_{turn}")));
        more.push(output(&id, &big_output(turn, 2_500)));
        harness.prepare(&more);
    }
    assert!(harness.inspect().compactions.len() >= 2);
    let listed = harness.engine.candidates_list(ListParams { state: None }).unwrap();
    assert_eq!(listed.candidates.len(), 1, "{listed:?}");
    assert_eq!(listed.candidates[0].observations, 1);

    // One session's pairing is not promoted, however often the gates run.
    let evaluated = harness.engine.candidates_evaluate(EvaluateParams {}).unwrap();
    assert!(evaluated.changes.is_empty(), "{evaluated:?}");
    assert!(!system_of(&harness, "other").contains("Learned ["));
}

#[test]
fn a_lesson_reaches_every_sessions_prompt_once_two_sessions_learned_it() {
    let harness = Harness::new(small_window());
    prepare_in(&harness, "first", &fixed_build_then_work());
    assert_eq!(lessons(&harness)[0].state, CandidateState::Shadow);
    assert!(!system_of(&harness, "other").contains("Learned ["));

    // Another session hits the same failure and fixes it the same way: its compaction observes
    // the lesson again and runs the gates, with no `candidates.evaluate`.
    prepare_in(&harness, "second", &fixed_build_then_work());
    let lesson = &lessons(&harness)[0];
    assert_eq!(
        (lesson.observations, lesson.state),
        (2, CandidateState::Promoted),
        "{lesson:?}"
    );
    let system = system_of(&harness, "third");
    assert!(system.contains("→ fix: edited `Cargo.toml`"), "{system}");
}

#[test]
fn another_test_selection_passing_teaches_no_session_anything() {
    // Issue 27: `npm test -- part1` fails, `npm test -- part2` passes; the lesson "part1 failed
    // → fixed: part2 succeeded" was promoted into every session's prompt.
    let harness = Harness::new(small_window());
    let session = |harness: &Harness, name: &str| {
        let mut messages = vec![
            user("Make the part1 tests pass."),
            run("c1", "npm test -- part1"),
            output(
                "c1",
                "FAIL src/part1.test.js\n  ● part1 › adds\n\nTests: 1 failed, 4 passed, 5 total\nnpm ERR! Test failed.",
            ),
            run("c2", "npm test -- part2"),
            output("c2", "PASS src/part2.test.js\n\nTests: 5 passed, 5 total"),
        ];
        more_work(&mut messages, 3..12);
        let prepared = prepare_in(harness, name, &messages);
        let summary = prepared.compact_summary.expect("compacted");
        assert!(
            summary.critical_context.commands.iter().any(|c| c.contains("part1")),
            "the npm runs were compacted: {summary:?}"
        );
    };
    session(&harness, "first");
    session(&harness, "second");
    let inspected = harness.engine.candidates_list(ListParams { state: None }).unwrap();
    assert!(lessons(&harness).is_empty(), "{inspected:?}");
    harness.engine.candidates_evaluate(EvaluateParams {}).unwrap();
    let system = system_of(&harness, "third");
    assert!(!system.contains("Learned ["), "{system}");
}

#[test]
fn a_constraint_the_user_repeats_in_other_words_earns_promotion() {
    let harness = Harness::new(small_window());
    let mut messages = vec![user("Fix the failing parser tests. Never use unwrap in library code.")];
    let work = |messages: &mut Vec<Value>, turns: std::ops::Range<usize>| {
        for turn in turns {
            let id = format!("call_{turn}");
            messages.push(run(&id, &format!("cargo test -p parser module_{turn}")));
            messages.push(output(&id, &big_output(turn, 2_500)));
            harness.prepare(messages);
        }
    };
    // The newest user message is never compacted: later requests let the constraint go.
    work(&mut messages, 0..3);
    messages.push(user("Thanks. Now check the lexer module as well."));
    work(&mut messages, 3..10);
    let corrections = |harness: &Harness| {
        harness
            .engine
            .candidates_list(ListParams { state: None })
            .unwrap()
            .candidates
            .into_iter()
            .filter(|c| c.kind == CandidateKind::Correction)
            .collect::<Vec<_>>()
    };
    let once = corrections(&harness);
    assert_eq!(once.len(), 1, "{once:?}");
    assert_eq!(once[0].text, "Never use unwrap in library code.");
    assert!(
        harness
            .engine
            .candidates_evaluate(EvaluateParams {})
            .unwrap()
            .changes
            .is_empty(),
        "said once: shadow"
    );

    messages.push(user("Do not use unwrap() in the library code."));
    work(&mut messages, 10..13);
    messages.push(user("Good. Go on with the printer module."));
    work(&mut messages, 13..22);
    let twice = corrections(&harness);
    assert_eq!(twice.len(), 1, "merged: {twice:?}");
    // The compaction that observed it again ran the gates, and the requests since carry it.
    assert_eq!(
        (twice[0].observations, twice[0].state),
        (2, CandidateState::InUse),
        "{twice:?}"
    );
}
