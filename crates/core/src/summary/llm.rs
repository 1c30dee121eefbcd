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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use satchel_protocol::{CompactSummary, MessageFormat};
use serde_json::Value;

use super::extractive::ExtractiveSummarizer;
use super::prompts;
use super::render::{SUMMARY_HEADING, budget_before_next_range, render_summary};
use super::{SummarizeError, Summarizer, SummaryInput};
use crate::format;
use crate::tokens::TokenCounter;

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

/// Language of the prompts (the `##` headings stay English in both, so parsing is the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Language {
    /// English.
    #[default]
    En,
    /// Chinese: instructions in Chinese, summary text in Chinese, headings in English.
    Zh,
}

impl Language {
    /// Parses a language code: `en…` or `zh…` (case-insensitive, e.g. `zh-CN`); `None` otherwise.
    pub fn from_code(code: &str) -> Option<Language> {
        let code = code.trim().to_ascii_lowercase();
        if code == "en" || code.starts_with("en-") || code.starts_with("en_") {
            Some(Language::En)
        } else if code == "zh" || code.starts_with("zh-") || code.starts_with("zh_") {
            Some(Language::Zh)
        } else {
            None
        }
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
const THINKING_CHARS: usize = 300;
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
    /// Language of the prompts.
    pub language: Language,
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
            language: Language::En,
            input_budget_tokens: DEFAULT_INPUT_BUDGET_TOKENS,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            progress: None,
        }
    }

    /// Sets the prompt language.
    pub fn with_language(mut self, language: Language) -> Self {
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
        let extractive = ExtractiveSummarizer
            .summarize(input)
            .unwrap_or_else(|_| CompactSummary {
                instruction: input.instruction.map(str::to_owned),
                ..input.previous.cloned().unwrap_or_default()
            });
        match self.model_summary(input) {
            Ok(summary) => (finish(summary, extractive, input), self.completer.name()),
            Err(reason) => (extractive, format!("extractive (fallback: {reason})")),
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
                Ok(reply) => match parse_summary(&reply) {
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

// ---------------------------------------------------------------------------------------------
// History rendering

/// The span to render, with the tool name of every call so results can name their tool.
struct History<'a> {
    messages: &'a [Value],
    format: MessageFormat,
    tool_names: HashMap<String, String>,
}

impl<'a> History<'a> {
    fn new(input: &SummaryInput<'a>) -> Self {
        let tool_names = input
            .messages
            .iter()
            .flat_map(|m| format::tool_calls(m, input.format))
            .map(|call| (call.id, call.name))
            .collect();
        History {
            messages: input.messages,
            format: input.format,
            tool_names,
        }
    }

    /// Message `index` as `[role]` followed by one line per block, each block cut to
    /// `block_chars`; empty when the message has nothing to show.
    fn render(&self, index: usize, block_chars: usize) -> String {
        let message = &self.messages[index];
        let role = message.get("role").and_then(Value::as_str).unwrap_or("unknown");
        let mut blocks: Vec<String> = Vec::new();
        if self.format == MessageFormat::Openai && role == "tool" {
            let id = message.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            let output = result_text(message.get("content"));
            blocks.push(self.result_block(id, false, &output, block_chars));
        } else {
            match message.get("content") {
                Some(Value::String(text)) => push_text(&mut blocks, text, block_chars),
                Some(Value::Array(parts)) => {
                    for part in parts {
                        self.push_part(&mut blocks, part, block_chars);
                    }
                }
                _ => {}
            }
            // Anthropic calls are content blocks, handled above.
            if self.format == MessageFormat::Openai {
                for call in format::tool_calls(message, self.format) {
                    blocks.push(cut(
                        &format!("[tool_use] {} {}", call.name, call.arguments),
                        block_chars,
                    ));
                }
            }
        }
        if blocks.is_empty() {
            return String::new();
        }
        format!("[{role}]\n{}", blocks.join("\n"))
    }

    fn push_part(&self, blocks: &mut Vec<String>, part: &Value, block_chars: usize) {
        let kind = match part {
            Value::String(text) => return push_text(blocks, text, block_chars),
            _ => part.get("type").and_then(Value::as_str).unwrap_or(""),
        };
        let field = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => push_text(blocks, field("text"), block_chars),
            "thinking" => {
                let thinking = flatten(field("thinking"));
                if !thinking.is_empty() {
                    blocks.push(format!(
                        "[thinking] {}",
                        cut(&thinking, THINKING_CHARS.min(block_chars))
                    ));
                }
            }
            "redacted_thinking" => {}
            "tool_use" => {
                let input = part.get("input").map(Value::to_string).unwrap_or_default();
                blocks.push(cut(&format!("[tool_use] {} {input}", field("name")), block_chars));
            }
            "tool_result" => {
                let error = part.get("is_error").and_then(Value::as_bool) == Some(true);
                let output = result_text(part.get("content"));
                blocks.push(self.result_block(field("tool_use_id"), error, &output, block_chars));
            }
            "image" | "image_url" => blocks.push("[image]".into()),
            "input_audio" => blocks.push("[audio]".into()),
            "" => {}
            other => blocks.push(format!("[{other}]")),
        }
    }

    fn result_block(&self, id: &str, error: bool, output: &str, block_chars: usize) -> String {
        let name = self.tool_names.get(id).map(String::as_str).unwrap_or("");
        let label = match (name.is_empty(), error) {
            (true, false) => "[tool_result]".to_owned(),
            (true, true) => "[tool_result] (error)".to_owned(),
            (false, false) => format!("[tool_result] {name}:"),
            (false, true) => format!("[tool_result] {name} (error):"),
        };
        format!("{label} {}", cut(&flatten(output), block_chars))
    }
}

/// A text block; the summary message of an earlier compaction is skipped, since the previous
/// summary is given to the model on its own.
fn push_text(blocks: &mut Vec<String>, text: &str, block_chars: usize) {
    if text.starts_with(SUMMARY_HEADING) {
        return;
    }
    let flat = flatten(text);
    if !flat.is_empty() {
        blocks.push(cut(&flat, block_chars));
    }
}

/// The text of a tool result's content: a string, or the text parts of a list.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match part.get("type").and_then(Value::as_str) {
                Some("text") => part.get("text").and_then(Value::as_str).unwrap_or("").to_owned(),
                Some("image" | "image_url") => "[image]".to_owned(),
                Some(other) => format!("[{other}]"),
                None => part.as_str().unwrap_or("").to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// One line: lines trimmed, blank ones dropped, joined by spaces (as the peer flattens blocks),
/// so a block can never forge a `[role]` line or a heading of the prompt.
fn flatten(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
    }
    out
}

