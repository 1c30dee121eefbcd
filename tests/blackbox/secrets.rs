//! Black-box tests of secrets: the model backend's settings that reach the network or the
//! daemon's environment (`llm_base_url`, `llm_api_key_env`, `llm_extra_headers`) and the other
//! daemon-only keys come only from `<workspace>/config.json` and the daemon's environment,
//! never from a request; the API key and the header values never appear in a reply, a file of
//! the workspace or the daemon's log, even when the endpoint echoes them in its error bodies.
//!
//! The endpoint is a real HTTP server on loopback that records every request's headers and
//! answers each with HTTP 500 and a body echoing the `Authorization` header and the secret
//! header back. An endpoint that redirects (to a second such server) is not followed: the
//! summariser's and the embeddings' requests, their key and headers, reach only the endpoint.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::builders::{assistant, user};
use crate::support::checks::error_code;
use crate::support::{Daemon, SocketClient, actions, files_under};

const KEY_ENV: &str = "SATCHEL_SECRETS_TEST_KEY";
const KEY: &str = "sk-secrets-test-2718281828459045";
const HEADER: &str = "X-Secret-Org";
const HEADER_VALUE: &str = "org-hidden-31415926";
const REDACTED: &str = "[redacted]";

// ---------------------------------------------------------------------------------------------
// An endpoint that echoes what it was sent
// ---------------------------------------------------------------------------------------------

/// A real HTTP/1.1 server on `127.0.0.1` answering every request with HTTP 500 and an echo of
/// the request's `Authorization` and secret header: requests 1–2 as a JSON error body,
/// 3–4 as plain text, and so on by pairs (one compaction tries twice).
struct EchoServer {
    addr: SocketAddr,
    /// The headers of every request received, names lower-cased.
    requests: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
    stop: Arc<AtomicBool>,
}

impl EchoServer {
    fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let _ = echo(stream, &seen);
                });
            }
        });
        EchoServer { addr, requests, stop }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> Vec<BTreeMap<String, String>> {
        self.requests.lock().unwrap().clone()
    }
}

/// A real HTTP/1.1 server on `127.0.0.1` answering every request with `307 Temporary
/// Redirect` to `target` (307 keeps the method and the body), recording each request's headers.
struct Redirector {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

impl Redirector {
    fn start(target: &str) -> Redirector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (seen, target) = (requests.clone(), target.to_owned());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, target) = (seen.clone(), target.clone());
                std::thread::spawn(move || {
                    let _ = redirect(stream, &seen, &target);
                });
            }
        });
        Redirector { addr, requests }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> Vec<BTreeMap<String, String>> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one HTTP request from `reader`: its path and headers (names lowercase), the body
/// read and dropped. `None` for a connection closed before a request line.
fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<(String, BTreeMap<String, String>)>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Some((path, headers)))
}

