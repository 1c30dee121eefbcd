//! Session logs: one append-only JSONL file per session, replayed on load.
//!
//! Appending is the only write, so an acknowledged `context.prepare` is on disk before its
//! reply and `kill -9` at any point leaves a prefix of whole records (a torn last line is
//! dropped on load, with a warning). An append that fails is undone before it is reported
//! (see [`crate::durable`]), so a full disk never leaves a fragment for the next append to be
//! glued to. Even a client that rewrites its history only appends a `truncate`
//! record: replaced messages stay in the log.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::path::PathBuf;

use satchel_protocol::{
    AgentCompaction, ArchiveRange, Calibration, CompactSummary, DroppedIdentifier, MessageFormat, SessionOrigin,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::{Lane, PendingSync, Steps, append_durable_at, append_then_sync, in_background, settle};
use crate::error::{StorageError, io};
use crate::layout::Layout;
use crate::workspace::Workspace;

/// A tool-result text whose full content lives in an offload file; in the stored message the
/// string at `pointer` is emptied to keep the log small.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOffload {
    /// JSON pointer of the text inside the message.
    pub pointer: String,
    /// Workspace-relative offload file.
    pub file: String,
    /// Size of the full text.
    pub total_bytes: usize,
    /// Lines of the full text.
    pub total_lines: usize,
}

/// One message of a session as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// Hash of the message as the client sent it, to recognise it when sent again.
    pub hash: String,
    /// The message, with offloaded texts emptied.
    pub message: Value,
    /// The offloaded texts of this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offloads: Vec<StoredOffload>,
}

/// One line of a session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum SessionRecord {
    /// The session's message format became known.
    Format {
        /// The format.
        format: MessageFormat,
    },
    /// A message entered the session.
    Message(StoredMessage),
    /// The client's history diverged: only messages with an original index below `keep` remain.
    Truncate {
        /// Messages kept.
        keep: usize,
    },
    /// The client's history diverged inside the compacted part: the session starts over
    /// (the archive keeps everything).
    Reset,
    /// A compaction started: its messages leave the session and its summary is in force.
    /// Written before the archive append, so a crash after it is finished on load.
    CompactionBegun(Box<CompactionBegun>),
    /// The compaction's messages are durably in the archive at `range` (and `more_ranges`).
    CompactionDone {
        /// The compaction.
        id: String,
        /// Where its messages are: the first run of lines holding them (all of them, but after
        /// a crash mid-archive).
        range: ArchiveRange,
        /// The further runs of lines holding its messages, oldest first. A compaction a crash
        /// interrupted mid-archive and finished later is in two runs when other sessions
        /// archived in between: each run holds only its own lines. Empty (and not written)
        /// otherwise, and in logs of an older satchel.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        more_ranges: Vec<ArchiveRange>,
        /// Request tokens right after it (absent when a restart finished it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens_after: Option<u64>,
    },
    /// The client reported the provider's usage: counts are corrected by this from now on.
    Calibration(Calibration),
    /// A `context.prepare` sent other per-request `config` overrides than the session's
    /// previous one (empty: none), kept for inspection after a restart. Logs written before
    /// this record existed simply have none.
    RequestConfig {
        /// The overrides as sent.
        overrides: serde_json::Map<String, Value>,
    },
    /// `context.expand`: the next request carries this archived span after the summary.
    Expand(Expansion),
    /// The request that carried expansion `id` was returned: it is not carried again.
    ExpandDone {
        /// The expansion.
        id: String,
    },
    /// `context.pin`.
    Pin(PinRecord),
    /// `context.unpin`.
    Unpin {
        /// The pin.
        id: String,
    },
    /// `satchel proxy` named the session (or named it differently than before): the
    /// provider API and what named it. Logs of JSON-RPC sessions have none.
    Origin {
        /// `anthropic-messages`, `openai-chat` or `openai-responses`.
        api: String,
        /// What named the session.
        key_from: String,
    },
    /// A proxied request in which the agent asked its model to summarise the conversation.
    AgentCompaction(AgentCompaction),
    /// `context.purge`: the result is a stub in every later request.
    Purge {
        /// The result (`r12`).
        result_id: String,
    },
}

