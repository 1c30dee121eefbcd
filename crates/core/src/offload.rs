//! Tool-result offload policy (F4–F6): which results are offloaded, and which limit applies when.
//!
//! The daemon asks this module three questions per tool-result text: what kind of result is it
//! (plain, Markdown, `read_file`-like), must its full text go to a file when it enters, and what
//! byte limit applies in the message's current phase (recent or old). [`select_offloads`] asks
//! the second question of every tool-result text a call brings.

use std::borrow::Borrow;

use satchel_protocol::{Config, ContextMode, MessageFormat, Phase, RenderConfig};
use serde_json::Value;

use crate::format::{ToolCall, find_call, has_tool_result, result_texts, role_of};
use crate::truncate::ExcerptLimits;

/// What a tool result is, for the purpose of choosing its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultKind {
    /// Any other tool output.
    Plain,
    /// A skill, rule or `.md` file: structured knowledge, so higher limits.
    Markdown,
    /// Output of a `read_file`-like tool: whole while recent (the agent asked for that file),
    /// truncated like the others once old; `markdown` picks which old limit.
    ReadFile {
        /// The file read is Markdown.
        markdown: bool,
    },
}

/// Classifies a result by the call that produced it (unknown call → plain).
pub fn classify(call: Option<&ToolCall>, config: &RenderConfig) -> ResultKind {
    let Some(call) = call else { return ResultKind::Plain };
    let markdown = config
        .markdown_tool_names
        .iter()
        .any(|n| n.eq_ignore_ascii_case(&call.name))
        || names_markdown_file(&call.arguments, &config.markdown_file_extensions);
    if config
        .read_file_tool_names
        .iter()
        .any(|n| n.eq_ignore_ascii_case(&call.name))
    {
        ResultKind::ReadFile { markdown }
    } else if markdown {
        ResultKind::Markdown
    } else {
        ResultKind::Plain
    }
}

/// True when some string argument is a path with one of `extensions`.
fn names_markdown_file(arguments: &str, extensions: &[String]) -> bool {
    let ends_with_ext = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        extensions.iter().any(|e| s.ends_with(&e.to_ascii_lowercase()))
    };
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => any_string(&value, &ends_with_ext),
        Err(_) => arguments.split_whitespace().any(ends_with_ext),
    }
}

fn any_string(value: &Value, pred: &dyn Fn(&str) -> bool) -> bool {
    match value {
        Value::String(s) => pred(s),
        Value::Array(items) => items.iter().any(|v| any_string(v, pred)),
        Value::Object(map) => map.values().any(|v| any_string(v, pred)),
        _ => false,
    }
}

/// Byte limit of a result of `kind` in `phase`; `None` means "never truncated".
pub fn max_bytes(kind: ResultKind, phase: Phase, config: &RenderConfig) -> Option<usize> {
    let markdown = matches!(kind, ResultKind::Markdown | ResultKind::ReadFile { markdown: true });
    match (kind, phase) {
        (ResultKind::ReadFile { .. }, Phase::Recent) => None,
        (_, Phase::Recent) if markdown => Some(config.markdown_recent_msg_max_bytes),
        (_, Phase::Recent) => Some(config.pruning_recent_msg_max_bytes),
        (_, Phase::Old) if markdown => Some(config.markdown_old_msg_max_bytes),
        (_, Phase::Old) => Some(config.pruning_old_msg_max_bytes),
    }
}

/// The excerpt limits of a result in a phase, or `None` when it stays whole.
pub fn excerpt_limits(kind: ResultKind, phase: Phase, config: &RenderConfig) -> Option<ExcerptLimits> {
    if !config.pruning_enabled {
        return None;
    }
    max_bytes(kind, phase, config).map(|max_bytes| ExcerptLimits {
        max_bytes,
        slack_bytes: config.pruning_slack_bytes,
        tail_ratio: config.pruning_tail_ratio.get(),
    })
}

