//! What one compacted span says, read message by message: the user's requests and
//! constraints, the agent's decisions, steps and plan, what its calls did and how they ended.

use std::collections::{HashMap, HashSet};

use satchel_protocol::{CompactSummary, MessageFormat, UserRequest};
use serde_json::Value;

use super::extract::calls::{CallFacts, area};
use super::extract::findings::{Text, findings};
use super::extract::outcome::failure_line;
use super::extract::paths::{PathKind, is_not_a_file, path_kind, path_tokens, prose_path_tokens};
use super::extract::prose::{
    DEMONSTRATION_PREFIXES, is_constraint, is_decision, is_demonstration, is_intent, plan_steps, sentences,
};
use super::extract::text::{collapse_ws, cut_chars, cut_words};
use super::parse::parse_summary;
use super::render::{code_span, is_summary_text};
use super::template::{Templates, template_candidates};
use crate::compact::is_user_turn;
use crate::format;

/// Longest request text kept: its opening, which names the task.
pub const REQUEST_CHARS: usize = 2_000;
/// A demonstration is only labelled: its opening says what it is.
pub const DEMONSTRATION_CHARS: usize = 80;
pub(crate) const SENTENCE_CHARS: usize = 300;
const PATH_CHARS: usize = 300;
const STEP_CHARS: usize = 400;
/// Done and blocked items only remind what happened; the full command is under "Commands".
pub(crate) const SHORT_COMMAND_CHARS: usize = 80;
/// Changed files listed one by one in Done; more are counted.
const CHANGES_LISTED: usize = 3;
/// Shorter user messages ("ok", "go on") are replies, not new requests.
const MIN_REQUEST_WORDS: usize = 3;

/// A list that keeps the first occurrence of each non-empty string, in order.
#[derive(Debug, Default)]
pub(crate) struct Unique {
    pub items: Vec<String>,
    seen: HashSet<String>,
}

impl Unique {
    pub fn push(&mut self, item: String) {
        if !item.is_empty() && self.seen.insert(item.clone()) {
            self.items.push(item);
        }
    }
}

/// How a call ended, in order, for the blocked list and the lessons.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// The call's key (its command), when the call is known.
    pub key: Option<String>,
    /// What a later success must share to clear a failure: a command's area or a file.
    pub areas: Vec<String>,
    /// The failure line, or `None` for a success.
    pub error: Option<String>,
    /// Files the call creates or changes.
    pub modified: Vec<String>,
    /// The call only looks (reads, lists, searches): never part of a fix.
    pub read_only: bool,
}

/// What one span says, before merging.
#[derive(Debug, Default)]
pub(crate) struct SpanFacts {
    pub requests: Vec<UserRequest>,
    pub constraints: Unique,
    /// Chronological.
    pub decisions: Unique,
    pub done: Unique,
    /// Files changed by calls that succeeded, for one "Modified" item in `done`.
    changed: Unique,
    pub in_progress: Option<String>,
    /// The calls that carry out `in_progress` and have no result yet: when the span answers
    /// them all, the step was taken, and it is done, not under way.
    step_calls: Option<Vec<String>>,
    /// The span's last word on the step under way was an answer that ended it, or the step
    /// was taken: a summary it merges into no longer has one either.
    pub step_ended: bool,
    pub outcomes: Vec<Outcome>,
    pub next_steps: Vec<String>,
    pub files_read: Unique,
    pub files_modified: Unique,
    pub commands: Unique,
    pub errors: Unique,
    /// Dotted names that look like code identifiers rather than files (`this.foo`).
    pub identifiers: Unique,
    /// Values found in an output and used afterwards, with where: "`0x5eed` (from the output
    /// of `python3 seed.py`, message 12)".
    pub findings: Vec<String>,
    /// Summaries pasted into the conversation (a summary carried over from another session).
    pub pasted: Vec<CompactSummary>,
    /// The sentences of demonstrations and the directives of each request, to tell the
    /// framework's template from the user's constraints.
    pub templates: Templates,
}

/// The messages of a span and where they come from.
pub(crate) struct Span<'a> {
    pub messages: &'a [Value],
    /// Original index of each message; empty when unknown (then positions stand in).
    pub indices: &'a [usize],
    pub format: MessageFormat,
    pub demonstration_prefixes: Option<&'a [String]>,
    /// The messages kept after the span: later requests and calls.
    pub kept: &'a [Value],
}

