//! `context.expand`: bring a compacted span back into the next request, in the session's turn.

use satchel_protocol::{ExpandParams, ExpandResult};

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.expand`.
    pub fn expand(&self, params: ExpandParams, scope: &CallScope) -> Result<ExpandResult, RpcError> {
        let ticket = self.ticket(scope, &params.session_id)?;
        Ok(self.engine().expand(ticket, params)?)
    }
}
