//! Compaction: summarise the older part of a session, archive its raw messages, and put the
//! summary in their place; automatic (from `prepare`) or manual (`context.compact`).

mod archive;
mod sizes;

use std::collections::HashSet;

use satchel_core::calibration::corrected;
use satchel_core::compact::plan_split;
use satchel_core::phase0::{self, Phase0};
use satchel_core::summary::dropped::SpanIdentifiers;
use satchel_core::summary::extractive::ExtractiveSummarizer;
use satchel_core::summary::llm::LlmSummarizer;
use satchel_core::summary::memory::memory_note;
use satchel_core::summary::render::summary_message_text_for;
use satchel_core::summary::{Summarizer, SummaryInput};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{
    Action, ArchiveRange, CompactParams, CompactResult, CompactSummary, CompactionEvent, CompactionReport, Config,
    ContextEvent, ContextMode, EventKind, TokenUsage,
};
use satchel_storage::{AppendedLines, CompactionBegun, CompactionInfo, EncodedLines, SessionRecord};
use serde_json::Value;

use crate::call::CallContext;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::ingest::Writes;
use crate::live::Ticket;
use crate::request::{Request, RequestExtras};
use crate::session::{Entry, Session, format_or_default};
use crate::{Outcome, event_of};
pub(crate) use archive::{archive_runs, compaction_done, dialog_lines};
use sizes::{check_result_bound, estimated_tokens_after, summary_budget, usage_after_compaction};

/// Why and how a compaction runs.
pub(crate) struct CompactionRequest<'a, 'c> {
    /// Steers the summary (`context.compact`).
    pub instruction: Option<&'a str>,
    /// Requested by `context.compact`.
    pub manual: bool,
    /// The call: its model, progress sink and cancellation.
    pub call: &'a CallContext<'c>,
    /// The call's own writes, still running: they must be done before the compaction logs
    /// anything after them.
    pub pending_writes: Option<&'a mut Writes>,
}

/// Why a compaction did not happen.
pub(crate) enum CompactError {
    /// The summariser failed: nothing changed.
    Summarize(String),
    /// The summary would not be smaller than what it replaces: nothing changed.
    Futile(String),
    /// Storage failed, or the call was cancelled.
    Engine(EngineError),
}

impl From<EngineError> for CompactError {
    fn from(e: EngineError) -> Self {
        CompactError::Engine(e)
    }
}

impl From<satchel_storage::StorageError> for CompactError {
    fn from(e: satchel_storage::StorageError) -> Self {
        CompactError::Engine(e.into())
    }
}

/// A summary made for a span, before anything is written.
struct Drafted {
    begun: CompactionBegun,
    encoded: EncodedLines,
    compacted_tokens: u64,
    /// `aceclaw` mode: the files, commands and errors of the span (AceClaw's phase 0).
    phase0: Option<Phase0>,
}

