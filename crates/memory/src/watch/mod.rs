//! Watches the memory files (`MEMORY.md`, `memory/**/*.md`, configured extra paths) and reports
//! which ones changed, so that an edit made by the agent's own file tools is re-indexed and
//! searchable within a second.
//!
//! # Design
//!
//! One worker thread per [`MemoryWatcher`] owns everything: the notify watcher, the poller's view
//! of the files and the callback. Every source — notify (through notify-debouncer-mini), the poll
//! timer, [`SyntheticEvents`] — feeds the same channel and the same filter, so a test driving the
//! synthetic source runs the code path real events take.
//!
//! - `Msg` (here): what every source sends the worker, down one channel.
//! - `worker`: the thread, the batch filter and the poller.
//! - `native`: notify and the watch set, which follows roots as they appear and disappear.
//! - `scan`: which paths are memory files, fingerprints, directory walks.
//!
//! A report is a hint, not a fact: the index re-stats every reported path (missing means
//! deleted), so a duplicate report costs one stat and an unchanged hash. Reports keep the index
//! fresh; they are never needed for its correctness after a full sync.

mod native;
mod scan;
mod worker;

use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;

use self::worker::{Source, WorkerHandle};

/// 200 ms: long enough to fold the events of one save (truncate, write, close, sometimes a
/// rename) into one report, short enough that an edit is searchable well within a second.
const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// 500 ms: statting a handful of memory files twice a second costs nothing, and it keeps the
/// latency under a second where notify sees nothing (network file systems, exhausted inotify
/// watches).
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// What reaches the worker.
enum Msg {
    /// Paths that changed, from a notify batch or a synthetic send; not yet filtered.
    Paths(Vec<PathBuf>),
    /// notify failed while running (events lost, watch limit reached in a new directory).
    NotifyError(String),
    /// Acknowledge once everything before has been handled (`SyntheticEvents::flush`).
    Flush(Sender<()>),
    /// Stop: the watcher is being dropped.
    Shutdown,
}

/// The callback, as the worker thread keeps it.
type OnChange = Box<dyn Fn(Vec<PathBuf>) + Send + Sync>;

/// How a [`MemoryWatcher`] started with [`MemoryWatcher::start`] watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    /// How long a path must stay quiet before it is reported (notify's debounce window).
    pub debounce: Duration,
    /// How often the poller stats the memory files, alongside notify; `None` turns polling off.
    /// Polling is switched on anyway when notify fails.
    pub poll_interval: Option<Duration>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            debounce: DEFAULT_DEBOUNCE,
            poll_interval: Some(DEFAULT_POLL_INTERVAL),
        }
    }
}

/// Where a watcher's events come from, as `memory.status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WatchBackend {
    /// File-system notifications only.
    #[serde(rename = "notify")]
    Notify,
    /// Polling only: notify was not wanted or could not start.
    #[serde(rename = "poll")]
    Poll,
    /// File-system notifications with polling as a safety net (the default).
    #[serde(rename = "notify+poll")]
    NotifyAndPoll,
    /// Events sent by a test through [`SyntheticEvents`].
    #[serde(rename = "synthetic")]
    Synthetic,
    /// Nothing is watched.
    #[serde(rename = "off")]
    Off,
}

/// What a watcher is doing, for `memory.status` and inspect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatcherState {
    /// Where events come from; changes from `notify+poll` to `poll` if notify fails later.
    pub backend: WatchBackend,
    /// The watched roots, absolute, without duplicates.
    pub roots: Vec<PathBuf>,
    /// How many times `on_change` was called.
    pub batches: u64,
    /// How many paths those calls carried in total.
    pub paths_reported: u64,
    /// When `on_change` was last called, in milliseconds since the Unix epoch.
    pub last_event_unix_ms: Option<u64>,
    /// The last thing that went wrong (notify could not start, events lost, a callback panicked).
    pub last_error: Option<String>,
}

/// Watches the memory files and calls back with the ones that changed.
///
/// Dropping it stops its thread: it returns once a running `on_change` call has returned, and
/// no call starts afterwards.
pub struct MemoryWatcher {
    /// Written by the worker after each batch and on errors; [`MemoryWatcher::state`] copies it.
    /// A mutex rather than atomics because inspect wants one consistent snapshot.
    state: Arc<Mutex<WatcherState>>,
    /// The worker thread, stopped and joined on drop. `None` when nothing runs (`noop`, or the
    /// thread could not be spawned).
    worker: Option<WorkerHandle>,
}

