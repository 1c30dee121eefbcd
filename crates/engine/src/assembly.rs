//! The system prompt of a request: the client's `system` and `sections` assembled under the
//! budget, boosted by the newest user message (AceClaw F10, F11), and what inspect shows of it.
//!
//! A client resends the same sections on every call, so the assembly is kept with a hash of
//! what it was made from (the sections' JSON texts, `system`, the query, the budget) and
//! reused while that hash holds: a steady step hashes its sections and parses nothing.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use satchel_core::budget_note::BUDGET_SECTION_KEY;
use satchel_core::calibration::corrected;
use satchel_core::candidates::SECTION_KEY_PREFIX;
use satchel_core::hash::{MessageHash, text_hash};
use satchel_core::prompt::focus::TASK_FOCUS_KEY;
use satchel_core::prompt::{
    BuiltPrompt, PromptError, PromptInput, SystemPromptBudget, build, is_system_key, newest_query, validate_input,
};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{Config, PromptAssembly, PromptSection, SectionDetail};
use serde_json::Value;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3;

use crate::error::EngineError;
use crate::session::Session;

/// The system prompt of a request, with what it was made from.
#[derive(Debug)]
pub struct PromptState {
    /// Hash of the inputs; the same inputs give the same prompt.
    key: u128,
    /// The client's `system`.
    system: Option<Value>,
    /// The client's leading system message, its base prompt when it sent no `system`.
    base_message: Option<String>,
    /// Its token count and the hash of the counter it was counted with (counted once, for the
    /// report, and handed on to the next prompt with the same base).
    base_message_tokens: Mutex<Option<(u128, u64)>>,
    /// The client's sections.
    sections: Vec<PromptSection>,
    /// The budget it was cut to.
    budget: SystemPromptBudget,
    /// `task_focus_section_enabled` when it was built.
    task_focus_section: bool,
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

/// The request's prompt inputs, as the call received them.
pub(crate) struct PromptRequest<'a> {
    /// `system`.
    pub system: Option<&'a Value>,
    /// `sections`, each as its JSON text.
    pub sections: Option<&'a [Box<RawValue>]>,
}

/// Refuses prompt inputs that [`assemble`] would refuse, before the call changes the session
/// (so a refused call changes nothing). Inputs equal to the last ones checked passed then: a
/// steady step hashes them and parses nothing.
pub(crate) fn check(session: &mut Session, request: &PromptRequest<'_>, config: &Config) -> Result<(), EngineError> {
    if request.system.is_none() && request.sections.is_none() {
        return Ok(());
    }
    // The keys satchel's own sections take depend on these switches: a change of them is a
    // change of what must be checked.
    let switches = [
        request.system.is_some(),
        config.sections.task_focus_section_enabled,
        config.sections.budget_section_enabled,
        config.candidates.candidates_enabled,
    ];
    let key = switches
        .iter()
        .fold(inputs_key(request), |key, &on| key.rotate_left(1) ^ u128::from(on));
    if session.requests.checked_prompt_inputs == Some(key) {
        return Ok(());
    }
    let sections = parse_sections(request.sections.unwrap_or_default())?;
    let taken = |section_key: &str| {
        (request.system.is_some() && is_system_key(section_key))
            || (config.sections.task_focus_section_enabled && section_key == TASK_FOCUS_KEY)
            || (config.sections.budget_section_enabled && section_key == BUDGET_SECTION_KEY)
            || (config.candidates.candidates_enabled && section_key.starts_with(SECTION_KEY_PREFIX))
    };
    validate_input(request.system, &sections, taken).map_err(invalid)?;
    session.requests.checked_prompt_inputs = Some(key);
    Ok(())
}

/// The prompt of this request for `session` (its newest user message is the query), reusing
/// the last one when nothing it depends on changed. `None` when the request has neither
/// `system` nor `sections`: then nothing is assembled and the client's request is as it was.
pub(crate) fn assemble(
    session: &Session,
    request: PromptRequest<'_>,
    config: &Config,
) -> Result<Option<Arc<PromptState>>, EngineError> {
    let base_message = request.system.is_none().then(|| leading_system_text(session)).flatten();
    if request.system.is_none() && request.sections.is_none() && base_message.is_none() {
        return Ok(None);
    }
    let query = newest_user_text(session);
    let budget = SystemPromptBudget::of_config(config);
    let task_focus_section = config.sections.task_focus_section_enabled;
    let mut key = input_key(&request, query.as_deref(), budget, task_focus_section);
    if let Some(text) = base_message {
        key ^= text_hash(text).rotate_left(1);
    }
    if let Some(last) = &session.requests.last_prompt
        && last.key == key
    {
        return Ok(Some(Arc::clone(last)));
    }
    let sections = parse_sections(request.sections.unwrap_or_default())?;
    let system = request.system.cloned();
    // A client that names a section `system` itself keeps it: its leading message is then
    // sent as it is, without being assembled as the base prompt.
    let base_message = base_message
        .filter(|_| !sections.iter().any(|s| is_system_key(&s.key)))
        .map(str::to_owned);
    let inputs = Inputs {
        system: system.as_ref(),
        base_message: base_message.as_deref(),
        sections: &sections,
    };
    let built = build_owned(inputs, query.as_deref(), budget, task_focus_section)?;
    let system_hash = built.system.as_ref().map(MessageHash::of_value);
    let system_raw = built.system.as_ref().map(to_raw);
    // A new user turn makes a new prompt; the base it was made from is counted already.
    let base_message_tokens = session
        .requests
        .last_prompt
        .as_ref()
        .filter(|last| last.base_message == base_message)
        .and_then(|last| *last.base_message_tokens.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Some(Arc::new(PromptState {
        key,
        system,
        base_message,
        base_message_tokens: Mutex::new(base_message_tokens),
        sections,
        budget,
        task_focus_section,
        built,
        system_hash,
        system_raw,
        report_raw: Mutex::new(None),
    })))
}

