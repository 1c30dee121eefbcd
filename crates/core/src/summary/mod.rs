//! Summarisers: turn a span of compacted messages (and the previous summary) into a
//! [`CompactSummary`] an agent can go on from.
//!
//! Layout:
//! - [`extractive`]: the default summariser, deterministic and offline, so compaction works
//!   out of the box and never fails for want of a model: `span` reads a span,
//!   `merge` merges it into the summary in force, [`budget`] fits it by field priority,
//!   `steer` applies a compaction instruction.
//! - [`llm`]: a model writes the prose; the same draft and budget rules guarantee the user's
//!   words and the exact identifiers. [`prompts`] holds its prompts, [`parse`] reads its reply
//!   (and summaries pasted into a conversation).
//! - [`extract`]: the heuristics both use: paths, calls, outcomes, prose.
//! - [`fields`]: the one table of summary fields.
//! - [`render`]: the Markdown the model reads; [`memory`]: the daily memory note.
//! - [`dropped`]: what of a compacted span the summary no longer names.
//! - `template`: the agent framework's text in the user's messages, which is not theirs.

pub mod budget;
pub mod dropped;
pub mod extract;
pub mod extractive;
pub mod fields;
pub mod llm;
pub mod memory;
mod merge;
pub mod parse;
pub mod prompts;
pub mod render;
pub(crate) mod span;
mod steer;
mod template;

#[cfg(test)]
mod tests;

use satchel_protocol::{CompactSummary, MessageFormat};
use serde_json::Value;

use crate::tokens::TokenCounter;

/// What a summariser is given.
#[derive(Debug, Clone, Copy)]
pub struct SummaryInput<'a> {
    /// The summary in force before this compaction; merged, never re-summarised.
    pub previous: Option<&'a CompactSummary>,
    /// The messages being compacted, in order, with their full original texts.
    pub messages: &'a [Value],
    /// The original index of each message in its session (requests name it); when empty,
    /// positions in `messages` stand in.
    pub indices: &'a [usize],
    /// Their format.
    pub format: MessageFormat,
    /// The messages the compaction keeps, after the span (the live tail): what the agent did
    /// and the user said since, which tells a step already taken from a plan and the
    /// framework's template from the user's words. Empty when unknown.
    pub kept: &'a [Value],
    /// A client instruction that steers the summary (`context.compact`), if any.
    pub instruction: Option<&'a str>,
    /// Openings of user messages that are demonstrations, not requests; `None`: the defaults
    /// ([`extract::prose::DEMONSTRATION_PREFIXES`]).
    pub demonstration_prefixes: Option<&'a [String]>,
    /// Token budget of the rendered summary ([`render::render_summary`]).
    pub max_tokens: u64,
    /// Counts tokens for the budget.
    pub counter: &'a TokenCounter,
}

impl<'a> SummaryInput<'a> {
    /// The input for `messages` (indices from their positions, no previous summary, no
    /// instruction, the default demonstration openings).
    pub fn new(messages: &'a [Value], format: MessageFormat, max_tokens: u64, counter: &'a TokenCounter) -> Self {
        SummaryInput {
            previous: None,
            messages,
            indices: &[],
            format,
            kept: &[],
            instruction: None,
            demonstration_prefixes: None,
            max_tokens,
            counter,
        }
    }
}

/// Why a summariser produced nothing; the daemon then keeps the messages and reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarizeError(pub String);

impl std::fmt::Display for SummarizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "summarising failed: {}", self.0)
    }
}

impl std::error::Error for SummarizeError {}

/// Produces the summary of a compacted span. Archive ranges are added by the caller after
/// the raw messages are archived, so a summariser never needs to know about files.
pub trait Summarizer: Send + Sync {
    /// Summarises `input.messages`, merging `input.previous`.
    fn summarize(&self, input: &SummaryInput<'_>) -> Result<CompactSummary, SummarizeError>;
}
