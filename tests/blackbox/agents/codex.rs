//! Codex (`codex exec`, OpenAI Responses) through `satchel proxy`.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::model::{self, FINAL_ANSWER, STEPS, Turn};
use super::{
    Origin, Recount, agent_bin, check_summary_calls, check_workspace, isolated, run_agent, satchel_env, start_proxy,
    tail,
};
use crate::proxy::harness::{Received, Reply, SECRET_KEY, Upstream, workspace};

/// The window satchel keeps each request within. Codex's own part of a request (its
/// developer prompt, environment and 9 tool definitions) is about 9 K tokens.
const WINDOW: u64 = 20_000;
/// Codex's mark of its own compaction request: the last user message's words, sent without tools.
const COMPACTION_PROMPT: &str = "CONTEXT CHECKPOINT COMPACTION";

/// The text of an input item's content parts (or its string content).
fn item_text(item: &Value) -> String {
    match &item["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The scripted Responses model.
fn script(request: &Received) -> Reply {
    if (request.method.as_str(), request.target.as_str()) != ("POST", "/v1/responses") {
        return model::not_found();
    }
    if model::is_summary_call(request) {
        return model::summary_reply(request);
    }
    let body = request.json();
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let results = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["call_id"].as_str().unwrap_or_default().to_owned());
    let next = model::next_step(results, "call_step_", &request.text());
    let compaction = body["tools"].as_array().is_some_and(Vec::is_empty)
        && input.last().is_some_and(|i| item_text(i).contains(COMPACTION_PROMPT));
    let turn = if compaction {
        Turn::Text(model::summary(next))
    } else if next >= STEPS {
        Turn::Text(FINAL_ANSWER.into())
    } else {
        Turn::Call(next)
    };
    model::responses_stream(&turn, model::reported_tokens(request))
}

#[test]
fn codex_runs_42_commands_through_satchel_which_compacts_and_keeps_every_output() {
    let test = "agents::codex";
    let Some((bin, version)) = agent_bin(test, "codex", "SATCHEL_TEST_CODEX") else {
        return;
    };
    isolated(test, move |_| run(&bin, &version, None));
}

/// Codex compacting on its own too (`model_auto_compact_token_limit`), between satchel's
/// compactions, whose summaries Codex's own model writes (`summarizer: "upstream"`): its
/// compaction requests and the new history after each go through.
#[test]
fn codex_compacting_on_its_own_goes_through_satchel() {
    let test = "agents::codex::own_compaction";
    let Some((bin, version)) = agent_bin(test, "codex", "SATCHEL_TEST_CODEX") else {
        return;
    };
    // Codex compacts when the usage it is told (body bytes / 4) reaches the limit; satchel at
    // 80 % of its window, by its own count (about 0.8 of body bytes / 4). Between 17 000 and
    // 18 000 both compact in this session (at 16 000 satchel never has to, at 19 000 Codex
    // never does).
    isolated(test, move |_| run(&bin, &version, Some(17_500)));
}

/// Runs Codex, with its own compaction at `auto_compact` tokens (of the usage it is told)
/// and then satchel's upstream summariser.
fn run(bin: &Path, version: &str, auto_compact: Option<u64>) {
    let (dir, ws) = workspace();
    let upstream = Upstream::start(script);
    let proxy = start_proxy(&ws, &upstream, &satchel_env(WINDOW, auto_compact.is_some()));
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("README.md"), "A throwaway project.\n").unwrap();
    // Top-level keys before any table: after one, Codex would read them as the table's and
    // fall back to OpenAI's own provider. No retries: a failure should fail the test at once.
    let own_limit = auto_compact.map_or(String::new(), |limit| {
        format!("model_context_window = 200000\nmodel_auto_compact_token_limit = {limit}\n")
    });
    let config = format!(
        r#"model = "gpt-scripted"
model_provider = "satchel"
{own_limit}
[model_providers.satchel]
name = "satchel proxy"
base_url = "{}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#,
        proxy.url("/v1")
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let mut cmd = Command::new(bin);
    cmd.current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CODEX_HOME", &codex_home)
        .env("TERM", "dumb")
        .env("OPENAI_API_KEY", SECRET_KEY)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
        ])
        // No plugin sync (GitHub, chatgpt.com) and no analytics.
        .args([
            "--disable",
            "plugins",
            "--disable",
            "remote_plugin",
            "-c",
            "analytics.enabled=false",
        ])
        .arg("Run the shell commands the task needs, one per turn, then report.");
    let finished = run_agent(cmd, dir.path());
    assert!(
        finished.status.success(),
        "codex exited with {}:\n{}\n{}",
        finished.status,
        tail(&finished.stdout),
        tail(&finished.stderr)
    );
    let events: Vec<Value> = finished
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let answer = events
        .iter()
        .rev()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .map(|e| e["item"]["text"].clone());
    assert_eq!(
        answer,
        Some(Value::from(FINAL_ANSWER)),
        "codex's answer: {}",
        tail(&finished.stdout)
    );
    let ran = events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "command_execution")
        .count();
    assert_eq!(ran, STEPS, "codex ran every command");

    let received = upstream.received();
    let (summary_calls, posts): (Vec<&Received>, Vec<&Received>) = received
        .iter()
        .filter(|r| r.method == "POST")
        .partition(|r| model::is_summary_call(r));
    assert!(posts.len() > STEPS, "{} requests for {STEPS} steps", posts.len());
    let session = posts[0].json()["prompt_cache_key"]
        .as_str()
        .expect("Codex sends its thread id as prompt_cache_key")
        .to_owned();
    let mut recount = Recount::new();
    let mut max_tokens = 0;
    let mut agent_compactions = 0;
    let mut signed = 0;
    for (i, request) in posts.iter().enumerate() {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {SECRET_KEY}").as_str()),
            "the key reaches the model"
        );
        let body = request.json();
        assert_eq!(body["prompt_cache_key"], session.as_str(), "one session");
        let input = body["input"].as_array().unwrap();
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let tokens = recount.within(WINDOW, i, body.get("instructions"), &tools, input);
        max_tokens = max_tokens.max(tokens);
        assert_pairs(i, input);
        signed += assert_reasoning_untouched(i, input);
        if tools.is_empty() && input.last().is_some_and(|m| item_text(m).contains(COMPACTION_PROMPT)) {
            agent_compactions += 1;
        }
    }
    if auto_compact.is_some() {
        assert!(agent_compactions >= 1, "Codex never compacted on its own");
    }
    let min_compactions = if auto_compact.is_some() { 1 } else { 2 };
    assert!(signed > 0, "the agent sent the model's reasoning items back");
    let measured = check_workspace(
        &ws,
        &proxy,
        &session,
        (posts.len(), max_tokens),
        min_compactions,
        &Origin {
            api: "openai-responses",
            key_from: "prompt_cache_key",
            agent_compactions,
        },
    );
    if auto_compact.is_some() {
        let bearer = format!("Bearer {SECRET_KEY}");
        let has_key = |r: &Received| r.header("authorization") == Some(bearer.as_str());
        check_summary_calls(&summary_calls, has_key, &posts, measured.compactions);
    } else {
        assert!(summary_calls.is_empty(), "an extractive summary calls no model");
    }
    eprintln!(
        "agents::codex (own compaction at {auto_compact:?}): {version}: {} requests, {} compactions by satchel ({} rewrites), {agent_compactions} by the agent, \
         largest request {} tokens of {WINDOW}, {:.1} s",
        measured.requests,
        measured.compactions,
        measured.rewrites,
        measured.max_tokens,
        finished.elapsed.as_secs_f64()
    );
}

