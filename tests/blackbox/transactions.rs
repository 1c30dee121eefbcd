//! Calls as transactions, against the real binary: a cancelled call has no effect, a
//! completed one counts exactly once, calls on one session run in arrival order, a stale
//! `append` is refused, and a daemon serving many sessions keeps a bounded number in memory.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Rng;
use crate::support::builders::{assistant, user};
use crate::support::{Daemon, Framing, expect_result};

/// How long to wait before cancelling: often not at all (the cancel arrives with the call),
/// sometimes long enough for the call to have finished.
const CANCEL_DELAYS_MS: [u64; 7] = [0, 0, 1, 2, 5, 20, 80];

/// A summary the test's client returns for `summarizer.complete`.
const CLIENT_SUMMARY: &str = "## Goal\n- keep the build green\n## Progress\n### Done\n- [x] ran the tests";

/// The client side of the campaign: one daemon, the history each session holds as far as
/// the client knows, and the ids of every reply already seen (a second one is a defect).
struct Campaign {
    daemon: Daemon,
    rng: Rng,
    seen_replies: std::collections::HashSet<u64>,
}

/// When the client cancels a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelAt {
    /// A random delay after sending it.
    AfterDelay,
    /// As the daemon asks the client's model to summarise, before answering it.
    WhileSummarizing,
    /// A random delay after answering the daemon's summarisation request.
    AfterSummarizing,
}

/// How a call ended.
enum Ended {
    Result(Value),
    Cancelled,
}

impl Campaign {
    /// Sends `method` and a `$/cancelRequest` for it at `when`, answers the daemon's
    /// `summarizer.complete` requests, and returns how the call ended.
    fn call_and_cancel(&mut self, method: &str, params: Value, when: CancelAt) -> Ended {
        let delay = CANCEL_DELAYS_MS[self.rng.below(CANCEL_DELAYS_MS.len() as u64) as usize];
        let id = self.daemon.request(method, params);
        let cancel = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}});
        if when == CancelAt::AfterDelay {
            std::thread::sleep(Duration::from_millis(delay));
            self.daemon.send(&cancel, Framing::Ndjson);
        }
        loop {
            let (_, frame) = self.daemon.next_frame();
            if frame["method"] == "summarizer.complete" {
                let answer = json!({"jsonrpc": "2.0", "id": frame["id"], "result": {"text": CLIENT_SUMMARY}});
                let (first, then) = match when {
                    CancelAt::WhileSummarizing => (&cancel, &answer),
                    _ => (&answer, &cancel),
                };
                self.daemon.send(first, Framing::Ndjson);
                std::thread::sleep(Duration::from_millis(delay));
                if when != CancelAt::AfterDelay {
                    self.daemon.send(then, Framing::Ndjson);
                }
                continue;
            }
            if frame.get("method").is_some() {
                continue; // $/progress, context.event
            }
            let reply_id = frame["id"].as_u64().expect("a reply to one of the test's calls");
            assert!(
                self.seen_replies.insert(reply_id),
                "a second reply to call {reply_id}: {frame}"
            );
            assert_eq!(reply_id, id, "a reply to a call that was already answered: {frame}");
            if let Some(error) = frame.get("error") {
                assert_eq!(error["code"], -32800, "{method} failed: {frame}");
                return Ended::Cancelled;
            }
            return Ended::Result(frame["result"].clone());
        }
    }

    /// Calls a method that must succeed, checking it is answered once.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let reply = self.daemon.call_raw(method, params);
        let id = reply["id"].as_u64().expect("numeric id");
        assert!(self.seen_replies.insert(id), "a second reply to call {id}");
        expect_result(method, reply)
    }

    /// Checks that the session holds exactly `history`: resending it reuses every message.
    fn assert_holds(&mut self, session: &str, history: &[Value], config: &Value, why: &str) {
        let result = self.call(
            "context.prepare",
            json!({"session_id": session, "messages": history, "config": config}),
        );
        let reconciliation = &result["reconciliation"];
        assert_eq!(
            (
                reconciliation["reused"].as_u64(),
                reconciliation["appended"].as_u64(),
                reconciliation["replaced"].as_u64(),
                reconciliation["session_messages"].as_u64()
            ),
            (Some(history.len() as u64), Some(0), Some(0), Some(history.len() as u64)),
            "{why}: the session does not hold exactly what the client was told"
        );
    }
}

