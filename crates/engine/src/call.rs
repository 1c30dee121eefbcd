//! What a call brings from outside the engine: its cancellation, the model to summarise
//! with, and where progress goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use satchel_core::summary::llm::Completer;
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{Config, ContextEvent};

const RUNNING: u8 = 0;
const CANCELLED: u8 = 1;
const COMMITTED: u8 = 2;

/// Decides, once, whether a call takes effect or is cancelled.
///
/// A call claims its commit point with [`CallToken::commit`] before its first effect that
/// cannot be rolled back; a cancel before that wins and the call undoes what it did, a
/// cancel after it loses and the call's result stands. Clones share the decision.
#[derive(Debug, Clone, Default)]
pub struct CallToken(Arc<AtomicU8>);

impl CallToken {
    /// A token for a call that has neither committed nor been cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the call unless it has committed. `true`: the call will have no effect.
    pub fn cancel(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == CANCELLED,
        }
    }

    /// Whether the call was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCELLED
    }

    /// Claims the commit point. `false`: the call was cancelled first and must undo itself.
    pub fn commit(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, COMMITTED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == COMMITTED,
        }
    }
}

/// Where the model-backed summarisers (`openai`, `client`, `upstream`) get their model.
pub trait ModelSource: Sync {
    /// The completer for `kind` under `config`, or why there is none (the compaction then
    /// falls back to the extractive summariser and says so). It may borrow from the source,
    /// so what a call lends its model (a proxied request's credentials) cannot outlive it.
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer + '_>, String>;
}

/// No model at all: every compaction is extractive.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoModels;

impl ModelSource for NoModels {
    fn completer(&self, _: SummarizerKind, _: &Config) -> Result<Box<dyn Completer + '_>, String> {
        Err("no model backend is available to this call".into())
    }
}

/// Receives `(stage, stages)` while a model summarises.
pub type ProgressSink = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Receives the events a call sends while it runs (a compaction starting), for watchers.
pub type EventSink<'a> = &'a (dyn Fn(ContextEvent) + Sync);

/// The sink of a call nobody watches.
fn ignore_event(_: ContextEvent) {}

/// Everything a call needs from its caller besides its params.
#[derive(Clone)]
pub struct CallContext<'a> {
    /// The model for model-backed summarisers.
    pub models: &'a dyn ModelSource,
    /// Progress of a model summary.
    pub progress: ProgressSink,
    /// Events to publish while the call runs.
    pub events: EventSink<'a>,
    /// The call's cancellation.
    pub token: CallToken,
    /// The largest result the caller can deliver, in bytes of JSON: a call whose result
    /// would be larger fails before it takes effect (`None`: no limit).
    pub max_result_bytes: Option<usize>,
}

impl CallContext<'_> {
    /// A call with no model, no progress reports, and a token nobody else holds.
    pub fn detached() -> CallContext<'static> {
        CallContext {
            models: &NoModels,
            progress: Arc::new(|_, _| {}),
            events: &ignore_event,
            token: CallToken::new(),
            max_result_bytes: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_cancel_and_commit_wins_and_both_are_idempotent() {
        let token = CallToken::new();
        assert!(token.cancel());
        assert!(token.cancel());
        assert!(!token.commit());
        assert!(token.is_cancelled());

        let token = CallToken::new();
        assert!(token.commit());
        assert!(token.commit());
        assert!(!token.cancel());
        assert!(!token.is_cancelled());
    }
}
