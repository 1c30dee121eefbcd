//! The list view (`/context list`): the window, the monitor, the zones, compactions, offloaded
//! results and, once a request had sections, the system prompt's assembly.

use std::io::{self, Write};

use satchel_protocol::{
    Calibration, ContextMonitor, InspectResult, PinInfo, PinKind, PromptAssembly, RequestFocus, SessionOrigin,
};
use serde_json::{Map, Value};

use super::window::{NOT_LOADED, k, write_window};
use super::{offloads, plural, pressure_label, sections, share};

/// How to print the list view.
pub(super) struct ListOptions<'a> {
    /// ANSI colours (stdout is a terminal and `NO_COLOR` is not set).
    pub colour: bool,
    /// The `--query` the sections were assembled for, if any.
    pub query: Option<&'a str>,
}

/// Writes the list view of `r`.
pub(super) fn write_list(out: &mut impl Write, r: &InspectResult, options: &ListOptions) -> io::Result<()> {
    writeln!(
        out,
        "session {} ({}): {} live, {} archived",
        r.session_id,
        r.format
            .map_or("plain text so far: openai or anthropic".to_owned(), |f| {
                format!("{f:?}").to_lowercase()
            }),
        plural(r.messages as u64, "message"),
        r.archived_messages
    )?;
    writeln!(out, "config   {}", overrides(&r.config_overrides))?;
    if let Some(origin) = &r.origin {
        writeln!(out, "{}", origin_line(origin))?;
    }
    if !r.loaded {
        writeln!(out, "context  {NOT_LOADED}")?;
    } else {
        write_numbers(out, r, options.colour)?;
    }
    let saved: u64 = r
        .compactions
        .iter()
        .map(|c| c.tokens_before.saturating_sub(c.tokens_after))
        .sum();
    writeln!(
        out,
        "\ncompactions {} (tokens saved {}), summary budget {} tokens",
        r.compactions.len(),
        k(saved),
        r.summary_budget_tokens
    )?;
    for (n, c) in r.compactions.iter().enumerate() {
        let runs: Vec<String> = c
            .archive
            .iter()
            .chain(&c.more_archive)
            .map(|a| format!("{} lines {}-{}", a.file, a.start_line, a.end_line))
            .collect();
        let archive = if runs.is_empty() {
            "not archived".to_owned()
        } else {
            runs.join(" + ")
        };
        writeln!(
            out,
            "  compaction:{n:<3} {}  {:>13}  {:>6} -> {:>6} tokens  {}{}  [{}]",
            c.at,
            plural(c.messages as u64, "message"),
            k(c.tokens_before),
            k(c.tokens_after),
            archive,
            if c.manual { "  manual" } else { "" },
            c.summarizer
        )?;
    }
    offloads::write_offloads(out, &r.offloaded, &r.session_id)?;
    write_pins(out, &r.pins)?;
    if !r.rejected_candidates.is_empty() {
        let lines: Vec<String> = r
            .rejected_candidates
            .iter()
            .map(|c| format!("line {}", c.line))
            .collect();
        writeln!(
            out,
            "\ncandidate store: {} skipped and never used ({}; the first: {})",
            plural(r.rejected_candidates.len() as u64, "line"),
            lines.join(", "),
            r.rejected_candidates[0].reason
        )?;
    }
    match &r.prompt {
        Some(prompt) => write_prompt(out, prompt, options.query)?,
        None => {
            writeln!(
                out,
                "\nsystem prompt sections: none (no context.prepare with sections yet)"
            )?;
        }
    }
    writeln!(
        out,
        "\ndetail keys: summary, compaction:N, offload:N, section:KEY (satchel inspect {} --detail KEY)",
        r.session_id
    )
}

/// The per-request config overrides of the session's last `context.prepare`, `key=value`.
/// How `satchel proxy` made the session: the API, what named it, the agent's own compactions.
fn origin_line(origin: &SessionOrigin) -> String {
    let mut line = format!("proxy    {} requests, session named by {}", origin.api, origin.key_from);
    if let Some(last) = origin.agent_compactions.last() {
        let n = origin.agent_compactions.len();
        line.push_str(&format!(
            "; the agent compacted on its own {} (last at {}, {} sent)",
            plural(n as u64, "time"),
            last.at,
            plural(last.messages as u64, "message")
        ));
    }
    line
}

