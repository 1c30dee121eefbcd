//! A compacted span `context.expand` brought back, as the session carries it into its next
//! request (the call itself is in `expand.rs` at the crate root).

use satchel_storage::Expansion;
use serde_json::Value;

/// A span carried by the next request: the messages as they will be sent.
#[derive(Debug, Clone)]
pub struct ExpandedSpan {
    /// What the log holds of it.
    pub record: Expansion,
    /// The messages, rendered.
    pub messages: Vec<Value>,
    /// Their tokens, with the tokenizer of the call that asked for them.
    pub tokens: u64,
}
