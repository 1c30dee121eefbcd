//! One real `satchel serve` process, spoken to as an editor would: newline-delimited JSON-RPC on
//! its stdin and stdout, in a fresh temporary workspace.
//!
//! Timing is the point of this module, so the rules are strict: a request is serialised to a
//! `String` before the clock starts ([`Daemon::request`]); the clock covers writing the line,
//! flushing, and reading the whole reply line ([`Daemon::send`]); the reply is parsed only after
//! the clock stops. Any JSON-RPC error fails the run with the error, because a benchmark of
//! failing calls would measure the wrong thing.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How long a daemon may take to exit after its stdin closes before it counts as hung.
const EXIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Lines of the daemon's log quoted when it fails.
const LOG_TAIL_LINES: usize = 20;

/// Names a file that keeps the daemons' stderr (appended) instead of their temp dirs; with
/// `SATCHEL_LOG`, which the daemons inherit (default `warn`), it shows their debug timings.
const DAEMON_LOG_ENV: &str = "SATCHEL_BENCH_DAEMON_LOG";

/// A running daemon. Dropping it kills the process if [`Daemon::close`] was not reached (e.g. a
/// failed scenario), so no daemon outlives the driver.
pub struct Daemon {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Holds `ws/` (the workspace) and `daemon.log`; deleted on drop, after the process is gone.
    _dir: tempfile::TempDir,
    /// Where the daemon's stderr goes.
    log_path: PathBuf,
    next_id: u64,
    /// Reused reply buffer, so reading a multi-megabyte reply does not reallocate every call.
    line: String,
}

/// A request serialised ahead of time, so the clock never covers the client's serialisation.
pub struct Request {
    id: u64,
    method: &'static str,
    /// The JSON text followed by `\n`.
    line: String,
}

impl Request {
    /// The JSON text of the request, without the line terminator.
    pub fn json(&self) -> &str {
        self.line.trim_end_matches('\n')
    }

    /// Bytes on the wire, terminator included.
    pub fn wire_bytes(&self) -> usize {
        self.line.len()
    }
}

/// A reply's result and how long the round trip took.
pub struct Timed<R> {
    /// The `result` member, decoded.
    pub result: R,
    /// From the first byte written to the last byte of the reply line read.
    pub latency: Duration,
    /// When the reply line was read; the start-up scenario measures from the spawn to this.
    pub finished: Instant,
}

/// Resident set sizes from `/proc/<pid>/status`, in KiB.
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident set so far.
    pub peak_kib: u64,
}

/// The parts of a JSON-RPC message the driver looks at. Unknown members are skipped without
/// being materialised, and `R` picks only the result fields a scenario reports.
#[derive(serde::Deserialize)]
struct Envelope<R> {
    id: Option<Value>,
    method: Option<String>,
    result: Option<R>,
    error: Option<Value>,
}

impl Daemon {
    /// Spawns `<satchel> --workspace <fresh temp dir> serve` with `SATCHEL_LOG=warn` and the log
    /// in a file next to the workspace (quoted if the daemon fails). `SATCHEL_TOKENIZER` is the
    /// tokenizer the requests use, as a user who picked one would configure it: the daemon
    /// builds that encoder beside start-up, and no other.
    pub fn spawn(satchel: &Path, tokenizer: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("satchel-bench-")
            .tempdir()
            .context("creating a temp dir")?;
        Self::spawn_in(satchel, dir, tokenizer)
    }

    /// Like [`Daemon::spawn`], in a temp dir made beforehand, so a caller timing the start-up
    /// does not time the temp dir's creation.
    pub fn spawn_in(satchel: &Path, dir: tempfile::TempDir, tokenizer: &str) -> anyhow::Result<Self> {
        // The daemon's log stays in its temp dir unless the caller wants to keep it.
        let log_path = std::env::var_os(DAEMON_LOG_ENV).map_or_else(|| dir.path().join("daemon.log"), PathBuf::from);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening the daemon log {}", log_path.display()))?;
        let mut child = Command::new(satchel)
            .arg("--workspace")
            .arg(dir.path().join("ws"))
            .arg("serve")
            .env(
                "SATCHEL_LOG",
                std::env::var("SATCHEL_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("SATCHEL_TOKENIZER", tokenizer)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", satchel.display()))?;
        let stdin = child.stdin.take().context("daemon stdin")?;
        let stdout = child.stdout.take().context("daemon stdout")?;
        Ok(Daemon {
            child,
            stdin: Some(stdin),
            stdout: BufReader::with_capacity(1 << 20, stdout),
            _dir: dir,
            log_path,
            next_id: 1,
            line: String::new(),
        })
    }

