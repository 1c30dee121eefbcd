//! The memory watcher from outside: the synthetic source (deterministic, no sleeping), real
//! notify and the poller on temporary directories (waiting on a channel with a timeout, never a
//! fixed sleep before an assertion), shutdown, and the no-op watcher.

use std::fs;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use satchel_memory::watch::{MemoryWatcher, WatchBackend, WatchOptions};

/// How long a real watcher may take to report before a test fails: generous, since a loaded
/// machine delays threads; a passing test returns as soon as the report arrives.
const PATIENCE: Duration = Duration::from_secs(5);

/// A callback that forwards each batch, and the receiving end.
fn collector() -> (impl Fn(Vec<PathBuf>) + Send + Sync + 'static, Receiver<Vec<PathBuf>>) {
    let (sender, receiver) = mpsc::channel();
    (move |batch| sender.send(batch).unwrap(), receiver)
}

/// Receives batches until every path in `expected` has been reported; panics after
/// [`PATIENCE`] with what did arrive.
fn wait_for(batches: &Receiver<Vec<PathBuf>>, expected: &[PathBuf]) {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    while !expected.iter().all(|path| seen.contains(path)) {
        match batches.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(batch) => seen.extend(batch),
            Err(error) => panic!("{error:?} waiting for {expected:?}; reported: {seen:?}"),
        }
    }
}

/// A workspace with `memory/` (if `with_memory_dir`), and the two standard roots.
fn workspace(with_memory_dir: bool) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    if with_memory_dir {
        fs::create_dir(dir.path().join("memory")).unwrap();
    }
    let roots = vec![dir.path().join("MEMORY.md"), dir.path().join("memory")];
    (dir, roots)
}

fn notify_only() -> WatchOptions {
    WatchOptions {
        poll_interval: None,
        ..WatchOptions::default()
    }
}

#[test]
fn synthetic_watcher_reports_only_memory_files_under_roots() {
    let (dir, roots) = workspace(true);
    let ws = dir.path();
    let (on_change, batches) = collector();
    let (watcher, events) = MemoryWatcher::synthetic(roots, on_change);

    events.send(vec![ws.join("memory/a.md"), ws.join("MEMORY.md"), ws.join("notes.txt")]);
    events.flush();
    assert_eq!(
        batches.try_recv().unwrap(),
        vec![ws.join("MEMORY.md"), ws.join("memory/a.md")]
    );
    assert_eq!(batches.try_recv(), Err(TryRecvError::Empty), "one send, one batch");

    events.send(vec![
        ws.join("memory/b.MD"),
        ws.join("memory/b.MD"),
        ws.join("memory/.#b.md"),
        ws.join("memory/b.md~"),
        ws.join("memory/.b.md.swp"),
        ws.join("memory2/c.md"),
        ws.join("other.md"),
    ]);
    events.send(vec![ws.join("memory/notes.txt")]);
    events.flush();
    assert_eq!(
        batches.try_recv().unwrap(),
        vec![ws.join("memory/b.MD")],
        "deduplicated, temp files dropped"
    );
    assert_eq!(
        batches.try_recv(),
        Err(TryRecvError::Empty),
        "a batch with nothing left is not delivered"
    );

    let state = watcher.state();
    assert_eq!(state.backend, WatchBackend::Synthetic);
    assert_eq!((state.batches, state.paths_reported), (2, 3));
    assert!(state.last_event_unix_ms.is_some());
}

#[test]
fn synthetic_watcher_expands_directories_that_appear_or_vanish() {
    let (dir, roots) = workspace(true);
    let ws = dir.path();
    fs::create_dir_all(ws.join("memory/old")).unwrap();
    fs::write(ws.join("memory/old/x.md"), "x").unwrap();
    fs::write(ws.join("memory/old/y.txt"), "y").unwrap();
    let (on_change, batches) = collector();
    let (_watcher, events) = MemoryWatcher::synthetic(roots, on_change);

    // A directory moved in: notify names only the directory.
    fs::create_dir_all(ws.join("memory/new/deeper")).unwrap();
    fs::write(ws.join("memory/new/deeper/z.md"), "z").unwrap();
    events.send(vec![ws.join("memory/new")]);
    // A directory removed: its files are reported gone.
    fs::remove_dir_all(ws.join("memory/old")).unwrap();
    events.send(vec![ws.join("memory/old")]);
    events.flush();

    assert_eq!(batches.try_recv().unwrap(), vec![ws.join("memory/new/deeper/z.md")]);
    assert_eq!(batches.try_recv().unwrap(), vec![ws.join("memory/old/x.md")]);
}

