//! The window at a glance, like Claude Code's `/context`: a bar of the window split into what
//! fills it (system, sections, tools, summary, messages by user / assistant / tool results),
//! the free space and the compaction buffer, with a legend line per part. The numbers are of
//! the request as sent: an offloaded tool result counts as its excerpt.

use std::io::{self, Write};

use satchel_protocol::InspectResult;

use super::offloads::Savings;
use super::{paint, size};

/// Cells of the bar.
pub(super) const BAR_WIDTH: usize = 60;

/// What a session shows before its first request since the daemon started.
pub(super) const NOT_LOADED: &str = "not loaded since the daemon started; its numbers come with its next call";

/// `n` tokens in `k` units: `950`, `2.1k`, `12.3k`, `128k`.
pub(super) fn k(n: u64) -> String {
    if n < 1000 {
        return n.to_string();
    }
    let text = format!("{:.1}", n as f64 / 1000.0);
    format!("{}k", text.strip_suffix(".0").unwrap_or(&text))
}

/// One part of the window (a blank glyph: a subtotal line of the legend, not in the bar).
struct Part {
    glyph: char,
    name: &'static str,
    tokens: u64,
    colour: &'static str,
    note: Option<String>,
}

/// The parts of the window, in bar order.
fn parts(r: &InspectResult) -> Vec<Part> {
    let t = &r.tokens;
    let m = &r.message_tokens;
    // The assembled prompt, as counted for the request; the rest of `system` is the client's
    // own system prompt and system-role messages.
    let sections = r.prompt.as_ref().map_or(0, |p| p.estimated_tokens.min(t.system));
    let used = t.system + t.tools + t.summary + t.messages;
    let buffer = t.limit.saturating_sub(t.threshold.max(used));
    let free = t.limit.saturating_sub(used + buffer);
    let part = |glyph, name, tokens, colour| Part {
        glyph,
        name,
        tokens,
        colour,
        note: None,
    };
    vec![
        part('S', "system", t.system - sections, "35"),
        part('P', "sections", sections, "36"),
        part('T', "tools", t.tools, "34"),
        part('C', "summary", t.summary, "33"),
        Part {
            note: Some(format!("{} compactable, {} recent", k(t.compactable), k(t.reserved))),
            ..part(' ', "messages", t.messages, "0")
        },
        part('U', "  user", m.user, "32"),
        part('A', "  assistant", m.assistant, "92"),
        Part {
            note: tool_results_note(r),
            ..part('R', "  tool results", m.tool_results, "96")
        },
        part('.', "free space", free, "2"),
        Part {
            note: Some(format!("compacts at {}", k(t.threshold))),
            ..part('~', "compaction buffer", buffer, "90")
        },
    ]
}

/// What the tool results cost as sent against their full texts, when some were offloaded.
fn tool_results_note(r: &InspectResult) -> Option<String> {
    let savings = Savings::of(&r.offloaded);
    (savings.results > 0).then(|| {
        format!(
            "{} of them offloaded: {} sent of {}, {} saved",
            savings.results,
            size(savings.sent),
            size(savings.full),
            size(savings.saved())
        )
    })
}

/// Cells of each part: proportional (largest remainder), at least one for a part that has
/// tokens, `width` in all.
fn cells(tokens: &[u64], width: usize) -> Vec<usize> {
    let whole: u64 = tokens.iter().sum();
    if whole == 0 {
        return vec![0; tokens.len()];
    }
    let exact: Vec<f64> = tokens.iter().map(|&t| t as f64 * width as f64 / whole as f64).collect();
    let mut cells: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    // The remainders add up to fewer cells than there are parts.
    let left = width.saturating_sub(cells.iter().sum());
    for &i in order.iter().take(left) {
        cells[i] += 1;
    }
    for (i, &t) in tokens.iter().enumerate() {
        if t > 0 && cells[i] == 0 {
            let largest = (0..cells.len()).max_by_key(|&j| cells[j]).expect("parts");
            if cells[largest] > 1 {
                cells[largest] -= 1;
                cells[i] = 1;
            }
        }
    }
    cells
}

