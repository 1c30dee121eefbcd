//! The watcher's thread: it owns notify, the poller and the callback, takes every event from one
//! channel ([`Msg`]), turns the paths into memory files and calls back, one batch at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::native::NativeWatches;
use super::scan::{Fingerprint, Roots, is_memory_file_name, scan_dir};
use super::{DEFAULT_POLL_INTERVAL, MemoryWatcher, Msg, OnChange, WatchBackend, WatcherState, lock_state};

/// How late notify's report may land after its debounce window (a busy machine delays the
/// debouncer thread) before the poller reports a change it found itself.
const NOTIFY_GRACE: Duration = Duration::from_millis(100);

/// Where a new watcher's events come from.
pub(super) enum Source {
    /// notify, with polling alongside every `poll_interval` (if any).
    Notify {
        debounce: Duration,
        poll_interval: Option<Duration>,
    },
    /// Polling alone.
    Poll(Duration),
    /// [`super::SyntheticEvents`] alone.
    Synthetic,
}

/// Starts a watcher's worker. Also returns the worker's channel, for a synthetic source.
pub(super) fn launch(roots: Vec<PathBuf>, source: Source, on_change: OnChange) -> (MemoryWatcher, Sender<Msg>) {
    let roots = Roots::new(roots);
    let (sender, receiver) = mpsc::channel();
    let mut last_error = None;
    let mut hold = Duration::ZERO;
    let (native, poll_interval) = match source {
        Source::Synthetic => (None, None),
        Source::Poll(interval) => (None, Some(interval)),
        Source::Notify {
            debounce,
            poll_interval,
        } => match NativeWatches::start(&roots, debounce, sender.clone()) {
            Ok(native) => {
                hold = debounce + NOTIFY_GRACE;
                (Some(native), poll_interval)
            }
            Err(error) => {
                tracing::warn!(%error, "memory watcher: notify unavailable, polling instead");
                last_error = Some(format!("notify: {error}; polling instead"));
                (None, Some(poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL)))
            }
        },
    };
    let state = Arc::new(Mutex::new(WatcherState {
        backend: backend(native.is_some(), poll_interval.is_some()),
        roots: roots.paths().to_vec(),
        batches: 0,
        paths_reported: 0,
        last_event_unix_ms: None,
        last_error,
    }));
    let stopping = Arc::new(AtomicBool::new(false));
    // The baseline is taken after the watches exist: a file written in between is then both
    // in the baseline and reported by notify, rather than in neither.
    let known = roots.scan();
    let worker = Worker {
        roots,
        known,
        native,
        poll_interval,
        next_poll: poll_interval.map(|interval| Instant::now() + interval),
        held: BTreeMap::new(),
        hold,
        state: Arc::clone(&state),
        stopping: Arc::clone(&stopping),
        on_change,
        receiver,
    };
    let handle = match thread::Builder::new()
        .name("memory-watch".into())
        .spawn(move || worker.run())
    {
        Ok(thread) => Some(WorkerHandle {
            sender: sender.clone(),
            stopping,
            thread,
        }),
        Err(error) => {
            tracing::warn!(%error, "memory watcher: cannot start its thread");
            let mut state = lock_state(&state);
            state.backend = WatchBackend::Off;
            state.last_error = Some(format!("cannot start the watcher thread: {error}"));
            None
        }
    };
    (MemoryWatcher { state, worker: handle }, sender)
}

/// The backend name for what runs; neither notify nor a poll timer means a synthetic source
/// (notify failing switches polling on).
fn backend(native: bool, polling: bool) -> WatchBackend {
    match (native, polling) {
        (true, true) => WatchBackend::NotifyAndPoll,
        (true, false) => WatchBackend::Notify,
        (false, true) => WatchBackend::Poll,
        (false, false) => WatchBackend::Synthetic,
    }
}

/// The watcher's hold on its worker thread.
pub(super) struct WorkerHandle {
    /// To send `Shutdown`, which wakes the worker wherever it waits.
    sender: Sender<Msg>,
    /// Set before `Shutdown` is sent, so the worker skips whatever is still queued.
    stopping: Arc<AtomicBool>,
    /// Joined on stop, so no callback can run once the watcher is dropped.
    thread: JoinHandle<()>,
}

