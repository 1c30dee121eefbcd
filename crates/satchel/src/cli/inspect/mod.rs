//! `satchel inspect`: attach to a running daemon over its socket and show a session's context,
//! like AceClaw's `/context list` and `/context detail KEY` (spec 04): window share, live
//! tokens and pressure, the monitor and calibration, compaction statistics, per-zone costs,
//! offloaded results and the system prompt's sections (cost per source type, one row each).
//!
//! The printers write to any [`Write`], so tests render the views to a string. The small
//! helpers the views share (`plural`, `size`, `share`, `paint`) live here, so no view imports
//! from another for them. It speaks to the daemon through [`Client`].

mod list;
mod memory;
mod offloads;
mod sections;
mod watch;
mod window;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use satchel_protocol::{
    CompactSummary, CompactionReport, ErrorCode, InspectParams, InspectResult, OffloadedResult, Pressure,
    SessionsResult,
};
use satchel_storage::Layout;
use serde_json::{Value, json};

use super::client::{Client, RpcFailure};
use crate::socket::read_daemon_info;

/// Arguments of `satchel inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    /// Session to show; without it, the sessions of the daemon are listed.
    session: Option<String>,
    /// Socket of the daemon (default: found through the workspace's `run/daemon.json`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print the raw JSON of `context.inspect` (or `context.sessions`; with `--detail
    /// compaction:N` or `offload:N`, that record).
    #[arg(long)]
    json: bool,
    /// Keep following the session's events (`context.watch`) until interrupted.
    #[arg(long)]
    watch: bool,
    /// Show one item in full: `summary`, `compaction:N`, `offload:N` (N from the list view) or
    /// `section:KEY` (a system prompt section, KEY from the section table).
    #[arg(long, value_name = "KEY")]
    detail: Option<String>,
    /// Assemble the last request's sections as if the newest user message were TEXT: what a
    /// question about TEXT would keep (the session is not changed).
    #[arg(long, value_name = "TEXT")]
    query: Option<String>,
    /// Show the long-term memory index instead of a session (`memory.status`): files,
    /// chunks, size, when last indexed, the watcher and the embedding backend with its cache.
    #[arg(long, conflicts_with_all = ["session", "detail", "query", "watch"])]
    memory: bool,
}

/// Whether `error` is the daemon saying the session does not exist.
fn is_unknown_session(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<RpcFailure>()
        .is_some_and(|e| e.is(ErrorCode::UnknownSession))
}

/// The params of `context.inspect` for `session`, with the query hint and section key given.
fn inspect_params(session: &str, query_hint: Option<&str>, detail_key: Option<&str>) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(InspectParams {
        session_id: session.to_owned(),
        query_hint: query_hint.map(str::to_owned),
        detail_key: detail_key.map(str::to_owned),
    })?)
}

/// The key of a section asked for with `--detail section:KEY`.
fn section_key(detail: Option<&str>) -> Option<&str> {
    detail.and_then(|d| d.strip_prefix("section:"))
}

