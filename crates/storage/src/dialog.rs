//! The dialog archive: `dialog/YYYY-MM-DD.jsonl`, the raw messages compaction removed from a
//! session, appended in order with fsync (F2).
//!
//! Unlike the peer, every line names its session and the message's original index, lines hold
//! the full original message (tool outputs included, not the pruned excerpts), and one
//! compaction is one write + fsync. A per-file line counter makes the path guide exact: a
//! compaction knows the line range it occupies.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::append_durable;
use crate::error::{StorageError, io};
use crate::layout::Layout;
use crate::workspace::Workspace;

/// One archived message. Written with the message borrowed (`DialogLine<&Value>`), so that
/// archiving a compaction does not copy every message it archives; read as `DialogLine`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialogLine<M = Value> {
    /// Session the message belonged to.
    pub session_id: String,
    /// Its index in the session's original history.
    pub index: usize,
    /// The compaction that archived it (ties the lines to the session log for crash recovery).
    pub compaction_id: String,
    /// When it was archived (RFC 3339, UTC).
    pub archived_at: String,
    /// The message exactly as the client sent it, full tool outputs included.
    pub message: M,
    /// Offload files that also hold its tool outputs, by JSON pointer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offloads: Vec<DialogOffload>,
}

/// A tool-result text of an archived message that also lives in an offload file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DialogOffload {
    /// JSON pointer of the text inside the message.
    pub pointer: String,
    /// Workspace-relative offload file.
    pub file: String,
}

/// Where an append landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedLines {
    /// Workspace-relative file.
    pub file: String,
    /// First line written (1-based).
    pub start_line: usize,
    /// Last line written.
    pub end_line: usize,
}

/// Archive lines encoded but not yet appended: see [`DialogArchive::encode`].
#[derive(Debug)]
pub struct EncodedLines {
    bytes: Vec<u8>,
    lines: usize,
}

impl EncodedLines {
    /// Whether it holds no line.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }
}

/// The archive directory of a workspace.
#[derive(Debug)]
pub struct DialogArchive {
    dir: PathBuf,
    rel_dir: String,
    /// Lines per file, counted once per process; appends hold the lock so ranges are exact
    /// even when sessions compact concurrently.
    line_counts: Mutex<HashMap<String, usize>>,
}

impl DialogArchive {
    /// The archive under `<workspace>/<dialog_path>`.
    pub fn new(workspace: &Workspace, dialog_path: &str) -> Result<Self, StorageError> {
        let dir = workspace.layout().dialog_dir(dialog_path);
        fs::create_dir_all(&dir).map_err(io("create dir", &dir))?;
        Ok(DialogArchive {
            dir,
            rel_dir: dialog_path.trim_end_matches('/').to_owned(),
            line_counts: Mutex::default(),
        })
    }

    /// Workspace-relative name of the archive file of `date` (`YYYY-MM-DD`).
    pub fn file_for(&self, date: &str) -> String {
        Layout::dialog_file_rel(&self.rel_dir, date)
    }

    fn path_of(&self, rel_file: &str) -> PathBuf {
        let name = rel_file.rsplit('/').next().unwrap_or(rel_file);
        self.dir.join(name)
    }

    /// Appends `lines` to `rel_file` with one write and one fsync.
    pub fn append<M: Serialize>(&self, rel_file: &str, lines: &[DialogLine<M>]) -> Result<AppendedLines, StorageError> {
        self.append_encoded(rel_file, self.encode(rel_file, lines)?)
    }

