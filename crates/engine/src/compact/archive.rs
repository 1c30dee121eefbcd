//! Archiving a compaction: its messages as dialog archive lines, the append, and the runs of
//! lines they landed in, recorded by `compaction_done`.

use std::collections::HashSet;

use satchel_protocol::ArchiveRange;
use satchel_storage::{AppendedLines, CompactionBegun, DialogLine, DialogOffload, EncodedLines, SessionRecord};
use serde_json::Value;

use crate::engine::Engine;
use crate::session::Entry;

impl Engine {
    /// Appends a compaction's `encoded` archive lines to the dialog archive and returns the
    /// runs of lines its messages are in, counting the lines an interrupted first attempt left
    /// `present` (line, index), and where this append landed. One run, unless other sessions
    /// archived between the first attempt and this one: each run then holds only this
    /// compaction's lines, so that every range recorded is one `context.expand` can read.
    pub(crate) fn archive_compaction(
        &self,
        begun: &CompactionBegun,
        encoded: EncodedLines,
        present: &[(usize, usize)],
    ) -> Result<(Vec<ArchiveRange>, Option<AppendedLines>), satchel_storage::StorageError> {
        let mut placed = present.to_vec();
        let mut landed = None;
        if !encoded.is_empty() {
            let indices = encoded.indices().to_vec();
            let appended = self.archive.append_encoded(&begun.archive_file, encoded)?;
            placed.extend((appended.start_line..=appended.end_line).zip(indices));
            landed = Some(appended);
        }
        placed.sort_unstable();
        let mut ranges = archive_runs(&begun.archive_file, &placed);
        if ranges.is_empty() {
            // Nothing archived (a compaction of no message): the range says so.
            ranges.push(ArchiveRange {
                file: begun.archive_file.clone(),
                start_line: 0,
                end_line: 0,
                first_index: begun.indices.first().copied().unwrap_or(0),
                last_index: begun.indices.last().copied().unwrap_or(0),
                messages: begun.indices.len(),
            });
        }
        Ok((ranges, landed))
    }
}

/// The runs of consecutive lines of archive `file` in `placed` (line, original index),
/// sorted by line: one range each, with the first and last index and the messages it holds.
pub(crate) fn archive_runs(file: &str, placed: &[(usize, usize)]) -> Vec<ArchiveRange> {
    let mut runs: Vec<ArchiveRange> = Vec::new();
    for &(line, index) in placed {
        match runs.last_mut() {
            Some(run) if run.end_line + 1 == line => {
                run.end_line = line;
                run.last_index = index;
                run.messages += 1;
            }
            _ => runs.push(ArchiveRange {
                file: file.to_owned(),
                start_line: line,
                end_line: line,
                first_index: index,
                last_index: index,
                messages: 1,
            }),
        }
    }
    runs
}

/// The record that compaction `begun` is done, its messages archived in `ranges` (at least
/// one); `tokens_after` is unknown when a restart finished it.
pub(crate) fn compaction_done(
    begun: &CompactionBegun,
    ranges: &[ArchiveRange],
    tokens_after: Option<u64>,
) -> SessionRecord {
    SessionRecord::CompactionDone {
        id: begun.id.clone(),
        range: ranges[0].clone(),
        more_ranges: ranges[1..].to_vec(),
        tokens_after,
    }
}

/// The dialog archive lines of compacted messages: `full[i]` is the full message of
/// `removed[i]`; messages whose index is in `skip` are already archived.
pub(crate) fn dialog_lines<'a>(
    session_id: &str,
    compaction_id: &str,
    archived_at: &str,
    removed: &[&Entry],
    full: &'a [Value],
    skip: &HashSet<usize>,
) -> Vec<DialogLine<&'a Value>> {
    removed
        .iter()
        .zip(full)
        .filter(|(e, _)| !skip.contains(&e.index))
        .map(|(e, message)| DialogLine {
            session_id: session_id.to_owned(),
            index: e.index,
            compaction_id: compaction_id.to_owned(),
            archived_at: archived_at.to_owned(),
            message,
            offloads: e
                .offloaded
                .iter()
                .map(|o| DialogOffload {
                    pointer: o.pointer.clone(),
                    file: o.file.clone(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_where_another_sessions_lines_came_between() {
        let runs = |placed: &[(usize, usize)]| -> Vec<(usize, usize, usize, usize, usize)> {
            archive_runs("dialog/d.jsonl", placed)
                .into_iter()
                .map(|r| (r.start_line, r.end_line, r.first_index, r.last_index, r.messages))
                .collect()
        };
        assert_eq!(runs(&[]), []);
        assert_eq!(
            runs(&[(4, 1), (5, 2), (6, 4)]),
            [(4, 6, 1, 4, 3)],
            "one run, an index gap"
        );
        assert_eq!(
            runs(&[(1, 1), (2, 2), (9, 3), (10, 4), (12, 5)]),
            [(1, 2, 1, 2, 2), (9, 10, 3, 4, 2), (12, 12, 5, 5, 1)]
        );
    }
}
