//! Taking a call's messages into a session: reconcile them with what it holds, offload the
//! large texts of the new ones, and log them durably before the session in memory changes.

use std::sync::Arc;

use satchel_core::format;
use satchel_core::hash::MessageHash;
use satchel_core::offload;
use satchel_core::render::OffloadedText;
use satchel_core::truncate::TextStats;
use satchel_protocol::{Action, Config, MessageFormat, Reconciliation};
use satchel_storage::{PendingSync, SessionRecord, StorageError};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::parallel::map_weighted;
use crate::session::{Alignment, Entry, IncomingHashes, Session, format_or_default};

/// The messages of a call.
pub(crate) enum Incoming {
    /// The whole history (`messages`).
    Full(Vec<Box<RawValue>>),
    /// Only what is new (`append`).
    Append(Vec<Box<RawValue>>),
}

impl Incoming {
    /// Exactly one of `messages` and `append`, every message a JSON object.
    pub(crate) fn of(
        messages: Option<Vec<Box<RawValue>>>,
        append: Option<Vec<Box<RawValue>>>,
    ) -> Result<Self, EngineError> {
        let incoming = match (messages, append) {
            (Some(m), None) => Incoming::Full(m),
            (None, Some(a)) => Incoming::Append(a),
            (Some(_), Some(_)) => {
                return Err(EngineError::invalid_params(
                    "append",
                    "give either `messages` or `append`, not both",
                ));
            }
            (None, None) => {
                return Err(EngineError::invalid_params(
                    "messages",
                    "one of `messages` or `append` is required",
                ));
            }
        };
        let (field, list) = match &incoming {
            Incoming::Full(list) => ("messages", list),
            Incoming::Append(list) => ("append", list),
        };
        if let Some(index) = list.iter().position(|m| !m.get().starts_with('{')) {
            return Err(EngineError::invalid_params(
                &format!("{field}[{index}]"),
                "each message must be a JSON object",
            ));
        }
        Ok(incoming)
    }

    /// Whether this is the whole history.
    pub(crate) fn is_full_list(&self) -> bool {
        matches!(self, Incoming::Full(_))
    }
}

/// A call's writes still running on the background threads. Waited for before the call
/// answers, and on drop, so that no early return leaves them running past a rollback.
#[derive(Debug, Default)]
pub(crate) struct Writes(Option<PendingSync>);

impl Writes {
    /// Waits until the writes are durable (or failed).
    pub(crate) fn wait(&mut self) -> Result<(), StorageError> {
        self.0.take().map_or(Ok(()), PendingSync::wait)
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        if let Some(pending) = self.0.take() {
            let _ = pending.wait();
        }
    }
}

/// What ingesting a call's messages did.
pub(crate) struct Ingested {
    /// The call's writes (its offloaded texts, then its session log records).
    pub durable: Writes,
    /// Original index of the first message new in this call.
    pub first_new_index: usize,
    /// Start of the recent window among the live messages before this call.
    pub recent_start_before: usize,
    /// The counts for the client.
    pub report: Reconciliation,
}

