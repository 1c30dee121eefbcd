//! The [`Engine`]: what every call shares, and the transaction each session call runs in.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use satchel_protocol::{Config, ConfigError};
use satchel_storage::{DialogArchive, MemoryFiles, OffloadStore, SessionStore, StorageError, Workspace};
use serde_json::{Map, Value};

use crate::call::CallToken;
use crate::candidates::Candidates;
use crate::clock::{Clock, IdSource, RandomIds, SystemClock};
use crate::error::EngineError;
use crate::live::{LiveLimits, LiveSessions, Ticket};
use crate::session::Session;

/// How often idle sessions are looked for, at most.
const IDLE_SWEEP_MS: i64 = 60_000;

/// Sessions, their durable state and the pipeline, shared by every call.
///
/// The engine's methods are split by call, one `impl Engine` block per file, so that each
/// call's steps are read in one place while every call shares the stores, the live sessions
/// and the transaction (as rust-analyzer splits its `GlobalState`):
///
/// - `engine.rs` (here): construction, tickets, `Engine::transaction`, eviction.
/// - `prepare.rs`: `context.prepare`; `ingest.rs`: taking its messages in; `compact.rs`:
///   automatic and manual compaction (`compact/archive.rs`: archiving one).
/// - `expand.rs`: `context.expand`; `pins.rs`: `context.pin`, `unpin`, `purge`;
///   `usage_report.rs`: `context.usage`.
/// - `queries.rs`: the calls that only look (`inspect`, `sessions`, `read`, the sweep);
///   `inspection.rs`: a session's effective configuration.
/// - `recovery.rs`: loading a session from its log, finishing an interrupted compaction.
/// - `candidates.rs`: the learning candidates' calls.
///
/// These files may use each other's helpers (a prepare compacts, a load resolves pins, inspect
/// reports compactions): that is the one import circle the crate allows, and
/// `scripts/check-imports` holds it to files with an `impl Engine` block. What they share
/// below them has no such tie back: a `Session` owns its state and invariants (`session/`),
/// and the `Request` one call counts and compacts is one value.
pub struct Engine {
    pub(crate) workspace: Workspace,
    pub(crate) offloads: OffloadStore,
    pub(crate) sessions: SessionStore,
    pub(crate) archive: DialogArchive,
    pub(crate) memory: MemoryFiles,
    /// The daemon's configuration; a call may override parts of it for itself.
    pub(crate) config: Config,
    pub(crate) live: LiveSessions,
    /// Held shared by calls that write references to offload files, exclusively by the
    /// sweep, which must not delete a file between a call deciding to reuse it and the
    /// call logging its reference.
    pub(crate) gate: RwLock<()>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdSource>,
    /// When idle sessions are next looked for (clock milliseconds).
    next_idle_sweep_ms: AtomicI64,
    /// The learning candidates of the workspace, loaded on first use.
    pub(crate) candidates: Candidates,
    /// Applies a session's remembered `config` overrides to the daemon's configuration: the
    /// binary owns the rules (aliases, daemon-only keys), the engine needs the result where a
    /// session's own default applies and no prepare of this process remembered it.
    pub(crate) apply_overrides: Arc<ApplyOverrides>,
}

/// See [`Engine::with_overrides`].
pub type ApplyOverrides = dyn Fn(&Config, &Map<String, Value>) -> Result<Config, ConfigError> + Send + Sync;

impl Engine {
    /// An engine over `workspace` with the daemon's `config`, the system clock and random ids.
    pub fn new(workspace: Workspace, config: Config) -> Result<Self, StorageError> {
        Self::with_clock(workspace, config, Arc::new(SystemClock), Arc::new(RandomIds))
    }

    /// [`Engine::new`] with the given sources of time and ids.
    pub fn with_clock(
        workspace: Workspace,
        config: Config,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
    ) -> Result<Self, StorageError> {
        Ok(Engine {
            offloads: OffloadStore::new(&workspace),
            sessions: SessionStore::new(&workspace),
            archive: DialogArchive::new(&workspace, &config.daemon.sessions.dialog_path)?,
            memory: MemoryFiles::new(&workspace),
            workspace,
            config,
            live: LiveSessions::default(),
            gate: RwLock::new(()),
            clock,
            ids,
            next_idle_sweep_ms: AtomicI64::new(0),
            candidates: Candidates::default(),
            apply_overrides: Arc::new(
                |base: &Config, overrides: &Map<String, Value>| match overrides.keys().next() {
                    None => Ok(base.clone()),
                    Some(key) => Err(ConfigError::new(
                        key,
                        "this engine was given no way to apply config overrides",
                    )),
                },
            ),
        })
    }

