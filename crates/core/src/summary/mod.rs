//! Summarisers: turn a span of compacted messages (and the previous summary) into a
//! [`CompactSummary`].
//!
//! [`Summarizer`] is the seam for the LLM backends of a later issue; [`extractive`] is the
//! default, deterministic and offline, so compaction works out of the box and never fails for
//! want of a model. [`render`] turns a summary into the text the model reads.

pub mod extractive;
pub mod llm;
pub mod memory;
pub mod prompts;
pub mod render;

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
    /// Their format.
    pub format: MessageFormat,
    /// A client instruction that steers the summary (`context.compact`), if any.
    pub instruction: Option<&'a str>,
    /// Token budget of the rendered summary ([`render::render_summary`]).
    pub max_tokens: u64,
    /// Counts tokens for the budget.
    pub counter: &'a TokenCounter,
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
