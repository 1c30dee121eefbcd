//! Taking a call's messages into a session: reconcile them with what it holds, offload the
//! large texts of the new ones, and log them durably before the session in memory changes.

use std::sync::Arc;

use satchel_core::format;
use satchel_core::hash::MessageHash;
use satchel_core::limits::{MAX_JSON_DEPTH, exceeds_depth, too_deep_message};
use satchel_core::offload::select_offloads;
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
        let reconciled = reconcile(session, &incoming, is_full_list, config)?;
        let NewMessages {
            raws,
            mut parsed,
            hashes: new_hashes,
        } = NewMessages::parse(incoming, reconciled.consumed, is_full_list)?;
        let format = declared.or(session.format()).or_else(|| format::detect(&parsed));
        let processing_format = format_or_default(format);
        let mut records: Vec<SessionRecord> = Vec::new();
        if format.is_some() && session.format().is_none() {
            records.push(SessionRecord::Format {
                format: processing_format,
            });
        }
        records.extend(reconciled.record());
        let kept_live = reconciled.kept_live(session.entries());
        let first_new_index = reconciled.first_new_index(session.history_len());
        let offloads = self.offload_new(&parsed, kept_live, processing_format, config, first_new_index, actions);
        let (offloaded_texts, fresh) = take_offloaded_texts(&mut parsed, &offloads.per_message);
        let new_entries = new_entries(first_new_index, parsed, &new_hashes, raws, offloads.per_message, fresh);
        records.extend(new_entries.iter().map(|e| SessionRecord::Message(e.to_stored())));
        let durable = self.log_ingested(id, records, offloads.write, offloaded_texts)?;
        let recent_start_before = session.recent_start_of(kept_live, config);
        let appended = new_entries.len();
        session.take_in(
            reconciled.alignment,
            &new_hashes,
            &reconciled.new_text_hashes,
            new_entries,
            format,
        );
        Ok(Ingested {
            durable,
            first_new_index,
            recent_start_before,
            report: Reconciliation {
                session_messages: session.history_len(),
                reused: reconciled.consumed,
                appended,
                replaced: reconciled.replaced,
            },
        })
    }

    /// Selects the texts of the new messages that go to offload files, plans where they go
    /// (reporting an `offloaded` action for each), and prepares their write.
    fn offload_new(
        &self,
        parsed: &[Value],
        kept_live: &[Entry],
        format: MessageFormat,
        config: &Config,
        first_new_index: usize,
        actions: &mut Vec<Action>,
    ) -> NewOffloads {
        let selected = select_offloads(parsed, kept_live.iter().map(|e| &e.message), format, config);
        let texts: Vec<&str> = selected.iter().map(|s| s.full(parsed)).collect();
        let plan = self.offloads.plan(&texts);
        let mut per_message: Vec<Vec<OffloadedText>> = vec![Vec::new(); parsed.len()];
        for (selected, saved) in selected.into_iter().zip(&plan.saved) {
            let stats = TextStats::of(selected.full(parsed));
            actions.push(Action::Offloaded {
                index: first_new_index + selected.position,
                pointer: selected.pointer.clone(),
                file: saved.rel_path.clone(),
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                newly_written: saved.newly_written,
            });
            per_message[selected.position].push(OffloadedText {
                pointer: selected.pointer,
                file: saved.rel_path.clone(),
                stats,
                call: selected.call,
            });
        }
        let write = (!plan.writes_nothing()).then(|| {
            let offloads = self.offloads.clone();
            let write: WriteTexts = Box::new(move |texts: Vec<Arc<String>>| {
                let texts: Vec<&str> = texts.iter().map(|t| t.as_str()).collect();
                offloads.write(&plan, &texts)
            });
            write
        });
        NewOffloads { per_message, write }
    }

    /// Logs a call's records. New offloaded texts are written, then the records that refer
    /// to them, on the bulk-write thread: rendering and compaction meanwhile read the texts
    /// from memory, and `prepare` waits for both before answering (and before a compaction
    /// logs anything after these records). Without new files, only the fsync runs there.
    fn log_ingested(
        &self,
        id: &str,
        records: Vec<SessionRecord>,
        write_texts: Option<WriteTexts>,
        texts: Vec<Arc<String>>,
    ) -> Result<Writes, EngineError> {
        let pending = match write_texts {
            None => self.sessions.append_then_sync(id, &records)?,
            Some(write) => Some(self.sessions.append_in_background(id, records, move || write(texts))?),
        };
        Ok(Writes(pending))
    }
}

