//! Transient request pruning (`aceclaw` mode): AceClaw's `pruneForRequest`, made safe and
//! progressive.
//!
//! When a request is over its trigger, old tool results become stubs and old reasoning is
//! left out *of this request only*: the session keeps every message as it was, so compaction
//! decides on the full conversation and the next request starts from the originals again.
//! Compaction then runs only when pruning cannot reach the target.
//!
//! What differs from AceClaw's:
//! - Only a tool-result text whose full output is in an offload file is stubbed, and the stub
//!   names that file, so nothing becomes unreachable (AceClaw's stub drops the rest for good).
//! - Progressive: messages are pruned oldest first and pruning stops as soon as the request
//!   is under the target, so a request that needs little pruning loses little (AceClaw prunes
//!   everything before the boundary at once).
//! - Nothing is removed or reordered and only texts change, so every tool call keeps its
//!   result; a message never becomes empty; a stub is used only when it is smaller.
//! - Messages are read in place; only a changed message is copied, once.

#[cfg(test)]
mod tests;

use satchel_protocol::config::PruneConfig;
use satchel_protocol::{MessageFormat, PruneReport};
use serde_json::Value;

use crate::format::{has_tool_result, result_texts};
use crate::repair::RepairItem;
use crate::summary::extract::text::cut_chars;
use crate::truncate::TextStats;

/// Text an assistant message keeps when leaving out its reasoning would leave it empty:
/// providers reject empty messages.
pub const REASONING_PLACEHOLDER: &str = "[reasoning pruned for this request]";
/// Reasoning fields of OpenAI-style assistant messages (DeepSeek, OpenRouter, vLLM, …).
const REASONING_FIELDS: &[&str] = &["reasoning_content", "reasoning", "reasoning_details", "thinking"];
/// Anthropic's reasoning content blocks.
const REASONING_BLOCKS: &[&str] = &["thinking", "redacted_thinking"];

/// How much pruning protects and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunePlan {
    /// The newest user turns (with everything after them) never pruned.
    pub protected_turns: usize,
    /// Characters a stubbed result keeps; results up to twice this long are kept whole.
    pub stub_chars: usize,
}

impl PrunePlan {
    /// The plan of the pruning keys (`prune_protected_turns`, `prune_stub_chars`).
    pub fn of(config: &PruneConfig) -> Self {
        PrunePlan {
            protected_turns: config.prune_protected_turns,
            stub_chars: config.prune_stub_chars,
        }
    }
}

/// A tool-result text of an outgoing message whose full output is in an offload file: the
/// only kind of text pruning may stub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunableText<'a> {
    /// Position of the message in the outgoing list.
    pub position: usize,
    /// JSON pointer of the text inside the message.
    pub pointer: &'a str,
    /// Workspace-relative offload file holding the full output.
    pub file: &'a str,
    /// Size of the full output, for the stub's notice.
    pub stats: TextStats,
}

/// One request to prune.
#[derive(Debug, Clone, Copy)]
pub struct PruneRequest<'a, M> {
    /// The outgoing messages as rendered (summary first, if any).
    pub messages: &'a [M],
    /// Their format.
    pub format: MessageFormat,
    /// The texts that may be stubbed, in any order; a pointer that is not a tool-result text
    /// of its message is ignored.
    pub offloaded: &'a [PrunableText<'a>],
    /// Token count of each message, as counted for `total`.
    pub tokens: &'a [u64],
    /// Tokens of the whole request (messages, system prompt, tools, summary).
    pub total: u64,
    /// Pruning stops once the request is at most this many tokens.
    pub target: u64,
    /// What is protected and how long stubs are.
    pub plan: PrunePlan,
}

/// A message of the request replaced by its pruned form.
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    /// Position in the outgoing list.
    pub position: usize,
    /// The pruned message.
    pub message: Value,
    /// Its token count.
    pub tokens: u64,
}

/// What pruning did to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    /// Changed messages only, by ascending position.
    pub replacements: Vec<Replacement>,
    /// Counts for the client; `tokens_after` is the request's new total.
    pub report: PruneReport,
}

