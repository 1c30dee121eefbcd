//! What the daemon does on its own time, and the clock it does it by: a schedule reads the
//! time and waits through [`Clock`], so a test can run a day of it without waiting.
//!
//! The candidates' gates run here at start-up and every [`CANDIDATE_GATES_INTERVAL`]
//! (AceClaw evaluates its candidates automatically; the engine also runs them after each
//! compaction that observed one). The daily memory merge is `daily_merge`.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Local, TimeDelta};

use crate::handlers::Daemon;

/// How often the candidates' gates run when nothing else runs them. Their clocks count in
/// days (a 7-day grace and cooldown, a 30-day half-life, removal after 90 idle days), so an
/// hour late is never a day late, and a daemon that lives for an editor session still runs
/// them at start-up.
pub const CANDIDATE_GATES_INTERVAL: TimeDelta = TimeDelta::hours(1);

/// Where a schedule reads the time and how it waits for an instant.
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

/// Runs the candidates' gates now and then every [`CANDIDATE_GATES_INTERVAL`], until the
/// daemon stops. The gates read the engine's clock, like every call; `clock` only paces them.
/// A workspace without a store is left alone (no store, no signing key is made for it).
pub async fn evaluate_candidates_periodically(daemon: Arc<Daemon>, clock: impl Clock) {
    loop {
        let run = daemon.clone();
        match tokio::task::spawn_blocking(move || run.engine().candidates_evaluate_scheduled()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("the scheduled candidate gates failed: {e}"),
            // A task cancelled because the runtime is shutting down is no failure.
            Err(e) if e.is_panic() => tracing::warn!("the scheduled candidate gates panicked: {e}"),
            Err(_) => return,
        }
        clock.sleep_until(clock.now() + CANDIDATE_GATES_INTERVAL).await;
    }
}

/// A clock that stands still until the test lets a wait end: each `sleep_until` reports its
/// instant and blocks until the test sends it the time to wake at.
#[cfg(test)]
pub(crate) struct ScriptedClock {
    pub now: Arc<std::sync::Mutex<DateTime<Local>>>,
    pub waits: tokio::sync::mpsc::UnboundedSender<(DateTime<Local>, tokio::sync::oneshot::Sender<()>)>,
}

#[cfg(test)]
impl Clock for ScriptedClock {
    fn now(&self) -> DateTime<Local> {
        *self.now.lock().unwrap()
    }

    fn sleep_until(&self, at: DateTime<Local>) -> impl Future<Output = ()> + Send {
        let (wake, woken) = tokio::sync::oneshot::channel();
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::{TimeZone, Utc};
    use satchel_engine::{Engine, ManualClock, SequentialIds};
    use satchel_protocol::{CandidateKind, CandidateState, Config, ListParams, ObserveParams};
    use satchel_storage::Workspace;
    use tokio::sync::mpsc;

    use super::*;

    fn observation(text: &str) -> ObserveParams {
        ObserveParams {
            text: text.into(),
            kind: CandidateKind::Rule,
            tags: Vec::new(),
            files: Vec::new(),
            symbols: Vec::new(),
            evidence: None,
            session_id: None,
        }
    }

    fn states(engine: &Engine) -> Vec<(String, CandidateState)> {
        let listed = engine.candidates_list(ListParams { state: None }).unwrap();
        listed.candidates.into_iter().map(|c| (c.text, c.state)).collect()
    }

    #[tokio::test]
    async fn the_gates_run_at_start_up_and_every_hour_on_the_engines_time() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let day0 = Utc.with_ymd_and_hms(2026, 11, 24, 8, 0, 0).unwrap();
        let engine_clock = Arc::new(ManualClock::at(day0));
        let engine = Engine::with_clock(
            workspace,
            Config::default(),
            engine_clock.clone(),
            Arc::new(SequentialIds::default()),
        )
        .unwrap();
        // Said twice: promotable, but no client calls `candidates.evaluate`.
        engine
            .candidates_observe(observation("Run cargo fmt before clippy"))
            .unwrap();
        engine
            .candidates_observe(observation("run cargo fmt before clippy!"))
            .unwrap();
        engine.candidates_observe(observation("Deploy with make ship")).unwrap();
        let daemon = Arc::new(Daemon::new(engine));

        let start = Local.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap();
        let (waits, mut waiting) = mpsc::unbounded_channel();
        let clock = ScriptedClock {
            now: Arc::new(Mutex::new(start)),
            waits,
        };
        let schedule = tokio::spawn(evaluate_candidates_periodically(daemon.clone(), clock));

        // At start-up the gates run, then the schedule waits an hour.
        let (at, wake) = waiting.recv().await.unwrap();
        assert_eq!(at, start + TimeDelta::hours(1));
        assert_eq!(
            states(daemon.engine()),
            [
                ("Run cargo fmt before clippy".to_owned(), CandidateState::Promoted),
                ("Deploy with make ship".to_owned(), CandidateState::Shadow),
            ]
        );

        // Ninety idle days later (on the engine's clock) the next run removes both.
        engine_clock.advance(chrono::Duration::days(90));
        wake.send(()).unwrap();
        let (next, _never) = waiting.recv().await.unwrap();
        assert_eq!(next, start + TimeDelta::hours(2));
        assert_eq!(states(daemon.engine()), []);
        schedule.abort();
    }

    #[tokio::test]
    async fn a_workspace_without_candidates_gets_no_store_and_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(Workspace::open(dir.path()).unwrap(), Config::default()).unwrap();
        let daemon = Arc::new(Daemon::new(engine));
        let (waits, mut waiting) = mpsc::unbounded_channel();
        let clock = ScriptedClock {
            now: Arc::new(Mutex::new(Local::now())),
            waits,
        };
        let schedule = tokio::spawn(evaluate_candidates_periodically(daemon.clone(), clock));
        let _first_wait = waiting.recv().await.unwrap();
        let layout = daemon.engine().workspace().layout();
        assert!(!layout.candidates_file().exists());
        assert!(!layout.candidates_key().exists());
        schedule.abort();
    }
}
