//! Tests of the system prompt assembly: `check_*` helpers render a result compactly and
//! compare it with its snapshot in `snapshots/` (insta; run with `INSTA_UPDATE=always` to
//! write new ones, then read the diff), plus plain asserts of what each rule guarantees and
//! property tests of the invariants.

mod assemble;
mod build;
mod focus;
mod props;

use std::fmt::Write;

use satchel_protocol::PromptSection;

use super::truncate::SEPARATOR;
use super::*;

/// A client section of `content` at `priority`.
fn sec(key: &str, priority: i64, content: impl Into<String>) -> PromptSection {
    PromptSection {
        key: key.to_owned(),
        content: content.into(),
        priority,
        protected: false,
        source_type: None,
        scope: None,
        reason: None,
        paths: Vec::new(),
    }
}

fn protected(mut s: PromptSection) -> PromptSection {
    s.protected = true;
    s
}

fn typed(mut s: PromptSection, source_type: &str) -> PromptSection {
    s.source_type = Some(source_type.to_owned());
    s
}

/// Exactly `n` characters that say which section they are and where its start and end are:
/// `tag< abcdefghij… >tag`.
fn body(tag: &str, n: usize) -> String {
    let (open, close) = (format!("{tag}< "), format!(" >{tag}"));
    let fill = n.saturating_sub(open.len() + close.len());
    let mut s = open;
    s.extend(('a'..='j').cycle().take(fill));
    s.push_str(&close);
    s.chars().take(n).collect()
}

fn budget(per_section: usize, total: usize) -> SystemPromptBudget {
    SystemPromptBudget {
        max_per_section_chars: per_section,
        max_total_chars: total,
    }
}

/// A text shown in one line: whole when short, else its first and last characters around
/// `…`, with the truncation marker kept whole so the snapshot shows what the cut says.
fn brief(text: &str) -> String {
    let ends = |s: &str, n: usize| -> (String, String) {
        let chars: Vec<char> = s.chars().collect();
        if chars.len() <= 2 * n + 1 {
            return (s.to_owned(), String::new());
        }
        let head: String = chars[..n].iter().collect();
        let tail: String = chars[chars.len() - n..].iter().collect();
        (head, tail)
    };
    let show = |s: &str| {
        let (head, tail) = ends(s, 12);
        let out = if tail.is_empty() {
            head
        } else {
            format!("{head}…{tail}")
        };
        out.replace('\n', "⏎")
    };
    match text.find("<!-- [TRUNCATED]") {
        Some(at) => {
            let end = text[at..].find("-->").map_or(text.len(), |e| at + e + 3);
            format!("{} {} {}", show(&text[..at]), &text[at..end], show(&text[end..]))
        }
        None => show(text),
    }
}

/// One line per section: `=` whole, `~` cut, `x` dropped, `.` empty; key, priority (base),
/// `!` when protected, chars before → after, tokens; then the text in brief.
fn render(assembled: &Assembled<'_>) -> String {
    let mut out = format!(
        "total {} chars; cut {:?}; over budget: {}\n",
        assembled.total_chars,
        assembled.truncated_section_keys,
        assembled.over_budget.as_deref().unwrap_or("no")
    );
    for s in &assembled.sections {
        let r = &s.report;
        let mark = match (r.included, r.truncated) {
            (true, false) => '=',
            (true, true) => '~',
            (false, true) => 'x',
            (false, false) => '.',
        };
        let _ = writeln!(
            out,
            "{mark} {} p{} (base {}){} {} -> {} chars, {} tokens [{}]",
            r.key,
            r.priority,
            r.base_priority,
            if r.protected { " !" } else { "" },
            r.original_chars,
            r.final_chars,
            r.estimated_tokens,
            r.evidence.join("; ")
        );
        if r.included {
            let _ = writeln!(out, "    {}", brief(s.content()));
        }
    }
    out
}

/// Builds the prompt of `sections` (no `system`) for `query` under `budget`, checks the
/// invariants every result keeps, and returns it.
fn built<'a>(sections: &'a [PromptSection], query: Option<&'a str>, budget: SystemPromptBudget) -> BuiltPrompt<'a> {
    let built = super::build(PromptInput {
        system: None,
        base_message: None,
        sections,
        query,
        budget,
        task_focus_section: true,
    })
    .expect("valid sections");
    invariants(&built.assembled, budget);
    built
}