/// Whether a text must be saved to a file when it enters the session.
///
/// Everything that any phase may truncate is saved at once, not only what the first phase
/// cuts: the file then exists before any excerpt can point at it, and a `read_file` result keeps
/// exactly what the agent saw even if the file on disk changes later. In `aceclaw` mode so is
/// every text request pruning may turn into a stub, so that a stub always names a file the
/// full text can be read from. It reads more of the configuration than rendering does: the
/// decision is made once, when the text enters.
pub fn must_offload(text_bytes: usize, kind: ResultKind, config: &Config) -> bool {
    let prunable = config.window.context_mode == ContextMode::Aceclaw && text_bytes > 2 * config.prune.prune_stub_chars;
    let render = &config.render;
    render.pruning_enabled
        && (prunable
            || [Phase::Recent, Phase::Old]
                .into_iter()
                .filter_map(|p| max_bytes(kind, p, render))
                .any(|limit| text_bytes > limit + render.pruning_slack_bytes))
}

/// Index of the first message of the recent window: the last `recent_n` messages, widened to
/// the whole trailing run of tool-result messages (parallel calls answered together stay
/// recent together, as in the peer). In the Responses format a run of the model's items
/// (reasoning, text, calls) counts as the one assistant message it is in the other formats,
/// so a window holds as many turns whatever the format.
pub fn recent_start<M: Borrow<Value>>(messages: &[M], format: MessageFormat, recent_n: usize) -> usize {
    let trailing_results = messages
        .iter()
        .rev()
        .take_while(|m| has_tool_result((*m).borrow(), format))
        .count();
    let last_n = if format == MessageFormat::OpenaiResponses {
        last_messages_start(messages, recent_n)
    } else {
        messages.len().saturating_sub(recent_n)
    };
    last_n.min(messages.len() - trailing_results)
}

/// Where the last `n` messages start when each run of the model's items counts as one.
fn last_messages_start<M: Borrow<Value>>(items: &[M], n: usize) -> usize {
    let is_model = |i: usize| role_of(items[i].borrow()) == Some("assistant");
    let mut start = items.len();
    for _ in 0..n {
        if start == 0 {
            break;
        }
        start -= 1;
        if is_model(start) {
            while start > 0 && is_model(start - 1) {
                start -= 1;
            }
        }
    }
    start
}

/// [`recent_start`] with the boundary moved in steps of `batch` appended messages, so that the
/// request's prefix stays byte-identical between steps (a provider's prompt cache reuses it).
///
/// The boundary is the one the list had when its length was last a multiple of `batch`, so
/// it changes at most once per `batch` messages appended, and then moves a whole group of
/// messages to the old phase at once. It is never later than [`recent_start`] of the whole
/// list: the recent window keeps at least `recent_n` messages and the trailing run of tool
/// results. `batch` 0 or 1 is [`recent_start`] itself (the boundary moves with every message).
pub fn batched_recent_start<M: Borrow<Value>>(
    messages: &[M],
    format: MessageFormat,
    recent_n: usize,
    batch: usize,
) -> usize {
    let now = recent_start(messages, format, recent_n);
    let batch = batch.max(1);
    let settled = messages.len() / batch * batch;
    if settled == messages.len() {
        return now;
    }
    recent_start(&messages[..settled], format, recent_n).min(now)
}

/// A tool-result text of a new message that must go to an offload file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedText {
    /// Position of its message among the new ones.
    pub position: usize,
    /// JSON pointer of the text inside the message.
    pub pointer: String,
    /// The tool call it answers, when found.
    pub call: Option<ToolCall>,
}

impl SelectedText {
    /// The text itself, in `new` (the messages it was selected from).
    pub fn full<'a>(&self, new: &'a [Value]) -> &'a str {
        new[self.position]
            .pointer(&self.pointer)
            .and_then(Value::as_str)
            .expect("a selected text is a string at its pointer")
    }
}