impl SpanFacts {
    pub fn read(span: &Span<'_>) -> SpanFacts {
        let mut facts = SpanFacts::default();
        let mut calls: HashMap<String, CallFacts> = HashMap::new();
        let mut current_file: Option<String> = None;
        let mut last_assistant: Option<(String, bool)> = None;
        let mut pending_request: Option<String> = None;
        for (position, message) in span.messages.iter().enumerate() {
            let index = span.indices.get(position).copied().unwrap_or(position);
            match format::role_of(message) {
                Some("user") => {
                    for text in text_blocks(message) {
                        let text = &*without_harness_notes(text);
                        if text.trim().is_empty() {
                            continue;
                        }
                        if is_summary_text(text) {
                            // A summary (also one marked `[COMPACTED]`) is merged when it
                            // parses and skipped when not: it is never the user's request.
                            facts.pasted.extend(parse_summary(text).ok());
                        } else if facts.user_text(text, index, span.demonstration_prefixes) {
                            pending_request = Some(text.to_owned());
                        }
                    }
                    facts.results(message, span.format, &calls);
                }
                Some("tool") => facts.results(message, span.format, &calls),
                Some("assistant") => {
                    let text = text_blocks(message).collect::<Vec<_>>().join("\n");
                    let tool_calls = format::tool_calls(message, span.format);
                    if !text.trim().is_empty() {
                        if facts.assistant_text(&text, !tool_calls.is_empty()) {
                            facts.step_calls = facts
                                .in_progress
                                .as_ref()
                                .map(|_| tool_calls.iter().map(|c| c.id.clone()).collect())
                                .filter(|ids: &Vec<String>| !ids.is_empty());
                        }
                        last_assistant = Some((text, !tool_calls.is_empty()));
                    }
                    pending_request = None;
                    for call in tool_calls {
                        let call_facts = CallFacts::of(&call, &mut current_file);
                        facts.call(&call_facts);
                        calls.insert(call.id, call_facts);
                    }
                }
                _ => {}
            }
        }
        facts.plan(last_assistant, pending_request);
        facts.report_changes();
        facts.close_taken_step();
        facts.look_ahead(span.kept, span.format);
        facts.findings = span_findings(span, &calls);
        facts
    }

    /// What came after the span: a later request's directives count for telling template
    /// from the user's words, and a next step that names what a later call used was taken.
    fn look_ahead(&mut self, kept: &[Value], format: MessageFormat) {
        for message in kept.iter().filter(|m| is_user_turn(m, format)) {
            let text: String = text_blocks(message)
                .map(|t| without_harness_notes(t).into_owned())
                .collect::<Vec<_>>()
                .join("\n");
            self.templates.request(template_candidates(&text, SENTENCE_CHARS));
        }
        let later = later_calls(kept, format);
        self.next_steps.retain(|step| !taken_later(step, &later));
    }

    /// A step whose calls all have their results in the span was taken: it is the last
    /// thing done, and nothing of the span is known to be under way (what is, is in the
    /// messages the compaction keeps).
    fn close_taken_step(&mut self) {
        if self.step_calls.as_ref().is_some_and(Vec::is_empty)
            && let Some(step) = self.in_progress.take()
        {
            self.done.push(format!("Last step: {step}"));
            self.step_ended = true;
        }
    }

    /// The files the span changed, as Done items: each one when there are a few, else how
    /// many and the last ones.
    fn report_changes(&mut self) {
        let changed = std::mem::take(&mut self.changed.items);
        let mut items: Vec<String> = if changed.len() <= CHANGES_LISTED {
            changed.iter().map(|p| format!("Modified {}", code_span(p))).collect()
        } else {
            let last: Vec<String> = changed[changed.len() - CHANGES_LISTED..]
                .iter()
                .map(|p| code_span(p))
                .collect();
            vec![format!(
                "Modified {} files, the last {}",
                changed.len(),
                last.join(", ")
            )]
        };
        items.append(&mut self.done.items);
        self.done = Unique::default();
        for item in items {
            self.done.push(item);
        }
    }

    /// Reads a user's text; true when it is a request.
    fn user_text(&mut self, text: &str, index: usize, demonstration_prefixes: Option<&[String]>) -> bool {
        let collapsed = collapse_ws(text);
        let chars = collapsed.chars().count();
        let demonstration = match demonstration_prefixes {
            Some(prefixes) => is_demonstration(text, prefixes),
            None => is_demonstration(text, DEMONSTRATION_PREFIXES),
        };
        if demonstration {
            self.templates.demonstration(template_candidates(text, SENTENCE_CHARS));
            self.requests.push(UserRequest {
                text: cut_words(&collapsed, DEMONSTRATION_CHARS),
                chars,
                index,
                archived: None,
                demonstration: true,
            });
            return false;
        }
        let prose: Vec<String> = sentences(text);
        let constraints: Vec<&String> = prose.iter().filter(|s| is_constraint(s)).collect();
        for sentence in &constraints {
            self.constraints.push(cut_words(sentence, SENTENCE_CHARS));
        }
        self.templates.request(template_candidates(text, SENTENCE_CHARS));
        for token in prose_path_tokens(text) {
            self.reference(token, &[]);
        }
        // A message that only states constraints is listed under Constraints alone.
        let only_constraints = !constraints.is_empty() && constraints.len() == prose.len();
        let is_request = !only_constraints
            && (collapsed.split(' ').count() >= MIN_REQUEST_WORDS || self.requests.iter().all(|r| r.demonstration));
        if is_request {
            self.requests.push(UserRequest {
                text: cut_words(&collapsed, REQUEST_CHARS),
                chars,
                index,
                archived: None,
                demonstration: false,
            });
        }
        is_request
    }

