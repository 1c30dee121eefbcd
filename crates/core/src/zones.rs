//! Zone accounting of a request (system, tools, summary, compactable, reserved), whether it
//! is time to compact, and why a request that is still over the window is.
//!
//! Everything here works on token counts already made: the daemon counts each rendered
//! message once (and caches it), then asks this module how the request adds up.

use satchel_protocol::{Config, TokenUsage};

use crate::format::{self, MessageFormat};
use serde_json::Value;

/// One message of the request, as zone accounting sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageTokens {
    /// A system-role message: counted in the system zone, never compacted.
    pub system: bool,
    /// Its tokens as rendered.
    pub tokens: u64,
}

impl MessageTokens {
    /// The accounting of `message` of a `format` conversation, rendered to `tokens` tokens.
    pub fn of(message: &Value, tokens: u64, format: MessageFormat) -> Self {
        MessageTokens {
            system: is_system(message, format),
            tokens,
        }
    }
}

/// Whether a message has the system role (or is a Responses `developer` message, which Codex
/// sends its system prompt as): [`format::is_instructions`].
pub fn is_system(message: &Value, format: MessageFormat) -> bool {
    format::is_instructions(message, format)
}

/// The tokens of a request beside its live messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTokens {
    /// The system prompt sent as a parameter (system-role messages are added to it).
    pub system: u64,
    /// The tool definitions.
    pub tools: u64,
    /// The summary message.
    pub summary: u64,
    /// A compacted span brought back for one request (`context.expand`).
    pub expanded: u64,
    /// The pinned block.
    pub pinned: u64,
}

/// Token usage per zone of a request made of `messages` (the live ones, in order) and
/// `extras`: system-role messages count in the system zone; of the others, the newest run
/// that fits in the reserve is `reserved` and the rest `compactable`.
pub fn zone_usage(messages: &[MessageTokens], extras: RequestTokens, config: &Config) -> TokenUsage {
    let mut system = extras.system;
    let mut messages_total = 0;
    for message in messages {
        if message.system {
            system += message.tokens;
        } else {
            messages_total += message.tokens;
        }
    }
    let reserved = reserved_tail(messages, config.reserve_tokens());
    TokenUsage {
        system,
        tools: extras.tools,
        summary: extras.summary,
        expanded: extras.expanded,
        pinned: extras.pinned,
        compactable: messages_total - reserved,
        reserved,
        messages: messages_total,
        total: system + extras.tools + extras.summary + extras.expanded + extras.pinned + messages_total,
        limit: config.effective_window(),
        threshold: config.compact_threshold_tokens(),
        tokenizer: config.tokens.tokenizer,
    }
}

/// Tokens of the newest non-system messages that fit in `reserve` together; the first one
/// that does not fit ends the run.
fn reserved_tail(messages: &[MessageTokens], reserve: u64) -> u64 {
    let mut reserved = 0;
    for message in messages.iter().rev().filter(|m| !m.system) {
        if reserved + message.tokens > reserve {
            break;
        }
        reserved += message.tokens;
    }
    reserved
}

/// Whether an automatic compaction runs for a request of `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionDue {
    /// Under the threshold, or automatic compaction is off.
    No,
    /// Over the threshold, but an earlier compaction could not make the request smaller and
    /// not enough has accrued since to try again.
    Deferred,
    /// Over the threshold: compact.
    Yes,
}

/// Whether to compact a request of `usage`; `futile_at` is the compactable tokens when an
/// earlier compaction turned out futile (it is tried again once a summary's worth of new
/// messages has accrued, so a small window does not thrash).
pub fn compaction_due(usage: &TokenUsage, futile_at: Option<u64>, config: &Config) -> CompactionDue {
    let over_threshold = config.compaction.compact_enabled && usage.total >= config.compact_threshold_tokens();
    let retry = futile_at.is_none_or(|at| usage.compactable >= at + config.summary_budget_tokens());
    match (over_threshold, retry) {
        (false, _) => CompactionDue::No,
        (true, false) => CompactionDue::Deferred,
        (true, true) => CompactionDue::Yes,
    }
}

/// Why a request is over the window after everything satchel could do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverLimitReason {
    /// The kept messages are already the smallest tail compaction may keep (the default).
    MinimalTail,
    /// An earlier compaction was futile and is not retried yet ([`CompactionDue::Deferred`]).
    CompactionDeferred,
    /// Nothing could be compacted without splitting a pair.
    NothingCompactable,
    /// This call's compaction was futile; the text says by how much.
    CompactionFutile(String),
}

impl OverLimitReason {
    /// The reason as the client reads it.
    pub fn text(&self) -> &str {
        match self {
            OverLimitReason::MinimalTail => {
                "the kept messages are the smallest tail that keeps tool calls with their results and the newest user message"
            }
            OverLimitReason::CompactionDeferred => {
                "an earlier compaction of this session could not make the request smaller; it is tried again once a summary's worth of new messages has accrued"
            }
            OverLimitReason::NothingCompactable => {
                "nothing before the newest turn can be compacted without separating a tool call from its result or an assistant reply from its user message"
            }
            OverLimitReason::CompactionFutile(text) => text,
        }
    }
}

/// The `over_limit` message of a request of `usage`: `None` when it fits its limit,
/// otherwise its zones and `reason` (the default one when `None`).
pub fn over_limit_message(usage: &TokenUsage, reason: Option<&OverLimitReason>) -> Option<String> {
    if usage.total <= usage.limit {
        return None;
    }
    let reason = reason.unwrap_or(&OverLimitReason::MinimalTail);
    Some(format!(
        "the request is {} tokens, over the window {} (max_input_length less max_output_tokens): system {}, tools {}, summary {}, messages {} ({}). Tool results are already cut to their limits.",
        usage.total,
        usage.limit,
        usage.system,
        usage.tools,
        usage.summary,
        usage.messages,
        reason.text(),
    ))
}

#[cfg(test)]
mod tests;