/// Every `function_call` has its `function_call_output` later in the input, and every
/// output follows its call (the Responses API refuses either alone).
fn assert_pairs(request: usize, input: &[Value]) {
    let mut called = HashSet::new();
    let mut answered = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        let id = item["call_id"].as_str().unwrap_or_default().to_owned();
        match item["type"].as_str() {
            Some("function_call") => {
                called.insert(id);
            }
            Some("function_call_output") => {
                assert!(
                    called.contains(&id),
                    "request {request}: item {i} answers {id}, which no earlier item calls"
                );
                answered.insert(id);
            }
            _ => {}
        }
    }
    let unanswered: Vec<_> = called.difference(&answered).collect();
    assert!(
        unanswered.is_empty(),
        "request {request}: calls without output: {unanswered:?}"
    );
}

/// A reasoning item reaches the model as the model wrote it: its encrypted content and
/// summary. Returns how many the request holds.
fn assert_reasoning_untouched(request: usize, input: &[Value]) -> usize {
    let mut seen = 0;
    for item in input.iter().filter(|i| i["type"] == "reasoning") {
        let encrypted = item["encrypted_content"].as_str().unwrap_or_default();
        let step = (0..STEPS)
            .find(|&n| model::thinks(n) && model::thought(n).1 == encrypted)
            .unwrap_or_else(|| panic!("request {request}: a reasoning item's encrypted content changed: {item}"));
        assert_eq!(
            item["summary"][0]["text"],
            model::thought(step).0,
            "request {request}: step {step}'s reasoning summary"
        );
        seen += 1;
    }
    seen
}
