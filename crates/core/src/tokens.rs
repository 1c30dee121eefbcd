//! Token counting: exact with tiktoken-rs, or the spec's `bytes / divisor` estimate.
//!
//! tiktoken-rs was chosen over `bpe-openai` with `bench/tokenizers` (one run, 2 shared cores,
//! 1 MB mixed text, o200k): bpe-openai 22.8 MB/s median, tiktoken-rs 9.4 MB/s, identical
//! counts. The 2.4× does not pay for bpe-openai's 32 MB of embedded dictionaries: the daemon
//! counts each message once and caches it, so counting is off the steady-state path
//! (`benches/tokens.rs` measures the per-message cost). The encoders are process-wide singletons because building one
//! takes 70–250 ms.

use satchel_protocol::config::{Float, TokenConfig, Tokenizer};
use serde_json::Value;

use crate::format;

/// Fixed cost of one message (role, separators), as OpenAI's cookbook counts it.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Estimate mode: framing of one tool call (AceClaw's `TOOL_USE_OVERHEAD`). A byte estimate
/// sees only the strings, while a provider also bills the call's JSON structure.
pub const TOOL_USE_OVERHEAD_TOKENS: u64 = 20;
/// Estimate mode: framing of one tool result (AceClaw's `TOOL_RESULT_OVERHEAD`).
pub const TOOL_RESULT_OVERHEAD_TOKENS: u64 = 10;
/// Estimate mode: framing of one tool definition (AceClaw's `TOOL_DEF_OVERHEAD`).
pub const TOOL_DEF_OVERHEAD_TOKENS: u64 = 10;

/// Counts tokens of texts and messages with one tokenizer.
///
/// It holds the whole [`TokenConfig`] and hashes as it does (derived): two counters hash
/// alike when they count alike, and a cache of counts keys on the hash, so a key added to the
/// group is part of the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenCounter {
    config: TokenConfig,
}

impl TokenCounter {
    /// A counter for `tokenizer`; `divisor` is used by [`Tokenizer::Estimate`] and by [`Self::estimate`].
    pub fn new(tokenizer: Tokenizer, divisor: f64) -> Self {
        TokenCounter {
            config: TokenConfig {
                tokenizer,
                token_count_estimate_divisor: Float(divisor),
            },
        }
    }

    /// The counter a configuration's token keys describe.
    pub fn of(config: &TokenConfig) -> Self {
        TokenCounter { config: *config }
    }

    /// The tokenizer this counter uses.
    pub fn tokenizer(&self) -> Tokenizer {
        self.config.tokenizer
    }

    /// Tokens of a text.
    pub fn count_text(&self, text: &str) -> u64 {
        match self.config.tokenizer {
            Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64,
            Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton().count_ordinary(text) as u64,
            Tokenizer::Estimate => self.estimate(text),
        }
    }

    /// The spec's instant estimate: `round(bytes / divisor)`.
    pub fn estimate(&self, text: &str) -> u64 {
        (text.len() as f64 / self.config.token_count_estimate_divisor.get()).round() as u64
    }

    /// Tokens of a message or any JSON value: every string in it (contents, tool arguments,
    /// names) plus [`MESSAGE_OVERHEAD_TOKENS`]. Keys and punctuation are format framing that
    /// providers do not bill as text, so they are not counted.
    ///
    /// [`Tokenizer::Estimate`] adds AceClaw's framing costs of tool calls and results
    /// ([`TOOL_USE_OVERHEAD_TOKENS`], [`TOOL_RESULT_OVERHEAD_TOKENS`]): without a tokenizer
    /// the estimate has nothing else to account for them, and in an agent loop they add up.
    /// Exact modes count what the tokenizer sees, as before.
    pub fn count_message(&self, message: &Value) -> u64 {
        let mut joined = String::new();
        collect_strings(message, &mut joined);
        let framing = match self.config.tokenizer {
            Tokenizer::Estimate => tool_framing(message),
            Tokenizer::O200kBase | Tokenizer::Cl100kBase => 0,
        };
        self.count_text(&joined) + MESSAGE_OVERHEAD_TOKENS + framing
    }

    /// Tokens of one tool definition: as a message in exact modes (what the daemon always
    /// counted), its strings plus [`TOOL_DEF_OVERHEAD_TOKENS`] in estimate mode.
    pub fn count_tool_definition(&self, definition: &Value) -> u64 {
        match self.config.tokenizer {
            Tokenizer::Estimate => {
                let mut joined = String::new();
                collect_strings(definition, &mut joined);
                self.count_text(&joined) + TOOL_DEF_OVERHEAD_TOKENS
            }
            Tokenizer::O200kBase | Tokenizer::Cl100kBase => self.count_message(definition),
        }
    }

