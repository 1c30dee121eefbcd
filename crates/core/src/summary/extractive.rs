//! The default summariser: deterministic extraction, no model.
//!
//! Compaction must work offline and must never fail for want of a model, and what an agent
//! most needs after compaction is exact: the user's requests and constraints in their own
//! words, the current blocker, the files it touched, the commands it ran and the errors it
//! saw. Those are copied verbatim rather than paraphrased, because a paraphrased path or
//! error line is worse than none. Prose sections (decisions, the step under way, the plan)
//! are the agent's own sentences, picked by cue words ([`super::extract::prose`]).
//!
//! Three stages: `SpanFacts::read` reads the span, `Draft::merge` merges it into the
//! summary in force, and `budget::fit` fits the result to the budget by field priority.

use satchel_protocol::CompactSummary;

use super::budget;
use super::merge::Draft;
use super::span::{Span, SpanFacts};
use super::steer::Steering;
use super::{SummarizeError, Summarizer, SummaryInput};

/// The built-in summariser: copies requests, constraints, paths, commands and error lines
/// verbatim from the span and merges them into the previous summary, within the token budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl Summarizer for ExtractiveSummarizer {
    fn summarize(&self, input: &SummaryInput<'_>) -> Result<CompactSummary, SummarizeError> {
        let (draft, steering) = draft(input);
        Ok(budget::fit(
            &draft,
            &steering.priority,
            input.max_tokens,
            input.counter,
            input.format,
        ))
    }
}

/// The merged, steered draft of `input` and the steering it was given.
pub(crate) fn draft(input: &SummaryInput<'_>) -> (Draft, Steering) {
    let span = SpanFacts::read(&Span {
        messages: input.messages,
        indices: input.indices,
        format: input.format,
        demonstration_prefixes: input.demonstration_prefixes,
        kept: input.kept,
    });
    let mut draft = Draft::merge(input.previous, span);
    let steering = match input.instruction {
        Some(instruction) => {
            let steering = Steering::of(instruction);
            steering.restrict(&mut draft);
            draft.instruction = Some(instruction.to_owned());
            draft.instruction_effect = Some(steering.effect.clone());
            steering
        }
        None => Steering::of(""),
    };
    (draft, steering)
}
