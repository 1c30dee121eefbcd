//! The system prompt's sections: what each source type costs, one row per section, and one
//! section in full (`/context detail KEY`).

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::bail;
use satchel_protocol::{InspectResult, SectionDetail, SectionReport};

/// Longest evidence shown in the section table (the detail view shows all of it).
const EVIDENCE_WIDTH: usize = 56;

/// What the sections of one source type cost.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SourceCost {
    pub source_type: String,
    pub sections: usize,
    pub chars: usize,
    pub tokens: u64,
}

/// The cost of each source type (final characters and estimated tokens summed over its
/// sections), costliest first.
pub(super) fn injection_cost(sections: &[SectionReport]) -> Vec<SourceCost> {
    let mut by_type: BTreeMap<&str, SourceCost> = BTreeMap::new();
    for s in sections {
        let cost = by_type.entry(&s.source_type).or_insert_with(|| SourceCost {
            source_type: s.source_type.clone(),
            sections: 0,
            chars: 0,
            tokens: 0,
        });
        cost.sections += 1;
        cost.chars += s.final_chars;
        cost.tokens += s.estimated_tokens;
    }
    let mut costs: Vec<SourceCost> = by_type.into_values().collect();
    // Stable: equal costs stay in name order.
    costs.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(b.chars.cmp(&a.chars)));
    costs
}

/// The table of [`injection_cost`], with a total row.
pub(super) fn write_injection_cost(out: &mut impl Write, sections: &[SectionReport]) -> io::Result<()> {
    let costs = injection_cost(sections);
    let total_chars: usize = costs.iter().map(|c| c.chars).sum();
    let total_tokens: u64 = costs.iter().map(|c| c.tokens).sum();
    let width = costs
        .iter()
        .map(|c| c.source_type.chars().count())
        .chain(["source type".len(), "total".len()])
        .max()
        .unwrap_or(0);
    writeln!(out, "\ninjection cost by source type")?;
    writeln!(
        out,
        "  {:<width$}  {:>8}  {:>8}  {:>7}  {:>6}",
        "source type", "sections", "chars", "tokens", "share"
    )?;
    for c in &costs {
        writeln!(
            out,
            "  {:<width$}  {:>8}  {:>8}  {:>7}  {:>6}",
            c.source_type,
            c.sections,
            c.chars,
            c.tokens,
            super::share(c.chars as u64, total_chars as u64)
        )?;
    }
    writeln!(
        out,
        "  {:<width$}  {:>8}  {:>8}  {:>7}",
        "total",
        sections.len(),
        total_chars,
        total_tokens
    )
}

/// `base->final` when the focus boosted (or lowered) the priority, else the priority.
fn priority(s: &SectionReport) -> String {
    if s.priority == s.base_priority {
        s.priority.to_string()
    } else {
        format!("{}->{}", s.base_priority, s.priority)
    }
}

/// `included`, `truncated` (cut to fit) or `dropped` (left out).
fn status(s: &SectionReport) -> &'static str {
    match (s.included, s.truncated) {
        (false, _) => "dropped",
        (true, true) => "truncated",
        (true, false) => "included",
    }
}

/// The evidence on one line without the `priority=` the priority column shows, cut to
/// `width` characters.
fn abbreviate(evidence: &[String], width: usize) -> String {
    let joined = evidence
        .iter()
        .filter(|e| !e.starts_with("priority="))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if joined.chars().count() <= width {
        return joined;
    }
    let mut cut: String = joined.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// One row per section, in prompt order.
pub(super) fn write_section_table(out: &mut impl Write, sections: &[SectionReport]) -> io::Result<()> {
    writeln!(
        out,
        "\nsections (prompt order; priority base->final when boosted; P = protected)"
    )?;
    if sections.is_empty() {
        return writeln!(out, "  none");
    }
    let key_width = sections
        .iter()
        .map(|s| s.key.chars().count())
        .chain(["key".len()])
        .max()
        .unwrap_or(0);
    let source_width = sections
        .iter()
        .map(|s| s.source_type.chars().count())
        .chain(["source".len()])
        .max()
        .unwrap_or(0);
    let priorities: Vec<String> = sections.iter().map(priority).collect();
    let priority_width = priorities
        .iter()
        .map(String::len)
        .chain(["priority".len()])
        .max()
        .unwrap_or(0);
    let row = |out: &mut dyn Write, cells: [&str; 9]| {
        let [
            key,
            source,
            priority,
            protected,
            original,
            final_chars,
            tokens,
            status,
            evidence,
        ] = cells;
        let line = format!(
            "  {key:<key_width$}  {source:<source_width$}  {priority:>priority_width$}  {protected:<1}  \
             {original:>8}  {final_chars:>8}  {tokens:>6}  {status:<9}  {evidence}"
        );
        writeln!(out, "{}", line.trim_end())
    };
    row(
        out,
        [
            "key", "source", "priority", "P", "original", "final", "tokens", "status", "evidence",
        ],
    )?;
    for (s, priority) in sections.iter().zip(&priorities) {
        row(
            out,
            [
                &s.key,
                &s.source_type,
                priority,
                if s.protected { "P" } else { "" },
                &s.original_chars.to_string(),
                &s.final_chars.to_string(),
                &s.estimated_tokens.to_string(),
                status(s),
                &abbreviate(&s.evidence, EVIDENCE_WIDTH),
            ],
        )?;
    }
    Ok(())
}

/// The section `key` of the result of `context.inspect {detail_key: key}`, or an error that
/// lists the keys the last request had.
pub(super) fn find_detail<'a>(r: &'a InspectResult, key: &str) -> anyhow::Result<&'a SectionDetail> {
    if let Some(detail) = r.detail.as_ref().filter(|d| d.report.key == key) {
        return Ok(detail);
    }
    check_known(r, key)?;
    bail!("the daemon did not return section {key:?} in full (is it older than this satchel?)")
}

