//! Claude Code (`claude -p`, Anthropic Messages) through `satchel proxy`.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::model::{self, FINAL_ANSWER, STEPS, Turn};
use super::{
    Origin, Recount, agent_bin, check_summary_calls, check_workspace, isolated, run_agent, satchel_env, start_proxy,
    tail,
};
use crate::proxy::harness::{Received, Reply, SECRET_KEY, Upstream, workspace, workspace_holds};

/// The window satchel keeps each request within. Claude Code's own part of a request (24
/// tool definitions, its system prompt and a `system` message) is about 17 K tokens.
const WINDOW: u64 = 20_000;
/// The session id given to Claude Code (`--session-id`), which it sends in its header.
const SESSION: &str = "5a7c0e1d-2b3f-4c5d-8e6f-7a8b9c0d1e2f";
/// Claude Code's mark of its own compaction request: a text appended to the last message.
const COMPACTION_PROMPT: &str = "CRITICAL: Respond with TEXT ONLY";

/// The content blocks of a message (none for a string content).
fn blocks(message: &Value) -> &[Value] {
    message["content"].as_array().map_or(&[], Vec::as_slice)
}

/// Whether a request is Claude Code's side request for a session title (a JSON answer).
fn is_title_request(body: &Value) -> bool {
    body["output_config"]["format"]["type"] == "json_schema"
}

/// The scripted Anthropic model.
fn script(request: &Received) -> Reply {
    let path = request.target.split('?').next().unwrap_or_default();
    match (request.method.as_str(), path) {
        ("HEAD", _) => model::empty(),
        ("POST", "/v1/messages") if model::is_summary_call(request) => model::summary_reply(request),
        ("POST", "/v1/messages") => {
            let body = request.json();
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let results = messages
                .iter()
                .flat_map(blocks)
                .filter(|b| b["type"] == "tool_result")
                .map(|b| b["tool_use_id"].as_str().unwrap_or_default().to_owned());
            let next = model::next_step(results, "toolu_step_", &request.text());
            let compaction = messages.last().is_some_and(|m| {
                blocks(m)
                    .iter()
                    .any(|b| b["text"].as_str().is_some_and(|t| t.contains(COMPACTION_PROMPT)))
            });
            let turn = if is_title_request(&body) {
                Turn::Text(r#"{"title": "Scripted shell run"}"#.into())
            } else if compaction {
                Turn::Text(model::summary(next))
            } else if next >= STEPS {
                Turn::Text(FINAL_ANSWER.into())
            } else {
                Turn::Call(next)
            };
            model::anthropic_stream(&turn, model::reported_tokens(request))
        }
        _ => model::not_found(),
    }
}

#[test]
fn claude_code_runs_42_commands_through_satchel_which_compacts_and_keeps_every_output() {
    let test = "agents::claude::quiet";
    let Some((bin, version)) = agent_bin(test, "claude", "SATCHEL_TEST_CLAUDE") else {
        return;
    };
    isolated(test, move |_| run(&bin, &version, Variant::Quiet));
}

/// Claude Code as a user runs it: its nonessential traffic on (a title request, when it
/// sends one, would come through the proxy in the same session: 2.1.332 sends none in `-p`
/// mode) and compacting on its own, between satchel's compactions, whose summaries its own
/// model writes. Only in the loopback-only namespace, where its calls to Anthropic's own
/// hosts cannot leave.
#[test]
fn claude_code_with_its_side_requests_and_its_own_compaction_goes_through_satchel() {
    let test = "agents::claude::chatty";
    let Some((bin, version)) = agent_bin(test, "claude", "SATCHEL_TEST_CLAUDE") else {
        return;
    };
    isolated(test, move |in_namespace| {
        if in_namespace {
            run(&bin, &version, Variant::Chatty);
        } else {
            eprintln!("skipped {test}: its side traffic needs the loopback-only namespace");
        }
    });
}

/// How Claude Code is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Nonessential traffic off, no compaction of its own.
    Quiet,
    /// Nonessential traffic on, compacting on its own; satchel's summaries written by the
    /// agent's model (`summarizer: "upstream"`).
    Chatty,
}