impl Pruned {
    /// Puts the replacements into `messages`, the list they were computed from.
    pub fn apply<M: RepairItem>(self, messages: &mut [M]) {
        for replacement in self.replacements {
            messages[replacement.position] = M::from_value(replacement.message);
        }
    }
}

/// Prunes `request` until it is at most `request.target` tokens or nothing prunable is left.
/// `count` counts a changed message the way `request.tokens` were counted.
///
/// A request already at or under its target comes back unchanged.
pub fn prune_for_request<M: RepairItem>(request: &PruneRequest<'_, M>, mut count: impl FnMut(&Value) -> u64) -> Pruned {
    assert_eq!(
        request.messages.len(),
        request.tokens.len(),
        "one token count per message"
    );
    let mut total = request.total;
    let mut pruned = Pruned {
        replacements: Vec::new(),
        report: PruneReport {
            tokens_before: total,
            tokens_after: total,
            ..PruneReport::default()
        },
    };
    if total <= request.target {
        return pruned;
    }
    let boundary = protected_start(request.messages, request.format, request.plan.protected_turns);
    let mut offloaded: Vec<&PrunableText<'_>> = request.offloaded.iter().filter(|t| t.position < boundary).collect();
    offloaded.sort_by_key(|t| t.position);
    let mut next = 0;
    for position in 0..boundary {
        if total <= request.target {
            break;
        }
        let first = next;
        while offloaded.get(next).is_some_and(|t| t.position == position) {
            next += 1;
        }
        let message = request.messages[position].value();
        let Some(edited) = prune_message(
            message,
            &offloaded[first..next],
            request.format,
            request.plan.stub_chars,
        ) else {
            continue;
        };
        let before = request.tokens[position];
        let tokens = count(&edited.message);
        // A placeholder or a stub notice can outweigh what it replaces: then the original is
        // sent, so pruning never makes a request bigger.
        if tokens >= before {
            continue;
        }
        total = total.saturating_sub(before - tokens);
        pruned.report.stubbed_results += edited.stubbed;
        pruned.report.removed_reasoning += edited.removed_reasoning;
        pruned.replacements.push(Replacement {
            position,
            message: edited.message,
            tokens,
        });
    }
    pruned.report.tokens_after = total;
    pruned
}

/// Position of the first protected message: the start of the `turns`-th newest user turn,
/// moved back to the assistant message whose calls it answers when that turn also carries
/// tool results. 0 (everything protected) when there are fewer turns; the length (nothing
/// protected) for 0 turns.
pub fn protected_start<M: RepairItem>(messages: &[M], format: MessageFormat, turns: usize) -> usize {
    if turns == 0 {
        return messages.len();
    }
    let Some(mut boundary) = messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| is_turn(m.value()))
        .nth(turns - 1)
        .map(|(i, _)| i)
    else {
        return 0;
    };
    while boundary > 0 && has_tool_result(messages[boundary].value(), format) {
        boundary -= 1;
    }
    boundary
}

/// A user message that is a turn of its own, not only tool results: a string content, or a
/// block besides `tool_result` blocks (Anthropic clients add the user's words, or a reminder,
/// to the message carrying the results). OpenAI results are `tool` messages.
fn is_turn(message: &Value) -> bool {
    if message.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    match message.get("content") {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
        _ => true,
    }
}

/// A message with its prunable texts stubbed and its reasoning left out.
struct Edited {
    message: Value,
    stubbed: usize,
    removed_reasoning: usize,
}

