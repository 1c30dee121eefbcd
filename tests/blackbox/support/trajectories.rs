//! The shared development trajectories and format knowledge of the tests (the replays
//! `replay`, `replay_compaction` and `continuity`, and `compaction`'s agent loop): loading
//! `../shared/data/trajectories*/`, reading roles, tool calls and tool results of either format
//! (written independently of satchel's crates), checking the shape of a request, comparing a
//! returned message with the one sent, locating a truncation notice, and where a replay writes
//! its report.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{CONTEXT_READ_PATH, number_after, quoted_after};

/// How a notice starts, right after the kept head.
pub const NOTICE_START: &str = "<<<TRUNCATED>>>\nThe output above was truncated.\n\
                            The full content is saved to the file and contains ";

// ---------------------------------------------------------------------------------------------
// Loading the trajectories.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Openai,
    Anthropic,
    /// OpenAI Responses input items (no shared trajectories are in this format; the agent
    /// loops of the tests build it).
    OpenaiResponses,
}

impl Format {
    pub fn wire_name(self) -> &'static str {
        match self {
            Format::Openai => "openai",
            Format::Anthropic => "anthropic",
            Format::OpenaiResponses => "openai-responses",
        }
    }
}

#[derive(Clone)]
pub struct Trajectory {
    pub name: String,
    pub session_id: String,
    pub format: Format,
    pub system: Option<Value>,
    pub messages: Vec<Value>,
}

pub fn data_dir() -> PathBuf {
    match std::env::var_os("SATCHEL_SHARED_DATA") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    }
}

/// Where a replay writes its JSON report: `$variable`, else `file_name` in the target
/// directory the binary under test was built in.
pub fn report_path(variable: &str, file_name: &str) -> PathBuf {
    match std::env::var_os(variable) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => {
            let bin = super::satchel_bin();
            let target = bin.parent().and_then(Path::parent).expect("binary inside a target dir");
            target.join(file_name)
        }
    }
}

/// Whether the environment variable `name` is `1`.
pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// `[A-Za-z0-9._-]`, prefixed with the file's position so two names cannot collide.
pub fn session_id(position: usize, stem: &str) -> String {
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut id = format!("{position:03}-{clean}");
    id.truncate(128);
    id
}

pub fn load_folder(dir: &Path, format: Format) -> Vec<Trajectory> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("read data dir").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .enumerate()
        .map(|(position, path)| {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let doc: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
            let messages = doc["messages"]
                .as_array()
                .unwrap_or_else(|| panic!("{} has no `messages` list", path.display()))
                .clone();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            Trajectory {
                name: format!("{}/{}", dir.file_name().unwrap().to_string_lossy(), stem),
                session_id: session_id(position, &stem),
                format,
                system: doc.get("system").filter(|s| !s.is_null()).cloned(),
                messages,
            }
        })
        .collect()
}

/// `t` (OpenAI chat format) as Codex would send it over the Responses API: the system message
/// as a `developer` item, each assistant turn as a signed reasoning item, its text and one
/// `function_call` item per call, each `tool` message as a `function_call_output` item.
pub fn as_responses(t: &Trajectory) -> Trajectory {
    assert_eq!(t.format, Format::Openai, "{} is not in OpenAI chat format", t.name);
    let message = |role: &str, part: &str, text: &Value| json!({"type": "message", "role": role, "content": [{"type": part, "text": text}]});
    let mut items = Vec::new();
    for (index, m) in t.messages.iter().enumerate() {
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        match role(m) {
            "system" => items.push(message("developer", "input_text", &content)),
            "user" => items.push(message("user", "input_text", &content)),
            "tool" => {
                items.push(json!({"type": "function_call_output", "call_id": m["tool_call_id"], "output": content}))
            }
            "assistant" => {
                items.push(json!({"type": "reasoning", "id": format!("rs_{index}"), "summary": [],
                                  "encrypted_content": format!("gAAAAB-{index}-opaque")}));
                let calls = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                if calls.is_empty() || content.as_str().is_some_and(|s| !s.is_empty()) {
                    items.push(message("assistant", "output_text", &content));
                }
                items.extend(calls.iter().map(|c| {
                    json!({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                           "arguments": c["function"]["arguments"], "status": "completed"})
                }));
            }
            other => panic!("{}: role {other:?}", t.name),
        }
    }
    Trajectory {
        // The file stem stays last: the outcome labels are looked up by it.
        name: format!("responses:{}", t.name),
        session_id: t.session_id.clone(),
        format: Format::OpenaiResponses,
        system: t.system.clone(),
        messages: items,
    }
}

