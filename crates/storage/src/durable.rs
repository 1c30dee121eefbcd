//! The two write primitives everything else uses: atomic replace and durable append.
//!
//! An append is all-or-nothing: when its write or its fsync fails (a full disk, an I/O
//! error, a short write), the file is cut back to its length before the append and that cut
//! made durable before the error is reported, and the error says so. If even the cut fails,
//! the file's good length is remembered and the torn tail is cut off before anything else
//! reads or writes that file in this process ([`settle`]); a torn tail left by a crash is cut
//! by the first reader of the file after a restart (session logs when they load, the archive
//! when it counts its lines). So an append is never glued to a fragment. Memory files are
//! not appended to in place: see `memory`.
//!
//! Every step is a [`failpoints`](crate::failpoints) point, inert unless armed.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

use crate::error::{StorageError, io};
use crate::failpoints::{self, Point};
use crate::perms::{make_private, private_options};

/// The failpoints of the two steps of an append to one kind of file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Steps {
    write: Option<Point>,
    sync: Option<Point>,
}

impl Steps {
    /// A session log.
    pub(crate) const SESSION: Steps = Steps {
        write: Some(Point::SessionWrite),
        sync: Some(Point::SessionSync),
    };
    /// A dialog-archive file.
    pub(crate) const ARCHIVE: Steps = Steps {
        write: Some(Point::ArchiveWrite),
        sync: Some(Point::ArchiveSync),
    };
    /// Any other file: no failpoint.
    const OTHER: Steps = Steps {
        write: None,
        sync: None,
    };
}

/// Writes all of `bytes` to `file`, unless the failpoint `point` fails the write first.
pub(crate) fn write_checked(file: &mut File, bytes: &[u8], point: Option<Point>, path: &Path) -> std::io::Result<()> {
    if let Some(fault) = point.and_then(|p| failpoints::check(p, path)) {
        return Err(fault.fail_write(file, bytes));
    }
    file.write_all(bytes)
}

/// Runs `sync` (an fsync or the like), unless the failpoint `point` fails it first.
pub(crate) fn sync_checked(
    point: Option<Point>,
    path: &Path,
    sync: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    match point.and_then(|p| failpoints::check(p, path)) {
        Some(fault) => Err(fault.fail_sync()),
        None => sync(),
    }
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content:
/// write a temp file (0600) in the same directory, fsync it, rename over, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    write_atomic_at(path, bytes, (Point::AtomicWrite, Point::AtomicSync))
}

