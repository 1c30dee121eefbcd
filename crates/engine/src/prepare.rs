//! `context.prepare`: the spec's pre-reasoning hook, in order: reconcile and offload the
//! received messages, count the request, compact the older part when over the threshold,
//! render what the model sees.

use std::sync::Arc;

use satchel_core::budget_note::{BUDGET_SECTION_KEY, BudgetFacts, budget_section_text};
use satchel_core::calibration::corrected;
use satchel_core::hash::MessageHash;
use satchel_core::tokens::TokenCounter;
use satchel_core::zones::{CompactionDue, OverLimitReason, compaction_due, over_limit_message};
use satchel_protocol::{
    Action, Config, ContextEvent, ContextMode, EventKind, FormatHint, MessageFormat, Phase, PrepareParams,
    PrepareResult, PromptSection, PruneReport, TokenUsage,
};
use satchel_storage::SessionRecord;
use serde_json::value::RawValue;

use crate::assembly::{self, PromptRequest};
use crate::call::CallContext;
use crate::compact::{CompactError, CompactionRequest};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::ingest::{Incoming, Ingested, Writes};
use crate::live::Ticket;
use crate::pruning::{Renderings, prune_rendered, usage_after};
use crate::requests::PhaseReached;
use crate::session::{Session, TruncatedMessage, format_or_default};
use crate::usage::{RequestExtras, usage};
use crate::{Outcome, event_of, repair_action, result_size};

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
        self.transaction(ticket, &call.token, |slot| {
            if slot.is_none() && !incoming.is_full_list() {
                return Err(EngineError::UnknownSession(id.clone()));
            }
            let session = slot.get_or_insert_with(|| Session::new(None, self.offloads.clone()));
            if let Some(expected) = params.expect_messages
                && expected != session.original_hashes.len()
            {
                return Err(EngineError::StaleSession {
                    session_id: id.clone(),
                    expected,
                    held: session.original_hashes.len(),
                });
            }
            if let (Some(declared), Some(held)) = (declared, session.format)
                && declared != held
            {
                return Err(EngineError::invalid_params(
                    "format",
                    format!("session {id} is in {held:?} format"),
                ));
            }
            if let Some(reported) = reported_usage {
                // A usage of a request a previous daemon prepared cannot be matched to a count.
                if session.requests.last_factor.is_some() {
                    self.record_usage(&id, session, reported.input_tokens)?;
                } else {
                    tracing::debug!(session = %id, "a usage report for a request of a previous daemon is ignored");
                }
            }
            self.remember_config(&id, session, params.config.as_ref(), config)?;
            self.prepare_in(&id, session, incoming, declared, extras, config, call)
        })
    }

    /// The body of `prepare`, in the session's turn: ingest, count, compact when due, render,
    /// then commit.
    #[allow(clippy::too_many_arguments)]
    fn prepare_in(
        &self,
        id: &str,
        session: &mut Session,
        incoming: Incoming,
        declared: Option<MessageFormat>,
        mut extras: RequestExtras,
        config: &Config,
        call: &CallContext<'_>,
    ) -> Result<Outcome<Prepared>, EngineError> {
        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let mut actions = Vec::new();
        let started = self.clock.now();
        let mut ingested = self.ingest(id, session, incoming, declared, config, &mut actions)?;
        if config.candidates_enabled {
            match self.candidate_sections() {
                Ok(sections) if !sections.is_empty() => extras.sections.get_or_insert_with(Vec::new).extend(sections),
                Ok(_) => {}
                // Learned hints are an extra: a store that cannot be read leaves them out.
                Err(e) => tracing::warn!(session = %id, "learning candidates left out of the prompt: {e}"),
            }
        }
        if config.budget_section_enabled {
            extras
                .sections
                .get_or_insert_with(Vec::new)
                .push(budget_section(session, config));
        }
        let prompt_request = PromptRequest {
            system: extras.system.as_ref(),
            sections: extras.sections.as_deref(),
        };
        let prompt = assembly::assemble(session, prompt_request, config)?;
        if let Some(prompt) = &prompt {
            extras.system = prompt.system();
            extras.system_hash = prompt.system_hash();
        }
        let request = Request {
            config,
            counter: TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor),
            extras,
        };
        let counted_usage = request.usage(session, false);
        let counted = self.clock.now();
        let over_trigger = |usage: &TokenUsage| {
            config.context_mode == ContextMode::Aceclaw && usage.total >= config.compact_threshold_tokens()
        };
        let mut phases = Vec::new();
        // `aceclaw` mode: the pruned estimate decides whether compaction is needed at all.
        let decisive_usage = if over_trigger(&counted_usage) {
            phases.push(PhaseReached::Prune);
            let report = request.prune(session, &counted_usage);
            usage_after(&counted_usage, &report)
        } else {
            counted_usage.clone()
        };
        let compaction = self.compact_if_due(id, session, &request, call, decisive_usage, &mut ingested.durable)?;
        if matches!(compaction.action, Some(Action::Compacted(_))) {
            phases.push(PhaseReached::Summarize);
        }
        actions.extend(compaction.action);
        let mut usage_now = if phases == [PhaseReached::Prune] {
            // Pruning was enough: the request is the full one, pruned again as it is sent.
            counted_usage.clone()
        } else {
            compaction.usage
        };
        // Last resort before giving up on the limit: recent tool results get the old-phase limit too.
        let squeeze = usage_now.total > config.effective_window();
        if squeeze {
            usage_now = request.usage(session, true);
        }
        let compacted = self.clock.now();
        let prune = over_trigger(&usage_now);
        let (messages, output_hashes, pruned) =
            request.render(session, squeeze, prune.then_some(&usage_now), &ingested, &mut actions);
        // A request over its trigger with nothing to prune (every message in the protected
        // turns, or no offloaded result nor reasoning before them) is sent whole: no action.
        if let Some(report) = pruned.filter(|r| r.stubbed_results + r.removed_reasoning > 0) {
            usage_now = usage_after(&usage_now, &report);
            actions.push(Action::Pruned(report));
        }
        let cache_stable_prefix_tokens = request.stable_prefix_tokens(session, &messages, &output_hashes);
        let saved = counted_usage.total.saturating_sub(usage_now.total);
        let fits = usage_now.total < config.compact_threshold_tokens();
        session.requests.record_phases(phases, saved, fits);
        let (prompt_report, over_budget) = match &prompt {
            Some(p) => {
                let (report, over_budget) = p.report_raw(id, session, &request.counter, config);
                (Some(report), over_budget)
            }
            None => (None, None),
        };
        let over_limit = match (over_limit_message(&usage_now, compaction.reason.as_ref()), over_budget) {
            (Some(window), Some(budget)) => Some(format!("{window}; {budget}")),
            (window, budget) => window.or(budget),
        };
        let result = PrepareResult {
            session_id: id.to_owned(),
            format: format_or_default(session.format),
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
        ingested.durable.wait()?;
        // The span `context.expand` brought back is carried by this request only.
        if let Some(expansion) = &session.expansion {
            let done = SessionRecord::ExpandDone {
                id: expansion.record.id.clone(),
            };
            self.sessions.append(id, &[done])?;
        }
        // The commit point of a call that did not compact (a compaction commits before it
        // logs anything): from here on the call takes effect.
        if !call.token.commit() {
            return Err(EngineError::Cancelled);
        }
        session.expansion = None;
        remember_request(session, output_hashes, request.extras, &result.tokens);
        if let Some(prompt) = &prompt
            && let Err(e) = self.candidates_injected(&assembly::injected_candidates(&prompt.built))
        {
            tracing::warn!(session = %id, "could not mark learning candidates in use: {e}");
        }
        session.requests.last_prompt = prompt;
        // After `last_usage`: the event carries this call's numbers, not the previous call's.
        let event: ContextEvent = event_of(id, session, EventKind::Prepare, &result.actions);
        let ms = |from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>| {
            (to - from).num_microseconds().unwrap_or(0) as f64 / 1000.0
        };
        tracing::debug!(
            session = %id,
            ingest_and_count_ms = ms(started, counted),
            compact_ms = ms(counted, compacted),
            render_ms = ms(compacted, self.clock.now()),
            "prepared"
        );
        Ok(Outcome {
            result,
            event: Some(event),
        })
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
        match compaction_due(&done.usage, session.futile_compaction_at, config) {
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
        match self.compact(id, session, config, &request.counter, &request.extras, how) {
            Ok(Some(report)) => done.action = Some(Action::Compacted(report)),
            Ok(None) => done.reason = Some(OverLimitReason::NothingCompactable),
            Err(CompactError::Summarize(reason)) => done.action = Some(Action::CompactionFailed { reason }),
            Err(CompactError::Futile(reason)) => {
                session.futile_compaction_at = Some(done.usage.compactable);
                done.action = Some(Action::CompactionFailed { reason: reason.clone() });
                done.reason = Some(OverLimitReason::CompactionFutile(reason));
            }
            Err(CompactError::Engine(e)) => return Err(e),
        }
        done.usage = request.usage(session, false);
        Ok(done)
    }
}

