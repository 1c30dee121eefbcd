//! The Markdown a model reads in place of the compacted messages.
//!
//! The shape follows the peer's compactor template (`## Goal`, `## Constraints & Preferences`,
//! `## Progress`, `## Key Decisions`, `## Next Steps`, `## Critical Context`) so prompts and
//! habits written for it keep working, plus an explicit path guide to the dialog archive,
//! because the peer only names the date file and leaves the agent to guess where to look.
//!
//! Identifiers (paths, commands, error lines) are written as code spans and kept byte-exact:
//! the summary's main job is to let the agent continue without re-discovering them, and a
//! retention check looks for them verbatim. Rendering is a pure function of the summary, so
//! the same summary always yields the same text (prompt caches stay warm).

use std::borrow::Cow;

use satchel_protocol::{ArchiveRange, CompactSummary};

use crate::tokens::TokenCounter;

/// First line of the message that carries the summary into the context.
pub const SUMMARY_HEADING: &str = "# Summary of previous conversation";

const INTRO: &str = "Previous conversation logs are offloaded to the dialog archive listed below. Here is the summary:";
const OUTRO: &str = "The above is a summary of previous conversation, use it as context to maintain continuity.";
/// Closing line of the path guide.
pub(crate) const ARCHIVE_HINT: &str =
    "Read them with `read_file` or satchel's `context.read` (newest at the end; read backwards).";
const NONE: &str = "(none)";

/// Renders a summary as the Markdown the model reads: the peer's sections, `(none)` for empty
/// ones, and the archive path guide.
pub fn render_summary(summary: &CompactSummary) -> String {
    let mut out = String::new();
    list(&mut out, "## Goal", &summary.goal, Style::Plain);
    list(
        &mut out,
        "## Constraints & Preferences",
        &summary.constraints,
        Style::Plain,
    );
    out.push_str("## Progress\n\n");
    list(&mut out, "### Done", &summary.done, Style::Checked);
    list(&mut out, "### In Progress", &summary.in_progress, Style::Unchecked);
    list(&mut out, "### Blocked", &summary.blocked, Style::Plain);
    list(&mut out, "## Key Decisions", &summary.key_decisions, Style::Plain);
    list(&mut out, "## Next Steps", &summary.next_steps, Style::Numbered);

    let ctx = &summary.critical_context;
    out.push_str("## Critical Context\n\n");
    sub_list(&mut out, "Files modified", &ctx.files_modified, true);
    sub_list(&mut out, "Files read", &ctx.files_read, true);
    sub_list(&mut out, "Commands run", &ctx.commands, true);
    sub_list(&mut out, "Errors seen", &ctx.errors, true);
    sub_list(&mut out, "Notes", &ctx.notes, false);
    out.push('\n');

    out.push_str("## Archive (path guide)\n\n");
    if summary.archive.is_empty() {
        out.push_str(NONE);
        out.push('\n');
    } else {
        for range in path_guide(&summary.archive) {
            out.push_str(&archive_line(&range));
            out.push('\n');
        }
        out.push_str(ARCHIVE_HINT);
        out.push('\n');
    }
    out
}

/// Tokens a summary's rendering may use so that it still fits `max_tokens` once the caller
/// appends the archive range of the compaction in progress (and, for a first compaction, the
/// reading hint that comes with the path guide). Both summarisers budget with it.
pub(crate) fn budget_before_next_range(first_range: bool, max_tokens: u64, counter: &TokenCounter) -> u64 {
    let widest = ArchiveRange {
        file: "dialog/0000-00-00.jsonl".into(),
        start_line: 999_999,
        end_line: 999_999,
        first_index: 999_999,
        last_index: 999_999,
        messages: 999_999,
    };
    let mut reserve = counter.count_text(&archive_line(&widest)) + 1;
    if first_range {
        reserve += counter.count_text(ARCHIVE_HINT) + 1;
    }
    max_tokens.saturating_sub(reserve)
}

/// The full text of the summary message: [`SUMMARY_HEADING`], the peer's introduction, the
/// rendered summary and the peer's closing sentence.
pub fn summary_message_text(summary: &CompactSummary) -> String {
    format!("{SUMMARY_HEADING}\n\n{INTRO}\n\n{}\n{OUTRO}", render_summary(summary))
}