/// While a call on one session waits (its compaction asks the client's model), a call on
/// another session is answered, and a later call on the waiting session waits its turn.
#[test]
fn a_waiting_session_holds_up_only_its_own_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    daemon.call("initialize", json!({"capabilities": {"summarizer_complete": true}}));
    let history: Vec<Value> = (0..6).flat_map(|n| turn("t", n, 40)).collect();
    for session in ["slow", "fast"] {
        daemon.call("context.prepare", json!({"session_id": session, "messages": history}));
    }
    let compact = daemon.request(
        "context.compact",
        json!({"session_id": "slow", "config": {"summarizer": "client", "llm_timeout_secs": 600}}),
    );
    let asked = loop {
        let (_, frame) = daemon.next_frame();
        assert!(frame.get("method").is_some(), "a reply before the model ran: {frame}");
        if frame["method"] == "summarizer.complete" {
            break frame;
        }
    };
    let behind = daemon.request(
        "context.prepare",
        json!({"session_id": "slow", "append": turn("t", 6, 1)}),
    );
    let other = daemon.request(
        "context.prepare",
        json!({"session_id": "fast", "append": turn("t", 6, 1)}),
    );
    let mut replies = std::collections::HashMap::new();
    while !replies.contains_key(&other) {
        let (_, frame) = daemon.next_frame();
        if let Some(id) = frame["id"].as_u64().filter(|_| frame.get("method").is_none()) {
            replies.insert(id, frame);
        }
    }
    assert_eq!(
        replies.keys().collect::<Vec<_>>(),
        [&other],
        "only the other session's call is answered while the model runs"
    );
    daemon.send(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"text": CLIENT_SUMMARY}}),
        Framing::Ndjson,
    );
    while replies.len() < 3 {
        let (_, frame) = daemon.next_frame();
        if let Some(id) = frame["id"].as_u64().filter(|_| frame.get("method").is_none()) {
            replies.insert(id, frame);
        }
    }
    // Replies may cross on the wire; what ran first shows in the results: the call behind
    // the compaction sees its summary, and the session holds every message once.
    let compacted = &replies[&compact]["result"];
    assert!(compacted["summary"].is_object(), "{compacted}");
    let after = &replies[&behind]["result"];
    assert!(
        after["tokens"]["summary"].as_u64() > Some(0),
        "it ran after the compaction: {after}"
    );
    assert_eq!(
        after["reconciliation"]["session_messages"].as_u64(),
        Some(history.len() as u64 + 2),
        "{after}"
    );
    daemon.shutdown();
}

/// Turn `n` of a plain chat tagged `tag`, its texts padded with `filler` words.
fn turn(tag: &str, n: usize, filler: usize) -> Vec<Value> {
    vec![
        user(&format!("{tag} request {n}: {}", "context ".repeat(filler))),
        assistant(&format!("{tag} answer {n}: {}", "done ".repeat(filler))),
    ]
}

/// What one scenario of the campaign saw.
#[derive(Default, Debug)]
struct Tally {
    cancelled: usize,
    completed: usize,
}