/// `text` cut to about `max` chars: the head and the tail (where errors and results usually
/// are), with the number of chars left out between them.
fn cut(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    format!(
        "{}…[{} chars omitted]…{}",
        &text[..at(head)],
        total - head - tail,
        &text[at(total - tail)..]
    )
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// A list of a [`CompactSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Field {
    Goal,
    Constraints,
    Done,
    InProgress,
    Blocked,
    Decisions,
    NextSteps,
    FilesRead,
    FilesModified,
    Commands,
    Errors,
    Notes,
}

const FIELDS: [Field; 12] = [
    Field::Goal,
    Field::Constraints,
    Field::Done,
    Field::InProgress,
    Field::Blocked,
    Field::Decisions,
    Field::NextSteps,
    Field::FilesRead,
    Field::FilesModified,
    Field::Commands,
    Field::Errors,
    Field::Notes,
];

/// The identifier lists the extractive summariser guarantees.
const IDENTIFIERS: [Field; 4] = [Field::Commands, Field::FilesRead, Field::Errors, Field::FilesModified];

impl Field {
    fn of(self, s: &CompactSummary) -> &Vec<String> {
        let ctx = &s.critical_context;
        match self {
            Field::Goal => &s.goal,
            Field::Constraints => &s.constraints,
            Field::Done => &s.done,
            Field::InProgress => &s.in_progress,
            Field::Blocked => &s.blocked,
            Field::Decisions => &s.key_decisions,
            Field::NextSteps => &s.next_steps,
            Field::FilesRead => &ctx.files_read,
            Field::FilesModified => &ctx.files_modified,
            Field::Commands => &ctx.commands,
            Field::Errors => &ctx.errors,
            Field::Notes => &ctx.notes,
        }
    }

    fn of_mut(self, s: &mut CompactSummary) -> &mut Vec<String> {
        let ctx = &mut s.critical_context;
        match self {
            Field::Goal => &mut s.goal,
            Field::Constraints => &mut s.constraints,
            Field::Done => &mut s.done,
            Field::InProgress => &mut s.in_progress,
            Field::Blocked => &mut s.blocked,
            Field::Decisions => &mut s.key_decisions,
            Field::NextSteps => &mut s.next_steps,
            Field::FilesRead => &mut ctx.files_read,
            Field::FilesModified => &mut ctx.files_modified,
            Field::Commands => &mut ctx.commands,
            Field::Errors => &mut ctx.errors,
            Field::Notes => &mut ctx.notes,
        }
    }

    fn is_identifier(self) -> bool {
        IDENTIFIERS.contains(&self)
    }
}

/// The section a heading opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before the first heading, or under a heading that is not a summary section.
    Other,
    List(Field),
    /// `## Progress` itself: checked items are done, others in progress.
    Progress,
    Critical,
}

fn section_of(name: &str) -> Option<Section> {
    Some(match name {
        "goal" | "goals" | "目标" => Section::List(Field::Goal),
        n if n.starts_with("constraints") || n.starts_with("约束") => Section::List(Field::Constraints),
        "progress" | "进展" => Section::Progress,
        "done" | "completed" | "已完成" => Section::List(Field::Done),
        "in progress" | "进行中" => Section::List(Field::InProgress),
        "blocked" | "blockers" | "阻塞" => Section::List(Field::Blocked),
        "key decisions" | "decisions" | "关键决策" => Section::List(Field::Decisions),
        "next steps" | "下一步" => Section::List(Field::NextSteps),
        "critical context" | "关键上下文" => Section::Critical,
        _ => return None,
    })
}

/// The labels [`render_summary`] writes under `## Critical Context` (and near synonyms).
fn label_of(name: &str) -> Option<Field> {
    Some(match name {
        "files modified" | "modified files" | "files changed" | "changed files" | "files created or modified" => {
            Field::FilesModified
        }
        "files read" | "read files" | "files referenced" => Field::FilesRead,
        "commands run" | "commands" | "commands executed" => Field::Commands,
        "errors seen" | "errors" | "error messages" => Field::Errors,
        "notes" => Field::Notes,
        _ => return None,
    })
}

/// Heading or label text, lower-cased, without emphasis, colons and surrounding blanks.
fn normalize(name: &str) -> String {
    name.trim()
        .trim_matches(|c: char| c == '*' || c == '_' || c == ':' || c == '：' || c.is_whitespace())
        .to_lowercase()
}