impl PromptState {
    /// The same sections assembled for another query (inspect's `query_hint`).
    pub(crate) fn with_query(&self, query: &str) -> Result<BuiltPrompt<'static>, EngineError> {
        let inputs = Inputs {
            system: self.system.as_ref(),
            base_message: self.base_message.as_deref(),
            sections: &self.sections,
        };
        build_owned(inputs, Some(query), self.budget, self.task_focus_section)
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

impl PromptState {
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
        let report = report(id, &self.built, self.budget, key.tokens, key.factor, config);
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
        let Some(text) = &self.base_message else {
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
        self.budget
    }
}

/// Section `key` of `built` in full, or an error listing the keys there are.
pub(crate) fn detail(built: &BuiltPrompt<'_>, key: &str) -> Result<SectionDetail, EngineError> {
    let sections = &built.assembled.sections;
    let Some(section) = sections.iter().find(|s| s.report.key == key) else {
        let known: Vec<&str> = sections.iter().map(|s| s.report.key.as_str()).collect();
        return Err(EngineError::invalid_params(
            "detail_key",
            format!("no section {key:?} in the last request; its sections are {known:?}"),
        ));
    };
    Ok(SectionDetail {
        report: section.report.clone(),
        content: section.content().to_owned(),
        original_content: section.original.to_string(),
    })
}

/// The text of the newest user message that is a turn of its own.
fn newest_user_text(session: &Session) -> Option<String> {
    session
        .entries
        .iter()
        .rev()
        .find_map(|entry| newest_query(std::slice::from_ref(&entry.message)))
}

/// What the client gave the prompt: its `system`, its leading system message, its sections.
struct Inputs<'a> {
    system: Option<&'a Value>,
    base_message: Option<&'a str>,
    sections: &'a [PromptSection],
}

/// The text of the session's leading system message (OpenAI `system` or `developer`), which
/// is the client's base prompt when it sends no `system`: it is assembled and reported as
/// `system` would be, and sent as the message it is.
fn leading_system_text(session: &Session) -> Option<&str> {
    if session.format == Some(satchel_core::format::MessageFormat::Anthropic) {
        return None;
    }
    let first = session.entries.first().filter(|e| e.index == 0)?;
    let role = first.message.get("role")?.as_str()?;
    if !matches!(role, "system" | "developer") {
        return None;
    }
    first.message.get("content")?.as_str()
}

/// [`build`], owning everything it returns.
fn build_owned(
    inputs: Inputs<'_>,
    query: Option<&str>,
    budget: SystemPromptBudget,
    task_focus_section: bool,
) -> Result<BuiltPrompt<'static>, EngineError> {
    let input = PromptInput {
        system: inputs.system,
        base_message: inputs.base_message,
        sections: inputs.sections,
        query,
        budget,
        task_focus_section,
    };
    build(input).map(BuiltPrompt::into_owned).map_err(invalid)
}

fn invalid(e: PromptError) -> EngineError {
    EngineError::invalid_params(e.field(), e.reason())
}

/// Parses each section's JSON text, naming the one at fault.
fn parse_sections(texts: &[Box<RawValue>]) -> Result<Vec<PromptSection>, EngineError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let mut deserializer = serde_json::Deserializer::from_str(text.get());
            serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
                let path = e.path().to_string();
                let field = if path == "." {
                    format!("sections[{i}]")
                } else {
                    format!("sections[{i}].{path}")
                };
                EngineError::invalid_params(&field, e.into_inner().to_string())
            })
        })
        .collect()
}

/// The hash of the client's prompt inputs, `system` and the sections' texts.
fn inputs_key(request: &PromptRequest<'_>) -> u128 {
    let mut hasher = Xxh3::new();
    hash_inputs(&mut hasher, request);
    hasher.digest128()
}

fn hash_inputs(hasher: &mut Xxh3, request: &PromptRequest<'_>) {
    let system = request.system.map_or([0; 16], |s| MessageHash::of_value(s).to_bytes());
    hasher.update(&system);
    for section in request.sections.unwrap_or_default() {
        hasher.update(&text_hash(section.get()).to_le_bytes());
    }
    hasher.update(&[u8::from(request.sections.is_some())]);
}

/// The hash of everything the prompt depends on.
fn input_key(
    request: &PromptRequest<'_>,
    query: Option<&str>,
    budget: SystemPromptBudget,
    task_focus_section: bool,
) -> u128 {
    let mut hasher = Xxh3::new();
    hash_inputs(&mut hasher, request);
    hasher.update(query.unwrap_or_default().as_bytes());
    hasher.update(&[u8::from(query.is_some())]);
    hasher.update(&budget.max_per_section_chars.to_le_bytes());
    hasher.update(&budget.max_total_chars.to_le_bytes());
    hasher.update(&[u8::from(task_focus_section)]);
    hasher.digest128()
}

/// The JSON text of `value`.
fn to_raw(value: &impl serde::Serialize) -> Arc<RawValue> {
    Arc::from(serde_json::value::to_raw_value(value).expect("a prompt always serialises"))
}
