//! Permissions: every directory satchel creates in a workspace is 0700 and every file 0600,
//! whatever the process umask (a umask only ever removes bits, and the mode is set again
//! after creation, so neither 000 nor 077 changes the outcome). Conversations, archives and
//! offloaded tool outputs are the user's alone.
//!
//! A workspace whose own subdirectories are symbolic links is refused: satchel's writes would
//! land wherever the link points.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{StorageError, io};
use crate::layout::Layout;

/// Mode of every directory satchel creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file satchel creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents, each new one with [`DIR_MODE`]. Directories that
/// already exist keep their mode.
pub fn create_private_dir_all(dir: &Path) -> Result<(), StorageError> {
    if dir.as_os_str().is_empty() || fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dir_all(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(io("chmod", dir)),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io("create dir", dir)(e)),
    }
}

/// Options that create a file with [`FILE_MODE`] (before the umask: see [`make_private`]).
pub(crate) fn private_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Gives a file satchel just created exactly [`FILE_MODE`], whatever the umask took away.
pub(crate) fn make_private(file: &File, path: &Path) -> Result<(), StorageError> {
    file.set_permissions(Permissions::from_mode(FILE_MODE))
        .map_err(io("chmod", path))
}

/// The subdirectories of a workspace satchel writes into.
fn own_dirs(layout: &Layout) -> [std::path::PathBuf; 7] {
    [
        layout.sessions_dir(),
        layout.offload_dir(),
        layout.dialog_dir(Layout::default_dialog_path()),
        layout.memory_dir(),
        layout.index_dir(),
        layout.keys_dir(),
        layout.run_dir(),
    ]
}

/// Refuses `dir` if it is a symbolic link; tightens it to [`DIR_MODE`] if it is a directory
/// with a wider mode (made by an older satchel, or by hand).
pub(crate) fn check_own_dir(dir: &Path) -> Result<(), StorageError> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("stat", dir)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(StorageError::Io {
            op: "open workspace",
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                ErrorKind::InvalidInput,
                "is a symbolic link; satchel refuses symlinked workspace directories (its writes would land \
                 wherever the link points): make it a real directory",
            ),
        });
    }
    if meta.is_dir() && meta.permissions().mode() & 0o7777 != DIR_MODE {
        tracing::info!(dir = %dir.display(), "tightening a workspace directory to 0700");
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(io("chmod", dir))?;
    }
    Ok(())
}

/// [`check_own_dir`] on every subdirectory satchel writes into.
pub(crate) fn check_own_dirs(layout: &Layout) -> Result<(), StorageError> {
    own_dirs(layout).iter().try_for_each(|dir| check_own_dir(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn created_directories_are_private_and_existing_ones_keep_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, Permissions::from_mode(0o755)).unwrap();
        let deep = open.join("a/b/c");
        create_private_dir_all(&deep).unwrap();
        create_private_dir_all(&deep).unwrap();
        for created in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&open.join(created)), DIR_MODE, "{created}");
        }
        assert_eq!(mode(&open), 0o755, "an existing directory is left alone");
    }

    #[test]
    fn a_symlinked_own_directory_is_refused_and_a_wide_one_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir(layout.memory_dir()).unwrap();
        fs::set_permissions(layout.memory_dir(), Permissions::from_mode(0o777)).unwrap();
        check_own_dirs(&layout).unwrap();
        assert_eq!(mode(&layout.memory_dir()), DIR_MODE);
        std::os::unix::fs::symlink(elsewhere.path(), layout.sessions_dir()).unwrap();
        let error = check_own_dirs(&layout).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert!(error.contains("sessions"), "{error}");
    }
}
