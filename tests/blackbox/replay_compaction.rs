//! Acceptance check of issue 3 (compaction): replays every trajectory of the shared development
//! data (`../shared/data/trajectories/` in OpenAI format, `trajectories_anthropic/` in Anthropic
//! format) through `context.prepare` with `max_input_length` 16384 and every other key at its
//! default, appending one message per call, and checks
//!
//! * after every call, that the returned request is valid for its format (every tool result
//!   answers a call of the preceding assistant message, every call is answered except those of
//!   a last assistant message; Anthropic: roles alternate, start with the user, results come
//!   first in their message; OpenAI: system messages first), that it fits (`tokens.total` and
//!   a recount of the returned messages with the daemon's tokenizer are at most the limit), and
//!   that it holds exactly the messages sent and not archived, in order, unchanged but for
//!   tool-result excerpts, after the summary when there is one;
//! * after every compaction, that the archive lines it names hold exactly the compacted
//!   messages, byte-exact, with their offload files, and that the summary in the request is
//!   the rendered `compact_summary`;
//! * at the end of each trajectory, that every original message is recoverable byte-exactly:
//!   returned unchanged, or rebuilt from its excerpt, the offload file and `context.read`, or
//!   read back from the dialog archive (`<workspace>/dialog/*.jsonl`), where each index is at
//!   most once and never while it is also live.
//!
//! The replay runs in both context modes (issue 15): `qwenpaw`, and `aceclaw`, where a request
//! over its trigger is pruned for that call first and compacted only when that is not enough.
//! In `aceclaw` mode the summary must open with `[COMPACTED]`, the monitor must show the prune
//! phase before every compaction, a tool-result text may also come back as a stub (counted by
//! the call's `pruned` action, keeping the original's head, naming a file that gives the
//! original back through `context.read`), and every other check is the same. The recorded
//! trajectories have their user messages at the start, all within the protected turns, so a
//! third replay adds a user turn after every round of tool results to have real outputs
//! stubbed. Each replay takes seconds, so all three run in CI.
//!
//! It also measures identifier retention on the same replay: for each compaction, the file
//! paths named in the compacted span's tool-call arguments and user texts (not devices,
//! URLs, globs, directories, class paths or class literals), the commands run
//! (first line, at most 200 chars) and the first error line of each failing tool result, and
//! which of them the summary text in force right after it contains; and the largest summary
//! (`tokens.summary`). The table goes to stderr and, as JSON, to `target/retention.json` (or
//! `$SATCHEL_RETENTION_OUT`; the `aceclaw` replays write `retention_aceclaw*.json` beside it).
//! The targets (paths ≥ 99 %, commands ≥ 99 %, error lines ≥ 95 %, summary < 3000 tokens: issue 12's) are
//! asserted overall in every replay (`SATCHEL_ASSERT_RETENTION=0` only reports);
//! `SATCHEL_SHOW_MISSES=1` lists what was missed.
//!
//! The data is not part of the repository; without it the test prints why and passes.
//! `SATCHEL_SHARED_DATA` points at another copy.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use satchel_core::summary::extract::paths::{is_junk, is_not_a_file, prose_path_tokens};
use satchel_core::summary::extract::prose::{DEMONSTRATION_PREFIXES, is_demonstration};
use satchel_core::summary::render::summary_message_text_for;
use satchel_core::tokens::TokenCounter;
use satchel_protocol::config::Tokenizer;
use satchel_protocol::{CompactSummary, ContextMode};
use serde_json::{Value, json};

use crate::support::checks::blank_texts_dropped;
use crate::support::trajectories::{
    Format, NOTICE_START, Trajectory, as_responses, block_type, blocks, call_ids, check_request_shape, content_texts,
    diff_strings, env_flag, has_tool_call, is_output_item, load_shared_data, parse_notice, parse_stub, report_path,
    result_ids, result_text_pointers, role, str_field,
};
use crate::support::{Daemon, MARKER, SUMMARY_HEADING, read_from};

/// `max_input_length` of the replay.
const LIMIT: u64 = 16_384;
/// How the summary message opens in `aceclaw` mode, before the heading.
const COMPACTED_OPENING: &str = "[COMPACTED]\n\n";
/// Characters a stub keeps of its text (`prune_stub_chars` at its default).
const STUB_CHARS: usize = 200;

/// Which user turns a replay sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turns {
    /// The trajectories as recorded: their one or two user messages come first, so `aceclaw`
    /// pruning, which never touches the newest `prune_protected_turns` (5) user turns, has
    /// nothing it may prune.
    Recorded,
    /// A short user message after every round of tool results ([`every_round_a_turn`]), so
    /// that old rounds fall outside the protected turns and real outputs are pruned.
    EveryRound,
}

/// What the user says after a round of tool results in [`Turns::EveryRound`].
const NUDGE: &str = "Go on.";

/// `t` with a user turn after every round of tool results that the assistant answers: an
/// OpenAI user message after the round's `tool` messages, an Anthropic text block at the end of
/// the user message carrying the round's results (as clients add reminders there).
fn every_round_a_turn(t: &Trajectory) -> Trajectory {
    let mut messages = Vec::with_capacity(t.messages.len() * 3 / 2);
    for (i, message) in t.messages.iter().enumerate() {
        let answered = t.messages.get(i + 1).is_some_and(|next| role(next) == "assistant");
        let mut message = message.clone();
        let results = !result_ids(&message, t.format).is_empty();
        if answered
            && results
            && t.format == Format::Anthropic
            && let Some(content) = message["content"].as_array_mut()
        {
            content.push(json!({"type": "text", "text": NUDGE}));
        }
        messages.push(message);
        if answered && results && t.format == Format::Openai {
            messages.push(json!({"role": "user", "content": NUDGE}));
        }
    }
    Trajectory {
        name: t.name.clone(),
        session_id: t.session_id.clone(),
        format: t.format,
        system: t.system.clone(),
        messages,
    }
}

/// The per-request configuration of the replay in `mode`: [`LIMIT`], every other key at its
/// default.
fn config(mode: ContextMode) -> Value {
    json!({"max_input_length": LIMIT, "context_mode": mode})
}
/// Failures kept with their details per replay job (all are counted).
const MAX_SAMPLES: usize = 40;
/// A command is retained when its first line, cut to this many chars, is in the summary.
const COMMAND_CHARS: usize = 200;
/// The summariser cuts error lines to this many chars; longer misses are reported apart.
const SUMMARISER_ERROR_CHARS: usize = 300;
/// Which tool results are failures: hand labels of the shared trajectories' calls
/// (`crates/core/testdata/outcome_labels.json`, by trajectory and call id). Keyword rules
/// count every `grep Error` as one; a failure is a command's outcome.
fn outcome_labels() -> HashMap<String, HashMap<String, String>> {
    let all: HashMap<String, Value> =
        serde_json::from_str(include_str!("../../crates/core/testdata/outcome_labels.json")).expect("the labels parse");
    all.into_iter()
        .filter(|(k, _)| k != "_doc")
        .map(|(k, v)| (k, serde_json::from_value(v).expect("labels are strings")))
        .collect()
}
/// A failing result is retained when one of its lines at least this long is in the summary.
const MIN_ERROR_LINE_CHARS: usize = 8;
/// Extensions that make a token without `/` a file path.
const FILE_EXTENSIONS: &[&str] = &[
    "java",
    "py",
    "rs",
    "md",
    "txt",
    "json",
    "jsonl",
    "xml",
    "sh",
    "cfg",
    "toml",
    "yml",
    "yaml",
    "ini",
    "conf",
    "properties",
    "gradle",
    "kt",
    "scala",
    "c",
    "h",
    "cc",
    "cpp",
    "hpp",
    "go",
    "js",
    "ts",
    "jsx",
    "tsx",
    "rb",
    "php",
    "html",
    "css",
    "sql",
    "log",
    "csv",
    "lock",
    "patch",
    "diff",
    "rst",
    "bat",
    "ps1",
    "class",
    "jar",
    "zip",
    "gz",
    "tar",
    "bin",
    "elf",
    "pem",
    "enc",
];
/// Retention targets (issue 12: identifier retention stays where it is).
const TARGET_PATHS: f64 = 99.0;
const TARGET_COMMANDS: f64 = 99.0;
const TARGET_ERRORS: f64 = 95.0;
const TARGET_SUMMARY_TOKENS: u64 = 3000;