fn overrides(overrides: &Map<String, Value>) -> String {
    if overrides.is_empty() {
        return "the daemon's (the last prepare sent no overrides)".to_owned();
    }
    let pairs: Vec<String> = overrides
        .iter()
        .map(|(key, value)| match value {
            Value::String(text) => format!("{key}={text}"),
            other => format!("{key}={other}"),
        })
        .collect();
    format!("overrides of the last prepare: {}", pairs.join(", "))
}

/// The numbers of the last request: the total, the window bar, the monitor, the calibration
/// and the zones.
fn write_numbers(out: &mut impl Write, r: &InspectResult, colour: bool) -> io::Result<()> {
    let t = &r.tokens;
    writeln!(
        out,
        "context  {} / {} tokens ({} of the window)  pressure {}  peak {}  threshold {}",
        t.total,
        t.limit,
        share(t.total, t.limit),
        pressure_label(r.pressure, colour),
        r.peak_tokens,
        t.threshold
    )?;
    writeln!(out)?;
    write_window(out, r, colour)?;
    writeln!(out)?;
    write_monitor(out, &r.monitor)?;
    write_calibration(out, &r.calibration)?;
    writeln!(
        out,
        "system prompt {} tokens ({} of the window)",
        t.system,
        share(t.system, t.limit)
    )?;
    writeln!(out, "\nzones of the last request")?;
    writeln!(out, "{:<12} {:>8} {:>7}", "zone", "tokens", "share")?;
    for (zone, tokens) in [
        ("system", t.system),
        ("tools", t.tools),
        ("summary", t.summary),
        ("compactable", t.compactable),
        ("reserved", t.reserved),
    ] {
        writeln!(out, "{zone:<12} {tokens:>8} {:>7}", share(tokens, t.total))?;
    }
    Ok(())
}

/// The live numbers of AceClaw's `ContextMonitor`.
/// Its level is not shown: it is the `pressure` of the context line, in other words.
fn write_monitor(out: &mut impl Write, m: &ContextMonitor) -> io::Result<()> {
    let phases = if m.phases_reached.is_empty() {
        "none (under the threshold)".to_owned()
    } else {
        m.phases_reached.join(", ")
    };
    writeln!(
        out,
        "monitor  current {} tokens  peak {}\n         compactions {}  pruned only {}  \
         last request reached {phases}\n         tokens saved {} last request, {} in all",
        m.current_tokens,
        m.peak_tokens,
        m.compaction_count,
        m.pruned_only_count,
        m.last_tokens_saved,
        m.total_tokens_saved,
    )
}

/// The correction by the provider's reported usage, once there is one.
fn write_calibration(out: &mut impl Write, c: &Calibration) -> io::Result<()> {
    if c.samples == 0 {
        return Ok(());
    }
    write!(
        out,
        "calibration  factor {:.3} from {} sample{}",
        c.factor,
        c.samples,
        if c.samples == 1 { "" } else { "s" }
    )?;
    match c.last {
        Some(last) => writeln!(
            out,
            "  (last: provider {} tokens, counted {})",
            last.provider_tokens, last.counted_tokens
        ),
        None => writeln!(out),
    }
}

/// The assembled system prompt: size, budget, focus, cuts, then the cost tables.
fn write_prompt(out: &mut impl Write, p: &PromptAssembly, query: Option<&str>) -> io::Result<()> {
    writeln!(out, "\nsystem prompt assembly")?;
    if let Some(query) = query {
        writeln!(
            out,
            "  (as if the newest user message were {query:?}; the session is not changed)"
        )?;
    }
    writeln!(
        out,
        "  size       {} chars, ~{} tokens ({:.2}% of the {}-token window)",
        p.total_chars, p.estimated_tokens, p.system_prompt_share_pct, p.context_window_tokens
    )?;
    writeln!(
        out,
        "  budget     {} chars per section, {} chars in all (~{} tokens)",
        p.budget.max_per_tier_chars, p.budget.max_total_chars, p.budget.budget_tokens_estimate
    )?;
    write_focus(out, &p.request_focus)?;
    let truncated = if p.truncated_section_keys.is_empty() {
        "none".to_owned()
    } else {
        p.truncated_section_keys.join(", ")
    };
    writeln!(out, "  truncated  {truncated}")?;
    if let Some(over) = &p.over_budget {
        writeln!(out, "  OVER BUDGET  {over}")?;
    }
    sections::write_injection_cost(out, &p.sections)?;
    sections::write_section_table(out, &p.sections)
}

