//! Shared harness of the black-box tests: spawns the real `satchel` binary on a temporary
//! workspace and speaks JSON-RPC to it over stdio or its Unix socket, in either framing.
//! [`builders`] makes the messages the tests send, [`checks`] reads what comes back, and
//! [`trajectories`] loads the shared development data and knows both message formats.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod builders;
pub mod checks;
pub mod trajectories;

/// First line of every truncation notice.
pub const MARKER: &str = "<<<TRUNCATED>>>";
/// First line of the summary message.
pub const SUMMARY_HEADING: &str = "# Summary of previous conversation";

/// How long a test waits for one reply before failing (generous: CI machines are shared).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Path of the binary under test.
pub fn satchel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_satchel"))
}

/// Framing of outgoing requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON document per line.
    Ndjson,
    /// LSP `Content-Length:` headers.
    ContentLength,
}

/// A running `satchel serve` and a reader thread collecting its frames.
pub struct Daemon {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: mpsc::Receiver<(Framing, Value)>,
    next_id: u64,
    /// Framing used by `call`/`request`.
    pub framing: Framing,
}

impl Daemon {
    /// Starts `satchel serve` on `workspace` with extra environment variables.
    pub fn start(workspace: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_with_args(workspace, env, &[])
    }

    /// Starts `satchel serve` with extra `serve` options.
    pub fn start_with_args(workspace: &Path, env: &[(&str, &str)], serve_args: &[&str]) -> Daemon {
        Daemon::spawn(workspace, env, serve_args, Stdio::inherit())
    }

    /// Starts `satchel serve` with its stderr (the log, unless `--log-file` is given) written
    /// to the file `stderr` instead of the test's own.
    pub fn start_logging_to(workspace: &Path, env: &[(&str, &str)], stderr: &Path) -> Daemon {
        let file = std::fs::File::create(stderr).expect("create the stderr file");
        Daemon::spawn(workspace, env, &[], Stdio::from(file))
    }

    fn spawn(workspace: &Path, env: &[(&str, &str)], serve_args: &[&str], stderr: Stdio) -> Daemon {
        let mut cmd = Command::new(satchel_bin());
        cmd.arg("--workspace")
            .arg(workspace)
            .arg("serve")
            .args(serve_args)
            .env("SATCHEL_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn satchel");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        Daemon {
            stdin: child.stdin.take(),
            child,
            frames: rx,
            next_id: 1000,
            framing: Framing::Ndjson,
        }
    }

