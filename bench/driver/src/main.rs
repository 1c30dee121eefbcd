//! `satchel-bench`: a whole-process benchmark of the real `satchel` daemon.
//!
//! The micro benchmarks in `crates/core/benches` time functions; this times what a client
//! waits for: a spawned `satchel serve`, JSON-RPC over its stdio, the request's JSON on the
//! wire, the daemon's disk writes and its reply. It replays a conversation file (the shared
//! trajectories, the peers' exports) or a built-in synthetic one, so the numbers can be set
//! beside the Python peers' on the same input. `scripts/bench` runs it on every conversation
//! and `bench/report.py` turns the JSON lines into tables.

// This is a reporting tool, not the protocol daemon: its report goes to stdout.
#![allow(clippy::print_stdout)]

mod conversation;
mod daemon;
mod proxy;
mod scenarios;
mod sections;
mod stats;
mod synthetic;
mod upstream;

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Parser, ValueEnum};
use serde_json::{Map, Value, json};

use crate::conversation::{Conversation, Format};
use crate::scenarios::{Bench, Scenario};

#[derive(Parser)]
#[command(
    name = "satchel-bench",
    about = "Times the real satchel daemon over stdio on a conversation.",
    after_help = "Each daemon gets a fresh workspace under $TMPDIR (default /tmp). Its file system sets the cost \
                  of the daemon's fsyncs: compare a disk with TMPDIR=/dev/shm to see how much they weigh. \
                  SATCHEL_BENCH_DAEMON_LOG=FILE keeps the daemons' logs in FILE; with SATCHEL_LOG=satchel=debug \
                  they time each call's phases."
)]
struct Cli {
    #[command(flatten)]
    source: Source,
    /// Seed of the synthetic conversation.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The satchel binary to spawn.
    #[arg(long, default_value = "target/release/satchel")]
    satchel: PathBuf,
    /// `config.tokenizer` of every `context.prepare`.
    #[arg(long, value_enum, default_value_t = Tokenizer::O200kBase)]
    tokenizer: Tokenizer,
    /// `config.max_input_length`: the model window, in tokens.
    #[arg(long, default_value_t = 131_072)]
    max_input_length: u64,
    /// Messages sent one per call in `steady_append`, `steady_full` and `steady_sections`.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Fresh daemons timed in `startup` and `first_pass`.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// Sessions loaded in `sessions_rss`.
    #[arg(long, default_value_t = 10)]
    sessions: usize,
    /// Label of every result (default: the conversation's file stem, or `synthetic-<tokens>`).
    #[arg(long)]
    label: Option<String>,
    /// Scenario to run; repeat the flag for several (default: all).
    #[arg(long = "scenario", value_enum)]
    scenarios: Vec<Scenario>,
    /// One compact JSON object per scenario on stdout, instead of a readable summary.
    #[arg(long)]
    json_lines: bool,
}

/// The conversation: a file or the synthetic generator, exactly one.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct Source {
    /// A conversation file, `openai-chat-tools/v1` or `anthropic-messages/v1` (detected by
    /// shape when `format` is missing).
    #[arg(long, value_name = "FILE")]
    conversation: Option<PathBuf>,
    /// Generate a coding-agent conversation of about TOKENS tokens (bytes/4), OpenAI format.
    #[arg(long, value_name = "TOKENS")]
    synthetic: Option<u64>,
}

/// The tokenizers the report compares: the cheap estimate and the exact default.
#[derive(Clone, Copy, ValueEnum)]
enum Tokenizer {
    /// `bytes / 4`.
    Estimate,
    /// tiktoken's o200k_base, satchel's default.
    #[value(name = "o200k_base")]
    O200kBase,
}

impl Tokenizer {
    fn name(self) -> &'static str {
        match self {
            Tokenizer::Estimate => "estimate",
            Tokenizer::O200kBase => "o200k_base",
        }
    }

    /// The `config` of every `context.prepare`. The estimate's divisor is pinned to 4 so the
    /// run does not depend on the daemon's default.
    fn config(self, max_input_length: u64) -> Value {
        let mut config = json!({"tokenizer": self.name(), "max_input_length": max_input_length});
        if let Tokenizer::Estimate = self {
            config["token_count_estimate_divisor"] = json!(4);
        }
        config
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (conversation, default_label) = match (&cli.source.conversation, cli.source.synthetic) {
        (Some(path), _) => {
            let stem = path
                .file_stem()
                .map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into());
            (Conversation::load(path)?, stem)
        }
        (None, Some(tokens)) => {
            let conversation = Conversation {
                source: format!("synthetic:{tokens}:seed{}", cli.seed),
                format: Format::OpenAi,
                system: None,
                messages: synthetic::generate(tokens, cli.seed),
            };
            (conversation, format!("synthetic-{tokens}"))
        }
        (None, None) => unreachable!("clap requires one source"),
    };
    let satchel = std::fs::canonicalize(&cli.satchel).with_context(|| {
        format!(
            "{} not found; build it with `cargo build --release -p satchel` or pass --satchel",
            cli.satchel.display()
        )
    })?;
    let bench = Bench {
        satchel: &satchel,
        conversation: &conversation,
        config: cli.tokenizer.config(cli.max_input_length),
        repeat: usize::try_from(cli.repeat)?,
        steps: cli.steps,
        sessions: cli.sessions,
    };
    let common = json!({
        "label": cli.label.unwrap_or(default_label),
        "conversation": conversation.describe(),
        "tokenizer": cli.tokenizer.name(),
        "max_input_length": cli.max_input_length,
        // The daemons' workspaces are made here ($TMPDIR): its file system sets the cost of the
        // daemon's fsyncs, which can dominate small calls on a disk and vanish on tmpfs.
        "workspace_root": std::env::temp_dir(),
    });
    if !cli.json_lines {
        println!("{}", header(&common));
    }
    let scenarios = if cli.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        cli.scenarios
    };
    for scenario in scenarios {
        let fields = bench
            .run(scenario)
            .with_context(|| format!("scenario {}", scenario.name()))?;
        let Value::Object(mut result) = common.clone() else {
            unreachable!("common is an object")
        };
        result.insert("scenario".into(), json!(scenario.name()));
        result.extend(fields.clone());
        if cli.json_lines {
            println!("{}", Value::Object(result));
        } else {
            println!("{}", summary(scenario.name(), &fields));
        }
        // Results appear as each scenario ends, even when stdout is a pipe to `tee`.
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// The readable summary's first line: what was run.
fn header(common: &Value) -> String {
    let c = &common["conversation"];
    format!(
        "{}: {} ({}, {} messages, {} bytes, ~{} tokens) tokenizer {} window {}, workspaces in {}",
        common["label"].as_str().unwrap_or_default(),
        c["source"].as_str().unwrap_or_default(),
        c["format"].as_str().unwrap_or_default(),
        c["messages"],
        c["bytes"],
        c["est_tokens_bytes_div4"],
        common["tokenizer"].as_str().unwrap_or_default(),
        common["max_input_length"],
        common["workspace_root"].as_str().unwrap_or_default(),
    )
}

/// One readable line per scenario: its fields as `key=value`.
fn summary(name: &str, fields: &Map<String, Value>) -> String {
    let pairs: Vec<String> = fields.iter().map(|(key, value)| format!("{key}={value}")).collect();
    format!("  {name:<14} {}", pairs.join(" "))
}
