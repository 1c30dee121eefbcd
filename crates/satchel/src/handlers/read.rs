//! `context.read`: a slice of a workspace file (an offloaded tool result, an archive).

use satchel_protocol::{ReadParams, ReadResult};

use super::Daemon;
use crate::error::RpcError;

impl Daemon {
    /// `context.read`.
    pub fn read(&self, params: ReadParams) -> Result<ReadResult, RpcError> {
        Ok(self.engine().read(params)?)
    }
}
