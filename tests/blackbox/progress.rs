//! Black-box tests of LSP work-done progress and of abandoned requests to the client. The
//! test plays a client that runs the model (`summarizer.complete`): a `context.compact`
//! summarised in stages reports `window/workDoneProgress/create`, then `$/progress`
//! `begin`, `report`s and `end` under the created token, only to a client that declared
//! `window.workDoneProgress`; a `summarizer.complete` satchel stops waiting for is
//! cancelled with `$/cancelRequest`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::builders::{SYSTEM, assistant, system, user};
use crate::support::{Daemon, expect_result};

const SESSION: &str = "progress-session";

/// A valid model summary.
const SUMMARY: &str = "## Goal
- Make the parser crate build again

## Progress
### Done
- [x] Read the build log

## Next Steps
1. Run the tests again
";

/// Per-call config of `context.compact`: the client summariser, a small window so most of
/// the session is compacted, and a small input budget so it is summarised in several stages.
fn config() -> Value {
    json!({
        "summarizer": "client",
        "max_input_length": 8192,
        "tokenizer": "estimate",
        "llm_input_budget_tokens": 1000,
        "llm_max_output_tokens": 100,
    })
}

/// A daemon (with `env`) whose client declared `capabilities`, holding a session long enough
/// for a staged summary and far below any compaction threshold.
fn start(capabilities: Value, env: &[(&str, &str)]) -> (tempfile::TempDir, Daemon) {
    start_logging(capabilities, env, None)
}

/// [`start`], with the daemon's log (stderr) written to `log` when given.
fn start_logging(
    capabilities: Value,
    env: &[(&str, &str)],
    log: Option<&std::path::Path>,
) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = match log {
        Some(log) => Daemon::start_logging_to(dir.path(), env, log),
        None => Daemon::start(dir.path(), env),
    };
    daemon.call("initialize", json!({"capabilities": capabilities}));
    let mut messages = vec![system(SYSTEM)];
    for turn in 0..30 {
        let detail = "the lexer reports an unexpected token in module parser::expr; ".repeat(5);
        messages.push(user(&format!("Step {turn}: fix the next build error. {detail}")));
        messages.push(assistant(&format!("Step {turn} is fixed: {detail}")));
    }
    let prepared = daemon.call("context.prepare", json!({"session_id": SESSION, "messages": messages}));
    assert!(
        prepared["actions"]
            .as_array()
            .is_none_or(|a| a.iter().all(|a| a["kind"] != "compacted")),
        "the setup compacted already: {prepared}"
    );
    (dir, daemon)
}

/// Calls `context.compact`, answering `summarizer.complete` with `summarize(id)` and
/// `window/workDoneProgress/create` with `create(id)`; returns the reply and every other
/// frame, in order.
fn compact(
    daemon: &mut Daemon,
    summarize: impl FnMut(&Value) -> Option<Value>,
    create: impl FnMut(&Value) -> Option<Value>,
) -> (Value, Vec<Value>) {
    compact_with(
        daemon,
        json!({"session_id": SESSION, "config": config()}),
        summarize,
        create,
    )
}

/// [`compact`] with these params.
fn compact_with(
    daemon: &mut Daemon,
    params: Value,
    mut summarize: impl FnMut(&Value) -> Option<Value>,
    mut create: impl FnMut(&Value) -> Option<Value>,
) -> (Value, Vec<Value>) {
    let mut frames = Vec::new();
    let reply = daemon.call_raw_answering("context.compact", params, |frame| {
        frames.push(frame.clone());
        match frame["method"].as_str() {
            Some("summarizer.complete") => summarize(&frame["id"]),
            Some("window/workDoneProgress/create") => create(&frame["id"]),
            _ => None,
        }
    });
    (reply, frames)
}

fn answer(id: &Value, result: Value) -> Option<Value> {
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn summarized(id: &Value) -> Option<Value> {
    answer(id, json!({"text": SUMMARY}))
}

fn of<'a>(frames: &'a [Value], method: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["method"] == method).collect()
}

