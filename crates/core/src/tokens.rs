//! Token counting: exact with tiktoken-rs, or the spec's `bytes / divisor` estimate.
//!
//! tiktoken-rs was chosen over `bpe-openai` with `bench/tokenizers` (one run, 2 shared cores,
//! 1 MB mixed text, o200k): bpe-openai 22.8 MB/s median, tiktoken-rs 9.4 MB/s, identical
//! counts. The 2.4× does not pay for bpe-openai's 32 MB of embedded dictionaries: the daemon
//! counts each message once and caches it, so counting is off the steady-state path
//! (`benches/tokens.rs` measures the per-message cost). The encoders are process-wide singletons because building one
//! takes 70–250 ms.

use satchel_protocol::config::Tokenizer;
use serde_json::Value;

/// Fixed cost of one message (role, separators), as OpenAI's cookbook counts it.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Counts tokens of texts and messages with one tokenizer.
#[derive(Debug, Clone, Copy)]
pub struct TokenCounter {
    tokenizer: Tokenizer,
    divisor: f64,
}

impl TokenCounter {
    /// A counter for `tokenizer`; `divisor` is used by [`Tokenizer::Estimate`] and by [`Self::estimate`].
    pub fn new(tokenizer: Tokenizer, divisor: f64) -> Self {
        TokenCounter { tokenizer, divisor }
    }

    /// The tokenizer this counter uses.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// Tokens of a text.
    pub fn count_text(&self, text: &str) -> u64 {
        match self.tokenizer {
            Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64,
            Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton().count_ordinary(text) as u64,
            Tokenizer::Estimate => self.estimate(text),
        }
    }

    /// The spec's instant estimate: `round(bytes / divisor)`.
    pub fn estimate(&self, text: &str) -> u64 {
        (text.len() as f64 / self.divisor).round() as u64
    }

    /// Tokens of a message or any JSON value: every string in it (contents, tool arguments,
    /// names) plus [`MESSAGE_OVERHEAD_TOKENS`]. Keys and punctuation are format framing that
    /// providers do not bill as text, so they are not counted.
    pub fn count_message(&self, message: &Value) -> u64 {
        let mut joined = String::new();
        collect_strings(message, &mut joined);
        self.count_text(&joined) + MESSAGE_OVERHEAD_TOKENS
    }
}

fn collect_strings(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Value::Bool(_) | Value::Null => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_counts_match_tiktoken_reference() {
        // Reference values from OpenAI's tiktoken for "hello world".
        let o200k = TokenCounter::new(Tokenizer::O200kBase, 4.0);
        let cl100k = TokenCounter::new(Tokenizer::Cl100kBase, 4.0);
        assert_eq!(o200k.count_text("hello world"), 2);
        assert_eq!(cl100k.count_text("hello world"), 2);
        assert_eq!(o200k.count_text(""), 0);
    }

    #[test]
    fn estimate_divides_bytes() {
        let est = TokenCounter::new(Tokenizer::Estimate, 4.0);
        assert_eq!(est.count_text(&"x".repeat(4000)), 1000);
        assert_eq!(est.count_text("日本"), 2); // 6 bytes / 4 rounds to 2
    }

    #[test]
    fn message_count_includes_tool_arguments_and_overhead() {
        let c = TokenCounter::new(Tokenizer::O200kBase, 4.0);
        let bare = c.count_message(&json!({"role": "assistant", "content": "ok"}));
        let with_call = c.count_message(&json!({"role": "assistant", "content": "ok",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cargo test --workspace\"}"}}]}));
        assert!(bare > MESSAGE_OVERHEAD_TOKENS);
        assert!(with_call > bare + 5, "{with_call} vs {bare}");
    }
}
