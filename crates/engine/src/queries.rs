//! The calls that only look: `context.inspect`, `context.sessions`, `context.read`, and the
//! offload sweep.

use std::time::{Duration, SystemTime};

use satchel_core::slice::{SliceRequest, slice_text};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{
    Config, InspectParams, InspectResult, MessageRoleTokens, PromptAssembly, ReadParams, ReadResult, SectionDetail,
    SessionSummary, SessionsResult, TokenUsage,
};
use satchel_storage::{StorageError, SweepReport};

use crate::assembly;
use crate::call::CallToken;
use crate::compact::report_of;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::inspection;
use crate::live::Ticket;
use crate::session::{Session, prompt};

/// Default `max_bytes` of `context.read`, the same as the first-phase limit.
const DEFAULT_READ_BYTES: usize = 50_000;

impl Engine {
    /// `context.inspect`, in the session's turn (after the calls queued before it).
    pub fn inspect(&self, ticket: Ticket, params: InspectParams) -> Result<InspectResult, EngineError> {
        self.transaction(ticket, &CallToken::new(), |slot| {
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(params.session_id.clone()));
            };
            let session_config = self.session_config(session);
            let (prompt, detail) = self.inspect_prompt(session, &params, &session_config)?;
            let tokens = session.last_usage().cloned().unwrap_or_else(|| TokenUsage {
                limit: session_config.effective_window(),
                threshold: session_config.compact_threshold_tokens(),
                tokenizer: session_config.tokens.tokenizer,
                ..TokenUsage::default()
            });
            let loaded = session.last_usage().is_some();
            let config = loaded.then_some(&*session_config);
            let message_tokens = match config {
                Some(config) => inspection::role_tokens(session, config, tokens.messages),
                None => MessageRoleTokens::default(),
            };
            Ok(InspectResult {
                session_id: params.session_id.clone(),
                format: session.format(),
                loaded,
                pressure: tokens.pressure(),
                tokens,
                message_tokens,
                config_overrides: session.requests().config_overrides.clone(),
                messages: session.entries().len(),
                archived_messages: session.archived_count(),
                summary: session.summary().cloned(),
                summary_budget_tokens: session_config.summary_budget_tokens(),
                offloaded: inspection::offloaded(session, config),
                pins: session.pins().infos(),
                rejected_candidates: self.rejected_candidates(),
                compactions: session
                    .compactions()
                    .iter()
                    .map(|c| report_of(&c.begun, c.ranges()))
                    .collect(),
                peak_tokens: session.peak_tokens(),
                monitor: session.requests().monitor(
                    session.last_usage(),
                    session.peak_tokens(),
                    session.compactions().len(),
                ),
                calibration: session.requests().calibration,
                prompt,
                detail,
                origin: session.origin().cloned(),
            })
        })
    }

    /// The last request's prompt as inspect shows it, assembled again for `query_hint` when
    /// one is given, and the section named by `detail_key`; `config` is the one the last
    /// request was prepared with (its window and tokenizer).
    fn inspect_prompt(
        &self,
        session: &mut Session,
        params: &InspectParams,
        config: &Config,
    ) -> Result<(Option<PromptAssembly>, Option<SectionDetail>), EngineError> {
        let Some(state) = session.requests().last_prompt.clone() else {
            return match &params.detail_key {
                Some(_) => Err(EngineError::invalid_params(
                    "detail_key",
                    "the session's last request (since the daemon started) had no system prompt or sections",
                )),
                None => Ok((None, None)),
            };
        };
        let counter = TokenCounter::of(&config.tokens);
        let hinted = params.query_hint.as_deref().map(|q| state.with_query(q)).transpose()?;
        let built = hinted.as_ref().unwrap_or(&state.built);
        let tokens =
            session.extras_tokens(built.system.as_ref(), None, None, &counter).0 + state.base_message_tokens(&counter);
        let factor = session.calibration_factor();
        let report = prompt::report(&params.session_id, built, state.budget(), tokens, factor, config);
        let detail = params
            .detail_key
            .as_deref()
            .map(|key| assembly::detail(built, key))
            .transpose()?;
        Ok((Some(report), detail))
    }

    /// `context.sessions`: every stored session, with numbers for those in memory and not
    /// busy right now (a listing never waits behind a running call).
    pub fn sessions(&self) -> Result<SessionsResult, EngineError> {
        let stored = self.sessions.list()?;
        let live = self.live.snapshot();
        let sessions = stored
            .into_iter()
            .map(|session_id| {
                let slot = live.get(&session_id);
                let guard = slot.map(|s| s.peek());
                match &guard {
                    Some(Some(held)) if held.is_some() => {
                        let session = held.as_ref().expect("checked above");
                        SessionSummary {
                            live: true,
                            messages: Some(session.entries().len()),
                            tokens: session.last_usage().map(|u| u.total),
                            pressure: session.last_usage().map(TokenUsage::pressure),
                            compactions: Some(session.compactions().len()),
                            session_id: session_id.clone(),
                        }
                    }
                    // Busy: a call is running on it, so it is in memory.
                    Some(None) => not_loaded(&session_id, true),
                    _ => not_loaded(&session_id, false),
                }
            })
            .collect();
        Ok(SessionsResult { sessions })
    }

    /// `context.read`.
    pub fn read(&self, params: ReadParams) -> Result<ReadResult, EngineError> {
        let text = self.workspace.read_text(&params.path)?;
        let request = SliceRequest {
            start_line: params.start_line,
            byte_offset: params.byte_offset,
            max_bytes: params.max_bytes.unwrap_or(DEFAULT_READ_BYTES),
        };
        let slice = slice_text(&text, &request).map_err(|e| EngineError::invalid_params(slice_field(&params), e))?;
        Ok(ReadResult {
            path: params.path.clone(),
            content: slice.content.to_owned(),
            byte_offset: slice.byte_offset,
            start_line: slice.start_line,
            end_line: slice.end_line,
            next_line: slice.next_line,
            next_byte_offset: slice.next_byte_offset,
            eof: slice.eof,
            total_lines: slice.total_lines,
            total_bytes: slice.total_bytes,
        })
    }

    /// Removes offload files older than the retention that no live message refers to.
    pub fn sweep(&self, now: SystemTime) -> Result<SweepReport, StorageError> {
        let _gate = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let referenced = self.sessions.referenced_files()?;
        let retention = Duration::from_secs_f64(self.config.retention.offload_retention_days * 86_400.0);
        self.offloads.sweep(now, retention, &referenced)
    }
}

/// Which `context.read` param a slicing error is about.
fn slice_field(params: &ReadParams) -> &'static str {
    if params.byte_offset.is_some() {
        "byte_offset"
    } else if params.max_bytes == Some(0) {
        "max_bytes"
    } else {
        "start_line"
    }
}

/// A session whose numbers are not at hand.
fn not_loaded(session_id: &str, live: bool) -> SessionSummary {
    SessionSummary {
        session_id: session_id.to_owned(),
        live,
        messages: None,
        tokens: None,
        pressure: None,
        compactions: None,
    }
}
