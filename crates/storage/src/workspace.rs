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
    ///
    /// Directories it creates are 0700 (files later 0600) whatever the umask; its own
    /// subdirectories (`sessions`, `tool_result`, `dialog`, `memory`, `index`, `keys`, `run`) must not be
    /// symbolic links, and are tightened to 0700 if they are wider (see [`crate::perms`]).
    /// The first call in a process also arms the failpoints of `SATCHEL_FAILPOINTS`, if set.
    pub fn open(root: &Path) -> Result<Self, StorageError> {
        crate::failpoints::arm_from_env().map_err(|e| StorageError::Io {
            op: "arm failpoints",
            path: root.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        let layout = Layout::new(root);
        crate::perms::create_private_dir_all(root)?;
        crate::perms::check_own_dirs(&layout)?;
        for dir in [layout.offload_dir(), layout.sessions_dir()] {
            crate::perms::create_private_dir_all(&dir)?;
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
    /// Refuses the secret keys ([`StorageError::Private`]): anything under `keys/`, however
    /// named (a symlink to it resolves there), and any hard link to the candidates key.
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
        let real = fs::canonicalize(self.root().join(candidate)).map_err(|e| path_error(rel, "canonicalize", e))?;
        if !real.starts_with(self.root()) {
            return Err(StorageError::OutsideWorkspace(rel.to_owned()));
        }
        if !real.is_file() {
            return Err(StorageError::NotFound(rel.to_owned()));
        }
        if self.is_secret(&real) {
            return Err(StorageError::Private(rel.to_owned()));
        }
        Ok(real)
    }

    /// Whether the canonical path `real` is a secret key: under `keys/`, or the key file
    /// itself under another name (a hard link).
    fn is_secret(&self, real: &Path) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        if real.starts_with(self.layout.keys_dir()) {
            return true;
        }
        let identity = |path: &Path| fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        match identity(&self.layout.candidates_key()) {
            Some(key) => identity(real) == Some(key),
            None => false,
        }
    }

    /// Reads a workspace file named by a client as UTF-8 text.
    pub fn read_text(&self, rel: &str) -> Result<String, StorageError> {
        let path = self.resolve_existing(rel)?;
        let bytes = fs::read(&path).map_err(|e| path_error(rel, "read", e))?;
        String::from_utf8(bytes).map_err(|_| StorageError::NotText(rel.to_owned()))
    }
}

/// What a failure to resolve or read the client path `rel` means. A path that cannot name a
/// file is the client's error, like a missing one: a name over the system's length limit, a
/// symlink loop, a file where the path needs a directory. Only what the disk itself refused
/// (permissions, I/O) is a storage failure.
fn path_error(rel: &str, op: &'static str, e: std::io::Error) -> StorageError {
    use std::io::ErrorKind;
    let loop_or_too_long = [rustix::io::Errno::LOOP, rustix::io::Errno::NAMETOOLONG]
        .iter()
        .any(|errno| e.raw_os_error() == Some(errno.raw_os_error()));
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::InvalidFilename => {
            StorageError::NotFound(rel.to_owned())
        }
        _ if loop_or_too_long => StorageError::NotFound(rel.to_owned()),
        _ => StorageError::Io {
            op,
            path: rel.into(),
            source: e,
        },
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

    #[test]
    fn secret_keys_cannot_be_read_under_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let key = ws.layout().candidates_key();
        crate::perms::create_private_dir_all(&ws.layout().keys_dir()).unwrap();
        fs::write(&key, "not a real key").unwrap();
        fs::write(ws.layout().keys_dir().join("other.txt"), "x").unwrap();
        std::os::unix::fs::symlink(&key, ws.root().join("tool_result/key-link.txt")).unwrap();
        fs::hard_link(&key, ws.root().join("tool_result/key-hard.txt")).unwrap();
        for secret in [
            "keys/candidates.key",
            "./keys/candidates.key",
            "keys/other.txt",
            "tool_result/key-link.txt",
            "tool_result/key-hard.txt",
        ] {
            let error = ws.read_text(secret).unwrap_err();
            assert!(matches!(error, StorageError::Private(_)), "{secret}: {error:?}");
            assert!(!error.to_string().contains("not a real key"), "{error}");
        }
        assert!(matches!(ws.read_text("keys"), Err(StorageError::NotFound(_))));
        fs::write(ws.layout().candidates_file(), "{}\n").unwrap();
        assert_eq!(ws.read_text("candidates.jsonl").unwrap(), "{}\n");
    }

    #[test]
    fn paths_that_cannot_name_a_file_are_not_found_not_storage_failures() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let tr = ws.root().join("tool_result");
        fs::write(tr.join("a.txt"), "hello").unwrap();
        std::os::unix::fs::symlink("loop_b", tr.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", tr.join("loop_b")).unwrap();
        std::os::unix::fs::symlink("self", tr.join("self")).unwrap();
        let long_name = format!("tool_result/{}.txt", "n".repeat(300));
        let long_path = format!("tool_result/{}", ["d"; 3000].join("/"));
        for bad in [
            "tool_result/loop_a",
            "tool_result/self",
            "tool_result/self/x.txt",
            long_name.as_str(),
            long_path.as_str(),
            "tool_result/a.txt/x",
            "tool_result/a.txt/",
        ] {
            let error = ws.read_text(bad).unwrap_err();
            assert!(matches!(error, StorageError::NotFound(_)), "{bad}: {error:?}");
            assert!(error.to_string().len() < 400, "{bad}: {error}");
        }
    }
}
