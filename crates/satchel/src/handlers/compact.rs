//! `context.compact`: compact a session now, optionally steered by an instruction.

use satchel_protocol::{CompactParams, CompactResult};

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.compact`.
    pub fn compact(&self, mut params: CompactParams, scope: &CallScope) -> Result<CompactResult, RpcError> {
        // Without overrides of its own, the compaction runs under the session's configuration.
        let config = match params.config.as_ref() {
            Some(overrides) => Some(self.effective_config(Some(overrides))?),
            None => None,
        };
        let ticket = self.ticket(scope, &params.session_id)?;
        let session_id = params.session_id.clone();
        let work_done_token = params.work_done_token.take();
        let outcome = self.run_with_call(scope, &session_id, work_done_token, |call| {
            self.engine().compact_now(ticket, params, config.as_ref(), call)
        })?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }
}