    /// Tokens of a request's tool definitions: the sum of [`Self::count_tool_definition`].
    pub fn count_tool_definitions(&self, definitions: &[Value]) -> u64 {
        definitions.iter().map(|d| self.count_tool_definition(d)).sum()
    }
}

/// Estimate-mode framing of the tool calls and results a message carries, in any format:
/// OpenAI `tool_calls` entries and `tool` messages, Anthropic `tool_use` and `tool_result`
/// blocks, Responses call and output items.
fn tool_framing(message: &Value) -> u64 {
    let calls = message.get("tool_calls").and_then(Value::as_array).map_or(0, Vec::len)
        + usize::from(format::output_type(message).is_some());
    let results = usize::from(format::role_of(message) == Some("tool"));
    let (uses, block_results) = message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .fold((0, 0), |(uses, results), block| {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => (uses + 1, results),
                Some("tool_result") => (uses, results + 1),
                _ => (uses, results),
            }
        });
    (calls + uses) as u64 * TOOL_USE_OVERHEAD_TOKENS + (results + block_results) as u64 * TOOL_RESULT_OVERHEAD_TOKENS
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

    /// Checks the framing the estimate adds to each of `messages` beyond its strings and the
    /// message overhead, and that o200k adds none.
    fn check(messages: &[Value], expect: &[u64]) {
        let estimate = TokenCounter::new(Tokenizer::Estimate, 4.0);
        let exact = TokenCounter::new(Tokenizer::O200kBase, 4.0);
        let framing = |counter: &TokenCounter, m: &Value| {
            let mut joined = String::new();
            collect_strings(m, &mut joined);
            counter.count_message(m) - counter.count_text(&joined) - MESSAGE_OVERHEAD_TOKENS
        };
        let got: Vec<u64> = messages.iter().map(|m| framing(&estimate, m)).collect();
        assert_eq!(got, expect, "estimate framing of {messages:?}");
        assert!(messages.iter().all(|m| framing(&exact, m) == 0));
    }

    #[test]
    fn the_estimate_adds_the_framing_of_tool_calls_and_results() {
        check(
            &[
                json!({"role": "assistant", "content": "ok"}),
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "a\nb"}),
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "b"},
                    {"type": "text", "text": "go on"}]}),
                // Responses items: reasoning and messages have no framing, a call item and an
                // output item one each.
                json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}),
                json!({"type": "function_call", "call_id": "f1", "name": "exec_command", "arguments": "{}"}),
                json!({"type": "custom_tool_call", "call_id": "f2", "name": "apply_patch", "input": "*** Begin"}),
                json!({"type": "function_call_output", "call_id": "f1", "output": "a"}),
                json!({"type": "custom_tool_call_output", "call_id": "f2", "output": [{"type": "input_text", "text": "b"}]}),
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}),
            ],
            &[
                0,
                2 * TOOL_USE_OVERHEAD_TOKENS,
                TOOL_RESULT_OVERHEAD_TOKENS,
                TOOL_USE_OVERHEAD_TOKENS,
                2 * TOOL_RESULT_OVERHEAD_TOKENS,
                0,
                TOOL_USE_OVERHEAD_TOKENS,
                TOOL_USE_OVERHEAD_TOKENS,
                TOOL_RESULT_OVERHEAD_TOKENS,
                TOOL_RESULT_OVERHEAD_TOKENS,
                0,
            ],
        );
        // Whole numbers for one message: 48 bytes of strings are 12 tokens, + 4 + 2 × 20.
        let estimate = TokenCounter::new(Tokenizer::Estimate, 4.0);
        let two_calls = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]});
        assert_eq!(estimate.count_message(&two_calls), 56);
    }

    #[test]
    fn exact_modes_count_tool_definitions_as_messages() {
        let tools = [
            json!({"type": "function", "function": {"name": "bash", "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}),
            json!({"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}),
        ];
        let exact = TokenCounter::new(Tokenizer::O200kBase, 4.0);
        let as_messages: u64 = tools.iter().map(|t| exact.count_message(t)).sum();
        assert_eq!(exact.count_tool_definitions(&tools), as_messages);
        let estimate = TokenCounter::new(Tokenizer::Estimate, 4.0);
        let strings: u64 = tools
            .iter()
            .map(|t| estimate.count_message(t) - MESSAGE_OVERHEAD_TOKENS)
            .sum();
        assert_eq!(
            estimate.count_tool_definitions(&tools),
            strings + 2 * TOOL_DEF_OVERHEAD_TOKENS
        );
        assert_eq!(estimate.count_tool_definitions(&[]), 0);
    }
}
