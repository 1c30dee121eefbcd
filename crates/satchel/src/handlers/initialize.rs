//! `initialize`: the client declares its capabilities; the daemon answers with its own and
//! its configuration, secrets redacted ([`satchel_protocol::Config::for_clients`]).

use satchel_protocol::{InitializeParams, InitializeResult};

use super::{Daemon, lock};
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `initialize`.
    pub fn initialize(
        &self,
        params: InitializeParams,
        scope: &CallScope,
        methods: Vec<String>,
    ) -> Result<InitializeResult, RpcError> {
        if !scope.token.commit() {
            return Err(satchel_engine::EngineError::Cancelled.into());
        }
        let connection = scope.client.connection_id();
        let mut completing = lock(&self.completing_clients);
        if params.capabilities.summarizer_complete {
            completing.insert(connection);
        } else {
            completing.remove(&connection);
        }
        drop(completing);
        let mut progress = lock(&self.progress_clients);
        if params.capabilities.work_done_progress() {
            progress.insert(connection);
        } else {
            progress.remove(&connection);
        }
        drop(progress);
        if let Some(info) = &params.client_info {
            tracing::info!(client = %info, "initialize");
        }
        let engine = self.engine();
        Ok(InitializeResult {
            server_name: "satchel".into(),
            server_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: satchel_protocol::PROTOCOL_VERSION.into(),
            workspace: engine.workspace().root().display().to_string(),
            // Header values and URL credentials never leave the daemon; the API key is not in
            // the configuration at all (only the name of its variable).
            config: engine.config().for_clients(),
            methods,
        })
    }
}
