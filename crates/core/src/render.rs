//! Rendering a message request-ready: its offloaded texts become excerpts sized for the
//! phase the message is in.
//!
//! Rendering always starts from the original message, so it is idempotent and the second
//! phase is just a smaller limit applied to the same original. Only the strings at the
//! offloaded pointers change; every other field, and the order and number of messages, is
//! untouched, which is why tool calls stay paired with their results.
//!
//! [`insert_summary`] then puts the summary of the compacted past in front of the rendered
//! messages.

use satchel_protocol::{MessageFormat, OffloadNoticePath, Phase, RenderConfig};
use serde_json::{Value, json};

use crate::compact::{fixed_prefix, is_user_turn};
use crate::format::{self, ToolCall};
use crate::offload::{self, ResultKind};
use crate::repair::RepairItem;
use crate::tokens::TokenCounter;
use crate::truncate::{Excerpt, ExcerptLimits, FileRef, TextStats, render_excerpt};

/// A tool-result text whose full content is in an offload file.
#[derive(Debug, Clone)]
pub struct OffloadedText {
    /// JSON pointer of the text inside the message.
    pub pointer: String,
    /// Workspace-relative offload file.
    pub file: String,
    /// Size and line count of the full text, for O(limit) rendering.
    pub stats: TextStats,
    /// The call that produced the result, to classify it under the config in force.
    pub call: Option<ToolCall>,
}

/// How one offloaded text is shown in a given phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedText {
    /// JSON pointer inside the message.
    pub pointer: String,
    /// Offload file.
    pub file: String,
    /// Bytes of the original kept, when truncated.
    pub kept_bytes: Option<usize>,
    /// Size of the full text.
    pub total_bytes: usize,
}

/// Classifies an offloaded text under `config`.
pub fn kind_of(text: &OffloadedText, config: &RenderConfig) -> ResultKind {
    offload::classify(text.call.as_ref(), config)
}

/// The excerpt a text shows under `limits`, or `None` when it stays whole.
///
/// A cut must pay for itself: past the spec's slack a result is cut, unless its excerpt,
/// notice included, would not be more than `slack_bytes` smaller than the result. Just past
/// the limit the notice costs about what the cut saves (a 3,800-byte result became 3,730
/// bytes without its middle), so the result is sent whole instead.
pub fn excerpt_of(full: &str, stats: &TextStats, limits: &ExcerptLimits, file: &FileRef<'_>) -> Option<Excerpt> {
    render_excerpt(full, stats, limits, file)
        .filter(|excerpt| excerpt.text.len().saturating_add(limits.slack_bytes) < full.len())
}

/// What a client asked for one offloaded result, by its id (`context.pin`, `context.purge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultControl {
    /// Cut to the limit of the phase its message is in.
    #[default]
    ByPhase,
    /// Pinned: always whole.
    Pinned,
    /// Purged: a one-line stub in every request (the file and the archive keep it).
    Purged,
}

/// The stable id of the `k`-th offloaded text of the message with original index
/// `message_index`: `r12` for a message's first (usually only) result, `r12.1` for its second.
pub fn result_id(message_index: usize, k: usize) -> String {
    match k {
        0 => format!("r{message_index}"),
        k => format!("r{message_index}.{k}"),
    }
}

/// The one line a purged result is replaced by.
pub fn purged_stub(id: &str, file: &str, stats: &TextStats) -> String {
    let path = Value::from(file).to_string();
    format!(
        "[satchel: result {id} ({} lines, {} bytes) was purged from the requests by the client; \
         the full text is in {path}: `context.read` with {{\"path\": {path}}}]",
        stats.total_lines, stats.total_bytes
    )
}