fn redirect(stream: TcpStream, requests: &Mutex<Vec<BTreeMap<String, String>>>, target: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some((path, headers)) = read_request(&mut reader)? else {
        return Ok(());
    };
    requests.lock().unwrap().push(headers);
    // To the same path on the target (`/v1/chat/completions`, `/v1/embeddings`).
    let location = format!("{}{}", target.trim_end_matches("/v1"), path);
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    stream.flush()
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn echo(stream: TcpStream, requests: &Mutex<Vec<BTreeMap<String, String>>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    // `None`: the wake-up connection of `Drop`.
    let Some((_, headers)) = read_request(&mut reader)? else {
        return Ok(());
    };
    let number = {
        let mut requests = requests.lock().unwrap();
        requests.push(headers.clone());
        requests.len()
    };
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    let secret = headers.get(&HEADER.to_ascii_lowercase()).cloned().unwrap_or_default();
    // The echoes come first, so they fall in what a daemon would keep of the body.
    let body = if (number - 1) / 2 % 2 == 0 {
        json!({"error": {
            "echo": {"authorization": auth, HEADER: secret},
            "message": format!("organisation {secret} may not use this model"),
            "type": "server_error",
        }})
        .to_string()
    } else {
        let key = auth.trim_start_matches("Bearer ");
        format!("rejected: Authorization: {auth}\r\n{HEADER}: {secret}\r\nkey {key} of org {secret} is unknown\r\n")
    };
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

// ---------------------------------------------------------------------------------------------
// The daemon and its workspace
// ---------------------------------------------------------------------------------------------

/// A small window (so a few messages compact), the `openai` backend pointed at `base_url`
/// with the key's variable: the workspace's `config.json`. The header comes from the
/// environment ([`daemon_env`]).
fn write_config(workspace: &Path, base_url: &str) {
    let config = json!({
        "max_input_length": 4096,
        "summary_max_tokens": 800,
        "tokenizer": "estimate",
        "summarizer": "openai",
        "llm_base_url": base_url,
        "llm_model": "cheap-model",
        "llm_api_key_env": KEY_ENV,
        "llm_timeout_secs": 10,
    });
    std::fs::write(workspace.join("config.json"), config.to_string()).unwrap();
}

/// The key in the daemon's environment, and the secret header through
/// `SATCHEL_LLM_EXTRA_HEADERS`.
fn daemon_env() -> Vec<(&'static str, String)> {
    vec![
        (KEY_ENV, KEY.to_owned()),
        (
            "SATCHEL_LLM_EXTRA_HEADERS",
            json!({HEADER: HEADER_VALUE, "X-Plain": "plain-header-value"}).to_string(),
        ),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Twenty messages of about 900 bytes: well over the compaction threshold of the window.
fn long_conversation(tag: &str) -> Vec<Value> {
    (0..20)
        .map(|i| {
            let text = format!(
                "{tag} step {i}: the parser crate still fails to build in module {i}, so we read the lexer again. "
            )
            .repeat(9);
            if i % 2 == 0 { user(&text) } else { assistant(&text) }
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Neither the key nor the secret header's value is in `text`; `what` says where it was.
fn assert_no_secret(text: &[u8], what: &str) {
    for secret in [KEY, HEADER_VALUE] {
        assert!(
            !contains(text, secret),
            "{secret:?} is in {what}:\n{}",
            String::from_utf8_lossy(text)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (a) Per-request backend settings are refused
// ---------------------------------------------------------------------------------------------

/// Each daemon-only key with a value a client might try: another endpoint, another of the
/// daemon's variables, headers of its own, and the daemon-wide keys.
fn per_request_attempts(attacker_url: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("llm_base_url", json!(attacker_url)),
        ("llm_api_key_env", json!("HOME")),
        ("llm_extra_headers", json!({"X-Forward-To": "attacker"})),
        ("dialog_path", json!("elsewhere")),
        ("max_live_sessions", json!(1)),
        ("session_idle_secs", json!(1)),
    ]
}

/// The reply refuses `key` as invalid params, naming `config.<key>` and where it may be set.
fn assert_refused(error: &Value, key: &str) {
    assert_eq!(error_code(error), -32602, "{error}");
    let field = format!("config.{key}");
    assert_eq!(error["data"]["details"]["field"], field.as_str(), "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&field) && message.contains("config.json") && message.contains("environment"),
        "{message}"
    );
}

#[test]
fn per_request_backend_settings_are_refused_and_nothing_is_sent() {
    let endpoint = EchoServer::start();
    let attacker = EchoServer::start();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &endpoint.base_url());
    let env = daemon_env();
    let mut daemon = Daemon::start(dir.path(), &env_refs(&env));
    let messages = long_conversation("refused");
    for (key, value) in per_request_attempts(&attacker.base_url()) {
        // With a setting the daemon accepts, this prepare would compact at once.
        let mut config = json!({"summarizer": "openai", "llm_timeout_secs": 5});
        config[key] = value.clone();
        let error = daemon.call_err(
            "context.prepare",
            json!({"session_id": "refused", "messages": messages, "config": config}),
        );
        assert_refused(&error, key);
        let error = daemon.call_err(
            "context.compact",
            json!({"session_id": "refused", "config": {key: value}}),
        );
        assert_refused(&error, key);
    }
    // The daemon's own value is refused too: accepting it would let a client guess a header.
    let error = daemon.call_err(
        "context.prepare",
        json!({"session_id": "refused", "messages": messages,
               "config": {"llm_extra_headers": {HEADER: HEADER_VALUE, "X-Plain": "plain-header-value"}}}),
    );
    assert_refused(&error, "llm_extra_headers");
    assert_eq!(
        daemon.call("context.sessions", json!({}))["sessions"],
        json!([]),
        "a refused call has no effect"
    );
    daemon.shutdown();
    assert!(attacker.requests().is_empty(), "the attacker's URL was called");
    assert!(endpoint.requests().is_empty(), "the endpoint was called");
}

#[test]
fn per_request_backend_settings_are_refused_on_the_socket_too() {
    let attacker = EchoServer::start();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "http://127.0.0.1:9/v1");
    let socket = dir.path().join("s.sock");
    let env = daemon_env();
    let mut daemon = Daemon::start_with_args(dir.path(), &env_refs(&env), &["--socket", socket.to_str().unwrap()]);
    daemon.call("initialize", json!({}));
    let mut client = SocketClient::connect(&socket);
    let messages = long_conversation("socket");
    for (key, value) in per_request_attempts(&attacker.base_url()) {
        let reply = client.call_raw(
            "context.prepare",
            json!({"session_id": "over-socket", "messages": messages, "config": {key: value}}),
        );
        assert!(reply.get("result").is_none(), "{key} accepted: {reply}");
        assert_refused(&reply["error"], key);
    }
    drop(client);
    daemon.shutdown();
    assert!(attacker.requests().is_empty(), "the attacker's URL was called");
}

// ---------------------------------------------------------------------------------------------
// (b) An endpoint echoing the secrets
// ---------------------------------------------------------------------------------------------

#[test]
fn an_endpoint_echoing_the_key_and_headers_leaks_them_nowhere() {
    let endpoint = EchoServer::start();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    write_config(workspace, &endpoint.base_url());
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let mut env = daemon_env();
    env.push(("SATCHEL_LOG", "debug".to_owned()));
    let mut daemon = Daemon::start_logging_to(workspace, &env_refs(&env), &log);
    let mut replies: Vec<Value> = Vec::new();
    let mut frames: Vec<Value> = Vec::new();

    // Two sessions, one compaction each: the first sees JSON echoes, the second plain text.
    for (session, shape) in [("echo-json", "JSON"), ("echo-text", "text")] {
        let reply = daemon.call_raw_answering(
            "context.prepare",
            json!({"session_id": session, "messages": long_conversation(session)}),
            |frame| {
                frames.push(frame.clone());
                None
            },
        );
        let result = &reply["result"];
        let compacted = actions(result, "compacted");
        assert_eq!(compacted.len(), 1, "{session}: one compaction: {reply}");
        let summarizer = compacted[0]["summarizer"].as_str().unwrap();
        assert!(
            summarizer.starts_with("extractive (fallback: completion failed: HTTP 500"),
            "{shape}: {summarizer}"
        );
        assert!(
            summarizer.contains(REDACTED),
            "{shape}: the echo is in the kept reason, redacted: {summarizer}"
        );
        assert!(
            summarizer.chars().count() < 300,
            "{shape}: the kept text is capped: {summarizer}"
        );
        replies.push(reply.clone());
        let inspect = daemon.call("context.inspect", json!({"session_id": session}));
        assert_eq!(inspect["compactions"][0]["summarizer"], summarizer);
        replies.push(inspect);
    }
    replies.push(daemon.call("context.sessions", json!({})));
    replies.push(daemon.call("initialize", json!({})));

    // The endpoint did get the secrets (so its bodies did echo them), twice per compaction.
    let requests = endpoint.requests();
    assert_eq!(requests.len(), 4, "one attempt and one retry per compaction");
    for headers in &requests {
        assert_eq!(
            headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(
            headers.get(&HEADER.to_ascii_lowercase()).map(String::as_str),
            Some(HEADER_VALUE)
        );
    }

    assert_no_secret(serde_json::to_string(&replies).unwrap().as_bytes(), "a reply");
    assert_no_secret(serde_json::to_string(&frames).unwrap().as_bytes(), "a notification");
    daemon.shutdown();

    let log = std::fs::read(&log).unwrap();
    assert!(
        contains(&log, "DEBUG"),
        "the log was captured at debug level:\n{}",
        String::from_utf8_lossy(&log)
    );
    assert_no_secret(&log, "the daemon's log");
    let files = files_under(workspace);
    for dir in ["sessions", "dialog", "memory"] {
        assert!(
            files.iter().any(|f| f.starts_with(workspace.join(dir))),
            "nothing written under {dir}/: {files:?}"
        );
    }
    for file in files {
        assert_no_secret(&std::fs::read(&file).unwrap(), &file.display().to_string());
    }
}

// ---------------------------------------------------------------------------------------------
// (c) `initialize` shows no header value
// ---------------------------------------------------------------------------------------------

#[test]
fn initialize_shows_the_header_names_but_not_their_values() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "https://proxy-user:proxy-pass-4242@llm.example.com/v1?key=q-secret-77",
    );
    let env = daemon_env();
    let mut daemon = Daemon::start(dir.path(), &env_refs(&env));
    let init = daemon.call("initialize", json!({"client_info": {"name": "secrets-test"}}));
    let config = &init["config"];
    assert_eq!(
        config["llm_extra_headers"],
        json!({HEADER: REDACTED, "X-Plain": REDACTED}),
        "{config}"
    );
    assert_eq!(
        config["llm_api_key_env"], KEY_ENV,
        "the variable's name, never its value"
    );
    assert_eq!(
        config["llm_base_url"],
        "https://[redacted]@llm.example.com/v1?[redacted]"
    );
    let text = init.to_string();
    for secret in [
        KEY,
        HEADER_VALUE,
        "plain-header-value",
        "proxy-pass-4242",
        "q-secret-77",
    ] {
        assert!(!text.contains(secret), "initialize shows {secret:?}: {text}");
    }
    daemon.shutdown();
}

// ---------------------------------------------------------------------------------------------
// (d) An endpoint that redirects is not followed
// ---------------------------------------------------------------------------------------------

#[test]
fn a_summariser_endpoint_that_redirects_is_not_followed_and_its_headers_go_nowhere_else() {
    let elsewhere = EchoServer::start();
    let endpoint = Redirector::start(&elsewhere.base_url());
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &endpoint.base_url());
    let env = daemon_env();
    let mut daemon = Daemon::start(dir.path(), &env_refs(&env));
    let result = daemon.call(
        "context.prepare",
        json!({"session_id": "redirected", "messages": long_conversation("redirected")}),
    );
    let compacted = actions(&result, "compacted");
    assert_eq!(compacted.len(), 1, "{result}");
    let summarizer = compacted[0]["summarizer"].as_str().unwrap();
    assert!(
        summarizer.starts_with("extractive (fallback: completion failed: HTTP 307")
            && summarizer.contains("redirects are not followed"),
        "the redirect is the endpoint's error: {summarizer}"
    );
    assert!(!summarizer.contains(&elsewhere.addr.to_string()), "{summarizer}");
    daemon.shutdown();
    assert_eq!(
        endpoint.requests().len(),
        2,
        "one attempt and one retry, at the endpoint"
    );
    assert_eq!(
        endpoint.requests()[0]
            .get(&HEADER.to_ascii_lowercase())
            .map(String::as_str),
        Some(HEADER_VALUE)
    );
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.requests()
    );
}

#[test]
fn an_embeddings_endpoint_that_redirects_is_not_followed_and_its_key_goes_nowhere_else() {
    let elsewhere = EchoServer::start();
    let endpoint = Redirector::start(&elsewhere.base_url());
    let dir = tempfile::tempdir().unwrap();
    let base_url = endpoint.base_url();
    let env = [
        ("SATCHEL_EMBEDDING_BACKEND", "openai"),
        ("SATCHEL_EMBEDDING_BASE_URL", base_url.as_str()),
        ("EMBEDDING_DIMENSIONS", "64"),
        ("SATCHEL_EMBEDDING_TIMEOUT_SECS", "5"),
        ("EMBEDDING_API_KEY", KEY),
    ];
    let mut daemon = Daemon::start(dir.path(), &env);
    daemon.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "- Chose SQLite FTS5 over tantivy for build time.\n"}),
    );
    let found = daemon.call(
        "memory.search",
        json!({"query": "build time", "mode": "auto", "min_score": 0.0}),
    );
    assert_eq!(found["mode"], "bm25", "{found}");
    let warnings = found["warnings"].to_string();
    assert!(
        warnings.contains("HTTP 307") && warnings.contains("redirects are not followed"),
        "the redirect is the endpoint's error: {found}"
    );
    assert_no_secret(found.to_string().as_bytes(), "a reply");
    daemon.shutdown();
    let sent = endpoint.requests();
    assert!(!sent.is_empty(), "the endpoint was asked");
    assert_eq!(
        sent[0].get("authorization").map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.requests()
    );
}
