//! Satchel's engine: sessions in memory and the pipeline `context.prepare` runs, as a library
//! that knows no transport.
//!
//! The engine holds each session's messages, reconciles what a client sends with them,
//! offloads large tool results, compacts the older part into a summary, archives it, and
//! recovers from a crash on load. Calls on one session run in arrival order, each as one
//! transaction: all its effects durable and its result returned, or none. Time and ids come
//! from an injected [`Clock`] and [`IdSource`]; models and progress reports come with each
//! call ([`CallContext`]); what a call did is returned as an event for the caller to publish.
//!
//! # Layout
//!
//! - [`engine`]: the [`Engine`] and the transaction every session call runs in; its doc lists
//!   the files that each hold one call's `impl Engine` block.
//! - [`live`]: sessions in memory, the per-session queue of calls, eviction.
//! - `candidates`: learning candidates in the signed store, and their prompt sections.
//! - `prepare`, `ingest`, `compact`, `expand`, `pins`, `usage_report`, `origin`, `recovery`,
//!   `queries`: one call or stage each; `inspection`: what inspect derives from a session (tokens by
//!   role, offload savings) and its effective configuration.
//! - `request`: the one `Request` a call counts, prunes, renders and compacts (its
//!   configuration, counter and extras), and the token usage per zone of it.
//! - `assembly`: the system prompt a request is assembled with; `pruning`: `aceclaw` mode's
//!   pruning of a rendered request.
//! - `session`: a session's state, which owns its invariants: its messages and their cached
//!   renderings (`mod`, `entry`), reconciliation (`align`), every change a call makes
//!   (`updates`), and the state types kept with it: `request_state` (calibration and the
//!   monitor's numbers), `prompt` (the last assembled prompt), `pins`, `expansion`.
//! - [`call`]: cancellation, models and progress, as a caller passes them.
//! - [`clock`]: the injected sources of time and ids.
//! - `parallel`: sharing a large batch of per-message work between cores.

mod assembly;
pub mod call;
mod candidates;
pub mod clock;
mod compact;
pub mod engine;
mod error;
mod expand;
mod ingest;
mod inspection;
pub mod live;
mod origin;
pub mod parallel;
mod pins;
mod prepare;
mod pruning;
mod queries;
mod recovery;
mod request;
mod result_size;
mod session;
#[cfg(test)]
mod tests;
mod usage_report;

pub use call::{CallContext, CallToken, EventSink, ModelSource, NoModels, ProgressSink};
pub use clock::{Clock, IdSource, ManualClock, RandomIds, SequentialIds, SystemClock};
pub use engine::Engine;
pub use error::EngineError;
pub use live::Ticket;
pub use origin::RequestOrigin;
pub use prepare::Prepared;

use satchel_core::repair::Repair;
use satchel_protocol::{Action, CompactionEvent, ContextEvent, EventKind, RepairKind};

use crate::session::Session;

/// What a call returns, and the event its session's watchers are told.
#[derive(Debug)]
pub struct Outcome<T> {
    /// The call's result.
    pub result: T,
    /// What changed, for `context.watch`ers; `None` when nothing did.
    pub event: Option<ContextEvent>,
}

/// The event telling watchers what a call just did to session `id`.
fn event_of(id: &str, session: &Session, kind: EventKind, actions: &[Action]) -> ContextEvent {
    let tokens = session.last_usage().cloned().unwrap_or_default();
    let compaction = actions.iter().rev().find_map(|a| match a {
        Action::Compacted(report) => Some(CompactionEvent {
            id: Some(report.id.clone()),
            manual: report.manual,
            messages: report.messages,
            tokens_before: report.tokens_before,
            tokens_after: Some(report.tokens_after),
            threshold: tokens.threshold,
            dropped: report.dropped.iter().take(EVENT_DROPPED).cloned().collect(),
        }),
        _ => None,
    });
    ContextEvent {
        session_id: id.to_owned(),
        kind,
        pressure: tokens.pressure(),
        tokens,
        messages: session.entries().len(),
        compactions: session.compactions().len(),
        actions: actions.iter().map(Action::kind).collect(),
        compaction,
    }
}

/// Dropped identifiers an event carries; the action and inspect have them all.
const EVENT_DROPPED: usize = 5;

/// The action reporting a repair.
fn repair_action(repair: &Repair) -> Action {
    let (index, repair, call_id) = match repair {
        Repair::SyntheticResult { index, call_id } => (*index, RepairKind::SyntheticResult, Some(call_id.clone())),
        Repair::DroppedOrphanResult { index, call_id } => {
            (*index, RepairKind::DroppedOrphanResult, Some(call_id.clone()))
        }
        Repair::MergedSameRole { index } => (*index, RepairKind::MergedSameRole, None),
        Repair::MovedResultsFirst { index } => (*index, RepairKind::MovedResultsFirst, None),
        Repair::InsertedLeadingUser => (0, RepairKind::InsertedLeadingUser, None),
        Repair::DroppedEmptyText { index } => (*index, RepairKind::DroppedEmptyText, None),
    };
    Action::Repaired { index, repair, call_id }
}
