//! Long-term memory files (F17): `MEMORY.md` and the daily logs `memory/YYYY-MM-DD.md`, and
//! any other Markdown file under `memory/`.
//!
//! Compaction appends what it learned to the day's log; clients write, append and read
//! through `memory.write`, `memory.append` and `memory.get`, which may name only these files.
//! Writes and appends both replace the file atomically (fsync'd like every other write), so a
//! reply means the text is on disk and a failure or a crash leaves the file as it was.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::durable::{write_atomic, write_atomic_at};
use crate::error::{StorageError, io};
use crate::failpoints::Point;
use crate::layout::Layout;
use crate::perms::create_private_dir_all;
use crate::workspace::Workspace;

/// The long-lived memory file, at the workspace root.
pub const MEMORY_FILE: &str = "MEMORY.md";

/// Bytes of a file or directory name: the file systems' `NAME_MAX`. An atomic write's temp
/// name is cut to fit it too (see `durable`).
const MAX_NAME_BYTES: usize = 255;

/// Bytes of a memory path, relative to the workspace: with the workspace's own path it stays
/// well under the 4,096 of `PATH_MAX`.
const MAX_MEMORY_PATH_BYTES: usize = 1024;

/// Directories under `memory/` a memory file may be in: the index walks no deeper
/// (`satchel-memory`'s `walk::MAX_DEPTH`), so a deeper file could be written but never found.
const MAX_MEMORY_DIRS: usize = 16;

/// Size and line count of a memory file after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFileInfo {
    /// Bytes.
    pub bytes: u64,
    /// Lines (a last line without a newline counts).
    pub lines: u32,
}

/// Some lines of a memory file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLines {
    /// First line returned, 1-based.
    pub start_line: u32,
    /// Last line returned; below `start_line` when none was.
    pub end_line: u32,
    /// Lines in the whole file.
    pub total_lines: u32,
    /// The lines, each with its newline.
    pub text: String,
}

/// The memory files of a workspace.
#[derive(Debug, Clone)]
pub struct MemoryFiles {
    layout: Layout,
}

impl MemoryFiles {
    /// The memory files of `workspace`.
    pub fn new(workspace: &Workspace) -> Self {
        MemoryFiles {
            layout: workspace.layout().clone(),
        }
    }

    /// Appends `text` to the daily log of `date` (`YYYY-MM-DD`); returns its workspace-relative path.
    pub fn append_daily(&self, date: &str, text: &str) -> Result<String, StorageError> {
        create_private_dir_all(&self.layout.memory_dir())?;
        append_whole(&self.layout.memory_daily(date), text)?;
        Ok(Layout::memory_daily_rel(date))
    }

    /// Whether `rel` names a memory file: `MEMORY.md`, or a `.md` file under `memory/` whose
    /// path has no `..`, no hidden part and no empty part, and fits the limits
    /// ([`Self::path_problem`]).
    pub fn is_memory_path(rel: &str) -> bool {
        Self::path_problem(rel).is_none()
    }

