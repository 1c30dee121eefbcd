//! `memory.search`, `memory.merge` and `memory.status`: the calls that need the memory index.
//! With `memory_index_enabled` false they answer `MemoryUnavailable` (-32010), as they do
//! without the `memory` feature (`disabled.rs`).

use chrono::{DateTime, Datelike, Days, Local, NaiveDate, NaiveTime, TimeZone};
use jsonrpsee::RpcModule;
use jsonrpsee::core::RegisterMethodError;
use satchel_core::summary::llm::{ChatMessage, Completer};
use satchel_core::tokens::TokenCounter;
use satchel_engine::{EngineError, ModelSource};
use satchel_memory::merge::{
    CONSOLIDATION_SYSTEM, DailyLog, Merged, NewEntries, consolidated, consolidation_prompt, extractive, new_entries,
};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::memory::{
    MemoryMergeParams, MemoryMergeResult, MemorySearchParams, MemorySearchResult, MemoryStatusParams,
    MemoryStatusResult,
};
use satchel_protocol::{Config, MemoryMerge, MemorySearch, MemoryStatus, MethodKind};

use super::MemoryService;
use crate::error::RpcError;
use crate::handlers::{CallModels, Daemon};
use crate::llm::OpenAiCompleter;
use crate::rpc::register;
use crate::transport::{CallScope, ClientHandle};

/// Registers `kind`, one of the methods that need the memory index.
pub fn register_index_method(module: &mut RpcModule<Daemon>, kind: MethodKind) -> Result<(), RegisterMethodError> {
    match kind {
        MethodKind::MemorySearch => {
            register::<MemorySearch, _, _, _>(module, |daemon, params, _| daemon.memory_search(params))
        }
        MethodKind::MemoryMerge => {
            register::<MemoryMerge, _, _, _>(module, |daemon, params, scope| daemon.memory_merge(params, scope))
        }
        MethodKind::MemoryStatus => {
            register::<MemoryStatus, _, _, _>(module, |daemon, params, _| daemon.memory_status(params))
        }
        other => unreachable!("{} does not need the memory index", other.name()),
    }
}

impl Daemon {
    /// `memory.search`.
    fn memory_search(&self, params: MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        self.memory().service()?.search(&params)
    }

    /// `memory.status`.
    fn memory_status(&self, _: MemoryStatusParams) -> Result<MemoryStatusResult, RpcError> {
        let next = next_merge(self.engine().config(), Local::now()).map(|at| at.to_rfc3339());
        Ok(self.memory().service()?.status(next))
    }

    /// `memory.merge`: folds the daily logs of the `memory_merge_days` days up to `through`
    /// (default today) into `MEMORY.md`, consolidated by the configured summariser's model
    /// (`client`: this connection's client, if it declared `summarizer_complete`).
    fn memory_merge(&self, params: MemoryMergeParams, scope: &CallScope) -> Result<MemoryMergeResult, RpcError> {
        let through = match params.through.as_deref() {
            Some(day) => NaiveDate::parse_from_str(day, "%Y-%m-%d")
                .ok()
                .filter(|date| (1..=9999).contains(&date.year()))
                .ok_or_else(|| {
                    RpcError::invalid_params("through", "must be a date from 0001-01-01 to 9999-12-31, YYYY-MM-DD")
                })?,
            None => Local::now().date_naive(),
        };
        let days = self.engine().config().memory_merge_days;
        if first_day(through, days).is_none_or(|first| first.year() < 1) {
            return Err(RpcError::invalid_params(
                "through",
                format!("the merge reads the {days} days up to it, which must start on or after 0001-01-01"),
            ));
        }
        let memory = self.memory().service()?;
        let _turn = self.memory_turn(scope);
        let stamp = Local::now().format("%Y%m%dT%H%M%S").to_string();
        self.merge_through(memory, through, &stamp, Some(&scope.client))
    }