impl Engine {
    /// `context.compact`: compact now, everything but the reserve, under the call's `config`
    /// (the daemon's with its overrides), or the session's (`Engine::session_config`).
    pub fn compact_now(
        &self,
        ticket: Ticket,
        params: CompactParams,
        config: Option<&Config>,
        call: &CallContext<'_>,
    ) -> Result<Outcome<CompactResult>, EngineError> {
        self.transaction(ticket, &call.token, |slot| {
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(params.session_id.clone()));
            };
            let session_config;
            let config = match config {
                Some(config) => config,
                None => {
                    session_config = self.session_config(session);
                    &*session_config
                }
            };
            // A manual compaction counts the request as the last `context.prepare` sent it.
            let extras = RequestExtras {
                system: session.last_system().cloned(),
                tools: session.last_tools().cloned(),
                system_hash: None,
                sections: None,
            };
            let request = Request::new(config, extras);
            let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
            let how = CompactionRequest {
                instruction: params.instruction.as_deref(),
                manual: true,
                call,
                pending_writes: None,
            };
            let compaction = match self.compact(&params.session_id, session, &request, how) {
                Ok(report) => report,
                Err(CompactError::Summarize(reason) | CompactError::Futile(reason)) => {
                    return Err(EngineError::SummarizeFailed(reason));
                }
                Err(CompactError::Engine(e)) => return Err(e),
            };
            let mut event = None;
            if let Some(report) = &compaction {
                let usage = request.usage(session, false);
                session.set_last_usage(usage);
                let actions = [Action::Compacted(report.clone())];
                event = Some(event_of(&params.session_id, session, EventKind::Compact, &actions));
            }
            Ok(Outcome {
                result: CompactResult {
                    session_id: params.session_id.clone(),
                    compacted: compaction.as_ref().map_or(0, |c| c.messages),
                    compaction,
                    summary: session.summary().cloned(),
                    summary_text: session.summary_text().map(str::to_owned),
                },
                event,
            })
        })
    }

    /// Compacts the older part of a session: summarise, claim the call's commit point, log
    /// the start, archive the raw messages, log the end, then drop them from memory.
    /// `Ok(None)`: nothing to compact.
    pub(crate) fn compact(
        &self,
        id: &str,
        session: &mut Session,
        request: &Request<'_>,
        how: CompactionRequest<'_, '_>,
    ) -> Result<Option<CompactionReport>, CompactError> {
        let config = request.config;
        let Some(drafted) = self.draft(id, session, request, &how)? else {
            return Ok(None);
        };
        let Drafted {
            mut begun,
            encoded,
            compacted_tokens,
            phase0,
        } = drafted;
        begun.tokens_after = estimated_tokens_after(session, request, &begun, compacted_tokens, how.manual)?;
        if !how.manual {
            check_result_bound(session, request, &begun.summary, how.call)?;
        }
        if let Some(pending) = how.pending_writes {
            pending.wait()?;
        }
        // The commit point: a cancel that came while the summariser ran wins here, and the
        // call's earlier records are rolled back; from here on the compaction takes effect.
        if !how.call.token.commit() {
            return Err(EngineError::Cancelled.into());
        }
        self.sessions
            .append(id, &[SessionRecord::CompactionBegun(Box::new(begun.clone()))])?;
        let (ranges, appended) = self.archive_compaction(&begun, encoded, &[])?;

        // Archived: the messages may leave memory. The log says so only with the done record
        // below; if that write fails the call is rolled back and the reload finds the log as
        // it was before the call.
        let previous = replace_with_summary(session, &begun, &ranges);
        begun.tokens_after = usage_after_compaction(session, request).total;
        self.log_compaction_done(id, &begun, &ranges, appended.as_ref())?;
        let report = report_of(&begun, &ranges);
        self.learn_from_compaction(
            id,
            config,
            &begun,
            previous.as_ref(),
            session.summary(),
            phase0.as_ref(),
        );
        session.add_compaction(CompactionInfo::archived(begun, ranges));
        // Pinned messages that just left are re-emitted from the archive after the summary.
        if let Err(e) = self.resolve_pins(session) {
            tracing::warn!(
                session = id,
                "pinned messages could not be read back from the archive: {e}"
            );
        }
        Ok(Some(report))
    }

    /// Logs the end of compaction `begun`, archived in `ranges` (its lines `appended`); when
    /// that fails the call is rolled back, so the archive lines are taken back too.
    fn log_compaction_done(
        &self,
        id: &str,
        begun: &CompactionBegun,
        ranges: &[ArchiveRange],
        appended: Option<&AppendedLines>,
    ) -> Result<(), CompactError> {
        let done = compaction_done(begun, ranges, Some(begun.tokens_after));
        if let Err(e) = self.sessions.append(id, &[done]) {
            // Without this a retry would archive the same messages again under another
            // compaction id.
            if let Some(appended) = appended
                && let Err(undo) = self.archive.withdraw(appended)
            {
                tracing::error!(
                    session = id,
                    "could not take back a rolled-back compaction's archive lines: {undo}"
                );
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Hands what compaction `begun` found to memory (`memory_enabled`) and to the learning
    /// candidates (`candidates_from_compaction`): what its summary (`summary`, after) says
    /// that the `previous` one did not.
    fn learn_from_compaction(
        &self,
        id: &str,
        config: &Config,
        begun: &CompactionBegun,
        previous: Option<&CompactSummary>,
        summary: Option<&CompactSummary>,
        phase0: Option<&Phase0>,
    ) {
        if config.summary.memory_enabled {
            self.remember(id, begun, previous, summary, phase0);
        }
        if config.candidates.candidates_enabled && config.candidates.candidates_from_compaction {
            let new = |now: &[String], before: Option<&Vec<String>>| -> Vec<String> {
                now.iter()
                    .filter(|x| before.is_none_or(|b| !b.contains(x)))
                    .cloned()
                    .collect()
            };
            let lessons = new(&begun.summary.lessons, previous.map(|p| &p.lessons));
            let constraints = new(&begun.summary.constraints, previous.map(|p| &p.constraints));
            self.observe_compaction(id, &lessons, &constraints);
        }
    }

    /// Plans the split and summarises the span, encoding its archive lines on another core
    /// meanwhile; writes nothing. `Ok(None)`: nothing can be compacted.
    fn draft(
        &self,
        id: &str,
        session: &mut Session,
        request: &Request<'_>,
        how: &CompactionRequest<'_, '_>,
    ) -> Result<Option<Drafted>, CompactError> {
        let (config, counter) = (request.config, &request.counter);
        let before = request.usage(session, false);
        // In the provider's tokens, like the reserve they are measured against.
        let factor = session.calibration_factor();
        let tokens: Vec<u64> = session
            .count_tokens(counter, config, false)
            .into_iter()
            .map(|t| corrected(t, factor))
            .collect();
        let format = format_or_default(session.format());
        let Some(plan) = plan_split(&session.rendered_entries(config, false), &tokens, format, config) else {
            return Ok(None);
        };
        let span: Vec<Value> = plan
            .compact
            .iter()
            .map(|&p| session.entries()[p].full_message(&self.offloads))
            .collect();
        let indices: Vec<usize> = plan.compact.iter().map(|&p| session.entries()[p].index).collect();
        // What the agent did and the user said after the span (offloaded outputs stay out:
        // only requests and calls are read).
        let kept: Vec<Value> = plan
            .keep
            .iter()
            .map(|&p| session.entries()[p].message.clone())
            .collect();
        let input = SummaryInput {
            previous: session.summary(),
            messages: &span,
            indices: &indices,
            format,
            kept: &kept,
            instruction: how.instruction,
            demonstration_prefixes: Some(&config.summary.demonstration_prefixes),
            max_tokens: summary_budget(request),
            counter,
        };
        // Watchers learn that a compaction starts before its summary is written (a model
        // summary can take a while).
        (how.call.events)(compaction_started(id, session, &before, how.manual, indices.len()));
        let compaction_id = self.ids.next_id();
        let at = self.clock.now();
        let archived_at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let archive_file = self.archive.file_for(&at.format("%Y-%m-%d").to_string());
        let removed: Vec<&Entry> = plan.compact.iter().map(|&p| &session.entries()[p]).collect();
        // The archive lines are encoded, and what the span names is read (to tell what the
        // summary drops), on another core while the summariser runs: for a first pass over a
        // long history each takes tens of milliseconds.
        let (summarized, (encoded, identifiers)) = std::thread::scope(|scope| {
            let beside = scope.spawn(|| {
                let lines = dialog_lines(id, &compaction_id, &archived_at, &removed, &span, &HashSet::new());
                let encoded = self.archive.encode(&archive_file, &lines);
                let identifiers =
                    SpanIdentifiers::read(&span, &indices, format, Some(&config.summary.demonstration_prefixes));
                (encoded, identifiers)
            });
            let summarized = summarize(config, &input, how.call);
            let beside = beside.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (summarized, beside)
        });
        let (mut summary, summarizer) = summarized?;
        let encoded = encoded?;
        summary.archive = session.summary().map(|s| s.archive.clone()).unwrap_or_default();
        let compacted_tokens: u64 = plan.compact.iter().map(|&p| tokens[p]).sum();
        let phase0 = (config.window.context_mode == ContextMode::Aceclaw).then(|| phase0::extract(&span, format));
        let dropped = identifiers.dropped(
            &summary_message_text_for(&summary, config.window.context_mode),
            DROPPED_LISTED,
        );
        Ok(Some(Drafted {
            begun: CompactionBegun {
                id: compaction_id,
                indices,
                summary,
                archive_file,
                at: archived_at,
                tokens_before: before.total,
                tokens_after: before.total,
                manual: how.manual,
                summarizer,
                dropped,
            },
            encoded,
            compacted_tokens,
            phase0,
        }))
    }

    /// Appends what a compaction learned since the previous one to the day's memory log.
    /// Derived data: a failure is logged, never fatal (the archive already holds everything).
    fn remember(
        &self,
        session_id: &str,
        begun: &CompactionBegun,
        previous: Option<&CompactSummary>,
        summary: Option<&CompactSummary>,
        phase0: Option<&Phase0>,
    ) {
        let mut note = summary
            .and_then(|s| memory_note(previous, s, session_id, &begun.at))
            .unwrap_or_default();
        if let Some(phase0) = phase0.filter(|p| !p.is_empty()) {
            note.push_str(&format!(
                "\n### Phase 0 of compaction {} (session {session_id})\n",
                begun.id
            ));
            for line in phase0.lines() {
                note.push_str(&format!("- {line}\n"));
            }
        }
        if note.is_empty() {
            return;
        }
        let date = begun.at.get(..10).unwrap_or("unknown-date");
        if let Err(e) = self.memory.append_daily(date, &note) {
            tracing::warn!(session = session_id, "could not append to the memory log: {e}");
        }
    }
}

/// The event announcing that a compaction of `messages` messages of `session`, whose request
/// is `before`, starts.
fn compaction_started(id: &str, session: &Session, before: &TokenUsage, manual: bool, messages: usize) -> ContextEvent {
    ContextEvent {
        session_id: id.to_owned(),
        kind: EventKind::CompactionStarted,
        pressure: before.pressure(),
        tokens: before.clone(),
        messages: session.entries().len(),
        compactions: session.compactions().len(),
        actions: Vec::new(),
        compaction: Some(CompactionEvent {
            id: None,
            manual,
            messages,
            tokens_before: before.total,
            tokens_after: None,
            threshold: before.threshold,
            dropped: Vec::new(),
        }),
    }
}

/// Drops the messages of `begun` (archived in `ranges`) from `session` and puts its summary in
/// their place; returns the summary it replaces.
fn replace_with_summary(
    session: &mut Session,
    begun: &CompactionBegun,
    ranges: &[ArchiveRange],
) -> Option<CompactSummary> {
    let mut summary = begun.summary.clone();
    summary.add_archive_ranges(ranges, &begun.indices);
    session.replace_with_summary(&begun.indices, summary)
}

/// Runs the configured summariser. Model-backed ones never fail: they retry once and fall
/// back to the extractive summary, saying so in the returned backend name.
fn summarize(
    config: &Config,
    input: &SummaryInput<'_>,
    call: &CallContext<'_>,
) -> Result<(CompactSummary, String), CompactError> {
    let extractive = |backend: &str| {
        ExtractiveSummarizer
            .summarize(input)
            .map(|s| (s, backend.to_owned()))
            .map_err(|e| CompactError::Summarize(e.to_string()))
    };
    if config.summary.summarizer == SummarizerKind::Extractive {
        return extractive("extractive");
    }
    let completer = match call.models.completer(config.summary.summarizer, config) {
        Ok(completer) => completer,
        Err(why) => return extractive(&format!("extractive (fallback: {why})")),
    };
    let progress = call.progress.clone();
    let summary = LlmSummarizer::new(completer)
        .with_language(config.summary.summary_language)
        .with_input_budget(config.summary.llm_input_budget_tokens)
        .with_max_output(config.summary.llm_max_output_tokens)
        .with_progress(move |stage, stages| progress(stage, stages))
        .summarize_reporting(input);
    Ok(summary)
}

/// Dropped identifiers a compaction reports at most.
const DROPPED_LISTED: usize = 20;

/// A compaction as reported to clients, its messages archived in `ranges` (none yet, one run
/// of lines, or more).
pub(crate) fn report_of<'a>(
    begun: &CompactionBegun,
    ranges: impl IntoIterator<Item = &'a ArchiveRange>,
) -> CompactionReport {
    let mut ranges = ranges.into_iter().cloned();
    CompactionReport {
        id: begun.id.clone(),
        at: begun.at.clone(),
        manual: begun.manual,
        messages: begun.indices.len(),
        tokens_before: begun.tokens_before,
        tokens_after: begun.tokens_after,
        archive: ranges.next(),
        more_archive: ranges.collect(),
        summarizer: begun.summarizer.clone(),
        dropped: begun.dropped.clone(),
    }
}
