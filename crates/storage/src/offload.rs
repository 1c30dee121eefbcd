//! Offloaded tool results: content-addressed text files with a reference-aware TTL sweep.

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use xxhash_rust::xxh3::xxh3_128;

use crate::durable::{sync_checked, write_checked};
use crate::error::{StorageError, io};
use crate::failpoints::Point;
use crate::layout::Layout;
use crate::perms::{make_private, private_options};
use crate::workspace::Workspace;

/// How many new files one save makes durable with a single `syncfs` rather than one fsync each.
pub const SYNCFS_FROM_FILES: usize = 8;

/// Where a text was saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedText {
    /// Workspace-relative path, as shown to the agent (`tool_result/<uuid>.txt`).
    pub rel_path: String,
    /// False when identical content was already stored.
    pub newly_written: bool,
}

/// Where a batch of texts goes: see [`OffloadStore::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavePlan {
    /// Per text, in order: its file and whether this save writes it.
    pub saved: Vec<SavedText>,
    /// The texts to write (position in the batch) and their file names.
    writes: Vec<(usize, String)>,
}

impl SavePlan {
    /// Whether every text is already stored (or there are none): nothing to write.
    pub fn writes_nothing(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The file name of a text: a 128-bit hash of its content.
fn file_name_of(text: &str) -> String {
    format!("{}.txt", uuid::Uuid::from_u128(xxh3_128(text.as_bytes())).simple())
}

/// What a sweep removed and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Expired files deleted.
    pub removed: usize,
    /// Expired files kept because a session refers to them.
    pub kept_referenced: usize,
}

/// The `tool_result/` directory.
#[derive(Debug, Clone)]
pub struct OffloadStore {
    dir: PathBuf,
    /// The workspace root as text, for the absolute paths notices show.
    root: String,
}

impl OffloadStore {
    /// The offload store of a workspace.
    pub fn new(workspace: &Workspace) -> Self {
        OffloadStore {
            dir: workspace.layout().offload_dir(),
            root: workspace.root().to_string_lossy().into_owned(),
        }
    }

    /// The absolute workspace root, as text: what a notice joins with a file's
    /// workspace-relative path to give the agent an absolute one.
    pub fn workspace_root(&self) -> &str {
        &self.root
    }

    /// Saves a full text and returns its path; see [`OffloadStore::save_all`].
    pub fn save(&self, text: &str) -> Result<SavedText, StorageError> {
        let mut saved = self.save_all(&[text])?;
        Ok(saved.remove(0))
    }

    /// Saves full texts and returns their paths, in order, once all of them are durable:
    /// [`OffloadStore::plan`] then [`OffloadStore::write`].
    pub fn save_all(&self, texts: &[&str]) -> Result<Vec<SavedText>, StorageError> {
        let plan = self.plan(texts);
        self.write(&plan, texts)?;
        Ok(plan.saved)
    }

    /// Where each text goes, decided without writing anything, so that a caller can refer to
    /// the files while [`OffloadStore::write`] makes them durable on another thread.
    ///
    /// A file is named by a 128-bit hash of its content, so the same output offloaded twice
    /// (or by two sessions) is one file. An existing file gets its mtime refreshed here, so
    /// the retention clock restarts for content that is in use again.
    pub fn plan(&self, texts: &[&str]) -> SavePlan {
        let mut plan = SavePlan {
            saved: Vec::with_capacity(texts.len()),
            writes: Vec::new(),
        };
        let mut planned_names = HashSet::new();
        for (position, text) in texts.iter().enumerate() {
            let name = file_name_of(text);
            let path = self.dir.join(&name);
            let exists =
                planned_names.contains(&name) || fs::metadata(&path).is_ok_and(|meta| meta.len() == text.len() as u64);
            if exists {
                let _ = fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
            } else {
                planned_names.insert(name.clone());
                plan.writes.push((position, name.clone()));
            }
            plan.saved.push(SavedText {
                rel_path: Layout::offload_rel(&name),
                newly_written: !exists,
            });
        }
        plan
    }

    /// Writes the texts `plan` found missing and returns once they are durable.
    ///
    /// Every new text goes to a temporary file (0600) that is made durable, renamed into place, and
    /// one fsync of the directory makes the names durable: a file under its final name is
    /// always complete. A first call carrying a long history can offload hundreds of results,
    /// and an fsync per file would cost a journal commit each (seconds in all), so past
    /// `SYNCFS_FROM_FILES` files one `syncfs` makes all of them durable at once; below it,
    /// each file is fsynced, because `syncfs` also waits for whatever else the file system has
    /// not yet written.
    pub fn write(&self, plan: &SavePlan, texts: &[&str]) -> Result<(), StorageError> {
        if plan.writes.is_empty() {
            return Ok(());
        }
        let mut staged: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(plan.writes.len());
        let result = (|| {
            for (position, name) in &plan.writes {
                let tmp = self.dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
                staged.push((tmp.clone(), self.dir.join(name)));
                let mut file = private_options()
                    .write(true)
                    .create_new(true)
                    .open(&tmp)
                    .map_err(io("create", &tmp))?;
                make_private(&file, &tmp)?;
                write_checked(&mut file, texts[*position].as_bytes(), Some(Point::OffloadWrite), &tmp)
                    .map_err(io("write", &tmp))?;
            }
            let dir = fs::File::open(&self.dir).map_err(io("open", &self.dir))?;
            if staged.len() >= SYNCFS_FROM_FILES {
                sync_checked(Some(Point::OffloadSync), &self.dir, || {
                    rustix::fs::syncfs(&dir).map_err(Into::into)
                })
                .map_err(io("syncfs", &self.dir))?;
            } else {
                for (tmp, _) in &staged {
                    sync_checked(Some(Point::OffloadSync), tmp, || {
                        fs::File::open(tmp).and_then(|f| f.sync_all())
                    })
                    .map_err(io("fsync", tmp))?;
                }
            }
            for (tmp, path) in &staged {
                fs::rename(tmp, path).map_err(io("rename", path))?;
            }
            dir.sync_all().map_err(io("fsync dir", &self.dir))
        })();
        if result.is_err() {
            for (tmp, _) in &staged {
                let _ = fs::remove_file(tmp);
            }
        }
        result
    }