/// Which tool-result texts of the `new` messages must be offloaded ([`must_offload`]), in
/// order. Each result is classified by the call it answers, looked for in the new messages
/// before it, then in `earlier` (the messages the session holds before them, oldest first).
pub fn select_offloads<'a, E>(new: &'a [Value], earlier: E, format: MessageFormat, config: &Config) -> Vec<SelectedText>
where
    E: DoubleEndedIterator<Item = &'a Value> + Clone,
{
    let render = &config.render;
    let mut selected = Vec::new();
    for (position, message) in new.iter().enumerate() {
        let newest_first = || new[..position].iter().rev().chain(earlier.clone().rev());
        for text in result_texts(message, format) {
            let Some(Value::String(full)) = message.pointer(&text.pointer) else {
                continue;
            };
            let call = text
                .call_id
                .as_deref()
                .and_then(|cid| find_call(newest_first(), cid, format));
            if must_offload(full.len(), classify(call.as_ref(), render), config) {
                selected.push(SelectedText {
                    position,
                    pointer: text.pointer,
                    call,
                });
            }
        }
    }
    selected
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn classifies_by_tool_and_path() {
        let config = Config::default();
        let c = &config.render;
        assert_eq!(
            classify(Some(&call("bash", r#"{"command":"ls"}"#)), c),
            ResultKind::Plain
        );
        assert_eq!(
            classify(Some(&call("cat", r#"{"path":"docs/SKILL.md"}"#)), c),
            ResultKind::Markdown
        );
        assert_eq!(
            classify(Some(&call("read_file", r#"{"path":"src/a.rs"}"#)), c),
            ResultKind::ReadFile { markdown: false }
        );
        assert_eq!(
            classify(Some(&call("Read", r#"{"file_path":"R.MD"}"#)), c),
            ResultKind::ReadFile { markdown: true }
        );
        assert_eq!(classify(Some(&call("load_skill", "{}")), c), ResultKind::Markdown);
        assert_eq!(classify(None, c), ResultKind::Plain);
    }

    #[test]
    fn limits_follow_kind_and_phase() {
        let c = Config::default();
        let r = &c.render;
        assert_eq!(max_bytes(ResultKind::Plain, Phase::Recent, r), Some(50_000));
        assert_eq!(max_bytes(ResultKind::Plain, Phase::Old, r), Some(3_000));
        assert_eq!(max_bytes(ResultKind::Markdown, Phase::Old, r), Some(50_000));
        assert_eq!(
            max_bytes(ResultKind::ReadFile { markdown: false }, Phase::Recent, r),
            None
        );
        assert_eq!(
            max_bytes(ResultKind::ReadFile { markdown: false }, Phase::Old, r),
            Some(3_000)
        );
        assert!(!must_offload(3_100, ResultKind::Plain, &c), "within the slack");
        assert!(must_offload(3_101, ResultKind::Plain, &c));
        let mut off = Config::default();
        off.render.pruning_enabled = false;
        assert!(!must_offload(1_000_000, ResultKind::Plain, &off));
        let mut aceclaw = Config::default();
        aceclaw.window.context_mode = ContextMode::Aceclaw;
        assert!(
            !must_offload(400, ResultKind::Plain, &aceclaw),
            "too short to become a stub"
        );
        assert!(
            must_offload(401, ResultKind::Plain, &aceclaw),
            "a stub must name its file"
        );
        assert!(excerpt_limits(ResultKind::Plain, Phase::Old, &off.render).is_none());
    }

    #[test]
    fn recent_window_covers_trailing_results() {
        let f = MessageFormat::Openai;
        let msgs = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "tool_calls": [{"id": "1"}, {"id": "2"}, {"id": "3"}]}),
            json!({"role": "tool", "tool_call_id": "1", "content": "x"}),
            json!({"role": "tool", "tool_call_id": "2", "content": "x"}),
            json!({"role": "tool", "tool_call_id": "3", "content": "x"}),
        ];
        assert_eq!(recent_start(&msgs, f, 2), 2);
        assert_eq!(recent_start(&msgs[..2], f, 2), 0);
        assert_eq!(recent_start(&msgs[..1], f, 5), 0);
    }

    /// Checks the batched boundary of every prefix of `msgs` (as if appended one by one)
    /// against the expected boundaries, one per length from 1.
    fn check_batched(msgs: &[Value], recent_n: usize, batch: usize, expect: &[usize]) {
        let got: Vec<usize> = (1..=msgs.len())
            .map(|len| batched_recent_start(&msgs[..len], MessageFormat::Openai, recent_n, batch))
            .collect();
        assert_eq!(got, expect, "recent_n {recent_n}, batch {batch}");
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn a_responses_run_of_model_items_counts_as_one_message() {
        let f = MessageFormat::OpenaiResponses;
        let items = [
            user("go"),                                                                                            // 0
            json!({"type": "reasoning", "encrypted_content": "e"}),                                                // 1
            json!({"type": "function_call", "call_id": "a", "name": "bash", "arguments": "{}"}),                   // 2
            json!({"type": "function_call_output", "call_id": "a", "output": "x"}),                                // 3
            json!({"type": "reasoning", "encrypted_content": "e"}),                                                // 4
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}), // 5
        ];
        // The output and the answer after it, as `[tool, assistant]` in the chat format.
        assert_eq!(recent_start(&items, f, 2), 3);
        assert_eq!(recent_start(&items, f, 3), 1);
        assert_eq!(recent_start(&items, f, 0), 6);
        // Trailing outputs stay recent together.
        assert_eq!(recent_start(&items[..4], f, 0), 3);
        assert_eq!(recent_start(&items, f, 9), 0);
    }

    #[test]
    fn batched_boundary_moves_in_steps() {
        let plain: Vec<Value> = (0..10).map(|i| user(&i.to_string())).collect();
        // batch 1 is the unbatched boundary.
        check_batched(&plain, 2, 1, &[0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        // batch 4: the boundary of lengths 4 and 8, held until the next multiple.
        check_batched(&plain, 2, 4, &[0, 0, 0, 2, 2, 2, 2, 6, 6, 6]);
        check_batched(&plain, 0, 3, &[0, 0, 3, 3, 3, 6, 6, 6, 9, 9]);
    }

    #[test]
    fn batched_boundary_keeps_trailing_results_recent() {
        let msgs = vec![
            user("a"),
            user("b"),
            user("c"),
            json!({"role": "assistant", "tool_calls": [{"id": "1"}, {"id": "2"}, {"id": "3"}]}),
            json!({"role": "tool", "tool_call_id": "1", "content": "x"}),
            json!({"role": "tool", "tool_call_id": "2", "content": "x"}),
            json!({"role": "tool", "tool_call_id": "3", "content": "x"}),
            user("d"),
        ];
        // At length 4 the settled boundary is 2; the results appended after it stay recent
        // with their call, and the boundary waits for length 8.
        check_batched(&msgs, 2, 4, &[0, 0, 0, 2, 2, 2, 2, 6]);
        // recent_n 1: the trailing results pull the unbatched boundary back to the call.
        check_batched(&msgs, 1, 1, &[0, 1, 2, 3, 4, 4, 4, 7]);
        check_batched(&msgs, 1, 3, &[0, 0, 2, 2, 2, 4, 4, 4]);
    }

    mod batched {
        use super::*;
        use proptest::prelude::*;

        /// A random list: users, assistants with calls, and tool results.
        fn list() -> impl Strategy<Value = Vec<Value>> {
            prop::collection::vec(0u8..3, 0..60).prop_map(|kinds| {
                kinds
                    .into_iter()
                    .map(|k| match k {
                        0 => json!({"role": "user", "content": "u"}),
                        1 => json!({"role": "assistant", "tool_calls": [{"id": "c"}]}),
                        _ => json!({"role": "tool", "tool_call_id": "c", "content": "r"}),
                    })
                    .collect()
            })
        }

        proptest! {
            #[test]
            fn boundary_is_monotone_stepwise_and_keeps_the_recent_window(
                msgs in list(), recent_n in 0usize..5, batch in 1usize..12,
            ) {
                let f = MessageFormat::Openai;
                let mut previous = 0;
                let mut last_change: Option<usize> = None;
                for len in 0..=msgs.len() {
                    let prefix = &msgs[..len];
                    let b = batched_recent_start(prefix, f, recent_n, batch);
                    let unbatched = recent_start(prefix, f, recent_n);
                    prop_assert!(b <= unbatched, "never later than the unbatched boundary");
                    prop_assert!(len - b >= recent_n.min(len), "the recent window keeps recent_n messages");
                    prop_assert!(b >= previous, "monotone as messages are appended");
                    if b != previous {
                        if let Some(at) = last_change {
                            prop_assert!(len - at >= batch, "at most one change per batch appended");
                        }
                        last_change = Some(len);
                    }
                    previous = b;
                }
            }
        }
    }

    /// A big output (42 000 bytes): over the plain old-phase limit, under both Markdown limits.
    fn big() -> String {
        "line of build output\n".repeat(2_000)
    }

    fn openai_call(id: &str, name: &str, args: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": name, "arguments": args}}]})
    }

    fn openai_result(id: &str, output: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": output})
    }

    /// Checks which texts of `new` (after `earlier`) are selected: (position, pointer, name
    /// of the call found), and that each selected text is a string at its pointer.
    fn check_selection(
        new: &[Value],
        earlier: &[Value],
        format: MessageFormat,
        config: &Config,
        expect: &[(usize, &str, Option<&str>)],
    ) {
        let selected = select_offloads(new, earlier.iter(), format, config);
        let got: Vec<(usize, &str, Option<&str>)> = selected
            .iter()
            .map(|s| (s.position, s.pointer.as_str(), s.call.as_ref().map(|c| c.name.as_str())))
            .collect();
        assert_eq!(got, expect);
        for s in &selected {
            assert!(s.full(new).len() > config.render.pruning_old_msg_max_bytes);
        }
    }

    #[test]
    fn big_results_are_selected_small_ones_are_not() {
        let c = Config::default();
        let new = [
            openai_call("1", "bash", r#"{"command":"make"}"#),
            openai_result("1", &big()),
            openai_call("2", "bash", r#"{"command":"ls"}"#),
            openai_result("2", "Cargo.toml\nsrc"),
        ];
        check_selection(&new, &[], MessageFormat::Openai, &c, &[(1, "/content", Some("bash"))]);
        let mut off = Config::default();
        off.render.pruning_enabled = false;
        check_selection(&new, &[], MessageFormat::Openai, &off, &[]);
    }

    #[test]
    fn the_call_is_found_among_the_earlier_messages_and_classifies_the_result() {
        let c = Config::default();
        // A Markdown result of this size stays under both Markdown limits: not offloaded,
        // though the same text from a plain tool is.
        let earlier = [
            json!({"role": "user", "content": "read the skill"}),
            openai_call("s", "load_skill", "{}"),
        ];
        check_selection(&[openai_result("s", &big())], &earlier, MessageFormat::Openai, &c, &[]);
        // An unknown call classifies the result as plain.
        check_selection(
            &[openai_result("gone", &big())],
            &earlier,
            MessageFormat::Openai,
            &c,
            &[(0, "/content", None)],
        );
        // A read_file result is offloaded at any size past the old limit: the file may change.
        let earlier = [openai_call("r", "read_file", r#"{"path":"src/lib.rs"}"#)];
        check_selection(
            &[openai_result("r", &"x".repeat(3_101))],
            &earlier,
            MessageFormat::Openai,
            &c,
            &[(0, "/content", Some("read_file"))],
        );
    }

    #[test]
    fn anthropic_results_are_selected_block_by_block() {
        let c = Config::default();
        let new = [
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "make"}},
                {"type": "tool_use", "id": "b", "name": "bash", "input": {"command": "ls"}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": [
                    {"type": "text", "text": "short"},
                    {"type": "image", "source": {}},
                    {"type": "text", "text": big()}]},
                {"type": "tool_result", "tool_use_id": "b", "content": big()},
                {"type": "text", "text": big()}]}),
        ];
        check_selection(
            &new,
            &[],
            MessageFormat::Anthropic,
            &c,
            &[
                (1, "/content/0/content/2/text", Some("bash")),
                (1, "/content/1/content", Some("bash")),
            ],
        );
    }

    #[test]
    fn responses_outputs_are_selected_and_classified_by_their_call() {
        let c = Config::default();
        // The call of `r` came in an earlier request; reasoning and user text are never cut.
        let earlier = [json!({"type": "function_call", "call_id": "r", "name": "read_file",
            "arguments": r#"{"path":"src/lib.rs"}"#})];
        let new = [
            json!({"type": "function_call_output", "call_id": "r", "output": "x".repeat(3_101)}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": big()}]}),
            json!({"type": "reasoning", "summary": [], "encrypted_content": big()}),
            json!({"type": "function_call", "call_id": "m", "name": "exec_command", "arguments": r#"{"cmd":"make"}"#}),
            json!({"type": "custom_tool_call", "call_id": "d", "name": "view_doc", "input": "docs/GUIDE.md"}),
            json!({"type": "function_call_output", "call_id": "m", "output": [
                {"type": "input_text", "text": "short"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                {"type": "input_text", "text": big()}]}),
            // A Markdown file's text of this size stays under the Markdown limits.
            json!({"type": "custom_tool_call_output", "call_id": "d", "output": big()}),
        ];
        check_selection(
            &new,
            &earlier,
            MessageFormat::OpenaiResponses,
            &c,
            &[
                (0, "/output", Some("read_file")),
                (5, "/output/2/text", Some("exec_command")),
            ],
        );
    }
}