/// A pin as logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinRecord {
    /// `p1`, `p2`, … in the order pins were made in the session.
    pub id: String,
    /// The client's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What it keeps.
    pub target: PinTarget,
}

/// What a pin keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PinTarget {
    /// A message, by original index.
    Message {
        /// Its original index.
        index: usize,
    },
    /// A text of the client's.
    Text {
        /// The text.
        text: String,
    },
    /// An offloaded tool result: the `k`-th offloaded text of message `index` (`r{index}`,
    /// `r{index}.{k}`).
    Result {
        /// Original index of its message.
        index: usize,
        /// Its position among the message's offloaded texts.
        k: usize,
    },
}

/// A compacted span a client asked back into the next request (`context.expand`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansion {
    /// Unique id, for its done record.
    pub id: String,
    /// The archive file.
    pub file: String,
    /// First and last line (1-based, inclusive) of the span that fit the budget.
    pub start_line: usize,
    /// See `start_line`.
    pub end_line: usize,
    /// The further runs of lines of the span, oldest first, when it is not one run (the span
    /// of a compaction finished after a crash, see [`SessionRecord::CompactionDone`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_runs: Vec<LineRun>,
}

impl Expansion {
    /// Every run of lines of the span, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = LineRun> + '_ {
        let first = LineRun {
            start_line: self.start_line,
            end_line: self.end_line,
        };
        std::iter::once(first).chain(self.more_runs.iter().copied())
    }
}

/// Consecutive lines of an archive file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineRun {
    /// First line (1-based).
    pub start_line: usize,
    /// Last line (inclusive).
    pub end_line: usize,
}

/// A compaction as logged when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionBegun {
    /// Unique id, also written on each archive line.
    pub id: String,
    /// Original indices of the messages compacted.
    pub indices: Vec<usize>,
    /// The summary in force afterwards, without this compaction's archive range.
    pub summary: CompactSummary,
    /// The archive file the messages go to.
    pub archive_file: String,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Tokens of the request before and after.
    pub tokens_before: u64,
    /// See `tokens_before`.
    pub tokens_after: u64,
    /// Requested by `context.compact` rather than triggered by the threshold.
    pub manual: bool,
    /// Which summariser wrote the summary.
    #[serde(default = "extractive")]
    pub summarizer: String,
    /// What of the compacted span the summary no longer names, ranked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedIdentifier>,
}

fn extractive() -> String {
    "extractive".into()
}

/// A compaction as replayed: what it did and, once done, where its messages are.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionInfo {
    /// The start record.
    pub begun: CompactionBegun,
    /// The archive range, once the messages are archived: the first run of lines holding
    /// them (see [`SessionRecord::CompactionDone`]).
    pub range: Option<ArchiveRange>,
    /// The further runs of lines holding them, oldest first; empty for a compaction archived
    /// in one run.
    pub more_ranges: Vec<ArchiveRange>,
}

impl CompactionInfo {
    /// A compaction done, its messages archived in `ranges` (one run of lines, or more).
    pub fn archived(begun: CompactionBegun, mut ranges: Vec<ArchiveRange>) -> Self {
        let range = (!ranges.is_empty()).then(|| ranges.remove(0));
        CompactionInfo {
            begun,
            range,
            more_ranges: ranges,
        }
    }

    /// Every run of archive lines holding the compaction's messages, oldest first.
    pub fn ranges(&self) -> impl Iterator<Item = &ArchiveRange> {
        self.range.iter().chain(&self.more_ranges)
    }
}

