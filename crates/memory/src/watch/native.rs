//! notify, through notify-debouncer-mini, and the watch set: each existing root directory
//! recursively; a root file, or a root that does not exist yet, through its nearest existing
//! parent directory (non-recursively), re-planned whenever something may have appeared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventHandler, EventKind, RecommendedWatcher, RecursiveMode, Watcher, WatcherKind};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer_opt};

use super::Msg;
use super::scan::Roots;

/// Bound on re-planning rounds in one [`NativeWatches::sync`]: each round can only move a
/// watch one directory level down, and memory roots are a few levels below an existing parent.
const MAX_SYNC_ROUNDS: usize = 8;

/// The notify side of a watcher, owned by its worker thread.
pub(super) struct NativeWatches {
    /// The OS watcher and the debouncer thread; dropping it stops both.
    debouncer: Debouncer<ChangeWatcher>,
    /// What is watched now, and how: diffed against each new plan, because a missing root is
    /// watched through a parent and the watch must move when the root appears or disappears.
    watched: BTreeMap<PathBuf, RecursiveMode>,
}

impl NativeWatches {
    /// Starts notify with a `debounce` window, sending each batch (or error) to the worker.
    pub(super) fn start(roots: &Roots, debounce: Duration, worker: Sender<Msg>) -> notify::Result<NativeWatches> {
        let config = notify_debouncer_mini::Config::default().with_timeout(debounce);
        let debouncer = new_debouncer_opt::<_, ChangeWatcher>(config, move |result: DebounceEventResult| {
            let msg = match result {
                Ok(events) => Msg::Paths(events.into_iter().map(|event| event.path).collect()),
                Err(error) => Msg::NotifyError(error.to_string()),
            };
            // An error means the worker has stopped; it drops this debouncer next.
            let _ = worker.send(msg);
        })?;
        let mut watches = NativeWatches {
            debouncer,
            watched: BTreeMap::new(),
        };
        // Nothing has been reported yet, so directories watched now are no news.
        watches.sync(roots)?;
        Ok(watches)
    }

    /// Brings the watch set in line with the file system. Returns the root directories that
    /// became watched in this call: their files may predate the watch, so the caller reports
    /// them. An error (watch limit, permissions) means notify cannot be trusted any more.
    pub(super) fn sync(&mut self, roots: &Roots) -> notify::Result<Vec<PathBuf>> {
        let mut appeared = Vec::new();
        // A plan can go stale while it is applied (`mkdir -p` creating the next level between
        // a stat and the watch), so re-plan until it holds.
        for _ in 0..MAX_SYNC_ROUNDS {
            let plan = plan_watches(roots);
            if plan == self.watched {
                break;
            }
            let watcher = self.debouncer.watcher();
            self.watched.retain(|path, mode| {
                let keep = plan.get(path) == Some(mode);
                if !keep {
                    // Fails when the OS already dropped the watch with its directory: fine.
                    let _ = watcher.unwatch(path);
                }
                keep
            });
            for (path, mode) in plan {
                if self.watched.contains_key(&path) {
                    continue;
                }
                match watcher.watch(&path, mode) {
                    Ok(()) => {
                        if mode == RecursiveMode::Recursive && roots.is_root(&path) {
                            appeared.push(path.clone());
                        }
                        self.watched.insert(path, mode);
                    }
                    // Gone since the plan was made: the next round plans without it.
                    Err(error) if is_not_found(&error) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(appeared)
    }
}

/// The watches the roots need now: each existing root directory recursively, and for any other
/// root its nearest existing ancestor directory, non-recursively (events there are filtered to
/// the root). Paths already inside a recursive watch are left out.
fn plan_watches(roots: &Roots) -> BTreeMap<PathBuf, RecursiveMode> {
    let mut plan = BTreeMap::new();
    for root in roots.paths() {
        if root.is_dir() {
            plan.insert(root.clone(), RecursiveMode::Recursive);
        } else if let Some(parent) = root.ancestors().skip(1).find(|ancestor| ancestor.is_dir()) {
            plan.entry(parent.to_path_buf()).or_insert(RecursiveMode::NonRecursive);
        }
    }
    let recursive: Vec<PathBuf> = plan
        .iter()
        .filter(|(_, mode)| **mode == RecursiveMode::Recursive)
        .map(|(path, _)| path.clone())
        .collect();
    plan.retain(|path, _| !recursive.iter().any(|outer| path != outer && path.starts_with(outer)));
    plan
}

/// notify names a path that vanished under it either way, depending on the moment.
fn is_not_found(error: &notify::Error) -> bool {
    match &error.kind {
        notify::ErrorKind::PathNotFound => true,
        notify::ErrorKind::Io(io) => io.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// The recommended watcher minus the events that are not changes. notify reports opens too, and
/// the debouncer turns every event into "this path changed": the index reading a file it was
/// told about would be told again one window later, forever.
struct ChangeWatcher(RecommendedWatcher);

impl Watcher for ChangeWatcher {
    fn new<F: EventHandler>(mut handler: F, config: notify::Config) -> notify::Result<Self> {
        let filter = move |event: notify::Result<Event>| match event {
            // The kernel's queue overflowed: events were lost, and the debouncer would drop this
            // path-less one. As an error it reaches the worker, which rescans.
            Ok(event) if event.need_rescan() => {
                handler.handle_event(Err(notify::Error::generic("event queue overflowed, events were lost")))
            }
            Ok(event) if is_change(&event.kind) => handler.handle_event(Ok(event)),
            Ok(_) => {}
            Err(error) => handler.handle_event(Err(error)),
        };
        RecommendedWatcher::new(filter, config).map(ChangeWatcher)
    }

    fn watch(&mut self, path: &Path, recursive_mode: RecursiveMode) -> notify::Result<()> {
        self.0.watch(path, recursive_mode)
    }

    fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
        self.0.unwatch(path)
    }

    fn kind() -> WatcherKind {
        RecommendedWatcher::kind()
    }
}

/// Everything but reads and opens: closing a file written to still ends a save.
fn is_change(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::Access(access) if *access != AccessKind::Close(AccessMode::Write))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use notify::event::{CreateKind, ModifyKind};

    use super::*;

    #[test]
    fn plan_watches_existing_dirs_recursively_and_missing_roots_through_a_parent() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        fs::create_dir_all(ws.join("memory/sub")).unwrap();
        let roots = Roots::new(vec![
            ws.join("MEMORY.md"),
            ws.join("memory"),
            ws.join("memory/sub"),
            ws.join("later/deeper/notes"),
        ]);
        let plan = plan_watches(&roots);
        let expected = BTreeMap::from([
            (ws.to_path_buf(), RecursiveMode::NonRecursive),
            (ws.join("memory"), RecursiveMode::Recursive),
        ]);
        assert_eq!(
            plan, expected,
            "memory/sub is inside memory's watch; later/ does not exist"
        );

        let roots = Roots::new(vec![ws.to_path_buf(), ws.join("MEMORY.md")]);
        assert_eq!(
            plan_watches(&roots),
            BTreeMap::from([(ws.to_path_buf(), RecursiveMode::Recursive)])
        );
    }

    #[test]
    fn opens_and_reads_are_not_changes() {
        assert!(!is_change(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(!is_change(&EventKind::Access(AccessKind::Read)));
        assert!(is_change(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
        assert!(is_change(&EventKind::Remove(notify::event::RemoveKind::File)));
    }
}
