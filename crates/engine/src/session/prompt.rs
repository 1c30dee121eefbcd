//! The system prompt a session's last request was sent with: what it was made from, the
//! prompt, and its report, kept so that a steady step reuses them. Assembling one for a call
//! is `assembly.rs` at the crate root.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use satchel_core::calibration::corrected;
use satchel_core::candidates::SECTION_KEY_PREFIX;
use satchel_core::hash::MessageHash;
use satchel_core::prompt::{BuiltPrompt, PromptError, PromptInput, SystemPromptBudget, build};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{Config, PromptAssembly, PromptSection};
use serde_json::Value;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3;

use super::Session;
use crate::error::EngineError;

/// What the client gave a prompt: its `system`, its leading system message, its sections, and
/// the budget and switches it is assembled under.
#[derive(Debug)]
pub(crate) struct PromptSource {
    /// The client's `system`.
    pub system: Option<Value>,
    /// The client's leading system message, its base prompt when it sent no `system`.
    pub base_message: Option<String>,
    /// The client's sections.
    pub sections: Vec<PromptSection>,
    /// The budget it is cut to.
    pub budget: SystemPromptBudget,
    /// `task_focus_section_enabled`.
    pub task_focus_section: bool,
}

/// The system prompt of a request, with what it was made from.
#[derive(Debug)]
pub struct PromptState {
    /// Hash of the inputs; the same inputs give the same prompt.
    key: u128,
    /// What it was made from.
    source: PromptSource,
    /// The base message's token count and the hash of the counter it was counted with
    /// (counted once, for the report, and handed on to the next prompt with the same base).
    base_message_tokens: Mutex<Option<(u128, u64)>>,
    /// The prompt.
    pub built: BuiltPrompt<'static>,
    /// Hash of `built.system`, for its token count.
    system_hash: Option<MessageHash>,
    /// `built.system` as JSON text, shared into every reply.
    system_raw: Option<Arc<RawValue>>,
    /// The last report as JSON text, and what it was made for: a steady step sends the same.
    report_raw: Mutex<Option<(ReportKey, Arc<RawValue>)>>,
}

/// What a report depends on besides the prompt itself.
#[derive(Debug, Clone, PartialEq)]
struct ReportKey {
    session_id: String,
    tokens: u64,
    factor: f64,
    window: u64,
}

impl PromptState {
    /// The prompt assembled from `source` for `query`, its inputs hashing to `key`; the base
    /// message's count is taken over from the `last` prompt when that had the same base.
    pub(crate) fn build(
        key: u128,
        source: PromptSource,
        query: Option<&str>,
        last: Option<&PromptState>,
    ) -> Result<Self, EngineError> {
        let built = build_owned(&source, query)?;
        let system_hash = built.system.as_ref().map(MessageHash::of_value);
        let system_raw = built.system.as_ref().map(to_raw);
        // A new user turn makes a new prompt; the base it was made from is counted already.
        let base_message_tokens = last
            .filter(|last| last.source.base_message == source.base_message)
            .and_then(|last| *last.base_message_tokens.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(PromptState {
            key,
            source,
            base_message_tokens: Mutex::new(base_message_tokens),
            built,
            system_hash,
            system_raw,
            report_raw: Mutex::new(None),
        })
    }

    /// The hash of the inputs it was made from.
    pub(crate) fn key(&self) -> u128 {
        self.key
    }

    /// The same sections assembled for another query (inspect's `query_hint`).
    pub(crate) fn with_query(&self, query: &str) -> Result<BuiltPrompt<'static>, EngineError> {
        build_owned(&self.source, Some(query))
    }

    /// The `system` to send.
    pub(crate) fn system(&self) -> Option<Value> {
        self.built.system.clone()
    }

    /// The `system` to send, as JSON text.
    pub(crate) fn system_raw(&self) -> Option<Arc<RawValue>> {
        self.system_raw.clone()
    }

    /// The hash of the `system` to send.
    pub(crate) fn system_hash(&self) -> Option<MessageHash> {
        self.system_hash
    }

