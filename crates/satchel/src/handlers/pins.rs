//! `context.pin`, `context.unpin`, `context.purge`: run by the engine in the session's turn.

use satchel_protocol::{PinParams, PinsResult, PurgeParams, PurgeResult, UnpinParams};

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.pin`.
    pub fn pin(&self, params: PinParams, scope: &CallScope) -> Result<PinsResult, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().pin(ticket, params)?)
    }

    /// `context.unpin`.
    pub fn unpin(&self, params: UnpinParams, scope: &CallScope) -> Result<PinsResult, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().unpin(ticket, params)?)
    }

    /// `context.purge`.
    pub fn purge(&self, params: PurgeParams, scope: &CallScope) -> Result<PurgeResult, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().purge(ticket, params)?)
    }
}