/// [`write_atomic`] whose temp file's write and fsync are the failpoints `points`: a memory
/// file's append is such a write, and fails where an append does.
pub(crate) fn write_atomic_at(path: &Path, bytes: &[u8], points: (Point, Point)) -> Result<(), StorageError> {
    let tmp = synced_temp_beside(path, bytes, Some(points))?;
    let result = fs::rename(&tmp, path)
        .map_err(io("rename", path))
        .and_then(|()| sync_dir(parent_of(path)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `path` with `bytes` unless it exists, so that it appears whole or not at all: a
/// synced temp file (0600) hard-linked into place, then the directory synced. `Ok(false)`
/// when another writer created it first (its content stays).
pub(crate) fn create_durable(path: &Path, bytes: &[u8]) -> Result<bool, StorageError> {
    let tmp = synced_temp_beside(path, bytes, None)?;
    let linked = match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io("link", path)(e)),
    };
    let _ = fs::remove_file(&tmp);
    if linked? {
        sync_dir(parent_of(path))?;
        return Ok(true);
    }
    Ok(false)
}

fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// A new temp file (0600) beside `path` holding `bytes`, fsynced, for the caller to publish;
/// removed again when that fails. `points` are the failpoints of its write and its sync.
fn synced_temp_beside(path: &Path, bytes: &[u8], points: Option<(Point, Point)>) -> Result<PathBuf, StorageError> {
    let tmp = temp_beside(path);
    let (write_point, sync_point) = (points.map(|p| p.0), points.map(|p| p.1));
    let written = (|| {
        let mut file = private_options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io("create", &tmp))?;
        make_private(&file, &tmp)?;
        write_checked(&mut file, bytes, write_point, path).map_err(io("write", &tmp))?;
        sync_checked(sync_point, path, || file.sync_all()).map_err(io("fsync", &tmp))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map(|()| tmp)
}

/// The temp file a write of `path` goes through: `.<name>.<32 lowercase hex digits>.tmp` in the
/// same directory (hidden, so a listing of memory files skips it, and unique, so two writers
/// never share one). [`is_temp_name`] recognises exactly these names: change both together.
fn temp_beside(path: &Path) -> PathBuf {
    parent_of(path).join(temp_name(
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        &uuid::Uuid::new_v4().simple().to_string(),
    ))
}

/// `.<name>.<unique>.tmp`, the name cut (on a character boundary) so the whole fits the 255
/// bytes of a file name: a file whose name is near that limit could otherwise be appended to
/// but never written.
fn temp_name(name: &str, unique: &str) -> String {
    const NAME_MAX: usize = 255;
    let room = NAME_MAX.saturating_sub(".".len() + ".".len() + unique.len() + TEMP_SUFFIX.len());
    let mut cut = name.len().min(room);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(".{}.{unique}{TEMP_SUFFIX}", &name[..cut])
}

/// The end of every name [`temp_beside`] makes.
const TEMP_SUFFIX: &str = ".tmp";

/// Whether `name` is one [`temp_beside`] makes: a dot, a name, a dot, 32 lowercase hex digits
/// and `.tmp`. A file of the user's is never named so by chance.
fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(TEMP_SUFFIX)) else {
        return false;
    };
    let Some((base, id)) = rest.rsplit_once('.') else {
        return false;
    };
    !base.is_empty() && id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Removes the temp files of atomic writes that a crash interrupted (each one a whole copy of
/// what was being written: the candidates store, a memory file) from the directories satchel
/// writes atomically into: the workspace root (`MEMORY.md`, `candidates.jsonl`), `run/`,
/// `keys/`, `tool_result/` (whose offloaded texts are staged under the same names) and all
/// of `memory/` (its files and merge backups, at any depth). Only names `is_temp_name`
/// recognises are removed, only regular files, and no symbolic link is followed. Returns how
/// many were removed; a file that cannot be removed stays, for the next start.
///
/// Only the daemon that holds the workspace's lock may call it, before it writes: then no
/// write is in flight, and every such file is stale, however recent.
pub fn remove_stale_temps(layout: &crate::Layout) -> usize {
    let flat = [
        layout.root().to_path_buf(),
        layout.run_dir(),
        layout.keys_dir(),
        layout.offload_dir(),
    ];
    let flat: usize = flat.iter().map(|dir| remove_temps_in(dir, false)).sum();
    flat + remove_temps_in(&layout.memory_dir(), true)
}

/// [`remove_stale_temps`] in `dir`, and below it when `recursive`.
fn remove_temps_in(dir: &Path, recursive: bool) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0; // Not there yet (or unreadable): nothing of ours to remove.
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        // The entry itself, never what a link points to.
        let Ok(kind) = entry.file_type() else { continue };
        let name = entry.file_name();
        if kind.is_dir() && recursive {
            removed += remove_temps_in(&entry.path(), true);
        } else if kind.is_file() && name.to_str().is_some_and(is_temp_name) {
            match fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!(path = %entry.path().display(), "a stale temp file stays: {e}"),
            }
        }
    }
    removed
}

/// Appends `bytes` to `path` (created 0600 if missing) and fsyncs before returning, so an
/// acknowledged append survives power loss. All or nothing: on failure the file is back to
/// its previous length (see the module documentation).
pub fn append_durable(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    append_durable_at(path, bytes, Steps::OTHER)
}

/// [`append_durable`] with the failpoints of one kind of file.
pub(crate) fn append_durable_at(path: &Path, bytes: &[u8], steps: Steps) -> Result<(), StorageError> {
    append(path, bytes, steps)?.run()
}

