//! The LLM summariser: a model writes the summary, code guarantees what a model may lose.
//!
//! A model writes better prose than cue-word extraction (what the user wants, what was decided
//! and why, what comes next), but it paraphrases, drops and occasionally invents identifiers,
//! and it can fail: time out, return nothing, or return something else than a summary. So:
//!
//! - The network call is injected as a [`Completer`]: this crate stays pure (no I/O, no clock)
//!   and the daemon supplies an HTTP client or delegates to its client.
//! - The history the model reads is rendered oldest to newest with every block flattened and
//!   cut to head + tail: a tool result is never sent whole (its full text is in the archive),
//!   so one huge output cannot crowd out the conversation or the model's input window.
//! - A span too large for one model input is summarised in stages, each stage updating the
//!   previous stage's summary, as the peer's update prompt does across compactions.
//! - The reply is parsed back into [`CompactSummary`], and the extractive summariser runs on
//!   the same input: its exact paths, commands and errors are merged in, so identifiers survive
//!   whatever the model wrote.
//! - A failed or malformed reply is retried once, then the extractive summary is used, so
//!   compaction never fails for want of a model and never loses the previous summary.

use std::fmt;
use std::sync::Arc;

use satchel_protocol::CompactSummary;
use satchel_protocol::config::SummaryLanguage;

use super::budget;
use super::extractive::{self, ExtractiveSummarizer};
use super::fields::Field;
use super::merge::{Item, merge_items};
use super::parse::parse_summary;
use super::prompts;
use super::render::render_summary;
use super::span::{SENTENCE_CHARS, later_calls, taken_later};
use super::template::sentence_key;
use super::{SummarizeError, Summarizer, SummaryInput};

mod history;
#[cfg(test)]
mod tests;

use history::History;

/// One chat message sent to a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"` or `"user"`.
    pub role: &'static str,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "system",
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "user",
            content: content.into(),
        }
    }
}

/// Why a completion failed (timeout, HTTP status, transport, rejected by the client...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionError(pub String);

impl fmt::Display for CompletionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "completion failed: {}", self.0)
    }
}

impl std::error::Error for CompletionError {}

/// Runs a model. The daemon provides an HTTP (OpenAI-compatible) one and a client-delegated
/// one; it blocks until the reply arrives or fails (timeouts are the implementation's job).
pub trait Completer: Send + Sync {
    /// The model's reply to `messages`, at most `max_tokens` long.
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError>;
    /// Names the backend for reports, e.g. `openai:gpt-4o-mini` or `client`.
    fn name(&self) -> String;
}

