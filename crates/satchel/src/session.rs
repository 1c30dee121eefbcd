//! A live session: the messages a client has sent, the summary of those compacted away, and
//! how to render the request.
//!
//! The session holds each live message exactly as the client sent it (full texts restored from
//! the offload files after a restart). What the model sees is *rendered* on every call from
//! those originals: tool results are cut to the limit of the phase the message is in, the
//! summary message goes first, and a repair pass makes sure every tool call has its result.
//! Nothing is ever cut from what satchel keeps.

use satchel_core::compact::is_user_turn;
use satchel_core::format::MessageFormat;
use satchel_core::offload::recent_start;
use satchel_core::render::{OffloadedText, RenderedText, render_message};
use satchel_core::repair::{Repair, repair};
use satchel_core::summary::render::summary_message_text;
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{CompactSummary, Config, Phase};
use satchel_storage::{CompactionInfo, StoredMessage, StoredOffload};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// One live message of a session.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Index in the session's original history.
    pub index: usize,
    /// Hash of the message as the client sent it.
    pub hash: String,
    /// The message as the client sent it, full texts included.
    pub message: Value,
    /// Texts of this message that live in offload files.
    pub offloaded: Vec<OffloadedText>,
    /// Token counts of the rendered message, per phase, valid for `Session::count_key`.
    tokens: [Option<u64>; 2],
}

impl Entry {
    /// An entry for a message; `offloaded` lists its texts already saved to files.
    pub fn new(index: usize, hash: String, message: Value, offloaded: Vec<OffloadedText>) -> Self {
        Entry {
            index,
            hash,
            message,
            offloaded,
            tokens: [None; 2],
        }
    }

    /// The persisted form: offloaded texts emptied, since the files hold them.
    pub fn to_stored(&self) -> StoredMessage {
        let mut message = self.message.clone();
        for text in &self.offloaded {
            if let Some(slot) = message.pointer_mut(&text.pointer) {
                *slot = Value::String(String::new());
            }
        }
        StoredMessage {
            hash: self.hash.clone(),
            message,
            offloads: self
                .offloaded
                .iter()
                .map(|t| StoredOffload {
                    pointer: t.pointer.clone(),
                    file: t.file.clone(),
                    total_bytes: t.stats.total_bytes,
                    total_lines: t.stats.total_lines,
                })
                .collect(),
        }
    }
}

/// A rendered message with at least one truncated text.
#[derive(Debug)]
pub struct TruncatedMessage {
    /// Position among the live messages.
    pub position: usize,
    /// The phase it was rendered in.
    pub phase: Phase,
    /// Its offloaded texts as rendered.
    pub texts: Vec<RenderedText>,
}

/// The request as it leaves satchel, with what is needed to account for it.
#[derive(Debug)]
pub struct RenderedRequest {
    /// The messages, summary first, repaired.
    pub messages: Vec<Value>,
    /// Each live entry rendered (before the summary is inserted), in order.
    pub entries: Vec<Value>,
    /// Live messages carrying truncated texts.
    pub truncated: Vec<TruncatedMessage>,
    /// What the repair pass changed.
    pub repairs: Vec<Repair>,
    /// The text of the summary message, when there is a summary.
    pub summary_text: Option<String>,
}

/// The messages of one session.
#[derive(Debug, Default)]
pub struct Session {
    /// Format, once known.
    pub format: Option<MessageFormat>,
    /// Hash of every message of the original history, by original index (compacted ones too,
    /// so a client resending its full history is recognised).
    pub original_hashes: Vec<String>,
    /// Live messages in order.
    pub entries: Vec<Entry>,
    /// The summary in force.
    pub summary: Option<CompactSummary>,
    /// Finished compactions, oldest first.
    pub compactions: Vec<CompactionInfo>,
    /// The last request returned, to recognise a client that sends it back as its history.
    pub last_output: Vec<Value>,
    /// System prompt of the last `context.prepare`, to count a manual compaction's request.
    pub last_system: Option<Value>,
    /// Tool definitions of the last `context.prepare`.
    pub last_tools: Option<Vec<Value>>,
    /// Largest request since the daemon loaded the session.
    pub peak_tokens: u64,
    /// Token usage of the last request returned.
    pub last_usage: Option<satchel_protocol::TokenUsage>,
    /// What the cached token counts depend on; a change clears them.
    count_key: Option<String>,
}

/// How a received full list relates to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// The first `consumed` received messages are known; the rest are new.
    Extends {
        /// Messages recognised.
        consumed: usize,
    },
    /// The history diverges at original index `at`, after everything compacted: live
    /// messages from there are replaced.
    DivergesAt {
        /// First differing original index.
        at: usize,
    },
    /// The history diverges inside the compacted part: the session starts over.
    Reset,
}

