//! The proxy tests' harness: a scripted model server on loopback that records every request
//! it receives and answers from a script (JSON, or a chunked event stream with pauses between
//! events), the real `satchel proxy` in front of it, and a plain HTTP client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::checks::session_records;
use crate::support::{REPLY_TIMEOUT, files_under, satchel_bin, wait_for_path};

/// The client's key, which must reach the upstream and nothing else.
pub const SECRET_KEY: &str = "sk-test-SECRET-7d1e";

/// A workspace in a fresh directory, beside which the proxy's log is written.
pub fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    (dir, ws)
}

/// Whether some workspace file holds `text` whole.
pub fn workspace_holds(ws: &Path, text: &str) -> bool {
    files_under(ws)
        .iter()
        .any(|f| std::fs::read(f).is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(text)))
}

/// The client's key is in no workspace file and not in the proxy's log.
pub fn assert_no_secret(ws: &Path, proxy: &Proxy) {
    let secret = "SECRET-7d1e";
    assert!(!workspace_holds(ws, secret), "a workspace file holds the client's key");
    assert!(!proxy.log_text().contains(secret), "the log holds the client's key");
}

/// Waits until the session log has a calibration record and returns the provider's tokens of it.
pub fn calibrated(ws: &Path, session: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = session_records(ws, session);
        if let Some(record) = records.iter().rfind(|r| r["record"] == "calibration") {
            return record["last"]["provider_tokens"].as_u64().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the reported usage never calibrated {session}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// `POST`, `GET`, …
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body's exact bytes.
    pub body: Vec<u8>,
}

impl Received {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("upstream got no JSON ({e}): {:?}", self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the upstream answers.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers besides the framing ones.
    pub headers: Vec<(String, String)>,
    /// The body, in the pieces it is written in.
    pub chunks: Vec<Vec<u8>>,
    /// The pause after each piece but the last (with chunked encoding).
    pub pause: Duration,
}

impl Reply {
    /// A JSON body with `content-length`.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.to_string().into_bytes()],
            pause: Duration::ZERO,
        }
    }

    /// A chunked event stream, one chunk per event, `pause` between them.
    pub fn stream(events: &[String], pause: Duration) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: events.iter().map(|e| e.clone().into_bytes()).collect(),
            pause,
        }
    }
}

type Script = dyn Fn(&Received) -> Reply + Send + Sync;

/// The scripted model server.
pub struct Upstream {
    /// Its base URL.
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Upstream {
    /// Starts a server answering each request with `script`, one connection per request.
    pub fn start(script: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (log, script) = (log.clone(), script.clone());
                std::thread::spawn(move || serve_one(stream, &log, &*script));
            }
        });
        Upstream { url, received }
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve_one(stream: TcpStream, log: &Mutex<Vec<Received>>, script: &Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request = Received {
        method,
        target,
        headers,
        body,
    };
    let reply = script(&request);
    let head_only = request.method == "HEAD";
    log.lock().unwrap().push(request);
    let mut out = stream;
    let mut head = format!("HTTP/1.1 {} Scripted\r\nconnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let chunked = reply.chunks.len() > 1;
    if chunked {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
    } else {
        let length = reply.chunks.first().map_or(0, Vec::len);
        head.push_str(&format!("content-length: {length}\r\n\r\n"));
    }
    if out.write_all(head.as_bytes()).is_err() || head_only {
        return;
    }
    for (i, chunk) in reply.chunks.iter().enumerate() {
        let written = if chunked {
            out.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .and_then(|()| out.write_all(chunk))
                .and_then(|()| out.write_all(b"\r\n"))
        } else {
            out.write_all(chunk)
        };
        if written.and_then(|()| out.flush()).is_err() {
            return;
        }
        if i + 1 < reply.chunks.len() {
            std::thread::sleep(reply.pause);
        }
    }
    if chunked {
        let _ = out.write_all(b"0\r\n\r\n");
    }
}

/// A running `satchel proxy` on a fresh port, its stderr (the log, at debug) in a file.
pub struct Proxy {
    child: Child,
    /// Its address, `127.0.0.1:PORT`.
    pub addr: String,
    /// The file holding its stderr.
    pub log: PathBuf,
}

impl Proxy {
    /// Starts `satchel proxy --listen 127.0.0.1:0` on `workspace`, forwarding to `upstream`.
    pub fn start(workspace: &Path, upstream: &Upstream, env: &[(&str, &str)]) -> Proxy {
        let log = workspace.with_extension("stderr.log");
        let mut cmd = Command::new(satchel_bin());
        cmd.arg("--workspace")
            .arg(workspace)
            .args(["proxy", "--listen", "127.0.0.1:0"])
            .env("SATCHEL_LOG", "debug")
            .env("SATCHEL_PROXY_UPSTREAM_ANTHROPIC", &upstream.url)
            .env("SATCHEL_PROXY_UPSTREAM_OPENAI", &upstream.url);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let stderr = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn satchel proxy");
        let info = workspace.join("run").join("proxy.json");
        wait_for_path(&info);
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let addr = loop {
            // The record is written atomically; read it once it is there.
            if let Ok(value) = serde_json::from_str::<Value>(&std::fs::read_to_string(&info).unwrap_or_default()) {
                break value["listen"].as_str().unwrap().to_owned();
            }
            assert!(Instant::now() < deadline, "run/proxy.json never became readable");
            std::thread::sleep(Duration::from_millis(20));
        };
        wait_for_path(&workspace.join("run").join("satchel.sock"));
        Proxy { child, addr, log }
    }

    /// The proxy's URL for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP client (no proxy from the environment, no redirects).
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REPLY_TIMEOUT)
        .build()
        .unwrap()
}
