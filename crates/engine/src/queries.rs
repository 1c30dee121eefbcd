//! The calls that only look: `context.inspect`, `context.sessions`, `context.read`, and the
//! offload sweep.

use std::time::{Duration, SystemTime};

use satchel_core::slice::{SliceRequest, slice_text};
use satchel_protocol::{
    InspectParams, InspectResult, OffloadedResult, ReadParams, ReadResult, SessionSummary, SessionsResult, TokenUsage,
};
use satchel_storage::{StorageError, SweepReport};

use crate::call::CallToken;
use crate::compact::report_of;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::live::Ticket;

/// Default `max_bytes` of `context.read`, the same as the first-phase limit.
const DEFAULT_READ_BYTES: usize = 50_000;

impl Engine {
    /// `context.inspect`, in the session's turn (after the calls queued before it).
    pub fn inspect(&self, ticket: Ticket, params: InspectParams) -> Result<InspectResult, EngineError> {
        self.transaction(ticket, &CallToken::new(), |slot| {
            let Some(session) = slot.as_ref() else {
                return Err(EngineError::UnknownSession(params.session_id.clone()));
            };
            let tokens = session.last_usage.clone().unwrap_or_else(|| TokenUsage {
                limit: self.config.max_input_length,
                threshold: self.config.compact_threshold_tokens(),
                tokenizer: self.config.tokenizer,
                ..TokenUsage::default()
            });
            Ok(InspectResult {
                session_id: params.session_id.clone(),
                format: session.format,
                pressure: tokens.pressure(),
                tokens,
                messages: session.entries.len(),
                archived_messages: session.archived_count(),
                summary: session.summary().cloned(),
                offloaded: session
                    .entries
                    .iter()
                    .flat_map(|e| {
                        e.offloaded.iter().map(|o| OffloadedResult {
                            index: e.index,
                            pointer: o.pointer.clone(),
                            file: o.file.clone(),
                            total_bytes: o.stats.total_bytes,
                            total_lines: o.stats.total_lines,
                        })
                    })
                    .collect(),
                compactions: session
                    .compactions
                    .iter()
                    .map(|c| report_of(&c.begun, c.range.as_ref()))
                    .collect(),
                peak_tokens: session.peak_tokens,
            })
        })
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
                            messages: Some(session.entries.len()),
                            tokens: session.last_usage.as_ref().map(|u| u.total),
                            pressure: session.last_usage.as_ref().map(TokenUsage::pressure),
                            compactions: Some(session.compactions.len()),
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
        let retention = Duration::from_secs_f64(self.config.offload_retention_days * 86_400.0);
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
