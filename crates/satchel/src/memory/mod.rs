//! Long-term memory search in the binary: the one seam of the `memory` feature.
//!
//! The rest of the binary calls the same API whether the feature is built in or not, and this
//! file alone chooses which implementation it gets (ripgrep's way with its optional engines):
//!
//! - `enabled/` (`satchel-memory`): the index of the memory files with its watcher and
//!   embedding backend (`mod.rs`), the changes it could not take, retried (`catch_up.rs`),
//!   the recall section of `context.prepare` (`recall.rs`), `memory.search`, `memory.merge`
//!   and `memory.status` (`methods.rs`) and the daily merge's schedule (`daily_merge.rs`);
//! - `disabled.rs`: the same API without it: no index to update, nothing to recall, the three
//!   index methods answer `MemoryUnavailable` (-32010), no schedule.
//!
//! The API: [`Memory`] (the daemon's index, or its absence: `open`, `reindex` after a memory
//! file changed, `add_recall` for `context.prepare`'s `memory` param), [`register_index_method`]
//! (registers one of the three index methods) and [`merge_daily`] (the schedule). The memory
//! files themselves need no index: `handlers/memory.rs` serves them in both builds.

#[cfg(feature = "memory")]
mod enabled;
#[cfg(feature = "memory")]
pub use enabled::{Memory, merge_daily, register_index_method};

#[cfg(not(feature = "memory"))]
mod disabled;
#[cfg(not(feature = "memory"))]
pub use disabled::{Memory, merge_daily, register_index_method};
