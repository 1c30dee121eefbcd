//! `context.expand`: a compacted span comes back from the archive into the next request, once.
//!
//! The span is read from the archive (the raw messages as the client sent them), its long
//! tool results rendered as their recent-phase excerpts (the offload files still hold them
//! whole), and fitted into a budget by leaving out its oldest messages, never between a tool
//! call and its result. It is logged (`Expand`) so that a restart keeps it pending, carried by
//! the next `context.prepare` right after the summary, and logged done (`ExpandDone`) by that
//! call's commit.

use satchel_core::format::{MessageFormat, has_tool_result};
use satchel_core::render::{OffloadedText, render_message};
use satchel_core::tokens::TokenCounter;
use satchel_core::truncate::TextStats;
use satchel_protocol::{ArchiveRange, Config, ExpandParams, ExpandResult, Phase};
use satchel_storage::{DialogLine, Expansion, LineRun, SessionRecord, StorageError};
use serde_json::Value;

use crate::call::CallToken;
use crate::compact::archive_runs;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::live::Ticket;
use crate::session::{ExpandedSpan, Session, format_or_default};

/// The default budget: this share of the window.
const DEFAULT_BUDGET_SHARE: u64 = 4;

impl Engine {
    /// `context.expand` on the session of `ticket`, under the session's configuration (its
    /// window is what the span must fit in: `Engine::session_config`).
    pub fn expand(&self, ticket: Ticket, params: ExpandParams) -> Result<ExpandResult, EngineError> {
        let (file, start, end) = match (&params.compaction_id, &params.archive) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(EngineError::invalid_params(
                    "compaction_id",
                    "give exactly one of compaction_id and archive",
                ));
            }
            (_, Some(range)) => (range.file.clone(), range.start_line, range.end_line),
            (Some(_), None) => (String::new(), 0, 0),
        };
        self.transaction(ticket, &CallToken::new(), |slot| {
            let id = &params.session_id;
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(id.clone()));
            };
            let (file, lines) = match &params.compaction_id {
                Some(compaction) => self.read_compaction(id, session, compaction)?,
                None => (file.clone(), self.read_span(id, &file, start, end)?),
            };
            let config = &*self.session_config(session);
            let format = format_or_default(session.format());
            let counter = TokenCounter::of(&config.tokens);
            let rendered = render_lines(&lines, config, self.offloads.workspace_root());
            let tokens: Vec<u64> = rendered.iter().map(|(m, _)| counter.count_message(m)).collect();
            let room = config
                .compact_threshold_tokens()
                .saturating_sub(session.last_usage().map_or(0, |u| u.total));
            let budget = params
                .max_tokens
                .unwrap_or(config.effective_window() / DEFAULT_BUDGET_SHARE)
                .min(room);
            let messages: Vec<&Value> = lines.iter().map(|(_, l)| &l.message).collect();
            let Some(first) = fit(&messages, &tokens, budget, format) else {
                return Err(does_not_fit(&messages, &tokens, format, budget, room));
            };
            let kept = &lines[first..];
            let placed: Vec<(usize, usize)> = kept.iter().map(|(number, line)| (*number, line.index)).collect();
            let mut runs = archive_runs(&file, &placed).into_iter();
            let archive = runs.next().expect("a span that fits has a line");
            let more_archive: Vec<ArchiveRange> = runs.collect();
            let record = Expansion {
                id: self.ids.next_id(),
                file,
                start_line: archive.start_line,
                end_line: archive.end_line,
                more_runs: more_archive
                    .iter()
                    .map(|run| LineRun {
                        start_line: run.start_line,
                        end_line: run.end_line,
                    })
                    .collect(),
            };
            self.sessions.append(id, &[SessionRecord::Expand(record.clone())])?;
            let span_tokens: u64 = tokens[first..].iter().sum();
            let truncated_results = rendered[first..].iter().map(|(_, cut)| cut).sum();
            session.set_expansion(Some(ExpandedSpan {
                record: record.clone(),
                messages: rendered.into_iter().skip(first).map(|(m, _)| m).collect(),
                tokens: span_tokens,
            }));
            Ok(ExpandResult {
                session_id: id.clone(),
                archive,
                more_archive,
                messages: kept.len(),
                tokens: span_tokens,
                budget_tokens: budget,
                left_out: first,
                truncated_results,
            })
        })
    }

    /// The archive file and lines of compaction `compaction` of `session` (`id`): every run of
    /// lines it was archived in, in order. Only the compaction's own lines are taken: a range
    /// an older satchel recorded for a compaction finished after a crash also spans other
    /// sessions' lines.
    fn read_compaction(
        &self,
        id: &str,
        session: &Session,
        compaction: &str,
    ) -> Result<(String, Vec<(usize, DialogLine)>), EngineError> {
        let ranges = compaction_ranges(session, compaction)?;
        let mut lines = Vec::new();
        for range in &ranges {
            let read = self
                .archive
                .read_range(&range.file, range.start_line, range.end_line)
                .map_err(|e| match e {
                    StorageError::NotFound(file) => {
                        EngineError::invalid_params("compaction_id", format!("the archive file {file} is gone"))
                    }
                    other => other.into(),
                })?;
            lines.extend(
                read.into_iter()
                    .filter(|(_, line)| line.session_id == id && line.compaction_id == compaction),
            );
        }
        if lines.is_empty() {
            return Err(EngineError::invalid_params(
                "compaction_id",
                format!("no archive line of compaction {compaction} is left"),
            ));
        }
        Ok((ranges[0].file.clone(), lines))
    }

    /// The archive lines `start`..=`end` of `file`, which must exist and belong to session `id`.
    fn read_span(
        &self,
        id: &str,
        file: &str,
        start: usize,
        end: usize,
    ) -> Result<Vec<(usize, DialogLine)>, EngineError> {
        if start == 0 || end < start {
            return Err(EngineError::invalid_params(
                "archive",
                "start_line must be at least 1 and end_line not before it",
            ));
        }
        let lines = self.archive.read_range(file, start, end).map_err(|e| match e {
            StorageError::NotFound(_) => EngineError::invalid_params("archive.file", format!("no archive file {file}")),
            other => other.into(),
        })?;
        if lines.is_empty() {
            return Err(EngineError::invalid_params(
                "archive",
                format!("{file} has no archive line in {start}-{end}"),
            ));
        }
        if let Some((number, line)) = lines.iter().find(|(_, l)| l.session_id != id) {
            return Err(EngineError::invalid_params(
                "archive",
                format!(
                    "line {number} of {file} belongs to session {}, not {id}",
                    line.session_id
                ),
            ));
        }
        Ok(lines)
    }

    /// The pending expansion of a session's log, rendered again (on load) under the session's
    /// `config`.
    pub(crate) fn restore_expansion(&self, expansion: Expansion, config: &Config) -> Option<ExpandedSpan> {
        let mut lines = Vec::new();
        for run in expansion.runs() {
            match self.archive.read_range(&expansion.file, run.start_line, run.end_line) {
                Ok(read) => lines.extend(read),
                Err(e) => {
                    tracing::warn!(file = %expansion.file, "a pending context.expand is dropped: {e}");
                    return None;
                }
            }
        }
        let counter = TokenCounter::of(&config.tokens);
        let messages: Vec<Value> = render_lines(&lines, config, self.offloads.workspace_root())
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        let tokens = messages.iter().map(|m| counter.count_message(m)).sum();
        Some(ExpandedSpan {
            record: expansion,
            messages,
            tokens,
        })
    }
}