// ---------------------------------------------------------------------------------------------
// Format knowledge, written independently of satchel's crates.

/// The arguments of each tool call of a message, parsed (a non-JSON argument string is kept as
/// a string).
fn call_arguments(message: &Value, format: Format) -> Vec<Value> {
    if format == Format::OpenaiResponses {
        let arguments = message.get("arguments").or_else(|| message.get("input"));
        return match (call_ids(message, format).is_empty(), arguments) {
            (false, Some(Value::String(s))) => {
                vec![serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))]
            }
            _ => Vec::new(),
        };
    }
    if role(message) != "assistant" {
        return Vec::new();
    }
    match format {
        Format::Openai => message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| match c.pointer("/function/arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
                Some(other) => other.clone(),
                None => Value::Null,
            })
            .collect(),
        Format::Anthropic => blocks(message)
            .filter(|b| block_type(b) == "tool_use")
            .map(|b| b.get("input").cloned().unwrap_or(Value::Null))
            .collect(),
        Format::OpenaiResponses => unreachable!("read above"),
    }
}

/// The texts a user wrote in a message (not its tool results).
fn user_texts(message: &Value) -> Vec<&str> {
    if role(message) != "user" {
        return Vec::new();
    }
    match message.get("content") {
        Some(Value::String(s)) => vec![s.as_str()],
        _ => blocks(message)
            .filter(|b| matches!(block_type(b), "text" | "input_text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
    }
}

/// Each tool result of a message: the call it answers and its full text.
fn tool_results(message: &Value, format: Format) -> Vec<(String, String)> {
    match format {
        Format::Openai if role(message) == "tool" => vec![(
            str_field(message, "tool_call_id"),
            content_texts(message.get("content")),
        )],
        Format::Openai => Vec::new(),
        Format::Anthropic => blocks(message)
            .filter(|b| block_type(b) == "tool_result")
            .map(|b| (str_field(b, "tool_use_id"), content_texts(b.get("content"))))
            .collect(),
        Format::OpenaiResponses if is_output_item(message) => {
            vec![(str_field(message, "call_id"), content_texts(message.get("output")))]
        }
        Format::OpenaiResponses => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// The returned list against the messages sent.

/// Where the summary is in a returned list, and the list without it.
struct Split {
    summary: Option<String>,
    /// The returned messages without the summary (a summary block removed from its carrier).
    live: Vec<Value>,
    /// Position in `live` of the Anthropic user message that carried the summary block.
    carrier: Option<usize>,
}

/// `text` starts with the summary's heading line.
/// `text` starts with the summary's heading line, after [`COMPACTED_OPENING`] in `aceclaw`
/// mode (and only then).
fn starts_with_heading_line(text: &str, mode: ContextMode) -> bool {
    let text = match mode {
        ContextMode::Qwenpaw => Some(text),
        ContextMode::Aceclaw => text.strip_prefix(COMPACTED_OPENING),
    };
    text.and_then(|t| t.strip_prefix(SUMMARY_HEADING))
        .is_some_and(|rest| rest.starts_with('\n'))
}

fn split_summary(returned: &[Value], mode: ContextMode) -> Split {
    let mut live = returned.to_vec();
    let at = live
        .iter()
        .take_while(|m| matches!(role(m), "system" | "developer"))
        .count();
    let Some(first) = live.get_mut(at) else {
        return Split {
            summary: None,
            live,
            carrier: None,
        };
    };
    if role(first) != "user" {
        return Split {
            summary: None,
            live,
            carrier: None,
        };
    }
    if let Some(text) = first.get("content").and_then(Value::as_str)
        && starts_with_heading_line(text, mode)
    {
        let summary = text.to_owned();
        live.remove(at);
        return Split {
            summary: Some(summary),
            live,
            carrier: None,
        };
    }
    // Responses: a message item of its own.
    if first["type"] == "message"
        && let Some(text) = first.pointer("/content/0/text").and_then(Value::as_str)
        && first.pointer("/content/0/type") == Some(&json!("input_text"))
        && starts_with_heading_line(text, mode)
    {
        let summary = text.to_owned();
        live.remove(at);
        return Split {
            summary: Some(summary),
            live,
            carrier: None,
        };
    }
    if let Some(content) = first.get_mut("content").and_then(Value::as_array_mut)
        && let Some(block) = content.first()
        && block_type(block) == "text"
        && let Some(text) = block.get("text").and_then(Value::as_str)
        && starts_with_heading_line(text, mode)
    {
        let summary = text.to_owned();
        content.remove(0);
        return Split {
            summary: Some(summary),
            live,
            carrier: Some(at),
        };
    }
    Split {
        summary: None,
        live,
        carrier: None,
    }
}

/// How a tool-result text was returned when it was not returned whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutKind {
    /// An excerpt with a truncation notice.
    Excerpt,
    /// A stub of a text pruned for this request (`aceclaw` mode).
    Stub,
}

/// A tool-result text returned as an excerpt or a stub.
struct Cut {
    pointer: String,
    original: String,
    excerpt: String,
    kind: CutKind,
}

/// The excerpts of `returned` if it is `sent` with only tool-result texts cut (with a notice),
/// or in `aceclaw` mode also sent as stubs.
fn excerpts_of(sent: &Value, returned: &Value, format: Format, mode: ContextMode) -> Result<Vec<Cut>, String> {
    if sent == returned {
        return Ok(Vec::new());
    }
    let mut diffs = Vec::new();
    diff_strings(sent, returned, &mut String::new(), &mut diffs)?;
    let allowed = result_text_pointers(sent, format);
    let mut cuts = Vec::new();
    for (pointer, original, excerpt) in diffs {
        if !allowed.contains(&pointer) {
            return Err(format!("{pointer} is not a tool-result text but was changed"));
        }
        let kind = if mode == ContextMode::Aceclaw && parse_stub(excerpt).is_some() {
            CutKind::Stub
        } else if excerpt.contains(MARKER) {
            CutKind::Excerpt
        } else {
            return Err(format!("{pointer} was changed without a truncation notice"));
        };
        cuts.push(Cut {
            pointer,
            original: original.to_owned(),
            excerpt: excerpt.to_owned(),
            kind,
        });
    }
    Ok(cuts)
}

/// A carrier's content after its summary block is removed, compared with its original: a
/// string content comes back as one text block.
fn restore_carrier(live: &mut Value, original: &Value) {
    if let Some(text) = original.get("content").and_then(Value::as_str)
        && live.get("content").and_then(Value::as_array).is_some_and(|c| {
            c.len() == 1 && block_type(&c[0]) == "text" && c[0].get("text").and_then(Value::as_str) == Some(text)
        })
    {
        live["content"] = Value::String(text.to_owned());
    }
}

/// Matches the live part of a returned list with the messages sent and not archived, in order;
/// returns the excerpts per original index.
fn match_live(
    split: &mut Split,
    sent: &[Value],
    expected: &[usize],
    format: Format,
    mode: ContextMode,
) -> Result<Vec<(usize, Vec<Cut>)>, String> {
    if let (Some(position), Some(&index)) = (split.carrier, expected.first()) {
        restore_carrier(&mut split.live[position], &sent[index]);
    }
    let mut out = Vec::new();
    for (position, &index) in expected.iter().enumerate() {
        let Some(got) = split.live.get(position) else {
            return Err(format!(
                "message {index} is missing: the request holds {} messages besides the summary, {} are live \
                 (sent and not archived)",
                split.live.len(),
                expected.len()
            ));
        };
        // Blank text blocks, which Anthropic rejects, are dropped from the request.
        let without_blank = blank_texts_dropped(&sent[index], format);
        let cuts = excerpts_of(without_blank.as_ref().unwrap_or(&sent[index]), got, format, mode)
            .map_err(|e| format!("live message {index} (request position {position}) is not the message sent: {e}"))?;
        out.push((index, cuts));
    }
    if split.live.len() > expected.len() {
        return Err(format!(
            "the request holds {} messages besides the summary, only {} are live; extra: {}",
            split.live.len(),
            expected.len(),
            short(&Value::Array(split.live[expected.len()..].to_vec()))
        ));
    }
    Ok(out)
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 300 {
        return text;
    }
    let mut end = 300;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

// ---------------------------------------------------------------------------------------------
// Rebuilding a truncated text from its excerpt or its stub.

/// Rebuilds the original from the excerpt alone: its head, then the file through `context.read`;
/// also compares the file with the original. A stub: [`check_stub`], then the whole file
/// through `context.read`.
fn rebuild(daemon: &mut Daemon, workspace: &Path, cut: &Cut) -> Result<(), String> {
    if cut.kind == CutKind::Stub {
        let path = check_stub(workspace, cut)?;
        let read = read_from(daemon, "", &path);
        if read != cut.original {
            return Err(format!(
                "context.read of {path} gives {} bytes that differ from the {}-byte original",
                read.len(),
                cut.original.len()
            ));
        }
        return Ok(());
    }
    let notice = parse_notice(&cut.excerpt, &cut.original).ok_or("no notice that follows a head of the original")?;
    let on_disk = std::fs::read(workspace.join(&notice.path)).map_err(|e| format!("read {}: {e}", notice.path))?;
    if on_disk != cut.original.as_bytes() {
        return Err(format!(
            "{} holds {} bytes that differ from the {}-byte original",
            notice.path,
            on_disk.len(),
            cut.original.len()
        ));
    }
    let rebuilt = read_from(daemon, &cut.original[..notice.head_bytes], &notice.path);
    if rebuilt != cut.original {
        return Err(format!(
            "head + context.read gives {} bytes that differ from the {}-byte original",
            rebuilt.len(),
            cut.original.len()
        ));
    }
    Ok(())
}

/// Checks a stub against its original without the daemon: it keeps the first
/// [`STUB_CHARS`] characters, states the original's size, and names a file holding the
/// original byte for byte. Returns the file.
fn check_stub(workspace: &Path, cut: &Cut) -> Result<String, String> {
    let stub = parse_stub(&cut.excerpt).ok_or("not a stub")?;
    let head: String = cut.original.chars().take(STUB_CHARS).collect();
    if stub.head != head {
        return Err(format!(
            "the stub does not keep the first {STUB_CHARS} characters of the original: {}",
            short(&Value::String(cut.excerpt.clone()))
        ));
    }
    if stub.total_bytes != cut.original.len() || stub.total_lines != cut.original.lines().count() {
        return Err(format!(
            "the stub says {} bytes, {} lines; the original has {}, {}",
            stub.total_bytes,
            stub.total_lines,
            cut.original.len(),
            cut.original.lines().count()
        ));
    }
    let on_disk = std::fs::read(workspace.join(stub.path)).map_err(|e| format!("read {}: {e}", stub.path))?;
    if on_disk != cut.original.as_bytes() {
        return Err(format!(
            "{} holds {} bytes that differ from the {}-byte original",
            stub.path,
            on_disk.len(),
            cut.original.len()
        ));
    }
    Ok(stub.path.to_owned())
}

// ---------------------------------------------------------------------------------------------
// The dialog archive.

#[derive(Debug, Clone)]
struct ArchiveLine {
    session_id: String,
    index: usize,
    compaction_id: String,
    message: Value,
    offloads: Vec<(String, String)>,
}

fn parse_archive_line(line: &str) -> Result<ArchiveLine, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("archive line is not JSON ({e})"))?;
    Ok(ArchiveLine {
        session_id: str_field(&v, "session_id"),
        index: v["index"].as_u64().ok_or("archive line without index")? as usize,
        compaction_id: str_field(&v, "compaction_id"),
        message: v.get("message").cloned().ok_or("archive line without message")?,
        offloads: v
            .get("offloads")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|o| (str_field(o, "pointer"), str_field(o, "file")))
            .collect(),
    })
}

/// Lines `start..=end` (1-based) of a workspace file, parsed. Unlike the harness's
/// `archive_lines`, a problem is an error the replay counts, not a panic.
fn archive_range(workspace: &Path, file: &str, start: usize, end: usize) -> Result<Vec<ArchiveLine>, String> {
    let text = std::fs::read_to_string(workspace.join(file)).map_err(|e| format!("read {file}: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    if start == 0 || end < start || end > lines.len() {
        return Err(format!(
            "range {start}-{end} of {file}, which has {} lines",
            lines.len()
        ));
    }
    lines[start - 1..end].iter().map(|l| parse_archive_line(l)).collect()
}

/// Every archive line of one session, in every file of the archive directory, parsed (an
/// error rather than a panic, as for [`archive_range`]).
fn session_archive_lines(workspace: &Path, session: &str) -> Result<Vec<(String, usize, ArchiveLine)>, String> {
    let dir = workspace.join("dialog");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(_) => return Ok(Vec::new()),
    };
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = format!("dialog/{}", path.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&path).map_err(|e| format!("read {name}: {e}"))?;
        for (n, line) in text.lines().enumerate() {
            let parsed = parse_archive_line(line).map_err(|e| format!("{name} line {}: {e}", n + 1))?;
            if parsed.session_id == session {
                out.push((name.clone(), n + 1, parsed));
            }
        }
    }
    Ok(out)
}

