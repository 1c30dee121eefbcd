//! `context.usage`: the provider's input tokens for a session's last request, usually sent
//! as a notification right after the model call; the engine learns its correction from it.

use satchel_protocol::{Calibration, UsageParams};

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.usage`.
    pub fn usage(&self, params: UsageParams, scope: &CallScope) -> Result<Calibration, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().report_usage(ticket, params, &scope.token)?)
    }

    /// `context.usage` for a caller that is no JSON-RPC connection (the provider proxy).
    pub fn usage_detached(&self, params: UsageParams) -> Result<Calibration, RpcError> {
        let ticket = self.engine().ticket(&params.session_id)?;
        Ok(self
            .engine()
            .report_usage(ticket, params, &satchel_engine::CallToken::new())?)
    }
}
