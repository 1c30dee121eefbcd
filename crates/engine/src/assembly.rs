//! The system prompt of a request: the client's `system` and `sections` assembled under the
//! budget, boosted by the newest user message (AceClaw F10, F11), and what inspect shows of it.
//!
//! A client resends the same sections on every call, so the assembly is kept with a hash of
//! what it was made from (the sections' JSON texts, `system`, the query, the budget) and
//! reused while that hash holds: a steady step hashes its sections and parses nothing.

use std::sync::Arc;

use satchel_core::budget_note::BUDGET_SECTION_KEY;
use satchel_core::candidates::SECTION_KEY_PREFIX;
use satchel_core::hash::{MessageHash, text_hash};
use satchel_core::prompt::focus::TASK_FOCUS_KEY;
use satchel_core::prompt::{BuiltPrompt, SystemPromptBudget, is_system_key, newest_query, validate_input};
use satchel_protocol::{Config, PromptSection, SectionDetail};
use serde_json::Value;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3;

use crate::error::EngineError;
use crate::session::Session;
use crate::session::prompt::{PromptSource, PromptState, invalid_prompt};

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
    if session.requests().checked_prompt_inputs == Some(key) {
        return Ok(());
    }
    let sections = parse_sections(request.sections.unwrap_or_default())?;
    let taken = |section_key: &str| {
        (request.system.is_some() && is_system_key(section_key))
            || (config.sections.task_focus_section_enabled && section_key == TASK_FOCUS_KEY)
            || (config.sections.budget_section_enabled && section_key == BUDGET_SECTION_KEY)
            || (config.candidates.candidates_enabled && section_key.starts_with(SECTION_KEY_PREFIX))
    };
    validate_input(request.system, &sections, taken).map_err(invalid_prompt)?;
    session.prompt_inputs_checked(key);
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
    if let Some(last) = &session.requests().last_prompt
        && last.key() == key
    {
        return Ok(Some(Arc::clone(last)));
    }
    let sections = parse_sections(request.sections.unwrap_or_default())?;
    // A client that names a section `system` itself keeps it: its leading message is then
    // sent as it is, without being assembled as the base prompt.
    let base_message = base_message
        .filter(|_| !sections.iter().any(|s| is_system_key(&s.key)))
        .map(str::to_owned);
    let source = PromptSource {
        system: request.system.cloned(),
        base_message,
        sections,
        budget,
        task_focus_section,
    };
    let last = session.requests().last_prompt.as_deref();
    Ok(Some(Arc::new(PromptState::build(key, source, query.as_deref(), last)?)))
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
        .entries()
        .iter()
        .rev()
        .find_map(|entry| newest_query(std::slice::from_ref(&entry.message)))
}

/// The text of the session's leading system message (OpenAI `system` or `developer`), which
/// is the client's base prompt when it sends no `system`: it is assembled and reported as
/// `system` would be, and sent as the message it is.
fn leading_system_text(session: &Session) -> Option<&str> {
    if session.format() == Some(satchel_core::format::MessageFormat::Anthropic) {
        return None;
    }
    let first = session.entries().first().filter(|e| e.index == 0)?;
    let role = first.message.get("role")?.as_str()?;
    if !matches!(role, "system" | "developer") {
        return None;
    }
    first.message.get("content")?.as_str()
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
