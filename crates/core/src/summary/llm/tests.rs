//! Tests of the model-written summary: prompts, stages, parsing, merging and fallback.

use std::collections::VecDeque;
use std::sync::Mutex;

use satchel_protocol::config::Tokenizer;
use satchel_protocol::{ArchiveRange, MessageFormat};
use serde_json::{Value, json};

use super::history::cut;
use super::*;
use crate::summary::render::summary_message_text;
use crate::tokens::TokenCounter;

/// Replies from a script, in order, and records every request.
struct Script {
    replies: Mutex<VecDeque<Result<String, CompletionError>>>,
    requests: Mutex<Vec<Vec<ChatMessage>>>,
}

impl Script {
    fn new(replies: Vec<Result<String, CompletionError>>) -> Arc<Script> {
        Arc::new(Script {
            replies: Mutex::new(replies.into()),
            requests: Mutex::new(Vec::new()),
        })
    }

    fn ok(replies: &[&str]) -> Arc<Script> {
        Script::new(replies.iter().map(|r| Ok((*r).to_owned())).collect())
    }

    fn requests(&self) -> Vec<Vec<ChatMessage>> {
        self.requests.lock().unwrap().clone()
    }

    /// The user message of request `i`.
    fn user(&self, i: usize) -> String {
        self.requests()[i][1].content.clone()
    }
}

impl Completer for Script {
    fn complete(&self, messages: &[ChatMessage], _max_tokens: u64) -> Result<String, CompletionError> {
        self.requests.lock().unwrap().push(messages.to_vec());
        self.replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(CompletionError("script exhausted".into())))
    }

    fn name(&self) -> String {
        "fake:model".into()
    }
}

fn counter() -> TokenCounter {
    TokenCounter::new(Tokenizer::O200kBase, 4.0)
}

const REQUEST: &str = "Please fix the failing build in crates/app/src/main.rs. You must not change the public API.";
const BUILD: &str = "cargo build --release 2>&1 | tail -n 20";
const BUILD_ERROR: &str = "error[E0433]: failed to resolve: use of undeclared crate or module `serde`";

fn session() -> Vec<Value> {
    let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
    vec![
        json!({"role": "user", "content": REQUEST}),
        json!({"role": "assistant", "content": "Let's look at the file first.", "tool_calls": [
            call("c1", "bash", json!({"command": "cat crates/app/src/main.rs"}))]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "use serde::Serialize;\nfn main() {}"}),
        json!({"role": "assistant", "content": "The issue is a missing dependency. I'll add it to Cargo.toml.",
            "tool_calls": [call("c2", "write_file", json!({"path": "crates/app/Cargo.toml", "content": "[dependencies]\nserde = \"1\""}))]}),
        json!({"role": "tool", "tool_call_id": "c2", "content": "ok"}),
        json!({"role": "assistant", "content": null, "tool_calls": [call("c3", "bash", json!({"command": BUILD}))]}),
        json!({"role": "tool", "tool_call_id": "c3", "content": format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5")}),
        json!({"role": "assistant", "content": "Next I'll check the workspace manifest."}),
    ]
}

fn input<'a>(
    messages: &'a [Value],
    previous: Option<&'a CompactSummary>,
    instruction: Option<&'a str>,
    counter: &'a TokenCounter,
) -> SummaryInput<'a> {
    SummaryInput {
        previous,
        instruction,
        ..SummaryInput::new(messages, MessageFormat::Openai, 4_000, counter)
    }
}

const REPLY: &str = "Here is the summary:

## Goal
- Fix the failing build in `crates/app/src/main.rs`

## Constraints & Preferences
- Must not change the public API.

## Progress
### Done
- [x] Added `serde = \"1\"` to `crates/app/Cargo.toml`

### In Progress
- [ ] Checking the workspace manifest
  because the build still fails

### Blocked
- `cargo build --release` fails: `error[E0433]: failed to resolve`

## Key Decisions
- **Add serde as a dependency**: the code uses `serde::Serialize`.

