//! Engine-level tests: an [`Engine`] on a temporary workspace with a [`ManualClock`] and
//! [`SequentialIds`], so that what it writes and reports is deterministic. One check-style
//! helper per feature, in its own file; insta snapshots (in `snapshots/`, write new ones with
//! `INSTA_UPDATE=always` and read the diff) where the output is structured.

mod align;
mod cache;
mod candidates;
mod compaction;
mod expand;
mod ingest;
mod native;
mod props;
mod recovery;
mod refusals;
mod responses;
mod transactions;

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use satchel_protocol::config::Tokenizer;
use satchel_protocol::{Config, FormatHint, InspectParams, InspectResult, OffloadNoticePath, PrepareParams};
use satchel_storage::Workspace;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::{CallContext, Engine, EngineError, ManualClock, Outcome, Prepared, SequentialIds};

/// The session every test drives.
const SESSION: &str = "s";

/// The day the clock shows: the archive goes to `dialog/2026-03-14.jsonl`.
const DAY: &str = "2026-03-14";

/// A small window that compacts after a few big turns: 4 096 tokens, compaction at 3 276, a
/// summary budget of 500, counted by the byte estimate.
fn small_window() -> Config {
    let mut config = Config::default();
    config.window.max_input_length = 4096;
    config.summary.summary_max_tokens = 500;
    config.tokens.tokenizer = Tokenizer::Estimate;
    // The temporary workspace's random name would otherwise change the notices' sizes,
    // and with them the snapshots' token counts.
    config.render.offload_notice_path = OffloadNoticePath::Relative;
    config
}

/// An engine on a temporary workspace, its clock stopped at [`DAY`] 09:26:53 UTC.
struct Harness {
    dir: TempDir,
    engine: Engine,
    config: Config,
}

impl Harness {
    fn new(config: Config) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let engine = Self::engine_on(&dir, &config);
        Harness { dir, engine, config }
    }

    /// A new engine on the same workspace, as after a restart (its ids start again at `c0001`,
    /// so it is only for reading and for sessions without a compaction yet).
    fn restart(&mut self) {
        self.engine = Self::engine_on(&self.dir, &self.config);
    }

    fn engine_on(dir: &TempDir, config: &Config) -> Engine {
        let workspace = Workspace::open(dir.path()).expect("a workspace");
        let clock = ManualClock::at(Utc.with_ymd_and_hms(2026, 3, 14, 9, 26, 53).unwrap());
        Engine::with_clock(
            workspace,
            config.clone(),
            Arc::new(clock),
            Arc::new(SequentialIds::default()),
        )
        .expect("an engine")
    }

    /// `context.prepare` of [`SESSION`] with `params`, under the harness's config.
    fn call(&self, params: PrepareParams<Box<RawValue>>, call: &CallContext<'_>) -> Result<Prepared, EngineError> {
        let ticket = self.engine.ticket(SESSION)?;
        self.engine
            .prepare(ticket, params, &self.config, call)
            .map(|Outcome { result, .. }| result)
    }

    /// Sends the full history `messages`.
    fn prepare(&self, messages: &[Value]) -> Prepared {
        self.try_prepare(messages, &CallContext::detached())
            .expect("prepare succeeds")
    }

    /// Sends the full history `messages` as part of `call`.
    fn try_prepare(&self, messages: &[Value], call: &CallContext<'_>) -> Result<Prepared, EngineError> {
        self.call(params(Some(messages), None), call)
    }

    /// Appends `messages`.
    fn append(&self, messages: &[Value]) -> Prepared {
        self.call(params(None, Some(messages)), &CallContext::detached())
            .expect("append succeeds")
    }

    fn inspect(&self) -> InspectResult {
        let ticket = self.engine.ticket(SESSION).expect("a ticket");
        self.engine
            .inspect(
                ticket,
                InspectParams {
                    session_id: SESSION.into(),
                    query_hint: None,
                    detail_key: None,
                },
            )
            .expect("the session exists")
    }

    /// A path inside the workspace.
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The session log's bytes (empty when there is none).
    fn log(&self) -> Vec<u8> {
        std::fs::read(self.engine.workspace().layout().session_log(SESSION)).unwrap_or_default()
    }

    /// The session log's records, parsed.
    fn records(&self) -> Vec<Value> {
        String::from_utf8(self.log())
            .expect("a UTF-8 log")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON record"))
            .collect()
    }

    /// The archive file of [`DAY`], parsed line by line.
    fn archive(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path(&format!("dialog/{DAY}.jsonl")))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON archive line"))
            .collect()
    }
}

fn raw(message: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(message).expect("a JSON value")
}

/// The params of a call sending `messages` (the full history) or `append`.
fn params(messages: Option<&[Value]>, append: Option<&[Value]>) -> PrepareParams<Box<RawValue>> {
    PrepareParams {
        session_id: SESSION.into(),
        messages: messages.map(|m| m.iter().map(raw).collect()),
        append: append.map(|m| m.iter().map(raw).collect()),
        expect_messages: None,
        format: FormatHint::Auto,
        system: None,
        tools: None,
        sections: None,
        memory: None,
        usage: None,
        work_done_token: None,
        config: None,
    }
}

/// The messages a call returned, parsed.
fn returned(result: &Prepared) -> Vec<Value> {
    result
        .messages
        .iter()
        .map(|m| serde_json::from_str(m.get()).expect("a JSON message"))
        .collect()
}

/// The reconciliation of a call as (session_messages, reused, appended, replaced).
fn counts(result: &Prepared) -> (usize, usize, usize, usize) {
    let r = &result.reconciliation;
    (r.session_messages, r.reused, r.appended, r.replaced)
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn say(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// An assistant message calling `bash` with `command` under call `id`.
fn run(id: &str, command: &str) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]})
}

fn output(id: &str, text: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": text})
}

/// A tool output of about `bytes` bytes, distinct per `seed`, with an error at its end.
fn big_output(seed: usize, bytes: usize) -> String {
    let line = format!("test module_{seed}::case ... ok\n");
    format!(
        "{}error[E0599]: no method named `frob` found in module_{seed}\n",
        line.repeat(bytes / line.len())
    )
}

/// An agent conversation of `turns` tool turns after one request, each output about
/// `output_bytes` long.
fn conversation(turns: usize, output_bytes: usize) -> Vec<Value> {
    let mut messages = vec![user(
        "Fix the failing tests in crates/parser. Do not change the public API.",
    )];
    for turn in 0..turns {
        let id = format!("call_{turn}");
        messages.push(run(&id, &format!("cargo test -p parser module_{turn}")));
        messages.push(output(&id, &big_output(turn, output_bytes)));
    }
    messages
}