    /// The daily merge at its time: everything up to yesterday's log (today's is still
    /// being written). There is no client to ask, so with `summarizer: client` it is
    /// extractive.
    pub(super) fn scheduled_merge(&self, now: DateTime<Local>) {
        let Ok(memory) = self.memory().service() else { return };
        let _turn = self.memory_lock();
        let yesterday = now.date_naive() - Days::new(1);
        match self.merge_through(memory, yesterday, &now.format("%Y%m%dT%H%M%S").to_string(), None) {
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

    /// Merges the logs of the `memory_merge_days` days up to `through`; `client` is the calling
    /// connection, `None` for the scheduled merge.
    fn merge_through(
        &self,
        memory: &MemoryService,
        through: NaiveDate,
        stamp: &str,
        client: Option<&ClientHandle>,
    ) -> Result<MemoryMergeResult, RpcError> {
        let files = self.memory_files();
        let days = self.engine().config().memory_merge_days;
        let mut logs = Vec::new();
        for back in (0..days).rev() {
            // `memory.merge` checked the range; the scheduled merge's is today's.
            let Some(day) = through.checked_sub_days(Days::new(u64::from(back))) else {
                continue;
            };
            let day = day.format("%Y-%m-%d").to_string();
            if let Some(text) = files.read_daily(&day).map_err(EngineError::from)? {
                logs.push(DailyLog {
                    path: satchel_storage::Layout::memory_daily_rel(&day),
                    text,
                });
            }
        }
        let before = files.read_memory_file().map_err(EngineError::from)?;
        let new = new_entries(&before, &logs);
        let (merged, summarizer, mut warnings) = self.consolidate(&before, &new, client);
        let backup = if merged.memory == before {
            None
        } else {
            let backup = files
                .replace_memory_file(&merged.memory, stamp)
                .map_err(EngineError::from)?;
            warnings.extend(memory.reindex(satchel_storage::MEMORY_FILE).1);
            backup
        };
        Ok(MemoryMergeResult {
            merged: logs.into_iter().map(|log| log.path).collect(),
            added: merged.added,
            duplicates: merged.duplicates,
            backup,
            summarizer,
            warnings,
        })
    }

    /// `memory` with the `new` entries, consolidated by the configured model when there is one
    /// and something to merge; on any failure of the model, the extractive merge and why. Also
    /// returns which summariser wrote the entries.
    fn consolidate(
        &self,
        memory: &str,
        new: &NewEntries,
        client: Option<&ClientHandle>,
    ) -> (Merged, String, Vec<String>) {
        let config = self.engine().config();
        let backend = match config.summarizer {
            SummarizerKind::Extractive => None,
            SummarizerKind::Openai => Some("openai"),
            // The scheduled merge has no connection to ask.
            SummarizerKind::Client => client.map(|_| "client"),
        };
        let Some(backend) = backend.filter(|_| new.count() > 0) else {
            return (extractive(memory, new), "extractive".into(), Vec::new());
        };
        match self.consolidate_with_model(memory, new, client, config) {
            Ok(merged) => {
                tracing::info!(backend, entries = new.count(), "memory merge consolidated by the model");
                (merged, backend.into(), Vec::new())
            }
            Err(why) => {
                let warning =
                    format!("the {backend} summariser did not merge the entries ({why}); they were merged as written");
                tracing::warn!("memory merge: {warning}");
                (extractive(memory, new), "extractive".into(), vec![warning])
            }
        }
    }

    /// Asks the configured model to consolidate `new` with `memory`, one request; `Err` says
    /// why it could not (already redacted of the endpoint's secrets).
    fn consolidate_with_model(
        &self,
        memory: &str,
        new: &NewEntries,
        client: Option<&ClientHandle>,
        config: &Config,
    ) -> Result<Merged, String> {
        let completer: Box<dyn Completer> = match client {
            Some(client) => CallModels { daemon: self, client }.completer(config.summarizer, config)?,
            None => Box::new(OpenAiCompleter::from_config(config)),
        };
        let prompt = consolidation_prompt(memory, new);
        let counter = TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
        let tokens = counter.count_text(CONSOLIDATION_SYSTEM) + counter.count_text(&prompt);
        if tokens > config.llm_input_budget_tokens {
            return Err(format!(
                "the request, {tokens} tokens, is over llm_input_budget_tokens ({})",
                config.llm_input_budget_tokens
            ));
        }
        let messages = [ChatMessage::system(CONSOLIDATION_SYSTEM), ChatMessage::user(prompt)];
        let reply = completer
            .complete(&messages, config.llm_max_output_tokens)
            .map_err(|e| e.to_string())?;
        consolidated(memory, new, &reply).map_err(|why| format!("unusable reply: {why}"))
    }
}

/// The first day the merge of the `days` days up to `through` reads; `None` when it is before
/// any date there is.
fn first_day(through: NaiveDate, days: u32) -> Option<NaiveDate> {
    through.checked_sub_days(Days::new(u64::from(days.saturating_sub(1))))
}

/// When the next daily merge after `now` runs, `None` when it is off (or there is no index).
pub(super) fn next_merge(config: &Config, now: DateTime<Local>) -> Option<DateTime<Local>> {
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
