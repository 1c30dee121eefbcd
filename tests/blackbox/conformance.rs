//! JSON-RPC 2.0 conformance, checked on the bytes the daemon writes: valid JSON that is not a
//! request (-32600, not -32700), ids of every type a client may send coming back exactly as
//! sent (and naming the call to `$/cancelRequest`), an oversized request answered under its
//! id, and the messages of `context.prepare` refused without a known `role`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::support::builders::{assistant, user};
use crate::support::checks::error_code;
use crate::support::{Daemon, Framing, REPLY_TIMEOUT, prepare, satchel_bin};

/// What the daemon answers to valid JSON that is not a request.
const INVALID_REQUEST: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}"#;
/// What it answers to bytes that are not JSON.
const PARSE_ERROR: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

/// `satchel serve` on stdio, its frames kept as the bytes it wrote (a parsed `Value` would
/// turn `1e3` into `1000.0` and lose the digits of a big integer).
struct RawDaemon {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: mpsc::Receiver<(Framing, String)>,
}

impl RawDaemon {
    fn start(workspace: &Path, serve_args: &[&str]) -> RawDaemon {
        let mut child = Command::new(satchel_bin())
            .arg("--workspace")
            .arg(workspace)
            .arg("serve")
            .args(serve_args)
            .env("SATCHEL_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn satchel");
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || read_raw_frames(stdout, tx));
        RawDaemon {
            stdin: child.stdin.take(),
            child,
            frames,
        }
    }

    /// Sends `body` as it is, in `framing`.
    fn send(&mut self, framing: Framing, body: &str) {
        let bytes = match framing {
            Framing::Ndjson => format!("{body}\n"),
            Framing::ContentLength => format!("Content-Length: {}\r\n\r\n{body}", body.len()),
        };
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The next frame the daemon wrote, as its bytes.
    fn next(&mut self) -> (Framing, String) {
        self.frames
            .recv_timeout(REPLY_TIMEOUT)
            .unwrap_or_else(|e| panic!("no frame from satchel: {e}"))
    }

    /// The next frame that is not a notification (`$/progress`, events).
    fn next_reply(&mut self) -> (Framing, String) {
        loop {
            let (framing, body) = self.next();
            let value: Value = serde_json::from_str(&body).unwrap();
            if value.get("method").is_none() || value.get("id").is_some() {
                return (framing, body);
            }
        }
    }

    /// Sends `body` and returns the reply, which must come in the same framing.
    fn ask(&mut self, framing: Framing, body: &str) -> String {
        self.send(framing, body);
        let (reply_framing, reply) = self.next_reply();
        assert_eq!(reply_framing, framing, "{body} → {reply}");
        reply
    }

    fn shutdown(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "satchel exited with {status}");
    }
}

impl Drop for RawDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_raw_frames(stream: impl Read, tx: mpsc::Sender<(Framing, String)>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let frame = if let Some(length) = line.strip_prefix("Content-Length: ") {
            let length: usize = length.trim().parse().expect("Content-Length value");
            let mut blank = String::new();
            reader.read_line(&mut blank).unwrap();
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            (Framing::ContentLength, String::from_utf8(body).expect("UTF-8"))
        } else {
            (Framing::Ndjson, line.trim_end().to_owned())
        };
        if tx.send(frame).is_err() {
            return;
        }
    }
}

/// A call of `method` with id `id` (JSON text, sent as it is) and `params`.
fn call(id: &str, method: &str, params: &Value) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

/// The ids a client may send, as JSON text; each must come back byte for byte.
const VALID_IDS: [&str; 14] = [
    r#""plain""#,
    r#""""#,
    r#""a\u00e9\"b""#,
    "0",
    "7",
    "-7",
    "-0",
    "1.5",
    "-0.25",
    "1e3",
    "1E+3",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
];

