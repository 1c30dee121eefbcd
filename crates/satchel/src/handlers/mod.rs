//! The method handlers: each turns a call's params into an engine call and its outcome into
//! a reply, and tells the session's watchers what changed. One file per method.
//!
//! The engine does the work; what is here is what the engine must not know: connections
//! (which client declared `summarizer_complete` or `window.workDoneProgress`, who watches
//! which session), the model backends a compaction may use, and LSP work-done progress.

mod candidates;
mod compact;
mod expand;
mod initialize;
mod inspect;
mod memory;
mod memory_index;
mod pins;
mod prepare;
mod read;
mod sessions;
mod usage;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use satchel_core::summary::llm::Completer;
use satchel_engine::{CallContext, CallToken, Engine, EngineError, ModelSource, ProgressSink, Ticket};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{Config, ContextEvent, ProgressToken};
use serde_json::{Map, Value, json};

use crate::config::apply_overrides;
use crate::error::RpcError;
use crate::llm::{ClientCompleter, OpenAiCompleter};
use crate::memory::Memory;
use crate::transport::{CallScope, ClientHandle, ProgressCancel, ProgressRegistration};

/// The engine, and what the daemon keeps per connection.
pub struct Daemon {
    engine: Engine,
    /// Connections whose client declared `summarizer_complete` in `initialize`; a connection
    /// leaves when it closes.
    completing_clients: Mutex<HashSet<u64>>,
    /// Connections whose client declared LSP `window.workDoneProgress` in `initialize`: only
    /// they get `$/progress`.
    progress_clients: Mutex<HashSet<u64>>,
    /// Connections following a session (`context.watch`), by session.
    watchers: Mutex<HashMap<String, Vec<ClientHandle>>>,
    /// Held by the memory write in progress (`memory.write`, `memory.append`, a merge):
    /// they run one at a time.
    memory_writes: Mutex<()>,
    /// The memory index (none when `memory_index_enabled` is false or the `memory` feature
    /// is not built in), set once at start-up.
    memory: Memory,
}

impl Daemon {
    /// A daemon serving `engine`.
    pub fn new(engine: Engine) -> Self {
        Daemon {
            engine,
            completing_clients: Mutex::default(),
            progress_clients: Mutex::default(),
            watchers: Mutex::default(),
            memory_writes: Mutex::default(),
            memory: Memory::none(),
        }
    }

    /// The daemon with the memory index `memory`.
    pub fn with_memory(mut self, memory: Memory) -> Self {
        self.memory = memory;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Forgets what was kept for a connection that closed.
    pub fn connection_closed(&self, connection: u64) {
        lock(&self.completing_clients).remove(&connection);
        lock(&self.progress_clients).remove(&connection);
        let mut watchers = lock(&self.watchers);
        for list in watchers.values_mut() {
            list.retain(|c| c.connection_id() != connection);
        }
        watchers.retain(|_, list| !list.is_empty());
    }

    /// The base configuration with a call's overrides.
    fn effective_config(&self, overrides: Option<&Map<String, Value>>) -> Result<Config, RpcError> {
        match overrides {
            Some(overrides) => apply_overrides(self.engine.config(), overrides)
                .map_err(|(field, why)| RpcError::invalid_params(&format!("config.{field}"), why)),
            None => Ok(self.engine.config().clone()),
        }
    }

    /// A place in the queue of session `id`, taken in the call's arrival order on its
    /// connection.
    fn ticket(&self, scope: &CallScope, id: &str) -> Result<Ticket, RpcError> {
        let ticket = match scope.admission.take() {
            Some(admission) => admission.admit(|| self.engine.ticket(id)),
            None => self.engine.ticket(id),
        };
        Ok(ticket?)
    }

    /// Tells the session's watchers what a call just did.
    fn publish(&self, event: Option<ContextEvent>) {
        let Some(event) = event else {
            return;
        };
        let watchers = lock(&self.watchers);
        let Some(list) = watchers.get(&event.session_id).filter(|l| !l.is_empty()) else {
            return;
        };
        let params = serde_json::to_value(&event).unwrap_or_default();
        for client in list {
            client.notify("context.event", params.clone());
        }
    }

    /// What a session call needs from its connection: the models it may summarise with,
    /// work-done progress of a model summary, and its cancellation.
    ///
    /// `work_done_token` is the LSP `workDoneToken` the call's params carried, if any: progress
    /// is then reported under it, whether or not the client declared the capability.
    fn run_with_call<T>(
        &self,
        scope: &CallScope,
        session_id: &str,
        work_done_token: Option<ProgressToken>,
        run: impl FnOnce(&CallContext<'_>) -> Result<T, EngineError>,
    ) -> Result<T, RpcError> {
        let models = CancellableModels {
            models: CallModels {
                daemon: self,
                client: &scope.client,
            },
            token: &scope.token,
        };
        let progress = match work_done_token {
            Some(token) => Some(WorkDone::under(scope, session_id, token)),
            None => lock(&self.progress_clients)
                .contains(&scope.client.connection_id())
                .then(|| WorkDone::new(scope, session_id)),
        }
        .map(Arc::new);
        let publish = |event| self.publish(Some(event));
        let call = CallContext {
            models: &models,
            progress: progress_sink(progress.clone()),
            events: &publish,
            token: scope.token.clone(),
            max_result_bytes: Some(scope.max_result_bytes),
        };
        let outcome = run(&call);
        if let Some(progress) = progress {
            progress.end(outcome.as_ref().err());
        }
        Ok(outcome?)
    }
}

/// The model backends one call may use.
struct CallModels<'a> {
    daemon: &'a Daemon,
    client: &'a ClientHandle,
}

/// [`CallModels`] for a call that can be cancelled: a cancelled call stops waiting for the
/// client's model (and tells the client so).
struct CancellableModels<'a> {
    models: CallModels<'a>,
    token: &'a CallToken,
}