/// Ranges listed one by one before older ones are merged per file, so the path guide of a
/// session with hundreds of compactions stays a few lines long.
const GUIDE_RANGES: usize = 6;

/// The ranges to list: the newest [`GUIDE_RANGES`] as they are, older ones merged into one
/// span per archive file (its lines may then include other sessions' lines; each archive line
/// names its session and index, so a reader can still pick exactly this session's messages).
pub(crate) fn path_guide(archive: &[ArchiveRange]) -> Vec<ArchiveRange> {
    let split = archive.len().saturating_sub(GUIDE_RANGES);
    let mut merged: Vec<ArchiveRange> = Vec::new();
    for range in &archive[..split] {
        match merged.iter_mut().find(|m| m.file == range.file) {
            Some(m) => {
                m.start_line = m.start_line.min(range.start_line);
                m.end_line = m.end_line.max(range.end_line);
                m.first_index = m.first_index.min(range.first_index);
                m.last_index = m.last_index.max(range.last_index);
                m.messages += range.messages;
            }
            None => merged.push(range.clone()),
        }
    }
    merged.extend(archive[split..].iter().cloned());
    merged
}

/// One line of the path guide, e.g.
/// ``- `dialog/2026-11-22.jsonl` lines 12-40: messages 3-31 (29 messages).``
pub(crate) fn archive_line(range: &ArchiveRange) -> String {
    format!(
        "- {} lines {}-{}: messages {}-{} ({} message{}).",
        code_span(&range.file),
        range.start_line,
        range.end_line,
        range.first_index,
        range.last_index,
        range.messages,
        if range.messages == 1 { "" } else { "s" }
    )
}

#[derive(Clone, Copy)]
enum Style {
    Plain,
    Checked,
    Unchecked,
    Numbered,
}

fn list(out: &mut String, heading: &str, items: &[String], style: Style) {
    out.push_str(heading);
    out.push_str("\n\n");
    if items.is_empty() {
        out.push_str(NONE);
        out.push('\n');
    }
    for (i, item) in items.iter().enumerate() {
        match style {
            Style::Plain => out.push_str("- "),
            Style::Checked => out.push_str("- [x] "),
            Style::Unchecked => out.push_str("- [ ] "),
            Style::Numbered => out.push_str(&format!("{}. ", i + 1)),
        }
        out.push_str(&one_line(item));
        out.push('\n');
    }
    out.push('\n');
}

fn sub_list(out: &mut String, label: &str, items: &[String], code: bool) {
    out.push_str("- ");
    out.push_str(label);
    if items.is_empty() {
        out.push_str(": ");
        out.push_str(NONE);
        out.push('\n');
        return;
    }
    out.push_str(":\n");
    for item in items {
        out.push_str("  - ");
        let line = one_line(item);
        if code {
            out.push_str(&code_span(&line));
        } else {
            out.push_str(&line);
        }
        out.push('\n');
    }
}

/// List items must stay on one line; summaries from other backends may carry newlines.
fn one_line(text: &str) -> Cow<'_, str> {
    if text.contains(['\n', '\r']) {
        Cow::Owned(text.lines().map(str::trim_end).collect::<Vec<_>>().join(" "))
    } else {
        Cow::Borrowed(text)
    }
}

