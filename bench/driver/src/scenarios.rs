//! The scenarios: each answers one question about the daemon as a client experiences it.
//!
//! | scenario | question |
//! |---|---|
//! | `startup` | how long until a fresh daemon answers `initialize`? |
//! | `first_pass` | how long does the first `context.prepare` of a whole conversation take (cold and warm daemon), and what does it do? |
//! | `replay_append` | what does each step of a live agent loop cost, from the first message on? |
//! | `steady_append` | the same for the last `--steps` messages of a long conversation |
//! | `steady_full` | the same when the client resends its whole history, against the cost of merely parsing and writing that JSON once (the floor no JSON-RPC server can beat) |
//! | `steady_sections` | what assembling a system prompt from 40 sections (over the prompt budget, so truncated) adds to a `steady_append` step |
//! | `sessions_rss` | how much memory do `--sessions` loaded sessions take? |
//! | `proxy` | what does `satchel proxy` add to a request, beyond a direct call to the same model server and `context.prepare`'s own cost, and to a stream's first byte (`proxy.rs`)? Not in the default set: `scripts/bench` runs it on the 130K-token conversation. |
//! | `cache_prefix` | how much of each request of a replay is the previous request's prefix (what a provider's prompt cache reuses), with the recent window moving on every message (`pruning_phase_batch` 1, "before") and in the daemon's default steps ("after")? Not in the default set: `scripts/bench` runs it at a 16K window. |
//!
//! Each returns its own fields; `main` adds the fields every result line shares.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::conversation::Conversation;
use crate::daemon::{Daemon, Timed};
use crate::{sections, stats};

/// Timings of the serde_json floor per step; the minimum is kept, since noise only adds time.
const FLOOR_TRIALS: usize = 3;

/// Session id of the single-session scenarios.
const SESSION: &str = "bench";

/// A scenario; its snake_case name is used on the command line and in the results.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Scenario {
    /// Spawn to `initialize` reply.
    Startup,
    /// One `context.prepare` with the whole conversation, in a fresh daemon.
    FirstPass,
    /// Every message appended one by one, from the first.
    ReplayAppend,
    /// The last `--steps` messages appended one by one.
    SteadyAppend,
    /// The last `--steps` messages, each step resending the full history, vs. the serde floor.
    SteadyFull,
    /// The last `--steps` messages appended to two sessions of one daemon, step by step: one
    /// plain, one also sending the same 40 system-prompt sections on every call.
    SteadySections,
    /// Memory with `--sessions` sessions loaded.
    SessionsRss,
    /// `replay_append` twice, with `pruning_phase_batch` 1 and the default: prefix reuse.
    CachePrefix,
    /// The `steady_full` steps through `satchel proxy`, against a direct call and
    /// `context.prepare` alone.
    Proxy,
}

impl Scenario {
    /// All scenarios, in the order they run by default (cheap ones first).
    pub const ALL: [Scenario; 7] = [
        Scenario::Startup,
        Scenario::FirstPass,
        Scenario::ReplayAppend,
        Scenario::SteadyAppend,
        Scenario::SteadyFull,
        Scenario::SteadySections,
        Scenario::SessionsRss,
    ];

    /// The name used in the results.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Startup => "startup",
            Scenario::FirstPass => "first_pass",
            Scenario::ReplayAppend => "replay_append",
            Scenario::SteadyAppend => "steady_append",
            Scenario::SteadyFull => "steady_full",
            Scenario::SteadySections => "steady_sections",
            Scenario::SessionsRss => "sessions_rss",
            Scenario::CachePrefix => "cache_prefix",
            Scenario::Proxy => "proxy",
        }
    }
}

/// What every scenario needs: the daemon binary, the conversation and the knobs.
pub struct Bench<'a> {
    /// The `satchel` binary.
    pub satchel: &'a Path,
    /// The conversation to send.
    pub conversation: &'a Conversation,
    /// `config` of every `context.prepare` (tokenizer and window).
    pub config: Value,
    /// Fresh daemons for `startup` and `first_pass`.
    pub repeat: usize,
    /// Messages sent one per call in the steady scenarios.
    pub steps: usize,
    /// Sessions loaded in `sessions_rss`.
    pub sessions: usize,
}

