//! The engine's only sources of time and of fresh ids, injected so that tests can fix them.
//!
//! Every clock read of the engine goes through [`Clock`] and every id it makes through
//! [`IdSource`]: compaction records carry both, and eviction orders sessions by time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Duration, Utc};

/// Tells the time.
pub trait Clock: Send + Sync {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// Makes the ids of compactions.
pub trait IdSource: Send + Sync {
    /// A new id, unique within the workspace.
    fn next_id(&self) -> String;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Random (version 4) UUIDs, in simple form.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_id(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// A clock that moves only when told to: for tests and reproducible runs.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn at(start: DateTime<Utc>) -> Self {
        ManualClock(Mutex::new(start))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ids `c0001`, `c0002`, …: for tests and reproducible runs.
#[derive(Debug, Default)]
pub struct SequentialIds(AtomicU64);

impl IdSource for SequentialIds {
    fn next_id(&self) -> String {
        format!("c{:04}", self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}