#[test]
fn a_cancelled_call_has_no_effect_and_a_completed_one_counts_exactly_once() {
    let trials: usize = std::env::var("SATCHEL_CANCEL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let mut campaign = Campaign {
        daemon: Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]),
        rng: Rng(0x5eed_cafe_f00d_0001),
        seen_replies: Default::default(),
    };
    campaign.call("initialize", json!({"capabilities": {"summarizer_complete": true}}));
    let plain = json!({});
    // A window small enough that every few turns compact.
    let small = json!({"max_input_length": 4096, "summary_max_tokens": 400});
    let client = json!({"summarizer": "client", "llm_timeout_secs": 30});
    let scenarios = [
        "append",
        "full resend",
        "compaction in progress",
        "client summariser in progress",
    ];
    let mut histories: Vec<Vec<Value>> = vec![Vec::new(); scenarios.len()];
    let mut tallies: Vec<Tally> = (0..scenarios.len()).map(|_| Tally::default()).collect();
    for (s, name) in scenarios.iter().enumerate() {
        let session = format!("s{s}");
        histories[s] = turn(name, 0, 40);
        let config = if s == 2 { &small } else { &plain };
        campaign.call(
            "context.prepare",
            json!({"session_id": session, "messages": histories[s], "config": config}),
        );
    }
    for trial in 0..trials {
        let s = trial % scenarios.len();
        let session = format!("s{s}");
        let filler = if s == 2 { 120 } else { 10 };
        let new = turn(scenarios[s], trial + 1, filler);
        let config = if s == 2 { &small } else { &plain };
        let ended = match s {
            0 | 2 => campaign.call_and_cancel(
                "context.prepare",
                json!({"session_id": session, "append": new, "config": config}),
                CancelAt::AfterDelay,
            ),
            1 => {
                let full: Vec<Value> = histories[s].iter().chain(&new).cloned().collect();
                campaign.call_and_cancel(
                    "context.prepare",
                    json!({"session_id": session, "messages": full, "config": config}),
                    CancelAt::AfterDelay,
                )
            }
            _ => {
                // Something new to compact, then a manual compaction by the client's model.
                campaign.call(
                    "context.prepare",
                    json!({"session_id": session, "append": new, "config": config}),
                );
                histories[s].extend(new.iter().cloned());
                let before = campaign.call("context.inspect", json!({"session_id": session}));
                // Half the time the cancel comes while the client's model runs, otherwise at a
                // random moment (often after the compaction committed).
                let when = if campaign.rng.below(2) == 0 {
                    CancelAt::WhileSummarizing
                } else {
                    CancelAt::AfterSummarizing
                };
                let ended = campaign.call_and_cancel(
                    "context.compact",
                    json!({"session_id": session, "config": client}),
                    when,
                );
                let after = campaign.call("context.inspect", json!({"session_id": session}));
                let compactions = |v: &Value| v["compactions"].as_array().map_or(0, Vec::len);
                match &ended {
                    Ended::Cancelled => {
                        assert_eq!(
                            compactions(&after),
                            compactions(&before),
                            "cancelled compaction took effect"
                        );
                        assert_eq!(
                            after["messages"], before["messages"],
                            "cancelled compaction took effect"
                        );
                        assert_eq!(
                            after["summary"], before["summary"],
                            "cancelled compaction changed the summary"
                        );
                    }
                    Ended::Result(result) => {
                        let expected = compactions(&before) + usize::from(result["compaction"].is_object());
                        assert_eq!(compactions(&after), expected, "a compaction counted other than once");
                    }
                }
                ended
            }
        };
        match ended {
            Ended::Cancelled => {
                tallies[s].cancelled += 1;
                if s != 3 {
                    let history = histories[s].clone();
                    campaign.assert_holds(&session, &history, config, "after a cancelled prepare");
                }
            }
            Ended::Result(result) => {
                tallies[s].completed += 1;
                if s != 3 {
                    histories[s].extend(new);
                    assert_eq!(
                        result["reconciliation"]["session_messages"].as_u64(),
                        Some(histories[s].len() as u64),
                        "a completed prepare counted other than once"
                    );
                    if trial % 3 == 0 {
                        let history = histories[s].clone();
                        campaign.assert_holds(&session, &history, config, "after a completed prepare");
                    }
                }
            }
        }
    }
    for (s, name) in scenarios.iter().enumerate() {
        let history = histories[s].clone();
        let config = if s == 2 { &small } else { &plain };
        campaign.assert_holds(&format!("s{s}"), &history, config, "at the end");
        eprintln!("{name}: {:?}", tallies[s]);
    }
    // The campaign proves something only if both outcomes happened in every scenario.
    if trials >= 100 {
        for (tally, name) in tallies.iter().zip(scenarios) {
            assert!(
                tally.cancelled > 0 && tally.completed > 0,
                "{name}: only one outcome in the campaign: {tally:?}"
            );
        }
    }
    if trials >= 100 {
        let auto = campaign.call("context.inspect", json!({"session_id": "s2"}));
        assert!(
            auto["compactions"].as_array().is_some_and(|c| c.len() >= 3),
            "the small window compacted: {auto}"
        );
    }
}

