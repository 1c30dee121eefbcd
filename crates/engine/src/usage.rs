//! Token usage per zone of the request a session would send now.

use satchel_core::tokens::TokenCounter;
use satchel_protocol::{Config, TokenUsage};
use serde_json::Value;

use crate::session::Session;

/// The request-level parts of a call, counted in the system and tools zones.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestExtras {
    /// The system prompt sent beside the messages.
    pub system: Option<Value>,
    /// The tool definitions.
    pub tools: Option<Vec<Value>>,
}

/// Token usage per zone of the request `session` would send now; `squeeze` counts every
/// tool result at its old-phase limit.
pub(crate) fn usage(
    session: &mut Session,
    config: &Config,
    counter: &TokenCounter,
    extras: &RequestExtras,
    squeeze: bool,
) -> TokenUsage {
    let per_message = session.count_tokens(counter, config, squeeze);
    let is_system = |m: &Value| m.get("role").and_then(Value::as_str) == Some("system");
    let (system_param, tools) = session.extras_tokens(extras.system.as_ref(), extras.tools.as_deref(), counter, config);
    let mut system = system_param;
    let mut conversation = Vec::with_capacity(per_message.len());
    for (entry, tokens) in session.entries.iter().zip(&per_message) {
        if is_system(&entry.message) {
            system += tokens;
        } else {
            conversation.push(*tokens);
        }
    }
    let summary = session.summary_tokens(counter, config);
    let messages: u64 = conversation.iter().sum();
    let reserve = config.reserve_tokens();
    let mut reserved = 0;
    for tokens in conversation.iter().rev() {
        if reserved + tokens > reserve {
            break;
        }
        reserved += tokens;
    }
    let total = system + tools + summary + messages;
    TokenUsage {
        system,
        tools,
        summary,
        compactable: messages - reserved,
        reserved,
        messages,
        total,
        limit: config.max_input_length,
        threshold: config.compact_threshold_tokens(),
        tokenizer: config.tokenizer,
    }
}
