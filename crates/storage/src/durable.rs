//! The two write primitives everything else uses: atomic replace and durable append.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{StorageError, io};

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content:
/// write a temp file in the same directory, fsync it, rename over, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = File::create(&tmp).map_err(io("create", &tmp))?;
        file.write_all(bytes).map_err(io("write", &tmp))?;
        file.sync_all().map_err(io("fsync", &tmp))?;
        fs::rename(&tmp, path).map_err(io("rename", path))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Appends `bytes` to `path` (created if missing) and fsyncs before returning, so an
/// acknowledged append survives power loss.
pub fn append_durable(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let created = !path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io("open", path))?;
    file.write_all(bytes).map_err(io("append", path))?;
    file.sync_data().map_err(io("fsync", path))?;
    if created {
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// Makes a rename or a file creation in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("fsync dir", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn append_accumulates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        append_durable(&p, b"a\n").unwrap();
        append_durable(&p, b"b\n").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\n");
    }
}
