//! A replay through the proxy gives the requests `context.prepare` gives: each step of a
//! conversation (the whole history, as an agent sends it each time the model is due) goes
//! through the real `satchel proxy` to the scripted upstream, and the same history goes to
//! `context.prepare` over stdio, on a second daemon with the same configuration in a second
//! workspace. The messages the upstream receives must be the prepared messages byte for byte
//! (the workspace's own path in the truncation notices aside), its system prompt the prepared
//! one (where the system prompt is the leading message, what satchel adds to it comes as a
//! message right after it), its `X-Satchel-Tokens` the prepared count, and the request valid
//! for its provider,
//! step by step, through compactions (a small window), in Anthropic Messages, OpenAI Chat and
//! OpenAI Responses. The usage the upstream reports calibrates the proxied session; the same
//! number is reported to the stdio session, so both count alike.
//!
//! Two sources: a coding agent's loop written here (`agent_step`, with Claude Code's signed
//! thinking and cached system blocks, Codex's developer message and reasoning items), which
//! runs everywhere; and every shared trajectory (`../shared/data`, the OpenAI ones also as
//! Responses items: about 280 steps a format, a dozen seconds in a debug build); without the
//! data that test says why and passes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::harness::{Proxy, Received, Reply, SECRET_KEY, Upstream, client};
use crate::support::builders::{AgentLoop, agent_step, developer, system, user};
use crate::support::trajectories::{
    Format, Trajectory, as_responses, check_request_shape, is_output_item, load_shared_data, role,
};
use crate::support::{REPLY_TIMEOUT, satchel_bin};

/// The configuration of both daemons for the agent loop: a small window, so the loop is
/// compacted several times, and a small recent limit, so its outputs are cut. The lessons
/// its compactions teach become sections of the system prompt, which the proxy sends in
/// place of the client's; each daemon names a lesson by an id of its own, drawn at random
/// (compared as `<id>`), so tokens are estimated from bytes, alike for both.
const LOOP_ENV: &[(&str, &str)] = &[
    ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
    ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "3000"),
    ("SATCHEL_TOKENIZER", "estimate"),
];
/// The configuration of both daemons for the shared trajectories: the compaction replay's
/// window (`replay_compaction`), every other key at its default but learned lessons (whose
/// random ids the default tokenizer counts differently in each daemon).
const SHARED_ENV: &[(&str, &str)] = &[
    ("SATCHEL_MAX_INPUT_LENGTH", "16384"),
    ("SATCHEL_CANDIDATES_ENABLED", "false"),
];
/// Agent steps of the loop (a fifth of them a reply and a new request).
const LOOP_STEPS: usize = 30;
/// The loop's outputs: a build log over the recent limit, a longer test log.
const LOOP_TUNING: AgentLoop = AgentLoop {
    check_bytes: 4_000,
    test_bytes: 9_000,
    runs_tests: |s| s % 4 == 2,
    reply: |s| format!("Module {s} builds now; the parser still fails further on, so I go on."),
};
#[test]
fn an_agent_loop_through_the_proxy_gets_the_requests_context_prepare_gives() {
    let loops: Vec<Trajectory> = [Format::Anthropic, Format::Openai, Format::OpenaiResponses]
        .into_iter()
        .map(agent_loop)
        .collect();
    let tallies = std::thread::scope(|scope| {
        let jobs: Vec<_> = loops
            .iter()
            .map(|t| scope.spawn(move || replay_job(std::slice::from_ref(t), LOOP_ENV)))
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect::<Vec<_>>()
    });
    for (t, tally) in loops.iter().zip(tallies) {
        let tally = tally.unwrap_or_else(|e| panic!("{}: {e}", t.name));
        eprintln!("proxy replay [{}]: {}", t.name, tally.summary());
        assert!(
            tally.compactions >= 2,
            "{}: the loop was compacted {} times",
            t.name,
            tally.compactions
        );
        assert!(tally.cut_steps > 0, "{}: no request carried a cut output", t.name);
        assert!(
            tally.system_steps > 0,
            "{}: no request carried satchel's system prompt",
            t.name
        );
    }
}

