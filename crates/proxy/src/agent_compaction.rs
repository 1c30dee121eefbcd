//! Recognising a request in which the agent asks its model to summarise the conversation:
//! its own compaction. satchel prepares it like any other request (so it fits the window,
//! and the agent summarises satchel's summary and the recent tail) and records it; the next
//! request, which starts from the agent's summary, starts the session over.
//!
//! The agents say so only in the text they append: Claude Code adds a text block to the last
//! user message, Codex a user message of its own (and sends no tools).

use serde_json::Value;
use serde_json::value::RawValue;

/// Phrases that only an agent's compaction instruction holds, by agent.
const MARKERS: [&str; 2] = [
    // Claude Code 2.x
    "Your task is to create a detailed summary of the conversation so far",
    // Codex 0.1xx
    "CONTEXT CHECKPOINT COMPACTION",
];

/// Whether the last message of `messages` is a user message asking for the agent's own
/// compaction.
pub fn asks_for_summary(messages: &[Box<RawValue>]) -> bool {
    let Some(last) = messages.last() else {
        return false;
    };
    let Ok(message) = serde_json::from_str::<Value>(last.get()) else {
        return false;
    };
    if message.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    let texts: Vec<&str> = match message.get("content") {
        Some(Value::String(text)) => vec![text],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    texts
        .iter()
        .any(|text| MARKERS.iter().any(|marker| text.contains(marker)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(messages: &[Value], expect: bool) {
        let raw: Vec<Box<RawValue>> = messages
            .iter()
            .map(|m| serde_json::value::to_raw_value(m).unwrap())
            .collect();
        assert_eq!(asks_for_summary(&raw), expect, "{messages:?}");
    }

    #[test]
    fn recognises_claude_code_s_and_codex_s_compaction_requests() {
        let claude = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
            {"type": "text", "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests"}]});
        check(&[json!({"role": "user", "content": "task"}), claude], true);
        let codex = json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary"}]});
        check(std::slice::from_ref(&codex), true);
        // Earlier in the history, or in the assistant's words, it is no request.
        check(&[codex, json!({"role": "user", "content": "go on"})], false);
        check(
            &[json!({"role": "assistant", "content": "CONTEXT CHECKPOINT COMPACTION"})],
            false,
        );
        check(&[json!({"role": "user", "content": "summarise this file"})], false);
        check(&[], false);
    }
}