## Next Steps
1. Open the root `Cargo.toml`
2) Rerun the build

## Critical Context
- The crate is built in release mode.
- Files modified:
  - `crates/app/Cargo.toml`
- Commands run: `cargo build --release`, `ls`
- Errors seen: (none)
";

const MINIMAL: &str = "## Goal\n- Fix the build\n\n## Progress\n### Done\n(none)\n";

fn llm(script: &Arc<Script>) -> LlmSummarizer<Arc<Script>> {
    LlmSummarizer::new(Arc::clone(script))
}

#[test]
fn llm_parses_a_realistic_reply_into_the_fields() {
    let summary = parse_summary(REPLY).unwrap();
    assert_eq!(summary.goal, ["Fix the failing build in `crates/app/src/main.rs`"]);
    assert_eq!(summary.constraints, ["Must not change the public API."]);
    assert_eq!(summary.done, ["Added `serde = \"1\"` to `crates/app/Cargo.toml`"]);
    assert_eq!(
        summary.in_progress,
        ["Checking the workspace manifest because the build still fails"]
    );
    assert_eq!(
        summary.blocked,
        ["`cargo build --release` fails: `error[E0433]: failed to resolve`"]
    );
    assert_eq!(
        summary.key_decisions,
        ["**Add serde as a dependency**: the code uses `serde::Serialize`."]
    );
    assert_eq!(summary.next_steps, ["Open the root `Cargo.toml`", "Rerun the build"]);
    let ctx = &summary.critical_context;
    assert_eq!(ctx.notes, ["The crate is built in release mode."]);
    assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
    assert_eq!(ctx.commands, ["cargo build --release", "ls"]);
    assert!(ctx.errors.is_empty() && ctx.files_read.is_empty());
}

#[test]
fn llm_rendered_summaries_parse_back_to_themselves() {
    let previous = CompactSummary {
        goal: vec!["Fix the flaky login test".into()],
        constraints: vec!["Do not touch the public API.".into()],
        done: vec!["Modified `src/auth.rs`".into()],
        in_progress: vec!["Rerunning the suite".into()],
        blocked: vec![],
        key_decisions: vec!["Use JWT because sessions need state.".into()],
        next_steps: vec!["Run `cargo test`".into(), "Open a PR".into()],
        critical_context: satchel_protocol::CriticalContext {
            files_read: vec!["src/lib.rs".into()],
            files_modified: vec!["src/auth.rs".into()],
            commands: vec!["cargo test -p auth".into(), "echo `date`".into()],
            errors: vec!["error[E0425]: cannot find value `x` in this scope".into()],
            notes: vec!["Port 8080 is taken".into()],
            findings: vec!["`0x5eed1234` (from the output of `python3 seed.py`, message 12)".into()],
            omitted: vec![],
        },
        requests: vec![satchel_protocol::UserRequest {
            text: "Fix the login test, please.".into(),
            chars: 27,
            index: 3,
            archived: Some(satchel_protocol::ArchiveLine {
                file: "dialog/2026-11-24.jsonl".into(),
                line: 9,
            }),
            demonstration: false,
        }],
        archive: vec![],
        instruction: None,
        instruction_effect: None,
        lessons: vec![],
        template: vec![],
    };
    assert_eq!(parse_summary(&render_previous(&previous)).unwrap(), previous);
    // Thinking and code fences around the reply are ignored; Chinese headings are accepted.
    let wrapped = format!("<think>hmm</think>\n```markdown\n{}\n```", render_previous(&previous));
    assert_eq!(parse_summary(&wrapped).unwrap(), previous);
    let zh = parse_summary("## 目标\n- 修复构建\n\n## 进展\n### 已完成\n- [x] 添加依赖\n").unwrap();
    assert_eq!(
        (zh.goal, zh.done),
        (vec!["修复构建".to_owned()], vec!["添加依赖".to_owned()])
    );
}