/// Runs the inspector.
pub fn run(args: &InspectArgs, workspace: Option<&Path>) -> anyhow::Result<()> {
    let (socket, found_in) = match &args.socket {
        Some(path) => (path.clone(), None),
        None => {
            let workspace = match workspace {
                Some(w) => w.to_path_buf(),
                None => crate::default_workspace()?,
            };
            let layout = Layout::new(&workspace);
            let info_file = layout.daemon_file();
            if !info_file.exists() {
                bail!(
                    "no daemon running on {} (no running daemon found: {} does not exist; \
                     start one with `satchel serve --socket`)",
                    workspace.display(),
                    info_file.display()
                );
            }
            (read_daemon_info(&layout)?.socket, Some(workspace))
        }
    };
    let mut conn = Client::connect(&socket, found_in.as_deref())?;
    let stdout = std::io::stdout();
    let colour = use_colour(stdout.is_terminal(), std::env::var_os("NO_COLOR").is_some());
    let mut out = stdout.lock();
    if args.memory {
        let status = conn.call("memory.status", json!({}))?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&status)?)?;
        } else {
            memory::write_status(&mut out, &status)?;
        }
        return Ok(());
    }
    let Some(session) = &args.session else {
        let sessions = conn.call("context.sessions", json!({}))?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&sessions)?)?;
        } else {
            write_sessions(&mut out, &serde_json::from_value(sessions)?, colour)?;
        }
        return Ok(());
    };
    let query = args.query.as_deref();
    let section = section_key(args.detail.as_deref());
    // Subscribed before the session is read, so no event falls between the view and the lines.
    if args.watch {
        conn.call("context.watch", json!({"session_id": session}))?;
    }
    let raw = match conn.call("context.inspect", inspect_params(session, query, section)?) {
        Ok(raw) => raw,
        Err(error) if args.watch && is_unknown_session(&error) => {
            let waiting = format!("waiting for session {session}: it does not exist yet; its events follow");
            if args.json {
                eprintln!("{waiting}");
            } else {
                writeln!(out, "{waiting}")?;
            }
            out.flush()?;
            return watch::follow(&mut out, &mut conn, watch::Seen::default(), args.json, colour);
        }
        // The daemon's own words: a key it does not know is refused with the keys it knows.
        // (A second inspect without the key, to list them here, would see a session that the
        // refusal may have sent back to its log: no sections until the next prepare.)
        Err(error) => return Err(error),
    };
    let inspected: InspectResult = serde_json::from_value(raw.clone())?;
    if args.json {
        if let Some(record) = detail_record(&raw, args.detail.as_deref())? {
            writeln!(out, "{}", serde_json::to_string_pretty(&record)?)?;
            return Ok(());
        }
        if let Some(key) = section {
            // The same error as the text view when the section is unknown.
            sections::find_detail(&inspected, key)?;
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
    } else {
        match &args.detail {
            Some(key) => write_detail(&mut out, &mut conn, &inspected, key)?,
            None => list::write_list(&mut out, &inspected, &list::ListOptions { colour, query })?,
        }
    }
    out.flush()?;
    if args.watch {
        watch::follow(&mut out, &mut conn, watch::Seen::of(&inspected), args.json, colour)?;
    }
    Ok(())
}

/// Colours only on a terminal, and not when `NO_COLOR` is set (to any value).
fn use_colour(terminal: bool, no_color: bool) -> bool {
    terminal && !no_color
}

/// With `--json`, the record `--detail compaction:N` or `offload:N` names, as the daemon sent it.
fn detail_record(raw: &Value, detail: Option<&str>) -> anyhow::Result<Option<Value>> {
    let Some((kind, n)) = detail.and_then(|d| d.split_once(':')) else {
        return Ok(None);
    };
    let list = match kind {
        "compaction" => "compactions",
        "offload" => "offloaded",
        _ => return Ok(None),
    };
    let record = n
        .parse::<usize>()
        .ok()
        .and_then(|n| raw[list].get(n))
        .with_context(|| format!("no {kind}:{n}"))?;
    Ok(Some(record.clone()))
}