/// What the newest user message is about.
fn write_focus(out: &mut impl Write, f: &RequestFocus) -> io::Result<()> {
    let list = |items: &[String]| {
        if items.is_empty() {
            "-".to_owned()
        } else {
            items.join(", ")
        }
    };
    let query = if f.query_summary.is_empty() {
        "-".to_owned()
    } else {
        format!("{:?}", f.query_summary)
    };
    writeln!(out, "  focus      query {query}")?;
    writeln!(out, "             files {}", list(&f.active_file_paths))?;
    writeln!(out, "             symbols {}", list(&f.active_symbols))?;
    writeln!(out, "             plan signals {}", list(&f.plan_signals))
}

/// The session's pins, one line each (nothing when there are none).
fn write_pins(out: &mut impl Write, pins: &[PinInfo]) -> std::io::Result<()> {
    if pins.is_empty() {
        return Ok(());
    }
    writeln!(out, "\npins {}", pins.len())?;
    for pin in pins {
        let what = match (pin.kind, pin.message_index, &pin.result_id) {
            (PinKind::Result, _, Some(id)) => format!("result {id}"),
            (PinKind::Message, Some(index), _) => format!("message {index}"),
            _ => "text".to_owned(),
        };
        let shown = if pin.in_block {
            format!("in the pinned block, {}", plural(pin.chars as u64, "char"))
        } else {
            "live, sent whole where it is".to_owned()
        };
        let label = pin.label.as_deref().map(|l| format!("  \"{l}\"")).unwrap_or_default();
        writeln!(out, "  {:<4} {:<14} {shown}{label}", pin.id, what)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::inspect::fixture;

    fn list(r: &InspectResult, query: Option<&str>) -> String {
        fixture::render(|out| write_list(out, r, &ListOptions { colour: false, query }))
    }

    #[test]
    fn inspect_list_view_shows_monitor_calibration_and_prompt() {
        let text = list(&fixture::result(), None);
        assert!(!text.contains('\x1b'), "no colour: {text}");
        // Today's parts.
        assert!(text.contains("context  9000 / 128000 tokens (7.0% of the window)  pressure LOW  peak 101000"));
        assert!(text.lines().any(|l| l.starts_with("system ") && l.contains(" 2100 ")));
        assert!(text.contains("compactions 1 (tokens saved 93k)"));
        assert!(text.contains("offloaded results 1: 52 KB in full, 3.4 KB sent, 48.6 KB saved"));
        let row = text.lines().find(|l| l.starts_with("  offload:0 ")).unwrap();
        let words: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            words[..10],
            [
                "offload:0",
                "r7",
                "bash",
                "recent",
                "52",
                "KB",
                "3.4",
                "KB",
                "48.6",
                "KB"
            ],
            "{row}"
        );
        assert!(text.contains("config   the daemon's (the last prepare sent no overrides)"));
        // The monitor and calibration.
        assert!(text.contains("monitor  current 9000 tokens  peak 101000"));
        assert!(text.contains("pruned only 2  last request reached prune, summarize"));
        assert!(text.contains("tokens saved 1200 last request, 94200 in all"));
        assert!(text.contains("calibration  factor 1.042 from 3 samples  (last: provider 9380 tokens, counted 9000)"));
        // The prompt.
        assert!(text.contains("size       8410 chars, ~2100 tokens (1.64% of the 128000-token window)"));
        assert!(text.contains("budget     4000 chars per section, 12000 chars in all (~3000 tokens)"));
        assert!(text.contains("query \"fix the streaming bug in StreamingAgentLoop\""));
        assert!(text.contains("files src/agent/StreamingAgentLoop.java"));
        assert!(text.contains("plan signals code change requested"));
        assert!(text.contains("truncated  memory:journal, git:status"));
        assert!(text.contains("section:KEY"));
        insta::assert_snapshot!("list_view", text);
    }

    #[test]
    fn inspect_list_view_tells_how_the_proxy_made_the_session() {
        let mut r = fixture::result();
        assert!(!list(&r, None).contains("proxy "), "no origin, no line");
        r.origin = Some(SessionOrigin {
            api: "anthropic-messages".into(),
            key_from: "x-claude-code-session-id header".into(),
            agent_compactions: Vec::new(),
        });
        let line = "proxy    anthropic-messages requests, session named by x-claude-code-session-id header\n";
        assert!(list(&r, None).contains(line), "{}", list(&r, None));
        r.origin.as_mut().unwrap().agent_compactions = vec![
            satchel_protocol::AgentCompaction {
                at: "2026-11-28T01:00:00.000Z".into(),
                messages: 40,
            },
            satchel_protocol::AgentCompaction {
                at: "2026-11-28T01:20:00.000Z".into(),
                messages: 52,
            },
        ];
        assert!(list(&r, None).contains(
            "; the agent compacted on its own 2 times (last at 2026-11-28T01:20:00.000Z, 52 messages sent)\n"
        ));
    }

    #[test]
    fn inspect_list_view_before_any_prompt_and_calibration() {
        let mut json = fixture::json();
        let object = json.as_object_mut().unwrap();
        for key in [
            "sessionId",
            "totalChars",
            "estimatedTokens",
            "contextWindowTokens",
            "systemPromptSharePct",
            "requestFocus",
            "budget",
            "truncatedSectionKeys",
            "sections",
        ] {
            object.remove(key);
        }
        object.insert("calibration".into(), serde_json::json!({"factor": 1.0, "samples": 0}));
        object["monitor"]["phases_reached"] = serde_json::json!([]);
        let r: InspectResult = serde_json::from_value(json).unwrap();
        assert!(r.prompt.is_none());
        let text = list(&r, None);
        assert!(text.contains("system prompt sections: none"), "{text}");
        assert!(!text.contains("calibration"), "no calibration before a usage: {text}");
        assert!(
            text.contains("last request reached none (under the threshold)"),
            "{text}"
        );
        assert!(!text.contains("injection cost"), "{text}");
    }

    #[test]
    fn inspect_list_view_names_the_config_overrides() {
        let mut json = fixture::json();
        json["config_overrides"] = serde_json::json!({"max_input_length": 16384, "offload_notice_path": "relative"});
        let text = list(&serde_json::from_value(json).unwrap(), None);
        assert!(
            text.contains(
                "\nconfig   overrides of the last prepare: max_input_length=16384, offload_notice_path=relative\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn inspect_list_view_names_the_query_hint() {
        let text = list(&fixture::result(), Some("error detection"));
        assert!(
            text.contains("(as if the newest user message were \"error detection\"; the session is not changed)"),
            "{text}"
        );
    }

    #[test]
    fn inspect_pressure_is_coloured_on_a_terminal_and_shown_once() {
        let r = fixture::result();
        let text = fixture::render(|out| {
            write_list(
                out,
                &r,
                &ListOptions {
                    colour: true,
                    query: None,
                },
            )
        });
        assert!(text.contains("pressure \x1b[32mLOW\x1b[0m"), "{text}");
        assert!(!text.contains("NORMAL"), "one scale on one screen: {text}");
    }

    #[test]
    fn pins_are_listed_with_where_the_request_shows_them() {
        let pins = [
            PinInfo {
                id: "p1".into(),
                kind: PinKind::Text,
                label: Some("repo rule".into()),
                message_index: None,
                result_id: None,
                in_block: true,
                chars: 46,
            },
            PinInfo {
                id: "p2".into(),
                kind: PinKind::Result,
                label: None,
                message_index: Some(3),
                result_id: Some("r3".into()),
                in_block: false,
                chars: 0,
            },
        ];
        let text = crate::cli::inspect::fixture::render(|out| write_pins(out, &pins));
        assert_eq!(
            text,
            "\npins 2\n  p1   text           in the pinned block, 46 chars  \"repo rule\"\n  \
             p2   result r3      live, sent whole where it is\n"
        );
        assert_eq!(crate::cli::inspect::fixture::render(|out| write_pins(out, &[])), "");
    }
}