    /// Why `rel` cannot be a memory file, `None` when it can. Checked before anything touches
    /// the disk, so a refused path leaves no directory behind.
    pub fn path_problem(rel: &str) -> Option<String> {
        if rel == MEMORY_FILE {
            return None;
        }
        let Some(rest) = rel.strip_prefix("memory/") else {
            return Some("must be MEMORY.md or a Markdown file under memory/".into());
        };
        let parts_ok = rest
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.contains('\\') && !part.contains('\0'));
        let markdown = Path::new(rest)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("md"));
        if !(parts_ok && markdown && Path::new(rel).components().all(|c| matches!(c, Component::Normal(_)))) {
            return Some("must be MEMORY.md or a .md file under memory/, without empty, hidden or `..` parts".into());
        }
        if rel.len() > MAX_MEMORY_PATH_BYTES {
            return Some(format!(
                "is {} bytes; a memory path has at most {MAX_MEMORY_PATH_BYTES}",
                rel.len()
            ));
        }
        if let Some(long) = rest.split('/').find(|part| part.len() > MAX_NAME_BYTES) {
            return Some(format!(
                "has a part of {} bytes; a file or directory name has at most {MAX_NAME_BYTES}",
                long.len()
            ));
        }
        let dirs = rest.split('/').count() - 1;
        if dirs > MAX_MEMORY_DIRS {
            return Some(format!(
                "is {dirs} directories deep under memory/; at most {MAX_MEMORY_DIRS}"
            ));
        }
        None
    }

    /// The absolute path of the memory file `rel`, checked: a memory path ([`Self::is_memory_path`])
    /// whose existing directories are real ones inside the workspace (no symbolic link out).
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, StorageError> {
        if Self::path_problem(rel).is_some() {
            return Err(StorageError::NotMemoryFile(rel.to_owned()));
        }
        let path = self.layout.root().join(rel);
        // Each existing ancestor below the root must be a plain directory: a symbolic link
        // could lead the write out of the workspace.
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| *d != self.layout.root()) {
            if let Ok(meta) = fs::symlink_metadata(d)
                && !meta.is_dir()
            {
                return Err(StorageError::OutsideWorkspace(rel.to_owned()));
            }
            dir = d.parent();
        }
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Err(StorageError::OutsideWorkspace(rel.to_owned()));
        }
        Ok(path)
    }

    /// The absolute path of the memory file `rel` to read it. Unlike a write, a read may go
    /// through symbolic links that stay inside the workspace and end at a Markdown file: the
    /// index follows the same links, so every search hit can be read. A link out of the
    /// workspace, or to anything else, is refused as a write's would be.
    fn resolve_for_read(&self, rel: &str) -> Result<PathBuf, StorageError> {
        if Self::path_problem(rel).is_some() {
            return Err(StorageError::NotMemoryFile(rel.to_owned()));
        }
        let path = self.layout.root().join(rel);
        let (Ok(real), Ok(root)) = (fs::canonicalize(&path), fs::canonicalize(self.layout.root())) else {
            // Missing (or unreadable): the strict check decides what to answer.
            return self.resolve(rel);
        };
        let markdown = real
            .extension()
            .is_some_and(|e| ["md", "mdx", "markdown"].iter().any(|m| e.eq_ignore_ascii_case(m)));
        if !real.starts_with(&root) || !markdown || !real.is_file() {
            return Err(StorageError::OutsideWorkspace(rel.to_owned()));
        }
        Ok(real)
    }

    /// Replaces the memory file `rel` with `content` atomically (created 0600, its directories
    /// 0700).
    pub fn write(&self, rel: &str, content: &str) -> Result<MemoryFileInfo, StorageError> {
        let path = self.resolve(rel)?;
        if let Some(dir) = path.parent() {
            create_private_dir_all(dir)?;
        }
        let _turn = changes();
        write_atomic(&path, content.as_bytes())?;
        Ok(info_of(content.as_bytes()))
    }

    /// Appends `text` to the memory file `rel` (created if missing), durably and all or
    /// nothing (`append_whole`).
    pub fn append(&self, rel: &str, text: &str) -> Result<MemoryFileInfo, StorageError> {
        let path = self.resolve(rel)?;
        if let Some(dir) = path.parent() {
            create_private_dir_all(dir)?;
        }
        append_whole(&path, text)
    }

    /// Lines `start_line..=end_line` (1-based; defaults the whole file) of the memory file `rel`.
    pub fn get(&self, rel: &str, start_line: Option<u32>, end_line: Option<u32>) -> Result<MemoryLines, StorageError> {
        let path = self.resolve_for_read(rel)?;
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StorageError::NotFound(rel.to_owned())),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let text = String::from_utf8(bytes).map_err(|_| StorageError::NotText(rel.to_owned()))?;
        Ok(memory_lines(&text, start_line, end_line))
    }
}

impl MemoryFiles {
    /// The text of `MEMORY.md`; empty when it does not exist.
    pub fn read_memory_file(&self) -> Result<String, StorageError> {
        read_optional(&self.layout.root().join(MEMORY_FILE), MEMORY_FILE)
    }