/// The archive ranges of compaction `id` of `session`: one run of lines, or more.
fn compaction_ranges(session: &Session, id: &str) -> Result<Vec<ArchiveRange>, EngineError> {
    let compaction = session.compactions().iter().find(|c| c.begun.id == id).ok_or_else(|| {
        let known: Vec<&str> = session.compactions().iter().map(|c| c.begun.id.as_str()).collect();
        EngineError::invalid_params(
            "compaction_id",
            format!("no compaction {id} in this session (it has: {})", known.join(", ")),
        )
    })?;
    let ranges: Vec<ArchiveRange> = compaction.ranges().cloned().collect();
    if ranges.is_empty() {
        return Err(EngineError::invalid_params(
            "compaction_id",
            format!("compaction {id} is not archived yet"),
        ));
    }
    Ok(ranges)
}

/// Each archived message as the next request shows it: tool results over the recent-phase
/// limit cut to their excerpts (naming their offload files); with how many were cut.
fn render_lines(lines: &[(usize, DialogLine)], config: &Config, workspace_root: &str) -> Vec<(Value, usize)> {
    lines
        .iter()
        .map(|(_, line)| {
            let offloaded: Vec<OffloadedText> = line
                .offloads
                .iter()
                .filter_map(|o| {
                    let text = line.message.pointer(&o.pointer)?.as_str()?;
                    Some(OffloadedText {
                        pointer: o.pointer.clone(),
                        file: o.file.clone(),
                        stats: TextStats::of(text),
                        call: None,
                    })
                })
                .collect();
            let (rendered, texts) = render_message(
                &line.message,
                &offloaded,
                Phase::Recent,
                &config.render,
                workspace_root,
                Some(line.index),
                &[],
            );
            let cut = texts.iter().filter(|t| t.kept_bytes.is_some()).count();
            (rendered, cut)
        })
        .collect()
}