/// Why a reply is not a summary, or the summary it holds.
fn parse_summary(reply: &str) -> Result<CompactSummary, String> {
    // Reasoning models may prepend their thinking.
    let body = match reply.rfind("</think>") {
        Some(at) => &reply[at + "</think>".len()..],
        None => reply,
    };
    if body.trim().is_empty() {
        return Err("empty reply".into());
    }
    if !body.contains("##") {
        return Err("invalid format (no ## heading)".into());
    }
    let mut parser = Parser::default();
    for line in body.lines() {
        parser.line(line);
    }
    if !parser.saw_goal_or_progress {
        return Err("invalid format (no ## Goal or ## Progress section)".into());
    }
    let mut summary = parser.summary;
    for field in FIELDS {
        dedup(field.of_mut(&mut summary));
    }
    Ok(summary)
}

/// Reads the model's Markdown line by line into a summary.
#[derive(Default)]
struct Parser {
    summary: CompactSummary,
    section: Option<Section>,
    /// Critical-context sub-list in force and the indentation of its label (`None` when the
    /// label was a heading, which holds until the next heading).
    label: Option<(Field, Option<usize>)>,
    /// The list whose last item a non-bullet line continues (reset by a blank line).
    open: Option<Field>,
    saw_goal_or_progress: bool,
}

impl Parser {
    fn line(&mut self, line: &str) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("```") {
            self.open = None;
            return;
        }
        if trimmed.starts_with('#') {
            self.heading(trimmed.trim_start_matches('#'));
            return;
        }
        let section = match self.section {
            None | Some(Section::Other) => return,
            Some(section) => section,
        };
        let indent: usize = line
            .chars()
            .take_while(|c| c.is_whitespace())
            .map(|c| if c == '\t' { 4 } else { 1 })
            .sum();
        let (bullet, content) = strip_bullet(trimmed);
        let (checked, content) = strip_checkbox(content);
        let field = match section {
            Section::Other => return,
            Section::List(field) => field,
            Section::Progress if checked == Some(true) => Field::Done,
            Section::Progress => Field::InProgress,
            Section::Critical => {
                if bullet && let Some((field, rest)) = label_line(content) {
                    let nested = matches!(self.label, Some((_, Some(at))) if indent > at);
                    if !nested {
                        self.label = Some((field, Some(indent)));
                        self.open = None;
                        self.push_inline(field, rest);
                        return;
                    }
                }
                match self.label {
                    Some((field, None)) => field,
                    Some((field, Some(at))) if indent > at => field,
                    _ => {
                        self.label = None;
                        Field::Notes
                    }
                }
            }
        };
        if !bullet
            && let Some(open) = self.open
            && let Some(last) = open.of_mut(&mut self.summary).last_mut()
        {
            last.push(' ');
            last.push_str(content);
            return;
        }
        self.push(field, content);
    }

    fn heading(&mut self, name: &str) {
        let name = normalize(name);
        self.open = None;
        if let Some(section) = section_of(&name) {
            self.saw_goal_or_progress |= matches!(
                section,
                Section::List(Field::Goal | Field::Done | Field::InProgress | Field::Blocked) | Section::Progress
            );
            self.section = Some(section);
            self.label = None;
        } else if self.section == Some(Section::Critical)
            && let Some(field) = label_of(&name)
        {
            self.label = Some((field, None));
        } else {
            self.section = Some(Section::Other);
            self.label = None;
        }
    }

    /// The rest of a `Files modified: …` line: nothing, a list of code spans, or one item.
    fn push_inline(&mut self, field: Field, rest: &str) {
        let rest = rest.trim();
        if rest.is_empty() || is_none(rest) {
            return;
        }
        match code_span_list(rest) {
            Some(items) => {
                for item in items {
                    self.push(field, &item);
                }
            }
            None => self.push(field, rest),
        }
    }

    fn push(&mut self, field: Field, content: &str) {
        let content = content.trim();
        if content.is_empty() || is_none(content) {
            self.open = None;
            return;
        }
        let item = if field.is_identifier() {
            match leading_code_span(content) {
                Some((inner, _)) if !inner.trim().is_empty() => inner,
                _ => content.to_owned(),
            }
        } else {
            content.to_owned()
        };
        field.of_mut(&mut self.summary).push(item);
        self.open = Some(field);
    }
}

/// `(bullet?, text)`: strips `- `, `* `, `+ `, `1. ` or `1) `.
fn strip_bullet(line: &str) -> (bool, &str) {
    for marker in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return (true, rest.trim_start());
        }
    }
    if matches!(line, "-" | "*" | "+") {
        return (true, "");
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits <= 3 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return (true, rest.trim_start());
        }
    }
    (false, line)
}

/// `(Some(checked), text)` for `[x] text` / `[ ] text`.
fn strip_checkbox(text: &str) -> (Option<bool>, &str) {
    for (marker, checked) in [("[x]", true), ("[X]", true), ("[ ]", false)] {
        if let Some(rest) = text.strip_prefix(marker) {
            return (Some(checked), rest.trim_start());
        }
    }
    (None, text)
}

/// `Files modified: rest` → the list and `rest`.
fn label_line(text: &str) -> Option<(Field, &str)> {
    let at = text.find([':', '：'])?;
    let field = label_of(&normalize(&text[..at]))?;
    let colon = text[at..].chars().next().map_or(1, char::len_utf8);
    Some((field, text[at + colon..].trim_start_matches(['*', '_'])))
}

