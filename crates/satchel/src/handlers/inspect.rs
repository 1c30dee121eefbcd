//! `context.inspect`: what satchel holds for a session and what it did, after the calls
//! queued on the session before it.

use satchel_protocol::{InspectParams, InspectResult};

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.inspect`.
    pub fn inspect(&self, params: InspectParams, scope: &CallScope) -> Result<InspectResult, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().inspect(ticket, params)?)
    }
}