/// An archived message is its original, and its offload files hold the texts they name.
fn check_archived(workspace: &Path, line: &ArchiveLine, original: &Value) -> Result<(), String> {
    if line.message != *original {
        return Err(format!("archived message {} differs from the original", line.index));
    }
    for (pointer, file) in &line.offloads {
        let text = original.pointer(pointer).and_then(Value::as_str).ok_or_else(|| {
            format!(
                "archived message {} names offload {file} for {pointer}, which is no text",
                line.index
            )
        })?;
        let on_disk = std::fs::read(workspace.join(file)).map_err(|e| format!("read {file}: {e}"))?;
        if on_disk != text.as_bytes() {
            return Err(format!(
                "offload {file} of archived message {} differs from its text",
                line.index
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Identifier retention.

/// Path tokens of a text: split at whitespace, quotes, brackets and shell punctuation;
/// trailing sentence punctuation and `:line[:col]` removed; URLs and options ignored; kept
/// when it has a `/` or a known file extension.
fn path_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "\"'`()[]{}<>,;|&=\\".contains(c))
        .filter_map(normalise_path)
        .collect()
}

fn normalise_path(token: &str) -> Option<String> {
    let trim = |t: &str| t.trim_end_matches(['.', ',', ':', ';', '!', '?']).to_owned();
    let mut t = trim(token);
    while let Some((head, tail)) = t.rsplit_once(':')
        && !tail.is_empty()
        && tail.bytes().all(|b| b.is_ascii_digit())
    {
        t = trim(head);
    }
    let plausible = !t.is_empty()
        && !t.starts_with('-')
        && !t.contains("://")
        && !t.starts_with("www.")
        && t.chars().any(|c| c.is_ascii_alphabetic())
        && t.chars().all(|c| c.is_alphanumeric() || "_.~/@+%#:*-".contains(c));
    if !plausible {
        return None;
    }
    let has_extension = t.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && !stem.ends_with('/') && FILE_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
    });
    // Devices, globs, directories, class paths and class literals name no file (issue 30).
    ((t.contains('/') || has_extension) && !is_not_a_file(&t)).then_some(t)
}

fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// The first non-blank line of a command, cut to [`COMMAND_CHARS`] chars.
fn command_line(command: &str) -> Option<String> {
    let line = command.lines().find(|l| !l.trim().is_empty())?.trim_end();
    Some(line.chars().take(COMMAND_CHARS).collect())
}

/// The lines of a failing result that can stand for it in a summary (trimmed, cut to what
/// the summariser keeps of an error line).
fn error_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.chars().count() >= MIN_ERROR_LINE_CHARS)
        .map(|l| l.chars().take(SUMMARISER_ERROR_CHARS).collect())
        .collect()
}

