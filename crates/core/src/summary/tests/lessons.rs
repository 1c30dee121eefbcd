//! Try-error lessons (a failure and what fixed it), from real tool results, carried in the
//! summary so each compaction's memory note writes only the new ones.

use serde_json::json;

use super::*;
use crate::summary::memory::memory_note;

const E0432: &str = "error[E0432]: unresolved import `tracing`";
const FIXED_BUILD: &str = "`cargo build` failed: error[E0432]: unresolved import `tracing` → fixed: edited \
                           `Cargo.toml`, then `cargo build` succeeded";

/// A failing `cargo build`, an edit of `Cargo.toml`, a passing `cargo build`.
fn fixed_build() -> Vec<Value> {
    vec![
        user("Add tracing to the app and make the build pass."),
        run("c1", "Let's build.", "cargo build"),
        result(
            "c1",
            &format!("   Compiling app v0.1.0\n{E0432}\n --> src/main.rs:1:5\nerror: could not compile `app`"),
        ),
        run("c2", "", "cat Cargo.toml"),
        result("c2", "[package]\nname = \"app\"\n\n[dependencies]"),
        call(
            "c3",
            "The crate is missing; I'll add it to Cargo.toml.",
            "str_replace_based_edit_tool",
            json!({"command": "str_replace", "path": "Cargo.toml", "old_str": "[dependencies]",
                   "new_str": "[dependencies]\ntracing = \"0.1\""}),
        ),
        result("c3", "The file Cargo.toml has been edited."),
        run("c4", "", "cargo build"),
        result("c4", "   Compiling app v0.1.0\n    Finished `dev` profile in 2.1s"),
    ]
}

fn note(previous: Option<&CompactSummary>, summary: &CompactSummary) -> String {
    memory_note(previous, summary, "s1", "2026-11-24T00:00:00Z").unwrap_or_default()
}

#[test]
fn a_fixed_failure_is_one_lesson_naming_the_error_and_the_fix() {
    let summary = Case::new(fixed_build()).summarize();
    assert_eq!(summary.lessons, [FIXED_BUILD]);
    assert!(summary.blocked.is_empty(), "{:?}", summary.blocked);
    // The model reads it as progress: the failure was reproduced, then fixed.
    assert!(
        render_summary(&summary).contains(&format!("- [x] Reproduced, then fixed: {FIXED_BUILD}\n")),
        "{}",
        render_summary(&summary)
    );
    let note = note(None, &summary);
    assert!(
        note.contains(&format!("### Lessons from failures\n\n- {FIXED_BUILD}\n")),
        "{note}"
    );
}

#[test]
fn a_failure_nothing_fixed_is_a_blocker_not_a_lesson() {
    let summary = Case::new(session()).summarize();
    assert!(summary.lessons.is_empty(), "{:?}", summary.lessons);
    assert_eq!(summary.blocked, [format!("`{BUILD}` failed: {BUILD_ERROR}")]);
    assert!(note(None, &summary).contains(&format!("- Still blocked: `{BUILD}` failed: {BUILD_ERROR}\n")));
}

#[test]
fn a_later_compaction_writes_only_its_new_lessons() {
    let first = Case::new(fixed_build()).summarize();
    let second = Case::new(vec![
        user("Now make the tests pass as well."),
        run("c5", "Let's run the tests.", "pytest tests"),
        result(
            "c5",
            "Traceback (most recent call last):\n  File \"t.py\", line 1\nModuleNotFoundError: No module named 'yaml'",
        ),
        run("c6", "", "pip install pyyaml"),
        result("c6", "Successfully installed pyyaml-6.0"),
        run("c7", "", "pytest tests"),
        result("c7", "==== 12 passed in 0.4s ===="),
    ])
    .after(&first)
    .summarize();
    let pytest = "`pytest tests` failed: ModuleNotFoundError: No module named 'yaml' → fixed: `pip install \
                  pyyaml`, then `pytest tests` succeeded";
    assert_eq!(second.lessons, [FIXED_BUILD, pytest]);
    let written = note(Some(&first), &second);
    assert!(written.contains(&format!("- {pytest}\n")), "{written}");
    assert!(!written.contains("cargo build"), "{written}");

    // Nothing failed since: no lessons section at all.
    let third = Case::new(vec![
        user("Please also update the changelog."),
        run("c8", "", "git log -1"),
        result("c8", "commit abc"),
    ])
    .after(&second)
    .summarize();
    assert_eq!(third.lessons, second.lessons);
    let written = note(Some(&second), &third);
    assert!(!written.contains("Lessons from failures"), "{written}");
}

#[test]
fn a_blocker_of_the_previous_summary_fixed_now_is_a_lesson() {
    let first = Case::new(session()).summarize();
    let second = Case::new(vec![
        call(
            "c9",
            "",
            "str_replace_based_edit_tool",
            json!({"command": "str_replace", "path": "Cargo.toml", "old_str": "[workspace]",
                   "new_str": "[workspace]\n[workspace.dependencies]\nserde = \"1\""}),
        ),
        result("c9", "The file Cargo.toml has been edited."),
        run("c10", "", BUILD),
        result("c10", "    Finished `release` profile in 9.0s"),
    ])
    .after(&first)
    .summarize();
    let lesson = format!("`{BUILD}` failed: {BUILD_ERROR} → fixed: edited `Cargo.toml`, then `{BUILD}` succeeded");
    assert_eq!(second.lessons, std::slice::from_ref(&lesson));
    assert!(second.blocked.is_empty());
    let written = note(Some(&first), &second);
    assert!(written.contains(&format!("- {lesson}\n")), "{written}");
    assert!(
        !written.contains("resolved later"),
        "the lesson tells the fix: {written}"
    );
}

#[test]
fn demonstrations_are_not_mined_for_lessons() {
    let demo = format!(
        "Here is a demonstration of how to correctly accomplish this task.\n$ cargo build\n{E0432}\n\
         error: could not compile `app`\n$ cargo add tracing\n$ cargo build\n    Finished `dev` profile"
    );
    let summary = Case::new(vec![
        user(&demo),
        user("We're currently solving the following issue. ISSUE: the build fails."),
        run("c1", "", "ls"),
        result("c1", "Cargo.toml\nsrc"),
    ])
    .summarize();
    assert!(summary.lessons.is_empty(), "{:?}", summary.lessons);
    assert!(summary.critical_context.errors.is_empty());
    assert!(!note(None, &summary).contains("Lessons"));
}