/// Prunes one message; `None` when nothing in it can be pruned (then it is not copied).
fn prune_message(
    message: &Value,
    offloaded: &[&PrunableText<'_>],
    format: MessageFormat,
    stub_chars: usize,
) -> Option<Edited> {
    let stubs = stubs(message, offloaded, format, stub_chars);
    let reasoning = is_assistant(message) && has_reasoning(message);
    if stubs.is_empty() && !reasoning {
        return None;
    }
    let mut edited = message.clone();
    for (pointer, stub) in &stubs {
        if let Some(slot) = edited.pointer_mut(pointer) {
            *slot = Value::String(stub.clone());
        }
    }
    let removed_reasoning = if reasoning { remove_reasoning(&mut edited) } else { 0 };
    Some(Edited {
        message: edited,
        stubbed: stubs.len(),
        removed_reasoning,
    })
}

/// The stubs of a message's prunable texts: only tool-result texts of the message (so a
/// summary or a user's words are never stubbed), only texts longer than twice `stub_chars`,
/// and only when the stub is smaller.
fn stubs<'a>(
    message: &Value,
    offloaded: &[&PrunableText<'a>],
    format: MessageFormat,
    stub_chars: usize,
) -> Vec<(&'a str, String)> {
    if offloaded.is_empty() {
        return Vec::new();
    }
    let results = result_texts(message, format);
    offloaded
        .iter()
        .filter(|t| results.iter().any(|r| r.pointer == t.pointer))
        .filter_map(|t| {
            let text = message.pointer(t.pointer)?.as_str()?;
            let stub = stub(text, t, stub_chars)?;
            Some((t.pointer, stub))
        })
        .collect()
}

/// The first `stub_chars` characters of `text` and where the full output is.
fn stub(text: &str, offloaded: &PrunableText<'_>, stub_chars: usize) -> Option<String> {
    if !cut_chars(text, stub_chars.saturating_mul(2)).1 {
        return None;
    }
    let head = cut_chars(text, stub_chars).0;
    let TextStats {
        total_bytes: bytes,
        total_lines: lines,
    } = offloaded.stats;
    let stub = format!(
        "{head}\n[content pruned for this request — the full output ({bytes} {}, {lines} {}) is in {}; read it with context.read]",
        plural(bytes, "byte"),
        plural(lines, "line"),
        offloaded.file
    );
    (stub.len() < text.len()).then_some(stub)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 { word.to_owned() } else { format!("{word}s") }
}

fn is_assistant(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
}

fn is_reasoning_block(block: &Value) -> bool {
    block
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| REASONING_BLOCKS.contains(&t))
}

fn has_reasoning(message: &Value) -> bool {
    REASONING_FIELDS
        .iter()
        .any(|f| message.get(f).is_some_and(|v| !v.is_null()))
        || message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| blocks.iter().any(is_reasoning_block))
}

/// Leaves out an assistant message's reasoning fields and blocks; returns how many. A message
/// left with nothing to say keeps [`REASONING_PLACEHOLDER`].
fn remove_reasoning(message: &mut Value) -> usize {
    let Some(object) = message.as_object_mut() else {
        return 0;
    };
    let mut removed = 0;
    for field in REASONING_FIELDS {
        if object.get(*field).is_some_and(|v| !v.is_null()) {
            object.remove(*field);
            removed += 1;
        }
    }
    if let Some(Value::Array(blocks)) = object.get_mut("content") {
        let before = blocks.len();
        blocks.retain(|b| !is_reasoning_block(b));
        removed += before - blocks.len();
    }
    if is_empty_reply(message) {
        match message.get_mut("content") {
            Some(Value::Array(blocks)) => {
                blocks.push(serde_json::json!({"type": "text", "text": REASONING_PLACEHOLDER}));
            }
            _ => message["content"] = Value::String(REASONING_PLACEHOLDER.to_owned()),
        }
    }
    removed
}

/// An assistant message with no tool call and no content but blank text.
fn is_empty_reply(message: &Value) -> bool {
    if message
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty())
    {
        return false;
    }
    match message.get("content") {
        None | Some(Value::Null) => true,
        Some(Value::String(text)) => text.trim().is_empty(),
        Some(Value::Array(blocks)) => blocks.iter().all(|b| {
            b.get("type").and_then(Value::as_str) == Some("text")
                && b.get("text")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t.trim().is_empty())
        }),
        Some(_) => false,
    }
}
