//! Satchel's durable state, and the only crate besides the binary that touches the disk.
//!
//! Everything lives under one workspace directory, whose paths [`Layout`] names (and draws):
//! - `tool_result/<hash>.txt`: full texts of offloaded tool results, content-addressed so
//!   identical content is stored once, swept after `offload_retention_days` unless referenced;
//! - `sessions/<id>.jsonl`: one append-only log per session, so a restart (even after
//!   `kill -9`) loses no session;
//! - `dialog/<date>.jsonl`: the archive of compacted messages; `memory/<date>.md`: memory logs;
//! - `run/`: the lock, socket and discovery record of the daemon that owns the workspace;
//! - `config.json`: optional configuration file.
//!
//! Files are written atomically (temp + rename) and appends are fsync'd before a call returns.

mod dialog;
mod durable;
mod error;
mod layout;
mod memory;
mod offload;
mod sessions;
mod workspace;

pub use dialog::{AppendedLines, DialogArchive, DialogLine, DialogOffload, EncodedLines};
pub use durable::{PendingSync, append_durable, write_atomic};
pub use error::StorageError;
pub use layout::Layout;
pub use memory::MemoryFiles;
pub use offload::{OffloadStore, SavedText, SweepReport};
pub use sessions::{
    CompactionBegun, CompactionInfo, LogMark, SessionLog, SessionRecord, SessionStore, StoredMessage, StoredOffload,
};
pub use workspace::Workspace;
