//! A compaction's new lessons become learning candidates, once each, and a promoted candidate
//! is a section of the next request.

use satchel_protocol::{CandidateKind, CandidateState, EvaluateParams, ListParams};
use serde_json::{Value, json};

use super::*;

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
    for turn in 4..12 {
        let id = format!("call_{turn}");
        messages.push(run(&id, &format!("cargo test -p app module_{turn}")));
        messages.push(output(&id, &big_output(turn, 2_500)));
    }
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

    // Evaluated, it is promoted (a failure and its fix) and the next request's prompt has it.
    let evaluated = harness.engine.candidates_evaluate(EvaluateParams {}).unwrap();
    assert_eq!(evaluated.changes[0].to, CandidateState::Promoted, "{evaluated:?}");
    let next = harness.prepare(&more);
    let system: Value = serde_json::from_str(next.system.as_ref().expect("a prompt").get()).unwrap();
    assert!(
        system.as_str().unwrap().contains("→ fix: edited `Cargo.toml`"),
        "{system}"
    );
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
    assert_eq!(twice[0].observations, 2);
    let evaluated = harness.engine.candidates_evaluate(EvaluateParams {}).unwrap();
    assert_eq!(evaluated.changes[0].to, CandidateState::Promoted, "{evaluated:?}");
}
