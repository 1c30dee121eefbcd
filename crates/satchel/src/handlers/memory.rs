//! `memory.*`: the memory files (write, append, get: always served) and their index (search,
//! merge, status: `memory_index.rs`, through the memory seam, [`crate::memory`]).
//!
//! Writes (and the merge) run one at a time in arrival order ([`LockScope::Memory`]): each
//! takes its place in the connection's arrival order, then the memory lock.
//!
//! [`LockScope::Memory`]: satchel_protocol::LockScope::Memory

use std::sync::MutexGuard;

use satchel_engine::EngineError;
use satchel_protocol::memory::{
    MemoryAppendParams, MemoryFileChange, MemoryGetParams, MemoryGetResult, MemoryWriteParams,
};
use satchel_storage::{MemoryFileInfo, MemoryFiles, MemoryLines};

use super::{Daemon, lock};
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `memory.write`.
    pub fn memory_write(&self, params: MemoryWriteParams, scope: &CallScope) -> Result<MemoryFileChange, RpcError> {
        checked_path(&params.path)?;
        let _turn = self.memory_turn(scope);
        let info = self
            .memory_files()
            .write(&params.path, &params.content)
            .map_err(storage)?;
        self.indexed(params.path, info)
    }

    /// `memory.append`.
    pub fn memory_append(&self, params: MemoryAppendParams, scope: &CallScope) -> Result<MemoryFileChange, RpcError> {
        checked_path(&params.path)?;
        let _turn = self.memory_turn(scope);
        let info = self
            .memory_files()
            .append(&params.path, &params.text)
            .map_err(storage)?;
        self.indexed(params.path, info)
    }

    /// `memory.get`: a memory file, or a file of a configured `memory_extra_paths` entry
    /// inside the workspace.
    pub fn memory_get(&self, params: MemoryGetParams) -> Result<MemoryGetResult, RpcError> {
        if params.start_line == Some(0) {
            return Err(RpcError::invalid_params("start_line", "lines are numbered from 1"));
        }
        let lines = if !MemoryFiles::is_memory_path(&params.path) && self.is_extra_path(&params.path) {
            let text = self.engine().workspace().read_text(&params.path).map_err(storage)?;
            satchel_storage::memory_lines(&text, params.start_line, params.end_line)
        } else {
            checked_path(&params.path)?;
            self.memory_files()
                .get(&params.path, params.start_line, params.end_line)
                .map_err(storage)?
        };
        let MemoryLines {
            start_line,
            end_line,
            total_lines,
            text,
        } = lines;
        Ok(MemoryGetResult {
            path: params.path,
            start_line,
            end_line,
            total_lines,
            text,
        })
    }

    /// The memory files of the workspace.
    pub(super) fn memory_files(&self) -> MemoryFiles {
        MemoryFiles::new(self.engine().workspace())
    }

    /// This call's turn on the memory files: its place in the connection's arrival order,
    /// then the memory lock, held until the call returns.
    pub(super) fn memory_turn(&self, scope: &CallScope) -> MutexGuard<'_, ()> {
        match scope.admission.take() {
            Some(admission) => admission.admit(|| lock(&self.memory_writes)),
            None => lock(&self.memory_writes),
        }
    }

    /// Whether `rel` is inside one of the configured `memory_extra_paths` (relative ones: an
    /// absolute one is outside the workspace, which clients cannot read).
    fn is_extra_path(&self, rel: &str) -> bool {
        self.engine()
            .config()
            .daemon
            .memory_index
            .memory_extra_paths
            .iter()
            .any(|extra| {
                let extra = extra.trim_end_matches('/');
                !extra.is_empty() && !extra.starts_with('/') && (rel == extra || rel.starts_with(&format!("{extra}/")))
            })
    }

    /// The reply to a write of `path`, after indexing it when there is an index. The file
    /// change is done by now, so the call succeeds whatever the index says (its warnings
    /// say when it is behind).
    fn indexed(&self, path: String, info: MemoryFileInfo) -> Result<MemoryFileChange, RpcError> {
        let (chunks_indexed, warnings) = self.memory.reindex(&path);
        Ok(MemoryFileChange {
            path,
            bytes: info.bytes,
            lines: info.lines,
            chunks_indexed,
            warnings,
        })
    }
}

/// A path a memory file cannot have (not a memory file, or past the file systems' limits) as
/// the caller's error about `path`, before anything touches the disk.
fn checked_path(rel: &str) -> Result<(), RpcError> {
    match MemoryFiles::path_problem(rel) {
        Some(why) => Err(RpcError::invalid_params("path", why)),
        None => Ok(()),
    }
}

/// A storage failure as the reply's error.
pub(super) fn storage(error: satchel_storage::StorageError) -> RpcError {
    RpcError::Engine(EngineError::Storage(error))
}