/// How a call's messages relate to what the session holds.
struct Reconciled {
    /// Where the received list joins the session.
    alignment: Alignment,
    /// Received messages already held (not processed again).
    consumed: usize,
    /// Held messages the received list replaces.
    replaced: usize,
    /// Exact-text hashes of the new messages (those after `consumed`).
    new_text_hashes: Vec<Option<u128>>,
}

/// Aligns the received messages with the session (a full list; an `append` extends it).
fn reconcile(
    session: &mut Session,
    incoming: &[Box<RawValue>],
    is_full_list: bool,
    config: &Config,
) -> Result<Reconciled, EngineError> {
    let mut hashes = IncomingHashes::new(incoming);
    refuse_too_deep(session, &hashes, incoming, is_full_list)?;
    let alignment = if is_full_list {
        session.align(&mut hashes, config)
    } else {
        Alignment::Extends { consumed: 0 }
    };
    let (consumed, replaced) = match alignment {
        Alignment::Extends { consumed } => (consumed, 0),
        Alignment::DivergesAt { at } => (at, session.entries().iter().filter(|e| e.index >= at).count()),
        Alignment::Reset => (0, session.history_len()),
    };
    Ok(Reconciled {
        alignment,
        consumed,
        replaced,
        new_text_hashes: (consumed..incoming.len()).map(|j| Some(hashes.text_hash(j))).collect(),
    })
}

/// Refuses a received message nested past [`MAX_JSON_DEPTH`] before it is hashed, parsed or
/// stored: the records that hold a message are deeper than the message, and must stay
/// readable. A message the session holds in the same bytes passed this check when it came,
/// so only the others are scanned: a steady full resend scans its new messages only.
fn refuse_too_deep(
    session: &Session,
    hashes: &IncomingHashes<'_>,
    incoming: &[Box<RawValue>],
    is_full_list: bool,
) -> Result<(), EngineError> {
    let field = if is_full_list { "messages" } else { "append" };
    for (j, raw) in incoming.iter().enumerate() {
        let held = is_full_list && session.text_hash(j) == Some(hashes.text_hash(j));
        if !held && exceeds_depth(raw.get(), MAX_JSON_DEPTH) {
            return Err(EngineError::invalid_params(
                &format!("{field}[{j}]"),
                too_deep_message(),
            ));
        }
    }
    Ok(())
}

impl Reconciled {
    /// The log record that cuts the session back before the new messages, if any.
    fn record(&self) -> Option<SessionRecord> {
        match self.alignment {
            Alignment::Extends { .. } => None,
            Alignment::DivergesAt { at } => Some(SessionRecord::Truncate { keep: at }),
            Alignment::Reset => Some(SessionRecord::Reset),
        }
    }

    /// What the session keeps of its live messages `entries` after a truncation or reset.
    fn kept_live<'e>(&self, entries: &'e [Entry]) -> &'e [Entry] {
        match self.alignment {
            Alignment::Extends { .. } => entries,
            Alignment::DivergesAt { at } => &entries[..entries.iter().take_while(|e| e.index < at).count()],
            Alignment::Reset => &[],
        }
    }

    /// Original index of the first new message, in a session that held `known` messages.
    fn first_new_index(&self, known: usize) -> usize {
        match self.alignment {
            Alignment::Extends { .. } => known,
            Alignment::DivergesAt { at } => at,
            Alignment::Reset => 0,
        }
    }
}