    /// The daily log of `date`, `None` when there is none.
    pub fn read_daily(&self, date: &str) -> Result<Option<String>, StorageError> {
        let path = self.layout.memory_daily(date);
        if !path.is_file() {
            return Ok(None);
        }
        read_optional(&path, &Layout::memory_daily_rel(date)).map(Some)
    }

    /// Replaces `MEMORY.md` with `content`, first keeping its previous content (if any) as
    /// `memory/.backups/MEMORY-<stamp>.md` (hidden, so it is neither indexed nor a memory
    /// file a client names; `MEMORY-<stamp>-2.md` and on when that name is taken, as by a
    /// second merge in the same second); returns the backup's workspace-relative path.
    pub fn replace_memory_file(&self, content: &str, stamp: &str) -> Result<Option<String>, StorageError> {
        let _turn = changes();
        let previous = self.read_memory_file()?;
        let backup = if previous.is_empty() {
            None
        } else {
            create_private_dir_all(&self.layout.memory_dir().join(BACKUP_DIR))?;
            // Merges run one at a time (the memory lock, one daemon per workspace), so a name
            // free now is still free when the backup is written.
            let mut rel = format!("memory/{BACKUP_DIR}/MEMORY-{stamp}.md");
            let mut n = 1;
            while fs::symlink_metadata(self.layout.root().join(&rel)).is_ok() {
                n += 1;
                rel = format!("memory/{BACKUP_DIR}/MEMORY-{stamp}-{n}.md");
            }
            write_atomic(&self.layout.root().join(&rel), previous.as_bytes())?;
            Some(rel)
        };
        write_atomic(&self.resolve(MEMORY_FILE)?, content.as_bytes())?;
        Ok(backup)
    }
}

/// Appends `text` to the memory file at `path` (created if missing) by replacing the file
/// with its content and `text`, atomically; a newline goes first when the file does not end
/// with one, so the text starts on its own line.
///
/// Why not an append in place, like session logs: a memory file is the user's Markdown, which
/// may end without a newline by hand, so a tail torn by a crash mid-append could not be told
/// from a last line the user wrote; it would stay, and the next append would start after it.
/// A replace leaves the old content or the new, never a fragment, after a crash, a failed
/// write or a failed clean-up alike (its temp file is hidden, and removed at the next start).
/// Its cost, the file written again, is of the order of what an append costs anyway: the
/// file is read to count its lines, and the index reads and hashes it whole.
fn append_whole(path: &Path, text: &str) -> Result<MemoryFileInfo, StorageError> {
    let _turn = changes();
    let mut bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io("read", path)(e)),
    };
    if bytes.last().is_some_and(|b| *b != b'\n') {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(text.as_bytes());
    write_atomic_at(path, &bytes, (Point::MemoryWrite, Point::MemorySync)).map_err(|e| match e {
        // Named after the file and the call, not the temp file the step failed on.
        StorageError::Io { source, .. } => io("append", path)(std::io::Error::new(
            source.kind(),
            format!("{source}; the file is unchanged"),
        )),
        other => other,
    })?;
    Ok(info_of(&bytes))
}

/// This process's turn to change a memory file. An append reads the file and then replaces
/// it, so a change made between the two would be lost: compaction appends to the day's log
/// while a client may append to or write it.
fn changes() -> MutexGuard<'static, ()> {
    static CHANGES: Mutex<()> = Mutex::new(());
    CHANGES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the daily merge keeps the copies of `MEMORY.md` it replaced, under `memory/`.
const BACKUP_DIR: &str = ".backups";

/// The text of `path` (`rel` in errors); empty when it does not exist.
fn read_optional(path: &Path, rel: &str) -> Result<String, StorageError> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| StorageError::NotText(rel.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(io("read", path)(e)),
    }
}

/// Size and lines of `content`.
fn info_of(content: &[u8]) -> MemoryFileInfo {
    MemoryFileInfo {
        bytes: content.len() as u64,
        lines: content.split_inclusive(|b| *b == b'\n').count() as u32,
    }
}