    /// Serialises a request with the next id.
    pub fn request<P: Serialize>(&mut self, method: &'static str, params: &P) -> anyhow::Result<Request> {
        #[derive(Serialize)]
        struct Wire<'a, P> {
            jsonrpc: &'static str,
            id: u64,
            method: &'a str,
            params: &'a P,
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_string(&Wire {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })?;
        line.push('\n');
        Ok(Request { id, method, line })
    }

    /// Sends a serialised request and waits for its reply, skipping notifications. Fails on a
    /// JSON-RPC error, on a reply to another id, and when the daemon exits.
    pub fn send<R: DeserializeOwned>(&mut self, request: &Request) -> anyhow::Result<Timed<R>> {
        let stdin = self.stdin.as_mut().context("daemon stdin already closed")?;
        let start = Instant::now();
        stdin
            .write_all(request.line.as_bytes())
            .and_then(|()| stdin.flush())
            .with_context(|| format!("writing {} to the daemon{}", request.method, self.log_tail()))?;
        loop {
            self.line.clear();
            let n = self
                .stdout
                .read_line(&mut self.line)
                .context("reading from the daemon")?;
            let finished = Instant::now();
            if n == 0 {
                let status = self
                    .child
                    .wait()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|e| e.to_string());
                bail!(
                    "daemon closed stdout before replying to {} ({status}){}",
                    request.method,
                    self.log_tail()
                );
            }
            let envelope: Envelope<R> = serde_json::from_str(&self.line)
                .with_context(|| format!("decoding the reply to {}: {}", request.method, preview(&self.line)))?;
            if let Some(error) = envelope.error {
                bail!(
                    "{} (id {}) failed with JSON-RPC error: {error}",
                    request.method,
                    request.id
                );
            }
            match (envelope.id, envelope.method) {
                (None, Some(_)) => continue, // a notification, e.g. `context.event`
                (Some(_), Some(method)) => bail!("unexpected server-to-client request {method}"),
                (Some(id), None) if id == request.id => {
                    let result = envelope
                        .result
                        .with_context(|| format!("{} reply without result", request.method))?;
                    return Ok(Timed {
                        result,
                        latency: finished - start,
                        finished,
                    });
                }
                (id, _) => bail!(
                    "reply id {id:?} while waiting for {} (id {})",
                    request.method,
                    request.id
                ),
            }
        }
    }

    /// [`Daemon::request`] then [`Daemon::send`].
    pub fn call<P: Serialize, R: DeserializeOwned>(
        &mut self,
        method: &'static str,
        params: &P,
    ) -> anyhow::Result<Timed<R>> {
        let request = self.request(method, params)?;
        self.send(&request)
    }

    /// `initialize` with `{}`, the first call of every scenario.
    pub fn initialize(&mut self) -> anyhow::Result<Timed<serde::de::IgnoredAny>> {
        self.call("initialize", &serde_json::json!({}))
    }

    /// The daemon's current and peak resident set.
    pub fn memory(&self) -> anyhow::Result<Memory> {
        let path = PathBuf::from(format!("/proc/{}/status", self.child.id()));
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .with_context(|| format!("no {name}"))?;
            let kib = line.trim().trim_end_matches("kB").trim();
            kib.parse().with_context(|| format!("{name} {kib:?}"))
        };
        Ok(Memory {
            rss_kib: field("VmRSS:")?,
            peak_kib: field("VmHWM:")?,
        })
    }

    /// Closes stdin, the protocol's only shutdown signal, and checks that the daemon exits 0.
    pub fn close(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("daemon exited with {status}{}", self.log_tail());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "daemon still running {EXIT_TIMEOUT:?} after stdin closed{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The end of the daemon's log, formatted to follow an error message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; daemon log:\n{tail}")
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // Best effort: the process may exit between the check and the kill.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The start of a long line, for error messages.
fn preview(line: &str) -> &str {
    let end = line.char_indices().nth(300).map_or(line.len(), |(i, _)| i);
    &line[..end]
}
