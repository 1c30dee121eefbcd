//! The dialog archive: `dialog/YYYY-MM-DD.jsonl`, the raw messages compaction removed from a
//! session, appended in order with fsync (F2).
//!
//! Unlike the peer, every line names its session and the message's original index, lines hold
//! the full original message (tool outputs included, not the pruned excerpts), and one
//! compaction is one write + fsync. A per-file line counter makes the path guide exact: a
//! compaction knows the line range it occupies.
//!
//! A failed append is undone before it is reported (see [`crate::durable`]) and the counter of
//! its file is dropped, to be counted again from the file: it stays true whatever the failure
//! left. A torn last line (a crash in the middle of an append) is tolerated by readers, with a
//! warning, and cut off before the next append, so no line is ever glued to a fragment.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::{Steps, append_durable_at, settle};
use crate::error::{StorageError, io};
use crate::layout::Layout;
use crate::perms::{check_own_dir, create_private_dir_all};
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
    /// Byte length of the file before the append, and after it: what
    /// [`DialogArchive::withdraw`] cuts back to, and how it knows nothing came after.
    bytes: (u64, u64),
}

/// Archive lines encoded but not yet appended: see [`DialogArchive::encode`].
#[derive(Debug)]
pub struct EncodedLines {
    bytes: Vec<u8>,
    lines: usize,
    /// The original index of the message of each line, in order: where an append lands says
    /// which line holds which message.
    indices: Vec<usize>,
}