#[test]
fn a_staged_compaction_reports_lsp_work_done_progress() {
    let capabilities = json!({"summarizer_complete": true, "window": {"workDoneProgress": true, "showMessage": {}}});
    let (_dir, mut daemon) = start(capabilities, &[]);
    let (reply, frames) = compact(&mut daemon, summarized, |id| answer(id, Value::Null));
    let result = expect_result("context.compact", reply);
    assert_eq!(result["compaction"]["summarizer"], "client", "{result}");
    let stages = of(&frames, "summarizer.complete").len();
    assert!(stages >= 2, "a staged summary, got {stages} stage(s)");

    // create, then begin, reports and end, all under the created token.
    let progress: Vec<&Value> = frames
        .iter()
        .filter(|f| f["method"] == "window/workDoneProgress/create" || f["method"] == "$/progress")
        .collect();
    let create = progress[0];
    assert_eq!(create["method"], "window/workDoneProgress/create", "{progress:?}");
    assert!(create["id"].is_string(), "a request: {create}");
    let token = create["params"]["token"].clone();
    assert!(token.is_string() || token.is_number(), "{create}");
    assert_eq!(
        of(&frames, "window/workDoneProgress/create").len(),
        1,
        "one token per compaction"
    );

    let values: Vec<&Value> = progress[1..].iter().map(|f| &f["params"]["value"]).collect();
    for frame in &progress[1..] {
        assert!(frame.get("id").is_none(), "a notification: {frame}");
        assert_eq!(frame["params"]["token"], token, "{frame}");
    }
    let kinds: Vec<&str> = values.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"begin"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
    assert!(
        kinds[1..kinds.len() - 1].iter().all(|k| *k == "report") && kinds.len() >= 3,
        "{kinds:?}"
    );
    assert_eq!(values[0]["title"], format!("Compacting {SESSION}"));
    assert_eq!(values[0]["cancellable"], true);
    let percentages: Vec<u64> = values[1..values.len() - 1]
        .iter()
        .map(|v| v["percentage"].as_u64().expect("a report has a percentage"))
        .collect();
    assert!(
        percentages.windows(2).all(|w| w[0] <= w[1]),
        "percentages go back: {percentages:?}"
    );
    assert_eq!(percentages.last(), Some(&100), "{percentages:?}");
    assert!(
        values[1..values.len() - 1].iter().all(|v| v["message"].is_string()),
        "{values:?}"
    );

    // The begin comes after the client accepted the token, and each stage is reported
    // before its model call.
    let position = |pred: &dyn Fn(&Value) -> bool| frames.iter().position(pred).unwrap();
    let begin = position(&|f| f["params"]["value"]["kind"] == "begin");
    let first_request = position(&|f| f["method"] == "summarizer.complete");
    assert!(begin < first_request, "{frames:?}");

    // A second compaction gets a fresh token.
    let (_, again) = compact(&mut daemon, summarized, |id| answer(id, Value::Null));
    let creates = of(&again, "window/workDoneProgress/create");
    if let Some(second) = creates.first() {
        assert_ne!(second["params"]["token"], token, "a fresh token per compaction");
    }
    daemon.shutdown();
}

#[test]
fn progress_goes_under_the_clients_own_work_done_token() {
    // LSP: a request may carry `workDoneToken`; then no token is created, and the client
    // needs no capability for it.
    for token in [json!(7), json!("edit-42")] {
        let (_dir, mut daemon) = start(json!({"summarizer_complete": true}), &[]);
        let params = json!({"session_id": SESSION, "config": config(), "workDoneToken": token});
        let (reply, frames) = compact_with(&mut daemon, params, summarized, |_| {
            panic!("no token is created when the client sent one")
        });
        expect_result("context.compact", reply);
        let progress = of(&frames, "$/progress");
        assert!(progress.iter().all(|f| f["params"]["token"] == token), "{progress:?}");
        let kinds: Vec<&str> = progress
            .iter()
            .map(|f| f["params"]["value"]["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"begin"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
        assert_eq!(kinds.iter().filter(|k| **k == "begin").count(), 1, "{kinds:?}");
        daemon.shutdown();
    }
    // The token of `context.prepare` too, and a token of another type is refused by name.
    let (_dir, mut daemon) = start(json!({"summarizer_complete": true}), &[]);
    let reply = daemon.call_raw(
        "context.prepare",
        json!({"session_id": SESSION, "append": [], "workDoneToken": {"no": 1}}),
    );
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    daemon.shutdown();
}

#[test]
fn a_client_that_refuses_the_token_gets_no_progress() {
    let capabilities = json!({"summarizer_complete": true, "window": {"workDoneProgress": true}});
    let (_dir, mut daemon) = start(capabilities, &[]);
    let (reply, frames) = compact(&mut daemon, summarized, |id| {
        Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "no"}}))
    });
    let result = expect_result("context.compact", reply);
    assert_eq!(result["compaction"]["summarizer"], "client", "{result}");
    assert_eq!(of(&frames, "window/workDoneProgress/create").len(), 1);
    assert!(of(&frames, "$/progress").is_empty(), "{frames:?}");
    daemon.shutdown();
}

