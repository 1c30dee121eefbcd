//! The memory seam without the `memory` feature: the memory files still work (they need no
//! index), but there is no index to keep up to date, nothing to recall, no merge to schedule,
//! and the methods that search, merge or describe the index say that it is not built in.

use chrono::{DateTime, Local, NaiveDate};
use satchel_engine::ModelSource;
use satchel_protocol::memory::{MemoryMergeResult, MemorySearchParams, MemorySearchResult, MemoryStatusResult};
use satchel_protocol::{Config, MemoryRecall, PrepareParams};
use satchel_storage::{MemoryFiles, Workspace};
use serde_json::value::RawValue;

use crate::error::RpcError;

/// Why every call that needs the index is refused.
const WHY: &str = "this satchel was built without the `memory` feature";

/// The index methods are refused before their params are read.
pub const NOT_BUILT_IN: Option<&str> = Some(WHY);

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
        Err(unavailable())
    }

    /// There is nothing to search.
    pub fn search(&self, _: &MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        Err(unavailable())
    }

    /// There is no index to describe.
    pub fn status(&self, _next_merge: Option<String>) -> Result<MemoryStatusResult, RpcError> {
        Err(unavailable())
    }

    /// There is no index.
    pub fn require_index(&self) -> Result<(), RpcError> {
        Err(unavailable())
    }

    /// There is no index to merge into.
    pub fn merge(
        &self,
        _: &MemoryFiles,
        _: &Config,
        _through: NaiveDate,
        _stamp: &str,
        _: Option<&dyn ModelSource>,
    ) -> Result<MemoryMergeResult, RpcError> {
        Err(unavailable())
    }
}

/// No merge is ever due without the index.
pub fn next_merge(_: &Config, _now: DateTime<Local>) -> Option<DateTime<Local>> {
    None
}

fn unavailable() -> RpcError {
    RpcError::MemoryUnavailable(WHY.into())
}
