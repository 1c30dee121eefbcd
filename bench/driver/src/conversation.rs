//! The conversation a benchmark replays: loaded from a file in one of the shared data formats,
//! or generated (see [`crate::synthetic`]).
//!
//! The messages stay `serde_json::Value`s, exactly as read, because the daemon must see the
//! bytes a real client would send, unknown fields included.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// The two wire formats of `shared/data` (`DATA.md`), named as `context.prepare`'s `format`
/// param names them. The driver always declares the format, so a one-message first call of an
/// Anthropic replay is never mistaken for OpenAI by detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `openai-chat-tools/v1`: system prompt as the first message, `tool_calls`, role `tool`.
    OpenAi,
    /// `anthropic-messages/v1`: top-level `system`, `tool_use` / `tool_result` blocks.
    Anthropic,
}

impl Format {
    /// The value of `context.prepare`'s `format` param.
    pub fn wire_name(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
        }
    }
}

/// A conversation ready to be sent to the daemon.
pub struct Conversation {
    /// Where it came from: the file path as given, or `synthetic:<tokens>:seed<seed>`. The report
    /// matches satchel and peer results on this string.
    pub source: String,
    /// The declared or detected format.
    pub format: Format,
    /// Anthropic's top-level system prompt, passed as `context.prepare`'s `system` param.
    pub system: Option<Value>,
    /// The messages, in order.
    pub messages: Vec<Value>,
}

impl Conversation {
    /// Reads an `openai-chat-tools/v1` or `anthropic-messages/v1` file. Without a `format` field
    /// the format is detected by shape, as `bench_peer.py` does, so both tools read a file alike.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut doc: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let Some(Value::Array(messages)) = doc.get_mut("messages").map(Value::take) else {
            bail!("{}: no `messages` array", path.display());
        };
        let system = doc.get_mut("system").map(Value::take).filter(|s| !s.is_null());
        let format = match doc.get("format").and_then(Value::as_str) {
            Some("openai-chat-tools/v1") => Format::OpenAi,
            Some("anthropic-messages/v1") => Format::Anthropic,
            Some(other) => bail!("{}: unknown format {other:?}", path.display()),
            None => detect_format(&messages, system.is_some()),
        };
        Ok(Conversation {
            source: path.display().to_string(),
            format,
            system,
            messages,
        })
    }

    /// Bytes of the messages as one compact JSON array, plus the system prompt's JSON: what a
    /// client puts on the wire, and the basis of the bytes/4 token estimate.
    pub fn bytes(&self) -> usize {
        let messages: usize = self.messages.iter().map(json_len).sum();
        let separators = self.messages.len().saturating_sub(1) + 2;
        messages + separators + self.system.as_ref().map_or(0, json_len)
    }

    /// The `conversation` object of every result line.
    pub fn describe(&self) -> Value {
        let bytes = self.bytes();
        json!({
            "source": self.source,
            "format": self.format.wire_name(),
            "messages": self.messages.len(),
            "bytes": bytes,
            "est_tokens_bytes_div4": bytes / 4,
        })
    }
}

/// Length of a value's compact JSON.
pub fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.len())
}

/// OpenAI if any message has role `tool` or `tool_calls`; Anthropic if any content block is a
/// `tool_use` / `tool_result` or there is a top-level `system`; plain chat is valid OpenAI.
fn detect_format(messages: &[Value], has_top_level_system: bool) -> Format {
    let openai = messages
        .iter()
        .any(|m| m.get("role") == Some(&json!("tool")) || m.get("tool_calls").is_some());
    let anthropic_blocks = || {
        messages
            .iter()
            .filter_map(|m| m.get("content")?.as_array())
            .flatten()
            .any(|block| {
                matches!(
                    block.get("type").and_then(Value::as_str),
                    Some("tool_use" | "tool_result")
                )
            })
    };
    if openai {
        Format::OpenAi
    } else if has_top_level_system || anthropic_blocks() {
        Format::Anthropic
    } else {
        Format::OpenAi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_detected_by_shape() {
        let openai = [json!({"role": "tool", "tool_call_id": "a", "content": "x"})];
        let anthropic = [json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]})];
        let plain = [json!({"role": "user", "content": "hi"})];
        assert_eq!(detect_format(&openai, false), Format::OpenAi);
        assert_eq!(detect_format(&anthropic, false), Format::Anthropic);
        assert_eq!(detect_format(&plain, true), Format::Anthropic);
        assert_eq!(detect_format(&plain, false), Format::OpenAi);
    }

    #[test]
    fn bytes_are_those_of_the_compact_array() {
        let messages = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "yo"}),
        ];
        let expected = serde_json::to_string(&messages).unwrap().len();
        let conversation = Conversation {
            source: "t".into(),
            format: Format::OpenAi,
            system: None,
            messages,
        };
        assert_eq!(conversation.bytes(), expected);
    }
}