impl MemoryWatcher {
    /// Watches `roots` — absolute paths of files or directories, which need not exist yet (a
    /// `MEMORY.md` or a `memory/` created later is picked up) — and calls `on_change` with the
    /// deduplicated paths that changed: created, modified, deleted, renamed from and renamed to.
    ///
    /// Only `.md` files (any case) below a root directory count, plus the root files themselves;
    /// editor lock and backup files do not. A directory that appears under a root reports the
    /// memory files already in it; one that disappears reports the files it held.
    ///
    /// `on_change` runs on the watcher's own thread, one batch per debounce window (and per poll
    /// that found something). Keep it short — hand the paths to the indexer — because dropping
    /// the watcher waits for a running call.
    ///
    /// If notify cannot start (no inotify instance left, watch limit reached), the watcher polls
    /// instead and says why in [`WatcherState::last_error`].
    pub fn start(
        roots: Vec<PathBuf>,
        options: WatchOptions,
        on_change: impl Fn(Vec<PathBuf>) + Send + Sync + 'static,
    ) -> MemoryWatcher {
        let source = Source::Notify {
            debounce: options.debounce,
            poll_interval: options.poll_interval,
        };
        worker::launch(roots, source, Box::new(on_change)).0
    }

    /// Like [`MemoryWatcher::start`], without notify: the files under `roots` are statted every
    /// `poll_interval`. For file systems that deliver no events, and for tests of the poller.
    pub fn start_polling_only(
        roots: Vec<PathBuf>,
        poll_interval: Duration,
        on_change: impl Fn(Vec<PathBuf>) + Send + Sync + 'static,
    ) -> MemoryWatcher {
        worker::launch(roots, Source::Poll(poll_interval), Box::new(on_change)).0
    }

    /// A watcher that never reports anything (memory disabled, or watching turned off).
    pub fn noop() -> MemoryWatcher {
        let state = WatcherState {
            backend: WatchBackend::Off,
            roots: Vec::new(),
            batches: 0,
            paths_reported: 0,
            last_event_unix_ms: None,
            last_error: None,
        };
        MemoryWatcher {
            state: Arc::new(Mutex::new(state)),
            worker: None,
        }
    }

    /// A watcher whose events come from the returned [`SyntheticEvents`] instead of the file
    /// system. `on_change` runs exactly as for real events — same filter, same thread — and
    /// [`SyntheticEvents::flush`] makes tests deterministic without sleeping.
    pub fn synthetic(
        roots: Vec<PathBuf>,
        on_change: impl Fn(Vec<PathBuf>) + Send + Sync + 'static,
    ) -> (MemoryWatcher, SyntheticEvents) {
        let (watcher, events) = worker::launch(roots, Source::Synthetic, Box::new(on_change));
        (watcher, SyntheticEvents { events })
    }

    /// A snapshot of what the watcher is doing.
    pub fn state(&self) -> WatcherState {
        lock_state(&self.state).clone()
    }
}

impl Drop for MemoryWatcher {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop();
        }
    }
}

/// The event source of a [`MemoryWatcher::synthetic`] watcher.
pub struct SyntheticEvents {
    /// The worker's channel, shared with the watcher; sends fail silently once it is dropped.
    events: Sender<Msg>,
}

impl SyntheticEvents {
    /// Reports `paths` as changed, as one notify batch would.
    pub fn send(&self, paths: Vec<PathBuf>) {
        // An error means the watcher is gone, and a gone watcher reports nothing.
        let _ = self.events.send(Msg::Paths(paths));
    }

    /// Returns once `on_change` has run for everything sent before (or the watcher is gone).
    pub fn flush(&self) {
        let (ack, done) = mpsc::channel();
        if self.events.send(Msg::Flush(ack)).is_ok() {
            // Err: the worker stopped and dropped the acknowledgement unsent.
            let _ = done.recv();
        }
    }
}

/// Locks the shared state; a panic elsewhere cannot leave it half-written (every update is a
/// few plain assignments), so a poisoned lock is still good to read.
fn lock_state(state: &Mutex<WatcherState>) -> MutexGuard<'_, WatcherState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