    /// Writes raw bytes to the daemon's stdin.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes to the daemon's stdin, handing back the error (a daemon that died has
    /// closed the pipe) instead of failing the test.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// Sends one JSON value in `framing`.
    pub fn send(&mut self, value: &Value, framing: Framing) {
        let body = value.to_string();
        match framing {
            Framing::Ndjson => self.send_raw(format!("{body}\n").as_bytes()),
            Framing::ContentLength => self.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes()),
        }
    }

    /// Sends a request and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let framing = self.framing;
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            framing,
        );
        id
    }

    /// Next frame from the daemon, with the framing it came in.
    pub fn next_frame(&mut self) -> (Framing, Value) {
        match self.frames.recv_timeout(REPLY_TIMEOUT) {
            Ok(frame) => frame,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("no reply from satchel within {REPLY_TIMEOUT:?}"),
            // The reader thread stops at EOF or after panicking on a bad frame (its panic is above).
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("satchel's stdout ended or carried something other than a JSON frame")
            }
        }
    }

    /// Next frame from the daemon within `wait`, without failing the test: `Timeout` when none
    /// came, `Disconnected` when stdout ended or carried something other than a frame.
    pub fn next_frame_within(&mut self, wait: Duration) -> Result<(Framing, Value), mpsc::RecvTimeoutError> {
        self.frames.recv_timeout(wait)
    }

    /// Sends a request and waits for its reply (the whole response object).
    pub fn call_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        loop {
            let (_, frame) = self.next_frame();
            if frame["id"] == json!(id) {
                return frame;
            }
        }
    }

    /// Sends a request and waits for its reply (the whole response object), handing every
    /// other frame that comes first to `other`: notifications such as `$/progress`, and the
    /// daemon's own requests (string ids `satchel-N`). When `other` returns a value, it is
    /// sent back to the daemon as is (the client's response to a server→client request).
    pub fn call_raw_answering(
        &mut self,
        method: &str,
        params: Value,
        mut other: impl FnMut(&Value) -> Option<Value>,
    ) -> Value {
        let id = self.request(method, params);
        loop {
            let (_, frame) = self.next_frame();
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                return frame;
            }
            if let Some(response) = other(&frame) {
                let framing = self.framing;
                self.send(&response, framing);
            }
        }
    }

    /// [`call_raw_answering`](Self::call_raw_answering) for a method that must succeed;
    /// returns its result.
    pub fn call_answering(&mut self, method: &str, params: Value, other: impl FnMut(&Value) -> Option<Value>) -> Value {
        expect_result(method, self.call_raw_answering(method, params, other))
    }

    /// Calls a method that must succeed; returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        expect_result(method, self.call_raw(method, params))
    }

    /// Calls a method that must fail; returns the error object.
    pub fn call_err(&mut self, method: &str, params: Value) -> Value {
        expect_error(method, self.call_raw(method, params))
    }

    /// Closes stdin and waits for a clean exit.
    pub fn shutdown(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "satchel exited with {status}");
    }

    /// Closes stdin without waiting: the daemon finishes what is in flight and exits (see
    /// [`wait_exit`](Self::wait_exit)).
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// How the process exited, if it has.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll satchel")
    }

    /// Kills the process without warning (`kill -9`).
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Process id of the daemon.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the process to exit and returns how it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll satchel") {
                return status;
            }
            assert!(Instant::now() < deadline, "satchel did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Either transport, for helpers that do not care which one they talk over.
pub trait Rpc {
    /// Calls a method that must succeed; returns its result.
    fn call_method(&mut self, method: &str, params: Value) -> Value;
}

impl Rpc for Daemon {
    fn call_method(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params)
    }
}

impl Rpc for SocketClient {
    fn call_method(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params)
    }
}

/// `context.prepare` of session `session` with the full list `messages`.
pub fn prepare(conn: &mut impl Rpc, session: &str, messages: &[Value]) -> Value {
    conn.call_method("context.prepare", json!({"session_id": session, "messages": messages}))
}

/// `context.prepare` appending `messages` to session `session`.
pub fn append(conn: &mut impl Rpc, session: &str, messages: &[Value]) -> Value {
    conn.call_method("context.prepare", json!({"session_id": session, "append": messages}))
}

/// The actions of one `kind` in a `context.prepare` result.
pub fn actions<'a>(result: &'a Value, kind: &str) -> Vec<&'a Value> {
    result["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == kind)
        .collect()
}

/// Waits until `path` exists (a daemon started with `--no-stdio` says nothing when ready).
pub fn wait_for_path(path: &Path) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A JSON-RPC connection to a daemon's Unix socket, in either framing, with a reader thread.
/// Notifications that arrive while waiting for a reply are kept for [`next_notification`].
///
/// [`next_notification`]: SocketClient::next_notification
pub struct SocketClient {
    stream: UnixStream,
    frames: mpsc::Receiver<(Framing, Value)>,
    notifications: VecDeque<Value>,
    next_id: u64,
    /// Framing used by `call`/`request`.
    pub framing: Framing,
}