/// What a compacted span names, each item once.
#[derive(Debug, Default, PartialEq)]
struct Identifiers {
    paths: Vec<String>,
    commands: Vec<String>,
    /// Per failing result, the lines that can stand for it.
    errors: Vec<Vec<String>>,
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// The identifiers a compacted span must leave in the summary: paths the user wrote (in
/// requests, not demonstrations, and not prose like "and/or"), paths in call arguments,
/// commands, and for every result `labels` call a failure, one of its lines.
fn identifiers(span: &[&Value], format: Format, labels: &HashMap<String, String>) -> Identifiers {
    let mut ids = Identifiers::default();
    for message in span {
        for text in user_texts(message) {
            if is_demonstration(text, DEMONSTRATION_PREFIXES) {
                continue;
            }
            prose_path_tokens(text)
                .into_iter()
                .filter_map(normalise_path)
                .for_each(|p| push_unique(&mut ids.paths, p));
        }
        for args in call_arguments(message, format) {
            let mut strings = Vec::new();
            collect_strings(&args, &mut strings);
            for s in strings {
                path_tokens(s)
                    .into_iter()
                    .filter(|p| !is_junk(p))
                    .for_each(|p| push_unique(&mut ids.paths, p));
            }
            if let Some(line) = args.get("command").and_then(Value::as_str).and_then(command_line) {
                push_unique(&mut ids.commands, line);
            }
        }
        for (id, text) in tool_results(message, format) {
            if labels.get(&id).is_some_and(|l| l == "failure") {
                ids.errors.push(error_lines(&text));
            }
        }
    }
    ids
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    kept: usize,
    total: usize,
}

impl Tally {
    fn add(&mut self, kept: bool) {
        self.total += 1;
        self.kept += usize::from(kept);
    }

    fn merge(&mut self, other: Tally) {
        self.kept += other.kept;
        self.total += other.total;
    }

    fn pct(self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            100.0 * self.kept as f64 / self.total as f64
        }
    }

    fn cell(self) -> String {
        format!("{}/{} {:5.1}%", self.kept, self.total, self.pct())
    }

    fn json(self) -> Value {
        json!({"kept": self.kept, "total": self.total, "pct": (self.pct() * 10.0).round() / 10.0})
    }
}

// ---------------------------------------------------------------------------------------------
// Replay.

/// What one trajectory (or a sum of them) gave.
#[derive(Debug, Default)]
struct Report {
    name: String,
    files: usize,
    messages: usize,
    prepares: usize,
    compactions: usize,
    archived: usize,
    paths: Tally,
    commands: Tally,
    errors: Tally,
    max_summary_tokens: u64,
    max_total_tokens: u64,
    /// Largest recount of a returned request (system param + every returned message).
    max_recount: u64,
    /// Largest `recount - tokens.total`.
    max_undercount: i64,
    live_unchanged: usize,
    live_rebuilt: usize,
    from_archive: usize,
    /// Calls whose request was pruned (`aceclaw` mode).
    pruned: usize,
    /// Distinct stubs checked against their original and their file.
    stubs: usize,
    prepare_time: Duration,
    misses: Vec<String>,
    /// Violations of the acceptance criterion, counted by kind.
    violations: BTreeMap<&'static str, usize>,
    /// The first ones, in detail.
    samples: Vec<String>,
}

impl Report {
    fn violate(&mut self, kind: &'static str, what: String) {
        *self.violations.entry(kind).or_default() += 1;
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(format!("[{kind}] {}: {what}", self.name));
        }
    }

    fn violation_count(&self) -> usize {
        self.violations.values().sum()
    }

    fn add(&mut self, other: &Report) {
        self.files += other.files;
        self.messages += other.messages;
        self.prepares += other.prepares;
        self.compactions += other.compactions;
        self.archived += other.archived;
        self.paths.merge(other.paths);
        self.commands.merge(other.commands);
        self.errors.merge(other.errors);
        self.max_summary_tokens = self.max_summary_tokens.max(other.max_summary_tokens);
        self.max_total_tokens = self.max_total_tokens.max(other.max_total_tokens);
        self.max_recount = self.max_recount.max(other.max_recount);
        self.max_undercount = self.max_undercount.max(other.max_undercount);
        self.live_unchanged += other.live_unchanged;
        self.live_rebuilt += other.live_rebuilt;
        self.from_archive += other.from_archive;
        self.pruned += other.pruned;
        self.stubs += other.stubs;
        self.prepare_time += other.prepare_time;
        for (kind, n) in &other.violations {
            *self.violations.entry(kind).or_default() += n;
        }
        for sample in &other.samples {
            if self.samples.len() < MAX_SAMPLES {
                self.samples.push(sample.clone());
            }
        }
    }

    fn row(&self) -> String {
        format!(
            "{:<72} {:>5} {:>4} {:>17} {:>15} {:>15} {:>7} {:>7} {:>5}",
            self.name,
            self.messages,
            self.compactions,
            self.paths.cell(),
            self.commands.cell(),
            self.errors.cell(),
            self.max_summary_tokens,
            self.max_total_tokens,
            self.violation_count()
        )
    }

    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "files": self.files,
            "messages": self.messages,
            "prepares": self.prepares,
            "compactions": self.compactions,
            "archived_messages": self.archived,
            "paths": self.paths.json(),
            "commands": self.commands.json(),
            "errors": self.errors.json(),
            "max_summary_tokens": self.max_summary_tokens,
            "max_total_tokens": self.max_total_tokens,
            "max_recounted_tokens": self.max_recount,
            "recovered": {
                "returned_unchanged": self.live_unchanged,
                "rebuilt_from_excerpt": self.live_rebuilt,
                "from_archive": self.from_archive,
            },
            "pruned_requests": self.pruned,
            "stubs_checked": self.stubs,
            "violations": self.violations,
        })
    }
}

/// Token counts of returned messages, cached by their JSON (most come back unchanged).
struct Recount {
    counter: TokenCounter,
    cache: HashMap<String, u64>,
}

impl Recount {
    fn new() -> Self {
        Recount {
            counter: TokenCounter::new(Tokenizer::O200kBase, 4.0),
            cache: HashMap::new(),
        }
    }

    fn request(&mut self, system: Option<&Value>, messages: &[Value]) -> u64 {
        let mut total = system.map_or(0, |s| self.counter.count_message(s));
        for message in messages {
            let key = message.to_string();
            let counter = self.counter;
            total += *self.cache.entry(key).or_insert_with(|| counter.count_message(message));
        }
        total
    }
}

/// State of one trajectory's replay.
struct Replay<'a> {
    daemon: &'a mut Daemon,
    workspace: &'a Path,
    t: &'a Trajectory,
    report: Report,
    /// Original index → id of the compaction that archived it.
    archived: BTreeMap<usize, String>,
    recount: Recount,
    show_misses: bool,
    /// Outcome labels by trajectory and call id.
    labels: &'a HashMap<String, HashMap<String, String>>,
    mode: ContextMode,
    /// Stubs already checked, by their text: each is checked once, through `context.read`.
    stubs: HashSet<String>,
}

