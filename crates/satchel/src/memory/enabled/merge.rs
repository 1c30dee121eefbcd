//! The daily merge of the memory logs into `MEMORY.md` (`memory.merge`, and the daemon's
//! schedule): which logs, the new entries (`satchel_memory::merge`, pure), consolidated by the
//! configured model when there is one, and the index brought up to date; and when the next
//! scheduled merge runs.

use chrono::{DateTime, Datelike, Days, Local, NaiveDate, NaiveTime, TimeZone};
use satchel_core::summary::llm::{ChatMessage, Completer};
use satchel_core::tokens::TokenCounter;
use satchel_engine::{EngineError, ModelSource};
use satchel_memory::merge::{
    CONSOLIDATION_SYSTEM, DailyLog, Merged, NewEntries, consolidated, consolidation_prompt, extractive, new_entries,
};
use satchel_protocol::Config;
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::memory::MemoryMergeResult;
use satchel_storage::MemoryFiles;

use super::Memory;
use crate::error::RpcError;
use crate::llm::{NO_UPSTREAM, OpenAiCompleter};

impl Memory {
    /// Merges the logs of the `memory_merge_days` days up to `through` into the memory file of
    /// `files`, which is backed up (under `stamp`) when it changes. `models` is the calling
    /// connection's, `None` for the scheduled merge (no client to ask: with `summarizer:
    /// client` it is extractive).
    pub fn merge(
        &self,
        files: &MemoryFiles,
        config: &Config,
        through: NaiveDate,
        stamp: &str,
        models: Option<&dyn ModelSource>,
    ) -> Result<MemoryMergeResult, RpcError> {
        let memory = self.service()?;
        let days = config.daemon.memory_index.memory_merge_days;
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
        let (merged, summarizer, mut warnings) = consolidate(&before, &new, config, models);
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
}

/// `memory` with the `new` entries, consolidated by the configured model when there is one
/// and something to merge; on any failure of the model, the extractive merge and why. Also
/// returns which summariser wrote the entries.
fn consolidate(
    memory: &str,
    new: &NewEntries,
    config: &Config,
    models: Option<&dyn ModelSource>,
) -> (Merged, String, Vec<String>) {
    let backend = match config.summary.summarizer {
        SummarizerKind::Extractive => None,
        SummarizerKind::Openai => Some("openai"),
        // The scheduled merge has no connection to ask.
        SummarizerKind::Client => models.map(|_| "client"),
        // No proxied request is in flight: the warning says so.
        SummarizerKind::Upstream => Some("upstream"),
    };
    let Some(backend) = backend.filter(|_| new.count() > 0) else {
        return (extractive(memory, new), "extractive".into(), Vec::new());
    };
    match consolidate_with_model(memory, new, models, config) {
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
    memory: &str,
    new: &NewEntries,
    models: Option<&dyn ModelSource>,
    config: &Config,
) -> Result<Merged, String> {
    let completer: Box<dyn Completer + '_> = match models {
        Some(models) => models.completer(config.summary.summarizer, config)?,
        None if config.summary.summarizer == SummarizerKind::Upstream => return Err(NO_UPSTREAM.into()),
        None => Box::new(OpenAiCompleter::from_config(config)),
    };
    let prompt = consolidation_prompt(memory, new);
    let counter = TokenCounter::of(&config.tokens);
    let tokens = counter.count_text(CONSOLIDATION_SYSTEM) + counter.count_text(&prompt);
    if tokens > config.summary.llm_input_budget_tokens {
        return Err(format!(
            "the request, {tokens} tokens, is over llm_input_budget_tokens ({})",
            config.summary.llm_input_budget_tokens
        ));
    }
    let messages = [ChatMessage::system(CONSOLIDATION_SYSTEM), ChatMessage::user(prompt)];
    let reply = completer
        .complete(&messages, config.summary.llm_max_output_tokens)
        .map_err(|e| e.to_string())?;
    consolidated(memory, new, &reply).map_err(|why| format!("unusable reply: {why}"))
}

/// When the next daily merge after `now` runs, `None` when it is off (or there is no index).
pub fn next_merge(config: &Config, now: DateTime<Local>) -> Option<DateTime<Local>> {
    if !config.daemon.memory_index.memory_merge_enabled || !config.daemon.memory_index.memory_index_enabled {
        return None;
    }
    let (hour, minute) = config.daemon.memory_index.merge_time()?;
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
    use std::sync::{Arc, Mutex};

    use chrono::FixedOffset;
    use satchel_storage::Workspace;
    use tokio::sync::mpsc;

    use super::*;
    use crate::daily_merge::merge_daily;
    use crate::handlers::Daemon;
    use crate::schedule::ScriptedClock;

    fn local(day: u32, hour: u32, minute: u32) -> DateTime<Local> {
        Local.with_ymd_and_hms(2026, 11, day, hour, minute, 0).unwrap()
    }

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
        let mut config = Config::default();
        config.daemon.memory_index.memory_merge_enabled = false;
        assert_eq!(next_merge(&config, Local::now()), None);
    }

    /// The daemon's schedule (`daily_merge.rs`) end to end, here because it needs the index.
    #[tokio::test]
    async fn at_its_time_the_merge_folds_the_logs_through_yesterday_into_memory_md() {
        let dir = tempfile::tempdir().unwrap();
        let memory_dir = dir.path().join("memory");
        std::fs::create_dir_all(&memory_dir).unwrap();
        for (day, note) in [
            ("2026-11-22", "deploy with make ship"),
            ("2026-11-23", "the CI box has 2 cores"),
            ("2026-11-24", "today's note, still being written"),
        ] {
            std::fs::write(memory_dir.join(format!("{day}.md")), format!("## Notes\n\n- {note}\n")).unwrap();
        }
        let mut config = Config::default();
        config.daemon.memory_index.memory_merge_time = "03:30".into();
        config.daemon.memory_index.memory_watch_enabled = false;
        let workspace = Workspace::open(dir.path()).unwrap();
        let memory = Memory::open(&workspace, &config, |_| None).unwrap();
        let engine = satchel_engine::Engine::new(workspace, config).unwrap();
        let daemon = Arc::new(Daemon::new(engine).with_memory(memory));

        let (waits, mut waiting) = mpsc::unbounded_channel();
        let clock = ScriptedClock {
            now: Arc::new(Mutex::new(local(24, 1, 0))),
            waits,
        };
        let schedule = tokio::spawn(merge_daily(daemon, clock));
        let memory_md = dir.path().join("MEMORY.md");

        // At 01:00 on the 24th the merge waits for 03:30 the same day, having merged nothing.
        let (at, wake) = waiting.recv().await.unwrap();
        assert_eq!(at, local(24, 3, 30));
        assert!(!memory_md.exists());

        // At 03:30 it merges, then waits for 03:30 the next day.
        wake.send(()).unwrap();
        let (next, _never) = waiting.recv().await.unwrap();
        assert_eq!(next, local(25, 3, 30));
        let merged = std::fs::read_to_string(&memory_md).unwrap();
        assert!(
            merged.contains("- deploy with make ship (from memory/2026-11-22.md)"),
            "{merged}"
        );
        assert!(
            merged.contains("- the CI box has 2 cores (from memory/2026-11-23.md)"),
            "{merged}"
        );
        assert!(!merged.contains("today's note"), "{merged}");
        schedule.abort();
    }
}
