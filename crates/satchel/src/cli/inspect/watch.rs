//! `satchel inspect SESSION --watch`: one timestamped line per `context.event` of the session,
//! with what changed since the previous one (or since the list view printed before).

use std::io::Write;

use satchel_protocol::{ContextEvent, EventKind, InspectResult};
use serde_json::Value;

use super::window::k;
use super::{plural, pressure_label};
use crate::cli::client::Client;

/// What the previous line (or the list view) showed, to print the change.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Seen {
    messages: usize,
    total: u64,
    compactions: usize,
}

impl Seen {
    /// The session as the list view showed it; a session not loaded since the daemon
    /// started has no total to compare with.
    pub fn of(r: &InspectResult) -> Self {
        Seen {
            messages: r.messages,
            total: if r.loaded { r.tokens.total } else { 0 },
            compactions: r.compactions.len(),
        }
    }

    fn of_event(event: &ContextEvent) -> Self {
        Seen {
            messages: event.messages,
            total: event.tokens.total,
            compactions: event.compactions,
        }
    }
}

/// `+3 messages`, `-8 messages`, `+1 message`.
fn message_change(now: usize, before: usize) -> String {
    let (sign, n) = if now >= before {
        ('+', now - before)
    } else {
        ('-', before - now)
    };
    format!("{sign}{}", plural(n as u64, "message"))
}

/// `+1.8k`, `-29.2k`, `+0`.
fn token_change(now: u64, before: u64) -> String {
    if now >= before {
        format!("+{}", k(now - before))
    } else {
        format!("-{}", k(before - now))
    }
}