/// Lines `start..=end` of `text` (1-based, clamped to the file).
pub fn memory_lines(text: &str, start_line: Option<u32>, end_line: Option<u32>) -> MemoryLines {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total_lines = lines.len() as u32;
    let start_line = start_line.unwrap_or(1).max(1);
    let end_line = end_line.unwrap_or(total_lines).min(total_lines);
    let text = if start_line <= end_line {
        lines[(start_line - 1) as usize..end_line as usize].concat()
    } else {
        String::new()
    };
    MemoryLines {
        start_line,
        end_line: end_line.max(start_line.saturating_sub(1)),
        total_lines,
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_failed_memory_append_leaves_the_log_as_it_was() {
        use crate::failpoints::{Fault, Hits, Point, arm};
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let memory = MemoryFiles::new(&ws);
        memory.append_daily("2026-11-22", "a\n").unwrap();
        for point in [Point::MemoryWrite, Point::MemorySync] {
            let _armed = arm(point, Fault::Torn, Hits::nth(1), Some(ws.root()));
            memory.append_daily("2026-11-22", "a longer note\n").unwrap_err();
        }
        assert_eq!(
            fs::read_to_string(ws.root().join("memory/2026-11-22.md")).unwrap(),
            "a\n"
        );
    }

    #[test]
    fn only_memory_files_may_be_named() {
        for ok in ["MEMORY.md", "memory/2026-11-24.md", "memory/projects/satchel.MD"] {
            assert!(MemoryFiles::is_memory_path(ok), "{ok}");
        }
        for bad in [
            "README.md",
            "memory.md",
            "memory/notes.txt",
            "memory/../MEMORY.md",
            "memory/.hidden.md",
            "memory//a.md",
            "/etc/MEMORY.md",
            "./MEMORY.md",
            "memory/",
            "sessions/a.md",
        ] {
            assert!(!MemoryFiles::is_memory_path(bad), "{bad}");
        }
    }

    #[test]
    fn memory_paths_fit_the_file_systems_limits() {
        let name = |bytes: usize| format!("{}.md", "n".repeat(bytes - 3));
        let deep = |dirs: usize| format!("memory/{}x.md", "d/".repeat(dirs));
        assert_eq!(MemoryFiles::path_problem(&format!("memory/{}", name(255))), None);
        assert_eq!(MemoryFiles::path_problem(&deep(16)), None);
        let long_name = MemoryFiles::path_problem(&format!("memory/{}", name(256))).unwrap();
        assert!(long_name.contains("256 bytes"), "{long_name}");
        let too_deep = MemoryFiles::path_problem(&deep(17)).unwrap();
        assert!(too_deep.contains("17 directories"), "{too_deep}");
        let long_path = format!("memory/{}x.md", format!("{}/", "d".repeat(200)).repeat(6));
        assert!(MemoryFiles::path_problem(&long_path).unwrap().contains("at most 1024"));
    }

    #[test]
    fn a_name_of_the_longest_length_can_be_written_and_appended() {
        let dir = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        let rel = format!("memory/{}.md", "n".repeat(252));
        memory.write(&rel, "- first\n").unwrap();
        memory.append(&rel, "- second\n").unwrap();
        assert_eq!(memory.get(&rel, None, None).unwrap().text, "- first\n- second\n");
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("memory"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temp file left: {leftovers:?}");
    }

    #[test]
    fn write_append_and_get_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        let info = memory
            .write("memory/topics/rust.md", "# Rust\n- uses 2024 edition")
            .unwrap();
        assert_eq!(info, MemoryFileInfo { bytes: 26, lines: 2 });
        let info = memory.append("memory/topics/rust.md", "- prefers clippy\n").unwrap();
        assert_eq!(info.lines, 3);
        let all = memory.get("memory/topics/rust.md", None, None).unwrap();
        assert_eq!(all.text, "# Rust\n- uses 2024 edition\n- prefers clippy\n");
        let some = memory.get("memory/topics/rust.md", Some(2), Some(2)).unwrap();
        assert_eq!((some.start_line, some.end_line, some.total_lines), (2, 2, 3));
        assert_eq!(some.text, "- uses 2024 edition\n");
        let past = memory.get("memory/topics/rust.md", Some(9), None).unwrap();
        assert_eq!((past.text.as_str(), past.end_line), ("", 8));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.path().join("memory/topics"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let mode = fs::metadata(dir.path().join("memory/topics/rust.md"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_symlinked_memory_directory_cannot_lead_out() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        std::os::unix::fs::symlink(outside.path(), dir.path().join("memory")).unwrap();
        let error = memory.write("memory/a.md", "x").unwrap_err();
        assert!(matches!(error, StorageError::OutsideWorkspace(_)), "{error}");
        assert!(!outside.path().join("a.md").exists());
        let error = memory.get("src/lib.rs", None, None).unwrap_err();
        assert!(matches!(error, StorageError::NotMemoryFile(_)), "{error}");
    }

    /// What the index finds through a link that stays in the workspace can be read; a link out
    /// of it, or to a file that is not Markdown (the signing key), cannot.
    #[test]
    fn a_read_follows_links_inside_the_workspace_to_markdown_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let memory = MemoryFiles::new(&workspace);
        std::fs::create_dir_all(dir.path().join("docs")).unwrap();
        std::fs::create_dir_all(dir.path().join("memory")).unwrap();
        std::fs::write(dir.path().join("docs/notes.md"), "- a note\n").unwrap();
        std::fs::write(outside.path().join("secret.md"), "outside\n").unwrap();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/candidates.key"), "k").unwrap();
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        link(&dir.path().join("docs/notes.md"), "memory/notes.md");
        link(&outside.path().join("secret.md"), "memory/out.md");
        link(&dir.path().join("keys/candidates.key"), "memory/key.md");
        link(&dir.path().join("docs"), "memory/docs");

        assert_eq!(memory.get("memory/notes.md", None, None).unwrap().text, "- a note\n");
        assert_eq!(
            memory.get("memory/docs/notes.md", None, None).unwrap().text,
            "- a note\n"
        );
        for refused in ["memory/out.md", "memory/key.md"] {
            let error = memory.get(refused, None, None).unwrap_err();
            assert!(matches!(error, StorageError::OutsideWorkspace(_)), "{refused}: {error}");
        }
        // A write never goes through a link.
        let error = memory.write("memory/notes.md", "x").unwrap_err();
        assert!(matches!(error, StorageError::OutsideWorkspace(_)), "{error}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("docs/notes.md")).unwrap(),
            "- a note\n"
        );
    }

    #[test]
    fn two_replacements_with_the_same_stamp_keep_both_backups() {
        let dir = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        memory.write(MEMORY_FILE, "one\n").unwrap();
        let first = memory.replace_memory_file("two\n", "20261127T120000").unwrap().unwrap();
        let second = memory
            .replace_memory_file("three\n", "20261127T120000")
            .unwrap()
            .unwrap();
        let third = memory
            .replace_memory_file("four\n", "20261127T120000")
            .unwrap()
            .unwrap();
        assert_eq!(first, "memory/.backups/MEMORY-20261127T120000.md");
        assert_eq!(second, "memory/.backups/MEMORY-20261127T120000-2.md");
        assert_eq!(third, "memory/.backups/MEMORY-20261127T120000-3.md");
        let read = |rel: &str| fs::read_to_string(dir.path().join(rel)).unwrap();
        assert_eq!(
            (read(&first), read(&second), read(&third)),
            ("one\n".into(), "two\n".into(), "three\n".into())
        );
        assert_eq!(read(MEMORY_FILE), "four\n");
    }

    #[test]
    fn daily_log_accumulates() {
        let dir = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        assert_eq!(
            memory.append_daily("2026-11-22", "a\n").unwrap(),
            "memory/2026-11-22.md"
        );
        memory.append_daily("2026-11-22", "b\n").unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("memory/2026-11-22.md")).unwrap(),
            "a\nb\n"
        );
    }
}
