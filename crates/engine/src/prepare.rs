//! `context.prepare`: the spec's pre-reasoning hook, in order: reconcile and offload the
//! received messages, count the request, compact the older part when over the threshold,
//! render what the model sees.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use satchel_core::budget_note::{BUDGET_SECTION_KEY, BudgetFacts, budget_section_text};
use satchel_core::zones::{CompactionDue, OverLimitReason, compaction_due, over_limit_message};
use satchel_protocol::{
    Action, Config, ContextEvent, EventKind, FormatHint, MessageFormat, PrepareParams, PrepareResult, PromptSection,
    TokenUsage,
};
use satchel_storage::SessionRecord;
use serde_json::value::RawValue;

use crate::assembly::{self, PromptRequest};
use crate::call::CallContext;
use crate::compact::{CompactError, CompactionRequest};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::ingest::{Incoming, Writes};
use crate::live::Ticket;
use crate::pruning::usage_after;
use crate::request::{Request, RequestExtras};
use crate::session::prompt::{PromptState, injected_candidates};
use crate::session::{PhaseReached, SentRequest, Session, format_or_default};
use crate::{Outcome, event_of, result_size};

/// What `prepare` returns: the request with its messages as shared JSON texts.
pub type Prepared = PrepareResult<Vec<Arc<RawValue>>, Arc<RawValue>, Arc<RawValue>>;

impl Engine {
    /// `context.prepare` on the session of `ticket`, under the call's effective `config`.
    pub fn prepare(
        &self,
        ticket: Ticket,
        params: PrepareParams<Box<RawValue>>,
        config: &Config,
        call: &CallContext<'_>,
    ) -> Result<Outcome<Prepared>, EngineError> {
        let incoming = Incoming::of(params.messages, params.append)?;
        let declared = match params.format {
            FormatHint::Auto => None,
            FormatHint::Openai => Some(MessageFormat::Openai),
            FormatHint::Anthropic => Some(MessageFormat::Anthropic),
            FormatHint::OpenaiResponses => Some(MessageFormat::OpenaiResponses),
        };
        let id = params.session_id;
        if ticket.session_id() != id {
            return Err(EngineError::invalid_params(
                "session_id",
                "does not match the call's ticket",
            ));
        }
        let extras = RequestExtras {
            system: params.system,
            tools: params.tools,
            system_hash: None,
            sections: params.sections,
        };
        let reported_usage = params.usage;
        if reported_usage.is_some_and(|u| u.input_tokens == 0) {
            return Err(EngineError::invalid_params("usage.input_tokens", "must be positive"));
        }
        self.transaction(ticket, &call.token, |slot| {
            if slot.is_none() && !incoming.is_full_list() {
                return Err(EngineError::UnknownSession(id.clone()));
            }
            let session = slot.get_or_insert_with(|| Session::new(None, self.offloads.clone()));
            if let Some(expected) = params.expect_messages
                && expected != session.history_len()
            {
                return Err(EngineError::StaleSession {
                    session_id: id.clone(),
                    expected,
                    held: session.history_len(),
                });
            }
            if let (Some(declared), Some(held)) = (declared, session.format())
                && declared != held
            {
                return Err(EngineError::invalid_params(
                    "format",
                    format!("session {id} is in {held:?} format"),
                ));
            }
            let prompt_inputs = PromptRequest {
                system: extras.system.as_ref(),
                sections: extras.sections.as_deref(),
            };
            assembly::check(session, &prompt_inputs, config)?;
            let reports = Reports {
                input_tokens: reported_usage.map(|u| u.input_tokens),
                overrides: params.config.as_ref(),
            };
            let request = Request::new(config, extras);
            let received = Received { incoming, declared };
            self.prepare_in(&id, session, received, request, reports, call)
        })
    }