/// Ids JSON-RPC does not allow: the call gets -32600 with id null.
const INVALID_IDS: [&str; 5] = ["true", "false", r#"{"a":1}"#, "[1]", "[]"];

#[test]
fn valid_json_that_is_not_a_request_gets_invalid_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = RawDaemon::start(dir.path(), &[]);
    for framing in [Framing::Ndjson, Framing::ContentLength] {
        for body in [
            "{}",
            r#"{"foo":1}"#,
            r#""x""#,
            "42",
            "-1.5",
            "null",
            "true",
            "false",
            " {} ",
            "[]",
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","method":1}"#,
            r#"{"jsonrpc":"2.0","params":{}}"#,
            r#"{"method":"context.sessions"}"#,
        ] {
            assert_eq!(d.ask(framing, body), INVALID_REQUEST, "{body} in {framing:?}");
        }
        // A batch answers each entry that is not a request in the batch's array.
        assert_eq!(d.ask(framing, "[1]"), format!("[{INVALID_REQUEST}]"));
        assert_eq!(
            d.ask(framing, r#"[{},"x"]"#),
            format!("[{INVALID_REQUEST},{INVALID_REQUEST}]")
        );
        // Only bytes that are not JSON are a parse error.
        for body in ["{bad", "nul", r#"{"id":1,"#, "[1,"] {
            assert_eq!(d.ask(framing, body), PARSE_ERROR, "{body} in {framing:?}");
        }
        // An invalid request with a valid id is answered under that id.
        let reply = d.ask(framing, r#"{"foo":1,"id":-6}"#);
        assert_eq!(
            reply,
            r#"{"jsonrpc":"2.0","id":-6,"error":{"code":-32600,"message":"Invalid request"}}"#
        );
    }
    let reply = d.ask(Framing::Ndjson, &call("1", "context.sessions", &json!({})));
    assert_eq!(reply, r#"{"jsonrpc":"2.0","id":1,"result":{"sessions":[]}}"#);
    d.shutdown();
}

#[test]
fn every_valid_id_comes_back_as_sent_and_an_invalid_one_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = RawDaemon::start(dir.path(), &[]);
    let prepare = json!({"session_id": "ids", "messages": [user("hi")]});
    let bad_params = json!({"session_id": "ids"});
    for framing in [Framing::Ndjson, Framing::ContentLength] {
        for id in VALID_IDS {
            // Through jsonrpsee, through the direct path of `context.prepare`, and an error.
            let reply = d.ask(framing, &call(id, "context.sessions", &json!({})));
            assert!(
                reply.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"sessions":"#)),
                "id {id}: {reply}"
            );
            let reply = d.ask(framing, &call(id, "context.prepare", &prepare));
            assert!(
                reply.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"session_id":"ids""#)),
                "id {id}: {reply}"
            );
            let reply = d.ask(framing, &call(id, "context.prepare", &bad_params));
            assert!(
                reply.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602"#)),
                "id {id}: {reply}"
            );
            let reply = d.ask(framing, &call(id, "context.summon", &json!({})));
            assert!(
                reply.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601"#)),
                "id {id}: {reply}"
            );
        }
        for id in INVALID_IDS {
            assert_eq!(
                d.ask(framing, &call(id, "context.sessions", &json!({}))),
                INVALID_REQUEST,
                "id {id}"
            );
            assert_eq!(
                d.ask(framing, &format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#)),
                INVALID_REQUEST,
                "id {id} without a method"
            );
        }
        // Two ids: which one to answer is anyone's guess.
        let two = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"context.sessions"}"#;
        assert_eq!(d.ask(framing, two), INVALID_REQUEST);
    }
    d.shutdown();
}

/// A conversation long enough for `context.compact` to have something to summarise.
fn history() -> Vec<Value> {
    (0..20)
        .flat_map(|n| {
            vec![
                user(&format!("request {n}: {}", "context ".repeat(40))),
                assistant(&format!("answer {n}: {}", "done ".repeat(40))),
            ]
        })
        .collect()
}

/// A daemon whose client declared `summarizer_complete`, with session `c` holding [`history`]
/// (ids 1 and 2 used).
fn summarising_client_with_session(workspace: &Path, serve_args: &[&str]) -> RawDaemon {
    let mut d = RawDaemon::start(workspace, serve_args);
    let init = json!({"capabilities": {"summarizer_complete": true}});
    assert!(
        d.ask(Framing::Ndjson, &call("1", "initialize", &init))
            .contains(r#""result""#)
    );
    let create = json!({"session_id": "c", "messages": history()});
    assert!(
        d.ask(Framing::Ndjson, &call("2", "context.prepare", &create))
            .contains(r#""result""#)
    );
    d
}

#[test]
fn cancel_request_names_a_call_by_any_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = summarising_client_with_session(dir.path(), &[]);
    let compact = json!({"session_id": "c", "config": {"summarizer": "client", "llm_timeout_secs": 60}});
    // (id of the call, id the cancel names): a number by its value, a string by its text.
    let cases = [
        ("-7", "-7"),
        ("1.5", "1.5"),
        ("1e3", "1e3"),
        ("2e3", "2000"),
        ("3000", "3.0e3"),
        ("18446744073709551616", "18446744073709551616"),
        (r#""q\u00e9""#, r#""qé""#),
        (r#""plain""#, r#""plain""#),
    ];
    for (n, (id, named)) in cases.into_iter().enumerate() {
        let framing = if n % 2 == 0 {
            Framing::Ndjson
        } else {
            Framing::ContentLength
        };
        d.send(framing, &call(id, "context.compact", &compact));
        // The call waits for the client's model: cancel it then.
        let request = loop {
            let (_, frame) = d.next();
            let value: Value = serde_json::from_str(&frame).unwrap();
            if value["method"] == "summarizer.complete" {
                break value;
            }
            assert!(
                value.get("method").is_some(),
                "id {id}: a reply before the model ran: {frame}"
            );
        };
        let cancel = format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{named}}}}}"#);
        d.send(Framing::Ndjson, &cancel);
        let (reply_framing, reply) = d.next_reply();
        assert_eq!(
            (reply.as_str(), reply_framing),
            (
                format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32800,"message":"Request cancelled"}}}}"#)
                    .as_str(),
                framing
            ),
            "id {id}, cancelled as {named}"
        );
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "cancelled"}});
        d.send(Framing::Ndjson, &answer.to_string());
    }
    // Nothing more for the cancelled calls: the next reply is this call's.
    let reply = d.ask(Framing::Ndjson, &call("99", "context.sessions", &json!({})));
    assert!(reply.starts_with(r#"{"jsonrpc":"2.0","id":99,"result""#), "{reply}");
    d.shutdown();
}

/// A client's response too large for `--max-message-bytes` is not answered (a response never
/// is), and the request it answers fails at once, naming the size, rather than at its timeout.
#[test]
fn an_oversized_response_fails_the_request_it_answers_and_gets_no_reply() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = summarising_client_with_session(dir.path(), &["--max-message-bytes", "65536"]);
    let compact = json!({"session_id": "c", "config": {"summarizer": "client", "llm_timeout_secs": 600}});
    d.send(Framing::Ndjson, &call("3", "context.compact", &compact));
    let mut asked = 0;
    let reply = loop {
        let (_, frame) = d.next();
        let value: Value = serde_json::from_str(&frame).unwrap();
        if value["method"] == "summarizer.complete" {
            asked += 1;
            let huge = json!({"jsonrpc": "2.0", "id": value["id"], "result": {"text": "y".repeat(70_000)}});
            d.send(Framing::Ndjson, &huge.to_string());
            continue;
        }
        if value.get("method").is_none() {
            break value;
        }
    };
    assert!(asked >= 1);
    assert_eq!(reply["id"], 3, "the only reply is the compaction's: {reply}");
    assert!(
        reply["result"]["summary"].is_object(),
        "the compaction fell back: {reply}"
    );
    let report = reply["result"].to_string();
    assert!(
        report.contains("larger than --max-message-bytes (65536 bytes)"),
        "the reason names the limit: {report}"
    );
    let next = d.ask(Framing::Ndjson, &call("4", "context.sessions", &json!({})));
    assert!(next.starts_with(r#"{"jsonrpc":"2.0","id":4,"result""#), "{next}");
    d.shutdown();
}

#[test]
fn an_oversized_request_is_answered_under_the_id_its_prefix_carries() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = RawDaemon::start(dir.path(), &["--max-message-bytes", "4096"]);
    let big = json!({"session_id": "big", "messages": [user(&"x".repeat(10_000))]});
    let too_big = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32007,"message":"Request is too big","data":"Exceeded max limit of 4096"}}}}"#
        )
    };
    for framing in [Framing::Ndjson, Framing::ContentLength] {
        for id in VALID_IDS {
            assert_eq!(
                d.ask(framing, &call(id, "context.prepare", &big)),
                too_big(id),
                "{framing:?}"
            );
        }
        // An id the prefix does not carry, or one JSON-RPC does not allow: null.
        let id_last = format!(r#"{{"jsonrpc":"2.0","method":"context.prepare","params":{big},"id":9}}"#);
        assert_eq!(d.ask(framing, &id_last), too_big("null"));
        assert_eq!(d.ask(framing, &call("true", "context.prepare", &big)), too_big("null"));
        let long_id = format!(r#""{}""#, "i".repeat(5000));
        assert_eq!(
            d.ask(framing, &call(&long_id, "context.prepare", &big)),
            too_big("null")
        );
        assert_eq!(d.ask(framing, &"z".repeat(5000)), too_big("null"));
    }
    let small = json!({"session_id": "big", "messages": [user("fits")]});
    let reply = d.ask(Framing::Ndjson, &call("5", "context.prepare", &small));
    assert!(reply.starts_with(r#"{"jsonrpc":"2.0","id":5,"result""#), "{reply}");
    d.shutdown();
}

#[test]
fn a_message_without_a_known_role_is_refused_by_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let refused = |d: &mut Daemon, params: Value, field: &str| {
        let error = d.call_err("context.prepare", params);
        assert_eq!(error_code(&error), -32602, "{error}");
        assert_eq!(error["data"]["details"]["field"], field, "{error}");
        assert!(error["message"].as_str().unwrap().contains(field), "{error}");
        error["message"].as_str().unwrap().to_owned()
    };
    let no_role = json!({"content": "hello"});
    let message = refused(
        &mut d,
        json!({"session_id": "r", "messages": [user("a"), assistant("b"), user("c"), no_role]}),
        "messages[3].role",
    );
    assert!(message.contains("needs a `role`"), "{message}");
    let sessions = d.call("context.sessions", json!({}));
    assert_eq!(sessions["sessions"], json!([]), "a refused call creates nothing");

    let ok = prepare(&mut d, "r", &[user("a"), assistant("b")]);
    assert_eq!(ok["reconciliation"]["session_messages"], 2);
    // A resent history: the index is the message's place in the list sent.
    let robot = json!({"role": "robot", "content": "beep"});
    let message = refused(
        &mut d,
        json!({"session_id": "r", "messages": [user("a"), assistant("b"), user("c"), robot]}),
        "messages[3].role",
    );
    assert!(message.contains(r#"unknown role "robot""#), "{message}");
    refused(
        &mut d,
        json!({"session_id": "r", "append": [user("c"), {"role": 7, "content": "x"}]}),
        "append[1].role",
    );
    let ok = prepare(&mut d, "r", &[user("a"), assistant("b"), user("c")]);
    assert_eq!(ok["reconciliation"]["reused"], 2, "the refused calls changed nothing");
    d.shutdown();
}
