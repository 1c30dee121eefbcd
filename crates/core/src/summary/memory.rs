//! The long-term memory note a compaction leaves (F17), as Markdown for `memory/YYYY-MM-DD.md`:
//! what is new since the session's previous note (requests, preferences in the user's words,
//! what was achieved, decisions) and lessons from real failures: try-error lessons (what
//! failed and what fixed it, [`CompactSummary::lessons`]), failures that went away with no
//! fix in sight (resolved later), and what is still blocked.
//!
//! Each compaction's summary carries everything before it, so writing it whole would repeat
//! the same paragraphs in every note; only items the previous summary did not have are
//! written, and a compaction that learned nothing new writes nothing.

use std::collections::HashSet;

use satchel_protocol::CompactSummary;

use super::extract::calls::area;
use super::extract::text::normalized;
use super::render::leading_code_span;

/// Separates a lesson's failure from its fix (see `merge::lessons`).
const FIXED: &str = " → fixed: ";

/// The note for one compaction of `session_id` at `at` (RFC 3339): what `summary` has that
/// `previous` (the summary before this compaction) had not; `None` when that is nothing.
pub fn memory_note(
    previous: Option<&CompactSummary>,
    summary: &CompactSummary,
    session_id: &str,
    at: &str,
) -> Option<String> {
    let empty = CompactSummary::default();
    let previous = previous.unwrap_or(&empty);
    let new = |now: &[String], before: &[String]| -> Vec<String> {
        let seen: HashSet<String> = before.iter().map(|t| normalized(t)).collect();
        now.iter().filter(|t| !seen.contains(&normalized(t))).cloned().collect()
    };
    let known_requests: HashSet<usize> = previous.requests.iter().map(|r| r.index).collect();
    let requests: Vec<String> = summary
        .requests
        .iter()
        .filter(|r| !r.demonstration && !r.text.is_empty() && !known_requests.contains(&r.index))
        .map(|r| r.text.clone())
        .collect();
    let lessons = new(&summary.lessons, &previous.lessons);
    // A blocker that went away is resolved, unless a newer failure in its area replaced it
    // (that one is still blocked); a new lesson tells its fix instead.
    let blocked_areas: HashSet<String> = summary.blocked.iter().filter_map(|b| command_area(b)).collect();
    let told: Vec<String> = lessons
        .iter()
        .filter_map(|l| l.split_once(FIXED))
        .map(|(failure, _)| normalized(failure))
        .collect();
    let resolved: Vec<String> = new(&previous.blocked, &summary.blocked)
        .into_iter()
        .filter(|b| command_area(b).is_none_or(|a| !blocked_areas.contains(&a)))
        .filter(|b| {
            let b = normalized(b);
            !told.iter().any(|failure| b.starts_with(failure.as_str()))
        })
        .map(|b| format!("{b} (resolved later)"))
        .collect();
    let still_blocked: Vec<String> = new(&summary.blocked, &previous.blocked)
        .into_iter()
        .map(|b| format!("Still blocked: {b}"))
        .collect();
    let sections: [(&str, Vec<String>); 7] = [
        ("Goal", new(&summary.goal, &previous.goal)),
        ("Requests", requests),
        (
            "Preferences and constraints",
            new(&summary.constraints, &previous.constraints),
        ),
        ("Done", new(&summary.done, &previous.done)),
        ("Key decisions", new(&summary.key_decisions, &previous.key_decisions)),
        ("Lessons from failures", [lessons, resolved, still_blocked].concat()),
        (
            "Files modified",
            new(
                &summary.critical_context.files_modified,
                &previous.critical_context.files_modified,
            ),
        ),
    ];
    if sections.iter().all(|(_, items)| items.is_empty()) {
        return None;
    }
    let mut out = format!("\n## Compaction of session `{session_id}` at {at}\n\n");
    for (title, items) in sections.iter().filter(|(_, items)| !items.is_empty()) {
        out.push_str(&format!("### {title}\n\n"));
        for item in items {
            out.push_str(&format!("- {}\n", item.replace('\n', " ")));
        }
        out.push('\n');
    }
    Some(out)
}

/// The area of the command a blocked item names (`` `cargo build` failed: … ``).
fn command_area(blocked: &str) -> Option<String> {
    leading_code_span(blocked).map(|(key, _)| area(&key))
}

