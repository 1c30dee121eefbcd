//! Provider-native compaction: a summary the provider made and signed, which the agent sends
//! back in its history. Anthropic's is a `compaction` content block in an assistant message;
//! OpenAI's is a Responses `compaction` item (what `/responses/compact` returns, with
//! `encrypted_content`). The provider drops everything before it when it reads the request,
//! so satchel counts none of that, keeps it (and the native item, and the rest of its turn)
//! exactly as sent, and compacts only what follows.

use std::borrow::Borrow;

use serde_json::Value;

use super::MessageFormat;

/// The type name both providers give their native compaction.
const COMPACTION: &str = "compaction";

/// Whether `message` holds a provider-native compaction: an Anthropic message with a
/// `compaction` block, or a Responses `compaction` item. OpenAI Chat has none.
pub fn is_native_compaction(message: &Value, format: MessageFormat) -> bool {
    let of_type = |v: &Value| v.get("type").and_then(Value::as_str) == Some(COMPACTION);
    match format {
        MessageFormat::Anthropic => message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| blocks.iter().any(of_type)),
        MessageFormat::OpenaiResponses => of_type(message),
        MessageFormat::Openai => false,
    }
}

/// Position of the last message holding a provider-native compaction: the provider reads
/// nothing before it.
pub fn last_native_compaction(messages: &[impl Borrow<Value>], format: MessageFormat) -> Option<usize> {
    if format == MessageFormat::Openai {
        return None;
    }
    messages.iter().rposition(|m| is_native_compaction(m.borrow(), format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_last_native_compaction_of_each_provider() {
        let anthropic = [
            json!({"role": "user", "content": "task"}),
            json!({"role": "assistant", "content": [{"type": "compaction", "content": "first"}]}),
            json!({"role": "user", "content": "more"}),
            json!({"role": "assistant", "content": [{"type": "compaction", "content": "second"}, {"type": "text", "text": "go on"}]}),
            json!({"role": "user", "content": [{"type": "text", "text": "compaction"}]}),
        ];
        assert_eq!(last_native_compaction(&anthropic, MessageFormat::Anthropic), Some(3));
        let responses = [
            json!({"type": "message", "role": "user", "content": "task"}),
            json!({"type": "compaction", "encrypted_content": "gAAA"}),
            json!({"type": "message", "role": "user", "content": "compaction"}),
        ];
        assert_eq!(
            last_native_compaction(&responses, MessageFormat::OpenaiResponses),
            Some(1)
        );
        // A chat message whose text says "compaction" is not one; nor is a `type` field on a
        // chat message, which OpenAI Chat has no native compaction to give.
        let chat = [json!({"role": "assistant", "type": "compaction", "content": "x"})];
        assert_eq!(last_native_compaction(&chat, MessageFormat::Openai), None);
        assert_eq!(
            last_native_compaction(&anthropic[..3], MessageFormat::Anthropic),
            Some(1)
        );
        assert_eq!(last_native_compaction(&anthropic[..1], MessageFormat::Anthropic), None);
    }
}