    /// Reads a stored text back by its workspace-relative path.
    pub fn load(&self, rel_path: &str) -> Result<String, StorageError> {
        let name = Layout::offload_name(rel_path).unwrap_or(rel_path);
        let path = self.dir.join(name);
        fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StorageError::NotFound(rel_path.to_owned()),
            _ => StorageError::Io {
                op: "read",
                path: path.clone(),
                source: e,
            },
        })
    }

    /// Removes files last written more than `retention` before `now`, except those in
    /// `referenced` (workspace-relative paths still quoted by a session), and temporary files
    /// as old that a crash left in the middle of a write. `now` is injected so tests need no
    /// sleeping.
    pub fn sweep(
        &self,
        now: SystemTime,
        retention: Duration,
        referenced: &HashSet<String>,
    ) -> Result<SweepReport, StorageError> {
        let mut report = SweepReport::default();
        let cutoff = now.checked_sub(retention).unwrap_or(SystemTime::UNIX_EPOCH);
        for entry in fs::read_dir(&self.dir).map_err(io("read dir", &self.dir))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name().to_string_lossy().into_owned();
            // A temporary file a crash left behind mid-write (its text was never referenced).
            let stale_temp = name.starts_with('.') && name.ends_with(".tmp");
            if !name.ends_with(".txt") && !stale_temp {
                continue;
            }
            let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            if modified >= cutoff {
                continue;
            }
            if stale_temp {
                let _ = fs::remove_file(entry.path());
            } else if referenced.contains(&Layout::offload_rel(&name)) {
                report.kept_referenced += 1;
            } else if fs::remove_file(entry.path()).is_ok() {
                report.removed += 1;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::failpoints::{Fault, Hits, arm};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_failed_offload_write_leaves_no_file_and_a_retry_writes_it() {
        for point in [Point::OffloadWrite, Point::OffloadSync] {
            for fault in [Fault::Enospc, Fault::Eio, Fault::Torn] {
                for batch in [1, SYNCFS_FROM_FILES] {
                    let case = format!("{point:?} {fault:?} {batch} files");
                    let dir = tempfile::tempdir().unwrap();
                    let ws = Workspace::open(dir.path()).unwrap();
                    let store = OffloadStore::new(&ws);
                    let texts: Vec<String> = (0..batch).map(|i| format!("output {i}\n").repeat(100)).collect();
                    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                    let armed = arm(point, fault, Hits::nth(1), Some(ws.root()));
                    store.save_all(&texts).unwrap_err();
                    assert_eq!(
                        fs::read_dir(ws.root().join("tool_result")).unwrap().count(),
                        0,
                        "{case}: no file, no temporary file"
                    );
                    let saved = store.save_all(&texts).unwrap();
                    for (text, saved) in texts.iter().zip(&saved) {
                        assert_eq!(store.load(&saved.rel_path).unwrap(), *text, "{case}");
                        let meta = fs::metadata(ws.root().join(&saved.rel_path)).unwrap();
                        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{case}");
                    }
                    drop(armed);
                }
            }
        }
    }

    #[test]
    fn a_sweep_removes_the_temporary_file_a_crash_left() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let store = OffloadStore::new(&ws);
        let temp = ws.root().join("tool_result/.abc.txt.0123.tmp");
        fs::write(&temp, "half a text").unwrap();
        let day = Duration::from_secs(86_400);
        store.sweep(SystemTime::now(), day, &HashSet::new()).unwrap();
        assert!(temp.exists(), "not while it may be a write in progress");
        store.sweep(SystemTime::now() + 2 * day, day, &HashSet::new()).unwrap();
        assert!(!temp.exists());
    }

    #[test]
    fn identical_content_is_stored_once_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffloadStore::new(&Workspace::open(dir.path()).unwrap());
        let a = store.save("héllo\nworld").unwrap();
        let b = store.save("héllo\nworld").unwrap();
        assert!(a.newly_written && !b.newly_written);
        assert_eq!(a.rel_path, b.rel_path);
        assert_ne!(store.save("other").unwrap().rel_path, a.rel_path);
        assert_eq!(store.load(&a.rel_path).unwrap(), "héllo\nworld");
    }

    #[test]
    fn sweep_removes_only_expired_unreferenced_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffloadStore::new(&Workspace::open(dir.path()).unwrap());
        let kept = store.save("referenced").unwrap().rel_path;
        let gone = store.save("unreferenced").unwrap().rel_path;
        let day = Duration::from_secs(86_400);
        let referenced = HashSet::from([kept.clone()]);

        let fresh = store.sweep(SystemTime::now(), 5 * day, &referenced).unwrap();
        assert_eq!(fresh, SweepReport::default());

        let later = SystemTime::now() + 6 * day;
        let report = store.sweep(later, 5 * day, &referenced).unwrap();
        assert_eq!(
            report,
            SweepReport {
                removed: 1,
                kept_referenced: 1
            }
        );
        assert!(store.load(&kept).is_ok());
        assert!(matches!(store.load(&gone), Err(StorageError::NotFound(_))));
    }
}