    /// Encodes `lines` for [`Self::append_encoded`] to `rel_file`. Encoding a big compaction
    /// is most of its archiving, and needs no lock: a caller can do it on another thread
    /// while it summarises.
    pub fn encode<M: Serialize>(&self, rel_file: &str, lines: &[DialogLine<M>]) -> Result<EncodedLines, StorageError> {
        let mut bytes = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut bytes, line).map_err(|e| StorageError::Corrupt {
                path: self.path_of(rel_file),
                message: e.to_string(),
            })?;
            bytes.push(b'\n');
        }
        Ok(EncodedLines {
            bytes,
            lines: lines.len(),
        })
    }

    /// Appends lines [`Self::encode`] made, with one write and one fsync.
    pub fn append_encoded(&self, rel_file: &str, encoded: EncodedLines) -> Result<AppendedLines, StorageError> {
        let path = self.path_of(rel_file);
        let mut counts = self.line_counts.lock().unwrap_or_else(|p| p.into_inner());
        let existing = match counts.get(rel_file) {
            Some(n) => *n,
            None => self.count_whole_lines(&path)?,
        };
        append_durable(&path, &encoded.bytes)?;
        counts.insert(rel_file.to_owned(), existing + encoded.lines);
        Ok(AppendedLines {
            file: rel_file.to_owned(),
            start_line: existing + 1,
            end_line: existing + encoded.lines,
        })
    }

    /// Counts the complete lines of a file, cutting off a torn last line first: a crash in
    /// the middle of an append leaves a partial line that was never acknowledged.
    fn count_whole_lines(&self, path: &std::path::Path) -> Result<usize, StorageError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => {
                return Err(StorageError::Io {
                    op: "read",
                    path: path.to_path_buf(),
                    source: e,
                });
            }
        };
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            let file = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io("open", path))?;
            file.set_len(whole as u64).map_err(io("truncate", path))?;
            file.sync_all().map_err(io("fsync", path))?;
        }
        Ok(bytes[..whole].iter().filter(|&&b| b == b'\n').count())
    }

    /// Lines of `rel_file` written by one compaction: `(line number, original index)`.
    /// Used to finish a compaction a crash interrupted, without archiving anything twice.
    pub fn lines_of(
        &self,
        rel_file: &str,
        session_id: &str,
        compaction_id: &str,
    ) -> Result<Vec<(usize, usize)>, StorageError> {
        let path = self.path_of(rel_file);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(StorageError::Io {
                    op: "read",
                    path,
                    source: e,
                });
            }
        };
        #[derive(Deserialize)]
        struct Key<'a> {
            session_id: &'a str,
            index: usize,
            compaction_id: &'a str,
        }
        Ok(text
            .lines()
            .enumerate()
            .filter_map(|(n, line)| {
                let key: Key = serde_json::from_str(line).ok()?;
                (key.session_id == session_id && key.compaction_id == compaction_id).then_some((n + 1, key.index))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(index: usize, compaction: &str) -> DialogLine {
        DialogLine {
            session_id: "s".into(),
            index,
            compaction_id: compaction.into(),
            archived_at: "2026-11-22T00:00:00Z".into(),
            message: json!({"role": "user", "content": format!("m{index}")}),
            offloads: vec![],
        }
    }

    #[test]
    fn appends_report_exact_line_ranges_and_recovery_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let archive = DialogArchive::new(&ws, "dialog").unwrap();
        let file = archive.file_for("2026-11-22");
        assert_eq!(file, "dialog/2026-11-22.jsonl");
        let a = archive.append(&file, &[line(0, "c1"), line(1, "c1")]).unwrap();
        assert_eq!((a.start_line, a.end_line), (1, 2));
        // A fresh archive (a restart) counts what is there, cutting a torn tail.
        let path = dir.path().join("dialog/2026-11-22.jsonl");
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"session_id\":\"s\",\"ind");
        fs::write(&path, bytes).unwrap();
        let archive = DialogArchive::new(&ws, "dialog").unwrap();
        let b = archive.append(&file, &[line(2, "c2")]).unwrap();
        assert_eq!((b.start_line, b.end_line), (3, 3));
        assert_eq!(archive.lines_of(&file, "s", "c1").unwrap(), vec![(1, 0), (2, 1)]);
        assert_eq!(archive.lines_of(&file, "s", "c2").unwrap(), vec![(3, 2)]);
        assert!(archive.lines_of(&file, "other", "c1").unwrap().is_empty());
    }
}