impl SocketClient {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> SocketClient {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
        let reader = stream.try_clone().expect("clone the socket");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(reader, tx));
        SocketClient {
            stream,
            frames: rx,
            notifications: VecDeque::new(),
            next_id: 1,
            framing: Framing::Ndjson,
        }
    }

    /// Sends one JSON value as it is, in [`framing`](Self::framing).
    pub fn send(&mut self, value: &Value) {
        let body = value.to_string();
        let bytes = match self.framing {
            Framing::Ndjson => format!("{body}\n"),
            Framing::ContentLength => format!("Content-Length: {}\r\n\r\n{body}", body.len()),
        };
        self.stream.write_all(bytes.as_bytes()).expect("write to the socket");
    }

    /// Sends a request and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Next frame from the daemon on this connection, with its framing.
    pub fn next_frame(&mut self) -> (Framing, Value) {
        match self.frames.recv_timeout(REPLY_TIMEOUT) {
            Ok(frame) => frame,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("nothing on the socket within {REPLY_TIMEOUT:?}"),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the daemon closed the socket connection"),
        }
    }

    /// Next frame on this connection within `wait`, without failing the test: `Timeout` when
    /// none came, `Disconnected` when the connection ended or carried something other than a frame.
    pub fn next_frame_within(&mut self, wait: Duration) -> Result<(Framing, Value), mpsc::RecvTimeoutError> {
        self.frames.recv_timeout(wait)
    }

    /// Waits for the reply to request `id` (the whole response object), keeping notifications.
    pub fn reply_to(&mut self, id: u64) -> Value {
        loop {
            let (_, frame) = self.next_frame();
            if frame.get("method").is_some() && frame.get("id").is_none() {
                self.notifications.push_back(frame);
            } else if frame["id"] == json!(id) {
                return frame;
            }
        }
    }

    /// Sends a request and waits for its reply (the whole response object).
    pub fn call_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.reply_to(id)
    }

    /// Calls a method that must succeed; returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        expect_result(method, self.call_raw(method, params))
    }

    /// The next notification (`method` without `id`), kept or still to arrive.
    pub fn next_notification(&mut self) -> Value {
        if let Some(kept) = self.notifications.pop_front() {
            return kept;
        }
        loop {
            let (_, frame) = self.next_frame();
            if frame.get("method").is_some() && frame.get("id").is_none() {
                return frame;
            }
        }
    }

    /// A notification that arrives within `wait`, if any (for checking that none comes).
    pub fn notification_within(&mut self, wait: Duration) -> Option<Value> {
        if let Some(kept) = self.notifications.pop_front() {
            return Some(kept);
        }
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok((_, frame)) if frame.get("method").is_some() && frame.get("id").is_none() => return Some(frame),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SocketClient {
    /// Closes the connection for both sides (the reader thread holds a clone of the stream).
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Parses satchel's output (stdout or a socket) into frames, detecting the framing of each; anything else fails the test.
fn read_frames(stream: impl Read, tx: mpsc::Sender<(Framing, Value)>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        // Invalid UTF-8 is a failure, not an end of stream; a connection reset is an end.
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => panic!("satchel's output is not UTF-8: {e}"),
            Err(_) => return,
        }
        let (framing, body) = if let Some(len) = line.strip_prefix("Content-Length: ") {
            let len: usize = len.trim().parse().expect("Content-Length value");
            let mut blank = String::new();
            reader.read_line(&mut blank).unwrap();
            assert_eq!(blank, "\r\n", "header block must end with a blank line");
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            (Framing::ContentLength, body)
        } else {
            (Framing::Ndjson, line.trim_end().as_bytes().to_vec())
        };
        let value: Value = parse_json_any_depth(&body).unwrap_or_else(|e| {
            panic!(
                "stdout carried a non-JSON frame ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        });
        if tx.send((framing, value)).is_err() {
            return;
        }
    }
}

/// Parses JSON like `serde_json::from_slice`, also when it is nested deeper than serde_json
/// reads at once (128 levels): a reply may echo a client's deeply nested message, and that is
/// still valid JSON.
pub fn parse_json_any_depth(bytes: &[u8]) -> serde_json::Result<Value> {
    fn open(raw: &serde_json::value::RawValue) -> Value {
        type Raw = Box<serde_json::value::RawValue>;
        if let Ok(value) = serde_json::from_str::<Value>(raw.get()) {
            return value;
        }
        if let Ok(members) = serde_json::from_str::<Vec<Raw>>(raw.get()) {
            return Value::Array(members.iter().map(|m| open(m)).collect());
        }
        match serde_json::from_str::<BTreeMap<String, Raw>>(raw.get()) {
            Ok(members) => Value::Object(members.into_iter().map(|(k, v)| (k, open(&v))).collect()),
            Err(_) => unreachable!("a RawValue is valid JSON"),
        }
    }
    match serde_json::from_slice::<Value>(bytes) {
        Err(e) if e.to_string().contains("recursion limit") => {
            let raw: Box<serde_json::value::RawValue> = serde_json::from_slice(bytes)?;
            Ok(open(&raw))
        }
        parsed => parsed,
    }
}

/// Reads back the full text of a truncated result: the head the notice says it keeps,
/// then `context.read` by byte offset until the end of the file.
pub fn reconstruct(daemon: &mut Daemon, excerpt: &str) -> String {
    let head_bytes = number_after(excerpt, "covers the next ").expect("notice states its byte count");
    let path = quoted_after(excerpt, CONTEXT_READ_PATH).expect("notice names a file");
    read_from(daemon, &excerpt[..head_bytes], &path)
}

/// `head` followed by the rest of the file at `path`, read with `context.read` by byte offset
/// from where the head ends until the end of the file.
pub fn read_from(daemon: &mut Daemon, head: &str, path: &str) -> String {
    let mut text = head.to_owned();
    let mut offset = head.len();
    loop {
        let slice = daemon.call("context.read", json!({"path": path, "byte_offset": offset}));
        text.push_str(slice["content"].as_str().unwrap());
        match slice["next_byte_offset"].as_u64() {
            Some(next) if !slice["eof"].as_bool().unwrap() => offset = next as usize,
            _ => return text,
        }
    }
}

/// The number right after `prefix`.
pub fn number_after(text: &str, prefix: &str) -> Option<usize> {
    let start = text.find(prefix)? + prefix.len();
    text[start..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// What precedes the workspace-relative offload file in a notice's `context.read` form
/// (`{"path": "tool_result/<hash>.txt", ...}`); the `read_file` form's `file_path=` is absolute
/// unless `offload_notice_path` is `relative`.
pub const CONTEXT_READ_PATH: &str = "{\"path\": ";

/// The JSON string right after `prefix` (e.g. `file_path="a b.txt"`).
pub fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let start = text.find(prefix)? + prefix.len();
    let mut de = serde_json::Deserializer::from_str(&text[start..]).into_iter::<String>();
    de.next()?.ok()
}

/// Every line of the dialog archive: (workspace-relative file, 1-based line number, line).
pub fn archive_lines(workspace: &Path) -> Vec<(String, usize, Value)> {
    let Ok(dir) = std::fs::read_dir(workspace.join("dialog")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".jsonl"))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(workspace.join("dialog").join(&name)).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "dialog/{name} ends with a torn line"
        );
        for (i, line) in text.lines().enumerate() {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("dialog/{name}:{}: {e}", i + 1));
            lines.push((format!("dialog/{name}"), i + 1, value));
        }
    }
    lines
}

/// The archived lines of `session` by original index; fails when an index is archived twice.
pub fn archived(workspace: &Path, session: &str) -> BTreeMap<usize, Value> {
    let mut by_index = BTreeMap::new();
    for (file, line, value) in archive_lines(workspace) {
        if value["session_id"] != session {
            continue;
        }
        let index = value["index"]
            .as_u64()
            .unwrap_or_else(|| panic!("not a number: {}", value["index"])) as usize;
        if let Some(earlier) = by_index.insert(index, value) {
            panic!(
                "message {index} is archived twice ({file}:{line}, earlier by compaction {})",
                earlier["compaction_id"]
            );
        }
    }
    by_index
}

/// The result of a reply to `method` that must have succeeded.
pub fn expect_result(method: &str, reply: Value) -> Value {
    assert!(reply.get("error").is_none(), "{method} failed: {reply}");
    reply["result"].clone()
}

/// The error object of a reply to `method` that must have failed.
fn expect_error(method: &str, reply: Value) -> Value {
    assert!(
        reply.get("result").is_none(),
        "{method} unexpectedly succeeded: {reply}"
    );
    reply["error"].clone()
}

/// A small deterministic generator (xorshift64*), so a failing random test replays exactly.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}
