//! `satchel inspect`: attach to a running daemon over its socket and show a session's context,
//! like AceClaw's `/context list` and `/context detail KEY` (spec 04): window share, live
//! tokens and pressure, compaction statistics, per-zone costs, offloaded results.
#![allow(
    clippy::print_stdout,
    reason = "the inspector's output is for a human or a pipe, not the protocol channel"
)]

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use satchel_protocol::{CompactSummary, InspectResult, Pressure, SessionsResult};
use satchel_storage::Layout;
use serde_json::{Value, json};

use crate::socket::read_daemon_info;

/// Arguments of `satchel inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    /// Session to show; without it, the sessions of the daemon are listed.
    session: Option<String>,
    /// Socket of the daemon (default: found through the workspace's `run/daemon.json`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print the raw JSON of `context.inspect` (or `context.sessions`).
    #[arg(long)]
    json: bool,
    /// Keep following the session's events (`context.watch`) until interrupted.
    #[arg(long)]
    watch: bool,
    /// Show one item in full: `summary`, `compaction:N` or `offload:N` (N from the list view).
    #[arg(long, value_name = "KEY")]
    detail: Option<String>,
}

/// A blocking line-delimited JSON-RPC connection to the daemon.
struct Connection {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Connection {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let stream = UnixStream::connect(path).with_context(|| format!("connecting to {}", path.display()))?;
        Ok(Connection {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
        })
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        writeln!(
            self.writer,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )?;
        loop {
            let message = self.next_message()?;
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    bail!("{method}: {}", error["message"].as_str().unwrap_or("error"));
                }
                return Ok(message["result"].clone());
            }
        }
    }

    fn next_message(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            bail!("the daemon closed the connection");
        }
        Ok(serde_json::from_str(&line)?)
    }
}

/// Runs the inspector.
pub fn run(args: &InspectArgs, workspace: Option<&Path>) -> anyhow::Result<()> {
    let socket = match &args.socket {
        Some(path) => path.clone(),
        None => {
            let workspace = match workspace {
                Some(w) => w.to_path_buf(),
                None => crate::default_workspace()?,
            };
            read_daemon_info(&Layout::new(workspace))?.socket
        }
    };
    let mut conn = Connection::open(&socket)?;
    let colour = std::io::stdout().is_terminal();
    let Some(session) = &args.session else {
        let sessions = conn.call("context.sessions", json!({}))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&sessions)?);
        } else {
            print_sessions(&serde_json::from_value(sessions)?, colour);
        }
        return Ok(());
    };
    let raw = conn.call("context.inspect", json!({"session_id": session}))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&raw)?);
    } else {
        let inspected: InspectResult = serde_json::from_value(raw)?;
        match &args.detail {
            Some(key) => print_detail(&mut conn, &inspected, key)?,
            None => print_list(&inspected, colour),
        }
    }
    if args.watch {
        conn.call("context.watch", json!({"session_id": session}))?;
        loop {
            let message = conn.next_message()?;
            if message["method"] != "context.event" {
                continue;
            }
            let event = &message["params"];
            if args.json {
                println!("{event}");
            } else {
                let pressure: Pressure = serde_json::from_value(event["pressure"].clone())?;
                println!(
                    "{:<8} {:>8} / {} tokens  {}  messages {}  compactions {}  {}",
                    event["kind"].as_str().unwrap_or(""),
                    event["tokens"]["total"],
                    event["tokens"]["limit"],
                    pressure_label(pressure, colour),
                    event["messages"],
                    event["compactions"],
                    event["actions"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                        .unwrap_or_default()
                );
            }
            std::io::stdout().flush()?;
        }
    }
    Ok(())
}

fn pressure_label(pressure: Pressure, colour: bool) -> String {
    let (name, code) = match pressure {
        Pressure::Low => ("LOW", "32"),
        Pressure::Medium => ("MEDIUM", "33"),
        Pressure::High => ("HIGH", "31"),
        Pressure::Critical => ("CRITICAL", "1;31"),
    };
    if colour {
        format!("\x1b[{code}m{name}\x1b[0m")
    } else {
        name.to_owned()
    }
}

