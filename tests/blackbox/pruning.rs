//! Transient request pruning in `aceclaw` mode (issue 15, F12), through the real binary: an
//! agent loop in a small window, in either format, whose assistant messages reason first
//! (Anthropic `thinking` blocks, OpenAI `reasoning_content`). Over the trigger the request is
//! pruned for that call only: old tool results become stubs naming the offload file that holds
//! the full output, old reasoning is left out, the newest user turns are untouched, every tool
//! call keeps its result, and the request is under the trigger when pruning was enough. A
//! later request under the trigger gets the full texts back, compaction runs only when pruning
//! is not enough (its summary is marked `[COMPACTED]`, its archive holds the originals), and a
//! `context.usage` report changes the calibration and nothing else. A request with nothing
//! outside the protected turns is sent whole with no `pruned` action, and a client that sends
//! a pruned request back as its history loses nothing.
//!
//! The daemon is put in `aceclaw` mode through `SATCHEL_CONTEXT_MODE`, and per request in the
//! usage test; counts use the estimate tokenizer so the numbers are exact to reason about.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use satchel_core::tokens::TokenCounter;
use satchel_protocol::config::Tokenizer;
use serde_json::{Value, json};

use crate::support::builders::{call_message, result_message, tool_output, user};
use crate::support::checks::{assert_nothing_lost, n, pretty, session_records, summary_text};
use crate::support::trajectories::{
    Format, block_type, blocks, check_request_shape, diff_strings, parse_stub, result_ids, result_text_pointers, role,
};
use crate::support::{Daemon, Framing, SUMMARY_HEADING, actions, archive_lines, archived, files_under, read_from};

/// `max_input_length` of the loop (tokens, estimated at 4 bytes each).
const WINDOW: u64 = 8192;
/// A per-request window large enough that no request of the loop comes near its trigger.
const WIDE_WINDOW: u64 = 65_536;
/// The aceclaw trigger of [`WINDOW`]: `prune_trigger_ratio` 0.85 of it, rounded down.
const TRIGGER: u64 = WINDOW * 85 / 100;
/// `prune_protected_turns` and `prune_stub_chars` at their defaults.
const PROTECTED_TURNS: usize = 5;
const STUB_CHARS: usize = 200;
/// The opening of the summary message in `aceclaw` mode.
const COMPACTED_OPENING: &str = "[COMPACTED]\n\n";
/// Reasoning fields of OpenAI-style assistant messages and Anthropic reasoning blocks.
const REASONING_FIELDS: &[&str] = &["reasoning_content", "reasoning", "reasoning_details", "thinking"];
const REASONING_BLOCKS: &[&str] = &["thinking", "redacted_thinking"];

/// The whole daemon in `aceclaw` mode with the small window, through its environment.
const ACECLAW_ENV: [(&str, &str); 3] = [
    ("SATCHEL_CONTEXT_MODE", "aceclaw"),
    ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
    ("SATCHEL_TOKENIZER", "estimate"),
];

// ---------------------------------------------------------------------------------------------
// The agent loop
// ---------------------------------------------------------------------------------------------

/// What the assistant thinks before its message `k` of turn `t` (about 300 bytes).
fn reasoning(t: usize, k: usize) -> String {
    format!(
        "Turn {t}, step {k}: the last check of module {t} failed with a type mismatch. The public API must not \
         change, so the fix belongs inside the function body; I will look at the error line first, then at the \
         callers, and only then decide whether a conversion or a new binding is the smaller change here."
    )
}

/// `message` (an assistant message) with reasoning first: a signed `thinking` block
/// (Anthropic) or a `reasoning_content` field (OpenAI).
fn with_reasoning(format: Format, mut message: Value, t: usize, k: usize) -> Value {
    let thought = reasoning(t, k);
    match format {
        Format::Openai => message["reasoning_content"] = json!(thought),
        Format::OpenaiResponses => unreachable!("Responses reasoning is an item of its own, not part of a message"),
        Format::Anthropic => {
            let thinking = json!({"type": "thinking", "thinking": thought, "signature": format!("sig-{t}-{k}")});
            let content = match message["content"].take() {
                Value::String(text) => vec![thinking, json!({"type": "text", "text": text})],
                Value::Array(mut blocks) => {
                    blocks.insert(0, thinking);
                    blocks
                }
                other => panic!("assistant content {other}"),
            };
            message["content"] = Value::Array(content);
        }
    }
    message
}