/// Renders one message in `phase`: offloaded texts become excerpts where their limit requires.
///
/// `workspace_root` is the absolute workspace directory: with `offload_notice_path: absolute`
/// the notices give the agent's `read_file` the offload file's absolute path under it.
/// `message_index` (the message's original index) names each result's id in its notice;
/// `controls`, when not empty, holds one [`ResultControl`] per offloaded text.
pub fn render_message(
    original: &Value,
    offloaded: &[OffloadedText],
    phase: Phase,
    config: &RenderConfig,
    workspace_root: &str,
    message_index: Option<usize>,
    controls: &[ResultControl],
) -> (Value, Vec<RenderedText>) {
    let root = notice_root(config, workspace_root);
    let mut message = original.clone();
    let mut texts = Vec::with_capacity(offloaded.len());
    for (k, text) in offloaded.iter().enumerate() {
        let id = message_index.map(|index| result_id(index, k));
        let control = controls.get(k).copied().unwrap_or_default();
        let limits = match control {
            ResultControl::ByPhase => offload::excerpt_limits(kind_of(text, config), phase, config),
            ResultControl::Pinned | ResultControl::Purged => None,
        };
        let slot = message.pointer_mut(&text.pointer);
        if let (ResultControl::Purged, Some(Value::String(full))) = (control, &slot) {
            let stub = purged_stub(id.as_deref().unwrap_or("?"), &text.file, &text.stats);
            let kept = Some(0).filter(|_| stub.len() < full.len());
            if let Some(Value::String(full)) = slot {
                *full = stub;
            }
            texts.push(RenderedText {
                pointer: text.pointer.clone(),
                file: text.file.clone(),
                kept_bytes: kept,
                total_bytes: text.stats.total_bytes,
            });
            continue;
        }
        let excerpt = match (limits, slot) {
            (Some(limits), Some(Value::String(full))) => {
                let file = FileRef {
                    path: &text.file,
                    root,
                    id: id.as_deref(),
                };
                let excerpt = excerpt_of(full, &text.stats, &limits, &file);
                excerpt
                    .filter(|excerpt| excerpt.text.len() < full.len())
                    .map(|excerpt| {
                        let kept = excerpt.head_bytes + excerpt.tail.map_or(0, |t| t.bytes);
                        *full = excerpt.text;
                        kept
                    })
            }
            _ => None,
        };
        texts.push(RenderedText {
            pointer: text.pointer.clone(),
            file: text.file.clone(),
            kept_bytes: excerpt,
            total_bytes: text.stats.total_bytes,
        });
    }
    (message, texts)
}

/// The root a notice joins with the offload file's path for `read_file`, under `config`.
pub fn notice_root<'a>(config: &RenderConfig, workspace_root: &'a str) -> Option<&'a str> {
    match config.offload_notice_path {
        OffloadNoticePath::Absolute => Some(workspace_root),
        OffloadNoticePath::Relative => None,
    }
}

/// Puts the summary message first, in the form the format needs: a user message (OpenAI,
/// after the system messages; Responses, after the leading `system` and `developer` messages,
/// as a `message` item); for Anthropic, whose roles must alternate, a text block at the
/// start of the first user message, or a user message of its own when the kept part starts
/// with the assistant. After a provider-native compaction, the summary goes after it and
/// its step (where [`fixed_prefix`] ends), since the provider drops what comes before it and
/// satchel compacted only what follows; when no step follows, it stays first, with what it
/// summarises. Generic over how the request holds its messages, like the repair pass.
pub fn insert_summary<M: RepairItem>(messages: &mut Vec<M>, text: &str, format: MessageFormat) {
    let values: Vec<&Value> = messages.iter().map(RepairItem::value).collect();
    let mut at = fixed_prefix(&values, format);
    if at == values.len() {
        at = values.iter().take_while(|m| format::is_instructions(m, format)).count();
    }
    if format == MessageFormat::OpenaiResponses {
        messages.insert(at, M::from_value(responses_summary_item(text)));
        return;
    }
    if format == MessageFormat::Anthropic && messages.get(at).is_some_and(|m| is_user_turn(m.value(), format)) {
        let mut first = messages.remove(at).into_value();
        let block = json!({"type": "text", "text": text});
        match first.get_mut("content") {
            Some(Value::Array(blocks)) => blocks.insert(0, block),
            Some(Value::String(s)) => {
                let original = json!({"type": "text", "text": std::mem::take(s)});
                first["content"] = json!([block, original]);
            }
            _ => first["content"] = json!([block]),
        }
        messages.insert(at, M::from_value(first));
        return;
    }
    messages.insert(at, M::from_value(json!({"role": "user", "content": text})));
}

/// Tokens of the summary message as a request in `format` carries it: what a session counts
/// for its summary and what a summariser fits to its budget, so the two never disagree.
/// (Anthropic merges the summary into the first user message as a block: about the same.)
pub fn summary_message_tokens(text: &str, format: MessageFormat, counter: &TokenCounter) -> u64 {
    match format {
        MessageFormat::OpenaiResponses => counter.count_message(&responses_summary_item(text)),
        MessageFormat::Openai | MessageFormat::Anthropic => {
            counter.count_message(&json!({"role": "user", "content": text}))
        }
    }
}