impl Replay<'_> {
    fn run(mut self) -> Report {
        let t = self.t;
        let mut last: Vec<Value> = Vec::new();
        let mut saw_call = false;
        for i in 0..t.messages.len() {
            let mut params = json!({"session_id": t.session_id, "config": config(self.mode)});
            params[if i == 0 { "messages" } else { "append" }] = json!([t.messages[i]]);
            if let Some(system) = &t.system {
                params["system"] = system.clone();
            }
            let started = Instant::now();
            let reply = self.daemon.call_raw("context.prepare", params);
            self.report.prepare_time += started.elapsed();
            self.report.prepares += 1;
            if let Some(error) = reply.get("error") {
                // The session no longer holds what was sent: later appends would only repeat this.
                self.report.violate("prepare_failed", format!("message {i}: {error}"));
                return self.report;
            }
            let result = &reply["result"];
            saw_call |= has_tool_call(&t.messages[i]);
            self.check_call(i, result, saw_call);
            last = result["messages"].as_array().cloned().unwrap_or_default();
        }
        self.finish(&last);
        self.report
    }

    /// Everything checked after one `context.prepare`.
    fn check_call(&mut self, i: usize, result: &Value, saw_call: bool) {
        let t = self.t;
        let Some(returned) = result["messages"].as_array() else {
            self.report
                .violate("invalid", format!("after message {i}: no `messages` list"));
            return;
        };
        let reconciliation = &result["reconciliation"];
        if reconciliation["session_messages"] != json!(i + 1) || reconciliation["appended"] != json!(1) {
            self.report.violate(
                "lost_or_altered",
                format!("after message {i}: reconciliation {reconciliation}"),
            );
        }
        if saw_call && result["format"] != json!(t.format.wire_name()) {
            self.report
                .violate("invalid", format!("after message {i}: format {}", result["format"]));
        }

        // Valid for its format.
        if let Err(why) = check_request_shape(returned, t.format) {
            self.report.violate("invalid", format!("after message {i}: {why}"));
        }

        // Fits.
        let tokens = &result["tokens"];
        let total = tokens["total"].as_u64().unwrap_or(u64::MAX);
        self.report.max_total_tokens = self.report.max_total_tokens.max(total);
        self.report.max_summary_tokens = self
            .report
            .max_summary_tokens
            .max(tokens["summary"].as_u64().unwrap_or(0));
        if total > LIMIT {
            self.report.violate(
                "over_limit",
                format!(
                    "after message {i}: tokens {tokens}; over_limit: {}",
                    result["over_limit"]
                ),
            );
        }
        if result.get("over_limit").is_some_and(|o| !o.is_null()) != (total > LIMIT) {
            self.report.violate(
                "over_limit",
                format!(
                    "after message {i}: over_limit {} with total {total}",
                    result["over_limit"]
                ),
            );
        }
        let recount = self.recount.request(t.system.as_ref(), returned);
        self.report.max_recount = self.report.max_recount.max(recount);
        self.report.max_undercount = self.report.max_undercount.max(recount as i64 - total as i64);
        if recount > LIMIT {
            self.report.violate(
                "over_limit_recounted",
                format!(
                    "after message {i}: the returned request recounts to {recount} tokens (tokens.total {total}, \
                     {} messages)",
                    returned.len()
                ),
            );
        }

        // The summary, and the compactions of this call.
        let mut split = split_summary(returned, self.mode);
        let compactions: Vec<&Value> = result["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "compacted")
            .collect();
        for action in &compactions {
            self.compaction(i, action, result, split.summary.as_deref());
        }
        self.check_summary(i, result, split.summary.as_deref());

        // Exactly the live messages, in order.
        let expected: Vec<usize> = (0..=i).filter(|k| !self.archived.contains_key(k)).collect();
        match match_live(&mut split, &t.messages, &expected, t.format, self.mode) {
            Ok(matched) => self.check_stubs(i, result, &matched),
            Err(why) => self
                .report
                .violate("lost_or_altered", format!("after message {i}: {why}")),
        }
    }

    /// The stubs of a request (`aceclaw` mode) are those its `pruned` action counts, and each
    /// gives its original back: its file on disk, and through `context.read` the first time it
    /// is seen.
    fn check_stubs(&mut self, i: usize, result: &Value, matched: &[(usize, Vec<Cut>)]) {
        let pruned: Vec<&Value> = result["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "pruned")
            .collect();
        let stubs: Vec<(usize, &Cut)> = matched
            .iter()
            .flat_map(|(index, cuts)| cuts.iter().map(move |c| (*index, c)))
            .filter(|(_, c)| c.kind == CutKind::Stub)
            .collect();
        self.report.pruned += pruned.len();
        let stubbed = pruned
            .iter()
            .map(|a| a["stubbed_results"].as_u64().unwrap_or(0) as usize)
            .sum::<usize>();
        if pruned.len() > 1 || stubbed != stubs.len() {
            self.report.violate(
                "pruning",
                format!(
                    "after message {i}: {} pruned actions stubbing {stubbed} results, the request holds {} stubs",
                    pruned.len(),
                    stubs.len()
                ),
            );
        }
        if let Some(action) = pruned.first()
            && action["tokens_after"] != result["tokens"]["total"]
        {
            self.report.violate(
                "pruning",
                format!(
                    "after message {i}: pruned to {}, tokens {}",
                    action["tokens_after"], result["tokens"]
                ),
            );
        }
        for (index, cut) in stubs {
            if self.stubs.contains(&cut.excerpt) {
                continue;
            }
            match rebuild(self.daemon, self.workspace, cut) {
                Ok(()) => {
                    self.stubs.insert(cut.excerpt.clone());
                    self.report.stubs += 1;
                }
                Err(e) => self.report.violate(
                    "unrecoverable",
                    format!("after message {i}, stub of message {index} {}: {e}", cut.pointer),
                ),
            }
        }
    }

    /// The summary in the request is the one in force and matches `compact_summary`.
    fn check_summary(&mut self, i: usize, result: &Value, text: Option<&str>) {
        let structured = result.get("compact_summary").filter(|s| !s.is_null());
        let compacted = self.report.compactions > 0;
        match (compacted, text, structured) {
            (false, None, None) => {}
            (true, Some(text), Some(structured)) => {
                match serde_json::from_value::<CompactSummary>(structured.clone()) {
                    Ok(summary) if summary_message_text_for(&summary, self.mode) == text => {}
                    Ok(_) => self.report.violate(
                        "summary",
                        format!("after message {i}: the summary message is not the rendered compact_summary"),
                    ),
                    Err(e) => self
                        .report
                        .violate("summary", format!("after message {i}: compact_summary: {e}")),
                }
            }
            _ => self.report.violate(
                "summary",
                format!(
                    "after message {i}: {} compactions so far, summary message {}, compact_summary {}",
                    self.report.compactions,
                    if text.is_some() { "present" } else { "absent" },
                    if structured.is_some() { "present" } else { "absent" },
                ),
            ),
        }
    }

    /// Checks one `compacted` action against the archive and measures retention on its span.
    fn compaction(&mut self, i: usize, action: &Value, result: &Value, summary: Option<&str>) {
        let t = self.t;
        self.report.compactions += 1;
        let id = str_field(action, "id");
        let range = &action["archive"];
        let at = |why: String| format!("after message {i}, compaction {id}: {why}");
        // The monitor shows the phases the request went through: in `aceclaw` mode it was
        // pruned first, and compacted because that was not enough.
        let expected_phases = match self.mode {
            ContextMode::Qwenpaw => json!(["summarize"]),
            ContextMode::Aceclaw => json!(["prune", "summarize"]),
        };
        let inspect = self.daemon.call("context.inspect", json!({"session_id": t.session_id}));
        if inspect["monitor"]["phases_reached"] != expected_phases {
            self.report.violate(
                "phases",
                at(format!("monitor {}, {expected_phases} expected", inspect["monitor"])),
            );
        }
        let (Some(file), Some(start), Some(end)) = (
            range["file"].as_str(),
            range["start_line"].as_u64(),
            range["end_line"].as_u64(),
        ) else {
            self.report
                .violate("archive", at(format!("no archive range: {action}")));
            return;
        };
        let lines = match archive_range(self.workspace, file, start as usize, end as usize) {
            Ok(lines) => lines,
            Err(e) => {
                self.report.violate("archive", at(e));
                return;
            }
        };
        let mut span = Vec::new();
        for line in &lines {
            if line.session_id != t.session_id || line.compaction_id != id {
                self.report.violate(
                    "archive",
                    at(format!(
                        "line of session {} / compaction {} inside its range",
                        line.session_id, line.compaction_id
                    )),
                );
                continue;
            }
            if line.index > i {
                self.report
                    .violate("archive", at(format!("archives index {} never sent", line.index)));
                continue;
            }
            if let Some(previous) = self.archived.insert(line.index, id.clone()) {
                self.report.violate(
                    "archive",
                    at(format!("message {} archived again (first by {previous})", line.index)),
                );
            }
            if let Err(e) = check_archived(self.workspace, line, &t.messages[line.index]) {
                self.report.violate("unrecoverable", at(e));
            }
            span.push(line.index);
        }
        span.sort_unstable();
        let count = action["messages"].as_u64().unwrap_or(0) as usize;
        let first = range["first_index"].as_u64().map(|v| v as usize);
        let last = range["last_index"].as_u64().map(|v| v as usize);
        if span.len() != count || span.first().copied() != first || span.last().copied() != last {
            self.report.violate(
                "archive",
                at(format!(
                    "action says {count} messages {first:?}-{last:?}, its lines hold {span:?}"
                )),
            );
        }
        self.report.archived += span.len();
        let in_force = result
            .pointer("/compact_summary/archive")
            .and_then(Value::as_array)
            .and_then(|a| a.last());
        if in_force != Some(range) {
            self.report.violate(
                "summary",
                at(format!("the summary's last archive range is {in_force:?}")),
            );
        }

        // Retention, against the summary text in force right after this compaction.
        let Some(text) = summary else {
            self.report.violate("summary", at("no summary in the request".into()));
            return;
        };
        let span: Vec<&Value> = span.iter().map(|&k| &t.messages[k]).collect();
        let stem = t.name.rsplit('/').next().unwrap_or(&t.name);
        let ids = identifiers(&span, t.format, self.labels.get(stem).unwrap_or(&HashMap::new()));
        let r = &mut self.report;
        for (items, tally, what) in [
            (&ids.paths, &mut r.paths, "path"),
            (&ids.commands, &mut r.commands, "command"),
        ] {
            for item in items {
                let kept = text.contains(item.as_str());
                tally.add(kept);
                if !kept && self.show_misses {
                    r.misses.push(format!("{what}: {item}"));
                }
            }
        }
        for lines in &ids.errors {
            let kept = lines.iter().any(|l| text.contains(l.as_str()));
            r.errors.add(kept);
            if !kept && self.show_misses {
                r.misses
                    .push(format!("error: {}", lines.first().map_or("", String::as_str)));
            }
        }
    }

    /// Every original message is recoverable byte-exactly, from one place.
    fn finish(&mut self, last: &[Value]) {
        let t = self.t;
        let n = t.messages.len();
        let mut live: HashSet<usize> = HashSet::new();
        let mut split = split_summary(last, self.mode);
        let expected: Vec<usize> = (0..n).filter(|k| !self.archived.contains_key(k)).collect();
        match match_live(&mut split, &t.messages, &expected, t.format, self.mode) {
            Ok(matched) => {
                for (index, cuts) in matched {
                    live.insert(index);
                    if cuts.is_empty() {
                        self.report.live_unchanged += 1;
                        continue;
                    }
                    let mut ok = true;
                    for cut in &cuts {
                        if let Err(e) = rebuild(self.daemon, self.workspace, cut) {
                            ok = false;
                            self.report.violate(
                                "unrecoverable",
                                format!("final list, message {index} {}: {e}", cut.pointer),
                            );
                        }
                    }
                    self.report.live_rebuilt += usize::from(ok);
                }
            }
            Err(why) => self.report.violate("lost_or_altered", format!("final list: {why}")),
        }

        // The archive on disk, read independently of the actions.
        let lines = match session_archive_lines(self.workspace, &t.session_id) {
            Ok(lines) => lines,
            Err(e) => {
                self.report.violate("archive", e);
                return;
            }
        };
        let announced: HashSet<&String> = self.archived.values().collect();
        let mut seen: HashMap<usize, (String, usize)> = HashMap::new();
        for (file, number, line) in &lines {
            if !announced.contains(&line.compaction_id) {
                self.report.violate(
                    "archive",
                    format!(
                        "{file} line {number}: compaction {} was never announced",
                        line.compaction_id
                    ),
                );
            }
            if let Some((f, m)) = seen.insert(line.index, (file.clone(), *number)) {
                self.report.violate(
                    "archive",
                    format!(
                        "message {} archived twice: {f} line {m} and {file} line {number}",
                        line.index
                    ),
                );
                continue;
            }
            if line.index >= n {
                self.report.violate(
                    "archive",
                    format!("{file} line {number}: index {} was never sent", line.index),
                );
                continue;
            }
            if live.contains(&line.index) {
                self.report.violate(
                    "archive",
                    format!(
                        "message {} is both archived ({file} line {number}) and live",
                        line.index
                    ),
                );
            }
            match check_archived(self.workspace, line, &t.messages[line.index]) {
                Ok(()) => self.report.from_archive += 1,
                Err(e) => self
                    .report
                    .violate("unrecoverable", format!("{file} line {number}: {e}")),
            }
        }
        for index in 0..n {
            if !live.contains(&index) && !seen.contains_key(&index) {
                self.report.violate(
                    "unrecoverable",
                    format!("message {index} is neither in the final list nor in the archive"),
                );
            }
        }
        self.report.files += 1;
        self.report.messages += n;
    }
}

/// Replays one folder on a daemon of its own, one session per file.
fn replay_folder(trajectories: &[Trajectory], show_misses: bool, mode: ContextMode) -> (Vec<Report>, Duration) {
    let started = Instant::now();
    let workspace = tempfile::tempdir().expect("temp workspace");
    let mut daemon = Daemon::start(workspace.path(), &[]);
    let mut reports = Vec::new();
    let labels = outcome_labels();
    for t in trajectories {
        let replay = Replay {
            daemon: &mut daemon,
            workspace: workspace.path(),
            t,
            report: Report {
                name: t.name.clone(),
                ..Report::default()
            },
            archived: BTreeMap::new(),
            recount: Recount::new(),
            show_misses,
            labels: &labels,
            mode,
            stubs: HashSet::new(),
        };
        reports.push(replay.run());
    }
    daemon.shutdown();
    (reports, started.elapsed())
}

#[test]
fn compaction_replay_keeps_requests_valid_within_the_limit_and_every_message_recoverable() {
    compaction_replay(ContextMode::Qwenpaw, Turns::Recorded);
}

/// The same acceptance in `aceclaw` mode: a request over the trigger is pruned first and
/// compacted only when that is not enough (on the recorded trajectories pruning never has
/// anything outside the protected turns), and the summary opens with `[COMPACTED]`. Every
/// invariant of the `qwenpaw` replay holds, and the retention targets apply to its summaries
/// too. The whole data is replayed: it takes seconds, as the `qwenpaw` replay does.
#[test]
fn compaction_replay_in_aceclaw_mode_keeps_every_guarantee() {
    compaction_replay(ContextMode::Aceclaw, Turns::Recorded);
}

/// `aceclaw` mode on the trajectories with a user turn after every round of tool results:
/// old rounds leave the protected turns, so real outputs (CRLF, non-ASCII, notice-like text)
/// are sent as stubs. Each stub must keep the original's head, state its size and name a file
/// that gives it back byte for byte through `context.read`, and every other guarantee holds.
#[test]
fn compaction_replay_in_aceclaw_mode_stubs_real_outputs_when_every_round_is_a_turn() {
    compaction_replay(ContextMode::Aceclaw, Turns::EveryRound);
}

/// Replays the shared data in `mode` with `turns` and checks the acceptance criterion (see
/// the module documentation). The report goes to `retention.json` in the target directory (or
/// `$SATCHEL_RETENTION_OUT`) for the recorded turns in `qwenpaw` mode, and beside it, named
/// after the mode and the turns, for the others.
fn compaction_replay(mode: ContextMode, turns: Turns) {
    let started = Instant::now();
    let Some((dir, folders)) = load_shared_data() else {
        return;
    };
    let show_misses = env_flag("SATCHEL_SHOW_MISSES");
    let folders = folders.map(|(folder, trajectories)| match turns {
        Turns::Recorded => (folder, trajectories),
        Turns::EveryRound => (folder, trajectories.iter().map(every_round_a_turn).collect()),
    });
    // The OpenAI trajectories (with their added turns) as Codex would send them.
    let responses = (
        "trajectories as Responses items",
        folders[0].1.iter().map(as_responses).collect(),
    );
    let folders: Vec<(&str, Vec<Trajectory>)> = folders.into_iter().chain([responses]).collect();

    // One daemon per folder, in parallel.
    let results: Vec<(&str, Vec<Report>, Duration)> = std::thread::scope(|scope| {
        let handles: Vec<_> = folders
            .iter()
            .filter(|(_, trajectories)| !trajectories.is_empty())
            .map(|(folder, trajectories)| {
                (
                    *folder,
                    scope.spawn(move || replay_folder(trajectories, show_misses, mode)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(folder, h)| {
                let (reports, elapsed) = h.join().expect("replay job panicked");
                (folder, reports, elapsed)
            })
            .collect()
    });

    let header = format!(
        "{:<72} {:>5} {:>4} {:>17} {:>15} {:>15} {:>7} {:>7} {:>5}",
        "trajectory", "msgs", "cmp", "paths", "commands", "errors", "max sum", "max tot", "viol"
    );
    let mode_name = config(mode)["context_mode"].as_str().unwrap_or_default().to_owned();
    eprintln!(
        "\ncompaction replay in {mode_name} mode, {turns:?} turns, max_input_length {LIMIT}, one message per call \
         (summary tokens = tokens.summary)"
    );
    eprintln!("{header}");
    let mut overall = Report {
        name: "overall".into(),
        ..Report::default()
    };
    let mut folder_json = Vec::new();
    let mut trajectory_json = Vec::new();
    for (folder, reports, elapsed) in &results {
        let mut sum = Report {
            name: format!("{folder} (all)"),
            ..Report::default()
        };
        for report in reports {
            eprintln!("{}", report.row());
            sum.add(report);
            trajectory_json.push(report.json());
        }
        eprintln!("{}", sum.row());
        eprintln!(
            "  {folder}: {} prepare calls in {:.1?} ({:.1?} waiting on prepare); max recount {} tokens, \
             recount - tokens.total at most {}",
            sum.prepares, elapsed, sum.prepare_time, sum.max_recount, sum.max_undercount
        );
        folder_json.push(sum.json());
        overall.add(&sum);
    }
    eprintln!("{}", overall.row());
    eprintln!(
        "recovered: {} returned unchanged, {} rebuilt from excerpt or stub + context.read, {} from the dialog \
         archive ({} archived by {} compactions); {} requests pruned, {} distinct stubs read back",
        overall.live_unchanged,
        overall.live_rebuilt,
        overall.from_archive,
        overall.archived,
        overall.compactions,
        overall.pruned,
        overall.stubs,
    );
    eprintln!(
        "violations: {:?}; total time {:.1?}",
        overall.violations,
        started.elapsed()
    );
    if show_misses {
        for report in results.iter().flat_map(|(_, r, _)| r) {
            for miss in &report.misses {
                eprintln!("  missed in {}: {miss}", report.name);
            }
        }
    }

    let out = report_path("SATCHEL_RETENTION_OUT", "retention.json");
    let out = match (mode, turns) {
        (ContextMode::Qwenpaw, Turns::Recorded) => out,
        (_, Turns::Recorded) => out.with_file_name(format!("retention_{mode_name}.json")),
        (_, Turns::EveryRound) => out.with_file_name(format!("retention_{mode_name}_every_round.json")),
    };
    let doc = json!({
        "data": dir.display().to_string(),
        "config": config(mode),
        "mode": "one message per context.prepare call",
        "turns": format!("{turns:?}"),
        "targets": {
            "paths_pct": TARGET_PATHS,
            "commands_pct": TARGET_COMMANDS,
            "errors_pct": TARGET_ERRORS,
            "max_summary_tokens_below": TARGET_SUMMARY_TOKENS,
        },
        "overall": overall.json(),
        "folders": folder_json,
        "trajectories": trajectory_json,
    });
    if let Some(parent) = out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap() + "\n") {
        Ok(()) => eprintln!("retention numbers written to {}", out.display()),
        Err(e) => eprintln!("could not write {}: {e}", out.display()),
    }

    if !overall.samples.is_empty() {
        panic!(
            "{} violations of the acceptance criterion ({:?}); the first ones:\n{}",
            overall.violation_count(),
            overall.violations,
            overall.samples.join("\n")
        );
    }
    assert!(
        overall.compactions > 0,
        "the replay never compacted: nothing was checked"
    );
    assert!(overall.from_archive > 0, "no message was read back from the archive");
    match (mode, turns) {
        (ContextMode::Qwenpaw, _) => assert_eq!(overall.pruned, 0, "a request was pruned in qwenpaw mode"),
        (ContextMode::Aceclaw, Turns::EveryRound) => {
            assert!(
                overall.pruned > 0,
                "no request was pruned: the replay checked no pruning"
            );
            assert!(overall.stubs > 0, "no stub was read back");
        }
        (ContextMode::Aceclaw, Turns::Recorded) => {}
    }

    if std::env::var("SATCHEL_ASSERT_RETENTION").as_deref() != Ok("0") {
        let mut misses = Vec::new();
        if overall.paths.pct() < TARGET_PATHS {
            misses.push(format!("paths {:.1}% < {TARGET_PATHS}%", overall.paths.pct()));
        }
        if overall.commands.pct() < TARGET_COMMANDS {
            misses.push(format!("commands {:.1}% < {TARGET_COMMANDS}%", overall.commands.pct()));
        }
        if overall.errors.pct() < TARGET_ERRORS {
            misses.push(format!("error lines {:.1}% < {TARGET_ERRORS}%", overall.errors.pct()));
        }
        if overall.max_summary_tokens >= TARGET_SUMMARY_TOKENS {
            misses.push(format!(
                "max summary {} tokens ≥ {TARGET_SUMMARY_TOKENS}",
                overall.max_summary_tokens
            ));
        }
        assert!(misses.is_empty(), "retention targets missed: {}", misses.join("; "));
    }
}

/// The checkers and extractors themselves, on synthetic data, so a lenient one cannot pass
/// silently.
#[test]
fn the_checkers_reject_what_they_must() {
    // Validity.
    let openai = vec![
        json!({"role": "system", "content": "be brief"}),
        json!({"role": "user", "content": "list files"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls src\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "a\nb"}),
        json!({"role": "tool", "tool_call_id": "c2", "content": "c"}),
    ];
    assert_eq!(check_request_shape(&openai, Format::Openai), Ok(()));
    assert_eq!(
        check_request_shape(&openai[..3], Format::Openai),
        Ok(()),
        "a pending call at the end"
    );
    assert!(
        check_request_shape(
            &openai[..4].iter().chain(&openai[1..2]).cloned().collect::<Vec<_>>(),
            Format::Openai
        )
        .is_err()
    );
    let mut late_system = openai.clone();
    late_system.push(json!({"role": "system", "content": "late"}));
    assert!(check_request_shape(&late_system, Format::Openai).is_err());
    let mut orphan = openai.clone();
    orphan.remove(2);
    assert!(check_request_shape(&orphan, Format::Openai).is_err());

    let anthropic = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "go"}]}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]}),
    ];
    assert_eq!(check_request_shape(&anthropic, Format::Anthropic), Ok(()));
    assert!(
        check_request_shape(&anthropic[1..], Format::Anthropic).is_err(),
        "starts with the assistant"
    );
    let mut twice = anthropic.clone();
    twice.insert(1, anthropic[0].clone());
    assert!(
        check_request_shape(&twice, Format::Anthropic).is_err(),
        "roles must alternate"
    );
    let mut text_first = anthropic.clone();
    text_first[2]["content"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"type": "text", "text": "x"}));
    assert!(check_request_shape(&text_first, Format::Anthropic).is_err());

    // The summary is found and removed, and the rest must be the live messages.
    let summary = format!("{SUMMARY_HEADING}\n\nstuff");
    let mut with_summary = anthropic.clone();
    with_summary[0]["content"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"type": "text", "text": summary}));
    let mut split = split_summary(&with_summary, ContextMode::Qwenpaw);
    assert_eq!(split.summary.as_deref(), Some(summary.as_str()));
    assert_eq!(
        match_live(
            &mut split,
            &anthropic,
            &[0, 1, 2],
            Format::Anthropic,
            ContextMode::Qwenpaw
        )
        .map(|m| m.len()),
        Ok(3)
    );
    let mut split = split_summary(&with_summary, ContextMode::Qwenpaw);
    assert!(
        match_live(&mut split, &anthropic, &[0, 2], Format::Anthropic, ContextMode::Qwenpaw).is_err(),
        "an extra message"
    );
    let mut split = split_summary(&with_summary[..2], ContextMode::Qwenpaw);
    assert!(
        match_live(
            &mut split,
            &anthropic,
            &[0, 1, 2],
            Format::Anthropic,
            ContextMode::Qwenpaw
        )
        .is_err(),
        "a lost message"
    );
    let mut string_user = vec![json!({"role": "user", "content": "go"})];
    let carried = vec![json!({"role": "user", "content": [
        {"type": "text", "text": summary}, {"type": "text", "text": "go"}]})];
    let mut split = split_summary(&carried, ContextMode::Qwenpaw);
    assert_eq!(
        match_live(&mut split, &string_user, &[0], Format::Anthropic, ContextMode::Qwenpaw).map(|m| m.len()),
        Ok(1)
    );
    string_user[0]["content"] = json!("went");
    let mut split = split_summary(&carried, ContextMode::Qwenpaw);
    assert!(match_live(&mut split, &string_user, &[0], Format::Anthropic, ContextMode::Qwenpaw).is_err());
    let mut cut = openai.clone();
    cut[3]["content"] = json!(format!("a\n{MARKER}\n..."));
    let mut split = split_summary(&cut, ContextMode::Qwenpaw);
    let matched = match_live(
        &mut split,
        &openai,
        &[0, 1, 2, 3, 4],
        Format::Openai,
        ContextMode::Qwenpaw,
    )
    .unwrap();
    assert_eq!((matched[3].1.len(), matched[3].1[0].pointer.as_str()), (1, "/content"));
    let mut silent = openai.clone();
    silent[3]["content"] = json!("a");
    assert!(
        match_live(
            &mut split_summary(&silent, ContextMode::Qwenpaw),
            &openai,
            &[0, 1, 2, 3, 4],
            Format::Openai,
            ContextMode::Qwenpaw
        )
        .is_err()
    );
    let mut renamed = openai.clone();
    renamed[2]["tool_calls"][0]["function"]["name"] = json!("sh");
    assert!(
        match_live(
            &mut split_summary(&renamed, ContextMode::Qwenpaw),
            &openai,
            &[0, 1, 2, 3, 4],
            Format::Openai,
            ContextMode::Qwenpaw
        )
        .is_err()
    );

    // Aceclaw mode: the summary opens with `[COMPACTED]` (and only there), and a tool-result
    // text may be a stub, which must keep the original's head and name a file holding it.
    let marked = format!("[COMPACTED]\n\n{summary}");
    let mut with_marked = anthropic.clone();
    with_marked[0]["content"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"type": "text", "text": marked}));
    assert_eq!(
        split_summary(&with_marked, ContextMode::Aceclaw).summary.as_deref(),
        Some(marked.as_str())
    );
    assert_eq!(split_summary(&with_marked, ContextMode::Qwenpaw).summary, None);
    assert_eq!(split_summary(&with_summary, ContextMode::Aceclaw).summary, None);
    let workspace = tempfile::tempdir().unwrap();
    let original = "x".repeat(250) + "\nend\n";
    std::fs::create_dir(workspace.path().join("tool_result")).unwrap();
    std::fs::write(workspace.path().join("tool_result/r.txt"), &original).unwrap();
    let stub = |head: &str, file: &str| {
        format!(
            "{head}\n[content pruned for this request — the full output ({} bytes, 2 lines) is in {file}; read it \
             with context.read]",
            original.len()
        )
    };
    let mut sent = openai.clone();
    sent[3]["content"] = json!(original);
    let mut stubbed = sent.clone();
    stubbed[3]["content"] = json!(stub(&original[..200], "tool_result/r.txt"));
    let matched = match_live(
        &mut split_summary(&stubbed, ContextMode::Aceclaw),
        &sent,
        &[0, 1, 2, 3, 4],
        Format::Openai,
        ContextMode::Aceclaw,
    )
    .unwrap();
    assert_eq!(matched[3].1[0].kind, CutKind::Stub);
    assert_eq!(
        check_stub(workspace.path(), &matched[3].1[0]),
        Ok("tool_result/r.txt".to_owned())
    );
    assert!(
        match_live(
            &mut split_summary(&stubbed, ContextMode::Qwenpaw),
            &sent,
            &[0, 1, 2, 3, 4],
            Format::Openai,
            ContextMode::Qwenpaw
        )
        .is_err(),
        "no stub in qwenpaw mode"
    );
    for (head, file) in [
        (&original[..150], "tool_result/r.txt"),
        (&original[..200], "tool_result/other.txt"),
    ] {
        stubbed[3]["content"] = json!(stub(head, file));
        let matched = match_live(
            &mut split_summary(&stubbed, ContextMode::Aceclaw),
            &sent,
            &[0, 1, 2, 3, 4],
            Format::Openai,
            ContextMode::Aceclaw,
        )
        .unwrap();
        assert!(
            check_stub(workspace.path(), &matched[3].1[0]).is_err(),
            "{head:?} {file}"
        );
    }

    // Identifiers.
    assert_eq!(
        path_tokens(
            "Open src/main/Foo.java:12:5, then README.md. See https://x.io/a/b and www.x.org/y; \
             java.lang.String -rf pom.xml? ./run.sh"
        ),
        ["src/main/Foo.java", "README.md", "pom.xml", "./run.sh"]
    );
    assert_eq!(
        path_tokens("`cat \"a b/c.txt\"` (see notes.txt)"),
        ["b/c.txt", "notes.txt"]
    );
    assert_eq!(
        command_line("\n  cd /x && make\nsecond line"),
        Some("  cd /x && make".into())
    );
    assert_eq!(
        command_line(&"é".repeat(300)).map(|c| c.chars().count()),
        Some(COMMAND_CHARS)
    );
    assert_eq!(
        error_lines("compiling\n  Error: cannot find symbol  \nok"),
        ["compiling", "Error: cannot find symbol"]
    );
    let call = json!({"role": "assistant", "content": [
        {"type": "text", "text": "let me look at notes/plan.md"},
        {"type": "tool_use", "id": "t", "name": "bash", "input": {"command": "python x.py\nmore"}}]});
    let result = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "Traceback (most recent call last):\nKeyError"}]},
        {"type": "text", "text": "also look at docs/a.rst"}]});
    let labels = HashMap::from([("t".to_owned(), "failure".to_owned())]);
    assert_eq!(
        identifiers(&[&call, &result], Format::Anthropic, &labels),
        Identifiers {
            paths: vec!["x.py".into(), "docs/a.rst".into()],
            commands: vec!["python x.py".into()],
            errors: vec![vec!["Traceback (most recent call last):".into(), "KeyError".into()]],
        },
        "assistant prose is not a source of paths; user texts and call arguments are"
    );
    assert!(
        identifiers(&[&call, &result], Format::Anthropic, &HashMap::new())
            .errors
            .is_empty(),
        "only results labelled failures must leave an error line"
    );

    // A notice that follows a head of the original is found even when the original quotes one.
    let original = format!("{NOTICE_START}1 lines\n{}", "x\n".repeat(500));
    let head = &original[..NOTICE_START.len() + 8];
    let excerpt = format!(
        "{head}{NOTICE_START}501 lines in total ({} bytes).\nThis excerpt starts at line 1 and covers the next {} \
         bytes (lines 1-1).\nIf the current content is not enough, call `read_file` with \
         file_path=\"/ws/tool_result/f.txt\" start_line=2 to read more, or satchel's `context.read` \
         with {{\"path\": \"tool_result/f.txt\", \"start_line\": 2}}.",
        original.len(),
        head.len()
    );
    let notice = parse_notice(&excerpt, &original).expect("the real notice");
    assert_eq!(
        (notice.head_bytes, notice.path.as_str()),
        (head.len(), "tool_result/f.txt")
    );
}