impl EncodedLines {
    /// Whether it holds no line.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The original index of the message of each line, in order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
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
        refuse_symlinked_parents(workspace, dialog_path)?;
        check_own_dir(&dir)?;
        create_private_dir_all(&dir)?;
        let archive = DialogArchive {
            dir,
            rel_dir: dialog_path.trim_end_matches('/').to_owned(),
            line_counts: Mutex::default(),
        };
        archive.cut_torn_tails()?;
        Ok(archive)
    }

    /// Cuts the torn last line a crash left in any archive file, at start-up: otherwise it
    /// would stay until the file's next append, and `context.read` of the file would show it.
    /// Only the last byte of each file is read unless it is torn.
    fn cut_torn_tails(&self) -> Result<(), StorageError> {
        use std::io::{Read, Seek, SeekFrom};
        let entries = fs::read_dir(&self.dir).map_err(io("read dir", &self.dir))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                continue;
            }
            let Ok(mut file) = fs::File::open(&path) else { continue };
            let mut last = [0u8; 1];
            let torn = file.seek(SeekFrom::End(-1)).is_ok() && file.read_exact(&mut last).is_ok() && last[0] != b'\n';
            if torn {
                self.count_whole_lines(&path)?;
            }
        }
        Ok(())
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
            indices: lines.iter().map(|line| line.index).collect(),
        })
    }

    /// Appends lines [`Self::encode`] made, with one write and one fsync. All or nothing: on
    /// failure the file is cut back to where it was, and its line count is taken again.
    pub fn append_encoded(&self, rel_file: &str, encoded: EncodedLines) -> Result<AppendedLines, StorageError> {
        let path = self.path_of(rel_file);
        let mut counts = self.line_counts.lock().unwrap_or_else(|p| p.into_inner());
        let existing = match counts.get(rel_file) {
            Some(n) => *n,
            None => self.count_whole_lines(&path)?,
        };
        let before = file_len(&path)?;
        if let Err(e) = append_durable_at(&path, &encoded.bytes, Steps::ARCHIVE) {
            // Undone, or to be cut off before the file is next used: count it again then,
            // rather than trust a number the failure may have made wrong.
            counts.remove(rel_file);
            return Err(e);
        }
        counts.insert(rel_file.to_owned(), existing + encoded.lines);
        Ok(AppendedLines {
            file: rel_file.to_owned(),
            start_line: existing + 1,
            end_line: existing + encoded.lines,
            bytes: (before, before + encoded.bytes.len() as u64),
        })
    }

    /// Takes back the lines of an append whose compaction did not take effect (a later write
    /// of its call failed), so that a retry does not archive the same messages twice. Only
    /// when nothing was appended after them; otherwise they stay, with a warning (recovery
    /// matches lines by compaction id, so they are never mistaken for another's).
    pub fn withdraw(&self, appended: &AppendedLines) -> Result<(), StorageError> {
        let path = self.path_of(&appended.file);
        let mut counts = self.line_counts.lock().unwrap_or_else(|p| p.into_inner());
        let (before, after) = appended.bytes;
        if file_len(&path)? != after {
            tracing::warn!(file = %appended.file, "archive lines of a rolled-back compaction stay: the file grew since");
            return Ok(());
        }
        let file = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        file.set_len(before).map_err(io("truncate", &path))?;
        file.sync_all().map_err(io("fsync", &path))?;
        counts.insert(appended.file.clone(), appended.start_line - 1);
        Ok(())
    }

    /// Counts the complete lines of a file, cutting off a torn last line first: a crash in
    /// the middle of an append leaves a partial line that was never acknowledged.
    fn count_whole_lines(&self, path: &std::path::Path) -> Result<usize, StorageError> {
        settle(path)?;
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
            tracing::warn!(path = %path.display(), dropped = bytes.len() - whole, "cutting the torn last line of the dialog archive");
            let file = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io("open", path))?;
            file.set_len(whole as u64).map_err(io("truncate", path))?;
            file.sync_all().map_err(io("fsync", path))?;
        }
        Ok(bytes[..whole].iter().filter(|&&b| b == b'\n').count())
    }

    /// Lines `start_line..=end_line` (1-based) of the archive file `rel_file`, parsed, with
    /// their line numbers; a line that is not an archive line, or torn, ends the range there.
    /// `rel_file` must name a file of this archive directory (`dialog/<name>.jsonl`):
    /// anything else is refused, so a client's range never reads outside it.
    pub fn read_range(
        &self,
        rel_file: &str,
        start_line: usize,
        end_line: usize,
    ) -> Result<Vec<(usize, DialogLine)>, StorageError> {
        let name = rel_file
            .strip_prefix(&self.rel_dir)
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|name| name.ends_with(".jsonl") && !name.contains(['/', '\\']) && !name.starts_with('.'));
        let Some(name) = name else {
            return Err(StorageError::NotFound(rel_file.to_owned()));
        };
        let path = self.dir.join(name);
        settle(&path)?;
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StorageError::NotFound(rel_file.to_owned()));
            }
            Err(source) => {
                return Err(StorageError::Io {
                    op: "read",
                    path,
                    source,
                });
            }
        };
        let mut found = Vec::new();
        for (n, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            let number = n + 1;
            if number < start_line {
                continue;
            }
            if number > end_line || !line.ends_with(b"\n") {
                break;
            }
            match serde_json::from_slice::<DialogLine>(&line[..line.len() - 1]) {
                Ok(parsed) => found.push((number, parsed)),
                Err(_) => break,
            }
        }
        Ok(found)
    }

    /// Lines of `rel_file` written by one compaction: `(line number, original index)`.
    /// Used to finish a compaction a crash interrupted, without archiving anything twice.
    /// A torn last line is not a line (the next append cuts it off) and a line that is not a
    /// well-formed archive line is skipped, both with a warning.
    pub fn lines_of(
        &self,
        rel_file: &str,
        session_id: &str,
        compaction_id: &str,
    ) -> Result<Vec<(usize, usize)>, StorageError> {
        let path = self.path_of(rel_file);
        settle(&path)?;
        let bytes = match fs::read(&path) {
            Ok(b) => b,
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
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            tracing::warn!(path = %path.display(), bytes = bytes.len() - whole, "the dialog archive ends with a torn line; it is ignored");
        }
        let mut found = Vec::new();
        let mut malformed = 0usize;
        for (n, line) in bytes[..whole].split_inclusive(|&b| b == b'\n').enumerate() {
            match serde_json::from_slice::<Key>(&line[..line.len() - 1]) {
                Ok(key) => {
                    if key.session_id == session_id && key.compaction_id == compaction_id {
                        found.push((n + 1, key.index));
                    }
                }
                Err(_) => malformed += 1,
            }
        }
        if malformed > 0 {
            tracing::warn!(path = %path.display(), malformed, "dialog archive lines that are not archive lines were skipped");
        }
        Ok(found)
    }
}

/// Refuses a `dialog_path` whose way down from the workspace passes through a symbolic link
/// (the archive directory itself is [`check_own_dir`]'s): the archive would be written
/// wherever the link points.
fn refuse_symlinked_parents(workspace: &Workspace, dialog_path: &str) -> Result<(), StorageError> {
    let parts: Vec<_> = std::path::Path::new(dialog_path).components().collect();
    let mut dir = workspace.root().to_path_buf();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        if fs::symlink_metadata(&dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
            return Err(StorageError::Io {
                op: "open the dialog archive",
                path: dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "is a symbolic link on the way to dialog_path; satchel refuses to write the archive \
                     through one: make it a real directory",
                ),
            });
        }
    }
    Ok(())
}