/// The assistant's closing reply of turn `t`.
fn reply(format: Format, t: usize) -> Value {
    let text = format!("Module {t} checks cleanly now; the public API is unchanged.");
    with_reasoning(format, json!({"role": "assistant", "content": text}), t, 9)
}

/// The prepare calls of turn `t` of an agent fixing one module per turn, each the messages
/// appended before a model call: the previous turn's reply (from turn 1) and the user's
/// request; a check and its 1–3 KB output; every third turn a small edit and its result.
/// Every assistant message reasons first.
fn turn(format: Format, t: usize) -> Vec<Vec<Value>> {
    let module = format!("crates/parser/src/module_{t}.rs");
    let mut request = Vec::new();
    if t > 0 {
        request.push(reply(format, t - 1));
    }
    request.push(user(&format!(
        "Turn {t}: make `cargo check` pass for {module} without changing its public API."
    )));
    let check_id = format!(
        "{}_{t}",
        if format == Format::Openai {
            "call_check"
        } else {
            "toolu_check"
        }
    );
    let check = call_message(
        format,
        &check_id,
        "bash",
        &json!({"command": format!("cargo check -p parser --lib module_{t}")}),
        &format!("Checking module {t}."),
    );
    // 1000–2800 bytes (and the error line): offloaded in aceclaw mode, never truncated.
    let output = tool_output(t, 1_000 + (t * 677) % 1_800, &module);
    let mut chunks = vec![
        request,
        vec![
            with_reasoning(format, check, t, 0),
            result_message(format, &check_id, &output),
        ],
    ];
    if t % 3 == 1 {
        let edit_id = format!(
            "{}_{t}",
            if format == Format::Openai {
                "call_edit"
            } else {
                "toolu_edit"
            }
        );
        let edit = call_message(
            format,
            &edit_id,
            "edit_file",
            &json!({"path": module, "patch": format!("-    let x = {t};\n+    let x: u32 = {t};")}),
            "Patching the binding.",
        );
        chunks.push(vec![
            with_reasoning(format, edit, t, 1),
            result_message(
                format,
                &edit_id,
                &format!("Applied the patch to {module}: 2 lines changed.\n"),
            ),
        ]);
    }
    chunks
}

// ---------------------------------------------------------------------------------------------
// Checking a reply against what was sent
// ---------------------------------------------------------------------------------------------

/// How a returned request differs from the live messages sent.
#[derive(Debug, Default)]
struct Changes {
    /// (original index, offload file) of each tool-result text sent as a stub, each verified.
    stubs: Vec<(usize, String)>,
    /// Original indexes of assistant messages sent without their reasoning.
    unreasoned: Vec<usize>,
    /// Reasoning fields and blocks left out.
    removed_reasoning: usize,
    /// The summary message's text, if any.
    summary: Option<String>,
}

/// `message` without its reasoning fields and blocks, and how many there were.
fn without_reasoning(message: &Value) -> (Value, usize) {
    let mut stripped = message.clone();
    let object = stripped.as_object_mut().unwrap();
    let mut removed = 0;
    for field in REASONING_FIELDS {
        if object.remove(*field).is_some_and(|v| !v.is_null()) {
            removed += 1;
        }
    }
    if let Some(Value::Array(content)) = object.get_mut("content") {
        let before = content.len();
        content.retain(|b| !REASONING_BLOCKS.contains(&block_type(b)));
        removed += before - content.len();
    }
    (stripped, removed)
}

fn has_reasoning(message: &Value) -> bool {
    without_reasoning(message).1 > 0
}

