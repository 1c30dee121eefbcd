//! Satchel's pure context-window logic.
//!
//! Everything here is a function of its inputs: messages, configuration, and (where time
//! matters) a `now` passed in. No tokio, no file system, no clock — the daemon applies the
//! decisions made here and `satchel-storage` persists them. CI proves the purity with
//! `! cargo tree -p satchel-core -e normal -i tokio`.

pub mod budget_note;
pub mod calibration;
pub mod candidates;
pub mod compact;
pub mod format;
pub mod hash;
pub mod limits;
pub mod offload;
pub mod phase0;
pub mod pins;
pub mod prompt;
pub mod prune;
pub mod render;
pub mod repair;
pub mod slice;
pub mod summary;
pub mod tokens;
pub mod truncate;
pub mod zones;