impl<C: Completer + ?Sized> Completer for Box<C> {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        (**self).complete(messages, max_tokens)
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

impl<C: Completer + ?Sized> Completer for Arc<C> {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        (**self).complete(messages, max_tokens)
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

impl<C: Completer + ?Sized> Completer for &C {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        (**self).complete(messages, max_tokens)
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

/// Called before each model call with the 1-based stage and the number of stages.
pub type ProgressHook = Box<dyn Fn(usize, usize) + Send + Sync>;

/// Default [`LlmSummarizer::input_budget_tokens`], near the peer's 87k–105k history budgets.
pub const DEFAULT_INPUT_BUDGET_TOKENS: u64 = 100_000;
/// Default [`LlmSummarizer::max_output_tokens`].
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4_096;

/// Longest rendering of one block (text, tool call, tool result), in chars.
const BLOCK_CHARS: usize = 1_500;
/// Thinking blocks are the model's scratch work: a glimpse is enough.
pub(crate) const THINKING_CHARS: usize = 300;
/// Floor for the per-block cut when a single message alone exceeds the input budget.
const MIN_BLOCK_CHARS: usize = 100;
/// Tokens the chat framing of the two messages costs beyond their text.
const CHAT_OVERHEAD_TOKENS: u64 = 8;
/// Tokens between two rendered messages (the blank line).
const SEPARATOR_TOKENS: u64 = 1;
/// Requests per stage: the first attempt and one retry.
const ATTEMPTS: usize = 2;

/// Summarises with a model through a [`Completer`], falling back to the extractive summary.
pub struct LlmSummarizer<C> {
    /// Runs the model.
    pub completer: C,
    /// Language of the prompts (the `##` headings stay English in both, so parsing is the same).
    pub language: SummaryLanguage,
    /// Token budget of one model input (prompt + history), counted with the input's counter;
    /// larger spans are summarised in stages.
    pub input_budget_tokens: u64,
    /// `max_tokens` of each completion.
    pub max_output_tokens: u64,
    progress: Option<ProgressHook>,
}

impl<C> fmt::Debug for LlmSummarizer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSummarizer")
            .field("language", &self.language)
            .field("input_budget_tokens", &self.input_budget_tokens)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: Completer> Summarizer for LlmSummarizer<C> {
    /// Never fails: a model failure falls back to the extractive summary.
    fn summarize(&self, input: &SummaryInput<'_>) -> Result<CompactSummary, SummarizeError> {
        Ok(self.summarize_reporting(input).0)
    }
}

impl<C: Completer> LlmSummarizer<C> {
    /// A summariser with English prompts and the default budgets.
    pub fn new(completer: C) -> Self {
        LlmSummarizer {
            completer,
            language: SummaryLanguage::En,
            input_budget_tokens: DEFAULT_INPUT_BUDGET_TOKENS,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            progress: None,
        }
    }

    /// Sets the prompt language.
    pub fn with_language(mut self, language: SummaryLanguage) -> Self {
        self.language = language;
        self
    }

    /// Sets the token budget of one model input.
    pub fn with_input_budget(mut self, tokens: u64) -> Self {
        self.input_budget_tokens = tokens;
        self
    }

    /// Sets the `max_tokens` of each completion.
    pub fn with_max_output(mut self, tokens: u64) -> Self {
        self.max_output_tokens = tokens;
        self
    }

