//! The long-term memory note a compaction leaves (F17): the summary's goal and progress, the
//! user's preferences in their own words, and lessons from failures, as Markdown for
//! `memory/YYYY-MM-DD.md`.

use satchel_protocol::CompactSummary;

/// The note for one compaction of `session_id` at `at` (RFC 3339).
pub fn memory_note(summary: &CompactSummary, session_id: &str, at: &str) -> String {
    let mut out = format!("\n## Compaction of session `{session_id}` at {at}\n\n");
    let mut section = |title: &str, items: &[String]| {
        if items.is_empty() {
            return;
        }
        out.push_str(&format!("### {title}\n\n"));
        for item in items {
            out.push_str(&format!("- {}\n", item.replace('\n', " ")));
        }
        out.push('\n');
    };
    section("Goal", &summary.goal);
    section("Preferences and constraints", &summary.constraints);
    section("Done", &summary.done);
    section("Key decisions", &summary.key_decisions);
    let lessons: Vec<String> = summary
        .critical_context
        .errors
        .iter()
        .map(|e| format!("Failed: {e}"))
        .chain(summary.blocked.iter().map(|b| format!("Still blocked: {b}")))
        .collect();
    section("Lessons from failures", &lessons);
    section("Files modified", &summary.critical_context.files_modified);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_keeps_preferences_and_failures_verbatim() {
        let summary = CompactSummary {
            goal: vec!["Fix the lexer".into()],
            constraints: vec!["Don't change the public API.".into()],
            critical_context: satchel_protocol::CriticalContext {
                errors: vec!["error[E0433]: failed to resolve".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let note = memory_note(&summary, "s1", "2026-11-22T00:00:00Z");
        assert!(note.contains("## Compaction of session `s1` at 2026-11-22T00:00:00Z"));
        assert!(note.contains("- Don't change the public API.\n"));
        assert!(note.contains("- Failed: error[E0433]: failed to resolve\n"));
        assert!(!note.contains("### Done"), "empty sections are left out");
    }
}
