//! Black-box tests with the real agents: Claude Code and Codex, installed from npm at the
//! versions `tests/agents/package-lock.json` pins (`scripts/test` runs `npm ci` there), run
//! headless through the real `satchel proxy` to a scripted model server on loopback
//! (`agents/model.rs`). Nothing in either agent is changed: it gets a base URL and a key.
//!
//! Each agent runs a session of 42 shell commands, several with outputs of 80–110 KB, at a
//! window small enough that satchel compacts several times on the way: once as configured
//! for a quiet test, with satchel's extractive summaries; once compacting on its own as
//! well (its compaction requests, and the new history after each, go through satchel like
//! any request), with satchel's summaries written by the agent's own model and key
//! (`summarizer: "upstream"`). What is checked is
//! what a user relies on: the agent finishes with the scripted answer; every request the
//! model got fits the window (recounted here with satchel's tokenizer) and is valid for its
//! provider (calls and results paired, signed thinking and reasoning untouched); the
//! workspace holds every output as the agent sent it; `satchel inspect` shows the session;
//! the agent's key is in no workspace file and not in the log.
//!
//! Each run is isolated: a throwaway HOME and work directory, the agent's telemetry, update
//! and plugin switches off (its nonessential traffic too, but in the test that runs Claude
//! Code as users do, which runs in the namespace only), and (where the machine allows: root, `unshare` and `ip`) a
//! network namespace with loopback only, which the scripted server, the proxy and the agent
//! share, so nothing can leave the machine. An agent that is not installed (a clone without
//! `npm ci`) is skipped with the reason printed; `SATCHEL_TEST_CLAUDE` and
//! `SATCHEL_TEST_CODEX` name other binaries.

mod claude;
mod codex;
mod model;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use satchel_core::tokens::TokenCounter;
use satchel_protocol::config::Tokenizer;
use serde_json::Value;

use crate::proxy::harness::{Proxy, Received, Upstream, assert_no_secret, workspace_holds};
use crate::support::checks::session_records;
use crate::support::satchel_bin;

/// How long one agent run may take before it is killed and the test fails.
const AGENT_TIME_LIMIT: Duration = Duration::from_secs(180);

/// The agent CLI `name` from `tests/agents/node_modules/.bin` (or the variable `var`) and
/// the version it reports, or `None` after printing why the test is skipped.
pub fn agent_bin(test: &str, name: &str, var: &str) -> Option<(PathBuf, String)> {
    let bin = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/agents/node_modules/.bin")
            .join(name)
    });
    match Command::new(&bin).arg("--version").stdin(Stdio::null()).output() {
        Ok(out) if out.status.success() => Some((bin, String::from_utf8_lossy(&out.stdout).trim().to_owned())),
        _ => {
            eprintln!(
                "skipped {test}: {} is not installed or does not run (`npm ci --prefix tests/agents`, or set {var})",
                bin.display()
            );
            None
        }
    }
}