/// The request-wide inputs of one `prepare`, shared by its stages.
struct Request<'a> {
    /// The call's effective configuration.
    config: &'a Config,
    /// Counts with the configured tokenizer.
    counter: TokenCounter,
    /// The system prompt and tool definitions sent beside the messages.
    extras: RequestExtras,
}

impl Request<'_> {
    /// Token usage of the request `session` would send now.
    fn usage(&self, session: &mut Session, squeeze: bool) -> TokenUsage {
        usage(session, self.config, &self.counter, &self.extras, squeeze)
    }
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

impl Request<'_> {
    /// Prunes the request `session` renders now (`aceclaw` mode) and returns what that did,
    /// without keeping the pruned request.
    fn prune(&self, session: &mut Session, usage: &TokenUsage) -> PruneReport {
        let renderings = Renderings::of(session);
        let format = format_or_default(session.format);
        let factor = session.requests.calibration.factor;
        let mut rendered = session.render(self.config, false);
        prune_rendered(
            &mut rendered,
            &renderings,
            format,
            &self.counter,
            usage,
            factor,
            self.config,
        )
    }

    /// Renders the request `session` sends now, as JSON texts and their hashes, pruned when
    /// `prune_from` (its usage) is given, and adds its truncations, repairs and pruning to
    /// `actions`.
    fn render(
        &self,
        session: &mut Session,
        squeeze: bool,
        prune_from: Option<&TokenUsage>,
        ingested: &Ingested,
        actions: &mut Vec<Action>,
    ) -> (Vec<Arc<RawValue>>, Vec<MessageHash>, Option<PruneReport>) {
        let renderings = prune_from.map(|_| Renderings::of(session));
        let format = format_or_default(session.format);
        let factor = session.requests.calibration.factor;
        let mut rendered = session.render(self.config, squeeze);
        let pruned = prune_from.zip(renderings.as_ref()).map(|(usage, renderings)| {
            prune_rendered(
                &mut rendered,
                renderings,
                format,
                &self.counter,
                usage,
                factor,
                self.config,
            )
        });
        let (json, hashes) = rendered.to_json();
        actions.extend(truncation_actions(
            &rendered.truncated,
            ingested.first_new_index,
            ingested.recent_start_before,
        ));
        actions.extend(rendered.repairs.iter().map(repair_action));
        (json, hashes, pruned)
    }
}