#[test]
fn notify_watcher_reports_create_modify_delete_rename() {
    let (dir, roots) = workspace(true);
    let memory = dir.path().join("memory");
    for file in ["modified.md", "deleted.md", "renamed.md"] {
        fs::write(memory.join(file), "before").unwrap();
    }
    let (on_change, batches) = collector();
    let watcher = MemoryWatcher::start(roots, notify_only(), on_change);
    assert_eq!(
        watcher.state().backend,
        WatchBackend::Notify,
        "{:?}",
        watcher.state().last_error
    );

    fs::write(memory.join("created.md"), "new").unwrap();
    wait_for(&batches, &[memory.join("created.md")]);

    fs::write(memory.join("modified.md"), "after, longer").unwrap();
    wait_for(&batches, &[memory.join("modified.md")]);

    fs::remove_file(memory.join("deleted.md")).unwrap();
    wait_for(&batches, &[memory.join("deleted.md")]);

    fs::rename(memory.join("renamed.md"), memory.join("renamed-to.md")).unwrap();
    wait_for(&batches, &[memory.join("renamed.md"), memory.join("renamed-to.md")]);
}

#[test]
fn notify_watcher_sees_memory_md_created_later() {
    let (dir, roots) = workspace(false);
    let (on_change, batches) = collector();
    let _watcher = MemoryWatcher::start(roots, notify_only(), on_change);

    fs::write(dir.path().join("MEMORY.md"), "# Memory").unwrap();
    wait_for(&batches, &[dir.path().join("MEMORY.md")]);
}

#[test]
fn notify_watcher_sees_memory_dir_created_later() {
    let (dir, roots) = workspace(false);
    let memory = dir.path().join("memory");
    let (on_change, batches) = collector();
    let _watcher = MemoryWatcher::start(roots, notify_only(), on_change);

    // Written before the watcher can have moved its watch into the new directory.
    fs::create_dir(&memory).unwrap();
    fs::write(memory.join("first.md"), "1").unwrap();
    wait_for(&batches, &[memory.join("first.md")]);

    // Now watched recursively, subdirectories included.
    fs::create_dir(memory.join("2025")).unwrap();
    fs::write(memory.join("2025/second.md"), "2").unwrap();
    wait_for(&batches, &[memory.join("2025/second.md")]);
}

#[test]
fn notify_watcher_follows_a_root_created_several_levels_down() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("extra/notes/memory");
    let (on_change, batches) = collector();
    let _watcher = MemoryWatcher::start(vec![root.clone()], notify_only(), on_change);

    // Only the workspace is watched; each new level moves the watch one step down, and the
    // file is written before the watch can reach its directory.
    fs::create_dir_all(root.join("sub")).unwrap();
    fs::write(root.join("sub/a.md"), "a").unwrap();
    wait_for(&batches, &[root.join("sub/a.md")]);
}