/// The messages new in a call: as received, parsed, and hashed.
struct NewMessages {
    raws: Vec<Box<RawValue>>,
    parsed: Vec<Value>,
    hashes: Vec<MessageHash>,
}

impl NewMessages {
    /// Parses the received messages after the first `consumed` (a big batch on several cores),
    /// and refuses a message without a known role, naming it (`messages[3].role`). A message
    /// the session holds was checked when it came.
    fn parse(incoming: Vec<Box<RawValue>>, consumed: usize, is_full_list: bool) -> Result<Self, EngineError> {
        let mut raws: Vec<Box<RawValue>> = incoming.into_iter().skip(consumed).collect();
        let parsed = map_weighted(
            &mut raws,
            |_, raw| raw.get().len(),
            |_, raw| serde_json::from_str::<Value>(raw.get()),
        )
        .into_iter()
        .collect::<Result<Vec<Value>, _>>()
        .map_err(|e| EngineError::invalid_params("messages", e))?;
        let field = if is_full_list { "messages" } else { "append" };
        for (position, message) in parsed.iter().enumerate() {
            if let Some(problem) = format::role_problem(message) {
                let index = consumed + position;
                return Err(EngineError::invalid_params(&format!("{field}[{index}].role"), problem));
            }
        }
        // Hashed from the parsed values: cheaper than from text, which must be unescaped.
        let hashes = parsed.iter().map(MessageHash::of_value).collect();
        Ok(NewMessages { raws, parsed, hashes })
    }
}

/// Writes a call's new offloaded texts (given in plan order) to their files.
type WriteTexts = Box<dyn FnOnce(Vec<Arc<String>>) -> Result<(), StorageError> + Send>;

/// The new messages' offloaded texts.
struct NewOffloads {
    /// Per new message, its texts that go to files.
    per_message: Vec<Vec<OffloadedText>>,
    /// Writes the files not stored yet; `None` when every text is stored already.
    write: Option<WriteTexts>,
}

/// Moves the offloaded texts out of their messages (the files will hold them): returns them
/// all, in order, to write, and per message, for the entries to keep until the call ends
/// (rendering and compaction read them meanwhile).
fn take_offloaded_texts(
    parsed: &mut [Value],
    per_message: &[Vec<OffloadedText>],
) -> (Vec<Arc<String>>, Vec<Vec<Arc<String>>>) {
    let mut all: Vec<Arc<String>> = Vec::new();
    let mut fresh: Vec<Vec<Arc<String>>> = vec![Vec::new(); parsed.len()];
    for (position, offloaded) in per_message.iter().enumerate() {
        for text in offloaded {
            let slot = parsed[position]
                .pointer_mut(&text.pointer)
                .expect("an offloaded text was found at its pointer");
            let Value::String(full) = std::mem::replace(slot, Value::String(String::new())) else {
                unreachable!("only string texts are offloaded");
            };
            let full = Arc::new(full);
            all.push(full.clone());
            fresh[position].push(full);
        }
    }
    (all, fresh)
}

/// The entries of the new messages, the first at original index `first_index`.
fn new_entries(
    first_index: usize,
    parsed: Vec<Value>,
    hashes: &[MessageHash],
    raws: Vec<Box<RawValue>>,
    offloaded: Vec<Vec<OffloadedText>>,
    fresh: Vec<Vec<Arc<String>>>,
) -> Vec<Entry> {
    parsed
        .into_iter()
        .zip(hashes.iter().copied())
        .zip(raws)
        .zip(offloaded)
        .zip(fresh)
        .enumerate()
        .map(|(position, ((((message, hash), raw), offloaded), fresh))| {
            Entry::new(first_index + position, hash, message, offloaded, Some(raw)).with_fresh_texts(fresh)
        })
        .collect()
}