#[test]
fn llm_first_compaction_sends_the_initial_prompt_then_the_update_prompt() {
    let counter = counter();
    let messages = session();
    let script = Script::ok(&[REPLY, MINIMAL]);
    let summarizer = llm(&script);
    let (first, backend) = summarizer.summarize_reporting(&input(&messages, None, None, &counter));
    assert_eq!(backend, "fake:model");

    let requests = script.requests();
    assert_eq!(requests[0].len(), 2);
    assert_eq!(requests[0][0].role, "system");
    assert!(
        requests[0][0]
            .content
            .starts_with("You are a context compaction assistant.")
    );
    assert_eq!(requests[0][1].role, "user");
    let user = script.user(0);
    assert!(user.starts_with("# conversation\n[user]\nPlease fix the failing build"));
    assert!(user.contains("\n\n[assistant]\nLet's look at the file first.\n[tool_use] bash {\"command\":"));
    assert!(user.contains("[tool]\n[tool_result] bash: use serde::Serialize; fn main() {}"));
    assert!(user.contains("Create a structured summary"));
    assert!(user.contains("Copy exact file paths, function names, commands and error messages verbatim"));
    assert!(!user.contains("# previous-summary"));
    assert!(!user.contains("# extra-instruction"));
    // Oldest first.
    assert!(user.find("Please fix").unwrap() < user.find("workspace manifest").unwrap());

    let more = vec![json!({"role": "user", "content": "Now also add a CI job please."})];
    summarizer.summarize_reporting(&input(&more, Some(&first), None, &counter));
    let update = script.user(1);
    assert!(
        update.starts_with("# conversation\n[user]\nNow also add a CI job please.\n\n# previous-summary\n## Goal\n")
    );
    assert!(update.contains("- Fix the failing build in `crates/app/src/main.rs`"));
    assert!(update.contains("PRESERVE all existing information from the previous summary"));
    assert!(update.contains("move items from \"In Progress\" to \"Done\""));
    assert!(
        !update.contains("## Archive"),
        "the path guide is not the model's business"
    );
}

#[test]
fn llm_instruction_is_sent_as_extra_instruction() {
    let counter = counter();
    let messages = session();
    let script = Script::ok(&[REPLY]);
    let (summary, _) = llm(&script).summarize_reporting(&input(&messages, None, Some("keep decisions only"), &counter));
    assert!(script.user(0).ends_with("\n\n# extra-instruction\nkeep decisions only"));
    assert_eq!(summary.instruction.as_deref(), Some("keep decisions only"));
}

#[test]
fn llm_chinese_prompts_keep_english_headings() {
    let counter = counter();
    let messages = session();
    let script = Script::ok(&[REPLY]);
    llm(&script)
        .with_language(SummaryLanguage::Zh)
        .summarize_reporting(&input(&messages, None, None, &counter));
    let request = &script.requests()[0];
    assert!(request[0].content.starts_with("你是一个上下文压缩助手"));
    let user = &request[1].content;
    assert!(user.starts_with("# conversation\n"));
    assert!(user.contains("# 任务\n根据上面的对话生成结构化摘要"));
    assert!(user.contains("逐字照抄"));
    for heading in [
        "## Goal",
        "## Constraints & Preferences",
        "### In Progress",
        "## Critical Context",
    ] {
        assert!(user.contains(heading), "{heading}");
    }
}