#[test]
fn the_shared_trajectories_through_the_proxy_get_the_requests_context_prepare_gives() {
    let Some((_dir, [(_, openai), (_, anthropic)])) = load_shared_data() else {
        return;
    };
    let responses: Vec<Trajectory> = openai.iter().map(as_responses).collect();
    let folders = [("anthropic", anthropic), ("openai", openai), ("responses", responses)];
    let started = Instant::now();
    let tallies = std::thread::scope(|scope| {
        let jobs: Vec<_> = folders
            .iter()
            .filter(|(_, trajectories)| !trajectories.is_empty())
            .map(|(name, trajectories)| (name, scope.spawn(move || replay_job(trajectories, SHARED_ENV))))
            .collect();
        jobs.into_iter()
            .map(|(name, j)| (name, j.join().unwrap()))
            .collect::<Vec<_>>()
    });
    let mut compactions = 0;
    for (name, tally) in tallies {
        let tally = tally.unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("proxy replay [{name}]: {}", tally.summary());
        compactions += tally.compactions;
    }
    eprintln!("proxy replay of the shared trajectories in {:.1?}", started.elapsed());
    assert!(compactions > 0, "no trajectory was compacted at this window");
}

// ---------------------------------------------------------------------------------------------
// The agent loop.

/// The loop's task.
const TASK: &str = "The parser crate fails to build since the lexer rewrite. Fix it, module by module.";
/// The loop's system prompt.
const SYSTEM_PROMPT: &str = "You are a careful coding agent working in a Rust repository.";

/// [`LOOP_STEPS`] steps of the coding agent's loop in `format`, as the agent sends them:
/// Anthropic with its system prompt in a cached block and a signed thinking block opening
/// every assistant message (Claude Code); OpenAI Chat with a system message; Responses with
/// `instructions` and a developer message (Codex).
fn agent_loop(format: Format) -> Trajectory {
    let (system_prompt, mut messages) = match format {
        Format::Anthropic => (
            Some(json!([{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}])),
            vec![user(TASK)],
        ),
        Format::Openai => (None, vec![system(SYSTEM_PROMPT), user(TASK)]),
        Format::OpenaiResponses => (
            Some(json!(SYSTEM_PROMPT)),
            vec![developer("<permissions>workspace-write</permissions>"), user(TASK)],
        ),
    };
    for s in 0..LOOP_STEPS {
        for mut message in agent_step(format, &LOOP_TUNING, s) {
            if format == Format::Anthropic && role(&message) == "assistant" {
                let thinking = json!({"type": "thinking", "thinking": format!("Step {s}: what next?"), "signature": format!("EqSig{s}==")});
                message["content"] = match message["content"].take() {
                    Value::Array(mut blocks) => {
                        blocks.insert(0, thinking);
                        Value::Array(blocks)
                    }
                    text => json!([thinking, {"type": "text", "text": text}]),
                };
            }
            messages.push(message);
        }
    }
    Trajectory {
        name: format!("agent loop ({})", format.wire_name()),
        session_id: format!("loop-{}", format.wire_name()),
        format,
        system: system_prompt,
        messages,
    }
}

// ---------------------------------------------------------------------------------------------
// One replay: a proxy and a stdio daemon side by side.

/// What a replay went through.
#[derive(Default)]
struct Tally {
    conversations: usize,
    steps: usize,
    /// Steps whose proxy response said `X-Satchel-Compacted: true`.
    compactions: usize,
    /// Steps whose request carried a cut output.
    cut_steps: usize,
    /// Steps whose system prompt is satchel's, not the client's: a learned lesson added to
    /// it (Anthropic's `system`, Responses' `instructions`, or a message after the leading
    /// system message).
    system_steps: usize,
    bytes: usize,
    elapsed: Duration,
}

impl Tally {
    fn summary(&self) -> String {
        format!(
            "{} conversations, {} steps, {} compacted, {} with cut outputs, {} with satchel's system prompt, \
             {} message bytes compared, in {:.1?}",
            self.conversations,
            self.steps,
            self.compactions,
            self.cut_steps,
            self.system_steps,
            self.bytes,
            self.elapsed
        )
    }
}

