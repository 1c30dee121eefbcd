//! The daily memory merge's schedule: wait for `memory_merge_time`, merge, repeat. The clock is
//! a parameter ([`crate::schedule::Clock`]), so a test can run a day's schedule without
//! waiting for it.

use std::sync::Arc;

use super::methods::next_merge;
use crate::handlers::Daemon;
use crate::schedule::Clock;

/// Runs the daily memory merge at `memory_merge_time` (local), until the daemon stops; returns
/// at once when the merge is off.
pub async fn merge_daily(daemon: Arc<Daemon>, clock: impl Clock) {
    loop {
        let Some(at) = next_merge(daemon.engine().config(), clock.now()) else {
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

    use chrono::{DateTime, Local, TimeZone};
    use satchel_protocol::Config;
    use satchel_storage::Workspace;
    use tokio::sync::mpsc;

    use super::*;
    use crate::memory::Memory;
    use crate::schedule::ScriptedClock;

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
        let memory = Memory::open(&workspace, &config, |_| None).unwrap();
        let engine = satchel_engine::Engine::new(workspace, config).unwrap();
        let daemon = Arc::new(Daemon::new(engine).with_memory(memory));

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
