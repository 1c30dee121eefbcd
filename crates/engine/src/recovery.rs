//! Loading a session from its log, and finishing a compaction a crash interrupted.

use std::collections::HashSet;

use satchel_core::format;
use satchel_core::hash::MessageHash;
use satchel_core::render::OffloadedText;
use satchel_core::truncate::TextStats;
use satchel_protocol::MessageFormat;
use satchel_storage::{CompactionInfo, StorageError, StoredMessage};
use serde_json::Value;

use crate::compact::{compaction_done, dialog_lines};
use crate::engine::Engine;
use crate::session::{Entry, Session, format_or_default};

impl Engine {
    /// Loads a session from its log, restoring offloaded texts and finishing a compaction a
    /// crash interrupted. `None`: no such session.
    pub(crate) fn load_session(&self, id: &str) -> Result<Option<Session>, StorageError> {
        let Some(log) = self.sessions.load(id)? else {
            return Ok(None);
        };
        let format = format_or_default(log.format);
        let mut session = Session::new(log.format, self.offloads.clone());
        session.restore_requests(log.calibration.unwrap_or_default(), log.config_overrides);
        session.restore_origin(log.origin);
        session.restore_history(log.original_hashes.iter().map(|h| stored_hash(h)).collect());
        for (index, stored) in log.messages {
            let logged_hash = stored.hash.parse::<MessageHash>().ok();
            let (message, offloaded) = restore(stored, format, session.entries());
            let mut entry = Entry::new(index, session.original_hash(index), message, offloaded, None);
            // A log written by an older satchel holds another kind of hash: hash the message again.
            if logged_hash.is_none() {
                entry.hash = MessageHash::of_value(&entry.full_message(&self.offloads));
            }
            session.restore_entry(entry);
        }
        let mut summary = log.summary;
        session.restore_compactions(log.compactions);
        if let Some((begun, removed)) = log.pending {
            let removed: Vec<Entry> = removed
                .into_iter()
                .map(|(index, stored)| {
                    let hash = stored_hash(&stored.hash);
                    let (message, offloaded) = restore(stored, format, &[]);
                    Entry::new(index, hash, message, offloaded, None)
                })
                .collect();
            let full: Vec<Value> = removed.iter().map(|e| e.full_message(&self.offloads)).collect();
            // The first attempt may have written some lines: find them by compaction id.
            let present = self.archive.lines_of(&begun.archive_file, id, &begun.id)?;
            let done: HashSet<usize> = present.iter().map(|(_, index)| *index).collect();
            let removed: Vec<&Entry> = removed.iter().collect();
            let lines = dialog_lines(id, &begun.id, &begun.at, &removed, &full, &done);
            let encoded = self.archive.encode(&begun.archive_file, &lines)?;
            // Other sessions may have archived since: the lines are then in more than one run,
            // each recorded apart.
            let (ranges, _) = self.archive_compaction(&begun, encoded, &present)?;
            self.sessions.append(id, &[compaction_done(&begun, &ranges, None)])?;
            if let Some(summary) = &mut summary {
                summary.add_archive_ranges(&ranges, &begun.indices);
            }
            tracing::warn!(session = id, compaction = %begun.id, runs = ranges.len(), "finished a compaction interrupted by a crash");
            session.add_compaction(CompactionInfo::archived(begun, ranges));
        }
        session.set_summary(summary);
        // Rendered and counted as `context.expand` did: under the session's configuration.
        let config = self.session_config(&session);
        session.set_expansion(log.expansion.and_then(|e| self.restore_expansion(e, &config)));
        session.restore_pins(log.pins, log.pins_made, log.purged);
        if let Err(e) = self.resolve_pins(&mut session) {
            tracing::warn!(
                session = id,
                "pinned messages could not be read back from the archive: {e}"
            );
        }
        tracing::debug!(
            session = id,
            messages = session.entries().len(),
            "session restored from its log"
        );
        Ok(Some(session))
    }
}

/// Restores a stored message: the message as logged (offloaded texts empty, see
/// [`Entry::message`]) and what is known of its offloaded texts.
fn restore(stored: StoredMessage, format: MessageFormat, earlier: &[Entry]) -> (Value, Vec<OffloadedText>) {
    let message = stored.message;
    let mut offloaded = Vec::with_capacity(stored.offloads.len());
    for o in stored.offloads {
        let call_id = format::result_texts(&message, format)
            .into_iter()
            .find(|t| t.pointer == o.pointer)
            .and_then(|t| t.call_id);
        let call = call_id.and_then(|cid| format::find_call(earlier.iter().rev().map(|e| &e.message), &cid, format));
        offloaded.push(OffloadedText {
            pointer: o.pointer,
            file: o.file,
            stats: TextStats {
                total_bytes: o.total_bytes,
                total_lines: o.total_lines,
            },
            call,
        });
    }
    (message, offloaded)
}

/// A hash read from a session log. One in an older form cannot be compared with today's
/// hashes: it becomes a hash no message has, so that message counts as changed if resent.
fn stored_hash(stored: &str) -> MessageHash {
    stored
        .parse()
        .unwrap_or_else(|_| MessageHash::of_value(&Value::String(format!("unrecognised stored hash {stored}"))))
}