/// A session as replayed from its log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionLog {
    /// Format, once detected or declared.
    pub format: Option<MessageFormat>,
    /// Hash of every message of the original history, by original index.
    pub original_hashes: Vec<String>,
    /// Messages still in the session, with their original index, in order.
    pub messages: Vec<(usize, StoredMessage)>,
    /// The summary in force.
    pub summary: Option<CompactSummary>,
    /// Finished compactions, oldest first.
    pub compactions: Vec<CompactionInfo>,
    /// A compaction a crash interrupted after it started, with the messages it removed:
    /// the caller finishes it (archives what is missing, then logs it done).
    pub pending: Option<(CompactionBegun, Vec<(usize, StoredMessage)>)>,
    /// The correction learned from the provider's reported usage, the latest.
    pub calibration: Option<Calibration>,
    /// A span asked back by `context.expand` that no request has carried yet.
    pub expansion: Option<Expansion>,
    /// Pins in force, oldest first.
    pub pins: Vec<PinRecord>,
    /// Pins ever made (the next is `p{made + 1}`).
    pub pins_made: usize,
    /// Results purged (`r12`).
    pub purged: std::collections::BTreeSet<String>,
    /// The per-request config overrides of the last `context.prepare`, the latest logged.
    pub config_overrides: serde_json::Map<String, Value>,
    /// Where a proxied session's requests come from, the latest logged, with the agent's
    /// own compactions.
    pub origin: Option<SessionOrigin>,
}

impl SessionLog {
    fn apply(&mut self, record: SessionRecord) {
        match record {
            SessionRecord::Format { format } => self.format = Some(format),
            SessionRecord::Message(m) => {
                self.messages.push((self.original_hashes.len(), m.clone()));
                self.original_hashes.push(m.hash);
            }
            SessionRecord::Truncate { keep } => {
                self.original_hashes.truncate(keep);
                self.messages.retain(|(i, _)| *i < keep);
            }
            SessionRecord::Reset => {
                // Message numbering starts over: pins of messages and results, and purges,
                // named the old history's messages; pinned texts stay.
                let mut pins = std::mem::take(&mut self.pins);
                pins.retain(|p| matches!(p.target, PinTarget::Text { .. }));
                *self = SessionLog {
                    format: self.format,
                    calibration: self.calibration,
                    config_overrides: std::mem::take(&mut self.config_overrides),
                    origin: self.origin.take(),
                    compactions: std::mem::take(&mut self.compactions),
                    pins,
                    pins_made: self.pins_made,
                    ..Default::default()
                };
            }
            SessionRecord::CompactionBegun(begun) => {
                let compacted: HashSet<usize> = begun.indices.iter().copied().collect();
                let (removed, kept) = std::mem::take(&mut self.messages)
                    .into_iter()
                    .partition(|(i, _)| compacted.contains(i));
                self.messages = kept;
                self.summary = Some(begun.summary.clone());
                self.pending = Some((*begun, removed));
            }
            SessionRecord::Calibration(calibration) => self.calibration = Some(calibration),
            SessionRecord::Expand(expansion) => self.expansion = Some(expansion),
            SessionRecord::Pin(pin) => {
                self.pins_made += 1;
                self.pins.push(pin);
            }
            SessionRecord::Unpin { id } => self.pins.retain(|p| p.id != id),
            SessionRecord::Purge { result_id } => {
                self.purged.insert(result_id);
            }
            SessionRecord::ExpandDone { id } => {
                if self.expansion.as_ref().is_some_and(|e| e.id == id) {
                    self.expansion = None;
                }
            }
            SessionRecord::RequestConfig { overrides } => self.config_overrides = overrides,
            SessionRecord::Origin { api, key_from } => {
                let origin = self.origin.get_or_insert_with(SessionOrigin::default);
                origin.api = api;
                origin.key_from = key_from;
            }
            SessionRecord::AgentCompaction(compaction) => self
                .origin
                .get_or_insert_with(SessionOrigin::default)
                .agent_compactions
                .push(compaction),
            SessionRecord::CompactionDone {
                id,
                range,
                more_ranges,
                tokens_after,
            } => {
                if let Some((mut begun, _)) = self.pending.take_if(|(b, _)| b.id == id) {
                    begun.tokens_after = tokens_after.unwrap_or(begun.tokens_after);
                    let mut ranges = more_ranges;
                    ranges.insert(0, range);
                    if let Some(summary) = &mut self.summary {
                        summary.add_archive_ranges(&ranges, &begun.indices);
                    }
                    self.compactions.push(CompactionInfo::archived(begun, ranges));
                }
            }
        }
    }
}