/// Hash identifying a message's exact content.
pub fn message_hash(message: &Value) -> String {
    let bytes = serde_json::to_vec(message).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// The format to process with when none is known yet: plain-text turns look the same in both.
pub fn format_or_default(format: Option<MessageFormat>) -> MessageFormat {
    format.unwrap_or(MessageFormat::Openai)
}

impl Session {
    /// An empty session in `format`.
    pub fn with_format(format: Option<MessageFormat>) -> Self {
        Session {
            format,
            ..Session::default()
        }
    }

    /// Messages compacted away.
    pub fn archived_count(&self) -> usize {
        self.original_hashes.len() - self.entries.len()
    }

    /// Aligns a full list sent by a client with what the session holds.
    ///
    /// A message matches when it is byte-identical to what the client first sent, or to what
    /// satchel returned for it; a client may also send back the whole last request (summary
    /// message included) followed by new messages.
    pub fn align(&self, incoming: &[Value], incoming_hashes: &[String], config: &Config) -> Alignment {
        let live_at: std::collections::HashMap<usize, &Entry> = self.entries.iter().map(|e| (e.index, e)).collect();
        let matches = |j: usize| {
            incoming_hashes[j] == self.original_hashes[j]
                || live_at.get(&j).is_some_and(|entry| {
                    !entry.offloaded.is_empty()
                        && [Phase::Recent, Phase::Old].into_iter().any(|phase| {
                            render_message(&entry.message, &entry.offloaded, phase, config).0 == incoming[j]
                        })
                })
        };
        let known = self.original_hashes.len();
        let original_prefix = (0..incoming.len().min(known)).take_while(|&j| matches(j)).count();
        if original_prefix == known {
            return Alignment::Extends { consumed: known };
        }
        // After a restart the last view is not in memory: render it again.
        let rendered;
        let last_view = if self.last_output.is_empty() && self.summary.is_some() {
            rendered = self.render(config, false).messages;
            &rendered
        } else {
            &self.last_output
        };
        let view = last_view.len();
        if view > 0 && incoming.len() >= view && incoming[..view] == last_view[..] {
            return Alignment::Extends { consumed: view };
        }
        let compacted_from_here = (original_prefix..known).any(|i| !live_at.contains_key(&i));
        if compacted_from_here {
            Alignment::Reset
        } else {
            Alignment::DivergesAt { at: original_prefix }
        }
    }

    /// Where the recent window starts; `squeeze` puts every message in the old phase (the
    /// last resort when the request does not fit even after compaction).
    fn recent_start(&self, config: &Config, squeeze: bool) -> usize {
        if squeeze {
            return self.entries.len();
        }
        let values: Vec<&Value> = self.entries.iter().map(|e| &e.message).collect();
        recent_start(&values, format_or_default(self.format), config.pruning_recent_n)
    }

    /// Renders the request: live messages with their phase, the summary first, repaired.
    pub fn render(&self, config: &Config, squeeze: bool) -> RenderedRequest {
        let format = format_or_default(self.format);
        let recent_start = self.recent_start(config, squeeze);
        let mut entries = Vec::with_capacity(self.entries.len());
        let mut truncated = Vec::new();
        for (position, entry) in self.entries.iter().enumerate() {
            let phase = if position >= recent_start {
                Phase::Recent
            } else {
                Phase::Old
            };
            let (message, texts) = render_message(&entry.message, &entry.offloaded, phase, config);
            if texts.iter().any(|t| t.kept_bytes.is_some()) {
                truncated.push(TruncatedMessage { position, phase, texts });
            }
            entries.push(message);
        }
        let summary_text = self.summary.as_ref().map(summary_message_text);
        let mut messages = entries.clone();
        if let Some(text) = &summary_text {
            insert_summary(&mut messages, text, format);
        }
        let (messages, repairs) = repair(messages, format, true);
        RenderedRequest {
            messages,
            entries,
            truncated,
            repairs,
            summary_text,
        }
    }

    /// Token count of each rendered live message, from the cache where possible.
    pub fn count_tokens(
        &mut self,
        rendered: &[Value],
        counter: &TokenCounter,
        config: &Config,
        squeeze: bool,
    ) -> Vec<u64> {
        let key = format!(
            "{:?}/{}/{}/{}/{}/{}/{}/{}/{}/{:?}/{:?}",
            counter.tokenizer(),
            config.token_count_estimate_divisor,
            config.pruning_enabled,
            config.pruning_recent_msg_max_bytes,
            config.pruning_old_msg_max_bytes,
            config.markdown_recent_msg_max_bytes,
            config.markdown_old_msg_max_bytes,
            config.pruning_slack_bytes,
            config.pruning_tail_ratio,
            config.read_file_tool_names,
            config.markdown_tool_names,
        );
        if self.count_key.as_deref() != Some(&key) {
            self.entries.iter_mut().for_each(|e| e.tokens = [None; 2]);
            self.count_key = Some(key);
        }
        let recent_start = self.recent_start(config, squeeze);
        self.entries
            .iter_mut()
            .zip(rendered)
            .enumerate()
            .map(|(position, (entry, message))| {
                // Messages without offloaded texts render the same in both phases.
                let slot = usize::from(position < recent_start && !entry.offloaded.is_empty());
                *entry.tokens[slot].get_or_insert_with(|| counter.count_message(message))
            })
            .collect()
    }
}

/// Puts the summary first, in the form the format needs: a user message (OpenAI, after the
/// system messages); for Anthropic, whose roles must alternate, a text block at the start of
/// the first user message, or a user message of its own when the kept part starts with the
/// assistant.
fn insert_summary(messages: &mut Vec<Value>, text: &str, format: MessageFormat) {
    let at = messages
        .iter()
        .take_while(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .count();
    if format == MessageFormat::Anthropic
        && let Some(first) = messages.get_mut(at)
        && is_user_turn(first, format)
    {
        let block = json!({"type": "text", "text": text});
        match first.get_mut("content") {
            Some(Value::Array(blocks)) => blocks.insert(0, block),
            Some(Value::String(s)) => {
                let original = json!({"type": "text", "text": std::mem::take(s)});
                first["content"] = json!([block, original]);
            }
            _ => first["content"] = json!([block]),
        }
        return;
    }
    messages.insert(at, json!({"role": "user", "content": text}));
}