/// Replays `conversations` (one format) through a proxy and a stdio daemon with `env`.
fn replay_job(conversations: &[Trajectory], env: &[(&str, &str)]) -> Result<Tally, String> {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // Paths of one length, so a notice naming one is as long as one naming the other.
    let (proxy_ws, stdio_ws) = (dir.path().join("ws-proxy"), dir.path().join("ws-stdio"));
    for ws in [&proxy_ws, &stdio_ws] {
        std::fs::create_dir(ws).unwrap();
    }
    let (sender, received) = mpsc::channel();
    let sender = std::sync::Mutex::new(sender);
    let upstream = Upstream::start(move |request: &Received| {
        let _ = sender.lock().unwrap().send(request.clone());
        scripted_reply(request)
    });
    let proxy = Proxy::start(&proxy_ws, &upstream, env);
    let mut stdio = RawDaemon::start(&stdio_ws, env);
    let http = client();
    let mut tally = Tally::default();
    for t in conversations {
        let mut calibrations = 0;
        for end in steps(t) {
            let at = |e: String| format!("{} at message {end}: {e}", t.name);
            let history = &t.messages[..=end];
            let body = request_body(t, history);
            let (path, _) = route(t.format);
            let mut request = http
                .post(proxy.url(path))
                .header("x-satchel-session", &t.session_id)
                .header("content-type", "application/json");
            request = match t.format {
                Format::Anthropic => request
                    .header("x-api-key", SECRET_KEY)
                    .header("anthropic-version", "2023-06-01"),
                Format::Openai | Format::OpenaiResponses => request.bearer_auth(SECRET_KEY),
            };
            let response = request.body(body).send().map_err(|e| at(e.to_string()))?;
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            let (status, tokens, compacted) = (
                response.status(),
                header("x-satchel-tokens"),
                header("x-satchel-compacted"),
            );
            let warning = header("x-satchel-warning");
            let _ = response.bytes();
            if status != 200 || !warning.is_empty() {
                return Err(at(format!("the proxy answered {status} ({warning})")));
            }
            let got = received
                .recv_timeout(REPLY_TIMEOUT)
                .map_err(|_| at("the upstream received nothing".into()))?;
            let reported = reported_input_tokens(&got);
            calibrations += 1;
            wait_for_calibrations(&proxy_ws, &t.session_id, calibrations).map_err(at)?;

            let prepared = stdio.prepare(t, history).map_err(at)?;
            stdio.report_usage(&t.session_id, reported).map_err(at)?;
            let expected = prepared.result.as_ref().unwrap();
            compare(t, &got, expected, &proxy_ws, &stdio_ws).map_err(at)?;
            let after = tokens.split_once("->").map(|(_, after)| after.to_owned());
            if after != Some(expected.tokens.total.to_string()) {
                return Err(at(format!(
                    "X-Satchel-Tokens {tokens:?}, context.prepare counted {}",
                    expected.tokens.total
                )));
            }
            let compacted_here = expected.actions.iter().any(|a| a.kind == "compacted");
            if (compacted == "true") != compacted_here {
                return Err(at(format!(
                    "X-Satchel-Compacted {compacted:?}, context.prepare compacted: {compacted_here}"
                )));
            }
            tally.steps += 1;
            tally.compactions += usize::from(compacted_here);
            tally.cut_steps += usize::from(expected.messages.get().contains(crate::support::MARKER));
            tally.bytes += expected.messages.get().len();
            let own_system = |system: &RawValue| serde_json::from_str::<Value>(system.get()).ok() != t.system;
            tally.system_steps += usize::from(expected.system.as_deref().is_some_and(own_system));
        }
        tally.conversations += 1;
    }
    tally.elapsed = started.elapsed();
    Ok(tally)
}

/// The ends of the requests an agent sends: the history up to each message the model
/// answers (the next one is the model's), and the whole history unless the model's message
/// ends it.
fn steps(t: &Trajectory) -> Vec<usize> {
    let model = |m: &Value| match t.format {
        Format::OpenaiResponses => match m.get("role") {
            Some(role) => role == "assistant",
            None => !is_output_item(m),
        },
        Format::Anthropic | Format::Openai => role(m) == "assistant",
    };
    let n = t.messages.len();
    (0..n)
        .filter(|&i| !model(&t.messages[i]) && (i + 1 == n || model(&t.messages[i + 1])))
        .collect()
}

/// The path of a format's requests, and its messages field.
fn route(format: Format) -> (&'static str, &'static str) {
    match format {
        Format::Anthropic => ("/v1/messages", "messages"),
        Format::Openai => ("/v1/chat/completions", "messages"),
        Format::OpenaiResponses => ("/v1/responses", "input"),
    }
}

/// The provider's system field, where it has one beside the messages.
fn system_field(format: Format) -> Option<&'static str> {
    match format {
        Format::Anthropic => Some("system"),
        Format::Openai => None,
        Format::OpenaiResponses => Some("instructions"),
    }
}

/// The tool definitions, in the format's shape.
fn tools(format: Format) -> Value {
    let parameters = json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]});
    let description = "Run a shell command in the repository.";
    match format {
        Format::Anthropic => json!([{"name": "bash", "description": description, "input_schema": parameters}]),
        Format::Openai => {
            json!([{"type": "function", "function": {"name": "bash", "description": description, "parameters": parameters}}])
        }
        Format::OpenaiResponses => {
            json!([{"type": "function", "name": "bash", "description": description, "parameters": parameters}])
        }
    }
}