    /// Calls `f(stage, stages)` (stage 1-based) before each stage's model call; the daemon
    /// turns it into `$/progress` notifications. Retries do not call it again.
    pub fn with_progress(mut self, f: impl Fn(usize, usize) + Send + Sync + 'static) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Summarises `input` and names the backend that produced the summary: the completer's
    /// [`Completer::name`], or `extractive (fallback: <reason>)` when the model failed twice
    /// or replied with something that is not a summary. Never fails.
    pub fn summarize_reporting(&self, input: &SummaryInput<'_>) -> (CompactSummary, String) {
        match self.model_summary(input) {
            Ok(summary) => (finish(summary, input), self.completer.name()),
            Err(reason) => {
                let extractive = ExtractiveSummarizer
                    .summarize(input)
                    .unwrap_or_else(|_| CompactSummary {
                        instruction: input.instruction.map(str::to_owned),
                        ..input.previous.cloned().unwrap_or_default()
                    });
                (extractive, format!("extractive (fallback: {reason})"))
            }
        }
    }

    /// The model's summary of the whole span, stage by stage; the reason of the failure otherwise.
    fn model_summary(&self, input: &SummaryInput<'_>) -> Result<CompactSummary, String> {
        let history = History::new(input);
        let previous = input.previous.map(render_previous);
        let chunks = self.plan(&history, input, previous.as_deref());
        if chunks.is_empty() {
            return Err("no messages to summarise".into());
        }
        let stages = chunks.len();
        let mut previous = previous;
        let mut summary = None;
        for (i, chunk) in chunks.iter().enumerate() {
            if let Some(progress) = &self.progress {
                progress(i + 1, stages);
            }
            let request = [
                ChatMessage::system(prompts::system_prompt(self.language)),
                ChatMessage::user(prompts::user_prompt(
                    self.language,
                    &chunk.join("\n\n"),
                    previous.as_deref(),
                    input.instruction,
                    input.max_tokens,
                )),
            ];
            let stage = self.complete(&request).map_err(|reason| {
                if stages > 1 {
                    format!("stage {}/{stages}: {reason}", i + 1)
                } else {
                    reason
                }
            })?;
            previous = Some(render_previous(&stage));
            summary = Some(stage);
        }
        summary.ok_or_else(|| "no messages to summarise".into())
    }

    /// One stage: the request, retried once on a failure or an unusable reply.
    fn complete(&self, request: &[ChatMessage]) -> Result<CompactSummary, String> {
        let mut reason = String::new();
        for _ in 0..ATTEMPTS {
            match self.completer.complete(request, self.max_output_tokens) {
                Ok(reply) => match parse_summary(tagged_part(&reply)) {
                    Ok(summary) => return Ok(summary),
                    Err(why) => reason = why,
                },
                Err(error) => reason = error.to_string(),
            }
        }
        Err(reason)
    }

    /// Splits the rendered span at message boundaries into chunks that fit one model input
    /// each. Later chunks carry the previous stage's summary, bounded by the output budget.
    fn plan(&self, history: &History<'_>, input: &SummaryInput<'_>, previous: Option<&str>) -> Vec<Vec<String>> {
        let counter = input.counter;
        let fixed = counter.count_text(prompts::system_prompt(self.language)) + CHAT_OVERHEAD_TOKENS;
        let frame = |previous: Option<&str>| {
            counter.count_text(&prompts::user_prompt(
                self.language,
                "",
                previous,
                input.instruction,
                input.max_tokens,
            ))
        };
        let first = self.input_budget_tokens.saturating_sub(fixed + frame(previous));
        // A stage's summary is at most `max_output_tokens` long; its re-rendering adds a
        // little (`(none)` placeholders, code spans).
        let carried = self.max_output_tokens + self.max_output_tokens / 8 + 64;
        let later = self
            .input_budget_tokens
            .saturating_sub(fixed + frame(Some("")) + carried);

        let mut chunks: Vec<Vec<String>> = Vec::new();
        let mut current: Vec<String> = Vec::new();
        let mut used = 0;
        for index in 0..history.messages.len() {
            let mut available = if chunks.is_empty() { first } else { later };
            let mut text = history.render(index, BLOCK_CHARS);
            if text.is_empty() {
                continue;
            }
            let mut tokens = counter.count_text(&text) + SEPARATOR_TOKENS;
            if !current.is_empty() && used + tokens > available {
                chunks.push(std::mem::take(&mut current));
                used = 0;
                available = later;
            }
            // A single message over the budget: cut its blocks shorter until it fits.
            let mut block = BLOCK_CHARS;
            while current.is_empty() && tokens > available && block > MIN_BLOCK_CHARS {
                block = (block / 2).max(MIN_BLOCK_CHARS);
                text = history.render(index, block);
                tokens = counter.count_text(&text) + SEPARATOR_TOKENS;
            }
            used += tokens;
            current.push(text);
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        chunks
    }
}

/// The part of a model's reply inside `<summary>…</summary>` (AceClaw's phase 2 extracts it),
/// or the whole reply when it has no such tags: a model asked for a summary often wraps it in
/// chatter ("Here is the summary", "Hope this helps!"), which would otherwise land in the
/// summary's last section. The last closed pair after any thinking counts (an earlier mention
/// of the tag, in the model's preamble, is not the summary); an opening tag never closed (a reply cut
/// at `max_tokens`) keeps what follows it. Tags are matched without regard to case.
fn tagged_part(reply: &str) -> &str {
    const OPEN: &str = "<summary>";
    const CLOSE: &str = "</summary>";
    // A reasoning model's thinking may draft the summary in tags of its own.
    let reply = reply
        .rfind("</think>")
        .map_or(reply, |at| &reply[at + "</think>".len()..]);
    // ASCII lower-casing keeps every byte offset.
    let lower = reply.to_ascii_lowercase();
    match lower.rfind(CLOSE) {
        Some(end) => match lower[..end].rfind(OPEN) {
            Some(start) => &reply[start + OPEN.len()..end],
            None => reply,
        },
        None => match lower.rfind(OPEN) {
            Some(start) => &reply[start + OPEN.len()..],
            None => reply,
        },
    }
}

/// A previous summary as the model reads it: the rendered sections without the archive path
/// guide, which is satchel's business, not the model's.
fn render_previous(summary: &CompactSummary) -> String {
    let text = render_summary(&CompactSummary {
        archive: Vec::new(),
        instruction: None,
        ..summary.clone()
    });
    match text.find("## Archive (path guide)") {
        Some(at) => text[..at].trim_end().to_owned(),
        None => text.trim_end().to_owned(),
    }
}

/// The model's summary merged into the extractive draft of the same input, fitted with the
/// extractive summariser's priority rules: the user's requests and constraints and the exact
/// identifiers come from the extraction (a model paraphrases and drops them); goal
/// statements and the prose sections come from the model where it wrote them. What the
/// extraction knows to be true stands: a failure is blocked only if nothing fixed it since,
/// a file is modified only if an edit of it succeeded, and the framework's template is no
/// constraint, whatever the model wrote.
fn finish(model: CompactSummary, input: &SummaryInput<'_>) -> CompactSummary {
    let (mut draft, steering) = extractive::draft(input);
    let template: std::collections::HashSet<String> =
        draft.template.iter().map(|t| sentence_key(t, SENTENCE_CHARS)).collect();
    let from_model = |field: Field| -> Vec<Item> {
        field
            .of(&model)
            .iter()
            .map(|text| Item {
                text: text.clone(),
                fresh: true,
            })
            .collect()
    };
    for field in Field::ALL {
        let written = from_model(field);
        if written.is_empty() {
            continue;
        }
        let list = draft.list_mut(field);
        match field {
            // The model's goal statements come before the exact requests.
            Field::Goal => *list = written,
            // Outcomes and edits are the extraction's facts.
            Field::Blocked | Field::FilesModified => {}
            // A step a later call took is no next step.
            Field::NextSteps => {
                let later = later_calls(input.kept, input.format);
                *list = written.into_iter().filter(|s| !taken_later(&s.text, &later)).collect();
            }
            // The user's exact words stay; the model's wording of them is appended if new.
            Field::Constraints => {
                let exact: Vec<String> = list.iter().map(|i| i.text.clone()).collect();
                let model_words: Vec<String> = written
                    .into_iter()
                    .map(|i| i.text)
                    .filter(|c| !template.contains(&sentence_key(c, SENTENCE_CHARS)))
                    .collect();
                let merged = merge_items(&exact, model_words);
                // `merge_items` marks earlier items stale; restore the extraction's freshness.
                let fresh: Vec<bool> = list.iter().map(|i| i.fresh).collect();
                *list = merged;
                for (item, was_fresh) in list.iter_mut().zip(fresh) {
                    item.fresh = was_fresh;
                }
            }
            // Exact identifiers first; what only the model named follows, given up first.
            _ if field.identifier_list().is_some() => {
                let known: std::collections::HashSet<String> = list.iter().map(|i| i.text.clone()).collect();
                list.extend(
                    written
                        .into_iter()
                        .filter(|i| !known.contains(&i.text))
                        .map(|i| Item { fresh: false, ..i }),
                );
            }
            _ => *list = written,
        }
    }
    if let Some(only) = &steering.only {
        for field in Field::ALL {
            if !only.contains(&field) {
                draft.list_mut(field).clear();
            }
        }
    }
    // A file read and later modified is listed once, as modified.
    let modified: std::collections::HashSet<String> = draft
        .list(Field::FilesModified)
        .iter()
        .map(|i| i.text.clone())
        .collect();
    draft.list_mut(Field::FilesRead).retain(|i| !modified.contains(&i.text));
    budget::fit(
        &draft,
        &steering.priority,
        input.max_tokens,
        input.counter,
        input.format,
    )
}