/// The summary as the Responses format carries it: a user `message` item of its own, whose
/// wrapper (`message`, `input_text`) is counted with it.
pub fn responses_summary_item(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{self, MessageFormat, check_pairs, result_texts};
    use proptest::prelude::*;
    use satchel_protocol::Config;
    use serde_json::json;

    /// A random conversation: user turns, assistant turns with 0-3 parallel calls (some to
    /// `read_file` of `.md`/`.rs` files), results of random sizes with multi-byte text.
    fn conversation(format: MessageFormat) -> impl Strategy<Value = Vec<Value>> {
        let turn = (
            0usize..4,
            prop::collection::vec((0usize..3, 0usize..12_000, any::<bool>()), 0..4),
        );
        prop::collection::vec(turn, 1..8).prop_map(move |turns| {
            let mut messages = vec![json!({"role": "user", "content": "start", "x-client": 1})];
            let mut next_id = 0;
            for (seed, calls) in turns {
                let made: Vec<(String, &str, String, String)> = calls
                    .iter()
                    .map(|(tool, size, lines)| {
                        next_id += 1;
                        let (name, arg) = [("bash", "make test"), ("read_file", "docs/GUIDE.md"), ("read_file", "src/main.rs")][*tool];
                        let unit = if *lines { "log línea ✓ 日本\n" } else { "x€" };
                        let text: String = unit.repeat(size / unit.len() + seed);
                        (format!("call_{next_id}"), name, arg.to_owned(), text)
                    })
                    .collect();
                match format {
                    MessageFormat::Openai => {
                        let tool_calls: Vec<Value> = made.iter().map(|(id, name, arg, _)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": json!({"path": arg}).to_string()}})).collect();
                        messages.push(json!({"role": "assistant", "content": "thinking", "tool_calls": tool_calls, "reasoning": "r"}));
                        for (id, _, _, text) in &made {
                            messages.push(json!({"role": "tool", "tool_call_id": id, "content": text, "name": "kept"}));
                        }
                    }
                    MessageFormat::OpenaiResponses => {
                        messages.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA", "id": "rs_1"}));
                        for (id, name, arg, _) in &made {
                            messages.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": json!({"path": arg}).to_string(), "status": "completed"}));
                        }
                        for (id, _, _, text) in &made {
                            messages.push(json!({"type": "function_call_output", "call_id": id, "output": text, "id": "fco_kept"}));
                        }
                    }
                    MessageFormat::Anthropic => {
                        let mut blocks = vec![json!({"type": "text", "text": "thinking"})];
                        blocks.extend(made.iter().map(|(id, name, arg, _)| json!({"type": "tool_use", "id": id, "name": name, "input": {"path": arg}})));
                        messages.push(json!({"role": "assistant", "content": blocks}));
                        if !made.is_empty() {
                            let results: Vec<Value> = made.iter().map(|(id, _, _, text)| json!({"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}], "cache_control": {"type": "ephemeral"}})).collect();
                            messages.push(json!({"role": "user", "content": results}));
                        }
                    }
                }
                messages.push(json!({"role": "user", "content": format!("turn {seed}")}));
            }
            messages
        })
    }

    /// What the daemon does on entry: every text that may need cutting is offloaded.
    fn offload_all(messages: &[Value], format: MessageFormat, config: &Config) -> Vec<Vec<OffloadedText>> {
        messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                result_texts(message, format)
                    .into_iter()
                    .filter_map(|t| {
                        let full = message.pointer(&t.pointer)?.as_str()?;
                        let call = t
                            .call_id
                            .as_deref()
                            .and_then(|id| format::find_call(messages[..index].iter().rev(), id, format));
                        let kind = offload::classify(call.as_ref(), &config.render);
                        offload::must_offload(full.len(), kind, config).then(|| OffloadedText {
                            file: format!("tool_result/{index}{}.txt", t.pointer.replace('/', "_")),
                            stats: TextStats::of(full),
                            pointer: t.pointer,
                            call,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn check(messages: Vec<Value>, format: MessageFormat, recent_n: usize) -> Result<(), TestCaseError> {
        let mut config = Config::default();
        config.recent.pruning_recent_n = recent_n;
        config.render.pruning_recent_msg_max_bytes = 6_000;
        config.render.pruning_old_msg_max_bytes = 1_000;
        config.render.markdown_recent_msg_max_bytes = 9_000;
        config.render.markdown_old_msg_max_bytes = 4_000;
        let render_config = &config.render;
        prop_assert_eq!(check_pairs(&messages, format), Ok(()));
        let offloaded = offload_all(&messages, format, &config);
        let recent_start = offload::recent_start(&messages, format, recent_n);
        let render = || -> Vec<(Value, Vec<RenderedText>)> {
            messages
                .iter()
                .zip(&offloaded)
                .enumerate()
                .map(|(i, (m, o))| {
                    render_message(
                        m,
                        o,
                        if i >= recent_start { Phase::Recent } else { Phase::Old },
                        render_config,
                        "/ws",
                        None,
                        &[],
                    )
                })
                .collect()
        };
        let rendered = render();
        prop_assert_eq!(&rendered, &render(), "rendering is deterministic");
        let values: Vec<Value> = rendered.iter().map(|(m, _)| m.clone()).collect();
        prop_assert_eq!(values.len(), messages.len());
        prop_assert_eq!(check_pairs(&values, format), Ok(()), "pairs survive rendering");
        for (index, ((original, offloads), (shown, texts))) in
            messages.iter().zip(&offloaded).zip(&rendered).enumerate()
        {
            // Outside the offloaded strings, the message is byte-identical.
            let mut masked_original = original.clone();
            let mut masked_shown = shown.clone();
            for o in offloads {
                *masked_original.pointer_mut(&o.pointer).unwrap() = Value::Null;
                *masked_shown.pointer_mut(&o.pointer).unwrap() = Value::Null;
            }
            prop_assert_eq!(masked_original, masked_shown);
            for (o, t) in offloads.iter().zip(texts) {
                let full = original.pointer(&o.pointer).unwrap().as_str().unwrap();
                let seen = shown.pointer(&o.pointer).unwrap().as_str().unwrap();
                let phase = if index >= recent_start {
                    Phase::Recent
                } else {
                    Phase::Old
                };
                let kind = offload::classify(o.call.as_ref(), render_config);
                let limit = offload::max_bytes(kind, phase, render_config);
                match t.kept_bytes {
                    None => prop_assert_eq!(seen, full, "an untruncated text is the original"),
                    Some(kept) => {
                        prop_assert!(kept <= limit.unwrap());
                        prop_assert!(seen.contains(&o.file), "the notice names the file");
                        // The excerpt starts with a prefix of the original that the file completes.
                        let head = excerpt_of(
                            full,
                            &o.stats,
                            &offload::excerpt_limits(kind, phase, render_config).unwrap(),
                            &FileRef {
                                path: &o.file,
                                root: notice_root(render_config, "/ws"),
                                id: None,
                            },
                        )
                        .unwrap();
                        prop_assert!(seen.starts_with(&full[..head.head_bytes]));
                        prop_assert_eq!(
                            format!("{}{}", &full[..head.head_bytes], &full[head.next_byte_offset..]),
                            full
                        );
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_result_is_cut_only_when_the_cut_saves_more_than_the_slack() {
        let config = Config::default();
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        // Old phase: 3,000 bytes kept at most and a slack of 100; with this notice every
        // excerpt is about 3,560 bytes, so a result up to about 3,660 gains nothing from it.
        for (size, cut) in [
            (3_200, false),
            (3_600, false),
            (3_645, false),
            (3_800, true),
            (60_000, true),
        ] {
            let full = "line of output\n".repeat(size / 15);
            let message = serde_json::json!({"role": "tool", "tool_call_id": "c", "content": full});
            let offloaded = [OffloadedText {
                pointer: "/content".into(),
                file: "tool_result/x.txt".into(),
                stats: TextStats::of(&full),
                call: Some(call.clone()),
            }];
            let (shown, texts) = render_message(&message, &offloaded, Phase::Old, &config.render, "/ws", None, &[]);
            let shown = shown["content"].as_str().unwrap();
            assert_eq!(texts[0].kept_bytes.is_some(), cut, "{size}: cut? shown {}", shown.len());
            if cut {
                assert!(
                    shown.len() + config.render.pruning_slack_bytes < full.len(),
                    "{size}: {}",
                    shown.len()
                );
            } else {
                assert_eq!(shown, full, "{size} is sent whole");
            }
        }
    }

    /// A 400-line tool output offloaded to `tool_result/x.txt`: its text, its message and
    /// its offload record.
    fn offloaded_output() -> (String, Value, [OffloadedText; 1]) {
        let full = "line of output\n".repeat(400);
        let message = serde_json::json!({"role": "tool", "tool_call_id": "c", "content": full});
        let offloaded = [OffloadedText {
            pointer: "/content".into(),
            file: "tool_result/x.txt".into(),
            stats: TextStats::of(&full),
            call: None,
        }];
        (full, message, offloaded)
    }

    #[test]
    fn a_result_is_named_by_its_id_kept_whole_when_pinned_and_a_stub_when_purged() {
        let (full, message, offloaded) = offloaded_output();
        let config = Config::default();
        let shown = |control| {
            let render_config = &config.render;
            let (shown, texts) = render_message(
                &message,
                &offloaded,
                Phase::Old,
                render_config,
                "/ws",
                Some(12),
                &[control],
            );
            (shown["content"].as_str().unwrap().to_owned(), texts[0].kept_bytes)
        };
        assert_eq!(result_id(12, 0), "r12");
        assert_eq!(result_id(12, 2), "r12.2");

        let (cut, kept) = shown(ResultControl::ByPhase);
        assert!(kept.is_some());
        assert!(cut.contains("This result's id is r12: `context.pin` keeps it whole, `context.purge` drops it"));

        assert_eq!(shown(ResultControl::Pinned), (full.clone(), None));

        let (stub, kept) = shown(ResultControl::Purged);
        assert_eq!(kept, Some(0));
        assert_eq!(
            stub,
            "[satchel: result r12 (400 lines, 6000 bytes) was purged from the requests by the client; the full \
             text is in \"tool_result/x.txt\": `context.read` with {\"path\": \"tool_result/x.txt\"}]"
        );
    }

    #[test]
    fn offload_notice_path_picks_the_read_file_path() {
        let (_, message, offloaded) = offloaded_output();
        let shown = |notice_path| {
            let mut config = Config::default();
            config.render.offload_notice_path = notice_path;
            let render_config = &config.render;
            let (shown, _) = render_message(&message, &offloaded, Phase::Old, render_config, "/srv/ws", None, &[]);
            shown["content"].as_str().unwrap().to_owned()
        };
        let context_read = "`context.read` with {\"path\": \"tool_result/x.txt\", \"start_line\": ";

        let absolute = shown(OffloadNoticePath::Absolute);
        assert_eq!(
            Config::default().render.offload_notice_path,
            OffloadNoticePath::Absolute
        );
        assert!(absolute.contains("`read_file` with file_path=\"/srv/ws/tool_result/x.txt\" start_line="));
        assert!(absolute.contains(context_read));

        let relative = shown(OffloadNoticePath::Relative);
        assert!(relative.contains("`read_file` with file_path=\"tool_result/x.txt\" start_line="));
        assert!(!relative.contains("/srv/ws"));
        assert!(relative.contains(context_read));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn openai_rendering_keeps_pairs_fields_and_limits(messages in conversation(MessageFormat::Openai), recent_n in 0usize..4) {
            check(messages, MessageFormat::Openai, recent_n)?;
        }

        #[test]
        fn responses_rendering_keeps_pairs_fields_and_limits(messages in conversation(MessageFormat::OpenaiResponses), recent_n in 0usize..4) {
            check(messages, MessageFormat::OpenaiResponses, recent_n)?;
        }

        #[test]
        fn anthropic_rendering_keeps_pairs_fields_and_limits(messages in conversation(MessageFormat::Anthropic), recent_n in 0usize..4) {
            check(messages, MessageFormat::Anthropic, recent_n)?;
        }
    }

    /// A message held by reference (`false`) or written by the insertion (`true`), as the
    /// daemon's cached renderings are.
    #[derive(Debug, PartialEq)]
    struct Held(Value, bool);

    impl RepairItem for Held {
        fn value(&self) -> &Value {
            &self.0
        }

        fn into_value(self) -> Value {
            self.0
        }

        fn from_value(value: Value) -> Self {
            Held(value, true)
        }
    }

    const SUMMARY: &str = "# Summary of previous conversation";

    /// Inserts [`SUMMARY`] into `messages` and checks the result against `expect`, each
    /// message with whether the insertion wrote it (the others must be left as they were held).
    fn check_insert(messages: Vec<Value>, format: MessageFormat, expect: Vec<(Value, bool)>) {
        let mut held: Vec<Held> = messages.into_iter().map(|m| Held(m, false)).collect();
        insert_summary(&mut held, SUMMARY, format);
        let expect: Vec<Held> = expect.into_iter().map(|(m, owned)| Held(m, owned)).collect();
        assert_eq!(held, expect);
    }

    fn system() -> Value {
        json!({"role": "system", "content": "be careful"})
    }

    fn summary_user() -> Value {
        json!({"role": "user", "content": SUMMARY})
    }

    #[test]
    fn openai_gets_a_user_message_after_the_system_messages() {
        let user = json!({"role": "user", "content": "go on"});
        check_insert(
            vec![system(), system(), user.clone()],
            MessageFormat::Openai,
            vec![
                (system(), false),
                (system(), false),
                (summary_user(), true),
                (user.clone(), false),
            ],
        );
        check_insert(vec![], MessageFormat::Openai, vec![(summary_user(), true)]);
        let assistant = json!({"role": "assistant", "content": "done"});
        check_insert(
            vec![assistant.clone(), user.clone()],
            MessageFormat::Openai,
            vec![(summary_user(), true), (assistant, false), (user, false)],
        );
    }

    #[test]
    fn anthropic_puts_the_summary_in_the_first_user_message() {
        let block = json!({"type": "text", "text": SUMMARY});
        // String content becomes two text blocks, the summary first.
        check_insert(
            vec![
                json!({"role": "user", "content": "go on"}),
                json!({"role": "assistant", "content": "ok"}),
            ],
            MessageFormat::Anthropic,
            vec![
                (
                    json!({"role": "user", "content": [block, {"type": "text", "text": "go on"}]}),
                    true,
                ),
                (json!({"role": "assistant", "content": "ok"}), false),
            ],
        );
        // Block content gets the summary block in front.
        let image = json!({"type": "image", "source": {"type": "base64", "data": ""}});
        check_insert(
            vec![json!({"role": "user", "content": [image, {"type": "text", "text": "what is this?"}]})],
            MessageFormat::Anthropic,
            vec![(
                json!({"role": "user", "content": [block, image, {"type": "text", "text": "what is this?"}]}),
                true,
            )],
        );
        // No content at all: the summary is the content.
        check_insert(
            vec![json!({"role": "user"})],
            MessageFormat::Anthropic,
            vec![(json!({"role": "user", "content": [block]}), true)],
        );
    }

    #[test]
    fn anthropic_gets_a_user_message_of_its_own_before_an_assistant_or_a_result() {
        let assistant = json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]});
        check_insert(
            vec![assistant.clone()],
            MessageFormat::Anthropic,
            vec![(summary_user(), true), (assistant, false)],
        );
        // A user message carrying tool results is not a user turn: it keeps its blocks.
        let results =
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]});
        check_insert(
            vec![results.clone()],
            MessageFormat::Anthropic,
            vec![(summary_user(), true), (results, false)],
        );
        check_insert(
            vec![system(), json!({"role": "user", "content": "hi"})],
            MessageFormat::Anthropic,
            vec![
                (system(), false),
                (
                    json!({"role": "user", "content": [{"type": "text", "text": SUMMARY}, {"type": "text", "text": "hi"}]}),
                    true,
                ),
            ],
        );
    }

    #[test]
    fn after_a_native_compaction_the_summary_follows_its_step() {
        let native = json!({"role": "assistant", "content": [{"type": "compaction", "content": "provider summary"}]});
        let task = json!({"role": "user", "content": "task"});
        let next = json!({"role": "user", "content": "next"});
        let reply = json!({"role": "assistant", "content": "ok"});
        let merged =
            json!({"role": "user", "content": [{"type": "text", "text": SUMMARY}, {"type": "text", "text": "next"}]});
        check_insert(
            vec![task.clone(), native.clone(), next, reply.clone()],
            MessageFormat::Anthropic,
            vec![
                (task.clone(), false),
                (native.clone(), false),
                (merged, true),
                (reply, false),
            ],
        );
        // Nothing follows the native step: the summary stays first, with what it summarises.
        let first =
            json!({"role": "user", "content": [{"type": "text", "text": SUMMARY}, {"type": "text", "text": "task"}]});
        check_insert(
            vec![task, native.clone()],
            MessageFormat::Anthropic,
            vec![(first, true), (native, false)],
        );
        let item = json!({"type": "compaction", "encrypted_content": "gAAA"});
        let user = json!({"type": "message", "role": "user", "content": "next"});
        check_insert(
            vec![item.clone(), user.clone()],
            MessageFormat::OpenaiResponses,
            vec![(item, false), (responses_summary_item(SUMMARY), true), (user, false)],
        );
    }
}