/// Runs `scenario` on a thread inside a new network namespace that has only loopback, so
/// every socket it and the processes it starts open stays on this machine; without one (not
/// root, no `unshare` or `ip`), on the host's loopback, saying so. The scenario is told which.
pub fn isolated<T: Send + 'static>(test: &str, scenario: impl FnOnce(bool) -> T + Send + 'static) -> T {
    let netns = match LoopbackNamespace::new() {
        Ok(netns) => Some(netns),
        Err(why) => {
            eprintln!("{test}: no loopback-only network namespace ({why}); running on the host's loopback");
            None
        }
    };
    let run = std::thread::spawn(move || {
        if let Some(netns) = &netns {
            netns.enter();
        }
        let result = scenario(netns.is_some());
        drop(netns);
        result
    });
    run.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A network namespace with only `lo`, up, held open by an `unshare` that waits on its
/// stdin, so it ends with this test process even when the process is killed.
struct LoopbackNamespace {
    holder: Child,
    namespace: File,
}

impl LoopbackNamespace {
    fn new() -> Result<LoopbackNamespace, String> {
        let mut holder = Command::new("unshare")
            .args([
                "--net",
                "--",
                "sh",
                "-c",
                "ip link set lo up && echo up && exec cat >/dev/null",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "up" {
            let status = holder.wait().map_err(|e| e.to_string())?;
            let mut why = String::new();
            let _ = std::io::Read::read_to_string(&mut holder.stderr.take().unwrap(), &mut why);
            return Err(format!(
                "`unshare --net` then `ip link set lo up`: {status}: {}",
                why.trim()
            ));
        }
        let namespace = File::open(format!("/proc/{}/ns/net", holder.id())).map_err(|e| e.to_string())?;
        Ok(LoopbackNamespace { holder, namespace })
    }

    /// Moves the calling thread into the namespace (threads and processes it starts after
    /// this are in it too), and checks that it has no route off the machine.
    fn enter(&self) {
        rustix::thread::move_into_link_name_space(
            self.namespace.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns into the loopback-only namespace");
        // The main IPv4 table (loopback's routes are in the local one): only its header.
        let routes = std::fs::read_to_string("/proc/thread-self/net/route").unwrap();
        assert_eq!(routes.lines().count(), 1, "the namespace has routes: {routes}");
    }
}

impl Drop for LoopbackNamespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// How an agent run ended.
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it printed: its result (Claude Code's JSON, Codex's JSON lines).
    pub stdout: String,
    /// Its diagnostics, for a failure message.
    pub stderr: String,
    /// Its wall time.
    pub elapsed: Duration,
}

/// Runs `cmd` to its end (its output in files under `dir`), killing it after
/// [`AGENT_TIME_LIMIT`].
pub fn run_agent(mut cmd: Command, dir: &Path) -> Finished {
    let (out, err) = (dir.join("agent.stdout"), dir.join("agent.stderr"));
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .expect("spawn the agent");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > AGENT_TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the agent ran over {AGENT_TIME_LIMIT:?}; stderr:\n{}",
                tail(&std::fs::read_to_string(&err).unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Finished {
        status,
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// The last lines of a log, for a failure message.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A request's tokens as satchel counts them (o200k, satchel's default tokenizer): the
/// system prompt, the tool definitions and each message, so what is compared with the
/// window is what satchel promised to keep within it.
pub struct Recount {
    counter: TokenCounter,
    cache: HashMap<String, u64>,
}

impl Recount {
    /// A recount with an empty cache of message counts.
    pub fn new() -> Recount {
        Recount {
            counter: TokenCounter::new(Tokenizer::O200kBase, 4.0),
            cache: HashMap::new(),
        }
    }

    /// Tokens of `system` (if any), `tools` and `messages`.
    pub fn request(&mut self, system: Option<&Value>, tools: &[Value], messages: &[Value]) -> u64 {
        let counter = self.counter;
        let mut total = system.map_or(0, |s| counter.count_message(s)) + counter.count_tool_definitions(tools);
        for message in messages {
            total += *self
                .cache
                .entry(message.to_string())
                .or_insert_with(|| counter.count_message(message));
        }
        total
    }

    /// Tokens of request `i` (as [`Recount::request`]), asserted within `window`.
    pub fn within(
        &mut self,
        window: u64,
        i: usize,
        system: Option<&Value>,
        tools: &[Value],
        messages: &[Value],
    ) -> u64 {
        let tokens = self.request(system, tools, messages);
        assert!(
            tokens <= window,
            "request {i} has {tokens} tokens, over the window of {window}"
        );
        tokens
    }
}

/// satchel's configuration for a run: a small window, small tool-result limits, and with
/// `upstream_summaries` the upstream summariser (the agent's own model and key write the
/// summary of each compaction).
pub fn satchel_env(window: u64, upstream_summaries: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("SATCHEL_MAX_INPUT_LENGTH", window.to_string()),
        ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "4000".into()),
        ("SATCHEL_PRUNING_OLD_MSG_MAX_BYTES", "1500".into()),
    ];
    if upstream_summaries {
        env.extend([
            ("SATCHEL_SUMMARIZER", "upstream".into()),
            (
                "SATCHEL_SUMMARIZER_UPSTREAM_MODEL_ANTHROPIC",
                model::SUMMARY_MODEL_ANTHROPIC.into(),
            ),
            (
                "SATCHEL_SUMMARIZER_UPSTREAM_MODEL_OPENAI",
                model::SUMMARY_MODEL_OPENAI.into(),
            ),
        ]);
    }
    env
}

/// Starts the proxy on `ws` in front of `upstream` with `env`.
pub fn start_proxy(ws: &Path, upstream: &Upstream, env: &[(&'static str, String)]) -> Proxy {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Proxy::start(ws, upstream, &env)
}

/// Checks satchel's summary calls to the agent's model: one per compaction (none fell back
/// to the extractive summary), each with the agent's own key (`has_key`), and the summary
/// the model wrote reached the agent's requests.
pub fn check_summary_calls(
    calls: &[&Received],
    has_key: impl Fn(&Received) -> bool,
    agent: &[&Received],
    compactions: usize,
) {
    assert_eq!(calls.len(), compactions, "one summary call per compaction");
    assert!(
        calls.iter().all(|c| has_key(c)),
        "each summary call carries the agent's key"
    );
    assert!(
        agent.iter().any(|r| r.text().contains(model::SUMMARY_MARK)),
        "the summary the model wrote reaches the model with the agent's next request"
    );
}

/// How inspect should describe an agent's session.
pub struct Origin {
    /// The provider API (`anthropic-messages`, `openai-responses`).
    pub api: &'static str,
    /// What named the session.
    pub key_from: &'static str,
    /// The agent's own compaction requests the model received.
    pub agent_compactions: usize,
}

/// What the satchel side of a run shows, checked the same way for both agents.
pub struct Measured {
    /// Requests the model got.
    pub requests: usize,
    /// satchel's compactions of the session.
    pub compactions: usize,
    /// Requests whose history rewrote the session's (`truncate` records): Claude Code moves
    /// its `cache_control` marker to the newest message, which satchel sees as a rewrite of
    /// the one before.
    pub rewrites: usize,
    /// The largest recount of a request the model got.
    pub max_tokens: u64,
}

/// Checks what satchel kept of session `session` after an agent ran: compacted at least
/// `min_compactions` times, every compaction done; every step's output (both its markers) in some workspace
/// file; `satchel inspect` shows the session, named as `origin` says, with as many of the
/// agent's own compactions as the model was asked for; the key nowhere. `requests` is how
/// many the model got, `max_tokens` the largest recount of them.
pub fn check_workspace(
    ws: &Path,
    proxy: &Proxy,
    session: &str,
    (requests, max_tokens): (usize, u64),
    min_compactions: usize,
    origin: &Origin,
) -> Measured {
    let records = session_records(ws, session);
    let count = |kind: &str| records.iter().filter(|r| r["record"] == kind).count();
    let compactions = count("compaction_done");
    assert_eq!(count("compaction_begun"), compactions, "every compaction is done");
    assert!(
        compactions >= min_compactions,
        "satchel compacted {compactions} times in {requests} requests (the largest {max_tokens} tokens), \
         expected {min_compactions} at least"
    );
    for n in 0..model::STEPS {
        for marker in model::markers(n) {
            assert!(
                workspace_holds(ws, &marker),
                "no workspace file holds {marker} of step {n}'s output"
            );
        }
    }
    let inspect = Command::new(satchel_bin())
        .arg("--workspace")
        .arg(ws)
        .args(["inspect", session, "--json"])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let shown: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(
        shown["session_id"], session,
        "satchel inspect shows the agent's session"
    );
    assert_eq!(
        (&shown["origin"]["api"], &shown["origin"]["key_from"]),
        (&Value::from(origin.api), &Value::from(origin.key_from)),
        "inspect tells where the session came from"
    );
    let recorded = shown["origin"]["agent_compactions"].as_array().map_or(0, Vec::len);
    assert_eq!(
        recorded, origin.agent_compactions,
        "inspect records each of the agent's own compactions"
    );
    assert_no_secret(ws, proxy);
    Measured {
        requests,
        compactions,
        rewrites: count("truncate"),
        max_tokens,
    }
}
