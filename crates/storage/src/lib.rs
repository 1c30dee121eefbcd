//! Satchel's durable state, and the only crate besides the binary that touches the disk.
//!
//! Everything lives under one workspace directory, whose paths [`Layout`] names (and draws):
//! - `tool_result/<hash>.txt`: full texts of offloaded tool results, content-addressed so
//!   identical content is stored once, swept after `offload_retention_days` unless referenced;
//! - `sessions/<id>.jsonl`: one append-only log per session, so a restart (even after
//!   `kill -9`) loses no session;
//! - `dialog/<date>.jsonl`: the archive of compacted messages; `memory/<date>.md`: memory logs;
//! - `candidates.jsonl`: learning candidates, each line HMAC-SHA256-signed with the
//!   workspace's key `keys/candidates.key` (0600, never readable by a client call) ([`SignedStore`]);
//! - `run/`: the lock, socket and discovery record of the daemon that owns the workspace;
//! - `config.json`: optional configuration file.
//!
//! Files are written atomically (temp + rename) and appends are fsync'd before a call returns.
//! An append is all or nothing: one whose write or fsync fails (a full disk, an I/O error) is
//! cut back to the file's previous length before the error is reported, and no append is ever
//! written after a torn tail (see `durable`). [`failpoints`] injects such faults at every
//! durable step, for tests.
//!
//! Permissions: every directory satchel creates in the workspace is 0700 and every file 0600,
//! whatever the process umask; a workspace whose own subdirectories are symbolic links is
//! refused when it is opened ([`perms`]).

mod dialog;
mod durable;
mod error;
pub mod failpoints;
mod layout;
mod memory;
mod offload;
pub mod perms;
mod sessions;
mod signed;
mod workspace;

pub use dialog::{AppendedLines, DialogArchive, DialogLine, DialogOffload, EncodedLines};
pub use durable::{PendingSync, append_durable, remove_stale_temps, write_atomic};
pub use error::StorageError;
pub use layout::Layout;
pub use memory::{MEMORY_FILE, MemoryFileInfo, MemoryFiles, MemoryLines, memory_lines};
pub use offload::{OffloadStore, SavedText, SweepReport};
pub use sessions::{
    CompactionBegun, CompactionInfo, Expansion, LineRun, LogMark, PinRecord, PinTarget, SessionLog, SessionRecord,
    SessionStore, StoredMessage, StoredOffload,
};
pub use signed::{Loaded, Rejected, SignedStore, canonical_bytes};
pub use workspace::Workspace;