/// `(none)`, `none`, `N/A` and the like, in any emphasis.
fn is_none(text: &str) -> bool {
    let t = text
        .trim_matches(|c: char| c == '*' || c == '_' || c == '`' || c == '.' || c == '"' || c.is_whitespace())
        .to_lowercase();
    matches!(
        t.as_str(),
        "(none)" | "none" | "n/a" | "(n/a)" | "无" | "(无)" | "（无）" | "（none）" | "-" | "—"
    ) || t.starts_with("(none)")
}

/// A CommonMark code span at the start of `text`: its content and the rest.
fn leading_code_span(text: &str) -> Option<(String, &str)> {
    let fence = text.chars().take_while(|&c| c == '`').count();
    if fence == 0 {
        return None;
    }
    let body = &text[fence..];
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            if run == fence {
                let inner = &body[..i];
                let inner = match inner.strip_prefix(' ').and_then(|s| s.strip_suffix(' ')) {
                    Some(stripped) if !stripped.trim().is_empty() => stripped,
                    _ => inner,
                };
                return Some((inner.to_owned(), &body[i + run..]));
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// `` `a`, `b` and `c` `` → `[a, b, c]`; `None` when there is text besides the spans.
fn code_span_list(text: &str) -> Option<Vec<String>> {
    let mut items = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([',', ';', '，', '；', ' ']);
        rest = rest.strip_prefix("and ").unwrap_or(rest);
        if rest.is_empty() {
            return if items.is_empty() { None } else { Some(items) };
        }
        let (item, after) = leading_code_span(rest)?;
        items.push(item);
        rest = after;
    }
}

fn dedup(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

// ---------------------------------------------------------------------------------------------
// Merging and budget

/// The model's summary with the extractive identifiers merged in, the previous summary's
/// archive and the instruction, fitted to the budget.
fn finish(mut summary: CompactSummary, extractive: CompactSummary, input: &SummaryInput<'_>) -> CompactSummary {
    // The newest span's identifiers are given up last when trimming.
    let span_only = ExtractiveSummarizer
        .summarize(&SummaryInput {
            previous: None,
            max_tokens: u64::MAX,
            ..*input
        })
        .unwrap_or_default();
    let fresh: HashSet<(Field, String)> = IDENTIFIERS
        .iter()
        .flat_map(|&f| f.of(&span_only).iter().map(move |item| (f, item.clone())))
        .collect();

    for field in IDENTIFIERS {
        let exact = field.of(&extractive).clone();
        let from_model = std::mem::replace(field.of_mut(&mut summary), exact);
        let list = field.of_mut(&mut summary);
        list.extend(from_model);
        dedup(list);
    }
    let modified: HashSet<String> = summary.critical_context.files_modified.iter().cloned().collect();
    summary.critical_context.files_read.retain(|f| !modified.contains(f));

    // A model that drops a whole section it was asked to preserve loses the user's words or
    // the work done; the previous summary's items stand in (unless an instruction steered it).
    if let (Some(previous), None) = (input.previous, input.instruction) {
        for field in [Field::Goal, Field::Constraints, Field::Done, Field::Decisions] {
            if field.of(&summary).is_empty() {
                *field.of_mut(&mut summary) = field.of(previous).clone();
            }
        }
    }
    summary.archive = input.previous.map(|p| p.archive.clone()).unwrap_or_default();
    summary.instruction = input.instruction.map(str::to_owned);
    fit(summary, &fresh, input.max_tokens, input.counter)
}

/// Items in the order they are given up when over budget: notes and decisions first, the
/// newest span's identifiers last (oldest first across lists, so the last command, its files
/// and its error survive together).
fn drop_order(summary: &CompactSummary, fresh: &HashSet<(Field, String)>) -> Vec<(Field, usize)> {
    let all = |field: Field| (0..field.of(summary).len()).map(move |i| (field, i));
    let is_fresh = |&(field, i): &(Field, usize)| fresh.contains(&(field, field.of(summary)[i].clone()));
    let mut order: Vec<(Field, usize)> = Vec::new();
    order.extend(all(Field::Notes));
    order.extend(all(Field::Decisions));
    order.extend(all(Field::Done));
    for field in IDENTIFIERS {
        order.extend(all(field).filter(|item| !is_fresh(item)));
    }
    order.extend(all(Field::Constraints));
    order.extend(all(Field::Goal).skip(1));
    order.extend(all(Field::Blocked));
    order.extend(all(Field::InProgress));
    order.extend(all(Field::NextSteps).rev());
    order.extend(all(Field::Goal).take(1));
    let mut newest: Vec<(usize, usize, (Field, usize))> = Vec::new();
    for field in IDENTIFIERS {
        let items: Vec<(Field, usize)> = all(field).filter(is_fresh).collect();
        let len = items.len();
        newest.extend(items.into_iter().enumerate().map(|(rank, item)| (rank + 1, len, item)));
    }
    newest.sort_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)));
    order.extend(newest.into_iter().map(|(_, _, item)| item));
    order
}

/// The summary without the first `dropped` items of `order`.
fn without(summary: &CompactSummary, order: &[(Field, usize)], dropped: usize) -> CompactSummary {
    let gone: HashSet<(Field, usize)> = order[..dropped].iter().copied().collect();
    let mut out = summary.clone();
    for field in FIELDS {
        let list = field.of_mut(&mut out);
        let mut i = 0;
        list.retain(|_| {
            i += 1;
            !gone.contains(&(field, i - 1))
        });
    }
    out
}