/// A CommonMark code span that shows `text` exactly: the fence is one backtick longer than
/// the longest run inside, and a space pads text that starts or ends with a backtick.
pub(crate) fn code_span(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    if text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_archive_history_stays_a_short_path_guide() {
        let archive: Vec<ArchiveRange> = (0..300)
            .map(|i| ArchiveRange {
                file: format!("dialog/2026-11-{:02}.jsonl", 20 + i / 100),
                start_line: 10 * i + 1,
                end_line: 10 * i + 10,
                first_index: 10 * i,
                last_index: 10 * i + 9,
                messages: 10,
            })
            .collect();
        let guide = path_guide(&archive);
        assert_eq!(
            guide.len(),
            3 + GUIDE_RANGES,
            "one merged line per older file, then the newest ranges"
        );
        assert_eq!(
            guide.iter().map(|r| r.messages).sum::<usize>(),
            3000,
            "every message is still covered"
        );
        assert_eq!(guide.last(), archive.last());
        assert_eq!((guide[0].first_index, guide[0].last_index), (0, 999));
    }
    use satchel_protocol::CriticalContext;

    fn sample() -> CompactSummary {
        CompactSummary {
            goal: vec!["Fix the flaky login test".into()],
            constraints: vec!["Do not touch the public API.".into()],
            done: vec!["Modified `src/auth.rs`".into()],
            in_progress: vec!["I'll rerun the suite.".into()],
            blocked: vec![],
            key_decisions: vec!["Let's use JWT because sessions need state.".into()],
            next_steps: vec!["Run `cargo test`".into(), "Open a PR".into()],
            critical_context: CriticalContext {
                files_read: vec!["src/lib.rs".into()],
                files_modified: vec!["src/auth.rs".into()],
                commands: vec!["cargo test -p auth".into(), "echo `date`".into()],
                errors: vec!["error[E0425]: cannot find value `x` in this scope".into()],
                notes: vec![],
            },
            archive: vec![ArchiveRange {
                file: "dialog/2026-11-22.jsonl".into(),
                start_line: 12,
                end_line: 40,
                first_index: 3,
                last_index: 31,
                messages: 29,
            }],
            instruction: None,
        }
    }

    #[test]
    fn renders_the_peer_sections_in_order() {
        let text = render_summary(&sample());
        let headings: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
        assert_eq!(
            headings,
            [
                "## Goal",
                "## Constraints & Preferences",
                "## Progress",
                "### Done",
                "### In Progress",
                "### Blocked",
                "## Key Decisions",
                "## Next Steps",
                "## Critical Context",
                "## Archive (path guide)"
            ]
        );
        assert!(text.contains("- [x] Modified `src/auth.rs`\n"));
        assert!(text.contains("- [ ] I'll rerun the suite.\n"));
        assert!(text.contains("### Blocked\n\n(none)\n"));
        assert!(text.contains("1. Run `cargo test`\n2. Open a PR\n"));
        assert!(text.contains("- Files modified:\n  - `src/auth.rs`\n"));
        assert!(text.contains("  - `` echo `date` ``\n"));
        assert!(text.contains("  - ``error[E0425]: cannot find value `x` in this scope``\n"));
        assert!(text.contains("- Notes: (none)\n"));
        assert!(text.contains(
            "- `dialog/2026-11-22.jsonl` lines 12-40: messages 3-31 (29 messages).\n\
             Read them with `read_file` or satchel's `context.read` (newest at the end; read backwards).\n"
        ));
    }

    #[test]
    fn empty_summary_says_none_everywhere() {
        let text = render_summary(&CompactSummary::default());
        assert!(text.contains("## Goal\n\n(none)\n"));
        assert!(text.contains("## Next Steps\n\n(none)\n"));
        assert!(text.contains("- Files read: (none)\n"));
        assert!(text.ends_with("## Archive (path guide)\n\n(none)\n"));
    }

    #[test]
    fn message_text_wraps_the_summary_like_the_peer() {
        let summary = sample();
        let text = summary_message_text(&summary);
        assert!(text.starts_with(
            "# Summary of previous conversation\n\nPrevious conversation logs are offloaded to the dialog \
             archive listed below. Here is the summary:\n\n## Goal\n"
        ));
        assert!(text.ends_with(
            "read backwards).\n\nThe above is a summary of previous conversation, use it as context to maintain continuity."
        ));
        assert_eq!(text, summary_message_text(&summary.clone()));
    }

    #[test]
    fn multi_line_items_stay_one_list_item() {
        let summary = CompactSummary {
            goal: vec!["first line\r\nsecond line".into()],
            ..CompactSummary::default()
        };
        assert!(render_summary(&summary).contains("- first line second line\n"));
    }

    #[test]
    fn code_spans_survive_backticks() {
        assert_eq!(code_span("ls"), "`ls`");
        assert_eq!(code_span("a `b` c"), "``a `b` c``");
        assert_eq!(code_span("`x`"), "`` `x` ``");
        assert_eq!(code_span("a ``` b"), "````a ``` b````");
    }
}