/// Where a session log ended at some moment: see [`SessionStore::mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMark {
    /// Its length in bytes; `None` when it did not exist.
    len: Option<u64>,
}

/// The `sessions/` directory.
#[derive(Debug, Clone)]
pub struct SessionStore {
    layout: Layout,
}

impl SessionStore {
    /// The session store of a workspace.
    pub fn new(workspace: &Workspace) -> Self {
        SessionStore {
            layout: workspace.layout().clone(),
        }
    }

    /// Checks that a client-supplied id is a safe, portable file name.
    pub fn validate_id(id: &str) -> Result<(), StorageError> {
        let ok = (1..=128).contains(&id.len())
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(())
        } else {
            Err(StorageError::InvalidSessionId(id.to_owned()))
        }
    }

    fn path(&self, id: &str) -> Result<PathBuf, StorageError> {
        Self::validate_id(id)?;
        Ok(self.layout.session_log(id))
    }

    /// Replays a session's log; `None` when the session does not exist.
    pub fn load(&self, id: &str) -> Result<Option<SessionLog>, StorageError> {
        let path = self.path(id)?;
        settle(&path)?;
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StorageError::Io {
                    op: "read",
                    path,
                    source: e,
                });
            }
        };
        let (records, whole_len) = parse_records(&bytes).map_err(|message| StorageError::Corrupt {
            path: path.clone(),
            message,
        })?;
        if whole_len < bytes.len() {
            // A crash tore the last append; it was never acknowledged, so dropping it is exact.
            tracing::warn!(path = %path.display(), dropped = bytes.len() - whole_len, "dropping torn tail of session log");
            let file = OpenOptions::new().write(true).open(&path).map_err(io("open", &path))?;
            file.set_len(whole_len as u64).map_err(io("truncate", &path))?;
            file.sync_all().map_err(io("fsync", &path))?;
        }
        let mut log = SessionLog::default();
        for record in records {
            log.apply(record);
        }
        Ok(Some(log))
    }

    /// Where the log of session `id` ends now, to [`roll_back`](SessionStore::roll_back) to.
    pub fn mark(&self, id: &str) -> Result<LogMark, StorageError> {
        let path = self.path(id)?;
        settle(&path)?;
        match fs::metadata(&path) {
            Ok(meta) => Ok(LogMark { len: Some(meta.len()) }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LogMark { len: None }),
            Err(e) => Err(StorageError::Io {
                op: "stat",
                path,
                source: e,
            }),
        }
    }

    /// Cuts the log of session `id` back to `mark`: the records of a call that did not take
    /// effect (cancelled, or a later write failed) leave it. A log that did not exist at the
    /// mark is removed. Every write after the mark must have finished.
    pub fn roll_back(&self, id: &str, mark: &LogMark) -> Result<(), StorageError> {
        let path = self.path(id)?;
        settle(&path)?;
        match mark.len {
            Some(len) => {
                let file = OpenOptions::new().write(true).open(&path).map_err(io("open", &path))?;
                // Only ever shorter: a log already cut below the mark (a failed append undone)
                // must not grow a run of zero bytes.
                if file.metadata().map_err(io("stat", &path))?.len() > len {
                    file.set_len(len).map_err(io("truncate", &path))?;
                    file.sync_all().map_err(io("fsync", &path))?;
                }
                Ok(())
            }
            None => match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(StorageError::Io {
                    op: "remove",
                    path,
                    source: e,
                }),
            },
        }
    }

    /// Appends records with one write and one fsync. All or nothing: when the write or the
    /// fsync fails, the log is cut back to where it was before the error is reported.
    pub fn append(&self, id: &str, records: &[SessionRecord]) -> Result<(), StorageError> {
        match self.encode(id, records)? {
            Some((path, bytes)) => append_durable_at(&path, &bytes, Steps::SESSION),
            None => Ok(()),
        }
    }

    /// [`SessionStore::append`], with the fsync left running on a background thread while the
    /// caller goes on; `None` when there was nothing to append. Nothing may be acknowledged
    /// before [`PendingSync::wait`] returns.
    pub fn append_then_sync(&self, id: &str, records: &[SessionRecord]) -> Result<Option<PendingSync>, StorageError> {
        match self.encode(id, records)? {
            Some((path, bytes)) => append_then_sync(&path, &bytes, Steps::SESSION).map(Some),
            None => Ok(None),
        }
    }

    /// [`SessionStore::append`] on the background thread of bulk writes (`Lane::Bulk`),
    /// after `first` (the writes the records refer to, such as offloaded texts) has succeeded,
    /// while the caller goes on. If `first` fails nothing is appended. Nothing may be
    /// acknowledged before [`PendingSync::wait`] returns.
    pub fn append_in_background(
        &self,
        id: &str,
        records: Vec<SessionRecord>,
        first: impl FnOnce() -> Result<(), StorageError> + Send + 'static,
    ) -> Result<PendingSync, StorageError> {
        let path = self.path(id)?;
        let store = self.clone();
        let id = id.to_owned();
        Ok(in_background(Lane::Bulk, path, move || {
            first()?;
            store.append(&id, &records)
        }))
    }

    /// The log of session `id` and the lines that append `records` to it; `None` for no records.
    fn encode(&self, id: &str, records: &[SessionRecord]) -> Result<Option<(PathBuf, Vec<u8>)>, StorageError> {
        if records.is_empty() {
            return Ok(None);
        }
        let path = self.path(id)?;
        let mut buf = Vec::new();
        for record in records {
            serde_json::to_writer(&mut buf, record).map_err(|e| StorageError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
            buf.push(b'\n');
        }
        Ok(Some((path, buf)))
    }

    /// Ids of all stored sessions.
    pub fn list(&self) -> Result<Vec<String>, StorageError> {
        let dir = self.layout.sessions_dir();
        let mut ids: Vec<String> = fs::read_dir(&dir)
            .map_err(io("read dir", &dir))?
            .filter_map(|e| Layout::session_id_of(e.ok()?.file_name().to_str()?).map(str::to_owned))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Every offload file a message still in some session refers to. Compacted messages are
    /// in the archive with their full text, so their offload files may expire.
    pub fn referenced_files(&self) -> Result<HashSet<String>, StorageError> {
        let mut files = HashSet::new();
        for id in self.list()? {
            if let Some(log) = self.load(&id)? {
                let pending = log.pending.iter().flat_map(|(_, removed)| removed);
                for (_, m) in log.messages.iter().chain(pending) {
                    files.extend(m.offloads.iter().map(|o| o.file.clone()));
                }
            }
        }
        Ok(files)
    }
}

/// Parses whole lines; returns the records and the byte length of the well-formed prefix.
/// Only the final line may be torn (no trailing newline); anything else malformed is corruption.
fn parse_records(bytes: &[u8]) -> Result<(Vec<SessionRecord>, usize), String> {
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let Some(len) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            break; // torn tail
        };
        let line = &bytes[offset..offset + len];
        if !line.is_empty() {
            let record = serde_json::from_slice(line).map_err(|e| format!("line at byte {offset}: {e}"))?;
            records.push(record);
        }
        offset += len + 1;
    }
    Ok((records, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(text: &str) -> SessionRecord {
        SessionRecord::Message(StoredMessage {
            hash: text.into(),
            message: json!({"role": "user", "content": text}),
            offloads: vec![],
        })
    }

    use crate::failpoints::{Fault, Hits, Point, arm};

    fn hashes(store: &SessionStore, id: &str) -> Vec<String> {
        store.load(id).unwrap().unwrap().original_hashes
    }

    #[test]
    fn a_failed_append_leaves_the_log_as_it_was_and_loadable() {
        for point in [Point::SessionWrite, Point::SessionSync] {
            for fault in [Fault::Enospc, Fault::Eio, Fault::Torn] {
                let dir = tempfile::tempdir().unwrap();
                let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
                let root = dir.path().canonicalize().unwrap();
                store.append("s", &[msg("a")]).unwrap();
                let armed = arm(point, fault, Hits::nth(1), Some(&root));
                let error = store
                    .append_then_sync("s", &[msg("b"), msg("c")])
                    .and_then(|p| p.map_or(Ok(()), PendingSync::wait))
                    .unwrap_err();
                assert!(error.to_string().contains("undone"), "{point:?} {fault:?}: {error}");
                assert_eq!(hashes(&store, "s"), ["a"], "{point:?} {fault:?}");
                store.append("s", &[msg("d")]).unwrap();
                assert_eq!(hashes(&store, "s"), ["a", "d"], "{point:?} {fault:?}");
                drop(armed);
            }
        }
    }

    #[test]
    fn a_failed_append_an_undo_could_not_cut_never_reaches_a_load_or_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        let root = dir.path().canonicalize().unwrap();
        store.append("s", &[msg("a")]).unwrap();
        let torn = arm(Point::SessionWrite, Fault::Torn, Hits::nth(1), Some(&root));
        let undo = arm(Point::Undo, Fault::Eio, Hits::nth(1), Some(&root));
        // Three records torn in the middle: the first is whole on disk, the second torn.
        let error = store.append("s", &[msg("b"), msg("c"), msg("d")]).unwrap_err();
        assert!(error.to_string().contains("undoing the append failed too"), "{error}");
        assert_eq!(
            hashes(&store, "s"),
            ["a"],
            "the whole failed append is cut, not only its torn line"
        );
        store.append("s", &[msg("e")]).unwrap();
        assert_eq!(hashes(&store, "s"), ["a", "e"]);
        drop((torn, undo));
    }

    #[test]
    fn an_append_after_a_torn_tail_is_not_glued_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        store.append("s", &[msg("a")]).unwrap();
        let path = dir.path().join("sessions/s.jsonl");
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(
            "{\"record\":\"message\",\"hash\":\"\u{e9}"
                .as_bytes()
                .split_last()
                .unwrap()
                .1,
        );
        fs::write(&path, bytes).unwrap();
        // A restart: the session loads (dropping the torn tail) before anything is appended.
        assert_eq!(hashes(&store, "s"), ["a"]);
        store.append("s", &[msg("b")]).unwrap();
        assert_eq!(hashes(&store, "s"), ["a", "b"]);
        assert!(fs::read(&path).unwrap().ends_with(b"\n"));
    }

    #[test]
    fn a_roll_back_never_grows_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        store.append("s", &[msg("a"), msg("b")]).unwrap();
        let mark = store.mark("s").unwrap();
        let path = dir.path().join("sessions/s.jsonl");
        let len = fs::metadata(&path).unwrap().len();
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        store.roll_back("s", &mark).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), len / 2);
    }

    #[test]
    fn a_background_append_waits_for_what_it_refers_to_and_is_dropped_if_that_fails() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        let marker = dir.path().join("written-first");
        let first = {
            let marker = marker.clone();
            move || fs::write(&marker, b"x").map_err(crate::error::io("write", &marker))
        };
        let appended = store.append_in_background("s1", vec![msg("a")], first);
        appended.unwrap().wait().unwrap();
        assert!(marker.exists());
        assert_eq!(store.load("s1").unwrap().unwrap().original_hashes, ["a"]);

        let failing = || Err(StorageError::NotFound("tool_result/x.txt".into()));
        let error = store
            .append_in_background("s1", vec![msg("b")], failing)
            .unwrap()
            .wait();
        assert!(matches!(error, Err(StorageError::NotFound(_))), "{error:?}");
        assert_eq!(
            store.load("s1").unwrap().unwrap().original_hashes,
            ["a"],
            "nothing is logged that refers to writes that failed"
        );
        assert!(
            store
                .append_in_background("../escape", vec![msg("c")], || Ok(()))
                .is_err()
        );
    }

    #[test]
    fn replays_appends_and_truncations() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        assert_eq!(store.load("s1").unwrap(), None);
        store
            .append(
                "s1",
                &[
                    SessionRecord::Format {
                        format: MessageFormat::Anthropic,
                    },
                    msg("a"),
                    msg("b"),
                ],
            )
            .unwrap();
        store
            .append("s1", &[SessionRecord::Truncate { keep: 1 }, msg("c")])
            .unwrap();
        let log = store.load("s1").unwrap().unwrap();
        assert_eq!(log.format, Some(MessageFormat::Anthropic));
        assert_eq!(
            log.messages
                .iter()
                .map(|(i, m)| (*i, m.hash.as_str()))
                .collect::<Vec<_>>(),
            [(0, "a"), (1, "c")]
        );
        assert_eq!(log.original_hashes, ["a", "c"]);
        assert_eq!(store.list().unwrap(), ["s1"]);
    }

    #[test]
    fn a_proxied_session_s_origin_and_agent_compactions_are_replayed_and_survive_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        let origin = |api: &str| SessionRecord::Origin {
            api: api.into(),
            key_from: "prompt_cache_key".into(),
        };
        let compaction = |messages| {
            SessionRecord::AgentCompaction(AgentCompaction {
                at: "2026-11-28T01:00:00.000Z".into(),
                messages,
            })
        };
        store.append("s1", &[msg("a")]).unwrap();
        assert_eq!(
            store.load("s1").unwrap().unwrap().origin,
            None,
            "a JSON-RPC session has none"
        );
        let records = [
            origin("openai-chat"),
            compaction(12),
            origin("openai-responses"),
            SessionRecord::Reset,
            compaction(3),
        ];
        store.append("s1", &records).unwrap();
        let loaded = store.load("s1").unwrap().unwrap().origin.unwrap();
        assert_eq!(
            (loaded.api.as_str(), loaded.key_from.as_str()),
            ("openai-responses", "prompt_cache_key")
        );
        let sent: Vec<usize> = loaded.agent_compactions.iter().map(|c| c.messages).collect();
        assert_eq!(sent, [12, 3]);
    }

    #[test]
    fn the_latest_request_config_is_replayed_and_survives_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        store.append("s1", &[msg("a")]).unwrap();
        assert!(store.load("s1").unwrap().unwrap().config_overrides.is_empty());
        let overrides = |n: u64| {
            let serde_json::Value::Object(map) = serde_json::json!({"max_input_length": n}) else {
                unreachable!()
            };
            map
        };
        store
            .append(
                "s1",
                &[
                    SessionRecord::RequestConfig {
                        overrides: overrides(1),
                    },
                    SessionRecord::RequestConfig {
                        overrides: overrides(2),
                    },
                    SessionRecord::Reset,
                ],
            )
            .unwrap();
        assert_eq!(store.load("s1").unwrap().unwrap().config_overrides, overrides(2));
        let line = fs::read_to_string(dir.path().join("sessions/s1.jsonl")).unwrap();
        assert!(
            line.contains(r#"{"record":"request_config","overrides":{"max_input_length":1}}"#),
            "{line}"
        );
    }

    #[test]
    fn compaction_records_move_messages_out_and_finish_on_done() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        let begun = CompactionBegun {
            id: "c1".into(),
            indices: vec![0, 1],
            summary: CompactSummary {
                goal: vec!["g".into()],
                ..Default::default()
            },
            archive_file: "dialog/2026-11-22.jsonl".into(),
            at: "2026-11-22T00:00:00Z".into(),
            tokens_before: 10,
            tokens_after: 4,
            manual: false,
            summarizer: "extractive".into(),
            dropped: Vec::new(),
        };
        store
            .append(
                "s",
                &[
                    msg("a"),
                    msg("b"),
                    msg("c"),
                    SessionRecord::CompactionBegun(Box::new(begun.clone())),
                ],
            )
            .unwrap();
        let log = store.load("s").unwrap().unwrap();
        assert_eq!(log.messages.len(), 1);
        let (pending, removed) = log.pending.unwrap();
        assert_eq!((pending.id.as_str(), removed.len()), ("c1", 2));
        assert_eq!(log.original_hashes.len(), 3, "archived messages stay recognisable");

        let range = ArchiveRange {
            file: begun.archive_file.clone(),
            start_line: 1,
            end_line: 2,
            first_index: 0,
            last_index: 1,
            messages: 2,
        };
        store
            .append(
                "s",
                &[SessionRecord::CompactionDone {
                    id: "c1".into(),
                    range: range.clone(),
                    more_ranges: Vec::new(),
                    tokens_after: Some(3),
                }],
            )
            .unwrap();
        let log = store.load("s").unwrap().unwrap();
        assert!(log.pending.is_none());
        assert_eq!(log.summary.unwrap().archive, vec![range]);
        assert_eq!(log.compactions.len(), 1);
    }

    #[test]
    fn a_compaction_done_in_two_runs_replays_each_run_with_its_own_messages() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        let file = "dialog/2026-11-22.jsonl";
        let request = |index| satchel_protocol::UserRequest {
            text: format!("request {index}"),
            chars: 9,
            index,
            archived: None,
            demonstration: false,
        };
        let begun = CompactionBegun {
            id: "c1".into(),
            indices: vec![0, 1, 2, 3],
            summary: CompactSummary {
                requests: vec![request(0), request(3)],
                ..Default::default()
            },
            archive_file: file.into(),
            at: "2026-11-22T00:00:00Z".into(),
            tokens_before: 10,
            tokens_after: 4,
            manual: false,
            summarizer: "extractive".into(),
            dropped: Vec::new(),
        };
        let run = |start_line, end_line, first_index, last_index| ArchiveRange {
            file: file.into(),
            start_line,
            end_line,
            first_index,
            last_index,
            messages: end_line + 1 - start_line,
        };
        // Lines 1-2 hold messages 0-1, another session's lines 3-5, lines 6-7 messages 2-3.
        let (first, second) = (run(1, 2, 0, 1), run(6, 7, 2, 3));
        let messages: Vec<SessionRecord> = ["a", "b", "c", "d", "e"].map(msg).into();
        store.append("s", &messages).unwrap();
        let done = SessionRecord::CompactionDone {
            id: "c1".into(),
            range: first.clone(),
            more_ranges: vec![second.clone()],
            tokens_after: None,
        };
        store
            .append("s", &[SessionRecord::CompactionBegun(Box::new(begun)), done])
            .unwrap();
        let log = store.load("s").unwrap().unwrap();
        let summary = log.summary.unwrap();
        assert_eq!(summary.archive, [first.clone(), second.clone()]);
        let lines: Vec<_> = summary
            .requests
            .iter()
            .map(|r| r.archived.as_ref().map(|a| a.line))
            .collect();
        assert_eq!(lines, [Some(1), Some(7)], "each request at its own line");
        let compaction = &log.compactions[0];
        assert_eq!(compaction.range.as_ref(), Some(&first));
        assert_eq!(
            compaction.ranges().cloned().collect::<Vec<_>>(),
            [first.clone(), second]
        );

        // One run is written as before this field existed.
        let one = SessionRecord::CompactionDone {
            id: "c2".into(),
            range: first,
            more_ranges: Vec::new(),
            tokens_after: Some(3),
        };
        let line = serde_json::to_string(&one).unwrap();
        assert!(!line.contains("more_ranges"), "{line}");
        assert_eq!(serde_json::from_str::<SessionRecord>(&line).unwrap(), one);
    }

    #[test]
    fn torn_tail_is_dropped_and_log_stays_appendable() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(&Workspace::open(dir.path()).unwrap());
        store.append("s", &[msg("a")]).unwrap();
        let path = dir.path().join("sessions/s.jsonl");
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"record\":\"message\",\"ha");
        fs::write(&path, bytes).unwrap();
        assert_eq!(store.load("s").unwrap().unwrap().messages.len(), 1);
        store.append("s", &[msg("b")]).unwrap();
        assert_eq!(store.load("s").unwrap().unwrap().messages.len(), 2);
    }

    #[test]
    fn rejects_ids_that_are_not_plain_file_names() {
        for bad in ["", "../x", "a/b", ".hidden", &"x".repeat(129)] {
            assert!(SessionStore::validate_id(bad).is_err(), "{bad}");
        }
        assert!(SessionStore::validate_id("editor-1.session_A").is_ok());
    }
}
