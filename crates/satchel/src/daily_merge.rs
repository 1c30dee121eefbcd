//! The daily memory merge's schedule: wait for `memory_merge_time`, merge, repeat. The clock is
//! a parameter, so a test can run a day's schedule without waiting for it.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Local};

use crate::handlers::{self, Daemon};

/// Where the schedule reads the time and how it waits for an instant.
pub trait Clock: Send + Sync + 'static {
    /// The local time now.
    fn now(&self) -> DateTime<Local>;

    /// Resolves at `at` (at once if it is past).
    fn sleep_until(&self, at: DateTime<Local>) -> impl Future<Output = ()> + Send;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Local> {
        Local::now()
    }

    fn sleep_until(&self, at: DateTime<Local>) -> impl Future<Output = ()> + Send {
        tokio::time::sleep((at - Local::now()).to_std().unwrap_or_default())
    }
}

/// Runs the daily memory merge at `memory_merge_time` (local), until the daemon stops; returns
/// at once when the merge is off.
pub async fn merge_daily(daemon: Arc<Daemon>, clock: impl Clock) {
    loop {
        let Some(at) = handlers::next_merge(daemon.engine().config(), clock.now()) else {
            return;
        };
        clock.sleep_until(at).await;
        let now = clock.now();
        let daemon = daemon.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.scheduled_merge(now)).await {
            tracing::warn!("the daily memory merge panicked: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::TimeZone;
    use satchel_protocol::Config;
    use satchel_storage::Workspace;
    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::memory::MemoryService;

    /// A clock that stands still until the test lets a wait end: each `sleep_until` reports
    /// its instant and blocks until the test sends it the time to wake at.
    struct ScriptedClock {
        now: Arc<Mutex<DateTime<Local>>>,
        waits: mpsc::UnboundedSender<(DateTime<Local>, oneshot::Sender<()>)>,
    }

    impl Clock for ScriptedClock {
        fn now(&self) -> DateTime<Local> {
            *self.now.lock().unwrap()
        }

        fn sleep_until(&self, at: DateTime<Local>) -> impl Future<Output = ()> + Send {
            let (wake, woken) = oneshot::channel();
            self.waits.send((at, wake)).unwrap();
            let now = self.now.clone();
            async move {
                // The test dropping the sender (it is done) leaves the schedule waiting forever.
                if woken.await.is_ok() {
                    *now.lock().unwrap() = at;
                } else {
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    fn local(day: u32, hour: u32, minute: u32) -> DateTime<Local> {
        Local.with_ymd_and_hms(2026, 11, day, hour, minute, 0).unwrap()
    }

    #[tokio::test]
    async fn at_its_time_the_merge_folds_the_logs_through_yesterday_into_memory_md() {
        let dir = tempfile::tempdir().unwrap();
        let memory_dir = dir.path().join("memory");
        std::fs::create_dir_all(&memory_dir).unwrap();
        for (day, note) in [
            ("2026-11-22", "deploy with make ship"),
            ("2026-11-23", "the CI box has 2 cores"),
            ("2026-11-24", "today's note, still being written"),
        ] {
            std::fs::write(memory_dir.join(format!("{day}.md")), format!("## Notes\n\n- {note}\n")).unwrap();
        }
        let config = Config {
            memory_merge_time: "03:30".into(),
            memory_watch_enabled: false,
            ..Config::default()
        };
        let workspace = Workspace::open(dir.path()).unwrap();
        let memory = MemoryService::open(&workspace, &config, |_| None).unwrap();
        let engine = satchel_engine::Engine::new(workspace, config).unwrap();
        let daemon = Arc::new(Daemon::new(engine).with_memory(Some(memory)));

        let (waits, mut waiting) = mpsc::unbounded_channel();
        let clock = ScriptedClock {
            now: Arc::new(Mutex::new(local(24, 1, 0))),
            waits,
        };
        let schedule = tokio::spawn(merge_daily(daemon, clock));
        let memory_md = dir.path().join("MEMORY.md");

        // At 01:00 on the 24th the merge waits for 03:30 the same day, having merged nothing.
        let (at, wake) = waiting.recv().await.unwrap();
        assert_eq!(at, local(24, 3, 30));
        assert!(!memory_md.exists());

        // At 03:30 it merges, then waits for 03:30 the next day.
        wake.send(()).unwrap();
        let (next, _never) = waiting.recv().await.unwrap();
        assert_eq!(next, local(25, 3, 30));
        let merged = std::fs::read_to_string(&memory_md).unwrap();
        assert!(
            merged.contains("- deploy with make ship (from memory/2026-11-22.md)"),
            "{merged}"
        );
        assert!(
            merged.contains("- the CI box has 2 cores (from memory/2026-11-23.md)"),
            "{merged}"
        );
        assert!(!merged.contains("today's note"), "{merged}");
        schedule.abort();
    }
}