    /// The body of `prepare`, in the session's turn: ingest, count, compact when due, render,
    /// then commit. The `request` sends the client's extras; the prompt assembled here
    /// replaces its `system`.
    fn prepare_in(
        &self,
        id: &str,
        session: &mut Session,
        received: Received,
        mut request: Request<'_>,
        reports: Reports<'_>,
        call: &CallContext<'_>,
    ) -> Result<Outcome<Prepared>, EngineError> {
        let config = request.config;
        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let mut actions = Vec::new();
        let started = self.clock.now();
        // Ingest refuses a bad message before it changes anything, so it goes first: a
        // refused call must change nothing, and the records below change the session.
        let mut ingested = self.ingest(id, session, received.incoming, received.declared, config, &mut actions)?;
        if let Some(input_tokens) = reports.input_tokens {
            // A usage of a request a previous daemon prepared cannot be matched to a count.
            if session.requests().last_factor.is_some() {
                self.record_usage(id, session, input_tokens)?;
            } else {
                tracing::debug!(session = %id, "a usage report for a request of a previous daemon is ignored");
            }
        }
        self.remember_config(id, session, reports.overrides, config)?;
        self.add_generated_sections(id, session, &mut request.extras, config);
        let prompt_request = PromptRequest {
            system: request.extras.system.as_ref(),
            sections: request.extras.sections.as_deref(),
        };
        let prompt = assembly::assemble(session, prompt_request, config)?;
        if let Some(prompt) = &prompt {
            request.extras.system = prompt.system();
            request.extras.system_hash = prompt.system_hash();
            if let Some(over) = &prompt.built.assembled.kept_whole_over_budget {
                actions.push(Action::PromptOverBudget {
                    keys: over.sections.iter().map(|(key, _)| key.clone()).collect(),
                    chars: over.chars,
                    max_total_chars: over.max_total_chars,
                });
            }
        }
        let counted_usage = request.usage(session, false);
        let counted = self.clock.now();
        let fitted = self.fit_to_window(id, session, &request, call, &counted_usage, &mut ingested.durable)?;
        actions.extend(fitted.action);
        let mut usage_now = fitted.usage;
        let compacted = self.clock.now();
        let prune = request.over_trigger(&usage_now);
        let (messages, output_hashes, pruned) = request.render(
            session,
            fitted.squeeze,
            prune.then_some(&usage_now),
            &ingested,
            &mut actions,
        );
        // A request over its trigger with nothing to prune (every message in the protected
        // turns, or no offloaded result nor reasoning before them) is sent whole: no action.
        if let Some(report) = pruned.filter(|r| r.stubbed_results + r.removed_reasoning > 0) {
            usage_now = usage_after(&usage_now, &report);
            actions.push(Action::Pruned(report));
        }
        let cache_stable_prefix_tokens = request.stable_prefix_tokens(session, &messages, &output_hashes);
        let saved = counted_usage.total.saturating_sub(usage_now.total);
        let fits = usage_now.total < config.compact_threshold_tokens();
        session.record_phases(fitted.phases, saved, fits);
        let (prompt_report, over_limit) =
            prompt_report_and_over_limit(id, session, prompt.as_deref(), &request, &usage_now, fitted.reason);
        let result = PrepareResult {
            session_id: id.to_owned(),
            format: format_or_default(session.format()),
            messages,
            tokens: usage_now,
            cache_stable_prefix_tokens,
            actions,
            reconciliation: ingested.report,
            compact_summary: session.summary().cloned(),
            over_limit,
            system: prompt.as_ref().and_then(|p| p.system_raw()),
            prompt: prompt_report,
        };
        result_size::check(result_size::json_bytes(&result), call.max_result_bytes)?;
        let sent = SentRequest {
            output_hashes,
            system: request.extras.system,
            tools: request.extras.tools,
            prompt,
        };
        self.commit_prepare(id, session, call, &mut ingested.durable, sent, &result.tokens)?;
        // After `last_usage`: the event carries this call's numbers, not the previous call's.
        let event: ContextEvent = event_of(id, session, EventKind::Prepare, &result.actions);
        trace_stage_durations(id, started, counted, compacted, self.clock.now());
        Ok(Outcome {
            result,
            event: Some(event),
        })
    }

    /// Adds the sections the daemon itself contributes to the client's: learned candidates
    /// (`candidates_enabled`) and the budget section (`budget_section_enabled`).
    fn add_generated_sections(&self, id: &str, session: &Session, extras: &mut RequestExtras, config: &Config) {
        if config.candidates.candidates_enabled {
            match self.candidate_sections() {
                Ok(sections) if !sections.is_empty() => extras.sections.get_or_insert_with(Vec::new).extend(sections),
                Ok(_) => {}
                // Learned hints are an extra: a store that cannot be read leaves them out.
                Err(e) => tracing::warn!(session = %id, "learning candidates left out of the prompt: {e}"),
            }
        }
        if config.sections.budget_section_enabled {
            extras
                .sections
                .get_or_insert_with(Vec::new)
                .push(budget_section(session, config));
        }
    }