/// The line of `event` at `time` (`HH:MM:SS`), against what was `seen` before it.
pub(super) fn event_line(time: &str, event: &ContextEvent, seen: Seen, colour: bool) -> String {
    if let (EventKind::CompactionStarted, Some(c)) = (event.kind, &event.compaction) {
        return format!(
            "{time}  compacting {} of {} live at {} tokens (threshold {}){}",
            plural(c.messages as u64, "message"),
            event.messages,
            k(c.tokens_before),
            k(c.threshold),
            if c.manual { ", asked for" } else { "" }
        );
    }
    let kind = serde_json::to_value(event.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut actions: Vec<String> = Vec::new();
    for action in &event.actions {
        if let Value::String(name) = serde_json::to_value(action).unwrap_or_default()
            && !actions.contains(&name)
        {
            actions.push(name);
        }
    }
    if event.compactions != seen.compactions {
        actions.push(format!("now {}", plural(event.compactions as u64, "compaction")));
    }
    if let Some(c) = event.compaction.as_ref().filter(|c| c.id.is_some()) {
        let mut done = format!(
            "{} {} -> {}",
            c.id.as_deref().unwrap_or_default(),
            k(c.tokens_before),
            k(c.tokens_after.unwrap_or_default())
        );
        if !c.dropped.is_empty() {
            let named: Vec<String> = c.dropped.iter().map(|d| format!("`{}`", d.text)).collect();
            done.push_str(&format!(", no longer named: {}", named.join(" ")));
        }
        actions.push(done);
    }
    // Padded before painting, so colour codes do not shift the columns.
    let name_width = format!("{:?}", event.pressure).len();
    let pressure = format!(
        "{}{}",
        pressure_label(event.pressure, colour),
        " ".repeat(8usize.saturating_sub(name_width))
    );
    format!(
        "{time}  {kind:<7}  {:>12}  {:>5} live  total {:>6} ({:>6}) of {}  pressure {pressure}  {}",
        message_change(event.messages, seen.messages),
        event.messages,
        k(event.tokens.total),
        token_change(event.tokens.total, seen.total),
        k(event.tokens.limit),
        actions.join(", ")
    )
    .trim_end()
    .to_owned()
}

/// Follows the session's events until the connection closes: each as a line (raw JSON with
/// `json`). The watch was subscribed before `seen` was read, so no event is missed.
pub(super) fn follow(
    out: &mut impl Write,
    conn: &mut Client,
    mut seen: Seen,
    json: bool,
    colour: bool,
) -> anyhow::Result<()> {
    loop {
        let message = conn.next_event()?;
        if message["method"] != "context.event" {
            continue;
        }
        let params = &message["params"];
        if json {
            writeln!(out, "{params}")?;
        } else {
            let event: ContextEvent = serde_json::from_value(params.clone())?;
            let time = chrono::Local::now().format("%H:%M:%S").to_string();
            writeln!(out, "{}", event_line(&time, &event, seen, colour))?;
            seen = Seen::of_event(&event);
        }
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(kind: &str, messages: usize, total: u64, compactions: usize, actions: Value) -> ContextEvent {
        serde_json::from_value(json!({
            "session_id": "chat", "kind": kind,
            "tokens": {"system": 0, "tools": 0, "summary": 0, "compactable": 0, "reserved": total,
                       "messages": total, "total": total, "limit": 128000, "threshold": 96000,
                       "tokenizer": "o200k_base"},
            "pressure": if total > 64_000 { "medium" } else { "low" },
            "messages": messages, "compactions": compactions, "actions": actions
        }))
        .unwrap()
    }

    #[test]
    fn a_line_says_what_changed_since_the_last() {
        let before = Seen {
            messages: 11,
            total: 39_400,
            compactions: 0,
        };
        let prepared = event("prepare", 14, 41_200, 0, json!(["offloaded", "truncated", "truncated"]));
        let line = event_line("12:03:04", &prepared, before, false);
        assert_eq!(
            line,
            "12:03:04  prepare   +3 messages     14 live  total  41.2k ( +1.8k) of 128k  pressure LOW       offloaded, truncated"
        );
        let compacted = event("compact", 6, 12_000, 1, json!(["compacted"]));
        let line = event_line("12:03:09", &compacted, Seen::of_event(&prepared), false);
        assert_eq!(
            line,
            "12:03:09  compact   -8 messages      6 live  total    12k (-29.2k) of 128k  pressure LOW       compacted, now 1 compaction"
        );
        let same = event("prepare", 6, 12_000, 1, json!([]));
        let line = event_line("12:03:10", &same, Seen::of_event(&compacted), false);
        assert!(line.contains("  +0 messages "), "{line}");
        assert!(line.ends_with("pressure LOW"), "{line}");
    }

    #[test]
    fn the_pressure_column_keeps_its_width_in_colour() {
        let medium = event("prepare", 1, 70_000, 0, json!(["offloaded"]));
        let line = event_line("12:00:00", &medium, Seen::default(), true);
        assert!(
            line.ends_with("pressure \x1b[33mMEDIUM\x1b[0m    offloaded"),
            "{line:?}"
        );
        assert!(line.contains("+1 message "), "{line}");
    }

    #[test]
    fn a_compaction_shows_when_it_starts_and_what_it_dropped_when_it_ends() {
        let seen = Seen {
            messages: 83,
            total: 13_000,
            compactions: 0,
        };
        let mut started = event("compaction_started", 83, 13_000, 0, json!([]));
        started.compaction = serde_json::from_value(json!({
            "manual": false, "messages": 72, "tokens_before": 13_300, "threshold": 13_107
        }))
        .unwrap();
        assert_eq!(
            event_line("22:35:22", &started, seen, false),
            "22:35:22  compacting 72 messages of 83 live at 13.3k tokens (threshold 13.1k)"
        );
        let mut done = event("prepare", 11, 2_400, 1, json!(["compacted"]));
        done.compaction = serde_json::from_value(json!({
            "id": "c0001", "manual": false, "messages": 72, "tokens_before": 13_300, "tokens_after": 2_400,
            "threshold": 13_107,
            "dropped": [{"kind": "command", "text": "cargo test -p parser", "index": 4, "mentions": 2}]
        }))
        .unwrap();
        let line = event_line("22:35:22", &done, seen, false);
        assert!(
            line.ends_with("compacted, now 1 compaction, c0001 13.3k -> 2.4k, no longer named: `cargo test -p parser`"),
            "{line}"
        );
    }
}
