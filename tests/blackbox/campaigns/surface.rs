//! The kill -9 campaign beyond `context.prepare`: each client also writes and appends to memory
//! files of its own, observes learning candidates (and runs their gates), pins, unpins and
//! purges, and brings compacted spans back with `context.expand`. After each restart what was
//! acknowledged must be there, once and whole: every acknowledged memory append in its file
//! exactly once, every acknowledged `memory.write` the file's content (or a later write's),
//! pins and purges listed by `context.inspect`, observed candidates in `candidates.list` with
//! their observations and no rejected line, a pending expansion carried by the next request,
//! and no temp file of an interrupted write left behind. A call whose reply the kill took may
//! have landed or not, never half.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Answer, Client, Conn, KillTally, Rng, count};
use crate::support::trajectories::Format;

mod after_restart;

pub(super) use after_restart::{
    atomic_temps, check_candidates, check_session, check_temps_removed, note_temps_after_kill,
};

/// At most this many pins per session: more are unpinned first (pinned content is sent in
/// every request, and the small windows have room for little of it).
const MAX_PINS: usize = 3;
/// The budget of an expansion: small enough for the 4,096-token windows.
const EXPAND_TOKENS: u64 = 700;
/// JSON-RPC's invalid params: a refusal (a pin over the pinned share of the window, an
/// expansion with no room); it must change nothing.
const INVALID_PARAMS: i64 = -32602;

/// What one client sent beyond its messages, acknowledged or not.
#[derive(Default)]
pub(super) struct Surface {
    serial: usize,
    /// Lines of the client's append file the daemon acknowledged, in order.
    appended: Vec<String>,
    /// Lines of appends whose outcome the client never learned.
    appending: Vec<String>,
    /// The content of the client's write file as last acknowledged.
    written: Option<String>,
    /// Contents of writes whose outcome the client never learned (sent after `written`).
    writing: Vec<String>,
    /// The session's pins as the last acknowledged pin call (or check) listed them.
    pins: Vec<Value>,
    /// A pin or unpin whose outcome the client never learned.
    pins_unsure: bool,
    /// Results purged with an acknowledgement.
    purged: BTreeSet<String>,
    /// Results of purges whose outcome the client never learned.
    purging: BTreeSet<String>,
    /// An acknowledged `context.expand` the next request must carry.
    expand_owed: bool,
    /// An expand, or a request that may have carried one, whose outcome is unknown.
    expand_unsure: bool,
}

impl Surface {
    fn next(&mut self) -> usize {
        self.serial += 1;
        self.serial
    }

    /// A `context.prepare` of this client is in flight or lost: it may have carried the span.
    pub(super) fn prepare_unsure(&mut self) {
        if self.expand_owed {
            self.expand_unsure = true;
        }
    }
}

/// The campaign's view of the workspace's candidate store, and what the surface counted.
#[derive(Default)]
pub(super) struct Shared {
    /// Acknowledged observations per candidate id.
    observed: BTreeMap<String, u64>,
    /// Observations whose outcome is unknown.
    observing: u64,
    /// Temp files of atomic writes found after a kill, to be gone after the restart.
    temps_left: Vec<PathBuf>,
    pub(super) counts: Counts,
}

/// What the surface calls did.
#[derive(Default, Debug)]
pub(super) struct Counts {
    pub(super) memory_appends: usize,
    pub(super) memory_writes: usize,
    pub(super) observations: usize,
    pub(super) evaluations: usize,
    pub(super) pins: usize,
    pub(super) unpins: usize,
    pub(super) purges: usize,
    pub(super) expands: usize,
    pub(super) expansions_carried: usize,
    /// Calls refused with -32602 (a pin over its share of the window, say).
    pub(super) refused: usize,
    /// Surface calls sent for a kill to interrupt.
    pub(super) in_flight: usize,
    /// Unacknowledged surface calls found landed after the restart.
    pub(super) landed_unacknowledged: usize,
    /// Temp files of interrupted atomic writes found after kills (all removed by the next start).
    pub(super) temps_after_kills: usize,
}

fn append_rel(c: &Client) -> String {
    format!("memory/kill9/{}.md", c.session)
}

fn write_rel(c: &Client) -> String {
    format!("memory/kill9/{}-notes.md", c.session)
}

