//! The memory index catching up with the files after a failed update.
//!
//! The files are the truth and the index is derived, so a write whose file change is durable
//! succeeds even when the index cannot take it (its SQLite file locked by another process, a
//! full disk): the reply warns that the index is behind, and the paths wait here to be synced
//! again in the background, with a growing pause, until the index takes them. A failed
//! start-up or watcher sync waits here the same way. An index that SQLite finds damaged is
//! moved aside and made anew at once, and all the memory files wait here for it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use satchel_memory::MemoryError;
use satchel_memory::index::MemoryIndex;

/// The first retry's pause: a lock held by another process for a moment is past by then.
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest pause between retries: a full disk may take a while to clear, and a retry that
/// fails waits out SQLite's busy timeout, so retrying more often would only keep a thread busy.
const LAST_RETRY: Duration = Duration::from_secs(30);

/// The paths the index has not taken yet, and the thread retrying them.
pub(super) struct CatchUp {
    index: Arc<MemoryIndex>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Paths (workspace-relative, or the absolute watch roots) to sync again.
    pending: BTreeSet<PathBuf>,
    /// Whether the retry thread runs; it ends when nothing is pending.
    running: bool,
}

impl CatchUp {
    pub fn new(index: Arc<MemoryIndex>) -> Arc<CatchUp> {
        Arc::new(CatchUp {
            index,
            state: Mutex::default(),
        })
    }

    /// After `error` syncing `paths`: rebuilds a damaged index (then every memory file waits),
    /// and queues `paths` for the retries. Returns the rebuild's warnings.
    pub fn failed(self: &Arc<Self>, paths: Vec<PathBuf>, error: &MemoryError) -> Vec<String> {
        let rebuilt = self.rebuild_if_damaged(error);
        self.add(paths);
        rebuilt
    }

    /// Rebuilds the index if `error` says it is damaged, queueing every memory file; returns
    /// the warnings (none when it was not damaged).
    pub fn rebuild_if_damaged(self: &Arc<Self>, error: &MemoryError) -> Vec<String> {
        if !error.is_damage() {
            return Vec::new();
        }
        match self.index.rebuild(&error.to_string()) {
            Ok(mut warnings) => {
                warnings.push(
                    "the memory index is being rebuilt from the memory files in the background; searches find less until it is done"
                        .to_owned(),
                );
                self.add(self.index.watch_roots());
                warnings
            }
            Err(e) => {
                tracing::error!("memory index: damaged ({error}), and rebuilding it failed: {e}");
                vec![format!("the memory index is damaged and could not be rebuilt ({e})")]
            }
        }
    }

    /// Queues `paths` for the retries, starting the thread if it is not running.
    pub fn add(self: &Arc<Self>, paths: impl IntoIterator<Item = PathBuf>) {
        let mut state = self.state();
        state.pending.extend(paths);
        if state.running || state.pending.is_empty() {
            return;
        }
        let retrying = self.clone();
        match std::thread::Builder::new()
            .name("memory-catch-up".into())
            .spawn(move || retrying.run())
        {
            Ok(_) => state.running = true,
            // The next failed update tries again; a restart's sync catches up in any case.
            Err(e) => tracing::warn!("memory index: the catch-up thread did not start: {e}"),
        }
    }

    /// Syncs the pending paths until none is left, pausing longer after each failure.
    fn run(self: Arc<Self>) {
        let mut pause = FIRST_RETRY;
        loop {
            std::thread::sleep(pause);
            let paths: Vec<PathBuf> = {
                let mut state = self.state();
                if state.pending.is_empty() {
                    state.running = false;
                    return;
                }
                std::mem::take(&mut state.pending).into_iter().collect()
            };
            match self.index.sync_paths(&paths) {
                Ok(report) => {
                    for warning in report.warnings {
                        tracing::warn!("memory index: {warning}");
                    }
                    tracing::info!(files = paths.len(), "memory index caught up with the files");
                    pause = FIRST_RETRY;
                }
                Err(e) => {
                    self.rebuild_if_damaged(&e);
                    pause = (pause * 2).min(LAST_RETRY);
                    tracing::warn!(
                        "memory index: still behind the files ({e}); retrying in {} s",
                        pause.as_secs_f64()
                    );
                    self.state().pending.extend(paths);
                }
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