#[test]
fn pipelined_calls_on_one_session_run_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let message = |n: usize| {
        let role = if n.is_multiple_of(2) { "user" } else { "assistant" };
        json!({"role": role, "content": format!("m{n:03}")})
    };
    for run in 0..20 {
        let session = format!("order-{run}");
        // Nothing waits for a reply: create, compact at once, then 40 appends.
        let create = daemon.request(
            "context.prepare",
            json!({"session_id": session, "messages": [message(0)]}),
        );
        let compact = daemon.request("context.compact", json!({"session_id": session}));
        let appends: Vec<u64> = (1..=40)
            .map(|n| {
                daemon.request(
                    "context.prepare",
                    json!({"session_id": session, "append": [message(n)]}),
                )
            })
            .collect();
        let mut replies = std::collections::HashMap::new();
        while replies.len() < 42 {
            let (_, frame) = daemon.next_frame();
            if let Some(id) = frame["id"].as_u64() {
                assert!(replies.insert(id, frame).is_none(), "two replies to one call");
            }
        }
        assert!(replies[&create].get("result").is_some(), "{:?}", replies[&create]);
        assert!(
            replies[&compact].get("result").is_some(),
            "context.compact right after the prepare that creates the session: {:?}",
            replies[&compact]
        );
        for (n, id) in appends.iter().enumerate() {
            let result = &replies[id]["result"];
            assert_eq!(
                result["reconciliation"]["session_messages"].as_u64(),
                Some(n as u64 + 2),
                "append {} ran out of order: {}",
                n + 1,
                replies[id]
            );
        }
        let history: Vec<Value> = (0..=40).map(message).collect();
        let resent = daemon.call("context.prepare", json!({"session_id": session, "messages": history}));
        assert_eq!(
            resent["reconciliation"]["reused"].as_u64(),
            Some(41),
            "run {run}: the session's order differs from the order sent"
        );
    }
}

#[test]
fn an_append_whose_expected_count_is_stale_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let first = turn("guard", 0, 1);
    daemon.call("context.prepare", json!({"session_id": "g", "messages": first}));
    let next = turn("guard", 1, 1);
    let ok = daemon.call(
        "context.prepare",
        json!({"session_id": "g", "append": next, "expect_messages": 2}),
    );
    assert_eq!(ok["reconciliation"]["session_messages"], 4);
    // The reply was "lost": the client retries with the count it had.
    let error = daemon.call_err(
        "context.prepare",
        json!({"session_id": "g", "append": next, "expect_messages": 2}),
    );
    assert_eq!(error["code"], -32009, "{error}");
    assert_eq!(error["data"]["name"], "StaleSession");
    assert_eq!(error["data"]["details"]["session_messages"], 4);
    assert!(
        error["message"].as_str().unwrap().contains("holds 4 messages"),
        "{error}"
    );
    let inspected = daemon.call("context.inspect", json!({"session_id": "g"}));
    assert_eq!(inspected["messages"], 4, "the refused append changed the session");
}

/// Resident memory of a process, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc status")
}

#[test]
fn a_thousand_sessions_with_fifty_live_stay_in_memory_budget_and_all_still_answer() {
    let sessions: usize = std::env::var("SATCHEL_EVICTION_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let live_budget = 50;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(
        dir.path(),
        &[
            ("SATCHEL_TOKENIZER", "estimate"),
            ("SATCHEL_MAX_LIVE_SESSIONS", &live_budget.to_string()),
        ],
    );
    // About 100 KB of history per session: 1,000 of them held at once would be ~100 MB
    // of JSON, several times that in memory.
    let history = |n: usize| -> Vec<Value> { (0..12).flat_map(|t| turn(&format!("session {n}"), t, 800)).collect() };
    let mut warm_kib = 0;
    for n in 0..sessions {
        let result = daemon.call(
            "context.prepare",
            json!({"session_id": format!("e{n}"), "messages": history(n)}),
        );
        assert_eq!(result["reconciliation"]["session_messages"], 24);
        if n + 1 == 2 * live_budget {
            warm_kib = resident_kib(daemon.pid());
        }
    }
    let end_kib = resident_kib(daemon.pid());
    let listed = daemon.call("context.sessions", json!({}));
    let live = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["live"] == true)
        .count();
    assert!(live <= live_budget, "{live} sessions live, budget {live_budget}");
    eprintln!(
        "resident memory: {warm_kib} KiB after {} sessions, {end_kib} KiB after {sessions}",
        2 * live_budget
    );
    assert!(
        end_kib < warm_kib + 64 * 1024,
        "memory grew from {warm_kib} KiB to {end_kib} KiB over {sessions} sessions with {live_budget} live"
    );
    // Every session, evicted or not, still answers as before.
    for n in 0..sessions {
        let result = daemon.call(
            "context.prepare",
            json!({"session_id": format!("e{n}"), "append": turn("again", n, 1), "expect_messages": 24}),
        );
        assert_eq!(
            result["reconciliation"]["session_messages"], 26,
            "session e{n} after eviction"
        );
        let first = &result["messages"][0]["content"];
        assert!(
            first.as_str().unwrap().starts_with(&format!("session {n} request 0")),
            "session e{n} lost its first message: {first}"
        );
    }
}
