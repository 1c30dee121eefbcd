//! The workspace directory and the confinement of client-supplied paths to it.

use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::error::{StorageError, io};
use crate::layout::Layout;

/// The root of all satchel state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Workspace {
    layout: Layout,
}

impl Workspace {
    /// Opens (creating if needed) a workspace at `root`; the root is canonicalised once so
    /// confinement checks compare real paths.
    pub fn open(root: &Path) -> Result<Self, StorageError> {
        let layout = Layout::new(root);
        for dir in [layout.offload_dir(), layout.sessions_dir()] {
            fs::create_dir_all(dir).map_err(io("create dir", root))?;
        }
        let root = fs::canonicalize(root).map_err(io("canonicalize", root))?;
        Ok(Workspace {
            layout: Layout::new(root),
        })
    }

    /// Absolute path of the workspace.
    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    /// Where everything lives in the workspace.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Resolves a client-supplied relative path to an existing file inside the workspace.
    ///
    /// Rejects absolute paths and any `..` before touching the disk, then canonicalises and
    /// checks the prefix again, so a symlink inside the workspace cannot lead out of it.
    pub fn resolve_existing(&self, rel: &str) -> Result<PathBuf, StorageError> {
        let candidate = Path::new(rel);
        let lexically_safe = !rel.is_empty()
            && !rel.contains('\0')
            && candidate
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !lexically_safe {
            return Err(StorageError::OutsideWorkspace(rel.to_owned()));
        }
        let real = fs::canonicalize(self.root().join(candidate)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StorageError::NotFound(rel.to_owned()),
            _ => StorageError::Io {
                op: "canonicalize",
                path: candidate.to_path_buf(),
                source: e,
            },
        })?;
        if !real.starts_with(self.root()) {
            return Err(StorageError::OutsideWorkspace(rel.to_owned()));
        }
        if !real.is_file() {
            return Err(StorageError::NotFound(rel.to_owned()));
        }
        Ok(real)
    }

    /// Reads a workspace file named by a client as UTF-8 text.
    pub fn read_text(&self, rel: &str) -> Result<String, StorageError> {
        let path = self.resolve_existing(rel)?;
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        String::from_utf8(bytes).map_err(|_| StorageError::NotText(rel.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confines_paths_to_the_workspace() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        fs::write(ws.root().join("tool_result/a.txt"), "hello").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            ws.root().join("tool_result/link.txt"),
        )
        .unwrap();

        assert_eq!(ws.read_text("tool_result/a.txt").unwrap(), "hello");
        assert_eq!(ws.read_text("./tool_result/a.txt").unwrap(), "hello");
        for bad in ["/etc/passwd", "../x", "tool_result/../../x", "tool_result/link.txt", ""] {
            assert!(
                matches!(ws.read_text(bad), Err(StorageError::OutsideWorkspace(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            ws.read_text("tool_result/missing.txt"),
            Err(StorageError::NotFound(_))
        ));
        assert!(matches!(ws.read_text("tool_result"), Err(StorageError::NotFound(_))));
    }
}
