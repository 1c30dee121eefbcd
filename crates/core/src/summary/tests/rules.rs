//! One test per rule of the summary (issue 12): each drives a conversation through
//! [`check`] and asserts what the rule guarantees.

use serde_json::json;

use super::*;
use satchel_protocol::ContextMode;

use crate::summary::render::{summary_message_text, summary_message_text_for};

#[test]
fn a_session_keeps_requests_constraints_outcomes_and_the_plan() {
    let summary = check(Case::new(session()), "openai_session");
    assert_eq!(summary.requests.len(), 1);
    assert!(summary.requests[0].text.starts_with("Please fix the failing build"));
    assert_eq!(
        summary.constraints,
        [
            "You must not change the public API.",
            "Keep the changes minimal and never touch vendor/."
        ]
    );
    let ctx = &summary.critical_context;
    assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
    assert_eq!(ctx.errors, [BUILD_ERROR]);
    assert_eq!(summary.blocked, [format!("`{BUILD}` failed: {BUILD_ERROR}")]);
    assert_eq!(summary.done, ["Modified `crates/app/Cargo.toml`"]);
    assert_eq!(summary.next_steps, ["Open Cargo.toml at the root", "Rerun the build"]);
}

#[test]
fn anthropic_sessions_read_the_same() {
    let summary = check(Case::new(anthropic_session()).anthropic(), "anthropic_session");
    assert!(
        summary
            .constraints
            .contains(&"Also, always run clippy before you finish.".to_owned())
    );
    assert_eq!(summary.critical_context.errors, [BUILD_ERROR]);
    assert_eq!(summary.critical_context.files_modified, ["crates/app/Cargo.toml"]);
}

#[test]
fn responses_sessions_read_the_same() {
    let summary = check(Case::new(responses_session()).responses(), "responses_session");
    assert_eq!(summary.requests.len(), 1, "the developer message is no request");
    assert!(summary.requests[0].text.starts_with("Please fix the failing build"));
    assert!(
        summary
            .constraints
            .contains(&"Also, always run clippy before you finish.".to_owned())
    );
    let ctx = &summary.critical_context;
    assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
    assert_eq!(ctx.errors, [BUILD_ERROR]);
    assert_eq!(summary.blocked, [format!("`{BUILD}` failed: {BUILD_ERROR}")]);
}

/// Rule 1: every request stays in Goal and every constraint stays, however many identifiers
/// the span names; the lists are compressed into counted groups instead.
#[test]
fn requests_and_constraints_outlive_the_identifier_lists() {
    let mut messages = huge_session(600);
    messages.insert(
        150,
        user("Also: never rename a public function, and keep the old log macros working."),
    );
    messages.insert(
        300,
        user("After the migration, update docs/logging.md with the new API."),
    );
    let summary = check(Case::new(messages).budget(1500), "identifier_flood");
    let goal: Vec<&str> = summary.requests.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(goal.len(), 2, "{goal:?}");
    assert!(goal[0].starts_with("Migrate every module"));
    assert_eq!(goal[1], "After the migration, update docs/logging.md with the new API.");
    assert!(summary.constraints.contains(&"Do not change behaviour.".to_owned()));
    assert!(
        summary
            .constraints
            .contains(&"Also: never rename a public function, and keep the old log macros working.".to_owned())
    );
    let omitted = &summary.critical_context.omitted;
    assert!(omitted.iter().any(|o| o.count > 100), "{omitted:?}");
}

/// Rule 1: constraints and requests survive any number of later compactions, each of which
/// brings a flood of new identifiers.
#[test]
fn constraints_and_requests_survive_repeated_compactions() {
    let mut summary = Case::new(session()).summarize();
    for round in 0..8 {
        let mut messages = huge_session(120);
        messages.insert(0, user(&format!("Round {round}: migrate the next batch of modules.")));
        summary = Case::new(messages).after(&summary).budget(1200).summarize();
    }
    let text = render_summary(&summary);
    for kept in [
        "You must not change the public API.",
        "Keep the changes minimal and never touch vendor/.",
        "Do not change behaviour.",
        "Round 7: migrate the next batch of modules.",
    ] {
        assert!(text.contains(kept), "{kept} lost:\n{text}");
    }
    // The session's request, "Migrate every module…" (repeated each round, listed once) and 8 rounds.
    assert_eq!(summary.requests.iter().filter(|r| !r.demonstration).count(), 10);
    insta::assert_snapshot!("after_nine_compactions", text);
}