/// The body an agent sends with `history`.
fn request_body(t: &Trajectory, history: &[Value]) -> String {
    let (_, messages_field) = route(t.format);
    let mut body = json!({"model": "replay-model"});
    if t.format == Format::Anthropic {
        body["max_tokens"] = json!(4096);
    }
    if let (Some(field), Some(system)) = (system_field(t.format), &t.system) {
        body[field] = system.clone();
    }
    body["tools"] = tools(t.format);
    body[messages_field] = json!(history);
    if t.format == Format::OpenaiResponses {
        body["store"] = json!(false);
    }
    body.to_string()
}

/// The input tokens the upstream reports for a request: a function of its size, so each step
/// calibrates differently.
fn reported_input_tokens(request: &Received) -> u64 {
    request.body.len() as u64 / 4 + 17
}

/// The upstream's answer: a short reply in the provider's shape, with the usage of
/// [`reported_input_tokens`].
fn scripted_reply(request: &Received) -> Reply {
    let tokens = reported_input_tokens(request);
    let body = if request.target.starts_with("/v1/messages") {
        json!({"id": "msg_r", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}],
               "stop_reason": "end_turn", "usage": {"input_tokens": tokens, "output_tokens": 1}})
    } else if request.target.starts_with("/v1/chat/completions") {
        json!({"id": "chatcmpl-r", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1}})
    } else {
        json!({"id": "resp_r", "object": "response", "status": "completed",
               "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
               "usage": {"input_tokens": tokens, "output_tokens": 1}})
    };
    Reply::json(200, &body)
}

