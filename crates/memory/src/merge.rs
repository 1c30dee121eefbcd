//! The daily merge: what the recent daily logs learned that lasts (preferences and
//! constraints, decisions, lessons from failures, the user's own notes) is folded into
//! `MEMORY.md`, once, under a heading per kind.
//!
//! Two steps: [`new_entries`] finds what the logs hold that `MEMORY.md` does not (exact
//! duplicates left out); then either [`extractive`] appends those entries as written, or a
//! model consolidates them ([`consolidation_prompt`], [`CONSOLIDATION_SYSTEM`]) and
//! [`consolidated`] checks its reply (every new entry accounted for, provenance kept) and
//! applies it. [`merge`] is the extractive merge in one call.
//!
//! An entry written as is carries its log, `(from memory/2026-11-24.md)`, and is known again
//! by its words. A model's bullet no longer has the words of the entries it stands for, so
//! its provenance also carries their fingerprints, `(from memory/2026-11-24.md#1a2b3c4d)`:
//! the next merge over the same days knows them by those.
//!
//! Pure: texts in, the new `MEMORY.md` out; the daemon reads and writes the files (keeps the
//! backup, and runs the model). What a day did (its goal, requests, progress, files touched)
//! stays in its log, where search still finds it: `MEMORY.md` is for what stays true.

use std::collections::HashSet;
use std::ops::Range;

/// A daily log to merge: its workspace-relative path and text.
#[derive(Debug, Clone)]
pub struct DailyLog {
    /// `memory/YYYY-MM-DD.md`.
    pub path: String,
    /// Its content.
    pub text: String,
}

/// What a merge produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The new `MEMORY.md`.
    pub memory: String,
    /// New entries taken into `MEMORY.md` (as list items of their own, or merged by a model
    /// into another one).
    pub added: usize,
    /// Entries left out because `MEMORY.md` (or an earlier log of the merge) had them.
    pub duplicates: usize,
}

/// One entry a merge writes: its text and the daily logs it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry, whitespace folded.
    pub text: String,
    /// The daily logs it comes from (`memory/YYYY-MM-DD.md`).
    pub from: Vec<String>,
}

impl Entry {
    /// The text of its list item: `text (from memory/a.md, memory/b.md)`.
    pub fn line(&self) -> String {
        format!("{} (from {})", self.text, self.from.join(", "))
    }
}

/// What the daily logs hold that `MEMORY.md` does not: the extractive step of a merge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewEntries {
    /// The entries by `MEMORY.md` heading, headings in the order first met.
    pub sections: Vec<(String, Vec<Entry>)>,
    /// Entries left out because `MEMORY.md` (or an earlier log of the merge) had them.
    pub duplicates: usize,
    /// The duplicates that repeat a list item of `MEMORY.md` word for word: when a model
    /// rewrites that item, it keeps their fingerprints.
    pub repeats: Vec<Entry>,
}

impl NewEntries {
    /// How many entries there are.
    pub fn count(&self) -> usize {
        self.sections.iter().map(|(_, list)| list.len()).sum()
    }

    /// The entries in order, each with its heading; entry `i` here is `[N{i+1}]` in a
    /// [`consolidation_prompt`].
    fn numbered(&self) -> Vec<(&str, &Entry)> {
        self.sections
            .iter()
            .flat_map(|(kind, list)| list.iter().map(move |entry| (kind.as_str(), entry)))
            .collect()
    }
}

/// The headings of `MEMORY.md` a merge writes under, and the daily-log headings that feed
/// each; a heading not listed here feeds [`NOTES`] unless it is in [`DAY_ONLY`].
const KINDS: &[(&str, &[&str])] = &[
    (
        "Preferences and constraints",
        &["preferences and constraints", "preferences", "constraints", "habits"],
    ),
    ("Key decisions", &["key decisions", "decisions"]),
    (
        "Lessons from failures",
        &["lessons from failures", "lessons", "try-error lessons"],
    ),
];

/// Where entries under any other heading go.
const NOTES: &str = "Notes";

/// Daily-log headings about the day's work rather than lasting facts: not merged.
const DAY_ONLY: &[&str] = &["goal", "requests", "done", "progress", "files modified", "next steps"];

/// Folds the entries of `logs` (oldest first) that `memory` does not already hold into it.
pub fn merge(memory: &str, logs: &[DailyLog]) -> Merged {
    extractive(memory, &new_entries(memory, logs))
}