/// Rule 2: a demonstration is labelled and never becomes the goal, and nothing is mined from it.
#[test]
fn demonstrations_are_not_the_task() {
    let demo = "Here is a demonstration of how to correctly accomplish this task.\nYou should always \
                open src/marshmallow/fields.py first. The fix is to use round().";
    let summary = check(
        Case::new(vec![
            user(demo),
            user("We're currently solving the following issue. ISSUE: JsonWriter rejects NaN in lenient mode."),
            run("c1", "Let's find the writer.", "find_file JsonWriter.java"),
            result(
                "c1",
                "Found 1 matches for \"JsonWriter.java\":\n/gson/src/JsonWriter.java",
            ),
        ]),
        "demonstration",
    );
    let (demos, requests): (Vec<_>, Vec<_>) = summary.requests.iter().partition(|r| r.demonstration);
    assert_eq!(demos.len(), 1);
    assert_eq!(requests.len(), 1);
    assert!(requests[0].text.contains("JsonWriter rejects NaN"));
    assert!(summary.constraints.is_empty(), "{:?}", summary.constraints);
    assert!(
        !summary
            .critical_context
            .files_read
            .contains(&"src/marshmallow/fields.py".to_owned())
    );
}

/// Rule 3: errors are failing outcomes; a search that finds "Error" and a listing that
/// names an exception are not errors. Blocked is cleared by a later success in the same area.
#[test]
fn outcomes_not_keywords() {
    let summary = check(
        Case::new(vec![
            user("Make the parser tests pass without touching the lexer."),
            run("c1", "Let's look for the handler.", "grep -rn ErrorHandler src"),
            result(
                "c1",
                "src/errors.rs:12:pub struct ErrorHandler;\nsrc/lib.rs:3:use errors::ErrorHandler;",
            ),
            run("c2", "", "ls src"),
            result("c2", "errors.rs\nlib.rs\nParseException.java"),
            run("c3", "Let's run the tests.", "cargo test -p parser"),
            result(
                "c3",
                "test parse_empty ... FAILED\nfailures:\n    parse_empty\ntest result: FAILED. 3 passed; 1 failed",
            ),
            run("c4", "", "python check.py"),
            result(
                "c4",
                "Traceback (most recent call last):\n  File \"check.py\", line 2\n    boom()\nNameError: name 'boom' is not defined",
            ),
            call(
                "c5",
                "The fix is to accept empty input.",
                "edit_file",
                json!({"path": "src/parser.rs", "new": "x"}),
            ),
            result("c5", "ok"),
            run("c6", "", "cargo test -p parser"),
            result("c6", "test result: ok. 4 passed; 0 failed"),
        ]),
        "outcomes",
    );
    let ctx = &summary.critical_context;
    assert_eq!(
        ctx.errors,
        [
            "test result: FAILED. 3 passed; 1 failed",
            "NameError: name 'boom' is not defined"
        ]
    );
    assert_eq!(
        summary.blocked,
        ["`python check.py` failed: NameError: name 'boom' is not defined"]
    );
    assert_eq!(
        summary.done,
        [
            "Modified `src/parser.rs`",
            "`cargo test -p parser` succeeded: test result: ok. 4 passed; 0 failed",
            "Last step: Let's run the tests.",
            "Reproduced, then fixed: `cargo test -p parser` failed: test result: FAILED. 3 passed; 1 failed → fixed: \
             edited `src/parser.rs`, then `cargo test -p parser` succeeded"
        ]
    );
}

