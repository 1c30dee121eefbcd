//! The memory seam without the `memory` feature: the memory files still work (they need no
//! index), but there is no index to keep up to date, nothing to recall, and the methods that
//! search, merge or describe the index say that it is not built in.

use std::sync::Arc;

use jsonrpsee::RpcModule;
use jsonrpsee::core::RegisterMethodError;
use jsonrpsee::types::ErrorObjectOwned;
use satchel_protocol::{Config, MemoryRecall, MethodKind, PrepareParams};
use satchel_storage::Workspace;
use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::handlers::Daemon;
use crate::schedule::Clock;

/// Why a call that needs the index is refused.
const NOT_BUILT_IN: &str = "this satchel was built without the `memory` feature";

/// No memory index: this satchel was built without one.
pub struct Memory;

impl Memory {
    /// No index.
    pub fn none() -> Memory {
        Memory
    }

    /// Nothing to open.
    pub fn open(_: &Workspace, _: &Config, _env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Memory> {
        Ok(Memory)
    }

    /// There is no index to update: no chunks, no warnings.
    pub fn reindex(&self, _rel: &str) -> (usize, Vec<String>) {
        (0, Vec::new())
    }

    /// There is nothing to recall from.
    pub fn add_recall(&self, _: &mut PrepareParams<Box<RawValue>>, _: &MemoryRecall) -> Result<(), RpcError> {
        Err(RpcError::MemoryUnavailable(NOT_BUILT_IN.into()))
    }
}

/// Registers `kind` (`memory.search`, `memory.merge` or `memory.status`) as a method that
/// answers, whatever its params, that the index is not built in.
pub fn register_index_method(module: &mut RpcModule<Daemon>, kind: MethodKind) -> Result<(), RegisterMethodError> {
    module.register_method(kind.name(), |_, _, _| {
        Err::<(), _>(ErrorObjectOwned::from(RpcError::MemoryUnavailable(NOT_BUILT_IN.into())))
    })?;
    Ok(())
}

/// There is no daily merge without the index: returns at once, as the schedule does when the
/// merge is off.
pub async fn merge_daily(_: Arc<Daemon>, _: impl Clock) {}
