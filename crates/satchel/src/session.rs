//! A live session: the messages a client has sent, their offloaded texts, and how to render
//! them request-ready.
//!
//! The session holds each message exactly as the client sent it (full texts restored from the
//! offload files after a restart). What the model sees is *rendered* on every call from that
//! original and the message's position, so the second truncation phase is just a smaller
//! limit applied to the same original: nothing is ever cut from what satchel keeps.

use satchel_core::format::MessageFormat;
use satchel_core::offload::recent_start;
use satchel_core::render::{OffloadedText, RenderedText, render_message};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{Config, Phase};
use satchel_storage::{StoredMessage, StoredOffload};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One message of a session.
#[derive(Debug, Clone)]
pub struct Entry {
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
    pub fn new(hash: String, message: Value, offloaded: Vec<OffloadedText>) -> Self {
        Entry {
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
    /// Position in the session.
    pub index: usize,
    /// The phase it was rendered in.
    pub phase: Phase,
    /// Its offloaded texts as rendered.
    pub texts: Vec<RenderedText>,
}

/// The messages of one session.
#[derive(Debug, Default)]
pub struct Session {
    /// Format, once known.
    pub format: Option<MessageFormat>,
    /// Messages in order.
    pub entries: Vec<Entry>,
    /// What the cached token counts depend on; a change clears them.
    count_key: Option<String>,
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
    /// Messages as JSON values, for the format helpers that scan history.
    pub fn messages(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().map(|e| &e.message)
    }

    /// Length of the prefix of `incoming` this session already holds.
    ///
    /// A message matches when it is byte-identical to what the client first sent, or to what
    /// satchel returned for it (a client may store and resend the rendered view).
    pub fn matching_prefix(&self, incoming: &[Value], incoming_hashes: &[String], config: &Config) -> usize {
        incoming
            .iter()
            .zip(incoming_hashes)
            .zip(&self.entries)
            .take_while(|((message, hash), entry)| {
                **hash == entry.hash
                    || (!entry.offloaded.is_empty()
                        && [Phase::Recent, Phase::Old].into_iter().any(|phase| {
                            &render_message(&entry.message, &entry.offloaded, phase, config).0 == *message
                        }))
            })
            .count()
    }

    /// Renders every message request-ready, with the phase given by its position; also
    /// returns which messages carry truncated texts.
    pub fn render(&self, config: &Config) -> (Vec<Value>, Vec<TruncatedMessage>) {
        let format = format_or_default(self.format);
        let values: Vec<&Value> = self.messages().collect();
        let recent_start = recent_start(&values, format, config.pruning_recent_n);
        let mut out = Vec::with_capacity(self.entries.len());
        let mut truncated = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let phase = if index >= recent_start {
                Phase::Recent
            } else {
                Phase::Old
            };
            let (message, texts) = render_message(&entry.message, &entry.offloaded, phase, config);
            if texts.iter().any(|t| t.kept_bytes.is_some()) {
                truncated.push(TruncatedMessage { index, phase, texts });
            }
            out.push(message);
        }
        (out, truncated)
    }

    /// Token count of each rendered message, from the cache where possible.
    pub fn count_tokens(&mut self, rendered: &[Value], counter: &TokenCounter, config: &Config) -> Vec<u64> {
        let key = format!(
            "{:?}/{}/{}/{}/{}/{}/{}",
            counter.tokenizer(),
            config.token_count_estimate_divisor,
            config.pruning_enabled,
            config.pruning_recent_msg_max_bytes,
            config.pruning_old_msg_max_bytes,
            config.markdown_recent_msg_max_bytes,
            config.markdown_old_msg_max_bytes,
        ) + &format!(
            "/{}/{}/{:?}",
            config.pruning_slack_bytes, config.pruning_tail_ratio, config.read_file_tool_names
        );
        if self.count_key.as_deref() != Some(&key) {
            self.entries.iter_mut().for_each(|e| e.tokens = [None; 2]);
            self.count_key = Some(key);
        }
        let format = format_or_default(self.format);
        let values: Vec<&Value> = self.messages().collect();
        let recent_start = recent_start(&values, format, config.pruning_recent_n);
        self.entries
            .iter_mut()
            .zip(rendered)
            .enumerate()
            .map(|(index, (entry, message))| {
                // Messages without offloaded texts render the same in both phases.
                let slot = usize::from(index < recent_start && !entry.offloaded.is_empty());
                *entry.tokens[slot].get_or_insert_with(|| counter.count_message(message))
            })
            .collect()
    }
}