#[test]
fn llm_long_blocks_are_cut_head_and_tail() {
    let counter = counter();
    let huge = format!("HEAD-MARK {} TAIL-MARK", "x".repeat(200 * 1024));
    let thinking = format!("ponder {}", "y".repeat(5_000));
    let messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "run it"}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "make all"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": [{"type": "text", "text": huge}]}]}),
    ];
    let script = Script::ok(&[MINIMAL]);
    llm(&script).summarize_reporting(&SummaryInput {
        format: MessageFormat::Anthropic,
        ..input(&messages, None, None, &counter)
    });
    let user = script.user(0);
    assert!(
        user.len() < 12_000,
        "the 200 KB result is never sent whole: {} bytes",
        user.len()
    );
    assert!(user.contains("[tool_use] bash {\"command\":\"make all\"}"));
    assert!(user.contains("[tool_result] bash (error): HEAD-MARK xxx"));
    assert!(user.contains("chars omitted]…"));
    assert!(user.contains("xxx TAIL-MARK\n"));
    let thinking_line = user.lines().find(|l| l.starts_with("[thinking] ponder")).unwrap();
    assert!(thinking_line.chars().count() < THINKING_CHARS + 50);
    assert_eq!(cut("abcdef", 6), "abcdef");
    assert_eq!(cut("ééééééééé", 6), "éééé…[3 chars omitted]…éé");
}

#[test]
fn llm_history_reads_responses_items() {
    let counter = counter();
    let messages = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the build"}]}),
        json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque"}),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Building now."}]}),
        json!({"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"make all\"}"}),
        json!({"type": "function_call_output", "call_id": "c1", "output": "error: missing header foo.h"}),
    ];
    let script = Script::ok(&[MINIMAL]);
    llm(&script).summarize_reporting(&SummaryInput {
        format: MessageFormat::OpenaiResponses,
        ..input(&messages, None, None, &counter)
    });
    let user = script.user(0);
    assert!(user.contains("[user]\nrun the build"), "{user}");
    assert!(user.contains("[assistant]\nBuilding now."), "{user}");
    assert!(
        user.contains("[tool_use] exec_command {\"cmd\":\"make all\"}"),
        "{user}"
    );
    assert!(user.contains("error: missing header foo.h"), "{user}");
    assert!(
        !user.contains("gAAAAB-opaque"),
        "signed reasoning is never sent to the summariser"
    );
}

fn long_session(turns: usize) -> Vec<Value> {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": format!("Step {i}: please edit src/mod{i}.rs and explain the change in detail. {}", "words ".repeat(150))}));
        messages.push(json!({"role": "assistant", "content": format!("Done with step {i}. {}", "more ".repeat(150))}));
    }
    messages
}

fn staged_reply(stage: usize) -> String {
    format!("## Goal\n- goal after stage {stage}\n\n## Progress\n### Done\n- [x] stage {stage} done\n")
}

#[test]
fn llm_large_spans_are_summarised_in_stages() {
    let counter = counter();
    let messages = long_session(20);
    let replies: Vec<String> = (1..=20).map(staged_reply).collect();
    let script = Script::ok(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let previous = CompactSummary {
        goal: vec!["original goal".into()],
        ..CompactSummary::default()
    };
    let summarizer = llm(&script)
        .with_input_budget(3_000)
        .with_max_output(300)
        .with_progress(move |stage, stages| seen.lock().unwrap().push((stage, stages)));
    let (summary, backend) = summarizer.summarize_reporting(&input(&messages, Some(&previous), None, &counter));
    assert_eq!(backend, "fake:model");

    let requests = script.requests();
    let n = requests.len();
    assert!(n >= 3, "{n} stages");
    let progress = calls.lock().unwrap().clone();
    assert_eq!(progress, (1..=n).map(|i| (i, n)).collect::<Vec<_>>());
    assert!(
        script
            .user(0)
            .contains("# previous-summary\n## Goal\n\n- original goal\n")
    );
    for (i, request) in requests.iter().enumerate() {
        let tokens: u64 = request.iter().map(|m| counter.count_text(&m.content)).sum();
        assert!(tokens <= 3_000, "stage {} fits the input budget: {tokens}", i + 1);
        if i > 0 {
            assert!(
                request[1]
                    .content
                    .contains(&format!("# previous-summary\n## Goal\n\n- goal after stage {i}\n")),
                "stage {} carries stage {i}'s summary",
                i + 1
            );
        }
    }
    // Every message is sent once, in order.
    let all: String = (0..n).map(|i| script.user(i)).collect();
    let steps: Vec<usize> = (0..20).map(|i| all.find(&format!("Step {i}:")).unwrap()).collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(all.matches("Step 3:").count(), 1);
    assert_eq!(summary.goal, [format!("goal after stage {n}")]);
}

#[test]
fn llm_a_single_message_over_the_budget_is_cut_further() {
    let counter = counter();
    let blocks: Vec<Value> = (0..40)
        .map(|i| json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("{i} {}", "z ".repeat(2_000))}))
        .collect();
    let messages = vec![json!({"role": "user", "content": blocks})];
    let script = Script::ok(&[MINIMAL]);
    llm(&script)
        .with_input_budget(4_000)
        .summarize_reporting(&SummaryInput {
            format: MessageFormat::Anthropic,
            ..input(&messages, None, None, &counter)
        });
    assert_eq!(script.requests().len(), 1);
    assert!(counter.count_text(&script.user(0)) < 4_000);
}

