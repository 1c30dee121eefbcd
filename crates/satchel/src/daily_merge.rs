//! The daily memory merge's schedule: wait for `memory_merge_time`, merge, repeat. The clock is
//! a parameter ([`crate::schedule::Clock`]), so a test can run a day's schedule without
//! waiting for it (the memory seam's `merge.rs` does). Without an index (the `memory` feature
//! or `memory_index_enabled` off) no merge is ever due.

use std::sync::Arc;

use crate::handlers::Daemon;
use crate::schedule::Clock;

/// Runs the daily memory merge at `memory_merge_time` (local), until the daemon stops; returns
/// at once when the merge is off.
pub async fn merge_daily(daemon: Arc<Daemon>, clock: impl Clock) {
    loop {
        let Some(at) = daemon.next_merge(clock.now()) else {
            return;
        };
        clock.sleep_until(at).await;
        let now = clock.now();
        let daemon = daemon.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.scheduled_merge(now)).await {
            tracing::warn!("the daily memory merge panicked: {e}");
        }
    }
}