/// The returned messages without the summary, and the summary's text: OpenAI sends it as a
/// message of its own, Anthropic as the first text block of the first user message (of its
/// own when the first live message cannot carry it). `carrier` is set when a block was
/// removed from a live message.
fn split_summary(messages: &[Value]) -> (Option<String>, Vec<Value>, bool) {
    let mut live = messages.to_vec();
    let Some(first) = live.first_mut() else {
        return (None, live, false);
    };
    if let Some(text) = first["content"].as_str()
        && text.contains(SUMMARY_HEADING)
    {
        let text = text.to_owned();
        live.remove(0);
        return (Some(text), live, false);
    }
    if let Some(content) = first["content"].as_array_mut()
        && let Some(text) = content.first().and_then(|b| b["text"].as_str())
        && text.contains(SUMMARY_HEADING)
    {
        let text = text.to_owned();
        content.remove(0);
        if content.is_empty() {
            live.remove(0);
            return (Some(text), live, false);
        }
        return (Some(text), live, true);
    }
    (None, live, false)
}

/// A user message that is a turn of its own (not only tool results).
fn is_user_turn(format: Format, message: &Value) -> bool {
    role(message) == "user"
        && (result_ids(message, format).is_empty() || blocks(message).any(|b| block_type(b) != "tool_result"))
}

/// Checks a stub against the original text it replaces: it keeps the first
/// [`STUB_CHARS`] characters, states the original's size, and names an offload file that
/// holds the original byte for byte, on disk and through `context.read`. Returns the file.
fn verify_stub(d: &mut Daemon, workspace: &Path, original: &str, text: &str) -> Result<String, String> {
    let stub = parse_stub(text).ok_or_else(|| format!("neither the original nor a stub: {text:?}"))?;
    let head: String = original.chars().take(STUB_CHARS).collect();
    if stub.head != head {
        return Err(format!(
            "the stub does not keep the first {STUB_CHARS} characters: {text:?}"
        ));
    }
    if (stub.total_bytes, stub.total_lines) != (original.len(), original.lines().count()) {
        return Err(format!(
            "the stub states {} bytes and {} lines, the original has {} and {}",
            stub.total_bytes,
            stub.total_lines,
            original.len(),
            original.lines().count()
        ));
    }
    let file = stub.path;
    if !file.starts_with("tool_result/") {
        return Err(format!("the stub names {file}, not an offload file"));
    }
    if text.len() >= original.len() {
        return Err(format!("a {}-byte stub of a {}-byte text", text.len(), original.len()));
    }
    let on_disk = std::fs::read(workspace.join(file)).map_err(|e| format!("read {file}: {e}"))?;
    if on_disk != original.as_bytes() {
        return Err(format!(
            "{file} holds {} bytes that are not the {}-byte original",
            on_disk.len(),
            original.len()
        ));
    }
    let read = read_from(d, "", file);
    if read != original {
        return Err(format!(
            "context.read of {file} gives {} bytes that are not the original",
            read.len()
        ));
    }
    Ok(file.to_owned())
}