#[test]
fn llm_identifiers_dropped_by_the_model_are_merged_from_extractive() {
    let counter = counter();
    let messages = session();
    let script = Script::ok(&[MINIMAL]);
    let (summary, backend) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
    assert_eq!(backend, "fake:model");
    assert_eq!(summary.goal, ["Fix the build"]);
    let ctx = &summary.critical_context;
    assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
    assert!(ctx.files_read.contains(&"crates/app/src/main.rs".to_owned()));
    assert!(ctx.commands.contains(&BUILD.to_owned()), "{:?}", ctx.commands);
    assert_eq!(ctx.errors, [BUILD_ERROR]);
    assert!(summary_message_text(&summary).contains(BUILD_ERROR));

    // The model's own identifiers are kept after the exact ones, without duplicates.
    let script = Script::ok(&[REPLY]);
    let (summary, _) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
    let ctx = &summary.critical_context;
    assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
    assert_eq!(ctx.commands.last().map(String::as_str), Some("ls"));
    assert_eq!(ctx.commands.iter().filter(|c| *c == "cargo build --release").count(), 1);
    assert_eq!(summary.key_decisions.len(), 1);
}

/// What the extraction knows stands against the model: a failure fixed since is not blocked,
/// a file no edit succeeded on is not modified, the framework's template is no constraint, and
/// a next step a later call took is gone.
#[test]
fn llm_lists_are_checked_against_the_deterministic_trail() {
    let counter = counter();
    let call = |id: &str, command: &str| {
        json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]})
    };
    let result = |id: &str, output: &str| json!({"role": "tool", "tool_call_id": id, "content": output});
    let block = "Remember, you can only enter one command at a time. Always start by trying to replicate the bug. \
                 Always check the code after you issue an edit.";
    let previous = ExtractiveSummarizer
        .summarize(&SummaryInput::new(
            &[
                json!({"role": "user", "content": format!("ISSUE: the parser drops a token.\n{block}")}),
                json!({"role": "assistant", "content": "ok"}),
            ],
            MessageFormat::Openai,
            4_000,
            &counter,
        ))
        .unwrap();
    let messages = vec![
        json!({"role": "user", "content": format!("ISSUE: the lexer splits UTF-8.\n{block}")}),
        call("c1", BUILD),
        result("c1", &format!("{BUILD_ERROR}\n")),
        call("c2", "sed -i 's/a/b/' crates/app/src/lib.rs"),
        result("c2", ""),
        call("c3", BUILD),
        result("c3", "    Finished release [optimized] target(s) in 2.1s"),
    ];
    let reply = format!(
        "## Goal\n- Fix the lexer\n\n## Constraints & Preferences\n- Always start by trying to replicate the bug.\n\n\
         ## Progress\n### Done\n- [x] Fixed the build\n\n### In Progress\n- [ ] Rebuilding the app\n\n\
         ### Blocked\n- `{BUILD}` fails: {BUILD_ERROR}\n\n## Next Steps\n1. Run `cargo fmt --all`\n2. Open a PR\n\n\
         ## Critical Context\n- Files modified:\n  - `crates/app/src/lib.rs`\n  - `crates/app/src/imagined.rs`\n"
    );
    let script = Script::ok(&[&reply]);
    // After the span, the agent formatted the code.
    let kept = [call("c4", "cargo fmt --all"), result("c4", "")];
    let input = SummaryInput {
        previous: Some(&previous),
        kept: &kept,
        ..SummaryInput::new(&messages, MessageFormat::Openai, 4_000, &counter)
    };
    let (summary, backend) = llm(&script).summarize_reporting(&input);
    assert_eq!(backend, "fake:model");
    assert!(
        summary.blocked.is_empty(),
        "the build succeeded since: {:?}",
        summary.blocked
    );
    assert_eq!(summary.critical_context.files_modified, ["crates/app/src/lib.rs"]);
    assert!(summary.constraints.is_empty(), "template: {:?}", summary.constraints);
    assert_eq!(summary.next_steps, ["Open a PR"], "`cargo fmt --all` was run since");
    assert_eq!(summary.goal, ["Fix the lexer"], "the model's prose stays");
}

