//! The subcommands other than `serve`, each a client of a daemon or of the workspace's files:
//!
//! - `inspect/`: `satchel inspect`, a session's context (or the memory index) from a running
//!   daemon, over its socket;
//! - `demo.rs`: `satchel demo`, the bundled conversation through a `satchel serve` it spawns;
//! - `config.rs`: `satchel config`, every configuration key as a daemon would read it (no
//!   daemon involved);
//! - `client.rs`: the one blocking JSON-RPC client the first two speak through.
//!
//! They print for a person at a terminal; the daemon's own code never does.

pub mod client;
pub mod config;
pub mod demo;
pub mod inspect;
