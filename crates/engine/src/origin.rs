//! Where a proxied session's requests come from: `satchel proxy` tells the engine which
//! provider API a session's agent speaks and what named the session, and records each
//! compaction the agent asked its own model for. Inspect shows both (`origin`).

use satchel_protocol::AgentCompaction;
use satchel_storage::SessionRecord;

use crate::call::CallToken;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::live::Ticket;

/// What the proxy knows of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestOrigin<'a> {
    /// `anthropic-messages`, `openai-chat` or `openai-responses`.
    pub api: &'a str,
    /// What named the session.
    pub key_from: &'a str,
    /// The request asked the model to summarise the conversation (the agent's own
    /// compaction): the messages of the history it sent.
    pub agent_compaction: Option<usize>,
}

impl Engine {
    /// Records `origin` for the session of `ticket`, which a `context.prepare` made: the
    /// API and key source when they differ from those logged, the agent's compaction when
    /// there is one. Nothing is written for a request like the previous one.
    pub fn note_origin(&self, ticket: Ticket, origin: RequestOrigin<'_>, token: &CallToken) -> Result<(), EngineError> {
        let id = ticket.session_id().to_owned();
        self.transaction(ticket, token, |slot| {
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(id.clone()));
            };
            let known = session.origin();
            let mut records = Vec::new();
            if known.is_none_or(|k| k.api != origin.api || k.key_from != origin.key_from) {
                records.push(SessionRecord::Origin {
                    api: origin.api.to_owned(),
                    key_from: origin.key_from.to_owned(),
                });
            }
            let compaction = origin.agent_compaction.map(|messages| AgentCompaction {
                at: self.clock.now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                messages,
            });
            records.extend(compaction.clone().map(SessionRecord::AgentCompaction));
            if records.is_empty() {
                return Ok(());
            }
            self.sessions.append(&id, &records)?;
            if !token.commit() {
                return Err(EngineError::Cancelled);
            }
            session.note_origin(origin.api, origin.key_from, compaction);
            Ok(())
        })
    }
}
