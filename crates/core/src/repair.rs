//! The last pass before a message list leaves satchel: make it valid for its format.
//!
//! A tool call without its result, or a result without its call, is the failure users of every
//! context manager report most (`tool_use ids were found without tool_result blocks`): the API
//! rejects the whole request and the agent is stuck until someone edits its history by hand.
//! Lists break in too many ways to prevent each one — a client died between a call and its
//! result, a result was sent twice, a cut landed between a call and its answer — so instead of
//! trusting every producer, each outgoing list goes through [`repair`]. It changes only what the
//! format requires and reports every change; a valid list comes back untouched, so the pass costs
//! well-behaved clients nothing and repairing twice changes nothing the second time.
//!
//! Repairs shape the request only: the session and its archive keep what the client sent.

mod responses;

use std::collections::HashMap;
use std::iter;
use std::mem;

use serde_json::{Value, json};

use crate::format::{self, MessageFormat};

/// The result satchel writes for a call nobody answered. The model reads it, so it says plainly
/// that the call has no result rather than pretending the tool returned nothing.
const NO_RESULT: &str = "[satchel: no result was recorded for this tool call]";

/// The text of the user message put before a list that starts with an assistant message.
const LEADING_USER: &str = "[satchel: the conversation continues]";

/// One change the repair made, reported to the client.
///
/// Indices are positions in the returned list. For something removed, that is the position of
/// the message that now stands where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// An unanswered call got a synthetic result saying so, in the message at `index`.
    SyntheticResult {
        /// The message holding the synthetic result.
        index: usize,
        /// The call it answers.
        call_id: String,
    },
    /// A result that answers no open call of the preceding assistant message (a foreign id, a
    /// second answer, or one arriving after the conversation moved on) was dropped from the
    /// request (not from the session/archive).
    DroppedOrphanResult {
        /// The message it was removed from, or where its message stood.
        index: usize,
        /// The id the result claimed to answer (empty when it named none).
        call_id: String,
    },
    /// Anthropic: a message was merged into the message of the same role at `index`, or an empty
    /// message standing there was dropped, so that roles alternate.
    MergedSameRole {
        /// The message that absorbed it, or where the empty message stood.
        index: usize,
    },
    /// Anthropic: the tool results of the user message at `index` were moved before its other
    /// blocks, where the API requires them.
    MovedResultsFirst {
        /// The user message.
        index: usize,
    },
    /// Anthropic: the list started with an assistant message, so a placeholder user message
    /// was put first.
    InsertedLeadingUser,
    /// Anthropic: a text block with no text or only whitespace, which the API rejects, was
    /// dropped from the message at `index` (one per block). A message left with no content is
    /// then dropped as empty, which is reported as [`Repair::MergedSameRole`].
    DroppedEmptyText {
        /// The message it was removed from, or where its message stood.
        index: usize,
    },
}

/// A message as the repair pass handles it: read in place, taken apart only when it must
/// change.
///
/// The daemon hands in its cached rendered messages by reference, so repairing a valid list of
/// thousands of messages copies none of them; only a message the pass changes becomes owned.
pub trait RepairItem: Sized {
    /// The message.
    fn value(&self) -> &Value;
    /// The message as an owned value, to be changed.
    fn into_value(self) -> Value;
    /// An item for a message the pass wrote or changed.
    fn from_value(value: Value) -> Self;
}

impl RepairItem for Value {
    fn value(&self) -> &Value {
        self
    }

    fn into_value(self) -> Value {
        self
    }

    fn from_value(value: Value) -> Self {
        value
    }
}