/// Checks one `context.prepare` result of a session that was sent `sent` and has archived
/// the `archived` indexes: a valid request for its format, holding the live messages in order,
/// each as sent except, before the newest [`PROTECTED_TURNS`] user turns, tool-result texts
/// replaced by verified stubs and assistant messages without their reasoning. Returns what
/// differed; fails the test on anything else. `factor` is the session's calibration.
fn check_reply(
    d: &mut Daemon,
    workspace: &Path,
    format: Format,
    sent: &[Value],
    archived: &BTreeSet<usize>,
    result: &Value,
    factor: f64,
) -> Changes {
    let messages = result["messages"].as_array().expect("a messages list");
    let dump = || pretty(messages);
    check_request_shape(messages, format).unwrap_or_else(|e| panic!("not a valid request: {e}\n{}", dump()));
    let tokens = &result["tokens"];
    let (total, limit) = (n(&tokens["total"]), n(&tokens["limit"]));
    if total > limit {
        assert!(
            result["over_limit"].is_string(),
            "{total} > {limit} tokens, unexplained"
        );
    } else {
        assert!(
            result.get("over_limit").is_none(),
            "over_limit set at {total} ≤ {limit}"
        );
    }

    // The total is the request returned, recounted the way the daemon counts and corrected by
    // the calibration (the summary's framing aside).
    let counter = TokenCounter::new(Tokenizer::Estimate, 4.0);
    let recount: u64 = messages.iter().map(|m| counter.count_message(m)).sum();
    let recount = (recount as f64 * factor).round() as u64;
    assert!(
        recount.abs_diff(total) <= 8,
        "tokens.total {total}, the returned messages recount to {recount} (calibration {factor})"
    );

    let (summary, mut live, carrier) = split_summary(messages);
    assert_eq!(
        summary.is_some(),
        result.get("compact_summary").is_some_and(|s| !s.is_null()),
        "the summary message is there exactly when compact_summary is"
    );
    if let Some(text) = &summary {
        assert!(
            text.starts_with(&format!("{COMPACTED_OPENING}{SUMMARY_HEADING}\n")),
            "the aceclaw summary does not open with [COMPACTED]: {text:?}"
        );
    }
    let expected: Vec<usize> = (0..sent.len()).filter(|i| !archived.contains(i)).collect();
    assert_eq!(
        live.len(),
        expected.len(),
        "the request holds {} messages besides the summary, {} are live\n{}",
        live.len(),
        expected.len(),
        dump()
    );
    // A string content that carried the summary comes back as one text block.
    if carrier
        && let Some(text) = sent[expected[0]]["content"].as_str()
        && live[0]["content"] == json!([{"type": "text", "text": text}])
    {
        live[0]["content"] = json!(text);
    }

    let turns: Vec<usize> = (0..live.len()).filter(|&p| is_user_turn(format, &live[p])).collect();
    let protected = turns.iter().rev().nth(PROTECTED_TURNS - 1).copied().unwrap_or(0);
    let mut changes = Changes {
        summary,
        ..Changes::default()
    };
    for (position, (got, &index)) in live.iter().zip(&expected).enumerate() {
        let original = &sent[index];
        if got == original {
            continue;
        }
        assert!(
            position < protected,
            "message {index} is in the newest {PROTECTED_TURNS} user turns (from request position {protected}) but \
             was changed:\n{got}\nsent:\n{original}"
        );
        if role(original) == "assistant" {
            let (stripped, removed) = without_reasoning(original);
            assert!(
                removed > 0 && *got == stripped,
                "assistant message {index} changed other than by leaving out its reasoning:\n{got}\nsent:\n{original}"
            );
            changes.unreasoned.push(index);
            changes.removed_reasoning += removed;
            continue;
        }
        let mut diffs = Vec::new();
        diff_strings(original, got, &mut String::new(), &mut diffs)
            .unwrap_or_else(|e| panic!("message {index} changed shape: {e}\n{got}\nsent:\n{original}"));
        let allowed = result_text_pointers(original, format);
        for (pointer, text, stub) in diffs {
            assert!(
                allowed.contains(&pointer),
                "message {index}: {pointer} is not a tool-result text but changed"
            );
            let file =
                verify_stub(d, workspace, text, stub).unwrap_or_else(|e| panic!("message {index} {pointer}: {e}"));
            changes.stubs.push((index, file));
        }
    }
    changes
}

/// The archived indexes of `session`.
fn archived_indexes(workspace: &Path, session: &str) -> BTreeSet<usize> {
    archived(workspace, session).into_keys().collect()
}

/// `context.prepare` appending `messages` (the first call sends them as the full list) with an
/// optional per-request `config`.
fn prepare(d: &mut Daemon, session: &str, first: bool, messages: &[Value], config: Option<&Value>) -> Value {
    let mut params = json!({"session_id": session});
    params[if first { "messages" } else { "append" }] = json!(messages);
    if let Some(config) = config {
        params["config"] = config.clone();
    }
    d.call("context.prepare", params)
}

/// The single `pruned` action of a result, if any.
fn pruned_action(result: &Value) -> Option<Value> {
    let pruned = actions(result, "pruned");
    assert!(pruned.len() <= 1, "{} pruned actions", pruned.len());
    pruned.first().map(|a| (*a).clone())
}

