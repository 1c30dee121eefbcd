//! Which paths are memory files, what counts as a change for the poller, and directory walks.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The watched roots: absolute paths of files or directories, existing or not.
pub(super) struct Roots(Vec<PathBuf>);

impl Roots {
    /// Makes relative paths absolute (against the current directory) and drops duplicates.
    pub(super) fn new(paths: Vec<PathBuf>) -> Self {
        let mut roots: Vec<PathBuf> = Vec::with_capacity(paths.len());
        for path in paths {
            let path = std::path::absolute(&path).unwrap_or(path);
            if !roots.contains(&path) {
                roots.push(path);
            }
        }
        Self(roots)
    }

    /// The roots, in the order given.
    pub(super) fn paths(&self) -> &[PathBuf] {
        &self.0
    }

    /// Whether `path` is one of the roots.
    pub(super) fn is_root(&self, path: &Path) -> bool {
        self.0.iter().any(|root| root == path)
    }

    /// Whether `path` is a root or below one.
    pub(super) fn covers(&self, path: &Path) -> bool {
        self.0.iter().any(|root| path.starts_with(root))
    }

    /// Every memory file under the roots now: root files (whatever their name) and the memory
    /// files below root directories.
    pub(super) fn scan(&self) -> BTreeMap<PathBuf, Fingerprint> {
        let mut found = BTreeMap::new();
        for root in &self.0 {
            match fs::metadata(root) {
                Ok(meta) if meta.is_dir() => scan_dir(root, &mut found),
                Ok(meta) => {
                    found.insert(root.clone(), Fingerprint::of(&meta));
                }
                Err(_) => {}
            }
        }
        found
    }
}

/// Whether a file below a root directory is a memory file: its name ends in `.md` (any case) and
/// it is not an Emacs lock (`.#name.md`). Vim swap files (`.name.md.swp`) and backups
/// (`name.md~`) already fail the extension test.
pub(super) fn is_memory_file_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    let is_md = path
        .extension()
        .is_some_and(|extension| extension.eq_ignore_ascii_case("md"));
    is_md && !name.starts_with(".#")
}

/// What the poller compares to tell a changed file from an unchanged one, without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    /// Inode and change time: an atomic save (write elsewhere, rename over) makes a new inode
    /// even when size and mtime match, and ctime moves on every write, rename and chmod.
    #[cfg(unix)]
    inode_ctime: (u64, i64, i64),
}

impl Fingerprint {
    /// The fingerprint of the file `path` names now; `None` if it is missing or not a file.
    pub(super) fn read(path: &Path) -> Option<Fingerprint> {
        fs::metadata(path)
            .ok()
            .filter(fs::Metadata::is_file)
            .map(|meta| Fingerprint::of(&meta))
    }

    fn of(meta: &fs::Metadata) -> Fingerprint {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt as _;
        Fingerprint {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            inode_ctime: (meta.ino(), meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Adds the memory files below `dir` to `found`. Symbolic links to directories are not followed,
/// so a link cycle cannot make the walk endless; unreadable directories are skipped.
pub(super) fn scan_dir(dir: &Path, found: &mut BTreeMap<PathBuf, Fingerprint>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => scan_dir(&path, found),
            Ok(_) if is_memory_file_name(&path) => {
                if let Some(fingerprint) = Fingerprint::read(&path) {
                    found.insert(path, fingerprint);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_file_names() {
        for name in ["a.md", "MEMORY.md", "notes.MD", "2025-01-02.Md", ".hidden.md"] {
            assert!(is_memory_file_name(Path::new(name)), "{name}");
        }
        for name in [
            "notes.txt",
            "a.md~",
            ".a.md.swp",
            ".#a.md",
            "#a.md#",
            "md",
            ".md",
            "a.markdown",
        ] {
            assert!(!is_memory_file_name(Path::new(name)), "{name}");
        }
    }

    #[test]
    fn roots_cover_themselves_and_below_by_component() {
        let roots = Roots::new(vec!["/ws/memory".into(), "/ws/MEMORY.md".into(), "/ws/memory".into()]);
        assert_eq!(roots.paths().len(), 2, "duplicates are dropped");
        assert!(roots.covers(Path::new("/ws/memory")));
        assert!(roots.covers(Path::new("/ws/memory/a/b.md")));
        assert!(roots.covers(Path::new("/ws/MEMORY.md")));
        assert!(!roots.covers(Path::new("/ws/memory2/a.md")));
        assert!(!roots.covers(Path::new("/ws/notes.md")));
        assert!(roots.is_root(Path::new("/ws/MEMORY.md")));
        assert!(!roots.is_root(Path::new("/ws/memory/a.md")));
    }

    #[test]
    fn scan_finds_root_files_and_memory_files_below_root_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        fs::create_dir_all(ws.join("memory/deep")).unwrap();
        for file in [
            "MEMORY.md",
            "notes.txt",
            "memory/a.md",
            "memory/deep/b.MD",
            "memory/c.txt",
            "memory/.#a.md",
        ] {
            fs::write(ws.join(file), "x").unwrap();
        }
        let roots = Roots::new(vec![
            ws.join("MEMORY.md"),
            ws.join("memory"),
            ws.join("notes.txt"),
            ws.join("gone"),
        ]);
        let found: Vec<PathBuf> = roots.scan().into_keys().collect();
        let expected: Vec<PathBuf> = ["MEMORY.md", "memory/a.md", "memory/deep/b.MD", "notes.txt"]
            .iter()
            .map(|file| ws.join(file))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn fingerprint_changes_with_content_and_atomic_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.md");
        fs::write(&path, "one").unwrap();
        let first = Fingerprint::read(&path).unwrap();
        assert_eq!(Fingerprint::read(&path), Some(first), "stable while untouched");
        fs::write(&path, "one more").unwrap();
        let second = Fingerprint::read(&path).unwrap();
        assert_ne!(first, second);
        let tmp = dir.path().join("a.md.tmp");
        fs::write(&tmp, "one more").unwrap();
        fs::rename(&tmp, &path).unwrap();
        #[cfg(unix)]
        assert_ne!(Fingerprint::read(&path), Some(second), "same size, new inode");
        assert_eq!(Fingerprint::read(dir.path()), None, "directories have none");
        assert_eq!(Fingerprint::read(&tmp), None, "missing files have none");
    }
}
