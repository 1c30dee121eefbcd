//! A candidate's prompt section.

use satchel_protocol::{Candidate, CandidateEvidence};

/// Longest evidence part (failure, fix, note) shown in the prompt, in characters.
pub const EVIDENCE_CHARS: usize = 120;

/// One candidate as its own prompt section (the engine assembles one section per candidate, so
/// the request focus boosts and the budget cuts each on its own): `[id] text`, its latest
/// evidence, and the files and symbols it applies to, which the focus boost matches.
pub fn section_text(c: &Candidate) -> String {
    let mut out = format!("Learned [{}]: {}", c.id, one_line(&c.text, usize::MAX));
    if let Some(line) = evidence_line(c) {
        out.push_str(&format!("\n  {line}"));
    }
    let scope: Vec<String> = [("files", &c.files), ("symbols", &c.symbols)]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(name, list)| format!("{name} {}", list.join(", ")))
        .collect();
    if !scope.is_empty() {
        out.push_str(&format!("\n  applies to: {}", scope.join("; ")));
    }
    out
}

fn evidence_line(c: &Candidate) -> Option<String> {
    let part = |s: &Option<String>| {
        s.as_deref()
            .map(|s| one_line(s, EVIDENCE_CHARS))
            .filter(|s| !s.is_empty())
    };
    let latest = |f: &dyn Fn(&CandidateEvidence) -> bool| c.evidence.iter().rev().find(|e| f(e));
    if let Some(e) = latest(&|e| part(&e.failure).is_some() || part(&e.fix).is_some()) {
        return Some(match (part(&e.failure), part(&e.fix)) {
            (Some(failure), Some(fix)) => format!("after: {failure} → fix: {fix}"),
            (Some(failure), None) => format!("after: {failure}"),
            (_, fix) => format!("fix: {}", fix.unwrap_or_default()),
        });
    }
    latest(&|e| part(&e.note).is_some())
        .and_then(|e| part(&e.note))
        .map(|n| format!("note: {n}"))
}

/// Whitespace collapsed to single spaces, cut at `max` characters with `…`.
fn one_line(s: &str, max: usize) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        return joined;
    }
    let mut cut: String = joined.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