/// The pruned action agrees with the changes seen in the request; a request without one is
/// the live messages exactly as sent.
fn check_pruning_report(result: &Value, changes: &Changes) {
    match pruned_action(result) {
        Some(report) => {
            assert_eq!(n(&report["stubbed_results"]) as usize, changes.stubs.len(), "{report}");
            assert_eq!(
                n(&report["removed_reasoning"]) as usize,
                changes.removed_reasoning,
                "{report}"
            );
            assert!(
                !changes.stubs.is_empty() || !changes.unreasoned.is_empty(),
                "a pruned action that changed nothing: {report}"
            );
            assert!(n(&report["tokens_before"]) > n(&report["tokens_after"]), "{report}");
            assert_eq!(
                report["tokens_after"], result["tokens"]["total"],
                "tokens_after is the request returned"
            );
        }
        None => assert!(
            changes.stubs.is_empty() && changes.unreasoned.is_empty(),
            "a request changed without a pruned action: {changes:?}"
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Drives the agent loop in `format` until pruning alone has brought several requests under
/// the trigger and a compaction has happened after it, checking every reply (see the module
/// documentation).
fn agent_loop_prunes_transiently_then_compacts(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    let mut d = Daemon::start(workspace, &ACECLAW_ENV);
    let session = "agent";
    let wide = json!({"max_input_length": WIDE_WINDOW});
    let mut sent: Vec<Value> = Vec::new();
    // Requests pruning alone brought under the trigger, stubs read back, reasoning left out.
    let (mut pruned_only, mut stubs_read, mut unreasoned) = (0, BTreeSet::new(), BTreeSet::new());
    let (mut transient_checked, mut compacted_at) = (false, None);
    // The turn pruning was first needed again after the compaction (with a summary in the
    // request); the loop stops two turns later.
    let mut pruned_again_at = None;
    for t in 0..80 {
        if pruned_again_at.is_some_and(|at| t > at + 2) {
            break;
        }
        for chunk in turn(format, t) {
            let first = sent.is_empty();
            sent.extend(chunk.iter().cloned());
            let result = prepare(&mut d, session, first, &chunk, None);
            let archived = archived_indexes(workspace, session);
            let changes = check_reply(&mut d, workspace, format, &sent, &archived, &result, 1.0);
            check_pruning_report(&result, &changes);
            stubs_read.extend(changes.stubs.iter().cloned());
            unreasoned.extend(changes.unreasoned.iter().copied());
            let pruned = pruned_action(&result).is_some();
            let compacted = !actions(&result, "compacted").is_empty();
            let total = n(&result["tokens"]["total"]);

            if pruned && !compacted {
                // Pruning alone was enough: the request is under the trigger.
                assert!(
                    total <= TRIGGER,
                    "pruned to {total} tokens, the trigger is {TRIGGER}: {}",
                    result["tokens"]
                );
                pruned_only += 1;
                if compacted_at.is_some() {
                    pruned_again_at.get_or_insert(t);
                }
                let inspect = d.call("context.inspect", json!({"session_id": session}));
                let monitor = &inspect["monitor"];
                assert_eq!(monitor["phases_reached"], json!(["prune"]), "{monitor}");
                assert!(n(&monitor["total_tokens_saved"]) > 0, "{monitor}");
                assert!(n(&monitor["pruned_only_count"]) >= 1, "{monitor}");
                // Old reasoning goes first of all: the oldest assistant message lost its own.
                let oldest = (0..sent.len()).find(|i| !archived.contains(i) && has_reasoning(&sent[*i]));
                if compacted_at.is_none() {
                    assert_eq!(
                        changes.unreasoned.first().copied(),
                        oldest,
                        "the oldest assistant message keeps its reasoning"
                    );
                }
                if !transient_checked && !changes.stubs.is_empty() {
                    // The session kept everything: a request under the trigger (a wider window)
                    // is the full conversation again, reasoning and outputs included.
                    let full = prepare(&mut d, session, false, &[], Some(&wide));
                    let again = check_reply(&mut d, workspace, format, &sent, &archived, &full, 1.0);
                    check_pruning_report(&full, &again);
                    assert!(pruned_action(&full).is_none(), "{}", pretty(&full["actions"]));
                    assert_eq!(full["messages"].as_array().unwrap().len(), sent.len() - archived.len());
                    transient_checked = true;
                }
            }
            if compacted {
                // The request was pruned first (the pruned action is only there when the
                // compacted request still needed it; the monitor says which phases ran).
                let summary = summary_text(&result).expect("a summary after a compaction");
                assert!(summary.starts_with(COMPACTED_OPENING), "{summary:?}");
                assert_eq!(changes.summary.as_deref(), Some(summary.as_str()));
                let inspect = d.call("context.inspect", json!({"session_id": session}));
                let monitor = &inspect["monitor"];
                assert_eq!(monitor["phases_reached"], json!(["prune", "summarize"]), "{monitor}");
                assert!(n(&monitor["total_tokens_saved"]) > 0, "{monitor}");
                assert!(n(&monitor["compaction_count"]) >= 1, "{monitor}");
                // Nothing lost: every compacted message is archived byte for byte with its
                // full output, every live one comes back whole in a request under the trigger.
                let full = prepare(&mut d, session, false, &[], Some(&wide));
                let again = check_reply(&mut d, workspace, format, &sent, &archived, &full, 1.0);
                check_pruning_report(&full, &again);
                let lines = assert_nothing_lost(&mut d, workspace, session, format, &sent, &full);
                assert!(!lines.is_empty(), "a compaction archived nothing");
                let archived_outputs = lines
                    .values()
                    .filter(|line| !line["offloads"].as_array().is_none_or(Vec::is_empty))
                    .count();
                assert!(archived_outputs > 0, "no archived tool output with its offload file");
                compacted_at.get_or_insert(t);
            }
        }
    }
    let compacted_at = compacted_at.expect("pruning never stopped being enough: no compaction in 80 turns");
    let pruned_again_at = pruned_again_at.expect("no pruning after the compaction");
    assert!(pruned_only >= 2, "pruning alone was enough only {pruned_only} times");
    assert!(transient_checked, "no stub to check the transience with");
    assert!(stubs_read.len() >= 3, "only {} stubs read back", stubs_read.len());
    assert!(
        unreasoned.len() >= 3,
        "reasoning was left out of only {} messages",
        unreasoned.len()
    );

    // The archive holds every compacted message whole, reasoning included.
    let archive = archive_lines(workspace);
    assert!(!archive.is_empty());
    for (file, line, value) in &archive {
        let index = n(&value["index"]) as usize;
        assert_eq!(value["message"], sent[index], "{file}:{line}");
    }
    assert!(
        archive.iter().any(|(_, _, v)| has_reasoning(&v["message"])),
        "the archive kept no reasoning"
    );
    let inspect = d.call("context.inspect", json!({"session_id": session}));
    let monitor = &inspect["monitor"];
    assert!(n(&monitor["total_tokens_saved"]) > 0, "{monitor}");
    assert!(n(&monitor["pruned_only_count"]) as usize >= pruned_only, "{monitor}");
    eprintln!(
        "{format:?}: {} messages, {pruned_only} requests pruned under the trigger, {} stubs read back, \
         reasoning left out of {} assistant messages, first compaction in turn {compacted_at}, pruned again from turn {pruned_again_at}; monitor {monitor}",
        sent.len(),
        stubs_read.len(),
        unreasoned.len()
    );
    d.shutdown();
}

#[test]
fn openai_requests_are_pruned_for_the_call_only_and_compacted_when_that_is_not_enough() {
    agent_loop_prunes_transiently_then_compacts(Format::Openai);
}

#[test]
fn anthropic_requests_are_pruned_for_the_call_only_and_compacted_when_that_is_not_enough() {
    agent_loop_prunes_transiently_then_compacts(Format::Anthropic);
}

/// Every file under `dir` (workspace-relative) with its bytes.
fn snapshot(workspace: &Path, dir: &str) -> BTreeMap<String, Vec<u8>> {
    let root = workspace.join(dir);
    if !root.exists() {
        return BTreeMap::new();
    }
    files_under(&root)
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(workspace).unwrap().display().to_string();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// `context.inspect` without the calibration.
fn inspect_but_calibration(d: &mut Daemon, session: &str) -> Value {
    let mut inspect = d.call("context.inspect", json!({"session_id": session}));
    inspect.as_object_mut().unwrap().remove("calibration");
    inspect
}

#[test]
fn a_usage_report_between_calls_changes_the_calibration_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    // Aceclaw mode per request this time, on a daemon in the default mode.
    let mut d = Daemon::start(workspace, &[]);
    let config = json!({"context_mode": "aceclaw", "max_input_length": WINDOW, "tokenizer": "estimate"});
    let wide = json!({"context_mode": "aceclaw", "max_input_length": WIDE_WINDOW, "tokenizer": "estimate"});
    let format = Format::Anthropic;
    // Two sessions fed the same conversation; only `noted` gets a usage report.
    let (noted, control) = ("noted", "control");
    let mut sent: Vec<Value> = Vec::new();
    let mut last = Value::Null;
    let mut next_turn = 0;
    'feed: for t in 0..40 {
        next_turn = t + 1;
        for chunk in turn(format, t) {
            let first = sent.is_empty();
            sent.extend(chunk.iter().cloned());
            last = prepare(&mut d, noted, first, &chunk, Some(&config));
            let twin = prepare(&mut d, control, first, &chunk, Some(&config));
            assert_eq!(twin["messages"], last["messages"]);
            assert_eq!(twin["tokens"], last["tokens"]);
            if pruned_action(&last).is_some() {
                break 'feed;
            }
        }
    }
    assert!(pruned_action(&last).is_some(), "the loop never reached the trigger");
    assert!(
        actions(&last, "compacted").is_empty(),
        "the loop compacted before it pruned"
    );

    let inspect_before = inspect_but_calibration(&mut d, noted);
    let archive_before = snapshot(workspace, "dialog");
    let offloads_before = snapshot(workspace, "tool_result");
    let records_before = session_records(workspace, noted);
    // The provider counted 30 % more than satchel, reported as a notification (no reply).
    let provider = n(&last["tokens"]["total"]) * 13 / 10;
    d.send(
        &json!({"jsonrpc": "2.0", "method": "context.usage", "params": {"session_id": noted, "input_tokens": provider}}),
        Framing::Ndjson,
    );
    let calibrated = d.call("context.inspect", json!({"session_id": noted}));
    assert_eq!(
        calibrated["calibration"]["samples"],
        json!(1),
        "{}",
        calibrated["calibration"]
    );
    // Halfway from 1 to the report's 1.3.
    let factor = calibrated["calibration"]["factor"].as_f64().unwrap();
    assert!((factor - 1.15).abs() < 0.01, "factor {factor}");
    assert_eq!(
        inspect_but_calibration(&mut d, noted),
        inspect_before,
        "inspect changed beyond the calibration"
    );
    assert_eq!(snapshot(workspace, "dialog"), archive_before, "the archive changed");
    assert_eq!(
        snapshot(workspace, "tool_result"),
        offloads_before,
        "the offload files changed"
    );
    let records = session_records(workspace, noted);
    assert_eq!(
        records[..records_before.len()],
        records_before[..],
        "the session log was rewritten"
    );
    let added: Vec<&Value> = records[records_before.len()..].iter().collect();
    assert!(
        added.len() == 1 && added[0]["record"] == "calibration",
        "the report logged more than its calibration: {added:?}"
    );

    // Both sessions still hold the same conversation: a request under the trigger is the full
    // one in both, only counted with the correction in `noted`.
    let full_noted = prepare(&mut d, noted, false, &[], Some(&wide));
    let full_control = prepare(&mut d, control, false, &[], Some(&wide));
    for (session, full, factor) in [(noted, &full_noted, factor), (control, &full_control, 1.0)] {
        let archived = archived_indexes(workspace, session);
        assert!(archived.is_empty(), "{session} compacted");
        let changes = check_reply(&mut d, workspace, format, &sent, &archived, full, factor);
        check_pruning_report(full, &changes);
        assert!(pruned_action(full).is_none());
    }
    assert_eq!(full_noted["messages"], full_control["messages"]);
    let (counted, corrected) = (n(&full_control["tokens"]["total"]), n(&full_noted["tokens"]["total"]));
    let expected = counted as f64 * factor;
    assert!(
        (corrected as f64 - expected).abs() <= expected * 0.01 + 5.0,
        "{corrected} tokens corrected by {factor} from {counted}"
    );

    // And the next turn, in the small window, is pruned from the same originals in both
    // (the corrected counts may prune more in `noted`).
    let chunk = turn(format, next_turn).remove(0);
    sent.extend(chunk.iter().cloned());
    for (session, factor) in [(noted, factor), (control, 1.0)] {
        let result = prepare(&mut d, session, false, &chunk, Some(&config));
        let archived = archived_indexes(workspace, session);
        let changes = check_reply(&mut d, workspace, format, &sent, &archived, &result, factor);
        check_pruning_report(&result, &changes);
    }
    d.shutdown();
}

/// A request over the trigger whose every message is in the protected turns (one user turn,
/// compaction off) has nothing pruning may touch: it is sent whole, and no `pruned` action
/// claims otherwise (the monitor still shows that the prune phase was reached).
#[test]
fn a_request_with_nothing_to_prune_is_sent_whole_without_a_pruned_action() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    let mut d = Daemon::start(workspace, &ACECLAW_ENV);
    let format = Format::Anthropic;
    let mut sent = vec![user("Check every module of the parser crate, one at a time.")];
    for t in 0..11 {
        let id = format!("toolu_{t:02}");
        let module = format!("crates/parser/src/module_{t}.rs");
        sent.push(with_reasoning(
            format,
            call_message(
                format,
                &id,
                "bash",
                &json!({"command": format!("cargo check {module}")}),
                "Next.",
            ),
            t,
            0,
        ));
        sent.push(result_message(format, &id, &tool_output(t, 2_000, &module)));
    }
    let result = prepare(&mut d, "whole", true, &sent, Some(&json!({"compact_enabled": false})));
    let total = n(&result["tokens"]["total"]);
    assert!(
        (TRIGGER..WINDOW).contains(&total),
        "{total} tokens: the test lost its point"
    );
    let changes = check_reply(&mut d, workspace, format, &sent, &BTreeSet::new(), &result, 1.0);
    check_pruning_report(&result, &changes);
    assert_eq!(result["messages"], json!(sent), "sent whole");
    assert!(pruned_action(&result).is_none(), "{}", pretty(&result["actions"]));
    let monitor = d.call("context.inspect", json!({"session_id": "whole"}))["monitor"].clone();
    assert_eq!(monitor["phases_reached"], json!(["prune"]), "{monitor}");
    assert_eq!(monitor["pruned_only_count"], json!(0), "{monitor}");
    d.shutdown();
}

/// A client that keeps the request it got back as its history (stubs, missing reasoning,
/// summary and all) and sends it whole with the next messages: satchel recognises its own
/// pruned request, so the session keeps the originals and nothing is lost.
fn a_client_resending_the_pruned_request_loses_nothing(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    let mut d = Daemon::start(workspace, &ACECLAW_ENV);
    let session = "resend";
    let mut sent: Vec<Value> = Vec::new();
    let mut history: Vec<Value> = Vec::new();
    // Pruned requests sent back, and whether the last request returned was pruned.
    let (mut resent_pruned, mut compactions, mut pruned) = (0, 0, false);
    for t in 0..24 {
        for chunk in turn(format, t) {
            sent.extend(chunk.iter().cloned());
            history.extend(chunk.iter().cloned());
            let result = d.call("context.prepare", json!({"session_id": session, "messages": history}));
            assert_eq!(
                result["reconciliation"]["appended"],
                json!(chunk.len()),
                "turn {t}: {}",
                result["reconciliation"]
            );
            let archived = archived_indexes(workspace, session);
            let changes = check_reply(&mut d, workspace, format, &sent, &archived, &result, 1.0);
            check_pruning_report(&result, &changes);
            resent_pruned += usize::from(pruned);
            pruned = pruned_action(&result).is_some();
            compactions += actions(&result, "compacted").len();
            history = result["messages"].as_array().unwrap().clone();
        }
    }
    assert!(
        resent_pruned >= 3,
        "only {resent_pruned} pruned requests were sent back"
    );
    assert!(compactions >= 1, "no compaction");
    let full = prepare(
        &mut d,
        session,
        false,
        &[],
        Some(&json!({"max_input_length": WIDE_WINDOW})),
    );
    assert_nothing_lost(&mut d, workspace, session, format, &sent, &full);
    d.shutdown();
}

#[test]
fn an_openai_client_resending_the_pruned_request_loses_nothing() {
    a_client_resending_the_pruned_request_loses_nothing(Format::Openai);
}

#[test]
fn an_anthropic_client_resending_the_pruned_request_loses_nothing() {
    a_client_resending_the_pruned_request_loses_nothing(Format::Anthropic);
}