#[test]
fn llm_previous_archive_is_kept_and_dropped_sections_restored() {
    let counter = counter();
    let messages = session();
    let previous = CompactSummary {
        goal: vec!["Ship the release".into()],
        key_decisions: vec!["Stay on Rust 1.95".into()],
        archive: vec![ArchiveRange {
            file: "dialog/2026-11-22.jsonl".into(),
            start_line: 1,
            end_line: 4,
            first_index: 0,
            last_index: 3,
            messages: 4,
        }],
        ..CompactSummary::default()
    };
    let script = Script::ok(&["## Progress\n### Done\n- [x] Built it\n"]);
    let (summary, _) = llm(&script).summarize_reporting(&input(&messages, Some(&previous), None, &counter));
    assert_eq!(summary.archive, previous.archive);
    assert_eq!(summary.goal, ["Ship the release"]);
    // The model wrote no decisions: the extraction's stand in, the previous ones included.
    assert_eq!(
        summary.key_decisions,
        ["The issue is a missing dependency.", "Stay on Rust 1.95"]
    );
    assert_eq!(summary.done, ["Built it"]);
}

#[test]
fn llm_summary_fits_the_budget_keeping_the_newest_identifiers() {
    let counter = counter();
    let messages = session();
    let notes: String = (0..200)
        .map(|i| format!("- note {i} about something rather long and wordy\n"))
        .collect();
    let decisions: String = (0..200)
        .map(|i| format!("- decision {i} with its rationale\n"))
        .collect();
    let reply = format!(
        "## Goal\n- Fix the build\n\n## Progress\n### Done\n(none)\n\n## Key Decisions\n{decisions}\n## Critical Context\n{notes}"
    );
    let script = Script::ok(&[&reply]);
    let (summary, _) = llm(&script).summarize_reporting(&SummaryInput {
        max_tokens: 600,
        ..input(&messages, None, None, &counter)
    });
    let text = summary_message_text(&summary);
    assert!(counter.count_text(&render_summary(&summary)) <= 600);
    assert!(summary.critical_context.notes.len() < 200);
    assert!(text.contains(BUILD_ERROR));
    assert!(text.contains(BUILD));
    assert_eq!(summary.goal, ["Fix the build"]);
    // Tiny budgets never panic.
    for max_tokens in [0, 1, 50] {
        let script = Script::ok(&[&reply]);
        llm(&script).summarize_reporting(&SummaryInput {
            max_tokens,
            ..input(&messages, None, None, &counter)
        });
    }
}

#[test]
fn llm_retries_once_then_succeeds() {
    let counter = counter();
    let messages = session();
    for first in [
        Err(CompletionError("HTTP 503".into())),
        Ok(String::new()),
        Ok("Sorry, I can't.".into()),
    ] {
        let script = Script::new(vec![first, Ok(REPLY.into())]);
        let (summary, backend) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
        assert_eq!(backend, "fake:model");
        let requests = script.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0], requests[1], "the same request is retried");
        assert_eq!(summary.next_steps, ["Open the root `Cargo.toml`", "Rerun the build"]);
    }
}