/// The entries of `logs` (oldest first) that `memory` does not already hold, as written.
/// An entry is known when `MEMORY.md` has it word for word, or a model's rewriting of it
/// (whose provenance carries the entry's fingerprint, `memory/…md#1a2b3c4d`).
pub fn new_entries(memory: &str, logs: &[DailyLog]) -> NewEntries {
    let items: Vec<String> = memory.lines().filter_map(entry_of).collect();
    let known: HashSet<String> = items.iter().map(|e| normalized(e)).collect();
    let fingerprints: HashSet<String> = items
        .iter()
        .flat_map(|e| provenance_of(e))
        .flat_map(|from| from.split('#').skip(1).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let mut seen = known.clone();
    let mut sections: Vec<(String, Vec<Entry>)> = Vec::new();
    let mut duplicates = 0;
    let mut repeats = Vec::new();
    for log in logs {
        for (kind, text) in entries(&log.text) {
            let key = normalized(&text);
            if fingerprints.contains(&fingerprint(&key)) || !seen.insert(key.clone()) {
                duplicates += 1;
                if known.contains(&key) {
                    repeats.push(Entry {
                        text,
                        from: vec![log.path.clone()],
                    });
                }
                continue;
            }
            let entry = Entry {
                text,
                from: vec![log.path.clone()],
            };
            match sections.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, list)) => list.push(entry),
                None => sections.push((kind, vec![entry])),
            }
        }
    }
    NewEntries {
        sections,
        duplicates,
        repeats,
    }
}

/// `memory` with the `new` entries appended as written, each under its heading.
pub fn extractive(memory: &str, new: &NewEntries) -> Merged {
    let mut out = memory.to_owned();
    for (kind, list) in &new.sections {
        let lines: Vec<String> = list.iter().map(Entry::line).collect();
        out = insert_under(&out, kind, &lines);
    }
    Merged {
        memory: out,
        added: new.count(),
        duplicates: new.duplicates,
    }
}

/// The mergeable entries of a daily log, with the `MEMORY.md` heading each goes under: list
/// items (with their continuation lines) and paragraphs under a heading not in [`DAY_ONLY`].
fn entries(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut kind: Option<String> = Some(NOTES.to_owned());
    let mut current: Option<String> = None;
    let flush = |current: &mut Option<String>, kind: &Option<String>, out: &mut Vec<(String, String)>| {
        if let (Some(entry), Some(kind)) = (current.take(), kind) {
            let entry = entry.split_whitespace().collect::<Vec<_>>().join(" ");
            if !entry.is_empty() {
                out.push((kind.clone(), entry));
            }
        }
    };
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            flush(&mut current, &kind, &mut out);
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(title) = heading(trimmed) {
            flush(&mut current, &kind, &mut out);
            kind = kind_of(title);
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut current, &kind, &mut out);
            continue;
        }
        match (entry_of(line), &mut current) {
            (Some(item), _) => {
                flush(&mut current, &kind, &mut out);
                current = Some(item);
            }
            (None, Some(entry)) => {
                entry.push(' ');
                entry.push_str(trimmed);
            }
            (None, None) => current = Some(trimmed.to_owned()),
        }
    }
    flush(&mut current, &kind, &mut out);
    out
}

/// The `MEMORY.md` heading the entries under the log heading `title` go to; `None` for a
/// day-only heading. A compaction's own heading (`Compaction of session …`) changes nothing
/// until its subheadings say what follows.
fn kind_of(title: &str) -> Option<String> {
    let lower = title.trim().to_lowercase();
    if DAY_ONLY.contains(&lower.as_str()) || lower.starts_with("compaction of session") {
        return None;
    }
    let kind = KINDS
        .iter()
        .find(|(_, feeds)| feeds.contains(&lower.as_str()))
        .map_or(NOTES, |(kind, _)| kind);
    Some(kind.to_owned())
}

/// The title of a Markdown heading line.
fn heading(trimmed: &str) -> Option<&str> {
    let hashes = trimmed.bytes().take_while(|b| *b == b'#').count();
    (1..=6)
        .contains(&hashes)
        .then(|| &trimmed[hashes..])
        .filter(|rest| rest.starts_with(' '))
        .map(str::trim)
}

/// The text of a list item line (`- x`, `* x`, `+ x`, `1. x`), without its marker.
fn entry_of(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    let rest = ["- ", "* ", "+ "]
        .iter()
        .find_map(|m| trimmed.strip_prefix(m))
        .or_else(|| {
            let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
            (digits > 0).then(|| trimmed[digits..].strip_prefix(". ")).flatten()
        })?;
    let rest = rest.trim();
    (!rest.is_empty()).then(|| rest.to_owned())
}