#[cfg(test)]
mod tests {
    use satchel_protocol::UserRequest;

    use super::*;

    fn summary(constraints: &[&str], blocked: &[&str]) -> CompactSummary {
        CompactSummary {
            requests: vec![UserRequest {
                text: "Fix the lexer".into(),
                chars: 13,
                index: 0,
                archived: None,
                demonstration: false,
            }],
            constraints: constraints.iter().map(|c| (*c).to_owned()).collect(),
            blocked: blocked.iter().map(|c| (*c).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_note_keeps_preferences_and_failures_verbatim() {
        let first = summary(
            &["Don't change the public API."],
            &["`cargo test` failed: error[E0433]: failed to resolve"],
        );
        let note = memory_note(None, &first, "s1", "2026-11-22T00:00:00Z").unwrap();
        assert!(note.contains("## Compaction of session `s1` at 2026-11-22T00:00:00Z"));
        assert!(note.contains("### Requests\n\n- Fix the lexer\n"));
        assert!(note.contains("- Don't change the public API.\n"));
        assert!(note.contains("- Still blocked: `cargo test` failed: error[E0433]: failed to resolve\n"));
        assert!(!note.contains("### Done"), "empty sections are left out");
    }

    #[test]
    fn later_notes_hold_only_what_is_new() {
        let first = summary(&["Don't change the public API."], &["`cargo test` failed: E"]);
        let second = summary(&["Don't change the public API.", "Prefer small commits."], &[]);
        let note = memory_note(Some(&first), &second, "s1", "2026-11-22T01:00:00Z").unwrap();
        assert!(!note.contains("public API"), "{note}");
        assert!(!note.contains("Fix the lexer"), "{note}");
        assert!(note.contains("- Prefer small commits.\n"));
        assert!(note.contains("- `cargo test` failed: E (resolved later)\n"));
        assert_eq!(
            memory_note(Some(&second), &second, "s1", "t"),
            None,
            "nothing new, no note"
        );
    }

    const LESSON: &str = "`cargo build` failed: error[E0432]: unresolved import `tracing` → fixed: edited \
                          `Cargo.toml`, then `cargo build` succeeded";

    fn check(previous: Option<&CompactSummary>, summary: &CompactSummary, expected: Option<&str>) {
        let note = memory_note(previous, summary, "s1", "t");
        let lessons = note.as_deref().and_then(|n| {
            n.split_once("### Lessons from failures\n\n")
                .map(|(_, rest)| rest.split("\n\n").next().unwrap_or(""))
        });
        assert_eq!(lessons, expected, "{note:?}");
    }

    #[test]
    fn lessons_are_written_once() {
        let blocker = "`cargo build` failed: error[E0432]: unresolved import `tracing`";
        let first = summary(&[], &[blocker]);
        let mut second = summary(&[], &[]);
        second.lessons = vec![LESSON.to_owned()];
        // The lesson tells how the blocker was fixed: no "resolved later" besides it.
        check(Some(&first), &second, Some(&format!("- {LESSON}")));
        check(None, &second, Some(&format!("- {LESSON}")));
        // A later compaction that learned nothing new does not repeat it.
        let mut third = second.clone();
        third.constraints.push("Prefer small commits.".into());
        check(Some(&second), &third, None);
        // Only the new lesson of a later compaction.
        let newer = "`pytest` failed: ImportError: x → fixed: `pip install x`, then `pytest` succeeded";
        third.lessons.push(newer.to_owned());
        check(Some(&second), &third, Some(&format!("- {newer}")));
    }

    #[test]
    fn a_blocker_replaced_by_a_newer_failure_is_not_resolved() {
        let first = summary(
            &[],
            &["`cargo build` failed: error[E0432]: unresolved import `tracing`"],
        );
        let second = summary(&[], &["`cargo build --release` failed: error[E0308]: mismatched types"]);
        check(
            Some(&first),
            &second,
            Some("- Still blocked: `cargo build --release` failed: error[E0308]: mismatched types"),
        );
        // Gone with no fix in sight and no newer failure: resolved later.
        check(
            Some(&second),
            &summary(&[], &[]),
            Some("- `cargo build --release` failed: error[E0308]: mismatched types (resolved later)"),
        );
    }
}
