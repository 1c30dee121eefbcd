//! `context.prepare`: the pre-reasoning hook, run by the engine in the session's turn.

use satchel_core::limits::{MAX_JSON_DEPTH, too_deep_message, value_depth};
use satchel_engine::Prepared;
use satchel_protocol::PrepareParams;
use serde_json::value::RawValue;

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.prepare`.
    pub fn prepare(&self, mut params: PrepareParams<Box<RawValue>>, scope: &CallScope) -> Result<Prepared, RpcError> {
        check_depth(&params)?;
        if let Some(recall) = params.memory.take() {
            self.memory.add_recall(&mut params, &recall)?;
        }
        let config = self.effective_config(params.config.as_ref())?;
        let ticket = self.ticket(scope, &params.session_id)?;
        let session_id = params.session_id.clone();
        let work_done_token = params.work_done_token.take();
        let outcome = self.run_with_call(scope, &session_id, work_done_token, |call| {
            self.engine().prepare(ticket, params, &config, call)
        })?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }
}

/// Refuses a `system` value or tool definition nested past [`MAX_JSON_DEPTH`], before anything
/// is stored (the engine checks the messages it has not seen, before it hashes them).
fn check_depth(params: &PrepareParams<Box<RawValue>>) -> Result<(), RpcError> {
    if params.system.as_ref().is_some_and(|s| value_depth(s) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params("system", too_deep_message()));
    }
    let tools = params.tools.as_deref().unwrap_or_default();
    if let Some(index) = tools.iter().position(|t| value_depth(t) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params(&format!("tools[{index}]"), too_deep_message()));
    }
    Ok(())
}