/// Writes the bar and its legend.
pub(super) fn write_window(out: &mut impl Write, r: &InspectResult, colour: bool) -> io::Result<()> {
    let t = &r.tokens;
    if !r.loaded {
        return writeln!(out, "window   {NOT_LOADED}");
    }
    writeln!(
        out,
        "window   {} / {} tokens used ({:.1}%)",
        k(t.total),
        k(t.limit),
        100.0 * t.total as f64 / t.limit.max(1) as f64
    )?;
    let parts = parts(r);
    // A subtotal's tokens are in its parts already.
    let in_bar = |p: &Part| if p.glyph == ' ' { 0 } else { p.tokens };
    let widths = cells(&parts.iter().map(in_bar).collect::<Vec<_>>(), BAR_WIDTH);
    let mut bar = String::new();
    for (part, &n) in parts.iter().zip(&widths) {
        if n > 0 {
            bar.push_str(&paint(&part.glyph.to_string().repeat(n), part.colour, colour));
        }
    }
    writeln!(out, "  [{bar}]")?;
    let whole = t.limit.max(1);
    for part in &parts {
        let share = format!("{:.1}%", 100.0 * part.tokens as f64 / whole as f64);
        let glyph = match part.glyph {
            ' ' => " ".to_owned(),
            glyph => paint(&glyph.to_string(), part.colour, colour),
        };
        let line = format!("  {glyph} {:<18} {:>7} {:>7}", part.name, k(part.tokens), share);
        match &part.note {
            Some(note) => writeln!(out, "{line}   ({note})")?,
            None => writeln!(out, "{line}")?,
        }
    }
    writeln!(
        out,
        "  (counted as sent: an offloaded tool result counts as its excerpt, not its full text)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::inspect::fixture;

    fn window(r: &InspectResult, colour: bool) -> String {
        fixture::render(|out| write_window(out, r, colour))
    }

    fn check(tokens: &[u64], width: usize, expected: &[usize]) {
        assert_eq!(cells(tokens, width), expected);
    }

    #[test]
    fn k_units() {
        for (n, expected) in [
            (0, "0"),
            (950, "950"),
            (1000, "1k"),
            (2100, "2.1k"),
            (12_345, "12.3k"),
            (128_000, "128k"),
        ] {
            assert_eq!(k(n), expected);
        }
    }

    #[test]
    fn cells_are_proportional_fill_the_width_and_show_small_parts() {
        check(&[50, 50], 10, &[5, 5]);
        check(&[1, 2, 997], 10, &[1, 1, 8]);
        check(&[0, 0, 100], 6, &[0, 0, 6]);
        check(&[1, 1, 1], 10, &[4, 3, 3]);
        check(&[0, 0], 4, &[0, 0]);
    }

    #[test]
    fn window_bar_and_legend() {
        let text = window(&fixture::result(), false);
        assert!(!text.contains('\x1b'), "{text}");
        let bar = text.lines().nth(1).unwrap();
        assert_eq!(bar.chars().count(), BAR_WIDTH + 4, "{bar}");
        for name in [
            "system",
            "sections",
            "tools",
            "summary",
            "messages",
            "free space",
            "compaction buffer",
        ] {
            assert!(text.lines().any(|l| l[4..].starts_with(name)), "{name}: {text}");
        }
        // The messages split by role, adding up to the messages zone.
        let m = fixture::result().message_tokens;
        assert_eq!(m.user + m.assistant + m.tool_results, 6200);
        for (glyph, role) in [('U', "user"), ('A', "assistant"), ('R', "tool results")] {
            let prefix = format!("  {glyph}   {role} ");
            assert!(text.lines().any(|l| l.starts_with(&prefix)), "{role}: {text}");
        }
        assert!(
            text.contains("(1 of them offloaded: 3.4 KB sent of 52 KB, 48.6 KB saved)"),
            "{text}"
        );
        insta::assert_snapshot!("window", text);
    }

    #[test]
    fn window_in_colour() {
        let text = window(&fixture::result(), true);
        assert!(text.contains("\x1b[32mU\x1b[0m\x1b[92mA\x1b[0m\x1b[96mR"), "{text}");
    }

    #[test]
    fn window_of_a_session_not_loaded_since_the_daemon_started() {
        let json = fixture::not_loaded_json();
        let r: InspectResult = serde_json::from_value(json).unwrap();
        assert_eq!(window(&r, false), format!("window   {NOT_LOADED}\n"));
    }
}