/// The first message of the longest tail of `messages` whose `tokens` fit in `budget` and
/// that starts where no tool result is cut from its call (a message carrying no tool
/// result); `None` when not even the newest such tail fits.
fn fit(messages: &[&Value], tokens: &[u64], budget: u64, format: MessageFormat) -> Option<usize> {
    let mut sum = 0u64;
    let mut best = None;
    for position in (0..messages.len()).rev() {
        sum += tokens[position];
        if sum > budget {
            break;
        }
        if !has_tool_result(messages[position], format) {
            best = Some(position);
        }
    }
    best
}

/// The error of a span (`messages` of `tokens`) with no tail that fits `budget` (at most the
/// `room` under the compaction threshold): what its smallest tail would take.
fn does_not_fit(messages: &[&Value], tokens: &[u64], format: MessageFormat, budget: u64, room: u64) -> EngineError {
    let smallest = smallest_tail(messages, tokens, format).map_or_else(
        || "no part of the span starts with a tool call and its results".to_owned(),
        |t| format!("its newest turn that keeps tool calls with their results takes {t} tokens"),
    );
    EngineError::invalid_params(
        "max_tokens",
        format!(
            "the span does not fit the budget of {budget} tokens (the room under the compaction \
             threshold is {room}): {smallest}"
        ),
    )
}

/// Tokens of the shortest tail [`fit`] could keep.
fn smallest_tail(messages: &[&Value], tokens: &[u64], format: MessageFormat) -> Option<u64> {
    let start = (0..messages.len())
        .rev()
        .find(|&p| !has_tool_result(messages[p], format))?;
    Some(tokens[start..].iter().sum())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_tail_that_fits_starts_where_no_result_is_cut_from_its_call() {
        let messages = [
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "x"}),
            json!({"role": "assistant", "content": "done"}),
        ];
        let refs: Vec<&Value> = messages.iter().collect();
        let check = |budget, expected| {
            assert_eq!(
                fit(&refs, &[10, 10, 10, 10], budget, MessageFormat::Openai),
                expected,
                "{budget}"
            );
        };
        check(40, Some(0));
        check(39, Some(1));
        // 20 would start at the tool result: the call must come with it, so only the answer.
        check(20, Some(3));
        check(10, Some(3));
        check(9, None);
    }
}
