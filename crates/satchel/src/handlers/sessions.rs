//! `context.sessions`: every stored session, with numbers for those in memory.

use satchel_protocol::SessionsResult;

use super::Daemon;
use crate::error::RpcError;

impl Daemon {
    /// `context.sessions`.
    pub fn sessions(&self) -> Result<SessionsResult, RpcError> {
        Ok(self.engine().sessions()?)
    }
}