impl ModelSource for CallModels<'_> {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer>, String> {
        self.completer_for(kind, config, &CallToken::new())
    }
}

impl ModelSource for CancellableModels<'_> {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer>, String> {
        self.models.completer_for(kind, config, self.token)
    }
}

impl CallModels<'_> {
    /// The completer for `kind`, for a call cancelled by `token`.
    fn completer_for(
        &self,
        kind: SummarizerKind,
        config: &Config,
        token: &CallToken,
    ) -> Result<Box<dyn Completer>, String> {
        match kind {
            SummarizerKind::Extractive => Err("the extractive summariser needs no model".into()),
            SummarizerKind::Openai => Ok(Box::new(OpenAiCompleter::from_config(config))),
            SummarizerKind::Client => {
                let declared = lock(&self.daemon.completing_clients).contains(&self.client.connection_id());
                if !declared {
                    return Err("the client did not declare summarizer_complete".into());
                }
                let timeout = Duration::from_secs_f64(config.llm_timeout_secs);
                Ok(Box::new(ClientCompleter::new(
                    self.client.clone(),
                    timeout,
                    token.clone(),
                )))
            }
        }
    }
}

/// How long the client has to accept a progress token; without its answer there is no progress.
const CREATE_PROGRESS_TIMEOUT: Duration = Duration::from_secs(5);

/// Source of progress tokens, unique in this process.
static NEXT_PROGRESS: AtomicU64 = AtomicU64::new(1);

/// The stages of a model summary, for a call whose client declared `window.workDoneProgress`;
/// other calls get a sink that does nothing.
fn progress_sink(progress: Option<Arc<WorkDone>>) -> ProgressSink {
    match progress {
        Some(progress) => Arc::new(move |stage, stages| progress.stage(stage, stages)),
        None => Arc::new(|_, _| {}),
    }
}

/// LSP work-done progress of one call's compaction: at its first stage the client is asked
/// to create a fresh token (`window/workDoneProgress/create`), and if it accepts, it gets
/// `$/progress` `begin`, a `report` per stage, and (when the call ends) a last `report` at
/// 100 % and `end`. A compaction that asks no model reports nothing.
///
/// When the call's params carried a `workDoneToken`, that token is used instead (nothing is
/// created), and since LSP allows one begin–end per token, a second compaction in the same
/// call goes on reporting under it.
///
/// The `begin` says `cancellable: true`: while the progress runs, LSP's
/// `window/workDoneProgress/cancel {token}` cancels the call as `$/cancelRequest` would.
struct WorkDone {
    client: ClientHandle,
    /// Registers the running token for `window/workDoneProgress/cancel`.
    cancel: ProgressCancel,
    title: String,
    /// The client's own token (from the params), if it sent one.
    given: Option<Value>,
    state: Mutex<Progress>,
}

/// Where one call's progress is.
enum Progress {
    /// No stage yet.
    Idle,
    /// The client accepted `token`; `percentage` was the last one reported. While
    /// `_cancellable` lives, the token cancels the call.
    Running {
        token: Value,
        percentage: usize,
        _cancellable: Option<ProgressRegistration>,
    },
    /// The client refused the token or did not answer: no progress for this call.
    Refused,
}