#[test]
fn llm_failures_fall_back_to_the_extractive_summary() {
    let counter = counter();
    let messages = session();
    let previous = CompactSummary {
        goal: vec!["Ship the release".into()],
        ..CompactSummary::default()
    };
    let inp = input(&messages, Some(&previous), None, &counter);
    let extractive = ExtractiveSummarizer.summarize(&inp).unwrap();
    let cases: [(Vec<Result<String, CompletionError>>, &str); 4] = [
        (
            vec![
                Err(CompletionError("timeout".into())),
                Err(CompletionError("HTTP 500".into())),
            ],
            "extractive (fallback: completion failed: HTTP 500)",
        ),
        (
            vec![Ok(String::new()), Ok("  \n".into())],
            "extractive (fallback: empty reply)",
        ),
        (
            vec![Ok("Goal: fix it".into()), Ok("Goal: fix it".into())],
            "extractive (fallback: invalid format (no ## heading))",
        ),
        (
            vec![Ok("## Summary\n- fixed".into()), Ok("## Notes\n- x".into())],
            "extractive (fallback: invalid format (no ## Goal or ## Progress section))",
        ),
    ];
    for (replies, expected) in cases {
        let script = Script::new(replies);
        let summarizer = llm(&script);
        let (summary, backend) = summarizer.summarize_reporting(&inp);
        assert_eq!(backend, expected);
        assert_eq!(script.requests().len(), 2);
        assert_eq!(summary, extractive);
        assert_eq!(summary.goal[0], "Ship the release", "the previous summary survives");
        assert_eq!(summarizer.summarize(&inp).unwrap(), extractive, "the trait never fails");
    }

    // A failing later stage reports its stage; nothing to summarise is a fallback too.
    let long = long_session(10);
    let script = Script::new(vec![Ok(staged_reply(1))]);
    let (_, backend) = llm(&script)
        .with_input_budget(3_000)
        .with_max_output(300)
        .summarize_reporting(&input(&long, None, None, &counter));
    assert!(
        backend.starts_with("extractive (fallback: stage 2/") && backend.ends_with("script exhausted)"),
        "{backend}"
    );
    let script = Script::ok(&[]);
    let (_, backend) = llm(&script).summarize_reporting(&input(&[], Some(&previous), None, &counter));
    assert_eq!(backend, "extractive (fallback: no messages to summarise)");
    assert!(script.requests().is_empty());
}

/// A reply wrapped in `<summary>` tags keeps only what the tags hold: the chatter around them
/// ("Hope this helps!") is not a note of the summary's last section.
#[test]
fn llm_a_reply_in_summary_tags_loses_the_chatter_around_them() {
    let counter = counter();
    let messages = session();
    let inp = input(&messages, None, None, &counter);
    let (untagged, _) = llm(&Script::ok(&[REPLY])).summarize_reporting(&inp);
    let wrapped = [
        format!("Sure! I'll put it in <summary> tags.\n<summary>\n{REPLY}</summary>\n\nHope this helps! Let me know."),
        format!("<think>a <summary>draft</summary></think>\n<SUMMARY>{REPLY}</Summary>\nHope this helps!"),
        // Cut at max_tokens before its closing tag.
        format!("Here you go:\n<summary>\n{REPLY}"),
    ];
    for reply in &wrapped {
        let (summary, backend) = llm(&Script::ok(&[reply])).summarize_reporting(&inp);
        assert_eq!(backend, "fake:model", "{reply}");
        let text = serde_json::to_string(&summary).unwrap();
        for chatter in ["Hope this helps", "Let me know", "Sure!", "Here you go", "draft"] {
            assert!(!text.contains(chatter), "{chatter:?} kept from {reply:?}: {text}");
        }
        assert_eq!(summary, untagged, "{reply}");
    }
}