    /// This engine with the daemon's way of applying a request's `config` overrides, used to
    /// find a session's effective configuration after a restart (see
    /// `Engine::session_config`).
    pub fn with_overrides(mut self, apply: Arc<ApplyOverrides>) -> Self {
        self.apply_overrides = apply;
        self
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The daemon's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A place in the queue of session `id`: calls on one session run in the order their
    /// tickets were taken. Take it as soon as the call's session is known, in arrival order.
    pub fn ticket(&self, id: &str) -> Result<Ticket, EngineError> {
        SessionStore::validate_id(id).map_err(|e| EngineError::invalid_params("session_id", e))?;
        Ok(self.live.ticket(id))
    }

    /// Sessions held in memory.
    pub fn live_sessions(&self) -> usize {
        self.live.len()
    }

    /// Runs `body` on the session of `ticket` as one transaction: in its turn, with the
    /// session loaded from its log if it is not in memory (`None` inside: no such session).
    /// When `body` fails, whatever it wrote to the session log is cut off again and the
    /// session leaves memory, so the next call starts from the log as it was: the call had
    /// no effect. A refusal ([`EngineError::is_refusal`]) of a session that was there, by a
    /// body that wrote nothing, keeps the session in memory as it is: a call refused for its
    /// params must not cost the session what only memory holds (its last request, for the
    /// prompt cache's stable prefix and `context.usage`; its peak; its prompt report). A
    /// body refuses before it changes the session, so nothing is there to undo. A cancel
    /// noticed before the turn begins stops the call right there.
    pub(crate) fn transaction<T>(
        &self,
        ticket: Ticket,
        token: &CallToken,
        body: impl FnOnce(&mut Option<Session>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let id = ticket.session_id().to_owned();
        let turn = ticket.wait();
        let outcome = (|| {
            if token.is_cancelled() {
                return Err(EngineError::Cancelled);
            }
            let mut session = turn.session();
            if session.is_none() {
                *session = self.load_session(&id)?;
            }
            let existed = session.is_some();
            let mark = self.sessions.mark(&id)?;
            // A panic inside the body (a bug) must leave no trace either: the session is
            // dropped and its records cut, then the panic goes on to the handler boundary,
            // which answers it.
            let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut session))) {
                Ok(outcome) => outcome,
                Err(panic) => {
                    *session = None;
                    if let Err(e) = self.sessions.roll_back(&id, &mark) {
                        tracing::error!(session = %id, "could not roll back a panicked call's log records: {e}");
                    }
                    std::panic::resume_unwind(panic);
                }
            };
            if let Err(error) = &outcome {
                let untouched = existed && error.is_refusal() && self.sessions.mark(&id).is_ok_and(|now| now == mark);
                if !untouched {
                    *session = None;
                    if let Err(e) = self.sessions.roll_back(&id, &mark) {
                        tracing::error!(session = %id, "could not roll back a failed call's log records: {e}");
                    }
                }
            }
            outcome
        })();
        turn.touch(self.clock.now().timestamp_millis());
        drop(turn);
        self.evict_idle();
        outcome
    }

    /// Drops sessions from memory past the live limit, and (at most once a minute) those idle
    /// too long. Every call runs it as it ends; a daemon with no calls runs it on a timer.
    pub fn evict_idle(&self) {
        let now = self.clock.now().timestamp_millis();
        let due = now >= self.next_idle_sweep_ms.load(Ordering::Relaxed);
        if !due && self.live.len() <= self.config.daemon.sessions.max_live_sessions {
            return;
        }
        if due {
            self.next_idle_sweep_ms.store(now + IDLE_SWEEP_MS, Ordering::Relaxed);
        }
        let limits = LiveLimits {
            max_sessions: self.config.daemon.sessions.max_live_sessions,
            idle_ms: (self.config.daemon.sessions.session_idle_secs * 1000.0) as i64,
        };
        let dropped = self.live.evict(now, limits);
        if dropped > 0 {
            tracing::debug!(dropped, live = self.live.len(), "sessions dropped from memory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallContext;
    use crate::clock::{ManualClock, SequentialIds};
    use satchel_protocol::{FormatHint, PrepareParams};
    use serde_json::json;

    fn params(session: &str, append: bool, content: &str) -> PrepareParams<Box<serde_json::value::RawValue>> {
        let message = vec![serde_json::value::to_raw_value(&json!({"role": "user", "content": content})).unwrap()];
        PrepareParams {
            session_id: session.into(),
            messages: (!append).then(|| message.clone()),
            append: append.then_some(message),
            expect_messages: None,
            format: FormatHint::Auto,
            system: None,
            tools: None,
            sections: None,
            memory: None,
            usage: None,
            work_done_token: None,
            config: None,
        }
    }

    #[test]
    fn an_idle_session_leaves_memory_and_the_next_call_reloads_it_from_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::at(
            chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000),
        ));
        let mut config = Config::default();
        config.daemon.sessions.session_idle_secs = 600.0;
        let engine = Engine::with_clock(
            Workspace::open(dir.path()).unwrap(),
            config.clone(),
            clock.clone(),
            Arc::new(SequentialIds::default()),
        )
        .unwrap();
        let call = CallContext::detached();
        for session in ["a", "b"] {
            let ticket = engine.ticket(session).unwrap();
            engine
                .prepare(ticket, params(session, false, "hello"), &config, &call)
                .unwrap();
        }
        assert_eq!(engine.live_sessions(), 2);
        clock.advance(chrono::Duration::seconds(601));
        engine.evict_idle();
        assert_eq!(engine.live_sessions(), 0, "both idle past session_idle_secs");
        let ticket = engine.ticket("a").unwrap();
        let again = engine
            .prepare(ticket, params("a", true, "more"), &config, &call)
            .unwrap();
        assert_eq!(again.result.reconciliation.session_messages, 2, "reloaded from its log");
    }
}