impl Request<'_> {
    /// Tokens at the start of the request (tools, system, then `messages` with their
    /// `hashes`) identical to the previous request the session returned: the part a
    /// provider's prompt cache can reuse. Counted from the cached per-message counts.
    fn stable_prefix_tokens(&self, session: &mut Session, messages: &[Arc<RawValue>], hashes: &[MessageHash]) -> u64 {
        if session.last_usage.is_none() || self.extras.tools != session.last_tools {
            return 0;
        }
        let (system, tools) = session.extras_tokens(
            self.extras.system.as_ref(),
            self.extras.system_hash,
            self.extras.tools.as_deref(),
            &self.counter,
            self.config,
        );
        let factor = session.requests.calibration.factor;
        if self.extras.system != session.last_system {
            return corrected(tools, factor);
        }
        let shared = hashes
            .iter()
            .zip(&session.last_output)
            .take_while(|(now, before)| now == before)
            .count();
        let divisor = self.config.token_count_estimate_divisor;
        corrected(
            tools + system + session.prefix_tokens(hashes, messages, shared, divisor),
            factor,
        )
    }
}

/// Keeps what a committed call returned: its request, to recognise it when sent back, and
/// its extras and usage, for a later manual compaction and for inspection.
fn remember_request(
    session: &mut Session,
    output_hashes: Vec<MessageHash>,
    extras: RequestExtras,
    usage_now: &TokenUsage,
) {
    session.forget_fresh_texts();
    session.peak_tokens = session.peak_tokens.max(usage_now.total);
    session.last_output = output_hashes;
    session.last_system = extras.system;
    session.last_tools = extras.tools;
    session.last_usage = Some(usage_now.clone());
    session.requests.last_factor = Some(session.requests.calibration.factor);
    session.requests.calibration_before_report = None;
}

/// The `truncated` actions of a call: texts of messages new in this call, and of messages
/// that left the recent window in it (their cut changed from the recent to the old limit).
fn truncation_actions(
    truncated: &[TruncatedMessage],
    first_new_index: usize,
    recent_start_before: usize,
) -> Vec<Action> {
    let mut actions = Vec::new();
    for TruncatedMessage {
        position,
        index,
        phase,
        texts,
    } in truncated
    {
        let changed = *index >= first_new_index || (*phase == Phase::Old && *position >= recent_start_before);
        if !changed {
            continue;
        }
        for text in texts {
            if let Some(kept_bytes) = text.kept_bytes {
                actions.push(Action::Truncated {
                    index: *index,
                    pointer: text.pointer.clone(),
                    phase: *phase,
                    file: text.file.clone(),
                    kept_bytes,
                    total_bytes: text.total_bytes,
                });
            }
        }
    }
    actions
}

/// The agent-visible budget section (`budget_section_enabled`), from the session's last
/// request and last compaction.
fn budget_section(session: &Session, config: &Config) -> Box<RawValue> {
    let last = session.compactions.last();
    let facts = BudgetFacts {
        used: session.last_usage.as_ref().map_or(0, |u| u.total),
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
