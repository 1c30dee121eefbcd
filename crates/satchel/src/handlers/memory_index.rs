//! `memory.search`, `memory.merge` and `memory.status`: the calls that need the memory index
//! (the `memory` feature). Without the feature, or with `memory_index_enabled` false, they
//! answer `MemoryUnavailable` (-32010).

use chrono::{DateTime, Datelike, Days, Local, NaiveDate, NaiveTime, TimeZone};
use satchel_memory::merge::{DailyLog, merge};
use satchel_protocol::Config;
use satchel_protocol::memory::{
    MemoryMergeParams, MemoryMergeResult, MemorySearchParams, MemorySearchResult, MemoryStatusParams,
    MemoryStatusResult,
};

use super::Daemon;
use crate::error::RpcError;
use crate::memory::MemoryService;
use crate::transport::CallScope;

impl Daemon {
    /// `memory.search`.
    pub fn memory_search(&self, params: MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        self.memory_service()?.search(&params)
    }

    /// `memory.status`.
    pub fn memory_status(&self, _: MemoryStatusParams) -> Result<MemoryStatusResult, RpcError> {
        let next = next_merge(self.engine().config(), Local::now()).map(|at| at.to_rfc3339());
        Ok(self.memory_service()?.status(next))
    }

    /// `memory.merge`: folds the daily logs of the `memory_merge_days` days up to `through`
    /// (default today) into `MEMORY.md`.
    pub fn memory_merge(&self, params: MemoryMergeParams, scope: &CallScope) -> Result<MemoryMergeResult, RpcError> {
        let through = match params.through.as_deref() {
            Some(day) => NaiveDate::parse_from_str(day, "%Y-%m-%d")
                .map_err(|_| RpcError::invalid_params("through", "must be a date, YYYY-MM-DD"))?,
            None => Local::now().date_naive(),
        };
        let memory = self.memory_service()?;
        let _turn = self.memory_turn(scope);
        self.merge_through(memory, through, &Local::now().format("%Y%m%dT%H%M%S").to_string())
    }

    /// The daily merge at its time: everything up to yesterday's log (today's is still
    /// being written).
    pub fn scheduled_merge(&self, now: DateTime<Local>) {
        let Ok(memory) = self.memory_service() else { return };
        let _turn = super::lock(&self.memory_writes);
        let yesterday = now.date_naive() - Days::new(1);
        match self.merge_through(memory, yesterday, &now.format("%Y%m%dT%H%M%S").to_string()) {
            Ok(result) => tracing::info!(added = result.added, logs = result.merged.len(), "daily memory merge"),
            Err(e) => tracing::warn!("daily memory merge failed: {e}"),
        }
    }

    fn merge_through(
        &self,
        memory: &MemoryService,
        through: NaiveDate,
        stamp: &str,
    ) -> Result<MemoryMergeResult, RpcError> {
        let files = self.memory_files();
        let days = self.engine().config().memory_merge_days;
        let mut logs = Vec::new();
        for back in (0..days).rev() {
            let day = (through - Days::new(u64::from(back))).format("%Y-%m-%d").to_string();
            if let Some(text) = files.read_daily(&day).map_err(super::memory::storage)? {
                logs.push(DailyLog {
                    path: satchel_storage::Layout::memory_daily_rel(&day),
                    text,
                });
            }
        }
        let before = files.read_memory_file().map_err(super::memory::storage)?;
        let merged = merge(&before, &logs);
        let backup = if merged.memory == before {
            None
        } else {
            let backup = files
                .replace_memory_file(&merged.memory, stamp)
                .map_err(super::memory::storage)?;
            memory.reindex(satchel_storage::MEMORY_FILE)?;
            backup
        };
        Ok(MemoryMergeResult {
            merged: logs.into_iter().map(|log| log.path).collect(),
            added: merged.added,
            duplicates: merged.duplicates,
            backup,
            summarizer: "extractive".into(),
        })
    }

    /// The memory index, or why there is none.
    fn memory_service(&self) -> Result<&MemoryService, RpcError> {
        self.memory.as_deref().ok_or_else(|| {
            RpcError::MemoryUnavailable("memory_index_enabled is false in this daemon's configuration".into())
        })
    }
}

/// When the next daily merge after `now` runs, `None` when it is off (or there is no index).
pub fn next_merge(config: &Config, now: DateTime<Local>) -> Option<DateTime<Local>> {
    if !config.memory_merge_enabled || !config.memory_index_enabled {
        return None;
    }
    let (hour, minute) = config.merge_time()?;
    next_at(now, NaiveTime::from_hms_opt(hour, minute, 0)?)
}

/// The first instant after `now` whose local time is `time`, skipping a day whose `time` does
/// not exist (a daylight-saving gap).
fn next_at<Tz: TimeZone>(now: DateTime<Tz>, time: NaiveTime) -> Option<DateTime<Tz>> {
    let zone = now.timezone();
    (0..3).find_map(|days| {
        let day = now.date_naive().checked_add_days(Days::new(days))?;
        let at = zone.from_local_datetime(&day.and_time(time)).earliest()?;
        (at > now && at.date_naive().day() == day.day()).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    #[test]
    fn the_next_merge_is_today_if_its_time_is_still_ahead_else_tomorrow() {
        let zone = FixedOffset::east_opt(3600).unwrap();
        let morning = zone.with_ymd_and_hms(2026, 11, 24, 8, 0, 0).unwrap();
        let midnight = NaiveTime::from_hms_opt(0, 0, 0).unwrap();
        let nine = NaiveTime::from_hms_opt(9, 0, 0).unwrap();
        assert_eq!(
            next_at(morning, midnight).unwrap(),
            zone.with_ymd_and_hms(2026, 11, 25, 0, 0, 0).unwrap()
        );
        assert_eq!(
            next_at(morning, nine).unwrap(),
            zone.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap()
        );
        let exactly = zone.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap();
        assert_eq!(
            next_at(exactly, nine).unwrap(),
            zone.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap()
        );
    }

    #[test]
    fn no_merge_is_scheduled_when_it_is_off() {
        let config = Config {
            memory_merge_enabled: false,
            ..Config::default()
        };
        assert_eq!(next_merge(&config, Local::now()), None);
    }
}