/// Appends `bytes` to `path` (created if missing) and has the fsync done on a background
/// thread, so the caller can do other work meanwhile: a call's fsync is most of its cost.
/// Nothing may be acknowledged before [`PendingSync::wait`] returns; if the fsync fails, the
/// append is undone before `wait` reports it.
pub(crate) fn append_then_sync(path: &Path, bytes: &[u8], steps: Steps) -> Result<PendingSync, StorageError> {
    let job = append(path, bytes, steps)?;
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

/// The fsync an append still needs, and what undoes the append if it fails.
struct SyncJob {
    file: File,
    path: PathBuf,
    /// The file's length before the append.
    len: u64,
    /// Whether the append created the file, whose directory entry must then be synced too.
    created: bool,
    /// The failpoint of the fsync.
    point: Option<Point>,
}

impl SyncJob {
    fn run(self) -> Result<(), StorageError> {
        let synced = sync_checked(self.point, &self.path, || self.file.sync_data()).and_then(|()| {
            if self.created {
                File::open(self.path.parent().unwrap_or(Path::new("."))).and_then(|d| d.sync_all())
            } else {
                Ok(())
            }
        });
        synced.map_err(|e| undo(&self.file, &self.path, self.len, self.created, "fsync", e))
    }
}

/// Writes `bytes` at the end of `path`, creating it (0600) if missing, without syncing.
/// A failed write is undone before it is reported.
fn append(path: &Path, bytes: &[u8], steps: Steps) -> Result<SyncJob, StorageError> {
    settle(path)?;
    let (mut file, created) = match fs::OpenOptions::new().append(true).open(path) {
        Ok(file) => (file, false),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let file = private_options()
                .append(true)
                .create_new(true)
                .open(path)
                .map_err(io("open", path))?;
            if let Err(e) = make_private(&file, path) {
                let _ = fs::remove_file(path);
                return Err(e);
            }
            (file, true)
        }
        Err(e) => return Err(io("open", path)(e)),
    };
    // The length to cut back to: a new file has none, an existing one costs the `fstat` that
    // the existence check it replaces cost.
    let len = if created {
        0
    } else {
        file.metadata().map_err(io("stat", path))?.len()
    };
    if let Err(e) = write_checked(&mut file, bytes, steps.write, path) {
        return Err(undo(&file, path, len, created, "append", e));
    }
    Ok(SyncJob {
        file,
        path: path.to_owned(),
        len,
        created,
        point: steps.sync,
    })
}

/// Undoes a failed append to `path`: cuts the file back to `len` (removes it if the append
/// created it) and makes that durable. Returns the error to report, which says whether the
/// append was undone. If it could not be, the file is remembered for [`settle`].
fn undo(file: &File, path: &Path, len: u64, created: bool, op: &'static str, error: std::io::Error) -> StorageError {
    let cut = sync_checked(Some(Point::Undo), path, || {
        file.set_len(len)?;
        file.sync_all()
    });
    let note = match cut {
        Ok(()) if created => {
            let _ = fs::remove_file(path);
            "the append was undone (the file it created is removed)".to_owned()
        }
        Ok(()) => format!("the append was undone (the file is back to its last good length, {len} bytes)"),
        Err(cut_error) => {
            remember_torn(path, len);
            format!(
                "undoing the append failed too ({cut_error}): its torn tail is cut off before the file is used again"
            )
        }
    };
    tracing::warn!(path = %path.display(), "{op} failed: {error}; {note}");
    StorageError::Io {
        op,
        path: path.to_owned(),
        source: std::io::Error::new(error.kind(), format!("{error}; {note}")),
    }
}

/// Whether [`TORN`] may hold anything: the only thing [`settle`] reads when nothing failed.
static TORN_ANY: AtomicBool = AtomicBool::new(false);
/// Files a failed append could not be undone on, with their last good length.
static TORN: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());

fn remember_torn(path: &Path, len: u64) {
    let mut torn = TORN.lock().unwrap_or_else(|p| p.into_inner());
    match torn.iter_mut().find(|(p, _)| p == path) {
        Some(entry) => entry.1 = entry.1.min(len),
        None => torn.push((path.to_owned(), len)),
    }
    TORN_ANY.store(true, Ordering::Release);
}

