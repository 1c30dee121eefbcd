//! `context.watch`: a connection follows a session's events (`context.event`).

use satchel_protocol::{WatchParams, WatchResult};
use satchel_storage::SessionStore;

use super::{Daemon, lock};
use crate::error::RpcError;
use crate::transport::{CallScope, ClientHandle};

impl Daemon {
    /// `context.watch`: events of the session go to this connection from now on.
    pub fn watch(&self, params: WatchParams, scope: &CallScope) -> Result<WatchResult, RpcError> {
        SessionStore::validate_id(&params.session_id).map_err(|e| RpcError::invalid_params("session_id", e))?;
        if !scope.token.commit() {
            return Err(satchel_engine::EngineError::Cancelled.into());
        }
        let mut watchers = lock(&self.watchers);
        let list = watchers.entry(params.session_id).or_default();
        list.retain(ClientHandle::is_connected);
        list.push(scope.client.clone());
        Ok(WatchResult { watching: true })
    }
}
