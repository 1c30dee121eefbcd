//! The method handlers: each turns a call's params into an engine call and its outcome into
//! a reply, and tells the session's watchers what changed. One file per method.
//!
//! The engine does the work; what is here is what the engine must not know: connections
//! (which client declared `summarizer_complete` or `window.workDoneProgress`, who watches
//! which session), the model backends a compaction may use, and LSP work-done progress
//! ([`work_done`]).

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
mod work_done;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use satchel_core::summary::llm::Completer;
use satchel_engine::{CallContext, CallToken, Engine, EngineError, ModelSource, Ticket};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{Config, ContextEvent, ProgressToken};
use serde_json::{Map, Value};

use crate::config::apply_overrides;
use crate::error::RpcError;
use crate::llm::{ClientCompleter, NO_UPSTREAM, OpenAiCompleter};
use crate::memory::Memory;
use crate::transport::{CallScope, ClientHandle, EngineToken};
use work_done::{WorkDone, progress_sink};

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
                .map_err(|e| RpcError::invalid_params(&format!("config.{}", e.key), e.reason)),
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
            token: CallToken::clone(&scope.token),
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
    token: &'a EngineToken,
}

impl ModelSource for CallModels<'_> {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer + '_>, String> {
        self.completer_for(kind, config, &EngineToken::default())
    }
}

impl ModelSource for CancellableModels<'_> {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer + '_>, String> {
        self.models.completer_for(kind, config, self.token)
    }
}

impl CallModels<'_> {
    /// The completer for `kind`, for a call cancelled by `token`.
    fn completer_for(
        &self,
        kind: SummarizerKind,
        config: &Config,
        token: &EngineToken,
    ) -> Result<Box<dyn Completer + '_>, String> {
        match kind {
            SummarizerKind::Extractive => Err("the extractive summariser needs no model".into()),
            SummarizerKind::Openai => Ok(Box::new(OpenAiCompleter::from_config(config))),
            SummarizerKind::Upstream => Err(NO_UPSTREAM.into()),
            SummarizerKind::Client => {
                let declared = lock(&self.daemon.completing_clients).contains(&self.client.connection_id());
                if !declared {
                    return Err("the client did not declare summarizer_complete".into());
                }
                let timeout = Duration::from_secs_f64(config.summary.llm_timeout_secs);
                Ok(Box::new(ClientCompleter::new(
                    self.client.clone(),
                    timeout,
                    token.clone(),
                )))
            }
        }
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
