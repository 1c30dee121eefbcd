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

use satchel_protocol::{
    ArchiveLine, ArchiveRange, CompactSummary, ContextMode, IdentifierList, OmittedItems, UserRequest,
};

/// First line of the message that carries the summary into the context.
pub const SUMMARY_HEADING: &str = "# Summary of previous conversation";

/// AceClaw's anti-re-summarisation marker, first in the summary message in `aceclaw` mode:
/// a message that opens with it is a previous summary, whoever wrote it, and is merged or
/// skipped, never read as the user's request.
pub const COMPACTED_MARKER: &str = "[COMPACTED]";

/// What `aceclaw` mode puts before the summary message text: the marker and a blank line.
pub const COMPACTED_OPENING: &str = "[COMPACTED]\n\n";

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
    goal(&mut out, summary);
    list(
        &mut out,
        "## Constraints & Preferences",
        &summary.constraints,
        Style::Plain,
    );
    if let Some(omitted) = summary
        .critical_context
        .omitted
        .iter()
        .find(|o| o.list == IdentifierList::Constraints && o.count > 0)
    {
        // Before the closing blank line of the section.
        out.pop();
        out.push_str(&format!(
            "- … and {} earlier constraints {}\n\n",
            omitted.count,
            archive_span(&summary.archive)
        ));
    }
    out.push_str("## Progress\n\n");
    list(&mut out, "### Done", &summary.done, Style::Checked);
    list(&mut out, "### In Progress", &summary.in_progress, Style::Unchecked);
    list(&mut out, "### Blocked", &summary.blocked, Style::Plain);
    list(&mut out, "## Key Decisions", &summary.key_decisions, Style::Plain);
    list(&mut out, "## Next Steps", &summary.next_steps, Style::Numbered);

    let ctx = &summary.critical_context;
    let where_archived = archive_span(&summary.archive);
    out.push_str("## Critical Context\n\n");
    if !ctx.findings.is_empty() {
        sub_list(&mut out, "Findings", &ctx.findings, false, None, &where_archived);
    }
    for (label, items, list, code) in [
        (
            "Files modified",
            &ctx.files_modified,
            IdentifierList::FilesModified,
            true,
        ),
        ("Files read", &ctx.files_read, IdentifierList::FilesRead, true),
        ("Commands run", &ctx.commands, IdentifierList::Commands, true),
        ("Errors seen", &ctx.errors, IdentifierList::Errors, true),
        ("Notes", &ctx.notes, IdentifierList::Notes, false),
    ] {
        let omitted = ctx.omitted.iter().find(|o| o.list == list && o.count > 0);
        sub_list(&mut out, label, items, code, omitted, &where_archived);
    }
    let demonstrations: Vec<&UserRequest> = summary.requests.iter().filter(|r| r.demonstration).collect();
    if !demonstrations.is_empty() {
        out.push_str("- Demonstrations (examples of how to work, not tasks):\n");
        out.push_str(&references_line("  - ", &demonstrations, "in the archive"));
        for request in demonstrations.iter().filter(|r| !r.text.is_empty()) {
            out.push_str("  - ");
            out.push_str(&request_line(request, false));
            out.push('\n');
        }
    }
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

/// A summary as it will be shown once the caller has archived the compaction in progress:
/// with the widest archive range it can append (in the file of the previous range, which
/// makes the longest "in `dialog/…` lines a-b" pointers) and an archive line for every
/// request not archived yet. Budgets are checked against this, so the real summary can only
/// be shorter; but for a compaction a crash cut mid-archive that a restart finishes after
/// other sessions archived: its lines are then in more than one run, each a line of the path
/// guide.
pub(crate) fn with_next_range(summary: &CompactSummary) -> CompactSummary {
    let file = summary
        .archive
        .last()
        .map_or("dialog/0000-00-00.jsonl".to_owned(), |r| r.file.clone());
    let mut widest = summary.clone();
    for request in widest.requests.iter_mut().filter(|r| r.archived.is_none()) {
        request.archived = Some(ArchiveLine {
            file: file.clone(),
            line: 9_999_999,
        });
    }
    widest.archive.push(ArchiveRange {
        file,
        start_line: 9_999_999,
        end_line: 9_999_999,
        first_index: 9_999_999,
        last_index: 9_999_999,
        messages: 9_999_999,
    });
    widest
}

/// The full text of the summary message: [`SUMMARY_HEADING`], the peer's introduction, the
/// rendered summary and the peer's closing sentence.
pub fn summary_message_text(summary: &CompactSummary) -> String {
    format!("{SUMMARY_HEADING}\n\n{INTRO}\n\n{}\n{OUTRO}", render_summary(summary))
}

/// The summary message text for `mode`: [`summary_message_text`] in `qwenpaw` mode, the same
/// after [`COMPACTED_MARKER`] and a blank line in `aceclaw` mode, as AceClaw marks its own.
///
/// The marker costs a few tokens the summary budget (`super::budget::fit`) does not see;
/// a caller in `aceclaw` mode lowers `max_tokens` by the count of [`COMPACTED_OPENING`].
pub fn summary_message_text_for(summary: &CompactSummary, mode: ContextMode) -> String {
    match mode {
        ContextMode::Qwenpaw => summary_message_text(summary),
        ContextMode::Aceclaw => format!("{COMPACTED_OPENING}{}", summary_message_text(summary)),
    }
}

