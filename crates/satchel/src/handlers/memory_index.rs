//! `memory.search`, `memory.merge` and `memory.status`: the calls that need the memory index,
//! served through the memory seam ([`crate::memory`]). Without the `memory` feature, or with
//! `memory_index_enabled` false, they answer `MemoryUnavailable` (-32010).

use chrono::{DateTime, Datelike, Days, Local, NaiveDate};
use satchel_protocol::memory::{
    MemoryMergeParams, MemoryMergeResult, MemorySearchParams, MemorySearchResult, MemoryStatusParams,
    MemoryStatusResult,
};

use super::{CallModels, Daemon};
use crate::error::RpcError;
use crate::memory;
use crate::transport::CallScope;

impl Daemon {
    /// `memory.search`.
    pub fn memory_search(&self, params: MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        self.memory.search(&params)
    }

    /// `memory.status`.
    pub fn memory_status(&self, _: MemoryStatusParams) -> Result<MemoryStatusResult, RpcError> {
        let next = self.next_merge(Local::now()).map(|at| at.to_rfc3339());
        self.memory.status(next)
    }

    /// `memory.merge`: folds the daily logs of the `memory_merge_days` days up to `through`
    /// (default today) into `MEMORY.md`, consolidated by the configured summariser's model
    /// (`client`: this connection's client, if it declared `summarizer_complete`).
    pub fn memory_merge(&self, params: MemoryMergeParams, scope: &CallScope) -> Result<MemoryMergeResult, RpcError> {
        let through = match params.through.as_deref() {
            Some(day) => NaiveDate::parse_from_str(day, "%Y-%m-%d")
                .ok()
                .filter(|date| (1..=9999).contains(&date.year()))
                .ok_or_else(|| {
                    RpcError::invalid_params("through", "must be a date from 0001-01-01 to 9999-12-31, YYYY-MM-DD")
                })?,
            None => Local::now().date_naive(),
        };
        let config = self.engine().config();
        let days = config.daemon.memory_index.memory_merge_days;
        if first_day(through, days).is_none_or(|first| first.year() < 1) {
            return Err(RpcError::invalid_params(
                "through",
                format!("the merge reads the {days} days up to it, which must start on or after 0001-01-01"),
            ));
        }
        self.memory.require_index()?;
        let _turn = self.memory_turn(scope);
        let stamp = Local::now().format("%Y%m%dT%H%M%S").to_string();
        let models = CallModels {
            daemon: self,
            client: &scope.client,
        };
        self.memory
            .merge(&self.memory_files(), config, through, &stamp, Some(&models))
    }

    /// The daily merge at its time: everything up to yesterday's log (today's is still
    /// being written). There is no client to ask, so with `summarizer: client` it is
    /// extractive.
    pub fn scheduled_merge(&self, now: DateTime<Local>) {
        if self.memory.require_index().is_err() {
            return;
        }
        let _turn = super::lock(&self.memory_writes);
        let yesterday = now.date_naive() - Days::new(1);
        let stamp = now.format("%Y%m%dT%H%M%S").to_string();
        match self
            .memory
            .merge(&self.memory_files(), self.engine().config(), yesterday, &stamp, None)
        {
            Ok(result) => {
                for warning in &result.warnings {
                    tracing::warn!("daily memory merge: {warning}");
                }
                tracing::info!(
                    added = result.added,
                    logs = result.merged.len(),
                    summarizer = result.summarizer,
                    "daily memory merge"
                );
            }
            Err(e) => tracing::warn!("daily memory merge failed: {e}"),
        }
    }

    /// When the next daily merge after `now` runs, `None` when it is off (or there is no index).
    pub fn next_merge(&self, now: DateTime<Local>) -> Option<DateTime<Local>> {
        memory::next_merge(self.engine().config(), now)
    }
}

/// The first day the merge of the `days` days up to `through` reads; `None` when it is before
/// any date there is.
fn first_day(through: NaiveDate, days: u32) -> Option<NaiveDate> {
    through.checked_sub_days(Days::new(u64::from(days.saturating_sub(1))))
}