#[test]
fn notify_watcher_is_not_fooled_by_reads() {
    let (dir, roots) = workspace(true);
    let path = dir.path().join("memory/a.md");
    let (sender, batches) = mpsc::channel();
    // Reads every reported file, as the indexer does; notify reports opens, and they must not
    // come back as changes.
    let on_change = move |batch: Vec<PathBuf>| {
        for path in &batch {
            let _ = fs::read_to_string(path);
        }
        sender.send(batch).unwrap();
    };
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        poll_interval: None,
    };
    let _watcher = MemoryWatcher::start(roots, options, on_change);

    fs::write(&path, "a").unwrap();
    wait_for(&batches, std::slice::from_ref(&path));
    assert_eq!(
        batches.recv_timeout(Duration::from_millis(600)),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn polling_watcher_reports_changes_within_the_interval() {
    let (dir, roots) = workspace(true);
    let path = dir.path().join("memory/a.md");
    fs::write(&path, "before").unwrap();
    let interval = Duration::from_millis(200);
    let (on_change, batches) = collector();
    let watcher = MemoryWatcher::start_polling_only(roots, interval, on_change);
    assert_eq!(watcher.state().backend, WatchBackend::Poll);

    // A different size, so the change shows even if it lands in the baseline's clock tick.
    let written = Instant::now();
    fs::write(&path, "after, longer").unwrap();
    wait_for(&batches, std::slice::from_ref(&path));
    let latency = written.elapsed();
    assert!(latency < interval + Duration::from_millis(500), "{latency:?}");

    fs::remove_file(&path).unwrap();
    wait_for(&batches, std::slice::from_ref(&path));
}

#[test]
fn notify_and_poll_watcher_reports_an_edit_once() {
    let (dir, roots) = workspace(true);
    let path = dir.path().join("memory/a.md");
    // The poller ticks inside notify's window, so it sees the edit first; notify reports it.
    let options = WatchOptions {
        debounce: Duration::from_millis(200),
        poll_interval: Some(Duration::from_millis(50)),
    };
    let (on_change, batches) = collector();
    let watcher = MemoryWatcher::start(roots, options, on_change);
    assert_eq!(watcher.state().backend, WatchBackend::NotifyAndPoll);

    fs::write(&path, "a").unwrap();
    wait_for(&batches, std::slice::from_ref(&path));
    assert_eq!(
        batches.recv_timeout(Duration::from_millis(600)),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn notify_and_poll_watcher_reports_what_notify_misses() {
    let (dir, roots) = workspace(true);
    let path = dir.path().join("memory/a.md");
    fs::write(&path, "before").unwrap();
    // inotify watches names in a directory: a write through a hard link elsewhere goes unseen,
    // as writes on a network file system do.
    let elsewhere = dir.path().join("elsewhere.md");
    fs::hard_link(&path, &elsewhere).unwrap();
    let options = WatchOptions {
        debounce: Duration::from_millis(200),
        poll_interval: Some(Duration::from_millis(200)),
    };
    let (on_change, batches) = collector();
    let _watcher = MemoryWatcher::start(roots, options, on_change);

    let written = Instant::now();
    fs::write(&elsewhere, "after, longer").unwrap();
    wait_for(&batches, std::slice::from_ref(&path));
    // One poll interval, then notify's window and grace before the poller reports it itself.
    let latency = written.elapsed();
    assert!(
        latency >= Duration::from_millis(300),
        "held for notify first: {latency:?}"
    );
    assert!(latency < Duration::from_millis(200 + 300 + 500), "{latency:?}");
}

#[test]
fn dropped_watcher_stops_quickly_and_stays_silent() {
    let (dir, roots) = workspace(true);
    let (on_change, batches) = collector();
    let watcher = MemoryWatcher::start(roots.clone(), WatchOptions::default(), on_change);
    fs::write(dir.path().join("memory/a.md"), "a").unwrap();

    let dropping = Instant::now();
    drop(watcher);
    assert!(dropping.elapsed() < Duration::from_secs(1), "{:?}", dropping.elapsed());
    // The callback (and with it the only sender) is gone: nothing can be reported any more.
    while let Ok(batch) = batches.try_recv() {
        assert_eq!(
            batch,
            vec![dir.path().join("memory/a.md")],
            "reported before the drop returned"
        );
    }
    assert_eq!(batches.try_recv(), Err(TryRecvError::Disconnected));

    let (on_change, batches) = collector();
    let (watcher, events) = MemoryWatcher::synthetic(roots, on_change);
    drop(watcher);
    events.send(vec![dir.path().join("memory/a.md")]);
    events.flush();
    assert_eq!(batches.try_recv(), Err(TryRecvError::Disconnected));
}

#[test]
fn noop_watcher_reports_nothing_and_says_off() {
    let watcher = MemoryWatcher::noop();
    let state = watcher.state();
    assert_eq!(state.backend, WatchBackend::Off);
    assert_eq!(
        (state.batches, state.paths_reported, state.last_event_unix_ms),
        (0, 0, None)
    );
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["backend"], "off");
    assert_eq!(json["roots"], serde_json::json!([]));
}

/// Latency from the end of a write to the callback, printed for a few runs of each backend:
/// `cargo test -p satchel-memory --test watch watcher_latency -- --ignored --nocapture`.
#[test]
#[ignore = "measurement, not a check"]
fn watcher_latency() {
    fn measure(name: &str, start: impl Fn(Vec<PathBuf>, Box<dyn Fn(Vec<PathBuf>) + Send + Sync>) -> MemoryWatcher) {
        let (dir, roots) = workspace(true);
        let path = dir.path().join("memory/a.md");
        fs::write(&path, "0").unwrap();
        let (sender, reported) = mpsc::channel();
        let watcher = start(roots, Box::new(move |_batch| sender.send(Instant::now()).unwrap()));
        let mut latencies = Vec::new();
        for run in 1..=8 {
            let written = Instant::now();
            fs::write(&path, "x".repeat(run)).unwrap();
            let at = reported.recv_timeout(PATIENCE).unwrap();
            latencies.push(at.saturating_duration_since(written));
            // Let the window close and any straggler arrive; the uneven pause spreads the writes
            // over the poll cycle.
            let pause = Duration::from_millis(700 + 61 * run as u64);
            while reported.recv_timeout(pause).is_ok() {}
        }
        eprintln!("{name} ({:?}): {latencies:?}", watcher.state().backend);
    }
    measure("notify, 200 ms debounce", |roots, on_change| {
        MemoryWatcher::start(roots, notify_only(), on_change)
    });
    measure("notify + poll (defaults)", |roots, on_change| {
        MemoryWatcher::start(roots, WatchOptions::default(), on_change)
    });
    measure("polling only, 500 ms", |roots, on_change| {
        MemoryWatcher::start_polling_only(roots, Duration::from_millis(500), on_change)
    });
}