impl WorkDone {
    fn new(scope: &CallScope, session_id: &str) -> Self {
        WorkDone {
            client: scope.client.clone(),
            cancel: scope.progress.clone(),
            title: format!("Compacting {session_id}"),
            given: None,
            state: Mutex::new(Progress::Idle),
        }
    }

    /// Progress under the client's own `workDoneToken`.
    fn under(scope: &CallScope, session_id: &str, token: ProgressToken) -> Self {
        WorkDone {
            given: Some(serde_json::to_value(token).unwrap_or_default()),
            ..WorkDone::new(scope, session_id)
        }
    }

    /// Stage `stage` of `stages` (1-based) is about to ask the model.
    fn stage(&self, stage: usize, stages: usize) {
        let mut state = lock(&self.state);
        // A second compaction in the same call starts over under a fresh token.
        if stage == 1
            && self.given.is_none()
            && let Progress::Running { token, .. } = &*state
        {
            self.send_end(token, None);
            *state = Progress::Idle;
        }
        if let Progress::Idle = *state {
            *state = self.begin();
        }
        let Progress::Running { token, percentage, .. } = &mut *state else {
            return;
        };
        // Never backwards, and 100 only once the call is done.
        *percentage = (100 * stage.saturating_sub(1) / stages.max(1)).clamp(*percentage, 99);
        self.send(
            token,
            json!({
                "kind": "report",
                "message": format!("summarising stage {stage} of {stages}"),
                "percentage": *percentage,
            }),
        );
    }

    /// Asks the client for a fresh token and begins the progress under it.
    fn begin(&self) -> Progress {
        if let Some(token) = &self.given {
            return self.begun(token.clone());
        }
        let token = Value::from(format!(
            "satchel-progress-{}",
            NEXT_PROGRESS.fetch_add(1, Ordering::Relaxed)
        ));
        let created = self.client.request_blocking(
            "window/workDoneProgress/create",
            json!({ "token": token }),
            CREATE_PROGRESS_TIMEOUT,
        );
        if let Err(e) = created {
            tracing::debug!(
                %token,
                "no progress reported: window/workDoneProgress/create failed: {e}"
            );
            return Progress::Refused;
        }
        self.begun(token)
    }

    /// Sends `begin` under `token`, from when on the token cancels the call.
    fn begun(&self, token: Value) -> Progress {
        let cancellable = self.cancel.register(&token);
        self.send(
            &token,
            json!({"kind": "begin", "title": self.title, "cancellable": true, "percentage": 0}),
        );
        Progress::Running {
            token,
            percentage: 0,
            _cancellable: cancellable,
        }
    }

    /// The call is over: the progress, if any, reaches 100 % (when the call succeeded) and ends.
    fn end(&self, error: Option<&EngineError>) {
        let state = std::mem::replace(&mut *lock(&self.state), Progress::Idle);
        if let Progress::Running { token, .. } = state {
            self.send_end(&token, error);
        }
    }

    fn send_end(&self, token: &Value, error: Option<&EngineError>) {
        let message = match error {
            None => {
                self.send(
                    token,
                    json!({"kind": "report", "message": "summarised", "percentage": 100}),
                );
                "done".to_owned()
            }
            Some(EngineError::Cancelled) => "cancelled".to_owned(),
            Some(e) => format!("failed: {e}"),
        };
        self.send(token, json!({"kind": "end", "message": message}));
    }

    fn send(&self, token: &Value, value: Value) {
        self.client
            .notify("$/progress", json!({"token": token, "value": value}));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long-running daemon keeps nothing of a connection once it closes: its summariser
    /// and progress capabilities leave with it (a later connection never inherits them).
    #[test]
    fn a_closed_connection_leaves_no_capability_behind() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = satchel_storage::Workspace::open(dir.path()).unwrap();
        let engine = Engine::new(workspace, satchel_protocol::Config::default()).unwrap();
        let daemon = Daemon::new(engine);
        for connection in [1, 2] {
            lock(&daemon.completing_clients).insert(connection);
            lock(&daemon.progress_clients).insert(connection);
        }
        daemon.connection_closed(1);
        assert_eq!(*lock(&daemon.completing_clients), HashSet::from([2]));
        assert_eq!(*lock(&daemon.progress_clients), HashSet::from([2]));
        daemon.connection_closed(2);
        assert!(lock(&daemon.completing_clients).is_empty() && lock(&daemon.progress_clients).is_empty());
    }
}
