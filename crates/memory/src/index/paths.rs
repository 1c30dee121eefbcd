//! Which files are memory files, and the names the index and its hits give them.
//!
//! Memory files are `<root>/MEMORY.md`, the `.md` files under `<root>/memory/` and the extra
//! paths (files, or directories of `.md` files). A file inside the workspace is named by its
//! workspace-relative path with `/`; an extra path outside it by its absolute path.

use std::fs;
use std::path::{Component, Path, PathBuf};

/// A memory file: its name in the index and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub rel: String,
    pub abs: PathBuf,
}

/// The workspace root and the extra paths, absolute and normalised.
#[derive(Debug, Clone)]
pub(super) struct Roots {
    root: PathBuf,
    extra: Vec<PathBuf>,
}

impl Roots {
    pub fn new(root: &Path, extra: &[PathBuf]) -> Roots {
        let root = normalize(&std::path::absolute(root).unwrap_or_else(|_| root.to_owned()));
        let extra = extra.iter().map(|p| normalize(&root.join(p))).collect();
        Roots { root, extra }
    }

    pub fn watch_roots(&self) -> Vec<PathBuf> {
        let mut out = vec![self.root.join("MEMORY.md"), self.root.join("memory")];
        out.extend(self.extra.iter().cloned());
        out
    }

    /// `path` made absolute (relative to the workspace root) and normalised.
    pub fn absolute(&self, path: &Path) -> PathBuf {
        normalize(&self.root.join(path))
    }

    /// The index name of the absolute `path`.
    pub fn rel(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(inside) => inside
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    /// Where the file the index calls `rel` is.
    pub fn resolve(&self, rel: &str) -> PathBuf {
        self.absolute(Path::new(rel))
    }

    /// The workspace root, absolute (not canonical: the index names files under it).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The extra paths beside `MEMORY.md` and `memory/`, absolute and normalised.
    pub fn extra(&self) -> &[PathBuf] {
        &self.extra
    }

    /// Whether the existing `path` is reached without a symbolic link below the workspace
    /// root (or below the extra path it is in): then it is a memory file by its name alone.
    /// One reached through a link is a memory file only if [`super::walk::discover`] finds it.
    pub fn is_plain(&self, path: &Path) -> bool {
        let base = if path.starts_with(&self.root) {
            &self.root
        } else {
            match self.extra.iter().find(|extra| path.starts_with(extra)) {
                Some(extra) => extra,
                None => return false,
            }
        };
        let (Ok(real), Ok(real_base), Ok(rest)) =
            (fs::canonicalize(path), fs::canonicalize(base), path.strip_prefix(base))
        else {
            return false;
        };
        real == real_base.join(rest)
    }

    /// Whether the absolute `path` names a memory file (whether or not it exists).
    pub fn is_memory_file(&self, path: &Path) -> bool {
        let under = |dir: &Path| {
            path.strip_prefix(dir)
                .is_ok_and(|rest| is_markdown(path) && !rest.components().any(|c| is_hidden(c.as_os_str())))
        };
        path == self.root.join("MEMORY.md")
            || under(&self.root.join("memory"))
            || self.extra.iter().any(|extra| path == extra || under(extra))
    }
}

pub(super) fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("md"))
}

/// Dot files and directories (`.git`, an editor's `.notes.md.swp`) are not memory.
pub(super) fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}

/// `path` without `.` and `..` components, without touching the file system (the file may be
/// gone: a watcher reports deletions too).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_workspace_relative_with_slashes_or_absolute_outside() {
        let roots = Roots::new(
            Path::new("/ws/./a/.."),
            &[PathBuf::from("notes"), PathBuf::from("/elsewhere/x.md")],
        );
        assert_eq!(roots.rel(Path::new("/ws/memory/2026-01-01.md")), "memory/2026-01-01.md");
        assert_eq!(roots.rel(Path::new("/elsewhere/x.md")), "/elsewhere/x.md");
        assert_eq!(
            roots.absolute(Path::new("memory/../MEMORY.md")),
            Path::new("/ws/MEMORY.md")
        );
        assert_eq!(roots.resolve("/elsewhere/x.md"), Path::new("/elsewhere/x.md"));
        assert_eq!(
            roots.watch_roots(),
            [
                Path::new("/ws/MEMORY.md"),
                Path::new("/ws/memory"),
                Path::new("/ws/notes"),
                Path::new("/elsewhere/x.md"),
            ]
        );
    }

    #[test]
    fn memory_files_are_markdown_under_the_roots() {
        let roots = Roots::new(Path::new("/ws"), &[PathBuf::from("notes")]);
        assert!(roots.is_memory_file(Path::new("/ws/MEMORY.md")));
        assert!(roots.is_memory_file(Path::new("/ws/memory/2026/2026-01-01.md")));
        assert!(roots.is_memory_file(Path::new("/ws/notes/a.MD")));
        assert!(!roots.is_memory_file(Path::new("/ws/memory/.draft.md")));
        assert!(!roots.is_memory_file(Path::new("/ws/memory/image.png")));
        assert!(!roots.is_memory_file(Path::new("/ws/README.md")));
    }
}