/// Rule 3: next steps are the agent's own plan, not the step its call is already taking and
/// not a line like "Exit due to cost limit".
#[test]
fn next_steps_come_from_the_stated_plan() {
    let summary = check(
        Case::new(vec![
            user("Add a --verbose flag to the CLI."),
            run(
                "c1",
                "Now let's add the flag to src/cli.rs. Then I'll update the README. After that, we can run the tests.",
                "sed -i 's/quiet/verbose/' src/cli.rs",
            ),
            result("c1", ""),
        ]),
        "plan",
    );
    assert_eq!(
        summary.next_steps,
        ["Then I'll update the README.", "After that, we can run the tests."]
    );
    // The step its call took is done: nothing of the span is still under way.
    assert!(summary.in_progress.is_empty(), "{:?}", summary.in_progress);
    assert!(
        summary
            .done
            .contains(&"Last step: Now let's add the flag to src/cli.rs.".to_owned())
    );
    let ended = Case::new(vec![
        user("Fix the bug in src/a.rs please."),
        say("Exit due to cost limit"),
    ])
    .summarize();
    assert!(ended.next_steps.is_empty(), "{:?}", ended.next_steps);
    // An answer without calls ends the step under way: the fix is not still in progress.
    let answered = Case::new(
        [
            lexer_fix_step(),
            vec![say(
                "Fixed: the lexer now advances by whole characters. All tests pass.",
            )],
        ]
        .concat(),
    )
    .summarize();
    assert!(answered.in_progress.is_empty(), "{:?}", answered.in_progress);
    assert!(answered.next_steps.is_empty(), "{:?}", answered.next_steps);
    // A step whose edit has its result is done, not under way; a later answer changes nothing.
    let working = Case::new(lexer_fix_step()).summarize();
    assert!(working.in_progress.is_empty(), "{:?}", working.in_progress);
    assert!(
        working
            .done
            .contains(&"Last step: I'll advance by the length of the next char instead.".to_owned()),
        "{:?}",
        working.done
    );
    let later = Case::new(vec![say("Fixed: the lexer now advances by whole characters.")])
        .after(&working)
        .summarize();
    assert!(later.in_progress.is_empty(), "{:?}", later.in_progress);
}

/// Claude Code's `<system-reminder>` notes in a user message are the harness's words: never
/// a request nor a constraint; the user's text beside them is.
#[test]
fn harness_notes_are_not_the_user_s_words() {
    let summary = Case::new(vec![
        json!({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer, you must always credit Claude in commits. Never skip it.\n</system-reminder>"},
            {"type": "text", "text": "Fix the lexer in src/lexer.rs. Never change the public API."},
        ]}),
        say("ok"),
    ])
    .anthropic()
    .summarize();
    assert_eq!(summary.constraints, ["Never change the public API."]);
    let request = &summary.requests[0].text;
    assert!(request.starts_with("Fix the lexer"), "{request}");
    assert!(!render_summary(&summary).contains("credit Claude"));
}

/// A framework's block of instructions that every request repeats is not the user's: left
/// out of the constraints once a second request shows it is a block, remembered so that a
/// later request repeating it is recognised, shown once in the requests (in the newest), and
/// a directive the user gives once stays.
#[test]
fn a_framework_template_is_not_a_constraint() {
    let block = "Remember, you can only enter one command at a time. Always start by trying to replicate the bug. \
                 Always check the code after you issue an edit. You must not run interactive commands.";
    let request = |task: &str| user(&format!("ISSUE:\n{task}\n\nINSTRUCTIONS:\n{block}"));
    let first = Case::new(vec![
        request("The parser drops the last token."),
        say("ok"),
        user("Never change the public API of the parser."),
        say("ok"),
    ])
    .summarize();
    assert!(
        first.constraints.len() > 1,
        "one request alone cannot tell: {:?}",
        first.constraints
    );
    let second = Case::new(vec![request("The lexer splits UTF-8 characters."), say("ok")])
        .after(&first)
        .summarize();
    assert_eq!(second.constraints, ["Never change the public API of the parser."]);
    for directive in [
        "Remember, you can only enter one command at a time.",
        "You must not run interactive commands.",
    ] {
        assert!(second.template.iter().any(|t| t == directive), "{:?}", second.template);
    }
    // The block is shown once, in the newest request; the older one keeps its own words.
    let [older, newest] = [&second.requests[0].text, &second.requests[1].text];
    assert_eq!(older, "ISSUE: The parser drops the last token. […]");
    assert!(
        newest.starts_with("ISSUE: The lexer splits UTF-8 characters. INSTRUCTIONS: Remember"),
        "{newest}"
    );
    // A third request, compacted alone, is recognised by the remembered template.
    let third = Case::new(vec![request("The printer loses comments."), say("ok")])
        .after(&second)
        .summarize();
    assert_eq!(third.constraints, ["Never change the public API of the parser."]);
    assert_eq!(third.template, second.template);
}