#[test]
fn a_client_without_the_capability_gets_no_progress() {
    for capabilities in [
        json!({"summarizer_complete": true}),
        json!({"summarizer_complete": true, "window": {"workDoneProgress": false}}),
        json!({"summarizer_complete": true, "window": {}, "general": {"positionEncodings": ["utf-16"]}}),
    ] {
        let (_dir, mut daemon) = start(capabilities.clone(), &[]);
        let (reply, frames) = compact(&mut daemon, summarized, |_| {
            panic!("create sent without the capability")
        });
        let result = expect_result("context.compact", reply);
        assert_eq!(result["compaction"]["summarizer"], "client", "{capabilities}: {result}");
        assert!(!of(&frames, "summarizer.complete").is_empty());
        assert!(of(&frames, "$/progress").is_empty(), "{capabilities}: {frames:?}");
        assert!(
            of(&frames, "window/workDoneProgress/create").is_empty(),
            "{capabilities}: {frames:?}"
        );
        daemon.shutdown();
    }
}

#[test]
fn an_unanswered_summarizer_request_is_cancelled_and_the_compaction_falls_back() {
    let capabilities = json!({"summarizer_complete": true});
    let (_dir, mut daemon) = start(capabilities, &[("SATCHEL_LLM_TIMEOUT_SECS", "1")]);
    let started = Instant::now();
    let (reply, frames) = compact(&mut daemon, |_| None, |_| None);
    let result = expect_result("context.compact", reply);
    let backend = result["compaction"]["summarizer"].as_str().unwrap();
    assert!(
        backend.starts_with("extractive (fallback: ") && backend.contains("did not answer in time"),
        "{backend}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));

    let requests = of(&frames, "summarizer.complete");
    assert_eq!(requests.len(), 2, "one attempt and one retry: {frames:?}");
    let cancelled: Vec<&Value> = of(&frames, "$/cancelRequest")
        .iter()
        .map(|f| &f["params"]["id"])
        .collect();
    let asked: Vec<&Value> = requests.iter().map(|r| &r["id"]).collect();
    assert_eq!(cancelled, asked, "each abandoned request is cancelled: {frames:?}");
    // Each cancel comes after its request and before the retry.
    let at = |id: &Value, method: &str| {
        frames
            .iter()
            .position(|f| f["method"] == method && (f["id"] == *id || f["params"]["id"] == *id))
            .unwrap()
    };
    assert!(at(asked[0], "summarizer.complete") < at(asked[0], "$/cancelRequest"));
    assert!(at(asked[0], "$/cancelRequest") < at(asked[1], "summarizer.complete"));
    daemon.shutdown();
}

/// The client then answers the abandoned request with -32800, as LSP asks: an expected
/// answer, which the log does not take for a stray at warn level.
#[test]
fn a_cancelled_compaction_cancels_its_summarizer_request() {
    let capabilities = json!({"summarizer_complete": true});
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let (_dir, mut daemon) = start_logging(capabilities, &[("SATCHEL_LLM_TIMEOUT_SECS", "60")], Some(&log));
    let id = daemon.request("context.compact", json!({"session_id": SESSION, "config": config()}));
    let request = loop {
        let (_, frame) = daemon.next_frame();
        if frame["method"] == "summarizer.complete" {
            break frame;
        }
    };
    let started = Instant::now();
    let framing = daemon.framing;
    daemon.send(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}}),
        framing,
    );
    let (mut reply, mut cancel) = (None, None);
    while reply.is_none() || cancel.is_none() {
        let (_, frame) = daemon.next_frame();
        if frame["id"] == json!(id) && frame.get("method").is_none() {
            reply = Some(frame);
        } else if frame["method"] == "$/cancelRequest" {
            cancel = Some(frame);
        }
    }
    let reply = reply.unwrap();
    assert_eq!(reply["error"]["code"], -32800, "{reply}");
    assert_eq!(cancel.unwrap()["params"]["id"], request["id"]);
    assert!(started.elapsed() < Duration::from_secs(10), "not after the timeout");
    daemon.send(
        &json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32800, "message": "Request cancelled"}}),
        framing,
    );
    // The session is as it was: the next call sees every message.
    let inspect = daemon.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(inspect["compactions"].as_array().map_or(0, Vec::len), 0, "{inspect}");
    // A response to nothing ever asked is still a stray.
    daemon.send(
        &json!({"jsonrpc": "2.0", "id": "satchel-999", "error": {"code": -32800, "message": "Request cancelled"}}),
        framing,
    );
    daemon.call("context.sessions", json!({}));
    daemon.shutdown();
    let log = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert_eq!(warnings.len(), 1, "only the stray is a warning: {log}");
    assert!(warnings[0].contains("satchel-999"), "{log}");
}