/// `text` in the ANSI colour `code` when `colour` is on.
fn paint(text: &str, code: &str, colour: bool) -> String {
    if colour {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

fn pressure_label(pressure: Pressure, colour: bool) -> String {
    let (name, code) = match pressure {
        Pressure::Low => ("LOW", "32"),
        Pressure::Medium => ("MEDIUM", "33"),
        Pressure::High => ("HIGH", "31"),
        Pressure::Critical => ("CRITICAL", "1;31"),
    };
    paint(name, code, colour)
}

/// `1 message`, `2 messages`.
fn plural(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `n` bytes, decimal units: `950 B`, `3.4 KB`, `52 KB`, `1.2 MB`.
fn size(n: u64) -> String {
    let (value, unit) = match n {
        0..1_000 => return format!("{n} B"),
        1_000..1_000_000 => (n as f64 / 1e3, "KB"),
        _ => (n as f64 / 1e6, "MB"),
    };
    let text = format!("{value:.1}");
    format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
}

fn share(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

fn write_sessions(out: &mut impl Write, result: &SessionsResult, colour: bool) -> std::io::Result<()> {
    if result.sessions.is_empty() {
        return writeln!(out, "no sessions");
    }
    writeln!(
        out,
        "{:<40} {:>8} {:>10} {:>9}  pressure",
        "session", "messages", "tokens", "compact."
    )?;
    for s in &result.sessions {
        let num = |v: Option<usize>| v.map_or("-".to_owned(), |n| n.to_string());
        // Not in memory: its numbers come with its next call.
        writeln!(
            out,
            "{:<40} {:>8} {:>10} {:>9}  {}",
            s.session_id,
            num(s.messages),
            s.tokens.map_or("-".to_owned(), |t| t.to_string()),
            num(s.compactions),
            s.pressure.map_or_else(
                || if s.live {
                    "-".to_owned()
                } else {
                    format!("({})", window::NOT_LOADED)
                },
                |p| pressure_label(p, colour)
            ),
        )?;
    }
    Ok(())
}

fn write_detail(out: &mut impl Write, conn: &mut Client, r: &InspectResult, key: &str) -> anyhow::Result<()> {
    if let Some(section) = section_key(Some(key)) {
        return sections::write_section_detail(out, sections::find_detail(r, section)?).map_err(Into::into);
    }
    let (kind, n) = key
        .split_once(':')
        .map_or((key, None), |(k, n)| (k, n.parse::<usize>().ok()));
    match (kind, n) {
        ("summary", _) => match &r.summary {
            Some(summary) => writeln!(out, "{}", render(summary))?,
            None => writeln!(out, "no summary yet: nothing has been compacted")?,
        },
        ("compaction", Some(n)) => {
            let c = r.compactions.get(n).with_context(|| format!("no compaction:{n}"))?;
            write_compaction(out, n, c)?;
        }
        ("offload", Some(n)) => {
            let o = r.offloaded.get(n).with_context(|| format!("no offload:{n}"))?;
            write_offload(out, n, o)?;
            let head = conn.call("context.read", json!({"path": o.file, "max_bytes": 2000}))?;
            writeln!(
                out,
                "--- first lines of {} ---\n{}",
                o.file,
                head["content"].as_str().unwrap_or("")
            )?;
        }
        _ => bail!("unknown key {key:?}: use summary, compaction:N, offload:N or section:KEY"),
    }
    Ok(())
}

/// `--detail compaction:N` as text.
fn write_compaction(out: &mut impl Write, n: usize, c: &CompactionReport) -> std::io::Result<()> {
    writeln!(out, "compaction:{n}  {}", c.id)?;
    writeln!(
        out,
        "  at          {} ({})",
        c.at,
        if c.manual {
            "manual, context.compact"
        } else {
            "automatic, over the threshold"
        }
    )?;
    writeln!(out, "  compacted   {}", plural(c.messages as u64, "message"))?;
    writeln!(
        out,
        "  tokens      {} -> {} (saved {})",
        c.tokens_before,
        c.tokens_after,
        c.tokens_before.saturating_sub(c.tokens_after)
    )?;
    match &c.archive {
        Some(_) => {
            // A compaction a crash interrupted may lie in several runs of the archive.
            for (n, a) in c.archive.iter().chain(&c.more_archive).enumerate() {
                writeln!(
                    out,
                    "  {:<11} {} lines {}-{} ({}, indices {}-{})",
                    if n == 0 { "archive" } else { "" },
                    a.file,
                    a.start_line,
                    a.end_line,
                    plural(a.messages as u64, "message"),
                    a.first_index,
                    a.last_index
                )?;
            }
        }
        None => writeln!(out, "  archive     not archived")?,
    }
    writeln!(out, "  summarizer  {}", c.summarizer)?;
    if c.dropped.is_empty() {
        return writeln!(
            out,
            "  dropped     nothing: the summary names every request, file and command of the span"
        );
    }
    writeln!(
        out,
        "  dropped     {} the summary no longer names (context.expand with compaction_id {} brings the span back):",
        plural(c.dropped.len() as u64, "identifier"),
        c.id
    )?;
    for d in &c.dropped {
        let kind = serde_json::to_value(d.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        writeln!(
            out,
            "    {kind:<13} {}  (message {}, {})",
            d.text,
            d.index,
            plural(d.mentions as u64, "mention")
        )?;
    }
    Ok(())
}

/// `--detail offload:N` as text (its first lines follow).
fn write_offload(out: &mut impl Write, n: usize, o: &OffloadedResult) -> std::io::Result<()> {
    writeln!(out, "offload:{n}  {}  message {}", o.id, o.index)?;
    writeln!(out, "  file     {}", o.file)?;
    writeln!(out, "  pointer  {}", o.pointer)?;
    writeln!(
        out,
        "  size     {}, {}",
        plural(o.total_bytes as u64, "byte"),
        plural(o.total_lines as u64, "line")
    )
}

/// The summary as the model reads it, then (for the person reading) the instruction that
/// steered the latest compaction and what it did.
fn render(summary: &CompactSummary) -> String {
    let mut text = satchel_core::summary::render::summary_message_text(summary);
    if let Some(instruction) = &summary.instruction {
        text.push_str(&format!("\n\n(instruction of the latest compaction: {instruction:?}"));
        if let Some(effect) = &summary.instruction_effect {
            text.push_str(&format!("; {effect}"));
        }
        text.push(')');
    }
    text
}

/// A synthetic `context.inspect` result for the printers' tests, built from JSON so that
/// fields added later with defaults do not break them.
#[cfg(test)]
pub(crate) mod fixture {
    use satchel_protocol::InspectResult;
    use serde_json::{Value, json};

    /// The result of a session known from its log but not prepared since the daemon started:
    /// no numbers yet.
    pub fn not_loaded_json() -> Value {
        let mut json = json();
        json["loaded"] = false.into();
        for key in [
            "system",
            "tools",
            "summary",
            "compactable",
            "reserved",
            "messages",
            "total",
        ] {
            json["tokens"][key] = 0.into();
        }
        json["monitor"]["current_tokens"] = 0.into();
        json["peak_tokens"] = 0.into();
        json
    }

    /// The result as JSON (tests edit it before parsing).
    pub fn json() -> Value {
        json!({
            "session_id": "chat",
            "format": "openai",
            "loaded": true,
            "message_tokens": {"user": 1500, "assistant": 2100, "tool_results": 2600},
            "config_overrides": {},
            "tokens": {
                "system": 2100, "tools": 300, "summary": 400, "compactable": 5200, "reserved": 1000,
                "messages": 6200, "total": 9000, "limit": 128000, "threshold": 96000,
                "tokenizer": "o200k_base"
            },
            "pressure": "low",
            "messages": 14,
            "archived_messages": 20,
            "summary_budget_tokens": 10485,
            "summary": null,
            "offloaded": [
                {"id": "r7", "index": 7, "pointer": "/content", "file": "offload/chat/7.txt", "total_bytes": 52000, "total_lines": 900,
                 "tool": "bash", "phase": "recent", "sent_bytes": 3400}
            ],
            "compactions": [{
                "id": "c1", "at": "2025-01-01T10:00:00Z", "manual": false, "messages": 20,
                "tokens_before": 101000, "tokens_after": 8000,
                "archive": {
                    "file": "dialog/2025-01-01.jsonl", "start_line": 1, "end_line": 20,
                    "first_index": 0, "last_index": 19, "messages": 20
                },
                "summarizer": "extractive",
                "dropped": [
                    {"kind": "error", "text": "error[E0308]: mismatched types", "index": 6, "mentions": 2},
                    {"kind": "command", "text": "cargo test -p parser", "index": 5, "mentions": 3}
                ]
            }],
            "peak_tokens": 101000,
            "monitor": {
                "current_tokens": 9000, "pressure_level": "normal", "peak_tokens": 101000,
                "compaction_count": 1, "pruned_only_count": 2, "phases_reached": ["prune", "summarize"],
                "last_tokens_saved": 1200, "total_tokens_saved": 94200
            },
            "calibration": {"factor": 1.042, "samples": 3, "last": {"provider_tokens": 9380, "counted_tokens": 9000}},
            "sessionId": "chat",
            "totalChars": 8410,
            "estimatedTokens": 2100,
            "contextWindowTokens": 128000,
            "systemPromptSharePct": 1.640625,
            "requestFocus": {
                "querySummary": "fix the streaming bug in StreamingAgentLoop",
                "activeFilePaths": ["src/agent/StreamingAgentLoop.java"],
                "activeSymbols": ["StreamingAgentLoop"],
                "planSignals": ["code change requested"]
            },
            "budget": {"maxPerTierChars": 4000, "maxTotalChars": 12000, "budgetTokensEstimate": 3000},
            "truncatedSectionKeys": ["memory:journal", "git:status"],
            "sections": [
                section("memory:soul", "memory", 100, 100, true, 1200, 1200, true, false, &["tier=Soul", "priority=100"]),
                section("rules:streaming", "rules", 88, 100, false, 2000, 2000, true, false,
                    &["priority=88", "files=src/agent/StreamingAgentLoop.java", "boost=+12"]),
                section("memory:journal", "journal", 30, 30, false, 6000, 4000, true, true, &["tier=Journal"]),
                section("rules:style", "rules", 88, 88, false, 800, 800, true, false, &["priority=88"]),
                section("git:status", "git", 40, 40, false, 900, 0, false, true, &["priority=40"]),
                section("task-focus", "task-focus", 95, 95, true, 400, 400, true, false, &[])
            ]
        })
    }

    #[expect(clippy::too_many_arguments, reason = "one row of a table, written out")]
    fn section(
        key: &str,
        source: &str,
        base: i64,
        priority: i64,
        protected: bool,
        original: usize,
        final_chars: usize,
        included: bool,
        truncated: bool,
        evidence: &[&str],
    ) -> Value {
        json!({
            "key": key, "sourceType": source, "scopeType": "always-on",
            "inclusionReason": format!("sent by the client as {key}"),
            "priority": priority, "basePriority": base, "protected": protected,
            "originalChars": original, "finalChars": final_chars,
            "estimatedTokens": (final_chars as u64).div_ceil(4),
            "included": included, "truncated": truncated, "evidence": evidence
        })
    }

    /// The result parsed.
    pub fn result() -> InspectResult {
        serde_json::from_value(json()).expect("the fixture is an InspectResult")
    }

    /// What `print` wrote.
    pub fn render(print: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        print(&mut out).expect("writing to a Vec");
        String::from_utf8(out).expect("UTF-8 output")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        assert_eq!(plural(1u64, "message"), "1 message");
        assert_eq!(plural(0u64, "message"), "0 messages");
        assert_eq!(plural(2u64, "message"), "2 messages");
    }

    #[test]
    fn sizes_in_decimal_units() {
        for (n, expected) in [
            (0, "0 B"),
            (999, "999 B"),
            (1_000, "1 KB"),
            (3_400, "3.4 KB"),
            (212_345, "212.3 KB"),
            (1_250_000, "1.2 MB"),
        ] {
            assert_eq!(size(n), expected);
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, false));
        assert!(!use_colour(true, true));
        assert!(!use_colour(false, false));
        assert!(!use_colour(false, true));
    }

    #[test]
    fn detail_of_a_compaction_and_an_offload_is_text() {
        let r = fixture::result();
        let text = fixture::render(|out| {
            write_compaction(out, 0, &r.compactions[0])?;
            write_offload(out, 0, &r.offloaded[0])
        });
        assert!(!text.contains('{'), "not JSON: {text}");
        insta::assert_snapshot!("compaction_and_offload_detail", text);
    }

    #[test]
    fn json_detail_is_the_record_as_sent() {
        let raw = fixture::json();
        assert_eq!(
            detail_record(&raw, Some("compaction:0")).unwrap(),
            Some(raw["compactions"][0].clone())
        );
        assert_eq!(
            detail_record(&raw, Some("offload:0")).unwrap(),
            Some(raw["offloaded"][0].clone())
        );
        assert!(detail_record(&raw, Some("offload:3")).is_err());
        assert_eq!(detail_record(&raw, Some("summary")).unwrap(), None);
        assert_eq!(detail_record(&raw, Some("section:git:status")).unwrap(), None);
        assert_eq!(detail_record(&raw, None).unwrap(), None);
    }

    #[test]
    fn sessions_table_is_aligned_and_names_sessions_not_loaded() {
        let sessions: SessionsResult = serde_json::from_value(json!({"sessions": [
            {"session_id": "chat", "live": true, "messages": 14, "tokens": 9000, "pressure": "low", "compactions": 1},
            {"session_id": "busy", "live": true, "messages": null, "tokens": null, "pressure": null, "compactions": null},
            {"session_id": "old", "live": false, "messages": null, "tokens": null, "pressure": null, "compactions": null}
        ]}))
        .unwrap();
        let text = fixture::render(|out| write_sessions(out, &sessions, false));
        assert!(text.contains(window::NOT_LOADED), "{text}");
        insta::assert_snapshot!("sessions", text);
    }

    #[test]
    fn list_view_of_a_session_not_loaded_since_the_daemon_started() {
        let mut json = fixture::not_loaded_json();
        json["messages"] = 1.into();
        let r: InspectResult = serde_json::from_value(json).unwrap();
        let text = fixture::render(|out| {
            list::write_list(
                out,
                &r,
                &list::ListOptions {
                    colour: false,
                    query: None,
                },
            )
        });
        assert!(
            text.starts_with("session chat (openai): 1 message live, 20 archived\n"),
            "{text}"
        );
        assert!(text.contains(&format!("context  {}\n", window::NOT_LOADED)), "{text}");
        assert!(!text.contains("0 / 128000"), "no zeros: {text}");
        assert!(!text.contains("zone "), "no zone table: {text}");
    }
}