/// An error that lists the keys the last request had unless `key` is one of them.
fn check_known(r: &InspectResult, key: &str) -> anyhow::Result<()> {
    let known: Vec<&str> = r
        .prompt
        .iter()
        .flat_map(|p| &p.sections)
        .map(|s| s.key.as_str())
        .collect();
    if known.is_empty() {
        bail!(
            "no section {key:?}: session {} has no system prompt sections yet (they come with \
             context.prepare's `sections`)",
            r.session_id
        );
    }
    if !known.contains(&key) {
        bail!(
            "unknown section {key:?}: the sections of session {} are {}",
            r.session_id,
            known.join(", ")
        );
    }
    Ok(())
}

/// One section in full: every field of its report, then its content as it went into the
/// prompt, verbatim.
pub(super) fn write_section_detail(out: &mut impl Write, d: &SectionDetail) -> io::Result<()> {
    let s = &d.report;
    let yes = |b: bool| if b { "yes" } else { "no" };
    writeln!(out, "section {}", s.key)?;
    writeln!(out, "  source type  {}", s.source_type)?;
    writeln!(out, "  scope        {}", s.scope_type)?;
    writeln!(out, "  reason       {}", s.inclusion_reason)?;
    if s.priority == s.base_priority {
        writeln!(out, "  priority     {}", s.priority)?;
    } else {
        writeln!(out, "  priority     {} (sent as {})", s.priority, s.base_priority)?;
    }
    writeln!(out, "  protected    {}", yes(s.protected))?;
    writeln!(out, "  included     {}", yes(s.included))?;
    writeln!(out, "  truncated    {}", yes(s.truncated))?;
    writeln!(
        out,
        "  chars        {} sent, {} in the prompt (~{} tokens)",
        s.original_chars, s.final_chars, s.estimated_tokens
    )?;
    match s.evidence.split_first() {
        None => writeln!(out, "  evidence     -")?,
        Some((first, rest)) => {
            writeln!(out, "  evidence     {first}")?;
            for item in rest {
                writeln!(out, "               {item}")?;
            }
        }
    }
    if !s.included {
        return writeln!(
            out,
            "--- dropped: not in the prompt (the client sent {} chars) ---",
            s.original_chars
        );
    }
    if s.truncated {
        writeln!(
            out,
            "--- content, truncated to {} of {} chars ---",
            s.final_chars, s.original_chars
        )?;
    } else {
        writeln!(out, "--- content, {} chars ---", s.final_chars)?;
    }
    out.write_all(d.content.as_bytes())?;
    if !d.content.ends_with('\n') {
        writeln!(out)?;
    }
    writeln!(out, "--- end of {} ---", s.key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cli::inspect::fixture;

    /// The fixture with `detail` set to the section `key` (as `context.inspect {detail_key}`
    /// returns it), content and original content as given.
    fn with_detail(key: &str, content: &str, original: &str) -> InspectResult {
        let mut json = fixture::json();
        let mut detail = json["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .expect("a section of the fixture")
            .clone();
        detail["content"] = json!(content);
        detail["original_content"] = json!(original);
        json["detail"] = detail;
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn inspect_injection_cost_sums_per_source_type_costliest_first() {
        let r = fixture::result();
        let costs = injection_cost(&r.prompt.unwrap().sections);
        let rows: Vec<(&str, usize, usize, u64)> = costs
            .iter()
            .map(|c| (c.source_type.as_str(), c.sections, c.chars, c.tokens))
            .collect();
        assert_eq!(
            rows,
            [
                ("journal", 1, 4000, 1000),
                ("rules", 2, 2800, 700),
                ("memory", 1, 1200, 300),
                ("task-focus", 1, 400, 100),
                ("git", 1, 0, 0),
            ]
        );
    }

    #[test]
    fn inspect_section_tables() {
        let r = fixture::result();
        let sections = &r.prompt.as_ref().unwrap().sections;
        let text = fixture::render(|out| {
            write_injection_cost(out, sections)?;
            write_section_table(out, sections)
        });
        let row = |first: &str| -> Vec<&str> {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(first))
                .unwrap_or_else(|| panic!("no row {first}: {text}"))
                .split_whitespace()
                .collect()
        };
        assert_eq!(row("rules")[..5], ["rules", "2", "2800", "700", "33.3%"], "{text}");
        assert_eq!(row("total"), ["total", "6", "8400", "2100"], "{text}");
        assert_eq!(
            row("rules:streaming"),
            [
                "rules:streaming",
                "rules",
                "88->100",
                "2000",
                "2000",
                "500",
                "included",
                "files=src/agent/StreamingAgentLoop.java,",
                "boost=+12"
            ],
            "{text}"
        );
        assert_eq!(
            row("memory:soul"),
            [
                "memory:soul",
                "memory",
                "100",
                "P",
                "1200",
                "1200",
                "300",
                "included",
                "tier=Soul"
            ]
        );
        assert_eq!(row("memory:journal")[6], "truncated");
        assert_eq!(row("git:status")[6], "dropped");
        assert_eq!(row("git:status").len(), 7, "its only evidence is its priority: {text}");
        assert_eq!(
            abbreviate(&["priority=1".into(), "a".repeat(30), "b".repeat(30)], 40),
            format!("{}, {}…", "a".repeat(30), "b".repeat(7))
        );
        insta::assert_snapshot!("section_tables", text);
    }

    #[test]
    fn inspect_section_detail_prints_the_content_verbatim() {
        let content = "## Rules\n\n  * keep `StreamingAgentLoop` \u{e9}\t tabs\n\nno newline at the end";
        let r = with_detail("rules:streaming", content, content);
        let detail = find_detail(&r, "rules:streaming").unwrap();
        let text = fixture::render(|out| write_section_detail(out, detail));
        assert!(text.contains(&format!(
            "--- content, 2000 chars ---\n{content}\n--- end of rules:streaming ---"
        )));
        assert!(text.contains("  priority     100 (sent as 88)"), "{text}");
        assert!(
            text.contains("  reason       sent by the client as rules:streaming"),
            "{text}"
        );
        assert!(text.contains("  evidence     priority=88\n               files=src/agent/StreamingAgentLoop.java\n"));
        insta::assert_snapshot!("section_detail", text);
    }

    #[test]
    fn inspect_section_detail_of_a_truncated_section_gives_the_original_length() {
        let r = with_detail("memory:journal", "day 1: started\n", "day 1: started\nday 2: ...\n");
        let text = fixture::render(|out| write_section_detail(out, find_detail(&r, "memory:journal").unwrap()));
        assert!(
            text.contains(
                "--- content, truncated to 4000 of 6000 chars ---\nday 1: started\n--- end of memory:journal ---"
            ),
            "{text}"
        );
        let r = with_detail("git:status", "", "M src/lib.rs\n");
        let text = fixture::render(|out| write_section_detail(out, find_detail(&r, "git:status").unwrap()));
        assert!(
            text.contains("--- dropped: not in the prompt (the client sent 900 chars) ---"),
            "{text}"
        );
    }

    #[test]
    fn inspect_unknown_section_lists_the_known_keys() {
        let r = fixture::result();
        let error = find_detail(&r, "memory:nope").unwrap_err().to_string();
        assert_eq!(
            error,
            "unknown section \"memory:nope\": the sections of session chat are memory:soul, rules:streaming, \
             memory:journal, rules:style, git:status, task-focus"
        );
        // A detail of another key does not answer for this one.
        let r = with_detail("memory:soul", "soul", "soul");
        assert!(
            find_detail(&r, "memory:nope")
                .unwrap_err()
                .to_string()
                .contains("unknown section")
        );
        // A known key the daemon did not send in full.
        let error = find_detail(&fixture::result(), "git:status").unwrap_err().to_string();
        assert!(error.contains("did not return section \"git:status\""), "{error}");
        assert!(check_known(&fixture::result(), "git:status").is_ok());
    }

    #[test]
    fn inspect_section_before_any_prompt() {
        let mut json = fixture::json();
        json["sections"] = json!([]);
        let r: InspectResult = serde_json::from_value(json).unwrap();
        let error = find_detail(&r, "memory:soul").unwrap_err().to_string();
        assert!(error.contains("has no system prompt sections yet"), "{error}");
    }
}