/// An entry as compared for duplicates: lower case, words only, without the provenance a
/// merge adds (`(from memory/…)`) or a compaction's `(resolved later)`.
fn normalized(entry: &str) -> String {
    let entry = match entry.rfind(" (from memory/") {
        Some(at) if entry.ends_with(')') => &entry[..at],
        _ => entry,
    };
    entry
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `memory` with `entries` appended as list items at the end of its `## kind` section
/// (created at the end of the file when missing).
fn insert_under(memory: &str, kind: &str, entries: &[String]) -> String {
    let items: String = entries.iter().map(|e| format!("- {e}\n")).collect();
    let lines: Vec<&str> = memory.split_inclusive('\n').collect();
    let start = lines.iter().position(|l| l.trim_end() == format!("## {kind}"));
    let Some(start) = start else {
        let mut out = memory.to_owned();
        if out.is_empty() {
            out.push_str("# MEMORY\n");
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!("\n## {kind}\n\n{items}"));
        return out;
    };
    // The section ends at the next heading of level 1 or 2; the items go after its last
    // non-blank line.
    let end = lines[start + 1..]
        .iter()
        .position(|l| heading(l.trim()).is_some() && !l.trim_start().starts_with("###"))
        .map_or(lines.len(), |i| start + 1 + i);
    let last = (start..end)
        .rev()
        .find(|i| !lines[*i].trim().is_empty())
        .unwrap_or(start);
    let mut out: String = lines[..=last].concat();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if last == start {
        out.push('\n');
    }
    out.push_str(&items);
    let rest = lines[last + 1..].concat();
    if !rest.is_empty() && !rest.starts_with('\n') {
        out.push('\n');
    }
    out.push_str(&rest);
    out
}

mod consolidate;

use consolidate::{fingerprint, provenance_of};

pub use consolidate::{Bullet, CONSOLIDATION_SYSTEM, Cited, consolidated, consolidation_prompt, parse_consolidation};

#[cfg(test)]
mod tests {
    use super::*;

    /// A daily log (the consolidation tests use it too).
    pub(super) fn log(path: &str, text: &str) -> DailyLog {
        DailyLog {
            path: path.into(),
            text: text.into(),
        }
    }

    const COMPACTION_NOTE: &str = "\n## Compaction of session `s1` at 2026-11-23T10:00:00Z\n\n### Goal\n\n- fix the login bug\n\n### Preferences and constraints\n\n- Use pytest, never unittest\n\n### Lessons from failures\n\n- cargo build failed: missing feature flag (resolved later)\n\n### Files modified\n\n- src/auth.rs\n";

    #[test]
    fn lasting_entries_go_under_their_heading_and_the_days_work_stays_in_the_log() {
        let merged = merge("", &[log("memory/2026-11-23.md", COMPACTION_NOTE)]);
        assert_eq!(
            merged.memory,
            "# MEMORY\n\n## Preferences and constraints\n\n- Use pytest, never unittest (from memory/2026-11-23.md)\n\n## Lessons from failures\n\n- cargo build failed: missing feature flag (resolved later) (from memory/2026-11-23.md)\n"
        );
        assert_eq!((merged.added, merged.duplicates), (2, 0));
    }

    #[test]
    fn a_second_merge_of_the_same_logs_adds_nothing() {
        let logs = [log("memory/2026-11-23.md", COMPACTION_NOTE)];
        let once = merge("", &logs);
        let twice = merge(&once.memory, &logs);
        assert_eq!(twice.memory, once.memory);
        assert_eq!((twice.added, twice.duplicates), (0, 2));
    }

    #[test]
    fn duplicates_across_days_and_wording_in_case_and_punctuation_are_merged_once() {
        let logs = [
            log("memory/2026-11-22.md", "### Preferences\n\n- Prefers tabs.\n"),
            log(
                "memory/2026-11-23.md",
                "### Preferences and constraints\n\n- prefers TABS\n- answers in French\n",
            ),
        ];
        let merged = merge("", &logs);
        assert_eq!((merged.added, merged.duplicates), (2, 1));
        assert!(
            merged.memory.contains(
                "- Prefers tabs. (from memory/2026-11-22.md)\n- answers in French (from memory/2026-11-23.md)\n"
            ),
            "{}",
            merged.memory
        );
    }

    #[test]
    fn entries_land_at_the_end_of_an_existing_section_before_the_next_one() {
        let memory = "# MEMORY\n\n## Key decisions\n\n- chose SQLite\n\n## Notes\n\n- the CI box has 2 cores\n";
        let merged = merge(
            memory,
            &[log(
                "memory/2026-11-24.md",
                "## Decisions\n- JWT over sessions\n\n## Ideas\n\nFree text note\nspanning two lines.\n",
            )],
        );
        assert_eq!(
            merged.memory,
            "# MEMORY\n\n## Key decisions\n\n- chose SQLite\n- JWT over sessions (from memory/2026-11-24.md)\n\n## Notes\n\n- the CI box has 2 cores\n- Free text note spanning two lines. (from memory/2026-11-24.md)\n"
        );
    }

    #[test]
    fn a_users_own_notes_without_headings_are_notes_and_code_is_left_alone() {
        let merged = merge(
            "",
            &[log(
                "memory/2026-11-24.md",
                "- deploy with `make ship`\n```\n- not an entry\n```\n",
            )],
        );
        assert_eq!(merged.added, 1);
        assert!(
            merged
                .memory
                .contains("## Notes\n\n- deploy with `make ship` (from memory/2026-11-24.md)\n")
        );
        assert!(!merged.memory.contains("not an entry"));
    }
}
