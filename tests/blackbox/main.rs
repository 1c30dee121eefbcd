//! The black-box tests, one binary: each test spawns the real `satchel` binary on a fresh
//! temporary workspace and talks to it the way a client does (JSON-RPC over stdio or the Unix
//! socket, the `satchel inspect` CLI). `support` is the shared harness: the daemon and socket
//! clients, the message builders and the checks every module uses.
//!
//! Run one module with a filter, e.g. `cargo test -p satchel --test blackbox socket::`. A filter
//! matches anywhere in a test's path, so `compaction::` also runs `replay_compaction::`; add
//! `-- --skip replay_compaction::` to leave those out.

mod support;

mod agents;
mod assembly;
mod basics;
mod cache_prefix;
mod campaigns;
mod candidates;
mod cli;
mod compaction;
mod conformance;
mod continuity;
mod expand;
mod hardening_storage;
mod inspect;
mod limits;
mod llm;
mod memory;
mod memory_integrity;
mod pins;
mod progress;
mod protocol_examples;
mod proxy;
mod pruning;
mod refusals;
mod render_key;
mod replay;
mod replay_compaction;
mod secrets;
mod socket;
mod summary_window;
mod transactions;