    /// Brings the counted request (`counted_usage`) toward the window: prunes it to decide
    /// whether compaction is due (`aceclaw` mode), compacts when it is, and squeezes recent
    /// tool results as a last resort.
    fn fit_to_window(
        &self,
        id: &str,
        session: &mut Session,
        request: &Request<'_>,
        call: &CallContext<'_>,
        counted_usage: &TokenUsage,
        pending_writes: &mut Writes,
    ) -> Result<Fitted, EngineError> {
        let mut phases = Vec::new();
        // `aceclaw` mode: the pruned estimate decides whether compaction is needed at all.
        let decisive_usage = if request.over_trigger(counted_usage) {
            phases.push(PhaseReached::Prune);
            let report = request.prune(session, counted_usage);
            usage_after(counted_usage, &report)
        } else {
            counted_usage.clone()
        };
        let compaction = self.compact_if_due(id, session, request, call, decisive_usage, pending_writes)?;
        if matches!(compaction.action, Some(Action::Compacted(_))) {
            phases.push(PhaseReached::Summarize);
        }
        let mut usage = if phases == [PhaseReached::Prune] {
            // Pruning was enough: the request is the full one, pruned again as it is sent.
            counted_usage.clone()
        } else {
            compaction.usage
        };
        // Last resort before giving up on the limit: recent tool results get the old-phase limit too.
        let squeeze = usage.total > request.config.effective_window();
        if squeeze {
            usage = request.usage(session, true);
        }
        Ok(Fitted {
            usage,
            squeeze,
            phases,
            action: compaction.action,
            reason: compaction.reason,
        })
    }

    /// Makes a prepared request durable and takes it as the session's last one: the commit
    /// point of a call that did not compact (a compaction commits before it logs anything).
    fn commit_prepare(
        &self,
        id: &str,
        session: &mut Session,
        call: &CallContext<'_>,
        pending_writes: &mut Writes,
        sent: SentRequest,
        usage_now: &TokenUsage,
    ) -> Result<(), EngineError> {
        pending_writes.wait()?;
        // The span `context.expand` brought back is carried by this request only.
        if let Some(expansion) = session.expansion() {
            let done = SessionRecord::ExpandDone {
                id: expansion.record.id.clone(),
            };
            self.sessions.append(id, &[done])?;
        }
        // From here on the call takes effect.
        if !call.token.commit() {
            return Err(EngineError::Cancelled);
        }
        if let Some(prompt) = &sent.prompt
            && let Err(e) = self.candidates_injected(&injected_candidates(&prompt.built))
        {
            tracing::warn!(session = %id, "could not mark learning candidates in use: {e}");
        }
        session.remember_sent(sent, usage_now);
        Ok(())
    }

    /// Compacts the session when [`compaction_due`] says so; returns the usage after, the
    /// action to report, and why a request still over the window could not be made smaller.
    fn compact_if_due(
        &self,
        id: &str,
        session: &mut Session,
        request: &Request<'_>,
        call: &CallContext<'_>,
        usage_now: TokenUsage,
        pending_writes: &mut Writes,
    ) -> Result<AutoCompaction, EngineError> {
        let config = request.config;
        let mut done = AutoCompaction {
            usage: usage_now,
            action: None,
            reason: None,
        };
        match compaction_due(&done.usage, session.futile_compaction_at(), config) {
            CompactionDue::No => return Ok(done),
            CompactionDue::Deferred => {
                done.reason = Some(OverLimitReason::CompactionDeferred);
                return Ok(done);
            }
            CompactionDue::Yes => {}
        }
        let how = CompactionRequest {
            instruction: None,
            manual: false,
            call,
            pending_writes: Some(pending_writes),
        };
        match self.compact(id, session, request, how) {
            Ok(Some(report)) => done.action = Some(Action::Compacted(report)),
            Ok(None) => done.reason = Some(OverLimitReason::NothingCompactable),
            Err(CompactError::Summarize(reason)) => done.action = Some(Action::CompactionFailed { reason }),
            Err(CompactError::Futile(reason)) => {
                session.compaction_futile_at(done.usage.compactable);
                done.action = Some(Action::CompactionFailed { reason: reason.clone() });
                done.reason = Some(OverLimitReason::CompactionFutile(reason));
            }
            Err(CompactError::Engine(e)) => return Err(e),
        }
        done.usage = request.usage(session, false);
        Ok(done)
    }
}