impl Engine {
    /// Reconciles the received messages with the session, offloads the large texts of new
    /// ones, and logs them durably before the in-memory session changes.
    pub(crate) fn ingest(
        &self,
        id: &str,
        session: &mut Session,
        incoming: Incoming,
        declared: Option<MessageFormat>,
        config: &Config,
        actions: &mut Vec<Action>,
    ) -> Result<Ingested, EngineError> {
        let (incoming, is_full_list) = match incoming {
            Incoming::Full(list) => (list, true),
            Incoming::Append(list) => (list, false),
        };
        let mut hashes = IncomingHashes::new(&incoming);
        let alignment = if is_full_list {
            session.align(&mut hashes, config)
        } else {
            Alignment::Extends { consumed: 0 }
        };
        let mut records = Vec::new();
        let (consumed, replaced) = match alignment {
            Alignment::Extends { consumed } => (consumed, 0),
            Alignment::DivergesAt { at } => {
                records.push(SessionRecord::Truncate { keep: at });
                (at, session.entries.iter().filter(|e| e.index >= at).count())
            }
            Alignment::Reset => {
                records.push(SessionRecord::Reset);
                (0, session.original_hashes.len())
            }
        };
        let new_text_hashes: Vec<Option<u128>> =
            (consumed..incoming.len()).map(|j| Some(hashes.text_hash(j))).collect();
        drop(hashes);
        let mut new_raws: Vec<Box<RawValue>> = incoming.into_iter().skip(consumed).collect();
        let parsed = map_weighted(
            &mut new_raws,
            |_, raw| raw.get().len(),
            |_, raw| serde_json::from_str::<Value>(raw.get()),
        )
        .into_iter()
        .collect::<Result<Vec<Value>, _>>()
        .map_err(|e| EngineError::invalid_params("messages", e))?;
        // Hashed from the parsed values: cheaper than from text, which must be unescaped.
        let new_hashes: Vec<MessageHash> = parsed.iter().map(MessageHash::of_value).collect();
        let appended = parsed.len();
        let format = declared.or(session.format).or_else(|| format::detect(&parsed));
        if format.is_some() && session.format.is_none() {
            records.insert(
                0,
                SessionRecord::Format {
                    format: format_or_default(format),
                },
            );
        }
        let processing_format = format_or_default(format);

        // What the session keeps of its live messages after a truncation or reset.
        let kept_live: &[Entry] = match alignment {
            Alignment::Extends { .. } => &session.entries,
            Alignment::DivergesAt { at } => {
                let n = session.entries.iter().take_while(|e| e.index < at).count();
                &session.entries[..n]
            }
            Alignment::Reset => &[],
        };
        let first_new_index = match alignment {
            Alignment::Extends { .. } => session.original_hashes.len(),
            Alignment::DivergesAt { at } => at,
            Alignment::Reset => 0,
        };
        let selected = select_offloads(&parsed, kept_live, processing_format, config);
        let texts: Vec<&str> = selected.iter().map(|s| s.full(&parsed)).collect();
        let plan = self.offloads.plan(&texts);
        let mut new_offloads: Vec<Vec<OffloadedText>> = vec![Vec::new(); parsed.len()];
        for (selected, saved) in selected.into_iter().zip(&plan.saved) {
            let stats = TextStats::of(selected.full(&parsed));
            actions.push(Action::Offloaded {
                index: first_new_index + selected.position,
                pointer: selected.pointer.clone(),
                file: saved.rel_path.clone(),
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                newly_written: saved.newly_written,
            });
            new_offloads[selected.position].push(OffloadedText {
                pointer: selected.pointer,
                file: saved.rel_path.clone(),
                stats,
                call: selected.call,
            });
        }
        // The texts leave their messages (moved, not copied): the files will hold them, and
        // until the call ends the entries keep them for rendering and compaction.
        let mut parsed = parsed;
        let mut offloaded_texts: Vec<Arc<String>> = Vec::with_capacity(plan.saved.len());
        let mut new_fresh: Vec<Vec<Arc<String>>> = vec![Vec::new(); parsed.len()];
        for (position, offloaded) in new_offloads.iter().enumerate() {
            for text in offloaded {
                let slot = parsed[position]
                    .pointer_mut(&text.pointer)
                    .expect("an offloaded text was found at its pointer");
                let Value::String(full) = std::mem::replace(slot, Value::String(String::new())) else {
                    unreachable!("only string texts are offloaded");
                };
                let full = Arc::new(full);
                offloaded_texts.push(full.clone());
                new_fresh[position].push(full);
            }
        }
        let mut new_entries = Vec::with_capacity(parsed.len());
        for (position, ((((message, hash), raw), offloaded), fresh)) in parsed
            .into_iter()
            .zip(new_hashes.iter().copied())
            .zip(new_raws)
            .zip(new_offloads)
            .zip(new_fresh)
            .enumerate()
        {
            let entry =
                Entry::new(first_new_index + position, hash, message, offloaded, Some(raw)).with_fresh_texts(fresh);
            records.push(SessionRecord::Message(entry.to_stored()));
            new_entries.push(entry);
        }
        // New offloaded texts are written, then the records that refer to them, on the
        // bulk-write thread: rendering and compaction meanwhile read the texts from memory,
        // and `prepare` waits for both before answering (and before a compaction logs
        // anything after these records). Without new files, only the fsync runs there.
        let durable = if plan.writes_nothing() {
            self.sessions.append_then_sync(id, &records)?
        } else {
            let offloads = self.offloads.clone();
            let write_texts = move || {
                let texts: Vec<&str> = offloaded_texts.iter().map(|t| t.as_str()).collect();
                offloads.write(&plan, &texts)
            };
            Some(self.sessions.append_in_background(id, records, write_texts)?)
        };

        let recent_start_before = {
            let held: Vec<&Value> = kept_live.iter().map(|e| &e.message).collect();
            offload::recent_start(&held, processing_format, config.pruning_recent_n)
        };
        match alignment {
            Alignment::Extends { .. } => {}
            Alignment::DivergesAt { at } => {
                session.original_hashes.truncate(at);
                session.text_hashes.truncate(at);
                session.entries.retain(|e| e.index < at);
            }
            Alignment::Reset => {
                *session = Session::new(session.format, self.offloads.clone());
            }
        }
        session.original_hashes.extend_from_slice(&new_hashes);
        session.text_hashes.extend(new_text_hashes);
        session.entries.extend(new_entries);
        session.format = format;
        Ok(Ingested {
            durable: Writes(durable),
            first_new_index,
            recent_start_before,
            report: Reconciliation {
                session_messages: session.original_hashes.len(),
                reused: consumed,
                appended,
                replaced,
            },
        })
    }
}

/// A tool-result text of a new message that goes to an offload file.
struct SelectedText {
    /// Position of its message among the new ones.
    position: usize,
    /// JSON pointer of the text inside the message.
    pointer: String,
    /// The tool call it answers, when found.
    call: Option<format::ToolCall>,
}

impl SelectedText {
    fn full<'a>(&self, messages: &'a [Value]) -> &'a str {
        messages[self.position]
            .pointer(&self.pointer)
            .and_then(Value::as_str)
            .expect("a selected text is a string at its pointer")
    }
}

/// Which texts of the `new` messages must be offloaded, given the live messages before them.
fn select_offloads(new: &[Value], kept_live: &[Entry], format: MessageFormat, config: &Config) -> Vec<SelectedText> {
    let mut selected = Vec::new();
    for (position, message) in new.iter().enumerate() {
        let earlier = || {
            new[..position]
                .iter()
                .rev()
                .chain(kept_live.iter().rev().map(|e| &e.message))
        };
        for text in format::result_texts(message, format) {
            let Some(Value::String(full)) = message.pointer(&text.pointer) else {
                continue;
            };
            let call = text
                .call_id
                .as_deref()
                .and_then(|cid| format::find_call(earlier(), cid, format));
            if offload::must_offload(full.len(), offload::classify(call.as_ref(), config), config) {
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