/// Finishes undoing a failed append to `path` whose undo failed: cuts the file back to its
/// last good length. Every reader and writer of a file that is appended to calls it first, so
/// nothing reads a failed append's records or writes after them. One atomic load when no
/// undo ever failed.
pub(crate) fn settle(path: &Path) -> Result<(), StorageError> {
    if !TORN_ANY.load(Ordering::Acquire) {
        return Ok(());
    }
    let mut torn = TORN.lock().unwrap_or_else(|p| p.into_inner());
    let Some(position) = torn.iter().position(|(p, _)| p == path) else {
        return Ok(());
    };
    let good = torn[position].1;
    let cut = sync_checked(Some(Point::Undo), path, || {
        match fs::OpenOptions::new().write(true).open(path) {
            Ok(file) => {
                let len = file.metadata()?.len();
                if len > good {
                    file.set_len(good)?;
                    file.sync_all()?;
                    tracing::warn!(path = %path.display(), dropped = len - good, "cut off the torn tail of a failed append");
                }
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    });
    cut.map_err(|e| StorageError::Io {
        op: "truncate",
        path: path.to_owned(),
        source: std::io::Error::new(
            e.kind(),
            format!("{e}; the file still has the torn tail of a failed append and is not used until it is cut off"),
        ),
    })?;
    torn.swap_remove(position);
    TORN_ANY.store(!torn.is_empty(), Ordering::Release);
    Ok(())
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
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("fsync dir", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::failpoints::{Fault, Hits, arm};
    use std::os::unix::fs::PermissionsExt;

    const FAULTS: [Fault; 3] = [Fault::Enospc, Fault::Eio, Fault::Torn];

    #[test]
    fn a_temp_name_fits_a_file_name_whatever_the_name() {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        assert_eq!(temp_name("a.md", &unique), format!(".a.md.{unique}.tmp"));
        for name in ["n".repeat(255), "é".repeat(127)] {
            let temp = temp_name(&name, &unique);
            assert!(temp.len() <= 255, "{}", temp.len());
            assert!(temp.ends_with(&format!(".{unique}.tmp")), "{temp}");
            assert!(is_temp_name(&temp), "start-up's sweep knows it: {temp}");
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_failed_append_is_cut_back_to_the_last_good_length_at_either_step() {
        for (point, fault) in [Point::SessionWrite, Point::SessionSync]
            .into_iter()
            .flat_map(|p| FAULTS.map(|f| (p, f)))
        {
            for background in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let p = dir.path().join("log.jsonl");
                append_durable_at(&p, b"a\n", Steps::SESSION).unwrap();
                let armed = arm(point, fault, Hits::nth(1), Some(dir.path()));
                let error = if background {
                    append_then_sync(&p, b"a longer record\n", Steps::SESSION).and_then(PendingSync::wait)
                } else {
                    append_durable_at(&p, b"a longer record\n", Steps::SESSION)
                }
                .unwrap_err()
                .to_string();
                let case = format!("{point:?} {fault:?} background={background}: {error}");
                assert!(error.contains("the append was undone"), "{case}");
                assert!(error.contains("last good length, 2 bytes"), "{case}");
                assert_eq!(fs::read(&p).unwrap(), b"a\n", "{case}");
                append_durable_at(&p, b"b\n", Steps::SESSION).unwrap();
                assert_eq!(fs::read(&p).unwrap(), b"a\nb\n", "{case}");
                drop(armed);
            }
        }
    }

    #[test]
    fn a_failed_first_append_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let _armed = arm(Point::SessionSync, Fault::Eio, Hits::ALWAYS, Some(dir.path()));
        let error = append_durable_at(&p, b"a\n", Steps::SESSION).unwrap_err();
        assert!(error.to_string().contains("the file it created is removed"), "{error}");
        assert!(!p.exists());
    }

    #[test]
    fn a_torn_tail_an_undo_could_not_cut_is_cut_before_the_file_is_used_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        append_durable_at(&p, b"a\n", Steps::ARCHIVE).unwrap();
        let torn = arm(Point::ArchiveWrite, Fault::Torn, Hits::nth(1), Some(dir.path()));
        let undo = arm(Point::Undo, Fault::Eio, Hits::nth(1), Some(dir.path()));
        let record = b"{\"whole\":1}\n{\"torn\":22222}\n";
        let error = append_durable_at(&p, record, Steps::ARCHIVE).unwrap_err();
        assert!(error.to_string().contains("undoing the append failed too"), "{error}");
        assert_eq!(
            fs::read(&p).unwrap(),
            b"a\n{\"whole\":1}\n{",
            "the fault left a whole line and a torn one"
        );
        // Before the next append (or a reader, see `settle`) touches the file, the whole
        // failed append leaves it, not only its last partial line.
        append_durable_at(&p, b"b\n", Steps::ARCHIVE).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"a\nb\n");
        drop((torn, undo));
    }

    #[test]
    fn a_cut_that_keeps_failing_keeps_the_file_unused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        append_durable_at(&p, b"a\n", Steps::SESSION).unwrap();
        let torn = arm(Point::SessionWrite, Fault::Torn, Hits::nth(1), Some(dir.path()));
        let undo = arm(Point::Undo, Fault::Eio, Hits::range(1, 2), Some(dir.path()));
        append_durable_at(&p, b"bbbb\n", Steps::SESSION).unwrap_err();
        let error = append_durable_at(&p, b"c\n", Steps::SESSION).unwrap_err();
        assert!(error.to_string().contains("not used until it is cut off"), "{error}");
        assert_eq!(fs::read(&p).unwrap(), b"a\nbb", "nothing written after the torn tail");
        append_durable_at(&p, b"c\n", Steps::SESSION).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"a\nc\n");
        drop((torn, undo));
    }

    #[test]
    fn a_failed_atomic_write_keeps_the_old_content_and_no_temp() {
        for (point, fault) in [Point::AtomicWrite, Point::AtomicSync]
            .into_iter()
            .flat_map(|p| FAULTS.map(|f| (p, f)))
        {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("daemon.json");
            write_atomic(&p, b"old").unwrap();
            let armed = arm(point, fault, Hits::nth(1), Some(dir.path()));
            write_atomic(&p, b"new content").unwrap_err();
            assert_eq!(fs::read(&p).unwrap(), b"old", "{point:?} {fault:?}");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "{point:?} {fault:?}");
            write_atomic(&p, b"new").unwrap();
            assert_eq!(fs::read(&p).unwrap(), b"new");
            drop(armed);
        }
    }

    #[test]
    fn files_are_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let appended = dir.path().join("log.jsonl");
        append_durable(&appended, b"a\n").unwrap();
        let replaced = dir.path().join("f.json");
        write_atomic(&replaced, b"x").unwrap();
        assert_eq!(mode(&appended), 0o600);
        assert_eq!(mode(&replaced), 0o600);
    }

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
    fn stale_temps_are_removed_where_satchel_writes_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::Layout::new(dir.path());
        let deep = layout.memory_dir().join("notes/.backups");
        for d in [
            layout.run_dir(),
            layout.keys_dir(),
            layout.offload_dir(),
            deep.clone(),
            layout.sessions_dir(),
        ] {
            fs::create_dir_all(d).unwrap();
        }
        // Temps as the writes name them.
        let temps: Vec<PathBuf> = [
            layout.candidates_file(),
            layout.root().join("MEMORY.md"),
            layout.run_dir().join("daemon.json"),
            layout.candidates_key(),
            layout.offload_dir().join("abc.txt"),
            layout.memory_dir().join("2026-11-24.md"),
            deep.join("MEMORY-1.md"),
        ]
        .iter()
        .map(|path| temp_beside(path))
        .collect();
        // Names that are not ours, a temp in a directory satchel does not write atomically
        // into, and one behind a symbolic link.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), layout.memory_dir().join("linked")).unwrap();
        let kept: Vec<PathBuf> = [
            layout.root().join("notes.tmp"),
            layout.root().join(".draft.md.tmp"),
            layout.memory_dir().join(".a.md.0123456789abcdef0123456789abcde.tmp"),
            layout.memory_dir().join(".a.md.0123456789ABCDEF0123456789ABCDEF.tmp"),
            layout.memory_dir().join("..0123456789abcdef0123456789abcdef.tmp"),
            layout.memory_dir().join("2026-11-24.md"),
            temp_beside(&layout.sessions_dir().join("s.jsonl")),
            temp_beside(&outside.path().join("x.md")),
        ]
        .into();
        for path in temps.iter().chain(&kept) {
            fs::write(path, "x").unwrap();
        }
        // A directory named like a temp is not a file of ours either.
        let temp_named_dir = temp_beside(&layout.root().join("d"));
        fs::create_dir(&temp_named_dir).unwrap();
        assert!(
            temps
                .iter()
                .all(|t| is_temp_name(t.file_name().unwrap().to_str().unwrap()))
        );

        assert_eq!(remove_stale_temps(&layout), temps.len());
        for temp in &temps {
            assert!(!temp.exists(), "{} stayed", temp.display());
        }
        for path in kept.iter().chain([&temp_named_dir]) {
            assert!(path.exists(), "{} was removed", path.display());
        }
        assert_eq!(remove_stale_temps(&layout), 0);
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
        let first = append_then_sync(&p, b"a\n", Steps::OTHER).unwrap();
        append_durable(&p, b"b\n").unwrap();
        let third = append_then_sync(&p, b"c\n", Steps::OTHER).unwrap();
        first.wait().unwrap();
        third.wait().unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nc\n");
    }

    #[test]
    fn a_failed_append_is_reported_before_any_sync() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir").join("log.jsonl");
        let error = append_then_sync(&missing, b"a\n", Steps::OTHER).unwrap_err();
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