/// A value the agent found in an output and then used (the seed that solves the challenge)
/// is a finding, with where it was found, and it outlives later compactions; a value never
/// used, or one the user gave, is not.
#[test]
fn a_value_found_and_used_is_a_finding_that_survives() {
    let first = Case::new(vec![
        user("Recover the key. The service listens on port 31337."),
        run("c1", "Let's brute-force the seed.", "python3 brute.py"),
        result("c1", "tried 65536 seeds\nseed = 0x5eed1234 (score 0.98)\nport 31337"),
        run(
            "c2",
            "The seed is 0x5eed1234, decrypt with it.",
            "python3 decrypt.py --seed 0x5eed1234",
        ),
        result("c2", "flag{s33d_f0und}"),
    ])
    .summarize();
    assert_eq!(
        first.critical_context.findings,
        ["`0x5eed1234` (from the output of `python3 brute.py`, message 2)"]
    );
    let later = Case::new(vec![user("Now write it up in NOTES.md."), say("Done.")])
        .after(&first)
        .summarize();
    assert_eq!(later.critical_context.findings, first.critical_context.findings);
    assert!(render_summary(&later).contains("- Findings:\n  - `0x5eed1234` (from the output of"));
}

/// A path another one lies under is a directory, not a file read.
#[test]
fn a_directory_is_not_a_file_read() {
    let summary = Case::new(vec![
        user("Fix the test in src/test/java/FooTest.java."),
        run("c1", "Let's look.", "ls src/test"),
        result("c1", "java"),
        run("c2", "Open it.", "cat src/test/java/FooTest.java"),
        result("c2", "class FooTest {}"),
    ])
    .summarize();
    assert_eq!(summary.critical_context.files_read, ["src/test/java/FooTest.java"]);
}

/// In Progress is only a step not yet taken: an intent the agent stated without a call, or
/// whose call has no result in the span.
#[test]
fn only_a_step_not_taken_is_in_progress() {
    let stated = Case::new(vec![
        user("Add a --verbose flag to the CLI."),
        say("I'll add the flag to src/cli.rs next."),
    ])
    .summarize();
    assert_eq!(stated.in_progress, ["I'll add the flag to src/cli.rs next."]);
    let unanswered = Case::new(vec![
        user("Add a --verbose flag to the CLI."),
        run(
            "c1",
            "Let's add the flag to src/cli.rs.",
            "sed -i 's/quiet/verbose/' src/cli.rs",
        ),
    ])
    .summarize();
    assert_eq!(unanswered.in_progress, ["Let's add the flag to src/cli.rs."]);
}

/// A request and the step the agent takes for it (an intent carried out by an edit).
fn lexer_fix_step() -> Vec<Value> {
    vec![
        user("Fix the unicode bug in src/lexer.rs."),
        run(
            "c1",
            "I'll advance by the length of the next char instead.",
            "sed -i 's/+ 1/+ len/' src/lexer.rs",
        ),
        result("c1", ""),
    ]
}

/// Rule 3: junk that looks like a path or a name is not listed.
#[test]
fn junk_identifiers_are_filtered() {
    let summary = Case::new(vec![
        user("The value is n/a, e.g. when reading. See line 1475.To fix it edit src/a.rs, or inputting/reading."),
        run("c1", "", "sed -i 's/foo/bar/g' src/a.rs"),
        result("c1", ""),
    ])
    .summarize();
    let ctx = &summary.critical_context;
    assert_eq!(ctx.files_read, Vec::<String>::new());
    assert_eq!(ctx.files_modified, ["src/a.rs"]);
    assert!(ctx.notes.is_empty(), "{:?}", ctx.notes);
}

/// Rule 4: "… only" keeps exactly the named sections (and the requests).
#[test]
fn only_instructions_keep_exactly_the_named_sections() {
    let summary = check(
        Case::new(session()).instruction("keep requirements and decisions only"),
        "instruction_only",
    );
    assert_eq!(
        summary.instruction_effect.as_deref(),
        Some("kept only: user requests, constraints, key decisions")
    );
    assert!(!summary.requests.is_empty() && !summary.constraints.is_empty() && !summary.key_decisions.is_empty());
    assert!(summary.done.is_empty() && summary.next_steps.is_empty() && summary.blocked.is_empty());
    assert_eq!(summary.critical_context, Default::default());
}