/// Whether a message text is a summary of an earlier compaction: satchel's heading, or
/// [`COMPACTED_MARKER`] (satchel's `aceclaw` mode, or AceClaw itself).
pub fn is_summary_text(text: &str) -> bool {
    text.starts_with(SUMMARY_HEADING) || text.trim_start().starts_with(COMPACTED_MARKER)
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
/// ``- `dialog/2026-11-22.jsonl` lines 12-40: messages 3-31 (29 messages).``, or for a range
/// with a gap ``- `dialog/2026-11-22.jsonl` lines 41-44: 4 messages between messages 1 and 13.``
pub(crate) fn archive_line(range: &ArchiveRange) -> String {
    let plural = if range.messages == 1 { "" } else { "s" };
    // A request kept live while later turns were compacted leaves a gap: say so rather than
    // name a range the lines do not hold.
    let contiguous = range.last_index.checked_sub(range.first_index).map(|d| d + 1) == Some(range.messages);
    let messages = if contiguous {
        format!(
            "messages {}-{} ({} message{plural})",
            range.first_index, range.last_index, range.messages
        )
    } else {
        format!(
            "{} message{plural} between messages {} and {}",
            range.messages, range.first_index, range.last_index
        )
    };
    format!(
        "- {} lines {}-{}: {messages}.",
        code_span(&range.file),
        range.start_line,
        range.end_line
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

/// Where the archived messages are, for "and N more" lines: the archive file and its line
/// span when there is one file, else a pointer to the path guide.
fn archive_span(archive: &[ArchiveRange]) -> String {
    match archive {
        [] => "in the archive".to_owned(),
        [first, rest @ ..] if rest.iter().all(|r| r.file == first.file) => {
            let start = archive.iter().map(|r| r.start_line).min().unwrap_or(0);
            let end = archive.iter().map(|r| r.end_line).max().unwrap_or(0);
            format!("in {} lines {start}-{end}", code_span(&first.file))
        }
        _ => "in the archive files below".to_owned(),
    }
}

/// `## Goal`: goal statements, then the user's requests (demonstrations are listed under
/// Critical Context), the newest last; requests reduced to references share one line.
fn goal(out: &mut String, summary: &CompactSummary) {
    out.push_str("## Goal\n\n");
    let requests: Vec<&UserRequest> = summary.requests.iter().filter(|r| !r.demonstration).collect();
    if summary.goal.is_empty() && requests.is_empty() {
        out.push_str(NONE);
        out.push_str("\n\n");
        return;
    }
    for item in &summary.goal {
        out.push_str("- ");
        out.push_str(&one_line(item));
        out.push('\n');
    }
    out.push_str(&references_line("- ", &requests, "earlier requests, in the archive"));
    let listed: Vec<&&UserRequest> = requests.iter().filter(|r| !r.text.is_empty()).collect();
    // One archive file for all of them (the usual case) is named once.
    let file = common_file(listed.iter().map(|r| **r));
    if let Some(file) = file {
        out.push_str(&format!("{REQUEST_FILE_OPENING}{}):\n", code_span(file)));
    }
    for request in listed {
        out.push_str("- ");
        out.push_str(&request_line(request, file.is_some()));
        out.push('\n');
    }
    out.push('\n');
}

/// Opening of the line that names the archive file of the request lines below it.
pub(crate) const REQUEST_FILE_OPENING: &str = "User requests (whole messages at the line given, in ";

/// The archive file every request is in, when they are all archived in one.
fn common_file<'a>(mut requests: impl Iterator<Item = &'a UserRequest>) -> Option<&'a str> {
    let first = requests.next()?.archived.as_ref()?.file.as_str();
    requests
        .all(|r| r.archived.as_ref().is_some_and(|a| a.file == first))
        .then_some(first)
}

/// One list item naming the requests reduced to references (no text), or nothing when none is:
/// `- (messages 3, 17: earlier requests, in the archive)`.
fn references_line(bullet: &str, requests: &[&UserRequest], what: &str) -> String {
    let references: Vec<String> = requests
        .iter()
        .filter(|r| r.text.is_empty())
        .map(|r| r.index.to_string())
        .collect();
    if references.is_empty() {
        return String::new();
    }
    format!("{bullet}{REFERENCES_OPENING}{}: {what})\n", references.join(", "))
}

/// Opening of the line that lists requests reduced to references.
pub(crate) const REFERENCES_OPENING: &str = "(messages ";

/// `(message 12, 3842 chars, `dialog/…` line 40) text`: where the whole message is, and how
/// long it is when the text is only its opening; the file is left out when a line above
/// names it for every request (`file_named`).
pub(crate) fn request_line(request: &UserRequest, file_named: bool) -> String {
    let mut origin = format!("(message {}", request.index);
    if request.text.chars().count() < request.chars || request.text.ends_with('…') {
        origin.push_str(&format!(", {} chars", request.chars));
    }
    match &request.archived {
        Some(archived) if file_named => origin.push_str(&format!(", line {}", archived.line)),
        Some(archived) => origin.push_str(&format!(", {} line {}", code_span(&archived.file), archived.line)),
        None => {}
    }
    format!("{origin}) {}", one_line(&request.text))
}

fn sub_list(
    out: &mut String,
    label: &str,
    items: &[String],
    code: bool,
    omitted: Option<&OmittedItems>,
    where_archived: &str,
) {
    out.push_str("- ");
    out.push_str(label);
    if items.is_empty() && omitted.is_none() {
        out.push_str(": ");
        out.push_str(NONE);
        out.push('\n');
        return;
    }
    out.push_str(":\n");
    if let Some(omitted) = omitted {
        out.push_str(&omitted_line(omitted, items.is_empty(), where_archived));
        out.push('\n');
    }
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

/// Groups named on an omitted line: the largest few say where most items were.
const GROUPS_SHOWN: usize = 3;
/// A group name (a directory, a program) is shown up to this many chars.
const GROUP_NAME_CHARS: usize = 60;

/// Opening of the line that counts omitted items.
pub(crate) const OMITTED_OPENING: &str = "  - … ";

/// `… and 37 more (`src/test/` 20, `src/main/` 17) in `dialog/…` lines 1-380`.
fn omitted_line(omitted: &OmittedItems, only: bool, where_archived: &str) -> String {
    let groups: Vec<String> = omitted
        .groups
        .iter()
        .take(GROUPS_SHOWN)
        .map(|g| {
            let (name, cut) = crate::summary::extract::text::cut_chars(&g.name, GROUP_NAME_CHARS);
            let name = if cut { format!("{name}…") } else { name.to_owned() };
            format!("{} {}", code_span(&name), g.count)
        })
        .collect();
    let groups = if groups.is_empty() {
        String::new()
    } else {
        format!(" ({})", groups.join(", "))
    };
    let (and, more) = if only { ("", "") } else { ("and ", " more") };
    format!("{OMITTED_OPENING}{and}{}{more}{groups} {where_archived}", omitted.count)
}

/// List items must stay on one line; summaries from other backends may carry newlines.
fn one_line(text: &str) -> Cow<'_, str> {
    if text.contains(['\n', '\r']) {
        Cow::Owned(text.lines().map(str::trim_end).collect::<Vec<_>>().join(" "))
    } else {
        Cow::Borrowed(text)
    }
}

/// A CommonMark code span at the start of `text`: its content and the rest (the inverse of
/// [`code_span`]).
pub(crate) fn leading_code_span(text: &str) -> Option<(String, &str)> {
    let fence = text.chars().take_while(|&c| c == '`').count();
    if fence == 0 {
        return None;
    }
    let body = &text[fence..];
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            if run == fence {
                let inner = &body[..i];
                let inner = match inner.strip_prefix(' ').and_then(|s| s.strip_suffix(' ')) {
                    Some(stripped) if !stripped.trim().is_empty() => stripped,
                    _ => inner,
                };
                return Some((inner.to_owned(), &body[i + run..]));
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
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
    fn a_path_guide_range_with_a_gap_says_how_many_messages_lie_between_its_ends() {
        let range = |first_index, last_index, messages| ArchiveRange {
            file: "dialog/2026-11-22.jsonl".into(),
            start_line: 41,
            end_line: 40 + messages,
            first_index,
            last_index,
            messages,
        };
        assert_eq!(
            archive_line(&range(3, 31, 29)),
            "- `dialog/2026-11-22.jsonl` lines 41-69: messages 3-31 (29 messages)."
        );
        assert_eq!(
            archive_line(&range(1, 13, 4)),
            "- `dialog/2026-11-22.jsonl` lines 41-44: 4 messages between messages 1 and 13."
        );
        assert_eq!(
            archive_line(&range(7, 7, 1)),
            "- `dialog/2026-11-22.jsonl` lines 41-41: messages 7-7 (1 message)."
        );
    }

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
                findings: vec![],
                omitted: vec![],
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
            instruction_effect: None,
            requests: vec![],
            lessons: vec![],
            template: vec![],
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
    fn aceclaw_mode_marks_the_summary_and_qwenpaw_mode_does_not() {
        let summary = sample();
        let plain = summary_message_text(&summary);
        assert_eq!(summary_message_text_for(&summary, ContextMode::Qwenpaw), plain);
        let marked = summary_message_text_for(&summary, ContextMode::Aceclaw);
        assert_eq!(marked, format!("[COMPACTED]\n\n{plain}"));
        assert!(is_summary_text(&plain) && is_summary_text(&marked));
        assert!(is_summary_text("[COMPACTED]\n\nAceClaw's own summary prose"));
        assert!(!is_summary_text("Please summarise # Summary of previous conversation"));
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