/// A data folder's name and its trajectories./// A data folder's name and its trajectories.
pub type Folder = (&'static str, Vec<Trajectory>);

/// The shared data's folder (canonical) and the trajectories of its two folders, OpenAI format
/// first; `None`, after saying why, when there is no data. Fails when the folder holds none.
pub fn load_shared_data() -> Option<(PathBuf, [Folder; 2])> {
    let dir = data_dir();
    if !dir.is_dir() {
        eprintln!("SKIPPED: no shared data at {} (set SATCHEL_SHARED_DATA)", dir.display());
        return None;
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    let folders = [
        ("trajectories", load_folder(&dir.join("trajectories"), Format::Openai)),
        (
            "trajectories_anthropic",
            load_folder(&dir.join("trajectories_anthropic"), Format::Anthropic),
        ),
    ];
    let total_files: usize = folders.iter().map(|(_, t)| t.len()).sum();
    assert!(
        total_files > 0,
        "{} exists but holds no trajectories/*.json nor trajectories_anthropic/*.json",
        dir.display()
    );
    Some((dir, folders))
}

// ---------------------------------------------------------------------------------------------
// Format knowledge, written independently of satchel's crates.

pub fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

pub fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message.get("content").and_then(Value::as_array).into_iter().flatten()
}

pub fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A Responses item's `type` (`""` for a chat message or an item without one).
pub fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A Responses output item, answering the call with the same `call_id`.
pub fn is_output_item(item: &Value) -> bool {
    matches!(item_type(item), "function_call_output" | "custom_tool_call_output")
}

/// A Responses item only the model writes: a call, reasoning, an assistant message.
fn is_model_item(item: &Value) -> bool {
    match item.get("role") {
        Some(role) => role == "assistant",
        None => !is_output_item(item),
    }
}

pub fn str_field(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// The text of a message's or a tool result's `content`: the string, or its text blocks joined
/// by newlines.
pub fn content_texts(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| matches!(block_type(p), "text" | "input_text" | "output_text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub fn call_ids(message: &Value, format: Format) -> Vec<String> {
    if format == Format::OpenaiResponses {
        return match item_type(message) {
            "function_call" | "custom_tool_call" => vec![str_field(message, "call_id")],
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
            .map(|c| str_field(c, "id"))
            .collect(),
        Format::Anthropic => blocks(message)
            .filter(|b| block_type(b) == "tool_use")
            .map(|b| str_field(b, "id"))
            .collect(),
        Format::OpenaiResponses => unreachable!("answered above"),
    }
}

pub fn result_ids(message: &Value, format: Format) -> Vec<String> {
    match format {
        Format::Openai if role(message) == "tool" => vec![str_field(message, "tool_call_id")],
        Format::Openai => Vec::new(),
        Format::Anthropic => blocks(message)
            .filter(|b| block_type(b) == "tool_result")
            .map(|b| str_field(b, "tool_use_id"))
            .collect(),
        Format::OpenaiResponses if is_output_item(message) => vec![str_field(message, "call_id")],
        Format::OpenaiResponses => Vec::new(),
    }
}

pub fn has_tool_call(message: &Value) -> bool {
    [Format::Openai, Format::Anthropic, Format::OpenaiResponses]
        .into_iter()
        .any(|format| !call_ids(message, format).is_empty())
}

/// JSON pointers of the texts of a message's tool results (the only strings satchel may cut).
pub fn result_text_pointers(message: &Value, format: Format) -> HashSet<String> {
    fn push(content: Option<&Value>, base: String, out: &mut HashSet<String>) {
        match content {
            Some(Value::String(_)) => {
                out.insert(base);
            }
            Some(Value::Array(parts)) => {
                for (i, part) in parts.iter().enumerate() {
                    let text_part = matches!(block_type(part), "text" | "input_text" | "output_text");
                    if text_part && part.get("text").is_some_and(Value::is_string) {
                        out.insert(format!("{base}/{i}/text"));
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = HashSet::new();
    match format {
        Format::Openai if role(message) == "tool" => push(message.get("content"), "/content".into(), &mut out),
        Format::Openai => {}
        Format::Anthropic => {
            for (i, block) in blocks(message).enumerate() {
                if block_type(block) == "tool_result" {
                    push(block.get("content"), format!("/content/{i}/content"), &mut out);
                }
            }
        }
        Format::OpenaiResponses if is_output_item(message) => push(message.get("output"), "/output".into(), &mut out),
        Format::OpenaiResponses => {}
    }
    out
}

/// The API's pairing rule: every result answers an open call of the nearest preceding assistant
/// message, with only other results in between (OpenAI) or in the very next message
/// (Anthropic), each call answered once; calls still open at the end of the list are allowed.
/// Responses: the calls of a run of the model's items are answered by the outputs after it,
/// before the next run or message.
pub fn check_pairing(messages: &[Value], format: Format) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut last_assistant: Option<usize> = None;
    let mut after_output = false;
    for (index, message) in messages.iter().enumerate() {
        if format == Format::OpenaiResponses {
            let answers = result_ids(message, format);
            for id in &answers {
                let Some(pos) = open.iter().position(|c| c == id) else {
                    return Err(format!("item {index}: output {id:?} answers no open call"));
                };
                open.remove(pos);
            }
            if answers.is_empty() {
                let continues_run = is_model_item(message) && !after_output;
                if !continues_run && !open.is_empty() {
                    return Err(format!("item {index}: calls {open:?} are not answered before it"));
                }
                if is_model_item(message) {
                    if !continues_run {
                        open.clear();
                    }
                    open.extend(call_ids(message, format));
                }
            }
            after_output = !answers.is_empty();
            continue;
        }
        for id in result_ids(message, format) {
            match open.iter().position(|c| *c == id) {
                Some(pos) => {
                    open.remove(pos);
                }
                None => {
                    return Err(format!(
                        "message {index}: tool result {id:?} answers no open call of the preceding assistant \
                         message ({last_assistant:?})"
                    ));
                }
            }
        }
        let may_answer_later = format == Format::Openai && role(message) == "tool";
        if !may_answer_later && !open.is_empty() {
            return Err(format!(
                "message {index}: calls {open:?} of message {last_assistant:?} are not answered before it"
            ));
        }
        if role(message) == "assistant" {
            open = call_ids(message, format);
            last_assistant = Some(index);
        }
    }
    Ok(())
}

/// A request the API accepts, as far as the shape goes: [`check_pairing`], plus the format's
/// own rules on roles (OpenAI: system messages only before the conversation; Anthropic: roles
/// alternate from the user, tool results first in their message, no empty content).
pub fn check_request_shape(messages: &[Value], format: Format) -> Result<(), String> {
    if messages.is_empty() {
        return Err("empty request".into());
    }
    check_pairing(messages, format)?;
    match format {
        Format::Openai => {
            let mut conversation_started = false;
            for (index, message) in messages.iter().enumerate() {
                match role(message) {
                    "system" if conversation_started => {
                        return Err(format!(
                            "message {index}: system message after the conversation started"
                        ));
                    }
                    "system" => {}
                    "user" | "assistant" | "tool" => conversation_started = true,
                    other => return Err(format!("message {index}: role {other:?}")),
                }
            }
        }
        Format::OpenaiResponses => {
            for (index, item) in messages.iter().enumerate() {
                match (item_type(item), item.get("role").and_then(Value::as_str)) {
                    ("message" | "", Some("system" | "developer" | "user" | "assistant")) => {}
                    ("function_call" | "custom_tool_call" | "reasoning", None) => {}
                    ("function_call_output" | "custom_tool_call_output", None) => {}
                    (kind, role) => return Err(format!("item {index}: type {kind:?} with role {role:?}")),
                }
                // The list may end on reasoning while the agent's step is still being sent.
                if item_type(item) == "reasoning" && messages.get(index + 1).is_some_and(|next| !is_model_item(next)) {
                    return Err(format!("item {index}: reasoning not followed by the model's item"));
                }
            }
        }
        Format::Anthropic => {
            for (index, message) in messages.iter().enumerate() {
                let expected = if index % 2 == 0 { "user" } else { "assistant" };
                if role(message) != expected {
                    return Err(format!(
                        "message {index}: role {:?} where {expected:?} is due (roles alternate from the user)",
                        role(message)
                    ));
                }
                let types: Vec<&str> = blocks(message).map(block_type).collect();
                let results = types.iter().take_while(|t| **t == "tool_result").count();
                if types[results..].contains(&"tool_result") {
                    return Err(format!("message {index}: a tool_result block after other content"));
                }
                if message
                    .get("content")
                    .is_some_and(|c| c.as_array().is_some_and(Vec::is_empty))
                {
                    return Err(format!("message {index}: empty content"));
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Comparing a returned message with the one sent.

pub fn escape_pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Walks both values together: any difference other than between two strings is an error;
/// differing strings are collected with their pointer.
pub fn diff_strings<'a>(
    sent: &'a Value,
    got: &'a Value,
    pointer: &mut String,
    out: &mut Vec<(String, &'a str, &'a str)>,
) -> Result<(), String> {
    match (sent, got) {
        (Value::String(a), Value::String(b)) => {
            if a != b {
                out.push((pointer.clone(), a, b));
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return Err(format!(
                    "array at {pointer:?} has {} items, {} were sent",
                    b.len(),
                    a.len()
                ));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                diff_strings(x, y, pointer, out)?;
                pointer.truncate(len);
            }
            Ok(())
        }
        (Value::Object(a), Value::Object(b)) => {
            if a.len() != b.len() || a.keys().any(|k| !b.contains_key(k)) {
                let sent_keys: Vec<_> = a.keys().collect();
                let got_keys: Vec<_> = b.keys().collect();
                return Err(format!(
                    "object at {pointer:?} has keys {got_keys:?}, {sent_keys:?} were sent"
                ));
            }
            for (k, x) in a {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer_token(k));
                diff_strings(x, &b[k], pointer, out)?;
                pointer.truncate(len);
            }
            Ok(())
        }
        _ if sent == got => Ok(()),
        _ => Err(format!("value at {pointer:?} is {got}, {sent} was sent")),
    }
}

// ---------------------------------------------------------------------------------------------
// Locating the notice of an excerpt.

/// The numbers of a notice, located robustly: the head is `original[..head_bytes]`, so the
/// notice is the occurrence of [`NOTICE_START`] right after such a head (an original may itself
/// contain notice-like text).
pub struct Notice {
    pub head_bytes: usize,
    /// Where the notice starts in the excerpt.
    pub start: usize,
    pub path: String,
    pub total_lines: usize,
    pub total_bytes: usize,
}

pub fn parse_notice(excerpt: &str, original: &str) -> Option<Notice> {
    excerpt.match_indices(NOTICE_START).find_map(|(start, _)| {
        let notice = &excerpt[start..];
        let head_bytes = number_after(notice, "covers the next ")?;
        let head = original.get(..head_bytes)?;
        let separator = usize::from(!head.is_empty() && !head.ends_with('\n'));
        if head_bytes + separator != start || !excerpt.starts_with(head) {
            return None;
        }
        Some(Notice {
            head_bytes,
            start,
            path: quoted_after(notice, CONTEXT_READ_PATH)?,
            total_lines: number_after(notice, "and contains ")?,
            total_bytes: number_after(notice, "lines in total (")?,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Reading the stub of a text pruned for one request (`aceclaw` mode).

/// How the notice of a stub starts, right after the head of the text it keeps.
pub const STUB_NOTICE: &str = "\n[content pruned for this request — the full output (";
/// How a stub ends.
const STUB_END: &str = "; read it with context.read]";

/// A tool-result text sent as a stub: the head it keeps and what its notice says.
pub struct Stub<'a> {
    pub head: &'a str,
    pub total_bytes: usize,
    pub total_lines: usize,
    /// Workspace-relative file holding the full text.
    pub path: &'a str,
}

/// The parts of a stub, `head` + `\n[content pruned for this request — the full output
/// (N bytes, L lines) is in FILE; read it with context.read]`; `None` when `text` is not one.
pub fn parse_stub(text: &str) -> Option<Stub<'_>> {
    let at = text.rfind(STUB_NOTICE)?;
    let notice = text[at + STUB_NOTICE.len()..].strip_suffix(STUB_END)?;
    let (sizes, path) = notice.split_once(") is in ")?;
    let (bytes, lines) = sizes.split_once(", ")?;
    let count = |text: &str, unit: &str| -> Option<usize> {
        let (number, word) = text.split_once(' ')?;
        let number: usize = number.parse().ok()?;
        let expected = if number == 1 {
            unit.to_owned()
        } else {
            format!("{unit}s")
        };
        (word == expected).then_some(number)
    };
    Some(Stub {
        head: &text[..at],
        total_bytes: count(bytes, "byte")?,
        total_lines: count(lines, "line")?,
        path,
    })
}
