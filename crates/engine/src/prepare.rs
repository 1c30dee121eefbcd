//! `context.prepare`: the spec's pre-reasoning hook, in order: reconcile and offload the
//! received messages, count the request, compact the older part when over the threshold,
//! render what the model sees.

use std::sync::Arc;

use satchel_core::tokens::TokenCounter;
use satchel_protocol::{
    Action, Config, ContextEvent, EventKind, FormatHint, MessageFormat, Phase, PrepareParams, PrepareResult,
};
use serde_json::value::RawValue;

use crate::call::CallContext;
use crate::compact::{CompactError, CompactionRequest};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::ingest::Incoming;
use crate::live::Ticket;
use crate::session::{Session, TruncatedMessage, format_or_default};
use crate::usage::{RequestExtras, usage};
use crate::{Outcome, event_of, repair_action};

/// What `prepare` returns: the request with its messages as shared JSON texts.
pub type Prepared = PrepareResult<Vec<Arc<RawValue>>>;

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
        };
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
            self.prepare_in(&id, session, incoming, declared, extras, config, call)
        })
    }

    /// The body of `prepare`, in the session's turn.
    #[allow(clippy::too_many_arguments)]
    fn prepare_in(
        &self,
        id: &str,
        session: &mut Session,
        incoming: Incoming,
        declared: Option<MessageFormat>,
        extras: RequestExtras,
        config: &Config,
        call: &CallContext<'_>,
    ) -> Result<Outcome<Prepared>, EngineError> {
        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let mut actions = Vec::new();
        let started = self.clock.now();
        let mut ingested = self.ingest(id, session, incoming, declared, config, &mut actions)?;
        let counter = TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
        let mut usage_now = usage(session, config, &counter, &extras, false);
        let counted = self.clock.now();
        let mut over_limit_reason: Option<String> = None;
        let over_threshold = config.compact_enabled && usage_now.total >= config.compact_threshold_tokens();
        let retry_futile = session
            .futile_compaction_at
            .is_none_or(|at| usage_now.compactable >= at + config.summary_budget_tokens());
        if over_threshold && !retry_futile {
            over_limit_reason = Some(
                "an earlier compaction of this session could not make the request smaller; it is tried again once a summary's worth of new messages has accrued".into(),
            );
        }
        if over_threshold && retry_futile {
            let how = CompactionRequest {
                instruction: None,
                manual: false,
                call,
                pending_writes: Some(&mut ingested.durable),
            };
            match self.compact(id, session, config, &counter, &extras, how) {
                Ok(Some(report)) => actions.push(Action::Compacted(report)),
                Ok(None) => {
                    over_limit_reason = Some(
                        "nothing before the newest turn can be compacted without separating a tool call from its result or an assistant reply from its user message".into(),
                    )
                }
                Err(CompactError::Summarize(reason)) => actions.push(Action::CompactionFailed { reason }),
                Err(CompactError::Futile(reason)) => {
                    session.futile_compaction_at = Some(usage_now.compactable);
                    actions.push(Action::CompactionFailed { reason: reason.clone() });
                    over_limit_reason = Some(reason);
                }
                Err(CompactError::Engine(e)) => return Err(e),
            }
            usage_now = usage(session, config, &counter, &extras, false);
        }
        // Last resort before giving up on the limit: recent tool results get the old-phase limit too.
        let squeeze = usage_now.total > config.max_input_length;
        if squeeze {
            usage_now = usage(session, config, &counter, &extras, true);
        }
        let compacted = self.clock.now();
        let rendered = session.render(config, squeeze);
        let (messages, output_hashes) = rendered.to_json();
        actions.extend(truncation_actions(
            &rendered.truncated,
            ingested.first_new_index,
            ingested.recent_start_before,
        ));
        actions.extend(rendered.repairs.iter().map(repair_action));
        drop(rendered);
        let over_limit = (usage_now.total > config.max_input_length).then(|| {
            format!(
                "the request is {} tokens, over max_input_length {}: system {}, tools {}, summary {}, messages {} ({}). Tool results are already cut to their limits.",
                usage_now.total,
                config.max_input_length,
                usage_now.system,
                usage_now.tools,
                usage_now.summary,
                usage_now.messages,
                over_limit_reason.as_deref().unwrap_or(
                    "the kept messages are the smallest tail that keeps tool calls with their results and the newest user message"
                ),
            )
        });
        ingested.durable.wait()?;
        // The commit point of a call that did not compact (a compaction commits before it
        // logs anything): from here on the call takes effect.
        if !call.token.commit() {
            return Err(EngineError::Cancelled);
        }
        session.forget_fresh_texts();
        session.peak_tokens = session.peak_tokens.max(usage_now.total);
        session.last_output = output_hashes;
        session.last_system = extras.system;
        session.last_tools = extras.tools;
        session.last_usage = Some(usage_now.clone());
        // After `last_usage`: the event carries this call's numbers, not the previous call's.
        let event: ContextEvent = event_of(id, session, EventKind::Prepare, &actions);
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
            result: PrepareResult {
                session_id: id.to_owned(),
                format: format_or_default(session.format),
                messages,
                tokens: usage_now,
                actions,
                reconciliation: ingested.report,
                compact_summary: session.summary().cloned(),
                over_limit,
            },
            event: Some(event),
        })
    }
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