fn run(bin: &Path, version: &str, variant: Variant) {
    let (dir, ws) = workspace();
    let upstream = Upstream::start(script);
    let proxy = start_proxy(&ws, &upstream, &satchel_env(WINDOW, variant == Variant::Chatty));
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    // Claude Code keeps a Bash output over 30 000 characters in a file of its own and sends
    // a 2 KB preview; at its highest setting it sends the whole output, for satchel to manage.
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(home.join(".claude/settings.json"), r#"{"bashOutputMaxChars": 128000}"#).unwrap();
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("README.md"), "A throwaway project.\n").unwrap();
    let mut cmd = Command::new(bin);
    cmd.current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("TERM", "dumb")
        .env("ANTHROPIC_BASE_URL", proxy.url(""))
        .env("ANTHROPIC_API_KEY", SECRET_KEY)
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_BUG_COMMAND", "1")
        .args([
            "-p",
            "Run the shell commands the task needs, one per turn, then report.",
        ])
        .args([
            "--output-format",
            "json",
            "--allowedTools",
            "Bash",
            "--session-id",
            SESSION,
        ])
        .arg("--debug-file")
        .arg(dir.path().join("claude-debug.log"));
    match variant {
        // No title request, no calls to Anthropic's own hosts.
        Variant::Quiet => cmd.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        // Its compaction threshold: 58 % of (100 000, its least window, - 20 000 kept for
        // output) = 46 400 tokens of its own count, which counts the whole outputs it holds:
        // it compacts about every third large output, and satchel in between (at 50 % it
        // compacted so often that satchel never had to; at 65 % never).
        Variant::Chatty => cmd
            .env("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "100000")
            .env("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "58"),
    };
    let finished = run_agent(cmd, dir.path());
    let debug = std::fs::read_to_string(dir.path().join("claude-debug.log")).unwrap_or_default();
    assert!(
        finished.status.success(),
        "claude exited with {}:\n{}\n{}\ndebug log:\n{}",
        finished.status,
        finished.stdout,
        finished.stderr,
        tail(&debug)
    );
    let result: Value = serde_json::from_str(finished.stdout.trim())
        .unwrap_or_else(|e| panic!("claude's result is not JSON ({e}): {}", finished.stdout));
    assert_eq!(result["result"], FINAL_ANSWER, "claude's answer: {result}");
    assert_eq!(result["session_id"], SESSION);

    let received = upstream.received();
    let (summary_calls, posts): (Vec<&Received>, Vec<&Received>) = received
        .iter()
        .filter(|r| r.method == "POST")
        .partition(|r| model::is_summary_call(r));
    assert!(posts.len() > STEPS, "{} requests for {STEPS} steps", posts.len());
    let mut recount = Recount::new();
    let mut max_tokens = 0;
    let mut agent_compactions = 0;
    let mut signed = 0;
    let mut titles = 0;
    for (i, request) in posts.iter().enumerate() {
        assert_eq!(request.target, "/v1/messages?beta=true");
        assert_eq!(
            request.header("x-api-key"),
            Some(SECRET_KEY),
            "the key reaches the model"
        );
        let body = request.json();
        titles += usize::from(is_title_request(&body));
        let messages = body["messages"].as_array().unwrap();
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let tokens = recount.within(WINDOW, i, body.get("system"), &tools, messages);
        max_tokens = max_tokens.max(tokens);
        assert_pairs(i, messages);
        signed += assert_thinking_untouched(i, messages);
        if messages.last().is_some_and(|m| {
            blocks(m)
                .iter()
                .any(|b| b["text"].as_str().is_some_and(|t| t.contains(COMPACTION_PROMPT)))
        }) {
            agent_compactions += 1;
        }
    }
    // Claude Code's `system` messages (its environment, then reminders) reach the model as
    // sent, and the workspace keeps each of them once satchel compacts it.
    let system_texts: HashSet<String> = posts
        .iter()
        .flat_map(|r| r.json()["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "system")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            content => content[0]["text"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    let with_system = posts
        .iter()
        .filter(|r| {
            r.json()["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "system")
        })
        .count();
    assert!(
        !system_texts.is_empty(),
        "Claude Code's `system` messages reach the model"
    );
    for text in &system_texts {
        let escaped = serde_json::to_string(text).unwrap();
        assert!(
            workspace_holds(&ws, escaped.trim_matches('"')),
            "no workspace file holds the system message {:?}…",
            &text[..60.min(text.len())]
        );
    }
    if variant == Variant::Chatty {
        assert!(
            agent_compactions >= 2,
            "Claude Code compacted {agent_compactions} times on its own"
        );
    }
    assert!(signed > 0, "the agent sent the model's thinking blocks back");
    let measured = check_workspace(
        &ws,
        &proxy,
        SESSION,
        (posts.len(), max_tokens),
        2,
        &Origin {
            api: "anthropic-messages",
            key_from: "x-claude-code-session-id header",
            agent_compactions,
        },
    );
    if variant == Variant::Chatty {
        let has_key = |r: &Received| r.header("x-api-key") == Some(SECRET_KEY);
        check_summary_calls(&summary_calls, has_key, &posts, measured.compactions);
    } else {
        assert!(summary_calls.is_empty(), "an extractive summary calls no model");
    }
    eprintln!(
        "agents::claude ({variant:?}): {version}: {} requests ({titles} for a title, {with_system} with a \
         `system` message), {} compactions by satchel ({} rewrites), {agent_compactions} by the agent, largest request {} \
         tokens of {WINDOW}, {:.1} s",
        measured.requests,
        measured.compactions,
        measured.rewrites,
        measured.max_tokens,
        finished.elapsed.as_secs_f64()
    );
}

/// Every `tool_use` is answered by a `tool_result` in the next message and every
/// `tool_result` answers one in the message before (Anthropic refuses anything else).
fn assert_pairs(request: usize, messages: &[Value]) {
    let ids = |m: Option<&Value>, kind: &str, key: &str| -> Vec<String> {
        m.map(blocks)
            .unwrap_or_default()
            .iter()
            .filter(|b| b["type"] == kind)
            .map(|b| b[key].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    for (i, m) in messages.iter().enumerate() {
        let calls = ids(Some(m), "tool_use", "id");
        if !calls.is_empty() && i + 1 < messages.len() {
            assert_eq!(
                calls,
                ids(messages.get(i + 1), "tool_result", "tool_use_id"),
                "request {request}: message {i}'s calls are answered next"
            );
        }
        let results = ids(Some(m), "tool_result", "tool_use_id");
        if !results.is_empty() {
            let before = i.checked_sub(1).and_then(|j| messages.get(j));
            assert_eq!(
                results,
                ids(before, "tool_use", "id"),
                "request {request}: message {i}'s results answer the message before"
            );
        }
    }
}

/// A thinking block reaches the model as the model wrote it: its text and signature.
/// Returns how many the request holds.
fn assert_thinking_untouched(request: usize, messages: &[Value]) -> usize {
    let mut seen = 0;
    for block in messages.iter().flat_map(blocks).filter(|b| b["type"] == "thinking") {
        let signature = block["signature"].as_str().unwrap_or_default();
        let step = (0..STEPS)
            .find(|&n| model::thinks(n) && model::thought(n).1 == signature)
            .unwrap_or_else(|| panic!("request {request}: a thinking block's signature changed: {block}"));
        assert_eq!(
            block["thinking"],
            model::thought(step).0,
            "request {request}: step {step}'s thinking"
        );
        seen += 1;
    }
    seen
}
