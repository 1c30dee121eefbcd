//! Reading what comes back: numbers and error codes of replies, the summary message of a
//! returned request, the session log, and the check that nothing sent to a session is lost.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::trajectories::{Format, block_type, blocks, result_text_pointers, role};
use super::{Daemon, MARKER, SUMMARY_HEADING, archived, reconstruct};

/// `v` as a number; fails the test otherwise.
pub fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The code of a JSON-RPC error object.
pub fn error_code(error: &Value) -> i64 {
    error["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error object: {error}"))
}

pub fn pretty(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

/// The text of the summary carried by a returned request, if any: the OpenAI summary message,
/// or the Anthropic text block at the start of the first user message (or its own message).
pub fn summary_text(result: &Value) -> Option<String> {
    result["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|m| match &m["content"] {
            Value::String(s) if s.contains(SUMMARY_HEADING) => Some(s.clone()),
            Value::Array(b) => b.first()?["text"]
                .as_str()
                .filter(|t| t.contains(SUMMARY_HEADING))
                .map(str::to_owned),
            _ => None,
        })
}

/// A message of its own carrying the summary (OpenAI; Responses: a `message` item).
pub fn is_summary_message(m: &Value) -> bool {
    let responses_text = (m["type"] == "message")
        .then(|| m["content"][0]["text"].as_str())
        .flatten();
    m["content"]
        .as_str()
        .or(responses_text)
        .is_some_and(|s| s.contains(SUMMARY_HEADING))
}

/// An Anthropic text block with no text or only whitespace, which the API rejects: satchel
/// drops it from the request (a `dropped_empty_text` repair), never from the session.
pub fn is_blank_text(block: &Value) -> bool {
    block_type(block) == "text"
        && block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| t.trim().is_empty())
}

/// How many blank text blocks of `message` satchel drops from a request in `format` (none in
/// OpenAI format, which accepts them).
pub fn blank_text_count(message: &Value, format: Format) -> usize {
    match format {
        Format::Openai | Format::OpenaiResponses => 0,
        Format::Anthropic => blocks(message).filter(|b| is_blank_text(b)).count(),
    }
}

/// `message` as a request in `format` carries it when it holds blank text blocks: without
/// them. `None` when satchel returns it as sent.
pub fn blank_texts_dropped(message: &Value, format: Format) -> Option<Value> {
    if blank_text_count(message, format) == 0 {
        return None;
    }
    let mut message = message.clone();
    if let Some(content) = message.get_mut("content").and_then(Value::as_array_mut) {
        content.retain(|b| !is_blank_text(b));
    }
    Some(message)
}

/// `returned` is `original` as sent, or `original` with the summary text block put first
/// (Anthropic carries the summary in the first user message).
pub fn same_modulo_summary(returned: &Value, original: &Value) -> bool {
    if returned == original {
        return true;
    }
    let Some(content) = returned["content"].as_array() else {
        return false;
    };
    let Some(first) = content.first() else { return false };
    if !first["text"].as_str().is_some_and(|t| t.contains(SUMMARY_HEADING)) {
        return false;
    }
    let original_blocks = match &original["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => Vec::new(),
    };
    let mut rest = returned.clone();
    rest["content"] = original["content"].clone();
    content[1..] == original_blocks[..] && rest == *original
}

/// Restores the full texts of a returned message whose tool results are excerpts, reading
/// the rest from the file each notice names, as an agent would.
pub fn restore_excerpts(d: &mut Daemon, format: Format, message: &Value) -> Value {
    let mut message = message.clone();
    let pointers: Vec<String> = match format {
        Format::Openai if role(&message) == "tool" => vec!["/content".into()],
        Format::Openai => Vec::new(),
        Format::Anthropic => blocks(&message)
            .enumerate()
            .filter(|(_, b)| block_type(b) == "tool_result")
            .map(|(i, _)| format!("/content/{i}/content"))
            .collect(),
        Format::OpenaiResponses => result_text_pointers(&message, format).into_iter().collect(),
    };
    for pointer in pointers {
        if let Some(Value::String(text)) = message.pointer(&pointer)
            && text.contains(MARKER)
        {
            let full = reconstruct(d, text);
            *message.pointer_mut(&pointer).unwrap() = Value::String(full);
        }
    }
    message
}

/// The records of a session log.
pub fn session_records(workspace: &Path, session: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(workspace.join("sessions").join(format!("{session}.jsonl"))).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every compaction the session log begins is also logged done, exactly once, in order.
pub fn assert_log_has_no_pending_compaction(workspace: &Path, session: &str) {
    let records = session_records(workspace, session);
    let ids = |kind: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["record"] == kind)
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (begun, done) = (ids("compaction_begun"), ids("compaction_done"));
    assert_eq!(begun, done, "every begun compaction is done, once, in order");
}

/// Every message sent to `session` (`sent`, by original index) is recoverable byte for byte:
/// compacted ones from the dialog archive (and their offload files), live ones from `last`,
/// the last `context.prepare` result (excerpts completed from their files). No index is lost,
/// archived twice, or both archived and live. Returns the archived lines by index.
pub fn assert_nothing_lost(
    d: &mut Daemon,
    workspace: &Path,
    session: &str,
    format: Format,
    sent: &[Value],
    last: &Value,
) -> BTreeMap<usize, Value> {
    let archived = archived(workspace, session);
    for (&index, line) in &archived {
        assert!(index < sent.len(), "archived index {index} was never sent");
        assert!(
            line["message"] == sent[index],
            "archived message {index} differs from what was sent:\n{line}"
        );
        for offload in line["offloads"].as_array().map_or(&[][..], Vec::as_slice) {
            let file = std::fs::read_to_string(workspace.join(offload["file"].as_str().unwrap())).unwrap();
            let original = sent[index].pointer(offload["pointer"].as_str().unwrap()).unwrap();
            assert_eq!(
                original.as_str(),
                Some(file.as_str()),
                "offload file of archived message {index}"
            );
        }
    }
    let live: Vec<usize> = (0..sent.len()).filter(|i| !archived.contains_key(i)).collect();
    let inspect = d.call("context.inspect", json!({"session_id": session}));
    assert_eq!(n(&inspect["messages"]) as usize, live.len(), "live messages");
    assert_eq!(
        n(&inspect["archived_messages"]) as usize,
        archived.len(),
        "archived messages"
    );

    // Summary message aside, the request is the live messages in order.
    let returned: Vec<Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !is_summary_message(m))
        .cloned()
        .collect();
    assert_eq!(
        returned.len(),
        live.len(),
        "request {} vs live {live:?}",
        pretty(&returned)
    );
    for (message, &index) in returned.iter().zip(&live) {
        let restored = restore_excerpts(d, format, message);
        assert!(
            same_modulo_summary(&restored, &sent[index]),
            "returned message for index {index} is not the original:\n{restored}\nvs\n{}",
            sent[index]
        );
    }
    for offloaded in inspect["offloaded"].as_array().unwrap() {
        let index = n(&offloaded["index"]) as usize;
        let file = std::fs::read_to_string(workspace.join(offloaded["file"].as_str().unwrap())).unwrap();
        let original = sent[index].pointer(offloaded["pointer"].as_str().unwrap()).unwrap();
        assert_eq!(
            original.as_str(),
            Some(file.as_str()),
            "offload file of live message {index}"
        );
    }
    archived
}