/// The request after [`Engine::fit_to_window`], before it is rendered.
struct Fitted {
    /// Its usage now.
    usage: TokenUsage,
    /// Whether recent tool results get the old-phase limit too (still over the window).
    squeeze: bool,
    /// The phases that ran.
    phases: Vec<PhaseReached>,
    /// The compaction, or why it failed.
    action: Option<Action>,
    /// Why the request may still be over the window.
    reason: Option<OverLimitReason>,
}

/// The messages a `prepare` received.
struct Received {
    /// The messages, or what is new of them.
    incoming: Incoming,
    /// The format the client declared (`format`), if it did.
    declared: Option<MessageFormat>,
}

/// What a `prepare` reports besides its messages, recorded once its messages are ingested.
struct Reports<'a> {
    /// The provider's input tokens for the previous request (`usage`).
    input_tokens: Option<u64>,
    /// The call's `config` overrides.
    overrides: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// What the automatic compaction step of `prepare` did.
struct AutoCompaction {
    /// The request's usage afterwards.
    usage: TokenUsage,
    /// The compaction, or why it failed.
    action: Option<Action>,
    /// Why the request may still be over the window.
    reason: Option<OverLimitReason>,
}

/// The prompt's report, and the notice of a request still over the window (`reason`, when
/// compaction could not help) or over the prompt's budget.
fn prompt_report_and_over_limit(
    id: &str,
    session: &mut Session,
    prompt: Option<&PromptState>,
    request: &Request<'_>,
    usage_now: &TokenUsage,
    reason: Option<OverLimitReason>,
) -> (Option<Arc<RawValue>>, Option<String>) {
    let (prompt_report, over_budget) = match prompt {
        Some(p) => {
            let (report, over_budget) = p.report_raw(id, session, &request.counter, request.config);
            (Some(report), over_budget)
        }
        None => (None, None),
    };
    let over_limit = match (over_limit_message(usage_now, reason.as_ref()), over_budget) {
        (Some(window), Some(budget)) => Some(format!("{window}; {budget}")),
        (window, budget) => window.or(budget),
    };
    (prompt_report, over_limit)
}

/// Logs how long each stage of a `prepare` took.
fn trace_stage_durations(
    id: &str,
    started: DateTime<Utc>,
    counted: DateTime<Utc>,
    compacted: DateTime<Utc>,
    rendered: DateTime<Utc>,
) {
    let ms = |from: DateTime<Utc>, to: DateTime<Utc>| (to - from).num_microseconds().unwrap_or(0) as f64 / 1000.0;
    tracing::debug!(
        session = %id,
        ingest_and_count_ms = ms(started, counted),
        compact_ms = ms(counted, compacted),
        render_ms = ms(compacted, rendered),
        "prepared"
    );
}

/// The agent-visible budget section (`budget_section_enabled`), from the session's last
/// request and last compaction.
fn budget_section(session: &Session, config: &Config) -> Box<RawValue> {
    let last = session.compactions().last();
    let facts = BudgetFacts {
        used: session.last_usage().map_or(0, |u| u.total),
        limit: config.effective_window(),
        threshold: config.compact_threshold_tokens(),
        last_compaction: last.map(|c| (c.begun.id.as_str(), c.begun.indices.len(), &c.begun.dropped[..])),
    };
    let section = PromptSection {
        key: BUDGET_SECTION_KEY.into(),
        content: budget_section_text(&facts),
        priority: BUDGET_SECTION_PRIORITY,
        protected: false,
        source_type: Some("budget".into()),
        scope: None,
        reason: Some("budget_section_enabled: the window as the model should know it".into()),
        paths: Vec::new(),
    };
    serde_json::value::to_raw_value(&section).expect("a section serialises")
}

/// Low: the budget section is the first cut when the prompt is over its budget.
const BUDGET_SECTION_PRIORITY: i64 = 20;