    /// The report of this prompt for session `id`, as JSON text (made again only when the
    /// prompt's token count, the calibration or the window changed), and its over-budget notice.
    pub(crate) fn report_raw(
        &self,
        id: &str,
        session: &mut Session,
        counter: &TokenCounter,
        config: &Config,
    ) -> (Arc<RawValue>, Option<String>) {
        let over_budget = self.built.assembled.over_budget.clone();
        let key = ReportKey {
            session_id: id.to_owned(),
            tokens: self.tokens(session, counter),
            factor: session.requests.calibration.factor,
            window: config.effective_window(),
        };
        let mut cached = self.report_raw.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((made_for, raw)) = cached.as_ref()
            && *made_for == key
        {
            return (Arc::clone(raw), over_budget);
        }
        let report = report(id, &self.built, self.source.budget, key.tokens, key.factor, config);
        let raw = to_raw(&report);
        *cached = Some((key, Arc::clone(&raw)));
        (raw, over_budget)
    }

    /// Tokens of the assembled prompt: `system` (cached by the session per distinct prompt),
    /// and the leading system message that is its base.
    fn tokens(&self, session: &mut Session, counter: &TokenCounter) -> u64 {
        let system = session
            .extras_tokens(self.built.system.as_ref(), self.system_hash, None, counter)
            .0;
        system + self.base_message_tokens(counter)
    }

    /// Tokens of the leading system message that is the prompt's base (0 without one).
    pub(crate) fn base_message_tokens(&self, counter: &TokenCounter) -> u64 {
        let Some(text) = &self.source.base_message else {
            return 0;
        };
        let counted_with = {
            let mut hasher = Xxh3::new();
            counter.hash(&mut hasher);
            hasher.digest128()
        };
        let mut cached = self.base_message_tokens.lock().unwrap_or_else(|p| p.into_inner());
        match *cached {
            Some((key, tokens)) if key == counted_with => tokens,
            _ => {
                let tokens = counter.count_text(text);
                *cached = Some((counted_with, tokens));
                tokens
            }
        }
    }

    /// The budget it was cut to.
    pub(crate) fn budget(&self) -> SystemPromptBudget {
        self.source.budget
    }
}

/// What inspect and the prepare result show of `built`, the prompt of session `id`, whose
/// system prompt counts `tokens` (uncorrected) tokens.
pub(crate) fn report(
    id: &str,
    built: &BuiltPrompt<'_>,
    budget: SystemPromptBudget,
    tokens: u64,
    factor: f64,
    config: &Config,
) -> PromptAssembly {
    let estimated_tokens = corrected(tokens, factor);
    let window = config.effective_window();
    let share = estimated_tokens as f64 * 100.0 / window.max(1) as f64;
    PromptAssembly {
        session_id: id.to_owned(),
        total_chars: built.assembled.total_chars,
        estimated_tokens,
        context_window_tokens: window,
        system_prompt_share_pct: (share * 100.0).round() / 100.0,
        request_focus: built.focus.clone(),
        budget: budget.to_wire(),
        truncated_section_keys: built.assembled.truncated_section_keys.clone(),
        sections: built.assembled.sections.iter().map(|s| s.report.clone()).collect(),
        over_budget: built.assembled.over_budget.clone(),
        injected_candidate_ids: injected_candidates(built),
    }
}

/// The ids of the learned candidates whose sections `built` includes.
pub(crate) fn injected_candidates(built: &BuiltPrompt<'_>) -> Vec<String> {
    built
        .assembled
        .sections
        .iter()
        .filter(|s| s.report.included)
        .filter_map(|s| s.report.key.strip_prefix(SECTION_KEY_PREFIX).map(str::to_owned))
        .collect()
}

/// [`build`] from `source` for `query`, owning everything it returns.
fn build_owned(source: &PromptSource, query: Option<&str>) -> Result<BuiltPrompt<'static>, EngineError> {
    let input = PromptInput {
        system: source.system.as_ref(),
        base_message: source.base_message.as_deref(),
        sections: &source.sections,
        query,
        budget: source.budget,
        task_focus_section: source.task_focus_section,
    };
    build(input).map(BuiltPrompt::into_owned).map_err(invalid_prompt)
}

/// A prompt the client's inputs cannot make, as the error naming the input at fault.
pub(crate) fn invalid_prompt(e: PromptError) -> EngineError {
    EngineError::invalid_params(e.field(), e.reason())
}

/// The JSON text of `value`.
fn to_raw(value: &impl serde::Serialize) -> Arc<RawValue> {
    Arc::from(serde_json::value::to_raw_value(value).expect("a prompt always serialises"))
}