impl WorkerHandle {
    /// Stops the worker and waits for it, unless called from the worker itself (a callback that
    /// drops its own watcher), which would wait forever.
    pub(super) fn stop(self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.sender.send(Msg::Shutdown);
        if self.thread.thread().id() != thread::current().id() {
            // Err: a callback panicked through; the thread is over either way.
            let _ = self.thread.join();
        }
    }
}

/// The worker thread's state.
struct Worker {
    /// What to watch; fixed for the watcher's life (other paths need another watcher).
    roots: Roots,
    /// The memory files as last seen, with their fingerprints: the baseline scan, then updated
    /// for every reported path and on every poll. The poller reports differences from it (so a
    /// change notify already reported is not reported again), and a directory that vanishes is
    /// reported as the files it held.
    known: BTreeMap<PathBuf, Fingerprint>,
    /// notify, while it works. Dropped for good when a watch cannot be added; polling takes over.
    native: Option<NativeWatches>,
    /// `None`: no polling. Set when notify fails, even if polling was not asked for.
    poll_interval: Option<Duration>,
    /// When the poller runs next; `None` with no polling.
    next_poll: Option<Instant>,
    /// Changes the poller found while notify runs, each until when it is held back. notify
    /// normally reports them within its window (and they leave this map), so one edit is not
    /// reported twice; if notify stays silent (a network file system), they are reported when
    /// the hold ends.
    held: BTreeMap<PathBuf, Instant>,
    /// How long the poller's findings are held while notify runs: its window plus a grace.
    hold: Duration,
    /// Shared with [`MemoryWatcher::state`].
    state: Arc<Mutex<WatcherState>>,
    /// Set by [`WorkerHandle::stop`]; checked before every callback.
    stopping: Arc<AtomicBool>,
    /// Called with each batch, only from this thread.
    on_change: OnChange,
    /// Every event source ends here (notify's debouncer thread, `SyntheticEvents`, the handle).
    receiver: Receiver<Msg>,
}

impl Worker {
    fn run(mut self) {
        while !self.stopping.load(Ordering::Acquire) {
            // Timers first, so that a steady stream of events cannot starve the poller.
            let now = Instant::now();
            if self.next_poll.is_some_and(|at| at <= now) {
                self.poll();
                continue;
            }
            if self.held.values().any(|until| *until <= now) {
                self.release_held(now);
                continue;
            }
            let wake = self.held.values().copied().chain(self.next_poll).min();
            let msg = match wake {
                Some(at) => match self.receiver.recv_timeout(at.saturating_duration_since(now)) {
                    Ok(msg) => msg,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.receiver.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                },
            };
            match msg {
                Msg::Paths(paths) => self.on_paths(paths),
                Msg::NotifyError(error) => self.on_notify_error(&error),
                Msg::Flush(ack) => {
                    let _ = ack.send(());
                }
                Msg::Shutdown => break,
            }
        }
    }

    fn on_paths(&mut self, paths: Vec<PathBuf>) {
        let mut changed = BTreeSet::new();
        self.sync_watches(&mut changed);
        for path in paths {
            self.expand(path, &mut changed);
        }
        self.deliver(changed);
    }

    fn poll(&mut self) {
        self.rescan(self.native.is_some());
        self.next_poll = self.poll_interval.map(|interval| Instant::now() + interval);
    }

    /// Finds every difference between the files now and the known ones, and reports it — or,
    /// with `defer_to_notify`, holds it back for notify to report first.
    fn rescan(&mut self, defer_to_notify: bool) {
        let mut changed = BTreeSet::new();
        // Also repairs the watch set if notify missed a root appearing.
        self.sync_watches(&mut changed);
        let now = self.roots.scan();
        let mut found: BTreeSet<PathBuf> = now
            .iter()
            .filter(|(path, print)| self.known.get(*path) != Some(print))
            .map(|(path, _)| path.clone())
            .collect();
        found.extend(self.known.keys().filter(|path| !now.contains_key(*path)).cloned());
        if defer_to_notify {
            self.remember(&found);
            let until = Instant::now() + self.hold;
            for path in found {
                self.held.entry(path).or_insert(until);
            }
        } else {
            changed.extend(found);
        }
        self.deliver(changed);
    }

