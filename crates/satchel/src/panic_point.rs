//! A panic on purpose at the start of a method's handler, to prove in a black-box test that a
//! handler which panics is still answered (-32603, see `rpc::guarded`).
//!
//! Inert unless the environment variable [`ENV_VAR`] names methods (comma-separated, e.g.
//! `memory.get,context.prepare`); it is read once, and the daemon warns at start-up when it is
//! set. Like `SATCHEL_FAILPOINTS`, it is for tests only: never set it in production.

use std::sync::OnceLock;

/// The variable naming the methods whose handler panics.
pub const ENV_VAR: &str = "SATCHEL_PANIC_METHODS";

/// The methods named by [`ENV_VAR`], read once.
fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var(ENV_VAR)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// Warns when the variable is set, so that a daemon panicking on purpose says so in its log.
pub fn warn_if_armed() {
    if !armed().is_empty() {
        tracing::warn!("{ENV_VAR} is set: the handlers of {:?} will panic on purpose", armed());
    }
}

/// Panics if `method` is named by [`ENV_VAR`].
pub fn check(method: &str) {
    if armed().iter().any(|m| m == method) {
        panic!("{ENV_VAR}: {method} panics on purpose");
    }
}