/// Makes `messages` valid for `format`; returns the repaired list and what changed.
///
/// A valid list comes back identical with no repairs. With `allow_pending_tail`, calls of an
/// assistant message at the very end (OpenAI: followed only by some of its results) are left
/// unanswered, because the client is about to run them; otherwise they get synthetic results.
/// Runs in time linear in the size of the list.
pub fn repair<M: RepairItem>(
    messages: Vec<M>,
    format: MessageFormat,
    allow_pending_tail: bool,
) -> (Vec<M>, Vec<Repair>) {
    match format {
        MessageFormat::Openai => repair_openai(messages, allow_pending_tail),
        MessageFormat::Anthropic => repair_anthropic(messages, allow_pending_tail),
        MessageFormat::OpenaiResponses => responses::repair(messages, allow_pending_tail),
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// The calls of one assistant turn that still await an answer.
///
/// Counting by id keeps each answer O(1), so a turn with many parallel calls stays linear;
/// `order` keeps call order for the synthetic results.
#[derive(Default)]
struct OpenCalls {
    order: Vec<String>,
    waiting: HashMap<String, usize>,
}

impl OpenCalls {
    fn of(message: &Value, format: MessageFormat) -> Self {
        let order: Vec<String> = format::tool_call_ids(message, format)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut waiting = HashMap::with_capacity(order.len());
        for id in &order {
            *waiting.entry(id.clone()).or_insert(0) += 1;
        }
        Self { order, waiting }
    }

    /// Marks a call with `id` answered; false when no open call has that id.
    fn answer(&mut self, id: &str) -> bool {
        take_one(&mut self.waiting, id)
    }

    /// The ids still unanswered, in call order.
    fn unanswered(self) -> Vec<String> {
        let Self { order, mut waiting } = self;
        order.into_iter().filter(|id| take_one(&mut waiting, id)).collect()
    }
}

fn take_one(waiting: &mut HashMap<String, usize>, id: &str) -> bool {
    match waiting.get_mut(id) {
        Some(left) if *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    }
}

fn repair_openai<M: RepairItem>(messages: Vec<M>, allow_pending_tail: bool) -> (Vec<M>, Vec<Repair>) {
    let mut out = Vec::with_capacity(messages.len());
    let mut repairs = Vec::new();
    // Calls of the nearest preceding assistant message while its run of `tool` messages lasts;
    // `None` once another message ended the run, since later results can no longer answer.
    let mut run: Option<OpenCalls> = None;
    for message in messages {
        if role(message.value()) == Some("tool") {
            let id = message
                .value()
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            if run.as_mut().is_some_and(|calls| calls.answer(id)) {
                out.push(message);
            } else {
                repairs.push(Repair::DroppedOrphanResult {
                    index: out.len(),
                    call_id: id.to_owned(),
                });
            }
            continue;
        }
        if let Some(calls) = run.take() {
            close_openai(calls, &mut out, &mut repairs);
        }
        if role(message.value()) == Some("assistant") {
            run = Some(OpenCalls::of(message.value(), MessageFormat::Openai));
        }
        out.push(message);
    }
    if let Some(calls) = run
        && !allow_pending_tail
    {
        close_openai(calls, &mut out, &mut repairs);
    }
    (out, repairs)
}

/// Ends a run of `tool` messages with a synthetic result for each call it left unanswered.
fn close_openai<M: RepairItem>(calls: OpenCalls, out: &mut Vec<M>, repairs: &mut Vec<Repair>) {
    for call_id in calls.unanswered() {
        repairs.push(Repair::SyntheticResult {
            index: out.len(),
            call_id: call_id.clone(),
        });
        out.push(M::from_value(
            json!({"role": "tool", "tool_call_id": call_id, "content": NO_RESULT}),
        ));
    }
}

/// What was dropped inside or just before a turn, reported at its position.
#[derive(Default, Clone, Copy)]
struct Drops {
    /// Blank text blocks.
    texts: usize,
    /// Empty messages (some of them empty only once their blank texts were dropped).
    messages: usize,
}

impl Drops {
    fn add(&mut self, other: Drops) {
        self.texts += other.texts;
        self.messages += other.messages;
    }
}

/// Consecutive non-empty messages of one role, which the API needs as a single message.
struct Turn<M> {
    messages: Vec<M>,
    dropped: Drops,
}

impl<M> Default for Turn<M> {
    fn default() -> Self {
        Turn {
            messages: Vec::new(),
            dropped: Drops::default(),
        }
    }
}

/// The Anthropic repair, turn by turn.
///
/// Grouping by turn before pairing means a call and its result survive a same-role split (two
/// assistant messages, then the results of both) instead of being torn apart by a synthetic
/// result inserted between them.
struct Anthropic<M> {
    out: Vec<M>,
    repairs: Vec<Repair>,
    /// Calls of the last assistant turn, until the turn after it answers them.
    open: Option<OpenCalls>,
}

fn repair_anthropic<M: RepairItem>(messages: Vec<M>, allow_pending_tail: bool) -> (Vec<M>, Vec<Repair>) {
    let mut state = Anthropic {
        out: Vec::with_capacity(messages.len() + 1),
        repairs: Vec::new(),
        open: None,
    };
    let mut turn = Turn::default();
    let mut dropped = Drops::default();
    for message in messages {
        let (message, blank) = drop_blank_texts(message);
        dropped.texts += blank;
        // The API rejects empty messages, and one between two messages of a role would keep
        // them from being merged. A message that held only blank text is one too: it has no
        // call or result, so dropping it and joining its neighbours leaves every pair intact.
        if is_empty(message.value()) {
            dropped.messages += 1;
            continue;
        }
        if turn
            .messages
            .first()
            .is_some_and(|first: &M| role(first.value()) != role(message.value()))
        {
            state.finish_turn(mem::take(&mut turn));
        }
        turn.dropped.add(mem::take(&mut dropped));
        turn.messages.push(message);
    }
    if !turn.messages.is_empty() {
        state.finish_turn(turn);
    }
    state.report_dropped(dropped, state.out.len());
    if !allow_pending_tail {
        state.close_calls();
    }
    (state.out, state.repairs)
}

/// No content, or only whitespace, which the API rejects as it rejects a blank text block.
fn is_empty(message: &Value) -> bool {
    match message.get("content") {
        None | Some(Value::Null) => true,
        Some(Value::String(text)) => text.trim().is_empty(),
        Some(Value::Array(blocks)) => blocks.is_empty(),
        Some(_) => false,
    }
}

/// A text block the API rejects: `text` empty or only whitespace ("text content blocks must
/// be non-empty", "must contain non-whitespace text").
fn is_blank_text(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("text")
        && block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|text| text.trim().is_empty())
}

/// `message` without its blank text blocks, and how many there were. A message that has none
/// is passed on as it came, without being copied.
fn drop_blank_texts<M: RepairItem>(message: M) -> (M, usize) {
    let blank = match message.value().get("content") {
        Some(Value::Array(blocks)) => blocks.iter().filter(|block| is_blank_text(block)).count(),
        _ => 0,
    };
    if blank == 0 {
        return (message, 0);
    }
    let mut message = message.into_value();
    if let Some(Value::Array(blocks)) = message.get_mut("content") {
        blocks.retain(|block| !is_blank_text(block));
    }
    (M::from_value(message), blank)
}

fn is_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

fn result_id(block: &Value) -> &str {
    block.get("tool_use_id").and_then(Value::as_str).unwrap_or("")
}

fn synthetic_block(call_id: String) -> Value {
    json!({"type": "tool_result", "tool_use_id": call_id, "content": NO_RESULT, "is_error": true})
}

/// Content as blocks, the form in which messages can be joined.
fn into_blocks(content: Value) -> Vec<Value> {
    match content {
        Value::Array(blocks) => blocks,
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

fn take_content(message: &mut Value) -> Value {
    message.get_mut("content").map(Value::take).unwrap_or(Value::Null)
}

fn set_content(message: &mut Value, blocks: Vec<Value>) {
    if let Some(fields) = message.as_object_mut() {
        fields.insert("content".to_owned(), Value::Array(blocks));
    }
}

impl<M: RepairItem> Anthropic<M> {
    fn finish_turn(&mut self, turn: Turn<M>) {
        if turn.messages.first().and_then(|m| role(m.value())) == Some("user") {
            self.user_turn(turn);
        } else {
            self.other_turn(turn);
        }
    }

    /// An assistant turn (or one of a role the API does not know, treated alike) becomes one
    /// message, after a user message that starts the list and closes calls left open.
    fn other_turn(&mut self, turn: Turn<M>) {
        // Only a turn of an unknown role can follow an assistant turn directly.
        self.close_calls();
        if self.out.is_empty() {
            self.out
                .push(M::from_value(json!({"role": "user", "content": LEADING_USER})));
            self.repairs.push(Repair::InsertedLeadingUser);
        }
        let mut messages = turn.messages;
        // A user turn that held nothing but orphans is gone; the turns around it join.
        if self.out.last().map(|m| role(m.value())) == messages.first().map(|m| role(m.value()))
            && let Some(last) = self.out.pop()
        {
            messages.insert(0, last);
        }
        let mut messages = messages.into_iter();
        let Some(first) = messages.next() else {
            return;
        };
        let index = self.out.len();
        let message = self.join(first, messages, index);
        self.open = Some(OpenCalls::of(message.value(), MessageFormat::Anthropic));
        self.out.push(message);
        self.report_dropped(turn.dropped, index);
    }

    /// Joins `rest` into `first`, whose other fields the joined message keeps.
    fn join(&mut self, first: M, rest: impl ExactSizeIterator<Item = M>, index: usize) -> M {
        if rest.len() == 0 {
            return first;
        }
        let mut first = first.into_value();
        let mut blocks = into_blocks(take_content(&mut first));
        for message in rest {
            self.repairs.push(Repair::MergedSameRole { index });
            blocks.extend(into_blocks(take_content(&mut message.into_value())));
        }
        set_content(&mut first, blocks);
        M::from_value(first)
    }

    /// A user turn answers the calls of the assistant turn before it: its answers go first,
    /// foreign and repeated answers go, missing ones are written, and it becomes one message.
    fn user_turn(&mut self, turn: Turn<M>) {
        let index = self.out.len();
        let mut open = self.open.take().unwrap_or_default();
        // Every result's fate is decided before anything is touched, so that a turn needing no
        // change is passed on exactly as it came.
        let mut answers = Vec::new();
        let mut seen_other = false;
        let mut moved = false;
        for message in &turn.messages {
            match message.value().get("content") {
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        if !is_result(block) {
                            seen_other = true;
                            continue;
                        }
                        let answer = open.answer(result_id(block));
                        if answer {
                            moved |= seen_other;
                        } else {
                            self.repairs.push(Repair::DroppedOrphanResult {
                                index,
                                call_id: result_id(block).to_owned(),
                            });
                        }
                        answers.push(answer);
                    }
                }
                _ => seen_other = true,
            }
        }
        let missing = open.unanswered();
        let mut messages = turn.messages.into_iter();
        if messages.len() == 1 && !moved && missing.is_empty() && !answers.contains(&false) {
            self.out.extend(messages);
            self.report_dropped(turn.dropped, index);
            return;
        }

        let Some(first) = messages.next() else {
            return;
        };
        let mut first = first.into_value();
        let merged = messages.len();
        let mut answers = answers.into_iter();
        let mut results = Vec::new();
        let mut others = Vec::new();
        for content in iter::once(take_content(&mut first)).chain(messages.map(|m| take_content(&mut m.into_value()))) {
            match content {
                Value::Array(blocks) => {
                    for block in blocks {
                        if !is_result(&block) {
                            others.push(block);
                        } else if answers.next() == Some(true) {
                            results.push(block);
                        }
                    }
                }
                other => others.extend(into_blocks(other)),
            }
        }
        for call_id in missing {
            self.repairs.push(Repair::SyntheticResult {
                index,
                call_id: call_id.clone(),
            });
            results.push(synthetic_block(call_id));
        }
        self.report_dropped(turn.dropped, index);
        results.append(&mut others);
        if results.is_empty() {
            // It carried only orphans, each reported as dropped.
            return;
        }
        if moved {
            self.repairs.push(Repair::MovedResultsFirst { index });
        }
        self.repairs
            .extend(iter::repeat_n(Repair::MergedSameRole { index }, merged));
        set_content(&mut first, results);
        self.out.push(M::from_value(first));
    }

    /// Answers the calls still open with a user message of synthetic results.
    fn close_calls(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.out.len();
        let mut blocks = Vec::new();
        for call_id in open.unanswered() {
            self.repairs.push(Repair::SyntheticResult {
                index,
                call_id: call_id.clone(),
            });
            blocks.push(synthetic_block(call_id));
        }
        if !blocks.is_empty() {
            self.out.push(M::from_value(json!({"role": "user", "content": blocks})));
        }
    }

    fn report_dropped(&mut self, dropped: Drops, index: usize) {
        self.repairs
            .extend(iter::repeat_n(Repair::DroppedEmptyText { index }, dropped.texts));
        self.repairs
            .extend(iter::repeat_n(Repair::MergedSameRole { index }, dropped.messages));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{check_pairs, result_ids, tool_calls};
    use proptest::collection::vec;
    use proptest::prelude::*;

    const OPENAI: MessageFormat = MessageFormat::Openai;
    const ANTHROPIC: MessageFormat = MessageFormat::Anthropic;
    const RESPONSES: MessageFormat = MessageFormat::OpenaiResponses;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn oa_assistant(ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}))
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls, "reasoning": "kept"})
    }

    fn oa_tool(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": format!("out {id}"), "name": "kept"})
    }

    fn oa_synthetic(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": NO_RESULT})
    }

    fn an_assistant(ids: &[&str]) -> Value {
        let mut blocks = vec![json!({"type": "text", "text": "let me look"})];
        blocks.extend(
            ids.iter()
                .map(|id| json!({"type": "tool_use", "id": id, "name": "bash", "input": {"command": "ls"}})),
        );
        json!({"role": "assistant", "content": blocks})
    }

    fn an_result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": format!("out {id}")}],
               "cache_control": {"type": "ephemeral"}})
    }

    fn an_synthetic(id: &str) -> Value {
        synthetic_block(id.to_owned())
    }

    fn text(text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    fn an_user(blocks: Vec<Value>) -> Value {
        json!({"role": "user", "content": blocks})
    }

    fn synthetic(index: usize, id: &str) -> Repair {
        Repair::SyntheticResult {
            index,
            call_id: id.to_owned(),
        }
    }

    fn dropped(index: usize, id: &str) -> Repair {
        Repair::DroppedOrphanResult {
            index,
            call_id: id.to_owned(),
        }
    }

    #[test]
    fn openai_valid_list_is_untouched() {
        let messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "list", "x-client": {"any": 1}}),
            oa_assistant(&["c1", "c2"]),
            oa_tool("c2"),
            oa_tool("c1"),
            json!({"role": "assistant", "content": "done"}),
            oa_assistant(&["c3", "c4"]),
            oa_tool("c4"),
        ];
        assert_eq!(repair(messages.clone(), OPENAI, true), (messages, vec![]));
    }

    #[test]
    fn openai_missing_results_are_written_after_the_run() {
        let messages = vec![
            user("go"),
            oa_assistant(&["c1", "c2", "c3"]),
            oa_tool("c2"),
            user("next"),
        ];
        let (out, repairs) = repair(messages, OPENAI, true);
        assert_eq!(
            out,
            [
                user("go"),
                oa_assistant(&["c1", "c2", "c3"]),
                oa_tool("c2"),
                oa_synthetic("c1"),
                oa_synthetic("c3"),
                user("next")
            ]
        );
        assert_eq!(repairs, [synthetic(3, "c1"), synthetic(4, "c3")]);
    }

    #[test]
    fn openai_orphan_and_repeated_results_are_dropped() {
        let messages = vec![
            oa_tool("c0"),
            user("go"),
            oa_assistant(&["c1"]),
            oa_tool("zz"),
            oa_tool("c1"),
            oa_tool("c1"),
            user("more"),
            oa_tool("c1"),
            json!({"role": "assistant", "content": "no calls"}),
            oa_tool("c1"),
        ];
        let (out, repairs) = repair(messages, OPENAI, false);
        assert_eq!(
            out,
            [
                user("go"),
                oa_assistant(&["c1"]),
                oa_tool("c1"),
                user("more"),
                json!({"role": "assistant", "content": "no calls"})
            ]
        );
        assert_eq!(
            repairs,
            [
                dropped(0, "c0"),
                dropped(2, "zz"),
                dropped(3, "c1"),
                dropped(4, "c1"),
                dropped(5, "c1")
            ]
        );
    }

    #[test]
    fn openai_result_after_another_message_no_longer_answers() {
        let messages = vec![user("go"), oa_assistant(&["c1"]), user("hurry"), oa_tool("c1")];
        let (out, repairs) = repair(messages, OPENAI, true);
        assert_eq!(
            out,
            [user("go"), oa_assistant(&["c1"]), oa_synthetic("c1"), user("hurry")]
        );
        assert_eq!(repairs, [synthetic(2, "c1"), dropped(4, "c1")]);
    }

    #[test]
    fn openai_pending_tail_waits_only_when_allowed() {
        let messages = vec![user("go"), oa_assistant(&["c1", "c2"]), oa_tool("c1")];
        assert_eq!(repair(messages.clone(), OPENAI, true), (messages.clone(), vec![]));
        let (out, repairs) = repair(messages, OPENAI, false);
        assert_eq!(out[3], oa_synthetic("c2"));
        assert_eq!(repairs, [synthetic(3, "c2")]);
    }

    #[test]
    fn anthropic_valid_list_is_untouched() {
        let messages = vec![
            json!({"role": "user", "content": "list", "x-client": 1}),
            an_assistant(&["t1", "t2"]),
            an_user(vec![an_result("t2"), an_result("t1"), text("go on")]),
            json!({"role": "assistant", "content": "done"}),
            an_user(vec![
                json!({"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}),
            ]),
            an_assistant(&["t3"]),
        ];
        assert_eq!(repair(messages.clone(), ANTHROPIC, true), (messages, vec![]));
    }

    #[test]
    fn anthropic_missing_results_go_first_in_the_next_user_message() {
        let messages = vec![
            user("go"),
            an_assistant(&["t1", "t2"]),
            an_user(vec![an_result("t2"), text("and")]),
            an_assistant(&["t3"]),
            user("stop"),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, true);
        assert_eq!(out[2], an_user(vec![an_result("t2"), an_synthetic("t1"), text("and")]));
        // A string content becomes a text block behind the results.
        assert_eq!(out[4], an_user(vec![an_synthetic("t3"), text("stop")]));
        assert_eq!(repairs, [synthetic(2, "t1"), synthetic(4, "t3")]);
    }

    #[test]
    fn anthropic_unanswered_calls_at_the_end_get_a_user_message() {
        let messages = vec![user("go"), an_assistant(&["t1", "t2"])];
        assert_eq!(repair(messages.clone(), ANTHROPIC, true), (messages.clone(), vec![]));
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        assert_eq!(out[2], an_user(vec![an_synthetic("t1"), an_synthetic("t2")]));
        assert_eq!(repairs, [synthetic(2, "t1"), synthetic(2, "t2")]);
    }

    #[test]
    fn anthropic_orphan_and_repeated_results_are_dropped() {
        let messages = vec![
            user("go"),
            an_assistant(&["t1"]),
            an_user(vec![an_result("t1"), an_result("t1"), an_result("zz"), text("ok")]),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        assert_eq!(out[2], an_user(vec![an_result("t1"), text("ok")]));
        assert_eq!(repairs, [dropped(2, "t1"), dropped(2, "zz")]);
    }

    #[test]
    fn anthropic_message_of_only_orphans_goes_and_its_neighbours_join() {
        let messages = vec![
            user("go"),
            json!({"role": "assistant", "content": "thinking"}),
            an_user(vec![an_result("zz")]),
            an_assistant(&["t1"]),
            an_user(vec![an_result("t1")]),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        let mut joined = vec![text("thinking")];
        joined.extend(an_assistant(&["t1"])["content"].as_array().unwrap().iter().cloned());
        assert_eq!(
            out,
            [
                user("go"),
                json!({"role": "assistant", "content": joined}),
                an_user(vec![an_result("t1")])
            ]
        );
        assert_eq!(repairs, [dropped(2, "zz"), Repair::MergedSameRole { index: 1 }]);
    }

    #[test]
    fn anthropic_same_role_runs_merge_with_results_first() {
        let messages = vec![
            user("go"),
            an_assistant(&["t1"]),
            an_assistant(&["t2"]),
            user("while you wait"),
            an_user(vec![an_result("t2"), an_result("t1")]),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        let mut calls = an_assistant(&["t1"])["content"].as_array().unwrap().clone();
        calls.extend(an_assistant(&["t2"])["content"].as_array().unwrap().iter().cloned());
        assert_eq!(
            out,
            [
                user("go"),
                json!({"role": "assistant", "content": calls}),
                an_user(vec![an_result("t2"), an_result("t1"), text("while you wait")])
            ]
        );
        assert_eq!(
            repairs,
            [
                Repair::MergedSameRole { index: 1 },
                Repair::MovedResultsFirst { index: 2 },
                Repair::MergedSameRole { index: 2 }
            ]
        );
    }

    #[test]
    fn anthropic_results_behind_text_move_first() {
        let messages = vec![
            user("go"),
            an_assistant(&["t1"]),
            an_user(vec![text("here"), an_result("t1")]),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        assert_eq!(out[2], an_user(vec![an_result("t1"), text("here")]));
        assert_eq!(repairs, [Repair::MovedResultsFirst { index: 2 }]);
    }

    #[test]
    fn anthropic_list_starts_with_user_and_empty_messages_go() {
        let messages = vec![
            json!({"role": "assistant", "content": "earlier answer"}),
            json!({"role": "user", "content": ""}),
            json!({"role": "assistant", "content": []}),
            user("next"),
            json!({"role": "assistant"}),
        ];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        assert_eq!(
            out,
            [
                user(LEADING_USER),
                json!({"role": "assistant", "content": "earlier answer"}),
                user("next")
            ]
        );
        assert_eq!(
            repairs,
            [
                Repair::InsertedLeadingUser,
                Repair::MergedSameRole { index: 2 },
                Repair::MergedSameRole { index: 2 },
                Repair::MergedSameRole { index: 3 }
            ]
        );
    }

    /// Repairs `messages`, checks that the list is valid and that repairing it again changes
    /// nothing, and compares the report and the list with the snapshot `name`.
    fn snapshot(name: &str, messages: Vec<Value>, format: MessageFormat, allow: bool) -> Vec<Value> {
        let (out, repairs) = repair(messages, format, allow);
        assert_eq!(validity(&out, format, allow), Ok(()), "{out:#?}");
        assert_eq!(repair(out.clone(), format, allow), (out.clone(), vec![]));
        let mut text = String::new();
        for r in &repairs {
            text.push_str(&format!("{r:?}\n"));
        }
        text.push_str("--\n");
        for (i, message) in out.iter().enumerate() {
            text.push_str(&format!("{i} {message}\n"));
        }
        insta::assert_snapshot!(name, text);
        out
    }

    #[test]
    fn anthropic_blank_text_blocks_are_dropped() {
        // The shape of a real trajectory: a lone newline before the call.
        let blank_first = json!({"role": "assistant", "content": [
            text("\n"), {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]});
        let messages = vec![
            user("go"),
            blank_first,
            an_user(vec![text(""), an_result("t1"), text(" \t "), text("next")]),
            an_assistant(&["t2"]),
            an_user(vec![an_result("t2")]),
        ];
        let out = snapshot(
            "anthropic_blank_text_blocks_are_dropped",
            messages.clone(),
            ANTHROPIC,
            false,
        );
        // Messages without blank text pass unchanged; a blank block before the results does
        // not count as moving them first.
        assert_eq!((&out[0], &out[3], &out[4]), (&messages[0], &messages[3], &messages[4]));
    }

    #[test]
    fn anthropic_message_of_only_blank_text_goes_and_its_neighbours_join() {
        let messages = vec![
            user("go"),
            an_assistant(&["t1"]),
            an_user(vec![an_result("t1")]),
            json!({"role": "assistant", "content": [text("")]}),
            user("next"),
            json!({"role": "assistant", "content": "ok"}),
            json!({"role": "user", "content": " \n"}),
            json!({"role": "user", "content": "and then?"}),
            an_assistant(&["t2"]),
            // A blank prefill at the end, after a pending call.
            json!({"role": "assistant", "content": [text(" "), text("")]}),
        ];
        snapshot(
            "anthropic_message_of_only_blank_text_goes_and_its_neighbours_join",
            messages,
            ANTHROPIC,
            true,
        );
    }

    #[test]
    fn openai_blank_content_is_left_alone() {
        // OpenAI accepts empty and blank content.
        let messages = vec![
            user(""),
            json!({"role": "assistant", "content": [{"type": "text", "text": ""}]}),
            user(" \n"),
            json!({"role": "assistant", "content": "", "tool_calls": oa_assistant(&["c1"])["tool_calls"]}),
            oa_tool("c1"),
        ];
        assert_eq!(repair(messages.clone(), OPENAI, false), (messages, vec![]));
    }

    #[test]
    fn huge_turns_repair_in_linear_time() {
        // Quadratic matching would take minutes here; linear takes milliseconds.
        let ids: Vec<String> = (0..50_000).map(|i| format!("c{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut messages = vec![user("go"), oa_assistant(&ids)];
        messages.extend(ids.iter().rev().step_by(2).map(|id| oa_tool(id)));
        let (out, repairs) = repair(messages, OPENAI, false);
        assert_eq!((out.len(), repairs.len()), (2 + ids.len(), ids.len() / 2));

        let results = ids.iter().rev().map(|id| an_result(id)).collect();
        let messages = vec![user("go"), an_assistant(&ids), user("first"), an_user(results)];
        let (out, repairs) = repair(messages, ANTHROPIC, false);
        assert_eq!(out.len(), 3);
        assert_eq!(repairs.len(), 2);
    }

    /// Which id a generated result claims to answer.
    #[derive(Debug, Clone)]
    enum Pick {
        /// A call of the latest assistant message (modulo its call count).
        Open(usize),
        /// Any call made so far: repeats and answers to older turns.
        Earlier(usize),
        /// An id no call has.
        Foreign,
    }

    /// One step of a generated, possibly broken conversation.
    #[derive(Debug, Clone)]
    enum Step {
        /// A user message, its text as a string or as a block.
        User { blocks: bool },
        /// An assistant message with 0-3 calls, with or without text, and (Anthropic) maybe
        /// with a blank text block first, as some agents send.
        Assistant { calls: usize, text: bool, blank: bool },
        /// Results (OpenAI: a run of `tool` messages; Anthropic: one user message, maybe with
        /// text before or after them, and maybe with a blank text block before them).
        Results {
            picks: Vec<Pick>,
            text_before: bool,
            text_after: bool,
            blank: bool,
        },
        /// A message with empty content.
        Empty { user: bool },
        /// A message of blank text only (Anthropic: blank text blocks; OpenAI: a whitespace
        /// string, which OpenAI accepts).
        Blank { user: bool },
    }

    fn step() -> impl Strategy<Value = Step> {
        let pick = prop_oneof![
            4 => (0usize..4).prop_map(Pick::Open),
            1 => (0usize..16).prop_map(Pick::Earlier),
            1 => Just(Pick::Foreign),
        ];
        prop_oneof![
            2 => any::<bool>().prop_map(|blocks| Step::User { blocks }),
            3 => (0usize..4, any::<bool>(), prop::bool::weighted(0.2))
                .prop_map(|(calls, text, blank)| Step::Assistant { calls, text, blank }),
            3 => (vec(pick, 1..4), any::<bool>(), any::<bool>(), prop::bool::weighted(0.2))
                .prop_map(|(picks, text_before, text_after, blank)| Step::Results { picks, text_before, text_after, blank }),
            1 => any::<bool>().prop_map(|user| Step::Empty { user }),
            1 => any::<bool>().prop_map(|user| Step::Blank { user }),
        ]
    }

    /// Makes messages with unique texts and call ids, remembering the calls made.
    #[derive(Default)]
    struct Builder {
        n: usize,
        last_calls: Vec<String>,
        all_calls: Vec<String>,
    }

    impl Builder {
        fn fresh(&mut self, prefix: &str) -> String {
            self.n += 1;
            format!("{prefix}{}", self.n)
        }

        fn user(&mut self, blocks: bool) -> Value {
            let said = self.fresh("asked ");
            if blocks {
                an_user(vec![
                    json!({"type": "text", "text": said, "cache_control": {"type": "ephemeral"}}),
                ])
            } else {
                json!({"role": "user", "content": said, "x-client": 1})
            }
        }

        /// An assistant turn: one message, or in the Responses format a reasoning item, the
        /// text and one item per call.
        fn assistant(&mut self, format: MessageFormat, calls: usize, speaks: bool) -> Vec<Value> {
            let ids: Vec<String> = (0..calls).map(|_| self.fresh("call")).collect();
            self.all_calls.extend(ids.iter().cloned());
            self.last_calls.clone_from(&ids);
            let said = speaks.then(|| self.fresh("said "));
            let message = match format {
                MessageFormat::OpenaiResponses => {
                    let mut items =
                        vec![json!({"type": "reasoning", "summary": [], "encrypted_content": self.fresh("sig")})];
                    items.extend(said.map(|said| json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": said}]})));
                    items.extend(ids.iter().map(
                        |id| json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": "{}"}),
                    ));
                    return items;
                }
                MessageFormat::Openai => {
                    let mut message = json!({"role": "assistant", "content": said, "x-keep": 1});
                    if !ids.is_empty() {
                        let calls: Vec<Value> = ids
                            .iter()
                            .map(|id| {
                                json!({"id": id, "type": "function",
                            "function": {"name": "bash", "arguments": "{}"}})
                            })
                            .collect();
                        message["tool_calls"] = calls.into();
                    }
                    message
                }
                MessageFormat::Anthropic => {
                    let mut blocks: Vec<Value> = said.into_iter().map(|said| text(&said)).collect();
                    blocks.extend(
                        ids.iter()
                            .map(|id| json!({"type": "tool_use", "id": id, "name": "bash", "input": {}})),
                    );
                    json!({"role": "assistant", "content": blocks})
                }
            };
            vec![message]
        }

        fn result(&mut self, format: MessageFormat, id: &str) -> Value {
            let out = self.fresh("out ");
            match format {
                MessageFormat::Openai => json!({"role": "tool", "tool_call_id": id, "content": out, "x-keep": 1}),
                MessageFormat::Anthropic => json!({"type": "tool_result", "tool_use_id": id,
                    "content": [{"type": "text", "text": out}], "cache_control": {"type": "ephemeral"}}),
                MessageFormat::OpenaiResponses => {
                    json!({"type": "function_call_output", "call_id": id, "output": out, "x-keep": 1})
                }
            }
        }

        fn pick(&mut self, pick: &Pick) -> String {
            match pick {
                Pick::Open(k) if !self.last_calls.is_empty() => self.last_calls[k % self.last_calls.len()].clone(),
                Pick::Earlier(k) if !self.all_calls.is_empty() => self.all_calls[k % self.all_calls.len()].clone(),
                _ => self.fresh("foreign"),
            }
        }
    }

    fn build(steps: &[Step], format: MessageFormat) -> Vec<Value> {
        let mut b = Builder::default();
        let mut messages = Vec::new();
        for step in steps {
            match step {
                Step::User { blocks } => messages.push(b.user(*blocks)),
                Step::Assistant {
                    calls,
                    text: speaks,
                    blank,
                } => {
                    let mut turn = b.assistant(format, *calls, *speaks);
                    if *blank && let Some(blocks) = turn[0]["content"].as_array_mut() {
                        blocks.insert(0, text("\n"));
                    }
                    messages.extend(turn);
                }
                Step::Results {
                    picks,
                    text_before,
                    text_after,
                    blank,
                } => {
                    let ids: Vec<String> = picks.iter().map(|pick| b.pick(pick)).collect();
                    let results: Vec<Value> = ids.iter().map(|id| b.result(format, id)).collect();
                    match format {
                        MessageFormat::Openai | MessageFormat::OpenaiResponses => messages.extend(results),
                        MessageFormat::Anthropic => {
                            let mut blocks = Vec::new();
                            if *blank {
                                blocks.push(text(""));
                            }
                            if *text_before {
                                blocks.push(text(&b.fresh("before ")));
                            }
                            blocks.extend(results);
                            if *text_after {
                                blocks.push(text(&b.fresh("after ")));
                            }
                            messages.push(an_user(blocks));
                        }
                    }
                }
                Step::Empty { user } => messages.push(if *user {
                    json!({"role": "user", "content": ""})
                } else {
                    json!({"role": "assistant", "content": []})
                }),
                Step::Blank { user } => {
                    let role = if *user { "user" } else { "assistant" };
                    messages.push(match format {
                        MessageFormat::Openai => json!({"role": role, "content": " \n"}),
                        MessageFormat::Anthropic => json!({"role": role, "content": [text(""), text(" \t\n")]}),
                        MessageFormat::OpenaiResponses => json!({"type": "message", "role": role, "content": " \n"}),
                    });
                }
            }
        }
        messages
    }

    /// A list valid by construction: rounds of (calls, rotation of their results, whether the
    /// user speaks after), then maybe a final assistant message with some results pending.
    fn valid(format: MessageFormat) -> impl Strategy<Value = (Vec<Value>, bool)> {
        (
            vec((0usize..4, 0usize..4, any::<bool>(), any::<bool>()), 0..6),
            prop::option::of((0usize..4, 0usize..4)),
            any::<bool>(),
        )
            .prop_map(move |(rounds, tail, allow)| {
                let mut b = Builder::default();
                let mut messages = vec![b.user(false)];
                for (calls, rotation, speaks, blocks) in rounds {
                    messages.extend(b.assistant(format, calls, true));
                    let mut ids = b.last_calls.clone();
                    ids.rotate_left(rotation % calls.max(1));
                    let results: Vec<Value> = ids.iter().map(|id| b.result(format, id)).collect();
                    match format {
                        MessageFormat::Openai | MessageFormat::OpenaiResponses => {
                            messages.extend(results);
                            if speaks {
                                messages.push(b.user(blocks));
                            }
                        }
                        MessageFormat::Anthropic if results.is_empty() => messages.push(b.user(blocks)),
                        MessageFormat::Anthropic => {
                            let mut content = results;
                            if speaks {
                                content.push(text(&b.fresh("after ")));
                            }
                            messages.push(an_user(content));
                        }
                    }
                }
                let mut pending = false;
                if let Some((calls, answered)) = tail {
                    messages.extend(b.assistant(format, calls, true));
                    let answered = if format != MessageFormat::Anthropic {
                        answered.min(calls)
                    } else {
                        0
                    };
                    let ids = b.last_calls.clone();
                    messages.extend(ids[..answered].iter().map(|id| b.result(format, id)));
                    pending = answered < calls;
                }
                (messages, allow || pending)
            })
    }

    /// Everything the API requires of the list, checked independently of the repair.
    fn validity(messages: &[Value], format: MessageFormat, allow_pending_tail: bool) -> Result<(), String> {
        check_pairs(messages, format).map_err(|v| format!("{v:?}"))?;
        if !allow_pending_tail && pending_tail(messages, format) {
            return Err("calls at the end are unanswered".into());
        }
        if format == MessageFormat::Anthropic {
            for (i, message) in messages.iter().enumerate() {
                if is_empty(message) {
                    return Err(format!("message {i} is empty"));
                }
                let expected = if i % 2 == 0 { "user" } else { "assistant" };
                if role(message) != Some(expected) {
                    return Err(format!("message {i} should be {expected}"));
                }
                let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
                let kinds: Vec<bool> = blocks.map(is_result).collect();
                if kinds.windows(2).any(|w| !w[0] && w[1]) {
                    return Err(format!("message {i} has a tool result behind another block"));
                }
                if blank_texts(message) > 0 {
                    return Err(format!("message {i} has a blank text block"));
                }
            }
        }
        Ok(())
    }

    /// The calls of the last assistant turn (Responses: the run of the assistant's items)
    /// when some of them await results.
    fn pending_calls(messages: &[Value], format: MessageFormat) -> Vec<String> {
        let Some(end) = messages.iter().rposition(|m| format::role_of(m) != Some("tool")) else {
            return Vec::new();
        };
        let start = if format == RESPONSES {
            messages[..=end]
                .iter()
                .rposition(|m| format::role_of(m) != Some("assistant"))
                .map_or(0, |i| i + 1)
        } else {
            end
        };
        let calls: Vec<String> = messages[start..=end]
            .iter()
            .flat_map(|m| tool_calls(m, format))
            .map(|c| c.id)
            .collect();
        let answered: usize = messages[end + 1..].iter().map(|m| result_ids(m, format).len()).sum();
        if answered < calls.len() { calls } else { Vec::new() }
    }

    fn pending_tail(messages: &[Value], format: MessageFormat) -> bool {
        !pending_calls(messages, format).is_empty()
    }

    /// A text block with no text or only whitespace, recognised without the repair's helper.
    fn blank(block: &Value) -> bool {
        block["type"] == "text"
            && block["text"]
                .as_str()
                .is_some_and(|t| t.chars().all(char::is_whitespace))
    }

    fn blank_texts(message: &Value) -> usize {
        let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
        blocks.filter(|b| blank(b)).count()
    }

    fn results(messages: &[Value], format: MessageFormat) -> usize {
        messages.iter().map(|m| result_ids(m, format).len()).sum()
    }

    fn synthetic_results(messages: &[Value], format: MessageFormat) -> usize {
        let contents: Vec<&Value> = match format {
            MessageFormat::OpenaiResponses => messages
                .iter()
                .filter(|m| format::has_tool_result(m, format))
                .filter_map(|m| m.get("output"))
                .collect(),
            MessageFormat::Openai => messages
                .iter()
                .filter(|m| role(m) == Some("tool"))
                .filter_map(|m| m.get("content"))
                .collect(),
            MessageFormat::Anthropic => messages
                .iter()
                .flat_map(|m| m.get("content").and_then(Value::as_array).into_iter().flatten())
                .filter(|b| is_result(b))
                .filter_map(|b| b.get("content"))
                .collect(),
        };
        contents.into_iter().filter(|c| *c == NO_RESULT).count()
    }

    /// The texts and calls of the conversation in order, tool results and blank texts aside.
    fn conversation(messages: &[Value], format: MessageFormat) -> Vec<String> {
        let mut seen = Vec::new();
        for message in messages.iter().filter(|m| role(m) != Some("tool")) {
            match message.get("content") {
                Some(Value::String(said)) if !said.trim().is_empty() && said != LEADING_USER => seen.push(said.clone()),
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        match block.get("type").and_then(Value::as_str) {
                            Some("text" | "output_text") if !blank(block) => {
                                seen.push(block["text"].as_str().unwrap_or("").to_owned());
                            }
                            Some("tool_use") => seen.push(block["id"].as_str().unwrap_or("").to_owned()),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            if format != MessageFormat::Anthropic {
                seen.extend(tool_calls(message, format).into_iter().map(|c| c.id));
            }
        }
        seen
    }

    fn check(input: Vec<Value>, format: MessageFormat, allow: bool) -> Result<(), TestCaseError> {
        let (out, repairs) = repair(input.clone(), format, allow);
        prop_assert_eq!(validity(&out, format, allow), Ok(()), "{:#?}", out);

        // Every call has exactly one result; only a pending tail may still wait.
        let mut answers: HashMap<String, usize> = HashMap::new();
        for id in out.iter().flat_map(|m| result_ids(m, format)) {
            *answers.entry(id).or_default() += 1;
        }
        let pending = if allow { pending_calls(&out, format) } else { Vec::new() };
        for message in &out {
            for call in tool_calls(message, format) {
                let n = answers.get(&call.id).copied().unwrap_or(0);
                if pending.contains(&call.id) {
                    prop_assert!(n <= 1, "{} answered {n} times", call.id);
                } else {
                    prop_assert_eq!(n, 1, "{} answered {} times", call.id, n);
                }
            }
        }

        // Nothing of the conversation is lost, and the report matches what changed.
        prop_assert_eq!(conversation(&out, format), conversation(&input, format));
        let synthetic = synthetic_results(&out, format);
        let reported_synthetic = repairs
            .iter()
            .filter(|r| matches!(r, Repair::SyntheticResult { .. }))
            .count();
        let reported_dropped = repairs
            .iter()
            .filter(|r| matches!(r, Repair::DroppedOrphanResult { .. }))
            .count();
        let reported_blank = repairs
            .iter()
            .filter(|r| matches!(r, Repair::DroppedEmptyText { .. }))
            .count();
        let blank: usize = match format {
            MessageFormat::Openai | MessageFormat::OpenaiResponses => 0,
            MessageFormat::Anthropic => input.iter().map(blank_texts).sum(),
        };
        prop_assert_eq!(reported_blank, blank);
        prop_assert_eq!(reported_synthetic, synthetic);
        prop_assert_eq!(
            reported_dropped,
            results(&input, format) + synthetic - results(&out, format)
        );
        for r in &repairs {
            if let Repair::SyntheticResult { index, call_id } = r {
                prop_assert!(result_ids(&out[*index], format).contains(call_id));
            }
        }

        let (again, more) = repair(out.clone(), format, allow);
        prop_assert_eq!(&again, &out);
        prop_assert_eq!(more, vec![]);

        if validity(&input, format, allow).is_ok() {
            prop_assert_eq!(&out, &input);
            prop_assert_eq!(repairs, vec![]);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn openai_repair_makes_any_list_valid(steps in vec(step(), 0..16), allow in any::<bool>()) {
            check(build(&steps, OPENAI), OPENAI, allow)?;
        }

        #[test]
        fn anthropic_repair_makes_any_list_valid(steps in vec(step(), 0..16), allow in any::<bool>()) {
            check(build(&steps, ANTHROPIC), ANTHROPIC, allow)?;
        }

        #[test]
        fn responses_repair_makes_any_list_valid(steps in vec(step(), 0..16), allow in any::<bool>()) {
            check(build(&steps, RESPONSES), RESPONSES, allow)?;
        }

        #[test]
        fn responses_valid_lists_come_back_identical((messages, allow) in valid(RESPONSES)) {
            prop_assert_eq!(validity(&messages, RESPONSES, allow), Ok(()));
            prop_assert_eq!(repair(messages.clone(), RESPONSES, allow), (messages, vec![]));
        }

        #[test]
        fn openai_valid_lists_come_back_identical((messages, allow) in valid(OPENAI)) {
            prop_assert_eq!(validity(&messages, OPENAI, allow), Ok(()));
            prop_assert_eq!(repair(messages.clone(), OPENAI, allow), (messages, vec![]));
        }

        #[test]
        fn anthropic_valid_lists_come_back_identical((messages, allow) in valid(ANTHROPIC)) {
            prop_assert_eq!(validity(&messages, ANTHROPIC, allow), Ok(()));
            prop_assert_eq!(repair(messages.clone(), ANTHROPIC, allow), (messages, vec![]));
        }
    }
}