fn share(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

fn print_sessions(result: &SessionsResult, colour: bool) {
    if result.sessions.is_empty() {
        println!("no sessions");
        return;
    }
    println!(
        "{:<40} {:>8} {:>10} {:>9}  pressure",
        "session", "messages", "tokens", "compact."
    );
    for s in &result.sessions {
        let num = |v: Option<usize>| v.map_or("-".to_owned(), |n| n.to_string());
        println!(
            "{:<40} {:>8} {:>10} {:>9}  {}",
            s.session_id,
            num(s.messages),
            s.tokens.map_or("-".to_owned(), |t| t.to_string()),
            num(s.compactions),
            s.pressure.map_or_else(
                || if s.live {
                    "-".to_owned()
                } else {
                    "(not loaded)".to_owned()
                },
                |p| pressure_label(p, colour)
            ),
        );
    }
}

fn print_list(r: &InspectResult, colour: bool) {
    let t = &r.tokens;
    println!(
        "session {} ({}): {} messages live, {} archived",
        r.session_id,
        r.format
            .map_or("format unknown".to_owned(), |f| format!("{f:?}").to_lowercase()),
        r.messages,
        r.archived_messages
    );
    println!(
        "context  {} / {} tokens ({} of the window)  pressure {}  peak {}  threshold {}",
        t.total,
        t.limit,
        share(t.total, t.limit),
        pressure_label(r.pressure, colour),
        r.peak_tokens,
        t.threshold
    );
    println!(
        "system prompt {} tokens ({} of the window)",
        t.system,
        share(t.system, t.limit)
    );
    println!("\nzone          tokens   share of request");
    for (zone, tokens) in [
        ("system", t.system),
        ("tools", t.tools),
        ("summary", t.summary),
        ("compactable", t.compactable),
        ("reserved", t.reserved),
    ] {
        println!("{zone:<12} {tokens:>8}   {}", share(tokens, t.total));
    }
    let saved: u64 = r
        .compactions
        .iter()
        .map(|c| c.tokens_before.saturating_sub(c.tokens_after))
        .sum();
    println!("\ncompactions {} (tokens saved {saved})", r.compactions.len());
    for (n, c) in r.compactions.iter().enumerate() {
        let archive = c.archive.as_ref().map_or("not archived".to_owned(), |a| {
            format!("{} lines {}-{}", a.file, a.start_line, a.end_line)
        });
        println!(
            "  compaction:{n}  {}  {} messages  {} -> {} tokens  {}{}  [{}]",
            c.at,
            c.messages,
            c.tokens_before,
            c.tokens_after,
            archive,
            if c.manual { "  manual" } else { "" },
            c.summarizer
        );
    }
    println!("\noffloaded results {}", r.offloaded.len());
    for (n, o) in r.offloaded.iter().enumerate() {
        println!(
            "  offload:{n}  message {}  {}  {} bytes / {} lines",
            o.index, o.file, o.total_bytes, o.total_lines
        );
    }
    println!(
        "\ndetail keys: summary, compaction:N, offload:N (satchel inspect {} --detail KEY)",
        r.session_id
    );
}

fn print_detail(conn: &mut Connection, r: &InspectResult, key: &str) -> anyhow::Result<()> {
    let (kind, n) = key
        .split_once(':')
        .map_or((key, None), |(k, n)| (k, n.parse::<usize>().ok()));
    match (kind, n) {
        ("summary", _) => match &r.summary {
            Some(summary) => println!("{}", render(summary)),
            None => println!("no summary yet: nothing has been compacted"),
        },
        ("compaction", Some(n)) => {
            let c = r.compactions.get(n).with_context(|| format!("no compaction:{n}"))?;
            println!("{}", serde_json::to_string_pretty(c)?);
        }
        ("offload", Some(n)) => {
            let o = r.offloaded.get(n).with_context(|| format!("no offload:{n}"))?;
            println!("{}", serde_json::to_string_pretty(o)?);
            let head = conn.call("context.read", json!({"path": o.file, "max_bytes": 2000}))?;
            println!(
                "--- first lines of {} ---\n{}",
                o.file,
                head["content"].as_str().unwrap_or("")
            );
        }
        _ => bail!("unknown key {key:?}: use summary, compaction:N or offload:N"),
    }
    Ok(())
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