/// Waits until the session log holds `count` calibration records: the proxy reports a
/// response's usage once its body has gone, so the next request must wait for it to be
/// counted as the stdio side's is.
fn wait_for_calibrations(ws: &Path, session: &str, count: usize) -> Result<(), String> {
    let log = ws.join("sessions").join(format!("{session}.jsonl"));
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let logged = text
            .lines()
            .filter(|l| l.starts_with(r#"{"record":"calibration""#))
            .count();
        if logged >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{logged} calibration records after {count} responses: the usage was not reported"
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The upstream's request against the prepared one: the same message bytes (with the
/// proxy's workspace named where the stdio one is), the same system prompt, every other
/// field as sent, and valid for its provider.
fn compare(
    t: &Trajectory,
    got: &Received,
    prepared: &Prepared,
    proxy_ws: &Path,
    stdio_ws: &Path,
) -> Result<(), String> {
    let (_, messages_field) = route(t.format);
    let fields: BTreeMap<String, Box<RawValue>> =
        serde_json::from_slice(&got.body).map_err(|e| format!("the upstream got no JSON object: {e}"))?;
    let sent = fields
        .get(messages_field)
        .ok_or_else(|| format!("the upstream got no `{messages_field}`"))?
        .get()
        .replace(&*proxy_ws.to_string_lossy(), &stdio_ws.to_string_lossy());
    let as_value = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).unwrap();
    let mut sent_list: Vec<Box<RawValue>> = serde_json::from_str(&sent).unwrap();
    let beside_field = system_field(t.format).is_none() || t.system.is_none();
    // The system prompt is the leading message: what satchel adds to it comes as a message
    // of its role right after it (`context.prepare` returns it beside).
    if let Some(system) = prepared.system.as_deref().filter(|_| beside_field) {
        let first = sent_list.first().map(|m| as_value(m)).unwrap_or_default();
        let (at, role) = match first["role"].as_str() {
            Some(role @ ("system" | "developer")) => (1, role.to_owned()),
            _ => (0, "system".to_owned()),
        };
        let expected = json!({"role": role, "content": as_value(system)});
        let added = (at < sent_list.len()).then(|| sent_list.remove(at));
        if added.as_deref().map(as_value).map(|v| without_ids(&v.to_string()))
            != Some(without_ids(&expected.to_string()))
        {
            return Err(format!(
                "the upstream's message {at} is {added:?}, context.prepare's system {expected}"
            ));
        }
    }
    let joined = format!("[{}]", sent_list.iter().map(|m| m.get()).collect::<Vec<_>>().join(","));
    let (joined, expected) = (without_ids(&joined), without_ids(prepared.messages.get()));
    if joined != expected {
        return Err(format!(
            "the upstream's `{messages_field}` differ from context.prepare's: {}",
            first_difference(&joined, &expected)
        ));
    }
    let messages: Vec<Value> = serde_json::from_str(&sent).unwrap();
    check_request_shape(&messages, t.format).map_err(|e| format!("an invalid request went upstream: {e}"))?;
    if let Some(field) = system_field(t.format).filter(|_| !beside_field) {
        // As values: the proxy keeps the client's bytes when the prepared prompt is the same.
        let upstream_system = fields.get(field).map(|raw| without_ids(&as_value(raw).to_string()));
        let expected = match &prepared.system {
            Some(system) => Some(as_value(system)),
            None => t.system.clone(),
        };
        let expected = expected.map(|v| without_ids(&v.to_string()));
        if upstream_system != expected {
            return Err(format!(
                "the upstream's `{field}` is {upstream_system:?}, context.prepare's {expected:?}"
            ));
        }
    }
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    for (key, value) in [("model", json!("replay-model")), ("tools", tools(t.format))] {
        if body[key] != value {
            return Err(format!("the upstream's `{key}` is {}, {value} was sent", body[key]));
        }
    }
    Ok(())
}

/// `text` with each id a daemon draws at random (32 lowercase hex digits, e.g. a learned
/// lesson's in the system prompt) written `<id>`.
fn without_ids(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    let bounded = |b: Option<&u8>| b.is_none_or(|b| !b.is_ascii_alphanumeric());
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        let run = bytes[i..].iter().take_while(|b| hex(b)).count();
        if run == 32 && bounded(i.checked_sub(1).map(|j| &bytes[j])) && bounded(bytes.get(i + run)) {
            out.push_str(&text[copied..i]);
            out.push_str("<id>");
            copied = i + run;
        }
        i += run.max(1);
    }
    out.push_str(&text[copied..]);
    out
}

/// Where two texts first differ, with some context of each.
fn first_difference(a: &str, b: &str) -> String {
    let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let around = |s: &str| {
        let (mut start, mut end) = (at.saturating_sub(80), (at + 120).min(s.len()));
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        while !s.is_char_boundary(end) {
            end += 1;
        }
        s[start..end].to_owned()
    };
    format!(
        "at byte {at} of {} / {}: upstream …{:?}… prepared …{:?}…",
        a.len(),
        b.len(),
        around(a),
        around(b)
    )
}

// ---------------------------------------------------------------------------------------------
// The stdio side, read as text: the prepared messages are compared byte for byte.

/// A `satchel serve` whose replies are read as their exact text.
struct RawDaemon {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: String,
}

/// The fields of a `context.prepare` reply the replay compares, the messages as sent.
#[derive(Deserialize)]
struct PrepareReply {
    result: Option<Prepared>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Prepared {
    messages: Box<RawValue>,
    system: Option<Box<RawValue>>,
    tokens: Tokens,
    actions: Vec<Action>,
}

#[derive(Deserialize)]
struct Tokens {
    total: u64,
}

#[derive(Deserialize)]
struct Action {
    kind: String,
}

impl RawDaemon {
    fn start(ws: &Path, env: &[(&str, &str)]) -> RawDaemon {
        let mut cmd = Command::new(satchel_bin());
        cmd.arg("--workspace").arg(ws).arg("serve").env("SATCHEL_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn satchel serve");
        RawDaemon {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 0,
            line: String::new(),
        }
    }

    /// Calls `method` and returns the reply's text.
    fn call(&mut self, method: &str, params: Value) -> Result<&str, String> {
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("writing {method}: {e}"))?;
        self.line.clear();
        match self.stdout.read_line(&mut self.line) {
            Ok(0) | Err(_) => Err(format!("no reply to {method}: the daemon's stdout ended")),
            Ok(_) => Ok(&self.line),
        }
    }

    /// `context.prepare` with the whole `history`, as the proxy calls it.
    fn prepare(&mut self, t: &Trajectory, history: &[Value]) -> Result<PrepareReply, String> {
        let mut params = json!({"session_id": t.session_id, "messages": history, "format": t.format.wire_name(), "tools": tools(t.format)});
        if let (Some(_), Some(system)) = (system_field(t.format), &t.system) {
            params["system"] = system.clone();
        }
        let text = self.call("context.prepare", params)?;
        let reply: PrepareReply = serde_json::from_str(text).map_err(|e| format!("context.prepare's reply: {e}"))?;
        match (&reply.result, &reply.error) {
            (Some(_), _) => Ok(reply),
            (None, error) => Err(format!("context.prepare failed: {error:?}")),
        }
    }

    /// `context.usage`, as the proxy reports the upstream's.
    fn report_usage(&mut self, session: &str, input_tokens: u64) -> Result<(), String> {
        let text = self.call(
            "context.usage",
            json!({"session_id": session, "input_tokens": input_tokens}),
        )?;
        let reply: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        match reply.get("error") {
            Some(error) => Err(format!("context.usage failed: {error}")),
            None => Ok(()),
        }
    }
}

impl Drop for RawDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