    /// Decisions, and the step under way: the message's first intent ("Let's run the
    /// tests"), which its call carries out; later intents of it are the plan. A message
    /// without calls is an answer that ends the step under way, unless it states a new one.
    /// Returns whether the message set the step under way.
    fn assistant_text(&mut self, text: &str, has_calls: bool) -> bool {
        let mut intent = None;
        for sentence in sentences(text) {
            if is_decision(&sentence) {
                self.decisions.push(cut_words(&sentence, SENTENCE_CHARS));
            }
            if intent.is_none() && is_intent(&sentence) {
                intent = Some(cut_words(&sentence, SENTENCE_CHARS));
            }
        }
        if intent.is_some() || !has_calls {
            self.step_ended = intent.is_none();
            self.in_progress = intent;
            self.step_calls = None;
            return true;
        }
        false
    }

    /// Files a path-like token into read or identifiers (modified files are listed by the
    /// caller).
    fn reference(&mut self, token: &str, modified: &[String]) {
        let Some(kind) = path_kind(token) else { return };
        let path = cut_chars(token, PATH_CHARS).0.to_owned();
        if modified.contains(&path) {
            return;
        }
        match kind {
            PathKind::File if is_not_a_file(&path) => {}
            PathKind::File => self.files_read.push(path),
            PathKind::Identifier => self.identifiers.push(path),
        }
    }

    fn call(&mut self, call: &CallFacts) {
        for s in &call.strings {
            if !s.chars().any(char::is_whitespace) && path_kind(s) == Some(PathKind::File) {
                self.reference(s, &call.modified);
            } else {
                for token in path_tokens(s) {
                    self.reference(token, &call.modified);
                }
            }
        }
        for path in &call.modified {
            self.files_modified.push(cut_chars(path, PATH_CHARS).0.to_owned());
        }
        self.commands.push(call.key.clone());
    }

    fn results(&mut self, message: &Value, format: MessageFormat, calls: &HashMap<String, CallFacts>) {
        if !format::has_tool_result(message, format) {
            return;
        }
        let texts = format::result_texts(message, format);
        for id in format::result_ids(message, format) {
            if let Some(pending) = &mut self.step_calls {
                pending.retain(|c| *c != id);
            }
            let text = texts
                .iter()
                .filter(|t| t.call_id.as_deref().unwrap_or("") == id)
                .filter_map(|t| message.pointer(&t.pointer).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            let call = calls.get(&id);
            let looks_only = call.is_some_and(|c| c.read_only);
            let error = failure_line(&text, is_flagged(message, &id), looks_only);
            match (&error, call) {
                (Some(line), _) => self.errors.push(line.clone()),
                (None, Some(call)) => self.succeeded(call, &text),
                (None, None) => {}
            }
            let areas = call
                .map(|c| {
                    let mut areas = vec![area(&c.key)];
                    areas.extend(c.modified.iter().cloned());
                    areas
                })
                .unwrap_or_default();
            self.outcomes.push(Outcome {
                key: call.map(|c| c.key.clone()),
                areas,
                error,
                modified: call.map(|c| c.modified.clone()).unwrap_or_default(),
                read_only: call.is_some_and(|c| c.read_only),
            });
        }
    }

    /// Done records what was achieved: files changed and checks that passed, not every
    /// command run.
    fn succeeded(&mut self, call: &CallFacts, output: &str) {
        for path in &call.modified {
            self.changed.push(path.clone());
        }
        if call.runs_checks {
            let last = output.lines().rev().map(str::trim).find(|l| !l.is_empty());
            let key = code_span(&cut_words(&call.key, SHORT_COMMAND_CHARS));
            self.done.push(match last {
                Some(line) => format!("{key} succeeded: {}", cut_words(line, SHORT_COMMAND_CHARS)),
                None => format!("{key} succeeded"),
            });
        }
    }

    /// Next steps are the agent's own stated plan in its last message, less the step its
    /// call of that message is already taking; and the user's request when it is unanswered.
    fn plan(&mut self, last_assistant: Option<(String, bool)>, pending_request: Option<String>) {
        if let Some((text, has_calls)) = last_assistant {
            let mut steps = plan_steps(&text);
            if has_calls && !steps.is_empty() {
                steps.remove(0);
            }
            self.next_steps.extend(steps.iter().map(|s| cut_words(s, STEP_CHARS)));
        }
        if let Some(request) = pending_request {
            self.next_steps.push(format!(
                "Answer the user's latest request: {}",
                cut_words(&collapse_ws(&request), STEP_CHARS)
            ));
        }
    }
}

/// The text blocks of a message: a string content, or its text parts (`text`, and the
/// Responses `input_text` / `output_text`).
pub(crate) fn text_blocks(message: &Value) -> impl Iterator<Item = &str> {
    let content = message.get("content");
    let whole = content.and_then(Value::as_str);
    let parts = content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| format::is_text_part(b))
        .filter_map(|b| b.get("text").and_then(Value::as_str));
    whole.into_iter().chain(parts)
}