/// Byte length of a file; 0 when it does not exist.
fn file_len(path: &std::path::Path) -> Result<u64, StorageError> {
    match fs::metadata(path) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(StorageError::Io {
            op: "stat",
            path: path.to_path_buf(),
            source: e,
        }),
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

    use crate::failpoints::{Fault, Hits, Point, arm};

    /// Line `n` of the archive (1-based) parsed, checking the file ends with a whole line.
    fn line_at(path: &std::path::Path, n: usize) -> DialogLine {
        let text = fs::read_to_string(path).unwrap();
        assert!(text.ends_with('\n'), "ends with a torn line");
        serde_json::from_str(text.lines().nth(n - 1).unwrap()).unwrap()
    }

    #[test]
    fn the_line_count_stays_true_after_a_failed_append() {
        for (point, fault, undo_fails) in [Point::ArchiveWrite, Point::ArchiveSync]
            .into_iter()
            .flat_map(|p| [Fault::Enospc, Fault::Eio, Fault::Torn].map(|f| (p, f)))
            .flat_map(|(p, f)| [(p, f, false), (p, f, true)])
        {
            let case = format!("{point:?} {fault:?} undo fails: {undo_fails}");
            let dir = tempfile::tempdir().unwrap();
            let ws = Workspace::open(dir.path()).unwrap();
            let archive = DialogArchive::new(&ws, "dialog").unwrap();
            let file = archive.file_for("2026-11-22");
            let path = ws.root().join(&file);
            archive.append(&file, &[line(0, "c1"), line(1, "c1")]).unwrap();
            let armed = arm(point, fault, Hits::nth(1), Some(ws.root()));
            let undo = undo_fails.then(|| arm(Point::Undo, Fault::Eio, Hits::nth(1), Some(ws.root())));
            let error = archive
                .append(&file, &[line(2, "c2"), line(3, "c2"), line(4, "c2")])
                .unwrap_err();
            assert!(error.to_string().contains("undo"), "{case}: {error}");
            // The cached count must not drift: the next append lands right after line 2.
            let b = archive.append(&file, &[line(2, "c3")]).unwrap();
            assert_eq!((b.start_line, b.end_line), (3, 3), "{case}");
            assert_eq!(line_at(&path, 3), line(2, "c3"), "{case}");
            assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 3, "{case}");
            assert!(archive.lines_of(&file, "s", "c2").unwrap().is_empty(), "{case}");
            assert_eq!(archive.lines_of(&file, "s", "c3").unwrap(), vec![(3, 2)], "{case}");
            drop((armed, undo));
        }
    }

    #[test]
    fn lines_of_tolerates_a_torn_tail_and_lines_that_are_not_archive_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let archive = DialogArchive::new(&ws, "dialog").unwrap();
        let file = archive.file_for("2026-11-22");
        archive.append(&file, &[line(0, "c1")]).unwrap();
        let path = ws.root().join(&file);
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(b"not json\n");
        bytes.extend_from_slice(&serde_json::to_vec(&line(1, "c1")).unwrap());
        bytes.push(b'\n');
        // A torn line that ends inside a multi-byte character: not even UTF-8.
        let torn = "{\"session_id\":\"s\",\"index\":2,\"msg\":\"\u{e9}";
        bytes.extend_from_slice(&torn.as_bytes()[..torn.len() - 1]);
        fs::write(&path, bytes).unwrap();
        // What a restart after a crash finds.
        let archive = DialogArchive::new(&ws, "dialog").unwrap();
        assert_eq!(archive.lines_of(&file, "s", "c1").unwrap(), vec![(1, 0), (3, 1)]);
        let c = archive.append(&file, &[line(2, "c2")]).unwrap();
        assert_eq!((c.start_line, c.end_line), (4, 4));
        assert_eq!(line_at(&path, 4), line(2, "c2"));
    }

    #[test]
    fn a_torn_tail_left_by_a_crash_is_cut_when_the_archive_opens() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let archive = DialogArchive::new(&ws, "dialog").unwrap();
        let file = archive.file_for("2026-11-22");
        archive.append(&file, &[line(0, "c1")]).unwrap();
        let path = dir.path().join(&file);
        let whole = fs::read(&path).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(br#"{"session_id":"s","ind"#);
        fs::write(&path, &torn).unwrap();
        DialogArchive::new(&ws, "dialog").unwrap();
        assert_eq!(fs::read(&path).unwrap(), whole);
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
