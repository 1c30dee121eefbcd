//! The two write primitives everything else uses: atomic replace and durable append.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, mpsc};

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
    append(path, bytes)?.run()
}

/// Appends `bytes` to `path` (created if missing) and has the fsync done on a background
/// thread, so the caller can do other work meanwhile: a call's fsync is most of its cost.
/// Nothing may be acknowledged before [`PendingSync::wait`] returns.
pub fn append_then_sync(path: &Path, bytes: &[u8]) -> Result<PendingSync, StorageError> {
    let job = append(path, bytes)?;
    Ok(in_background(Lane::Fsync, job.path.clone(), move || job.run()))
}

/// Which background thread runs a job. Each lane runs its jobs one at a time, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Fsyncs of small appends, the cost of every steady step.
    Fsync,
    /// Writes of megabytes, such as a first pass's offloaded texts: on their own thread, so
    /// that another session's step is never queued behind them.
    Bulk,
}

/// Runs `work`, writes that must be durable before the caller acknowledges anything, on the
/// background thread of `lane`, so the caller can do other work meanwhile. `path` names the
/// writes in the error reported if the thread is gone. Nothing may be acknowledged before
/// [`PendingSync::wait`] returns.
pub fn in_background(
    lane: Lane,
    path: PathBuf,
    work: impl FnOnce() -> Result<(), StorageError> + Send + 'static,
) -> PendingSync {
    let (done_tx, done) = mpsc::sync_channel(1);
    let work: Work = Box::new(move || {
        // Nobody waiting means the caller gave up on the call: the writes still happen.
        let _ = done_tx.send(work());
    });
    if let Err(mpsc::SendError(work)) = background_thread(lane).send(work) {
        work(); // the thread is gone (it never stops on its own): run here
    }
    PendingSync { path, done }
}

/// Writes handed to a background thread, maybe not yet durable.
#[must_use = "background writes are not durable until `wait` returns"]
#[derive(Debug)]
pub struct PendingSync {
    path: PathBuf,
    done: mpsc::Receiver<Result<(), StorageError>>,
}

impl PendingSync {
    /// Waits until the append is durable.
    pub fn wait(self) -> Result<(), StorageError> {
        self.done.recv().unwrap_or_else(|_| {
            Err(StorageError::Io {
                op: "fsync",
                path: self.path,
                source: std::io::Error::other("the background thread stopped"),
            })
        })
    }
}

/// The fsync an append still needs.
struct SyncJob {
    file: File,
    path: PathBuf,
    /// Whether the append created the file, whose directory entry must then be synced too.
    created: bool,
}

impl SyncJob {
    fn run(self) -> Result<(), StorageError> {
        self.file.sync_data().map_err(io("fsync", &self.path))?;
        if self.created {
            sync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        }
        Ok(())
    }
}

/// Writes `bytes` at the end of `path`, creating it if missing, without syncing.
fn append(path: &Path, bytes: &[u8]) -> Result<SyncJob, StorageError> {
    let created = !path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io("open", path))?;
    file.write_all(bytes).map_err(io("append", path))?;
    Ok(SyncJob {
        file,
        path: path.to_owned(),
        created,
    })
}

type Work = Box<dyn FnOnce() + Send>;

/// The process's thread for `lane`, started on first use. One thread per lane, not one per
/// job: a new thread per call would cost about as much as the overlap saves.
fn background_thread(lane: Lane) -> &'static mpsc::Sender<Work> {
    static FSYNC: OnceLock<mpsc::Sender<Work>> = OnceLock::new();
    static BULK: OnceLock<mpsc::Sender<Work>> = OnceLock::new();
    let (cell, name) = match lane {
        Lane::Fsync => (&FSYNC, "satchel-fsync"),
        Lane::Bulk => (&BULK, "satchel-write"),
    };
    cell.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Work>();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || rx.into_iter().for_each(|work| work()));
        if let Err(e) = spawned {
            // `rx` is gone with the closure: every send fails and the work runs in place.
            tracing::warn!("no background thread {name} ({e}); its writes run in place");
        }
        tx
    })
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

    #[test]
    fn a_background_synced_append_is_in_place_and_ordered() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let first = append_then_sync(&p, b"a\n").unwrap();
        append_durable(&p, b"b\n").unwrap();
        let third = append_then_sync(&p, b"c\n").unwrap();
        first.wait().unwrap();
        third.wait().unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nc\n");
    }

    #[test]
    fn a_failed_append_is_reported_before_any_sync() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir").join("log.jsonl");
        let error = append_then_sync(&missing, b"a\n").unwrap_err();
        assert!(matches!(error, StorageError::Io { op: "open", .. }), "{error:?}");
    }

    #[test]
    fn background_work_runs_in_the_order_it_was_given_and_reports_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let pending: Vec<PendingSync> = ["a\n", "b\n", "c\n"]
            .into_iter()
            .map(|line| {
                let p = p.clone();
                in_background(Lane::Fsync, p.clone(), move || append_durable(&p, line.as_bytes()))
            })
            .collect();
        pending.into_iter().for_each(|p| p.wait().unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nc\n");

        let missing = dir.path().join("no-such-dir").join("log.jsonl");
        let error = in_background(Lane::Bulk, missing.clone(), move || append_durable(&missing, b"a\n"))
            .wait()
            .unwrap_err();
        assert!(matches!(error, StorageError::Io { op: "open", .. }), "{error:?}");
    }
}
