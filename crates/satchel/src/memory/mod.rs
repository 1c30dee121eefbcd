//! Long-term memory search in the binary: the one seam of the `memory` feature.
//!
//! The rest of the binary calls the same API whether the feature is built in or not, and this
//! file alone chooses which implementation it gets (ripgrep's way with its optional engines):
//!
//! - `enabled/` (`satchel-memory`): the index of the memory files with its watcher and
//!   embedding backend (`mod.rs`), the changes it could not take, retried (`catch_up.rs`),
//!   the recall section of `context.prepare` (`recall.rs`) and the daily merge (`merge.rs`);
//! - `disabled.rs`: the same API without it: no index to update, nothing to recall, no merge
//!   ever due, and search, status and merge answer `MemoryUnavailable` (-32010).
//!
//! The API: [`Memory`], the daemon's index or its absence (`open`; `reindex` after a memory
//! file changed; `add_recall` for `context.prepare`'s `memory` param; `search`, `status`,
//! `merge` for the methods of the same names), [`next_merge`] (when the schedule merges next)
//! and [`NOT_BUILT_IN`] (why a build without the index refuses its methods whatever their
//! params). The seam sits below the handlers and imports none of them: `handlers/memory.rs`
//! (the memory files, which need no index) and `handlers/memory_index.rs` call it, and
//! `daily_merge.rs` runs the schedule.

#[cfg(feature = "memory")]
mod enabled;
#[cfg(feature = "memory")]
pub use enabled::{Memory, NOT_BUILT_IN, next_merge};

#[cfg(not(feature = "memory"))]
mod disabled;
#[cfg(not(feature = "memory"))]
pub use disabled::{Memory, NOT_BUILT_IN, next_merge};