/// Ten random words: two observations never look alike (token Jaccard well under 0.50), so
/// each is a candidate of its own, never promoted (one observation is never enough), and no
/// request's system prompt changes.
fn random_words(rng: &mut Rng) -> String {
    (0..10)
        .map(|_| format!("w{:06x}", rng.next_u64() & 0xff_ffff))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One surface call on `c`, its reply awaited.
pub(super) fn call(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    // Expansions and text or message pins change the request's shape; the checks read them
    // back in OpenAI format only (the pinned block and the span are messages of their own).
    let ops = if c.format == Format::Openai { 7 } else { 5 };
    match rng.below(ops) {
        0 => memory_append(conn, c, rng, t),
        1 => memory_write(conn, c, rng, t),
        2 if rng.chance(75) => observe(conn, c, rng, t),
        2 => match conn.call("candidates.evaluate", json!({}), t) {
            Answer::Done(_) => t.shared.counts.evaluations += 1,
            Answer::Failed(error) => t.problem(format!("candidates.evaluate failed: {error}")),
            Answer::Missing => {}
        },
        3 => pin_result_or_unpin(conn, c, rng, t),
        4 => purge(conn, c, rng, t),
        5 => pin_text_or_message(conn, c, rng, t),
        _ => expand(conn, c, t),
    }
}

fn memory_append(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    let n = c.surface.next();
    let line = format!("- [{} a{n}] {}", c.session, random_words(rng));
    let params = json!({"path": append_rel(c), "text": format!("{line}\n")});
    match conn.call("memory.append", params, t) {
        Answer::Done(result) => {
            c.surface.appended.push(line);
            t.shared.counts.memory_appends += 1;
            if result["warnings"].as_array().is_some_and(|w| !w.is_empty()) {
                // Allowed (issue 27 item 4: the index is behind), but not expected here.
                t.problem(format!(
                    "memory.append of {} succeeded with warnings: {result}",
                    c.session
                ));
            }
        }
        Answer::Failed(error) => t.problem(format!("memory.append of {} failed: {error}", c.session)),
        Answer::Missing => c.surface.appending.push(line),
    }
}

fn memory_write(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    let n = c.surface.next();
    let content = format!("# Notes of {} (v{n})\n\n- {}\n", c.session, random_words(rng));
    let params = json!({"path": write_rel(c), "content": content});
    match conn.call("memory.write", params, t) {
        Answer::Done(_) => {
            c.surface.written = Some(content);
            c.surface.writing.clear();
            t.shared.counts.memory_writes += 1;
        }
        Answer::Failed(error) => t.problem(format!("memory.write of {} failed: {error}", c.session)),
        Answer::Missing => c.surface.writing.push(content),
    }
}

fn observe_params(c: &mut Client, rng: &mut Rng) -> Value {
    let n = c.surface.next();
    let kind = *rng.pick(&["rule", "preference", "lesson", "correction"]);
    json!({"text": format!("{} o{n}: {}", c.session, random_words(rng)), "kind": kind,
           "session_id": c.session, "tags": ["kill9"],
           "evidence": {"note": format!("observed by {} at step {}", c.session, c.step)}})
}

fn observe(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    let params = observe_params(c, rng);
    match conn.call("candidates.observe", params, t) {
        Answer::Done(result) => {
            let id = result["candidate"]["id"].as_str().unwrap_or_default().to_owned();
            if result["merged"] == true {
                t.problem(format!("an observation unlike any other was merged: {result}"));
            }
            *t.shared.observed.entry(id).or_default() += 1;
            t.shared.counts.observations += 1;
        }
        Answer::Failed(error) => t.problem(format!("candidates.observe failed: {error}")),
        Answer::Missing => t.shared.observing += 1,
    }
}

/// The fields of a pin that identify it (`in_block` and `chars` change with compactions).
fn pin_key(pin: &Value) -> Value {
    json!([
        pin["id"],
        pin["kind"],
        pin["label"],
        pin["message_index"],
        pin["result_id"]
    ])
}

fn pin_keys(pins: &[Value]) -> Vec<Value> {
    pins.iter().map(pin_key).collect()
}

/// Sends a pin or unpin call and takes the pins its reply lists.
fn pin_call(conn: &mut Conn, c: &mut Client, method: &str, params: Value, t: &mut KillTally) {
    match conn.call(method, params.clone(), t) {
        Answer::Done(result) => {
            c.surface.pins = result["pins"].as_array().cloned().unwrap_or_default();
            if method == "context.pin" {
                t.shared.counts.pins += 1;
            } else {
                t.shared.counts.unpins += 1;
            }
        }
        Answer::Failed(error) if error["code"] == INVALID_PARAMS && method == "context.pin" => {
            t.shared.counts.refused += 1;
        }
        Answer::Failed(error) => t.problem(format!("{method} {params} failed: {error}")),
        Answer::Missing => c.surface.pins_unsure = true,
    }
}

/// Unpins the oldest pin when the session has [`MAX_PINS`], or now and then; true when it did.
fn unpin_some(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) -> bool {
    if c.surface.pins.is_empty() || (c.surface.pins.len() < MAX_PINS && !rng.chance(25)) {
        return false;
    }
    let pin_id = c.surface.pins[0]["id"].clone();
    pin_call(
        conn,
        c,
        "context.unpin",
        json!({"session_id": c.session, "pin_id": pin_id}),
        t,
    );
    true
}

/// The offloaded results of the session's live messages, by a fresh `context.inspect`.
fn offloaded(conn: &mut Conn, c: &Client, t: &mut KillTally) -> Option<Vec<Value>> {
    match conn.call("context.inspect", json!({"session_id": c.session}), t) {
        Answer::Done(inspect) => Some(inspect["offloaded"].as_array().cloned().unwrap_or_default()),
        Answer::Failed(error) => {
            t.problem(format!("context.inspect of {} failed: {error}", c.session));
            None
        }
        Answer::Missing => None,
    }
}

/// Results neither pinned nor purged (acknowledged or not): a target for either.
fn free_results(c: &Client, offloaded: &[Value]) -> Vec<String> {
    let pinned: BTreeSet<&str> = c.surface.pins.iter().filter_map(|p| p["result_id"].as_str()).collect();
    let pinned_messages: BTreeSet<u64> = c
        .surface
        .pins
        .iter()
        .filter_map(|p| p["message_index"].as_u64())
        .collect();
    offloaded
        .iter()
        .filter(|o| o["pinned"] != true && o["purged"] != true)
        .filter(|o| o["index"].as_u64().is_none_or(|i| !pinned_messages.contains(&i)))
        .filter_map(|o| o["id"].as_str())
        .filter(|id| !pinned.contains(id) && !c.surface.purged.contains(*id) && !c.surface.purging.contains(*id))
        .map(str::to_owned)
        .collect()
}

fn pin_result_or_unpin(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    if c.acked.is_empty() || c.surface.pins_unsure || unpin_some(conn, c, rng, t) {
        return;
    }
    let Some(offloaded) = offloaded(conn, c, t) else { return };
    let free = free_results(c, &offloaded);
    if free.is_empty() {
        return;
    }
    let result_id = rng.pick(&free).clone();
    let params = json!({"session_id": c.session, "result_id": result_id, "label": format!("result {result_id}")});
    pin_call(conn, c, "context.pin", params, t);
}

fn pin_text_or_message(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    if c.acked.is_empty() || c.surface.pins_unsure || unpin_some(conn, c, rng, t) {
        return;
    }
    let n = c.surface.next();
    let params = if rng.chance(50) {
        json!({"session_id": c.session, "text": format!("[{}] rule {n}: keep module {n}'s API stable.", c.session)})
    } else {
        let index = rng.below(c.acked.len());
        json!({"session_id": c.session, "message_index": index, "label": format!("message {index}")})
    };
    pin_call(conn, c, "context.pin", params, t);
}

fn purge(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    if c.acked.is_empty() || c.surface.pins_unsure {
        return;
    }
    let Some(offloaded) = offloaded(conn, c, t) else { return };
    let free = free_results(c, &offloaded);
    if free.is_empty() {
        return;
    }
    let result_id = rng.pick(&free).clone();
    match conn.call(
        "context.purge",
        json!({"session_id": c.session, "result_id": result_id}),
        t,
    ) {
        Answer::Done(_) => {
            c.surface.purged.insert(result_id);
            t.shared.counts.purges += 1;
        }
        Answer::Failed(error) => t.problem(format!("context.purge of {result_id} in {} failed: {error}", c.session)),
        Answer::Missing => {
            c.surface.purging.insert(result_id);
        }
    }
}

fn expand(conn: &mut Conn, c: &mut Client, t: &mut KillTally) {
    if c.acked.is_empty() {
        return;
    }
    let compactions = match conn.call("context.inspect", json!({"session_id": c.session}), t) {
        Answer::Done(inspect) => inspect["compactions"].as_array().cloned().unwrap_or_default(),
        Answer::Failed(error) => return t.problem(format!("context.inspect of {} failed: {error}", c.session)),
        Answer::Missing => return,
    };
    let Some(last) = compactions.last() else { return };
    let params = json!({"session_id": c.session, "compaction_id": last["id"], "max_tokens": EXPAND_TOKENS});
    match conn.call("context.expand", params, t) {
        Answer::Done(result) => {
            t.shared.counts.expands += 1;
            c.surface.expand_owed = count(&result["messages"]) > 0;
        }
        Answer::Failed(error) if error["code"] == INVALID_PARAMS => t.shared.counts.refused += 1,
        Answer::Failed(error) => t.problem(format!("context.expand of {} failed: {error}", c.session)),
        Answer::Missing => c.surface.expand_unsure = true,
    }
}

/// Sends one surface call on `c` without reading its reply, for the kill to interrupt: its
/// outcome stays unknown.
pub(super) fn send_in_flight(conn: &mut Conn, c: &mut Client, rng: &mut Rng, t: &mut KillTally) {
    t.shared.counts.in_flight += 1;
    let d = &mut conn.daemon;
    match rng.below(5) {
        0 | 1 => {
            let n = c.surface.next();
            let line = format!("- [{} a{n}] {}", c.session, random_words(rng));
            d.request(
                "memory.append",
                json!({"path": append_rel(c), "text": format!("{line}\n")}),
            );
            c.surface.appending.push(line);
        }
        2 => {
            let n = c.surface.next();
            let content = format!("# Notes of {} (v{n})\n\n- {}\n", c.session, random_words(rng));
            d.request("memory.write", json!({"path": write_rel(c), "content": content}));
            c.surface.writing.push(content);
        }
        3 => {
            let params = observe_params(c, rng);
            d.request("candidates.observe", params);
            t.shared.observing += 1;
        }
        _ if c.format == Format::Openai && !c.acked.is_empty() && !c.surface.pins_unsure => {
            let n = c.surface.next();
            let text = format!("[{}] rule {n}: keep module {n}'s API stable.", c.session);
            d.request("context.pin", json!({"session_id": c.session, "text": text}));
            c.surface.pins_unsure = true;
        }
        _ => {
            d.request("candidates.evaluate", json!({}));
        }
    }
}

/// Checks what a successful `context.prepare` of `c` says about a pending expansion and
/// returns the result to keep as the client's last: when the request carried a span, a
/// second prepare of the same list (which carries none) so that the request is the session's
/// messages alone; `None` if that second call got no reply.
pub(super) fn after_prepare(conn: &mut Conn, c: &mut Client, result: Value, t: &mut KillTally) -> Option<Value> {
    let carried = result["tokens"]["expanded"].as_u64().unwrap_or(0) > 0;
    let s = &mut c.surface;
    if !s.expand_unsure && s.expand_owed && !carried {
        t.problem(format!(
            "{}: the request after an acknowledged context.expand carries no span: {}",
            c.session, result["tokens"]
        ));
    }
    if !s.expand_unsure && !s.expand_owed && carried {
        t.problem(format!(
            "{}: a request carries a span no acknowledged context.expand asked for (or a second time): {}",
            c.session, result["tokens"]
        ));
    }
    s.expand_owed = false;
    s.expand_unsure = false;
    if !carried {
        return Some(result);
    }
    t.shared.counts.expansions_carried += 1;
    let params = c.params("messages", c.acked.clone());
    match conn.call("context.prepare", params, t) {
        Answer::Done(again) => {
            if again["tokens"]["expanded"].as_u64().unwrap_or(0) > 0 {
                t.problem(format!("{}: a span was carried by two requests", c.session));
            }
            t.saw(&again);
            Some(again)
        }
        Answer::Failed(error) => {
            t.problem(format!("a resend to {} after its expansion failed: {error}", c.session));
            None
        }
        Answer::Missing => None,
    }
}

/// Whether `m` is the pinned block of a request without a summary (a message of its own).
pub(super) fn is_pinned_block(m: &Value) -> bool {
    m["content"].as_str().is_some_and(|s| s.starts_with("# Pinned context"))
}

/// `message` with every purged result's stub replaced by the file it names, read from disk.
pub(super) fn restore_purged(workspace: &Path, message: &Value) -> Value {
    const STUB: &str = "was purged from the requests by the client; the full text is in ";
    match message {
        Value::String(text) if text.starts_with("[satchel: result ") && text.contains(STUB) => {
            let rest = &text[text.find(STUB).unwrap() + STUB.len()..];
            let file: Option<String> = serde_json::Deserializer::from_str(rest)
                .into_iter::<String>()
                .next()
                .and_then(Result::ok);
            file.and_then(|f| fs::read_to_string(workspace.join(f)).ok())
                .map_or_else(|| message.clone(), Value::String)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| restore_purged(workspace, v)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), restore_purged(workspace, v)))
                .collect(),
        ),
        other => other.clone(),
    }
}