/// Builds `sections` and compares the rendering with the snapshot `name`.
fn check(name: &str, sections: &[PromptSection], budget: SystemPromptBudget) {
    let built = built(sections, None, budget);
    insta::assert_snapshot!(name, render(&built.assembled));
}

/// What holds for every assembly: the prompt is the included texts joined, as long as
/// reported, within budget unless protected sections alone exceed it, and every text is the
/// original or a head and tail of it around a truthful marker.
fn invariants(a: &Assembled<'_>, budget: SystemPromptBudget) {
    let included: Vec<&str> = a
        .sections
        .iter()
        .filter(|s| s.report.included)
        .map(AssembledSection::content)
        .collect();
    assert_eq!(a.prompt, included.join("\n\n"));
    assert_eq!(a.total_chars, a.prompt.chars().count());
    let whole_chars: Vec<usize> = a
        .sections
        .iter()
        .filter(|s| kept_whole(&s.report) && s.report.included)
        .map(|s| s.report.final_chars)
        .collect();
    let whole_total = whole_chars.iter().sum::<usize>() + 2 * whole_chars.len().saturating_sub(1);
    assert_eq!(a.over_budget.is_some(), whole_total > budget.max_total_chars);
    if a.over_budget.is_none() {
        assert!(
            a.total_chars <= budget.max_total_chars,
            "{} > {}",
            a.total_chars,
            budget.max_total_chars
        );
    }
    for s in &a.sections {
        let r = &s.report;
        assert_eq!(r.original_chars, s.original.chars().count());
        assert_eq!(r.final_chars, s.content().chars().count());
        assert_eq!(r.estimated_tokens, r.final_chars.div_ceil(4) as u64);
        assert!(!(kept_whole(r) && r.truncated), "{} is never cut, and was", r.key);
        assert_eq!(r.included, r.final_chars > 0);
        if !r.truncated {
            assert_eq!(s.content(), if r.included { &*s.original } else { "" });
        } else if r.included {
            assert!(r.final_chars <= budget.max_per_section_chars);
            assert_is_cut_of(s.content(), &s.original);
        }
    }
    let cut: Vec<&str> = a
        .sections
        .iter()
        .filter(|s| s.report.truncated)
        .map(|s| s.report.key.as_str())
        .collect();
    assert_eq!(a.truncated_section_keys, cut);
}

/// Whether the assembly must keep the section whole: it is protected, or the client's own
/// system prompt (`system`, `system:N`).
fn kept_whole(report: &satchel_protocol::SectionReport) -> bool {
    report.protected || (report.source_type == crate::prompt::SYSTEM_SOURCE && report.key.starts_with("system"))
}

/// `cut` is a head of `original`, the marker stating the original length and the head and
/// tail kept, and a tail of `original`. The marker is found by its numbers, so an original
/// that itself contains marker-like text cannot fool the check.
fn assert_is_cut_of(cut: &str, original: &str) {
    let chars: Vec<char> = original.chars().collect();
    let n = chars.len();
    let lead = format!("{SEPARATOR}<!-- [TRUNCATED] Original: {n} chars, showing first ");
    let number = |s: &str| -> Option<(usize, usize)> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        Some((s[..digits].parse().ok()?, digits))
    };
    let found = cut.match_indices(&lead).any(|(at, _)| {
        let rest = &cut[at + lead.len()..];
        let Some((head, used)) = number(rest) else { return false };
        let Some(rest) = rest[used..].strip_prefix(" + last ") else {
            return false;
        };
        let Some((tail, _)) = number(rest) else { return false };
        if head + tail > n || head + tail < truncate::MIN_KEPT_CHARS {
            return false;
        }
        let expected: String = chars[..head]
            .iter()
            .copied()
            .chain(SEPARATOR.chars())
            .chain(truncate::marker(n, head, tail).chars())
            .chain(SEPARATOR.chars())
            .chain(chars[n - tail..].iter().copied())
            .collect();
        cut == expected
    });
    assert!(found, "{cut:?} is not a head and tail of {original:?}");
}