    /// Reports the poller's findings that notify has not reported by the end of their hold.
    fn release_held(&mut self, now: Instant) {
        let mut due = BTreeSet::new();
        self.held.retain(|path, until| {
            let keep = *until > now;
            if !keep {
                due.insert(path.clone());
            }
            keep
        });
        self.deliver(due);
    }

    /// Events may have been lost: compare everything now (notify will not report what it lost),
    /// and keep polling from here on.
    fn on_notify_error(&mut self, error: &str) {
        tracing::warn!(error, "memory watcher: notify error, rescanning and polling");
        self.record_error(format!("notify: {error}; rescanned, polling from now on"));
        self.ensure_polling();
        self.rescan(false);
    }

    /// Moves the notify watches to follow roots that appeared or vanished, adding the files of
    /// root directories that just became watched to `changed`.
    fn sync_watches(&mut self, changed: &mut BTreeSet<PathBuf>) {
        let Some(native) = self.native.as_mut() else {
            return;
        };
        match native.sync(&self.roots) {
            Ok(appeared) => {
                for dir in appeared {
                    self.expand(dir, changed);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "memory watcher: cannot watch, polling instead");
                self.native = None;
                self.record_error(format!("notify: {error}; polling instead"));
                self.ensure_polling();
            }
        }
    }

    /// Adds the memory files one reported path stands for to `changed`: nothing outside the
    /// roots; a directory stands for the files in it and the known ones it no longer holds.
    fn expand(&self, path: PathBuf, changed: &mut BTreeSet<PathBuf>) {
        if !self.roots.covers(&path) {
            return;
        }
        match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                let mut found = BTreeMap::new();
                scan_dir(&path, &mut found);
                changed.extend(
                    self.known_below(&path)
                        .filter(|known| !found.contains_key(*known))
                        .cloned(),
                );
                changed.extend(found.into_keys());
            }
            Ok(_) => {
                if self.roots.is_root(&path) || is_memory_file_name(&path) {
                    changed.insert(path);
                }
            }
            Err(_) => {
                changed.extend(self.known_below(&path).cloned());
                if self.known.contains_key(&path) || is_memory_file_name(&path) {
                    changed.insert(path);
                }
            }
        }
    }

    fn known_below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a PathBuf> + 'a {
        self.known
            .keys()
            .filter(move |known| known.starts_with(dir) && *known != dir)
    }

    /// Updates the known files and calls back with `changed`, if anything changed.
    fn deliver(&mut self, changed: BTreeSet<PathBuf>) {
        self.remember(&changed);
        for path in &changed {
            self.held.remove(path);
        }
        if changed.is_empty() || self.stopping.load(Ordering::Acquire) {
            return;
        }
        {
            let mut state = lock_state(&self.state);
            state.batches += 1;
            state.paths_reported += changed.len() as u64;
            state.last_event_unix_ms = Some(unix_ms_now());
        }
        let batch: Vec<PathBuf> = changed.into_iter().collect();
        // A panicking callback must not end watching for the rest of the daemon's life.
        if panic::catch_unwind(AssertUnwindSafe(|| (self.on_change)(batch))).is_err() {
            self.record_error("on_change panicked; still watching".into());
        }
    }

    /// Records the current fingerprints of `paths` (or that they are gone) as known.
    fn remember(&mut self, paths: &BTreeSet<PathBuf>) {
        for path in paths {
            match Fingerprint::read(path) {
                Some(print) => self.known.insert(path.clone(), print),
                None => self.known.remove(path),
            };
        }
    }

    fn ensure_polling(&mut self) {
        if self.poll_interval.is_none() {
            self.poll_interval = Some(DEFAULT_POLL_INTERVAL);
            self.next_poll = Some(Instant::now() + DEFAULT_POLL_INTERVAL);
        }
        lock_state(&self.state).backend = backend(self.native.is_some(), true);
    }

    fn record_error(&self, error: String) {
        lock_state(&self.state).last_error = Some(error);
    }
}

fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}