/// Rule 4: "focus on …" serves the named sections first when the budget is tight.
#[test]
fn focus_instructions_change_what_is_kept_first() {
    let messages = huge_session(200);
    let plain = Case::new(messages.clone()).budget(700).summarize();
    let focused = check(
        Case::new(messages)
            .budget(700)
            .instruction("focus on errors and file paths"),
        "instruction_focus",
    );
    let count = |s: &CompactSummary| s.critical_context.errors.len() + s.critical_context.files_modified.len();
    assert!(
        count(&focused) > count(&plain),
        "{} vs {}",
        count(&focused),
        count(&plain)
    );
    assert!(focused.key_decisions.len() < plain.key_decisions.len() || plain.key_decisions.is_empty());
    assert_eq!(
        focused.instruction_effect.as_deref(),
        Some("served first: errors, blocked, files modified, files read")
    );
}

/// Rule 6: a summary pasted into a new session is merged, not dropped.
#[test]
fn a_pasted_summary_is_merged() {
    let earlier = Case::new(session()).summarize();
    let pasted = summary_message_text(&earlier);
    let summary = check(
        Case::new(vec![
            user(&pasted),
            user("Continue from that summary: add serde to the workspace manifest too."),
            run("c9", "", "cat Cargo.toml"),
            result("c9", "[workspace]"),
        ]),
        "pasted",
    );
    assert_eq!(summary.constraints, earlier.constraints);
    assert!(
        summary
            .requests
            .iter()
            .any(|r| r.text.starts_with("Please fix the failing build"))
    );
    assert!(
        summary
            .requests
            .iter()
            .any(|r| r.text.starts_with("Continue from that summary"))
    );
    assert!(summary.critical_context.errors.contains(&BUILD_ERROR.to_owned()));
}

/// A `[COMPACTED]` summary (satchel's `aceclaw` mode, or AceClaw's own prose) is a previous
/// summary: merged when it parses, never the user's request or goal.
#[test]
fn a_compacted_summary_is_never_a_request() {
    let earlier = Case::new(session()).summarize();
    let marked = summary_message_text_for(&earlier, ContextMode::Aceclaw);
    let summary = Case::new(vec![
        user(&marked),
        user("[COMPACTED]\n\nThe user asked to refactor the parser module and add tests for it."),
        user("Continue from that summary: add serde to the workspace manifest too."),
    ])
    .summarize();
    assert_eq!(summary.constraints, earlier.constraints, "the marked summary is merged");
    assert!(summary.requests.iter().all(|r| !r.text.contains("COMPACTED")));
    assert!(summary.requests.iter().all(|r| !r.text.contains("refactor the parser")));
    assert!(summary.goal.iter().all(|g| !g.contains("COMPACTED")));
    assert!(
        summary
            .requests
            .iter()
            .any(|r| r.text.starts_with("Continue from that summary"))
    );
}

/// Rendering and parsing are inverse for satchel's own summaries: compacting the summary
/// message again changes nothing.
#[test]
fn a_summary_compacted_again_is_unchanged() {
    let summary = Case::new(session()).summarize();
    let again = Case::new(vec![user(&summary_message_text(&summary))])
        .after(&summary)
        .summarize();
    assert_eq!(again.requests, summary.requests);
    assert_eq!(again.constraints, summary.constraints);
    assert_eq!(again.critical_context.commands, summary.critical_context.commands);
}

/// A huge span is summarised within budget, keeping the newest identifiers.
#[test]
fn a_huge_span_fits_and_keeps_the_newest_identifiers() {
    let messages = huge_session(2000);
    let summary = Case::new(messages.clone()).summarize();
    let text = render_summary(&summary);
    let last = "sed -i 's/log::info/tracing::info/' crates/mod_999/src/lib_999.rs && cargo check -p mod_999";
    assert!(text.contains(last));
    assert!(text.contains("crates/mod_999/src/lib_999.rs"));
    assert!(text.contains("error[E0432]: unresolved import `tracing` in mod_995"));
    assert_eq!(summary, Case::new(messages).summarize(), "deterministic");
}

#[test]
fn tiny_budgets_never_panic() {
    let counter = counter();
    for max in [0, 10, 100, 300] {
        let messages = session();
        let summary = ExtractiveSummarizer
            .summarize(&SummaryInput::new(&messages, MessageFormat::Openai, max, &counter))
            .unwrap();
        if max >= 300 {
            assert!(counter.count_text(&render_summary(&summary)) <= max);
        }
    }
}
