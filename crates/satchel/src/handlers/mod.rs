//! The method handlers: each turns a call's params into an engine call and its outcome into
//! a reply, and tells the session's watchers what changed. One file per method.
//!
//! The engine does the work; what is here is what the engine must not know: connections
//! (which client declared `summarizer_complete`, who watches which session), the model
//! backends a compaction may use, and `$/progress` notifications.

mod compact;
mod initialize;
mod inspect;
mod memory;
#[cfg(feature = "memory")]
mod memory_index;
mod prepare;
mod read;
mod sessions;
mod usage;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use satchel_core::summary::llm::Completer;
use satchel_engine::{CallContext, Engine, EngineError, ModelSource, ProgressSink, Ticket};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{Config, ContextEvent};
use serde_json::{Map, Value};

#[cfg(feature = "memory")]
pub use memory_index::next_merge;

use crate::config::apply_overrides;
use crate::error::RpcError;
use crate::llm::{ClientCompleter, OpenAiCompleter};
use crate::transport::{CallScope, ClientHandle};

/// The engine, and what the daemon keeps per connection.
pub struct Daemon {
    engine: Engine,
    /// Connections whose client declared `summarizer_complete` in `initialize`; a connection
    /// leaves when it closes.
    completing_clients: Mutex<HashSet<u64>>,
    /// Connections following a session (`context.watch`), by session.
    watchers: Mutex<HashMap<String, Vec<ClientHandle>>>,
    /// Held by the memory write in progress (`memory.write`, `memory.append`, a merge):
    /// they run one at a time.
    memory_writes: Mutex<()>,
    /// The memory index; `None` when `memory_index_enabled` is false.
    #[cfg(feature = "memory")]
    memory: Option<Arc<crate::memory::MemoryService>>,
}

impl Daemon {
    /// A daemon serving `engine`.
    pub fn new(engine: Engine) -> Self {
        Daemon {
            engine,
            completing_clients: Mutex::default(),
            watchers: Mutex::default(),
            memory_writes: Mutex::default(),
            #[cfg(feature = "memory")]
            memory: None,
        }
    }

    /// The daemon with the memory index `memory`.
    #[cfg(feature = "memory")]
    pub fn with_memory(mut self, memory: Option<Arc<crate::memory::MemoryService>>) -> Self {
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
    /// `$/progress` of a model summary, and its cancellation.
    fn run_with_call<T>(
        &self,
        scope: &CallScope,
        session_id: &str,
        run: impl FnOnce(&CallContext<'_>) -> Result<T, EngineError>,
    ) -> Result<T, RpcError> {
        let models = CallModels {
            daemon: self,
            client: &scope.client,
        };
        let call = CallContext {
            models: &models,
            progress: progress_sink(scope.client.clone(), session_id),
            token: scope.token.clone(),
            max_result_bytes: Some(scope.max_result_bytes),
        };
        Ok(run(&call)?)
    }
}

/// The model backends one call may use.
struct CallModels<'a> {
    daemon: &'a Daemon,
    client: &'a ClientHandle,
}

impl ModelSource for CallModels<'_> {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer>, String> {
        match kind {
            SummarizerKind::Extractive => Err("the extractive summariser needs no model".into()),
            SummarizerKind::Openai => Ok(Box::new(OpenAiCompleter::from_config(config))),
            SummarizerKind::Client => {
                let declared = lock(&self.daemon.completing_clients).contains(&self.client.connection_id());
                if !declared {
                    return Err("the client did not declare summarizer_complete".into());
                }
                let timeout = Duration::from_secs_f64(config.llm_timeout_secs);
                Ok(Box::new(ClientCompleter::new(self.client.clone(), timeout)))
            }
        }
    }
}

/// Reports the stages of a model summary to the calling client as LSP `$/progress`.
fn progress_sink(client: ClientHandle, session_id: &str) -> ProgressSink {
    let token = format!("compaction:{session_id}");
    Arc::new(move |stage: usize, stages: usize| {
        client.notify(
            "$/progress",
            serde_json::json!({"token": token, "value": {
                "kind": "report",
                "message": format!("summarising stage {stage} of {stages}"),
                "percentage": (100 * stage.saturating_sub(1)) / stages.max(1),
            }}),
        );
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