/// `context.prepare` params, borrowing the conversation so that building a request copies
/// nothing but the final JSON text.
#[derive(Serialize)]
struct PrepareParams<'a> {
    session_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<&'a [Value]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    append: Option<&'a [Value]>,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sections: Option<&'a [Value]>,
    config: &'a Value,
}

/// The `context.prepare` result fields the scenarios report; the rest is skipped unread.
#[derive(Deserialize)]
struct Prepared {
    messages: Vec<IgnoredAny>,
    tokens: Tokens,
    actions: Vec<Action>,
    over_limit: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Tokens {
    total: u64,
}

/// The `context.prepare` result fields `cache_prefix` reads: the messages as sent (their
/// exact bytes, to see whether a request extends the previous one) and the stable prefix.
#[derive(Deserialize)]
struct PreparedPrefix {
    messages: Vec<Box<serde_json::value::RawValue>>,
    tokens: Tokens,
    /// Absent from a daemon that predates it: counted as nothing reused.
    #[serde(default)]
    cache_stable_prefix_tokens: u64,
    actions: Vec<Action>,
    over_limit: Option<IgnoredAny>,
}

/// The `context.prepare` result fields `steady_sections` reports: [`Prepared`]'s, and what
/// the daemon says about the system prompt it assembled.
#[derive(Deserialize)]
struct PreparedPrompt {
    actions: Vec<Action>,
    tokens: Tokens,
    /// The assembled system prompt (a string when only sections were sent).
    system: Option<Value>,
    /// How it was assembled; absent while the daemon does not report it.
    prompt: Option<PromptReport>,
}

/// The fields of `PrepareResult.prompt` (AceClaw's camelCase shape) the scenario checks. Each
/// has a default, so a daemon that reports less still runs the scenario: only timing matters.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PromptReport {
    total_chars: Option<u64>,
    truncated_section_keys: Vec<String>,
    sections: Vec<IgnoredAny>,
    budget: Option<PromptBudget>,
    over_budget: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptBudget {
    max_total_chars: u64,
}

#[derive(Deserialize)]
struct Action {
    kind: String,
}

/// How a call sends messages: the whole list (`messages`) or only the new ones (`append`).
#[derive(Clone, Copy)]
enum Batch<'a> {
    Full(&'a [Value]),
    Append(&'a [Value]),
}

/// Number of actions per `kind`, summed over calls.
#[derive(Default)]
struct ActionCounts(BTreeMap<String, u64>);

impl ActionCounts {
    fn add(&mut self, prepared: &Prepared) {
        self.add_all(&prepared.actions);
    }

    fn add_all(&mut self, actions: &[Action]) {
        for action in actions {
            *self.0.entry(action.kind.clone()).or_default() += 1;
        }
    }
}

impl Bench<'_> {
    /// The tokenizer of the requests, also the daemons' configured one.
    fn tokenizer(&self) -> &str {
        self.config["tokenizer"].as_str().unwrap_or("o200k_base")
    }

    /// Runs one scenario and returns its fields.
    pub fn run(&self, scenario: Scenario) -> anyhow::Result<Map<String, Value>> {
        if self.conversation.messages.len() < 2 {
            bail!("{}: the benchmark needs at least 2 messages", self.conversation.source);
        }
        match scenario {
            Scenario::Startup => self.startup(),
            Scenario::FirstPass => self.first_pass(),
            Scenario::ReplayAppend => self.replay_append(),
            Scenario::SteadyAppend => self.steady_append(),
            Scenario::SteadyFull => self.steady_full(),
            Scenario::SteadySections => self.steady_sections(),
            Scenario::SessionsRss => self.sessions_rss(),
            Scenario::CachePrefix => self.cache_prefix(),
            Scenario::Proxy => crate::proxy::run(&crate::proxy::Setup {
                satchel: self.satchel,
                conversation: self.conversation,
                config: &self.config,
                tokenizer: self.tokenizer(),
                first: self.steady_start(),
            }),
        }
    }

    fn startup(&self) -> anyhow::Result<Map<String, Value>> {
        let mut samples = Vec::new();
        for _ in 0..self.repeat {
            let dir = tempfile::Builder::new().prefix("satchel-bench-").tempdir()?;
            let spawned = Instant::now();
            let mut daemon = Daemon::spawn_in(self.satchel, dir, self.tokenizer())?;
            let reply = daemon.initialize()?;
            samples.push(reply.finished - spawned);
            daemon.close()?;
        }
        Ok(stats::spread(&samples))
    }

    /// Cold: the first call of a fresh daemon, one-off initialisation included (e.g. building
    /// the tokenizer's tables): what a client waits for after spawning satchel. Warm: the same
    /// call in another fresh daemon after a one-message warm-up in another session, so only the
    /// per-conversation work is timed; the peers are timed in a warm process, so the report
    /// sets them beside both.
    fn first_pass(&self) -> anyhow::Result<Map<String, Value>> {
        let messages = &self.conversation.messages;
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        let mut last = None;
        for _ in 0..self.repeat {
            let mut daemon = self.daemon()?;
            let reply = self.prepare(&mut daemon, SESSION, Batch::Full(messages))?;
            cold.push(reply.latency);
            last = Some((reply.result, daemon.memory()?));
            daemon.close()?;

            let mut daemon = self.daemon()?;
            self.prepare(&mut daemon, "warm-up", Batch::Full(&messages[..1]))?;
            warm.push(self.prepare(&mut daemon, SESSION, Batch::Full(messages))?.latency);
            daemon.close()?;
        }
        let mut out = stats::spread(&cold);
        for (key, value) in stats::spread(&warm) {
            if key != "runs" {
                out.insert(format!("warm_{key}"), value);
            }
        }
        if let Some((prepared, memory)) = last {
            let mut actions = ActionCounts::default();
            actions.add(&prepared);
            out.insert("tokens_total".into(), json!(prepared.tokens.total));
            out.insert("messages_returned".into(), json!(prepared.messages.len()));
            out.insert("actions".into(), json!(actions.0));
            out.insert("over_limit".into(), json!(prepared.over_limit.is_some()));
            out.insert("peak_rss_mib".into(), json!(stats::mib(memory.peak_kib)));
        }
        Ok(out)
    }

    fn replay_append(&self) -> anyhow::Result<Map<String, Value>> {
        let messages = &self.conversation.messages;
        let mut daemon = self.daemon()?;
        let mut latencies = Vec::with_capacity(messages.len());
        let mut actions = ActionCounts::default();
        let mut last = None;
        for i in 0..messages.len() {
            // A session is created by `messages`; every later message is an `append`.
            let batch = if i == 0 {
                Batch::Full(&messages[..1])
            } else {
                Batch::Append(&messages[i..=i])
            };
            let reply = self.prepare(&mut daemon, SESSION, batch)?;
            latencies.push(reply.latency);
            actions.add(&reply.result);
            last = Some(reply.result);
        }
        let memory = daemon.memory()?;
        daemon.close()?;
        let mut out = stats::percentiles(&latencies);
        out.insert("total_ms".into(), json!(stats::ms(latencies.iter().sum())));
        if let Some(prepared) = last {
            out.insert("tokens_total".into(), json!(prepared.tokens.total));
            out.insert("messages_returned".into(), json!(prepared.messages.len()));
        }
        out.insert("actions".into(), json!(actions.0));
        out.insert("peak_rss_mib".into(), json!(stats::mib(memory.peak_kib)));
        Ok(out)
    }

    fn steady_append(&self) -> anyhow::Result<Map<String, Value>> {
        let messages = &self.conversation.messages;
        let first = self.steady_start();
        let mut daemon = self.daemon()?;
        let initial = self.prepare(&mut daemon, SESSION, Batch::Full(&messages[..first]))?;
        let mut latencies = Vec::new();
        let mut last = initial.result;
        for i in first..messages.len() {
            let reply = self.prepare(&mut daemon, SESSION, Batch::Append(&messages[i..=i]))?;
            latencies.push(reply.latency);
            last = reply.result;
        }
        daemon.close()?;
        let mut out = Map::new();
        out.insert("first_messages".into(), json!(first));
        out.insert("initial_ms".into(), json!(stats::ms(initial.latency)));
        out.extend(stats::percentiles(&latencies));
        out.insert("tokens_total".into(), json!(last.tokens.total));
        Ok(out)
    }

    fn steady_full(&self) -> anyhow::Result<Map<String, Value>> {
        let messages = &self.conversation.messages;
        let first = self.steady_start();
        let mut daemon = self.daemon()?;
        let initial = self.prepare(&mut daemon, SESSION, Batch::Full(&messages[..first]))?;
        let (mut prepare, mut floor, mut parse, mut serialise, mut ratios) = (vec![], vec![], vec![], vec![], vec![]);
        let mut request_bytes = 0;
        for i in first..messages.len() {
            let request = daemon.request("context.prepare", &self.params(SESSION, Batch::Full(&messages[..=i])))?;
            let reply: Timed<Prepared> = daemon.send(&request)?;
            let (floor_parse, floor_serialise) = serde_floor(request.json())?;
            let step_floor = floor_parse + floor_serialise;
            ratios.push(reply.latency.as_secs_f64() / step_floor.as_secs_f64().max(1e-9));
            prepare.push(reply.latency);
            floor.push(step_floor);
            parse.push(floor_parse);
            serialise.push(floor_serialise);
            request_bytes = request.wire_bytes();
        }
        daemon.close()?;
        let p50 = |samples: &[Duration]| json!(stats::median_ms(samples));
        let prepare_stats = stats::percentiles(&prepare);
        let mut out = Map::new();
        out.insert("first_messages".into(), json!(first));
        out.insert("initial_ms".into(), json!(stats::ms(initial.latency)));
        for (key, value) in prepare_stats {
            out.insert(if key == "count" { key } else { format!("prepare_{key}") }, value);
        }
        out.insert("floor_p50_ms".into(), p50(&floor));
        out.insert("floor_parse_p50_ms".into(), p50(&parse));
        out.insert("floor_serialise_p50_ms".into(), p50(&serialise));
        out.insert(
            "ratio_median".into(),
            json!(stats::quantile(&ratios, 0.5).map(stats::round3)),
        );
        out.insert("request_bytes_last".into(), json!(request_bytes));
        Ok(out)
    }

    /// One daemon, two sessions holding the same conversation: each step appends the next
    /// message to `plain` and to `sections`, which also sends the same [`sections::COUNT`]
    /// sections on every call (a client resending its memory, rules and git status). The two
    /// calls of a step run back to back, in alternating order, so noise and the daemon's state
    /// (caches, the disk) weigh on both alike. `added_p50_ms` = p50(sections) − p50(plain);
    /// `added_p50_ratio` = that ÷ p50(plain). The sections total more than the default prompt
    /// budget, so the daemon truncates on every call: `truncated_sections` is how many it cut
    /// (null while the daemon returns no `prompt`). `initial_plain_ms` is the daemon's first
    /// `context.prepare`, one-off set-up (the tokenizer's tables) included; `initial_sections_ms`
    /// the first call that sends the sections.
    fn steady_sections(&self) -> anyhow::Result<Map<String, Value>> {
        const PLAIN: &str = "plain";
        const SECTIONS: &str = "sections";
        let messages = &self.conversation.messages;
        let sections = sections::generate();
        let first = self.steady_start();
        let mut daemon = self.daemon()?;
        let initial_plain = self.prepare(&mut daemon, PLAIN, Batch::Full(&messages[..first]))?;
        let initial_sections: Timed<PreparedPrompt> = daemon.call(
            "context.prepare",
            &self.params_with_sections(SECTIONS, Batch::Full(&messages[..first]), &sections),
        )?;
        let (mut plain, mut with_sections) = (Vec::new(), Vec::new());
        let (mut plain_actions, mut sections_actions) = (ActionCounts::default(), ActionCounts::default());
        let (mut plain_bytes, mut sections_bytes) = (0, 0);
        let (mut plain_json, mut sections_json) = (String::new(), String::new());
        let mut last_plain = initial_plain.result;
        let mut last_sections = initial_sections.result;
        for i in first..messages.len() {
            let batch = Batch::Append(&messages[i..=i]);
            // Both requests are serialised before either is timed.
            let plain_request = daemon.request("context.prepare", &self.params(PLAIN, batch))?;
            let sections_request = daemon.request(
                "context.prepare",
                &self.params_with_sections(SECTIONS, batch, &sections),
            )?;
            let plain_first = (i - first).is_multiple_of(2);
            let (plain_reply, sections_reply): (Timed<Prepared>, Timed<PreparedPrompt>) = if plain_first {
                let p = daemon.send(&plain_request)?;
                (p, daemon.send(&sections_request)?)
            } else {
                let s = daemon.send(&sections_request)?;
                (daemon.send(&plain_request)?, s)
            };
            plain.push(plain_reply.latency);
            with_sections.push(sections_reply.latency);
            plain_actions.add(&plain_reply.result);
            sections_actions.add_all(&sections_reply.result.actions);
            plain_bytes = plain_request.wire_bytes();
            sections_bytes = sections_request.wire_bytes();
            plain_json = plain_request.json().to_owned();
            sections_json = sections_request.json().to_owned();
            last_plain = plain_reply.result;
            last_sections = sections_reply.result;
        }
        daemon.close()?;

        let (plain_p50, sections_p50) = (stats::median_ms(&plain), stats::median_ms(&with_sections));
        let added = plain_p50.zip(sections_p50).map(|(p, s)| stats::round3(s - p));
        let mut out = Map::new();
        out.insert("first_messages".into(), json!(first));
        out.insert("count".into(), json!(plain.len()));
        out.insert("sections".into(), json!(sections.len()));
        out.insert("sections_protected".into(), json!(sections::PROTECTED));
        let section_chars: usize = sections
            .iter()
            .filter_map(|s| s["content"].as_str())
            .map(|c| c.chars().count())
            .sum();
        out.insert("sections_chars".into(), json!(section_chars));
        out.insert("initial_plain_ms".into(), json!(stats::ms(initial_plain.latency)));
        out.insert("initial_sections_ms".into(), json!(stats::ms(initial_sections.latency)));
        for (name, samples) in [("plain", &plain), ("sections", &with_sections)] {
            out.insert(format!("{name}_p50_ms"), json!(stats::quantile_ms(samples, 0.5)));
            out.insert(format!("{name}_p90_ms"), json!(stats::quantile_ms(samples, 0.9)));
            out.insert(format!("{name}_max_ms"), json!(stats::quantile_ms(samples, 1.0)));
        }
        out.insert("added_p50_ms".into(), json!(added));
        out.insert(
            "added_p50_ratio".into(),
            json!(
                added
                    .zip(plain_p50)
                    .filter(|&(_, p)| p > 0.0)
                    .map(|(a, p)| stats::round3(a / p))
            ),
        );
        // What the extra bytes cost any JSON-RPC pair, whatever the daemon does with them: the
        // serde floor (parse + write) of the larger request and of the returned `system`.
        // What is left of `added_p50_ms` above it is the daemon's own work.
        let floor = |json: &str| serde_floor(json).map(|(p, w)| p + w);
        let reply_extra = serde_json::to_string(&json!({"system": last_sections.system}))?;
        let wire = floor(&sections_json)?.saturating_sub(floor(&plain_json)?) + floor(&reply_extra)?;
        let wire_ms = stats::round3(wire.as_secs_f64() * 1000.0);
        out.insert("wire_floor_added_ms".into(), json!(wire_ms));
        out.insert(
            "assembly_added_p50_ms".into(),
            json!(added.map(|a| stats::round3(a - wire_ms))),
        );
        out.insert("request_bytes_plain_last".into(), json!(plain_bytes));
        out.insert("request_bytes_sections_last".into(), json!(sections_bytes));
        out.insert("tokens_total_plain".into(), json!(last_plain.tokens.total));
        out.insert("tokens_total_sections".into(), json!(last_sections.tokens.total));
        out.insert("actions_plain".into(), json!(plain_actions.0));
        out.insert("actions_sections".into(), json!(sections_actions.0));
        let system_chars = last_sections
            .system
            .as_ref()
            .and_then(Value::as_str)
            .map(|s| s.chars().count());
        out.insert("system_chars".into(), json!(system_chars));
        let prompt = last_sections.prompt;
        out.insert("prompt_returned".into(), json!(prompt.is_some()));
        if let Some(prompt) = &prompt {
            out.insert("prompt_total_chars".into(), json!(prompt.total_chars));
            out.insert("prompt_sections".into(), json!(prompt.sections.len()));
            out.insert(
                "prompt_budget_chars".into(),
                json!(prompt.budget.as_ref().map(|b| b.max_total_chars)),
            );
            out.insert("over_budget".into(), json!(prompt.over_budget.is_some()));
            if prompt.truncated_section_keys.is_empty() {
                // The sections are sized to be over the default budget: a daemon that cut none
                // did not run the truncation this scenario is meant to time.
                eprintln!(
                    "steady_sections: the daemon truncated no section of {section_chars} characters; \
                     is the prompt budget larger than the default?"
                );
            }
        }
        out.insert(
            "truncated_sections".into(),
            json!(prompt.map(|p| p.truncated_section_keys.len())),
        );
        Ok(out)
    }

    fn sessions_rss(&self) -> anyhow::Result<Map<String, Value>> {
        let mut daemon = self.daemon()?;
        let idle = daemon.memory()?;
        let mut latencies = Vec::new();
        for i in 0..self.sessions {
            let session = format!("s{i}");
            latencies.push(
                self.prepare(&mut daemon, &session, Batch::Full(&self.conversation.messages))?
                    .latency,
            );
        }
        let memory = daemon.memory()?;
        daemon.close()?;
        let load = stats::spread(&latencies);
        let mut out = Map::new();
        out.insert("sessions".into(), json!(self.sessions));
        out.insert(
            "load_median_ms".into(),
            load.get("median_ms").cloned().unwrap_or(Value::Null),
        );
        out.insert("idle_rss_mib".into(), json!(stats::mib(idle.rss_kib)));
        out.insert("rss_mib".into(), json!(stats::mib(memory.rss_kib)));
        out.insert("peak_rss_mib".into(), json!(stats::mib(memory.peak_kib)));
        Ok(out)
    }

    /// The whole conversation one message per call, as in `replay_append`, once with
    /// `pruning_phase_batch` 1 (`before_*`: the recent window moves with every message) and
    /// once with the daemon's default (`after_*`). For each: the mean share of a request's
    /// tokens that the previous request's prefix covers (`cache_stable_prefix_tokens / total`,
    /// from the second call on), the same weighted by tokens, the number of distinct prefixes
    /// (1 + the calls whose request does not extend the previous one byte for byte), and the
    /// compactions, mean request size and over-limit calls, so a cheaper cache does not hide a
    /// bigger or failing request.
    fn cache_prefix(&self) -> anyhow::Result<Map<String, Value>> {
        let mut out = Map::new();
        for (name, batch) in [("before", Some(1)), ("after", None)] {
            let mut config = self.config.clone();
            if let Some(batch) = batch {
                config["pruning_phase_batch"] = json!(batch);
            }
            let bench = Bench { config, ..*self };
            for (key, value) in bench.prefix_replay()? {
                out.insert(format!("{name}_{key}"), value);
            }
        }
        Ok(out)
    }

    /// One replay of `cache_prefix`, under `self.config`.
    fn prefix_replay(&self) -> anyhow::Result<Map<String, Value>> {
        let messages = &self.conversation.messages;
        let mut daemon = self.daemon()?;
        let mut previous: Option<Vec<Box<serde_json::value::RawValue>>> = None;
        let (mut shares, mut reused, mut sent) = (Vec::new(), 0u64, 0u64);
        let (mut distinct, mut compactions, mut over_limit, mut totals) = (0u64, 0u64, 0u64, 0u64);
        for i in 0..messages.len() {
            let batch = if i == 0 {
                Batch::Full(&messages[..1])
            } else {
                Batch::Append(&messages[i..=i])
            };
            let reply: Timed<PreparedPrefix> = daemon.call("context.prepare", &self.params(SESSION, batch))?;
            let result = reply.result;
            let extends = previous.as_ref().is_some_and(|before| {
                result.messages.len() >= before.len()
                    && before.iter().zip(&result.messages).all(|(a, b)| a.get() == b.get())
            });
            if !extends {
                distinct += 1;
            }
            if i > 0 {
                let total = result.tokens.total.max(1);
                let prefix = result.cache_stable_prefix_tokens.min(total);
                shares.push(prefix as f64 / total as f64);
                reused += prefix;
                sent += total;
            }
            totals += result.tokens.total;
            compactions += result.actions.iter().filter(|a| a.kind == "compacted").count() as u64;
            over_limit += u64::from(result.over_limit.is_some());
            previous = Some(result.messages);
        }
        daemon.close()?;
        let mean_share = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
        let mut out = Map::new();
        out.insert("calls".into(), json!(messages.len()));
        out.insert("mean_share".into(), json!(stats::round3(mean_share)));
        out.insert(
            "weighted_share".into(),
            json!(stats::round3(reused as f64 / sent.max(1) as f64)),
        );
        out.insert("distinct_prefixes".into(), json!(distinct));
        out.insert("compactions".into(), json!(compactions));
        out.insert("mean_tokens".into(), json!(totals / messages.len() as u64));
        out.insert("over_limit_calls".into(), json!(over_limit));
        Ok(out)
    }

    /// A fresh daemon in a fresh workspace, initialised (untimed).
    fn daemon(&self) -> anyhow::Result<Daemon> {
        let mut daemon = Daemon::spawn(self.satchel, self.tokenizer())?;
        daemon.initialize()?;
        Ok(daemon)
    }

    /// Index of the first message the steady scenarios send one by one: `--steps` from the end,
    /// leaving at least one message for the call that creates the session.
    fn steady_start(&self) -> usize {
        let n = self.conversation.messages.len();
        n - self.steps.min(n - 1)
    }

    fn params<'a>(&'a self, session_id: &'a str, batch: Batch<'a>) -> PrepareParams<'a> {
        let (messages, append) = match batch {
            Batch::Full(messages) => (Some(messages), None),
            Batch::Append(messages) => (None, Some(messages)),
        };
        PrepareParams {
            session_id,
            messages,
            append,
            format: self.conversation.format.wire_name(),
            system: self.conversation.system.as_ref(),
            sections: None,
            config: &self.config,
        }
    }

    fn params_with_sections<'a>(
        &'a self,
        session_id: &'a str,
        batch: Batch<'a>,
        sections: &'a [Value],
    ) -> PrepareParams<'a> {
        PrepareParams {
            sections: Some(sections),
            ..self.params(session_id, batch)
        }
    }

    fn prepare(&self, daemon: &mut Daemon, session_id: &str, batch: Batch<'_>) -> anyhow::Result<Timed<Prepared>> {
        daemon.call("context.prepare", &self.params(session_id, batch))
    }
}

/// The serde_json floor of one request: parse the line into a `Value` and write it back, the
/// least any server holding the request as JSON must do. Returns the (parse, serialise) split
/// of the fastest of [`FLOOR_TRIALS`] trials.
fn serde_floor(json: &str) -> anyhow::Result<(Duration, Duration)> {
    let mut best: Option<(Duration, Duration)> = None;
    for _ in 0..FLOOR_TRIALS {
        let start = Instant::now();
        let value: Value = serde_json::from_str(black_box(json))?;
        let parsed = Instant::now();
        let text = serde_json::to_string(&value)?;
        let written = Instant::now();
        black_box(&text);
        let trial = (parsed - start, written - parsed);
        if best.is_none_or(|(p, s)| trial.0 + trial.1 < p + s) {
            best = Some(trial);
        }
        // `value` and `text` are dropped here, outside the timed span.
    }
    Ok(best.unwrap_or_default())
}
