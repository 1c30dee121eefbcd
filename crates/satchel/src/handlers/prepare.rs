//! `context.prepare`: the pre-reasoning hook, run by the engine in the session's turn.

use satchel_engine::Prepared;
use satchel_protocol::PrepareParams;
use serde_json::value::RawValue;

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.prepare`.
    pub fn prepare(&self, params: PrepareParams<Box<RawValue>>, scope: &CallScope) -> Result<Prepared, RpcError> {
        let config = self.effective_config(params.config.as_ref())?;
        let ticket = self.ticket(scope, &params.session_id)?;
        let session_id = params.session_id.clone();
        let outcome = self.run_with_call(scope, &session_id, |call| {
            self.engine().prepare(ticket, params, &config, call)
        })?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }
}