/// The largest summary (fewest items dropped in [`drop_order`]) whose rendering fits
/// `max_tokens`, leaving room for the archive range the caller appends next.
fn fit(
    summary: CompactSummary,
    fresh: &HashSet<(Field, String)>,
    max_tokens: u64,
    counter: &TokenCounter,
) -> CompactSummary {
    let budget = budget_before_next_range(summary.archive.is_empty(), max_tokens, counter);
    let fits = |s: &CompactSummary| counter.count_text(&render_summary(s)) <= budget;
    if fits(&summary) {
        return summary;
    }
    let order = drop_order(&summary, fresh);
    let n = order.len();
    // `lo` does not fit; `hi` fits, or is everything.
    let (mut lo, mut hi) = (0, n);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(&without(&summary, &order, mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    without(&summary, &order, hi)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use satchel_protocol::ArchiveRange;
    use satchel_protocol::config::Tokenizer;
    use serde_json::json;

    use super::*;
    use crate::summary::render::summary_message_text;

    /// Replies from a script, in order, and records every request.
    struct Script {
        replies: Mutex<VecDeque<Result<String, CompletionError>>>,
        requests: Mutex<Vec<Vec<ChatMessage>>>,
    }

    impl Script {
        fn new(replies: Vec<Result<String, CompletionError>>) -> Arc<Script> {
            Arc::new(Script {
                replies: Mutex::new(replies.into()),
                requests: Mutex::new(Vec::new()),
            })
        }

        fn ok(replies: &[&str]) -> Arc<Script> {
            Script::new(replies.iter().map(|r| Ok((*r).to_owned())).collect())
        }

        fn requests(&self) -> Vec<Vec<ChatMessage>> {
            self.requests.lock().unwrap().clone()
        }

        /// The user message of request `i`.
        fn user(&self, i: usize) -> String {
            self.requests()[i][1].content.clone()
        }
    }

    impl Completer for Script {
        fn complete(&self, messages: &[ChatMessage], _max_tokens: u64) -> Result<String, CompletionError> {
            self.requests.lock().unwrap().push(messages.to_vec());
            self.replies
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(CompletionError("script exhausted".into())))
        }

        fn name(&self) -> String {
            "fake:model".into()
        }
    }

    fn counter() -> TokenCounter {
        TokenCounter::new(Tokenizer::O200kBase, 4.0)
    }

    const REQUEST: &str = "Please fix the failing build in crates/app/src/main.rs. You must not change the public API.";
    const BUILD: &str = "cargo build --release 2>&1 | tail -n 20";
    const BUILD_ERROR: &str = "error[E0433]: failed to resolve: use of undeclared crate or module `serde`";

    fn session() -> Vec<Value> {
        let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        vec![
            json!({"role": "user", "content": REQUEST}),
            json!({"role": "assistant", "content": "Let's look at the file first.", "tool_calls": [
                call("c1", "bash", json!({"command": "cat crates/app/src/main.rs"}))]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "use serde::Serialize;\nfn main() {}"}),
            json!({"role": "assistant", "content": "The issue is a missing dependency. I'll add it to Cargo.toml.",
                "tool_calls": [call("c2", "write_file", json!({"path": "crates/app/Cargo.toml", "content": "[dependencies]\nserde = \"1\""}))]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "ok"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c3", "bash", json!({"command": BUILD}))]}),
            json!({"role": "tool", "tool_call_id": "c3", "content": format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5")}),
            json!({"role": "assistant", "content": "Next I'll check the workspace manifest."}),
        ]
    }

    fn input<'a>(
        messages: &'a [Value],
        previous: Option<&'a CompactSummary>,
        instruction: Option<&'a str>,
        counter: &'a TokenCounter,
    ) -> SummaryInput<'a> {
        SummaryInput {
            previous,
            messages,
            format: MessageFormat::Openai,
            instruction,
            max_tokens: 4_000,
            counter,
        }
    }

    const REPLY: &str = "Here is the summary:

## Goal
- Fix the failing build in `crates/app/src/main.rs`

## Constraints & Preferences
- Must not change the public API.

## Progress
### Done
- [x] Added `serde = \"1\"` to `crates/app/Cargo.toml`

### In Progress
- [ ] Checking the workspace manifest
  because the build still fails

### Blocked
- `cargo build --release` fails: `error[E0433]: failed to resolve`

## Key Decisions
- **Add serde as a dependency**: the code uses `serde::Serialize`.

## Next Steps
1. Open the root `Cargo.toml`
2) Rerun the build

## Critical Context
- The crate is built in release mode.
- Files modified:
  - `crates/app/Cargo.toml`
- Commands run: `cargo build --release`, `ls`
- Errors seen: (none)
";

    const MINIMAL: &str = "## Goal\n- Fix the build\n\n## Progress\n### Done\n(none)\n";

    fn llm(script: &Arc<Script>) -> LlmSummarizer<Arc<Script>> {
        LlmSummarizer::new(Arc::clone(script))
    }

    #[test]
    fn llm_parses_a_realistic_reply_into_the_fields() {
        let summary = parse_summary(REPLY).unwrap();
        assert_eq!(summary.goal, ["Fix the failing build in `crates/app/src/main.rs`"]);
        assert_eq!(summary.constraints, ["Must not change the public API."]);
        assert_eq!(summary.done, ["Added `serde = \"1\"` to `crates/app/Cargo.toml`"]);
        assert_eq!(
            summary.in_progress,
            ["Checking the workspace manifest because the build still fails"]
        );
        assert_eq!(
            summary.blocked,
            ["`cargo build --release` fails: `error[E0433]: failed to resolve`"]
        );
        assert_eq!(
            summary.key_decisions,
            ["**Add serde as a dependency**: the code uses `serde::Serialize`."]
        );
        assert_eq!(summary.next_steps, ["Open the root `Cargo.toml`", "Rerun the build"]);
        let ctx = &summary.critical_context;
        assert_eq!(ctx.notes, ["The crate is built in release mode."]);
        assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
        assert_eq!(ctx.commands, ["cargo build --release", "ls"]);
        assert!(ctx.errors.is_empty() && ctx.files_read.is_empty());
    }

    #[test]
    fn llm_rendered_summaries_parse_back_to_themselves() {
        let previous = CompactSummary {
            goal: vec!["Fix the flaky login test".into()],
            constraints: vec!["Do not touch the public API.".into()],
            done: vec!["Modified `src/auth.rs`".into()],
            in_progress: vec!["Rerunning the suite".into()],
            blocked: vec![],
            key_decisions: vec!["Use JWT because sessions need state.".into()],
            next_steps: vec!["Run `cargo test`".into(), "Open a PR".into()],
            critical_context: satchel_protocol::CriticalContext {
                files_read: vec!["src/lib.rs".into()],
                files_modified: vec!["src/auth.rs".into()],
                commands: vec!["cargo test -p auth".into(), "echo `date`".into()],
                errors: vec!["error[E0425]: cannot find value `x` in this scope".into()],
                notes: vec!["Port 8080 is taken".into()],
            },
            archive: vec![],
            instruction: None,
        };
        assert_eq!(parse_summary(&render_previous(&previous)).unwrap(), previous);
        // Thinking and code fences around the reply are ignored; Chinese headings are accepted.
        let wrapped = format!("<think>hmm</think>\n```markdown\n{}\n```", render_previous(&previous));
        assert_eq!(parse_summary(&wrapped).unwrap(), previous);
        let zh = parse_summary("## 目标\n- 修复构建\n\n## 进展\n### 已完成\n- [x] 添加依赖\n").unwrap();
        assert_eq!(
            (zh.goal, zh.done),
            (vec!["修复构建".to_owned()], vec!["添加依赖".to_owned()])
        );
    }

    #[test]
    fn llm_first_compaction_sends_the_initial_prompt_then_the_update_prompt() {
        let counter = counter();
        let messages = session();
        let script = Script::ok(&[REPLY, MINIMAL]);
        let summarizer = llm(&script);
        let (first, backend) = summarizer.summarize_reporting(&input(&messages, None, None, &counter));
        assert_eq!(backend, "fake:model");

        let requests = script.requests();
        assert_eq!(requests[0].len(), 2);
        assert_eq!(requests[0][0].role, "system");
        assert!(
            requests[0][0]
                .content
                .starts_with("You are a context compaction assistant.")
        );
        assert_eq!(requests[0][1].role, "user");
        let user = script.user(0);
        assert!(user.starts_with("# conversation\n[user]\nPlease fix the failing build"));
        assert!(user.contains("\n\n[assistant]\nLet's look at the file first.\n[tool_use] bash {\"command\":"));
        assert!(user.contains("[tool]\n[tool_result] bash: use serde::Serialize; fn main() {}"));
        assert!(user.contains("Create a structured summary"));
        assert!(user.contains("Copy exact file paths, function names, commands and error messages verbatim"));
        assert!(!user.contains("# previous-summary"));
        assert!(!user.contains("# extra-instruction"));
        // Oldest first.
        assert!(user.find("Please fix").unwrap() < user.find("workspace manifest").unwrap());

        let more = vec![json!({"role": "user", "content": "Now also add a CI job please."})];
        summarizer.summarize_reporting(&input(&more, Some(&first), None, &counter));
        let update = script.user(1);
        assert!(
            update
                .starts_with("# conversation\n[user]\nNow also add a CI job please.\n\n# previous-summary\n## Goal\n")
        );
        assert!(update.contains("- Fix the failing build in `crates/app/src/main.rs`"));
        assert!(update.contains("PRESERVE all existing information from the previous summary"));
        assert!(update.contains("move items from \"In Progress\" to \"Done\""));
        assert!(
            !update.contains("## Archive"),
            "the path guide is not the model's business"
        );
    }

    #[test]
    fn llm_instruction_is_sent_as_extra_instruction() {
        let counter = counter();
        let messages = session();
        let script = Script::ok(&[REPLY]);
        let (summary, _) =
            llm(&script).summarize_reporting(&input(&messages, None, Some("keep decisions only"), &counter));
        assert!(script.user(0).ends_with("\n\n# extra-instruction\nkeep decisions only"));
        assert_eq!(summary.instruction.as_deref(), Some("keep decisions only"));
    }

    #[test]
    fn llm_chinese_prompts_keep_english_headings() {
        let counter = counter();
        let messages = session();
        let script = Script::ok(&[REPLY]);
        llm(&script)
            .with_language(Language::Zh)
            .summarize_reporting(&input(&messages, None, None, &counter));
        let request = &script.requests()[0];
        assert!(request[0].content.starts_with("你是一个上下文压缩助手"));
        let user = &request[1].content;
        assert!(user.starts_with("# conversation\n"));
        assert!(user.contains("# 任务\n根据上面的对话生成结构化摘要"));
        assert!(user.contains("逐字照抄"));
        for heading in [
            "## Goal",
            "## Constraints & Preferences",
            "### In Progress",
            "## Critical Context",
        ] {
            assert!(user.contains(heading), "{heading}");
        }
        assert_eq!(Language::from_code("zh-CN"), Some(Language::Zh));
        assert_eq!(Language::from_code("EN"), Some(Language::En));
        assert_eq!(Language::from_code("fr"), None);
    }

    #[test]
    fn llm_long_blocks_are_cut_head_and_tail() {
        let counter = counter();
        let huge = format!("HEAD-MARK {} TAIL-MARK", "x".repeat(200 * 1024));
        let thinking = format!("ponder {}", "y".repeat(5_000));
        let messages = vec![
            json!({"role": "user", "content": [{"type": "text", "text": "run it"}]}),
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": thinking, "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "make all"}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": [{"type": "text", "text": huge}]}]}),
        ];
        let script = Script::ok(&[MINIMAL]);
        llm(&script).summarize_reporting(&SummaryInput {
            format: MessageFormat::Anthropic,
            ..input(&messages, None, None, &counter)
        });
        let user = script.user(0);
        assert!(
            user.len() < 12_000,
            "the 200 KB result is never sent whole: {} bytes",
            user.len()
        );
        assert!(user.contains("[tool_use] bash {\"command\":\"make all\"}"));
        assert!(user.contains("[tool_result] bash (error): HEAD-MARK xxx"));
        assert!(user.contains("chars omitted]…"));
        assert!(user.contains("xxx TAIL-MARK\n"));
        let thinking_line = user.lines().find(|l| l.starts_with("[thinking] ponder")).unwrap();
        assert!(thinking_line.chars().count() < THINKING_CHARS + 50);
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("ééééééééé", 6), "éééé…[3 chars omitted]…éé");
    }

    fn long_session(turns: usize) -> Vec<Value> {
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "user", "content": format!("Step {i}: please edit src/mod{i}.rs and explain the change in detail. {}", "words ".repeat(150))}));
            messages
                .push(json!({"role": "assistant", "content": format!("Done with step {i}. {}", "more ".repeat(150))}));
        }
        messages
    }

    fn staged_reply(stage: usize) -> String {
        format!("## Goal\n- goal after stage {stage}\n\n## Progress\n### Done\n- [x] stage {stage} done\n")
    }

    #[test]
    fn llm_large_spans_are_summarised_in_stages() {
        let counter = counter();
        let messages = long_session(20);
        let replies: Vec<String> = (1..=20).map(staged_reply).collect();
        let script = Script::ok(&replies.iter().map(String::as_str).collect::<Vec<_>>());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let previous = CompactSummary {
            goal: vec!["original goal".into()],
            ..CompactSummary::default()
        };
        let summarizer = llm(&script)
            .with_input_budget(3_000)
            .with_max_output(300)
            .with_progress(move |stage, stages| seen.lock().unwrap().push((stage, stages)));
        let (summary, backend) = summarizer.summarize_reporting(&input(&messages, Some(&previous), None, &counter));
        assert_eq!(backend, "fake:model");

        let requests = script.requests();
        let n = requests.len();
        assert!(n >= 3, "{n} stages");
        let progress = calls.lock().unwrap().clone();
        assert_eq!(progress, (1..=n).map(|i| (i, n)).collect::<Vec<_>>());
        assert!(
            script
                .user(0)
                .contains("# previous-summary\n## Goal\n\n- original goal\n")
        );
        for (i, request) in requests.iter().enumerate() {
            let tokens: u64 = request.iter().map(|m| counter.count_text(&m.content)).sum();
            assert!(tokens <= 3_000, "stage {} fits the input budget: {tokens}", i + 1);
            if i > 0 {
                assert!(
                    request[1]
                        .content
                        .contains(&format!("# previous-summary\n## Goal\n\n- goal after stage {i}\n")),
                    "stage {} carries stage {i}'s summary",
                    i + 1
                );
            }
        }
        // Every message is sent once, in order.
        let all: String = (0..n).map(|i| script.user(i)).collect();
        let steps: Vec<usize> = (0..20).map(|i| all.find(&format!("Step {i}:")).unwrap()).collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(all.matches("Step 3:").count(), 1);
        assert_eq!(summary.goal, [format!("goal after stage {n}")]);
    }

    #[test]
    fn llm_a_single_message_over_the_budget_is_cut_further() {
        let counter = counter();
        let blocks: Vec<Value> = (0..40)
            .map(|i| json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("{i} {}", "z ".repeat(2_000))}))
            .collect();
        let messages = vec![json!({"role": "user", "content": blocks})];
        let script = Script::ok(&[MINIMAL]);
        llm(&script)
            .with_input_budget(4_000)
            .summarize_reporting(&SummaryInput {
                format: MessageFormat::Anthropic,
                ..input(&messages, None, None, &counter)
            });
        assert_eq!(script.requests().len(), 1);
        assert!(counter.count_text(&script.user(0)) < 4_000);
    }

    #[test]
    fn llm_identifiers_dropped_by_the_model_are_merged_from_extractive() {
        let counter = counter();
        let messages = session();
        let script = Script::ok(&[MINIMAL]);
        let (summary, backend) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
        assert_eq!(backend, "fake:model");
        assert_eq!(summary.goal, ["Fix the build"]);
        let ctx = &summary.critical_context;
        assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
        assert!(ctx.files_read.contains(&"crates/app/src/main.rs".to_owned()));
        assert!(ctx.commands.contains(&BUILD.to_owned()), "{:?}", ctx.commands);
        assert_eq!(ctx.errors, [BUILD_ERROR]);
        assert!(summary_message_text(&summary).contains(BUILD_ERROR));

        // The model's own identifiers are kept after the exact ones, without duplicates.
        let script = Script::ok(&[REPLY]);
        let (summary, _) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
        let ctx = &summary.critical_context;
        assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
        assert_eq!(ctx.commands.last().map(String::as_str), Some("ls"));
        assert_eq!(ctx.commands.iter().filter(|c| *c == "cargo build --release").count(), 1);
        assert_eq!(summary.key_decisions.len(), 1);
    }

    #[test]
    fn llm_previous_archive_is_kept_and_dropped_sections_restored() {
        let counter = counter();
        let messages = session();
        let previous = CompactSummary {
            goal: vec!["Ship the release".into()],
            key_decisions: vec!["Stay on Rust 1.95".into()],
            archive: vec![ArchiveRange {
                file: "dialog/2026-11-22.jsonl".into(),
                start_line: 1,
                end_line: 4,
                first_index: 0,
                last_index: 3,
                messages: 4,
            }],
            ..CompactSummary::default()
        };
        let script = Script::ok(&["## Progress\n### Done\n- [x] Built it\n"]);
        let (summary, _) = llm(&script).summarize_reporting(&input(&messages, Some(&previous), None, &counter));
        assert_eq!(summary.archive, previous.archive);
        assert_eq!(summary.goal, ["Ship the release"]);
        assert_eq!(summary.key_decisions, ["Stay on Rust 1.95"]);
        assert_eq!(summary.done, ["Built it"]);
    }

    #[test]
    fn llm_summary_fits_the_budget_keeping_the_newest_identifiers() {
        let counter = counter();
        let messages = session();
        let notes: String = (0..200)
            .map(|i| format!("- note {i} about something rather long and wordy\n"))
            .collect();
        let decisions: String = (0..200)
            .map(|i| format!("- decision {i} with its rationale\n"))
            .collect();
        let reply = format!(
            "## Goal\n- Fix the build\n\n## Progress\n### Done\n(none)\n\n## Key Decisions\n{decisions}\n## Critical Context\n{notes}"
        );
        let script = Script::ok(&[&reply]);
        let (summary, _) = llm(&script).summarize_reporting(&SummaryInput {
            max_tokens: 600,
            ..input(&messages, None, None, &counter)
        });
        let text = summary_message_text(&summary);
        assert!(counter.count_text(&render_summary(&summary)) <= 600);
        assert!(summary.critical_context.notes.len() < 200);
        assert!(text.contains(BUILD_ERROR));
        assert!(text.contains(BUILD));
        assert_eq!(summary.goal, ["Fix the build"]);
        // Tiny budgets never panic.
        for max_tokens in [0, 1, 50] {
            let script = Script::ok(&[&reply]);
            llm(&script).summarize_reporting(&SummaryInput {
                max_tokens,
                ..input(&messages, None, None, &counter)
            });
        }
    }

    #[test]
    fn llm_retries_once_then_succeeds() {
        let counter = counter();
        let messages = session();
        for first in [
            Err(CompletionError("HTTP 503".into())),
            Ok(String::new()),
            Ok("Sorry, I can't.".into()),
        ] {
            let script = Script::new(vec![first, Ok(REPLY.into())]);
            let (summary, backend) = llm(&script).summarize_reporting(&input(&messages, None, None, &counter));
            assert_eq!(backend, "fake:model");
            let requests = script.requests();
            assert_eq!(requests.len(), 2);
            assert_eq!(requests[0], requests[1], "the same request is retried");
            assert_eq!(summary.next_steps, ["Open the root `Cargo.toml`", "Rerun the build"]);
        }
    }

    #[test]
    fn llm_failures_fall_back_to_the_extractive_summary() {
        let counter = counter();
        let messages = session();
        let previous = CompactSummary {
            goal: vec!["Ship the release".into()],
            ..CompactSummary::default()
        };
        let inp = input(&messages, Some(&previous), None, &counter);
        let extractive = ExtractiveSummarizer.summarize(&inp).unwrap();
        let cases: [(Vec<Result<String, CompletionError>>, &str); 4] = [
            (
                vec![
                    Err(CompletionError("timeout".into())),
                    Err(CompletionError("HTTP 500".into())),
                ],
                "extractive (fallback: completion failed: HTTP 500)",
            ),
            (
                vec![Ok(String::new()), Ok("  \n".into())],
                "extractive (fallback: empty reply)",
            ),
            (
                vec![Ok("Goal: fix it".into()), Ok("Goal: fix it".into())],
                "extractive (fallback: invalid format (no ## heading))",
            ),
            (
                vec![Ok("## Summary\n- fixed".into()), Ok("## Notes\n- x".into())],
                "extractive (fallback: invalid format (no ## Goal or ## Progress section))",
            ),
        ];
        for (replies, expected) in cases {
            let script = Script::new(replies);
            let summarizer = llm(&script);
            let (summary, backend) = summarizer.summarize_reporting(&inp);
            assert_eq!(backend, expected);
            assert_eq!(script.requests().len(), 2);
            assert_eq!(summary, extractive);
            assert_eq!(summary.goal[0], "Ship the release", "the previous summary survives");
            assert_eq!(summarizer.summarize(&inp).unwrap(), extractive, "the trait never fails");
        }

        // A failing later stage reports its stage; nothing to summarise is a fallback too.
        let long = long_session(10);
        let script = Script::new(vec![Ok(staged_reply(1))]);
        let (_, backend) = llm(&script)
            .with_input_budget(3_000)
            .with_max_output(300)
            .summarize_reporting(&input(&long, None, None, &counter));
        assert!(
            backend.starts_with("extractive (fallback: stage 2/") && backend.ends_with("script exhausted)"),
            "{backend}"
        );
        let script = Script::ok(&[]);
        let (_, backend) = llm(&script).summarize_reporting(&input(&[], Some(&previous), None, &counter));
        assert_eq!(backend, "extractive (fallback: no messages to summarise)");
        assert!(script.requests().is_empty());
    }
}