/// `window/workDoneProgress/cancel {token}` for the progress of a `context.compact` whose
/// `summarizer.complete` is pending (or, with `at_begin`, as soon as `begin` comes): returns
/// the call's reply and every other frame, after the reply and (when one was sent) the
/// `$/cancelRequest` for the summariser's request.
fn cancel_by_token(daemon: &mut Daemon, at_begin: bool, params: Value) -> (Value, Vec<Value>) {
    let id = daemon.request("context.compact", params);
    let framing = daemon.framing;
    let started = Instant::now();
    let (mut frames, mut reply, mut token) = (Vec::new(), None, None);
    let mut cancel_sent = false;
    loop {
        let asked = of(&frames, "summarizer.complete").len();
        let told = of(&frames, "$/cancelRequest").len();
        if reply.is_some() && told == asked {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{frames:?}");
        let (_, frame) = daemon.next_frame();
        if frame["id"] == json!(id) && frame.get("method").is_none() {
            reply = Some(frame);
            continue;
        }
        frames.push(frame.clone());
        match frame["method"].as_str() {
            Some("window/workDoneProgress/create") => {
                daemon.send(&json!({"jsonrpc": "2.0", "id": frame["id"], "result": null}), framing);
            }
            Some("$/progress") if frame["params"]["value"]["kind"] == "begin" => {
                assert_eq!(frame["params"]["value"]["cancellable"], true, "{frame}");
                token = Some(frame["params"]["token"].clone());
            }
            // The model call never answers: only the cancel can end the call early.
            Some("summarizer.complete") => {}
            _ => continue,
        }
        let due = if at_begin {
            token.is_some()
        } else {
            asked < of(&frames, "summarizer.complete").len()
        };
        if due && !cancel_sent {
            let token = token.clone().expect("begin comes before the model call");
            let cancel =
                json!({"jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": {"token": token}});
            daemon.send(&cancel, framing);
            cancel_sent = true;
        }
    }
    assert!(cancel_sent, "no progress to cancel: {frames:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "not after the timeout");
    (reply.unwrap(), frames)
}

#[test]
fn cancelling_the_progress_token_cancels_the_call() {
    let capabilities = json!({"summarizer_complete": true, "window": {"workDoneProgress": true}});
    for at_begin in [false, true] {
        let (_dir, mut daemon) = start(capabilities.clone(), &[("SATCHEL_LLM_TIMEOUT_SECS", "60")]);
        let params = json!({"session_id": SESSION, "config": config()});
        let (reply, frames) = cancel_by_token(&mut daemon, at_begin, params);
        assert_eq!(reply["error"]["code"], -32800, "at_begin {at_begin}: {reply}");
        // The pending model call is abandoned: the client is told.
        let asked: Vec<&Value> = of(&frames, "summarizer.complete").iter().map(|f| &f["id"]).collect();
        let told: Vec<&Value> = of(&frames, "$/cancelRequest")
            .iter()
            .map(|f| &f["params"]["id"])
            .collect();
        assert_eq!(asked, told, "at_begin {at_begin}: {frames:?}");
        if !at_begin {
            assert_eq!(asked.len(), 1, "{frames:?}");
        }
        // No effect: nothing was compacted, and the session holds every message.
        let inspect = daemon.call("context.inspect", json!({"session_id": SESSION}));
        assert_eq!(inspect["compactions"].as_array().map_or(0, Vec::len), 0, "{inspect}");
        assert_eq!(inspect["archived_messages"], 0, "{inspect}");
        daemon.shutdown();
    }

    // A client's own workDoneToken cancels its call the same way, and an unknown token
    // cancels nothing: the call then runs to its end.
    let (_dir, mut daemon) = start(
        json!({"summarizer_complete": true}),
        &[("SATCHEL_LLM_TIMEOUT_SECS", "60")],
    );
    let params = json!({"session_id": SESSION, "config": config(), "workDoneToken": 42});
    let (reply, frames) = cancel_by_token(&mut daemon, false, params);
    assert_eq!(reply["error"]["code"], -32800, "{reply}");
    assert!(of(&frames, "window/workDoneProgress/create").is_empty(), "{frames:?}");
    let framing = daemon.framing;
    let stray = json!({"jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": {"token": "satchel-progress-999999"}});
    let id = daemon.request(
        "context.compact",
        json!({"session_id": SESSION, "config": config(), "workDoneToken": "mine"}),
    );
    let reply = loop {
        let (_, frame) = daemon.next_frame();
        if frame["id"] == json!(id) && frame.get("method").is_none() {
            break frame;
        }
        if frame["method"] == "summarizer.complete" {
            // Sent while the model call is pending, before its answer.
            daemon.send(&stray, framing);
            let answer = json!({"jsonrpc": "2.0", "id": frame["id"], "result": {"text": SUMMARY}});
            daemon.send(&answer, framing);
        }
    };
    let result = expect_result("context.compact", reply);
    assert!(result["compacted"].as_u64().is_some_and(|n| n > 0), "{result}");
    assert_eq!(result["compaction"]["summarizer"], "client", "{result}");
    let inspect = daemon.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(inspect["compactions"].as_array().map_or(0, Vec::len), 1, "{inspect}");
    daemon.shutdown();
}