/// The tool marked the result of `id` as an error (Anthropic `is_error`).
pub(crate) fn is_flagged(message: &Value, id: &str) -> bool {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|b| {
            b.get("tool_use_id").and_then(Value::as_str) == Some(id)
                && b.get("is_error").and_then(Value::as_bool) == Some(true)
        })
}

/// The tag an agent harness wraps the notes it adds to a user message in (Claude Code's
/// `<system-reminder>`: the date, git attribution, tool hints): the harness's words, not the
/// user's, so never a request or a constraint.
const HARNESS_NOTE: (&str, &str) = ("<system-reminder>", "</system-reminder>");

/// `text` without the harness's notes.
pub(crate) fn without_harness_notes(text: &str) -> std::borrow::Cow<'_, str> {
    let (open, close) = HARNESS_NOTE;
    if !text.contains(open) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        kept.push_str(&rest[..start]);
        match rest[start..].find(close) {
            Some(end) => rest = &rest[start + end + close.len()..],
            // An unclosed note runs to the end of the text.
            None => rest = "",
        }
    }
    kept.push_str(rest);
    std::borrow::Cow::Owned(kept)
}

/// A text of a span for the findings: whether it is an output, the text, and, for an output,
/// the command that wrote it and the message's index.
type SpanText = (bool, String, Option<(String, usize)>);

/// The findings of a span (its later messages, kept by the compaction, count as use).
fn span_findings(span: &Span<'_>, calls: &HashMap<String, CallFacts>) -> Vec<String> {
    let mut texts: Vec<SpanText> = Vec::new();
    let said = |message: &Value, texts: &mut Vec<SpanText>| {
        let text: Vec<String> = text_blocks(message)
            .map(|t| without_harness_notes(t).into_owned())
            .collect();
        if !text.is_empty() {
            texts.push((false, text.join("\n"), None));
        }
        for call in format::tool_calls(message, span.format) {
            texts.push((false, call.arguments, None));
        }
    };
    for (position, message) in span.messages.iter().enumerate() {
        let index = span.indices.get(position).copied().unwrap_or(position);
        if !format::has_tool_result(message, span.format) {
            said(message, &mut texts);
            continue;
        }
        let results = format::result_texts(message, span.format);
        for id in format::result_ids(message, span.format) {
            let output: Vec<&str> = results
                .iter()
                .filter(|t| t.call_id.as_deref() == Some(id.as_str()))
                .filter_map(|t| message.pointer(&t.pointer)?.as_str())
                .collect();
            let key = calls.get(&id).map(|c| c.key.clone()).unwrap_or_default();
            texts.push((true, output.join("\n"), Some((key, index))));
        }
    }
    for message in span.kept {
        if !format::has_tool_result(message, span.format) {
            said(message, &mut texts);
        }
    }
    let view: Vec<Text<'_>> = texts
        .iter()
        .map(|(output, text, _)| if *output { Text::Output(text) } else { Text::Said(text) })
        .collect();
    findings(&view)
        .into_iter()
        .map(|f| {
            let value = code_span(&f.value);
            match &texts[f.output].2 {
                Some((key, index)) if !key.is_empty() => format!(
                    "{value} (from the output of {}, message {index})",
                    code_span(&cut_words(key, SHORT_COMMAND_CHARS))
                ),
                Some((_, index)) => format!("{value} (from a tool's output, message {index})"),
                None => value,
            }
        })
        .collect()
}

/// The arguments of every call in `messages`, one per line: what the agent did later.
pub(crate) fn later_calls(messages: &[Value], format: MessageFormat) -> String {
    let mut out = String::new();
    for call in messages.iter().flat_map(|m| format::tool_calls(m, format)) {
        out.push_str(&call.arguments);
        out.push('\n');
    }
    out
}

/// Whether a step names (as code) something a later call used: it was taken.
pub(crate) fn taken_later(step: &str, later_calls: &str) -> bool {
    step.split('`')
        .skip(1)
        .step_by(2)
        .any(|named| named.chars().count() >= 3 && later_calls.contains(named))
}
