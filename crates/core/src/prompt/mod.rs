//! The system prompt of a request, assembled AceClaw's way (spec 04, F10 and F11): the
//! client's `system` and its `sections`, boosted by what the newest user message is about,
//! cut to a character budget, and given back in the shape the client sent.
//!
//! [`build`] is the one entry the engine calls, on every request: it validates the client's
//! sections, extracts the [`RequestFocus`], boosts, adds a `task-focus` section (when it sends sections), assembles and
//! renders. Pure and linear in the size of the sections.
//!
//! The prompt order is: the client's `system` (its text blocks in order), the client's
//! sections in the order sent, then `task-focus`. The focus changes with every request, so it
//! goes last: a prefix cache (OpenAI's automatic one, or Anthropic's breakpoints) keeps
//! everything before it.

pub mod assemble;
pub mod boost;
pub mod budget;
pub mod focus;
mod system;
pub mod truncate;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

use satchel_protocol::{PromptSection, RequestFocus};
use serde_json::Value;

pub use assemble::{Assembled, AssembledSection, DuplicateKey, OverBudget, SECTION_SEPARATOR, Section, assemble};
pub use boost::{FocusMatcher, MAX_FOCUS_BOOST, boost};
pub use budget::SystemPromptBudget;
pub use focus::{newest_query, request_focus, task_focus_section};
pub use system::{SYSTEM_KEY, SYSTEM_PRIORITY, SYSTEM_SOURCE};

use system::SystemParts;

/// Everything [`build`] needs.
#[derive(Debug, Clone, Copy)]
pub struct PromptInput<'a> {
    /// The request's `system` parameter: a string, an array of Anthropic blocks, or none.
    pub system: Option<&'a Value>,
    /// The text of the client's leading system message (OpenAI), when it sent no `system`:
    /// its base prompt, assembled and reported as `system` is, but left out of the returned
    /// `system` because it is sent as that message.
    pub base_message: Option<&'a str>,
    /// The client's sections, in prompt order.
    pub sections: &'a [PromptSection],
    /// The newest user message's text ([`newest_query`]); `None` for no focus.
    pub query: Option<&'a str>,
    /// The budget to cut to.
    pub budget: SystemPromptBudget,
    /// Whether a client that sends sections gets the `task-focus` section
    /// (`task_focus_section_enabled`); the focus boosts the sections either way.
    pub task_focus_section: bool,
}

/// The assembled system prompt of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltPrompt<'a> {
    /// The `system` to send, in the client's shape; `None` when the client sent none and
    /// nothing was assembled.
    pub system: Option<Value>,
    /// What the newest user message is about.
    pub focus: RequestFocus,
    /// The assembled prompt, its sections (original and final texts with their reports),
    /// the keys cut and the over-budget notice.
    pub assembled: Assembled<'a>,
}

impl BuiltPrompt<'_> {
    /// The same prompt owning every text, to be kept beyond the request.
    pub fn into_owned(self) -> BuiltPrompt<'static> {
        BuiltPrompt {
            system: self.system,
            focus: self.focus,
            assembled: self.assembled.into_owned(),
        }
    }
}

/// Why the sections of a request cannot be assembled: the engine answers invalid params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptError {
    /// A field of a client section is invalid.
    InvalidSection {
        /// Where, e.g. `sections[2].priority`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Two sections share a key (client sections, or one named like satchel's own).
    DuplicateKey(String),
    /// `system` is neither a string nor an array.
    InvalidSystem(String),
}

impl PromptError {
    /// The parameter at fault: `sections[N].field`, `sections` or `system`.
    pub fn field(&self) -> &str {
        match self {
            PromptError::InvalidSection { field, .. } => field,
            PromptError::DuplicateKey(_) => "sections",
            PromptError::InvalidSystem(_) => "system",
        }
    }
}

impl PromptError {
    /// What is wrong, without the field ([`PromptError::field`] names it).
    pub fn reason(&self) -> String {
        match self {
            PromptError::InvalidSection { reason, .. } => reason.clone(),
            other => {
                let text = other.to_string();
                let prefix = format!("{}: ", other.field());
                text.strip_prefix(&prefix).map_or(text.clone(), str::to_owned)
            }
        }
    }
}

impl fmt::Display for PromptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptError::InvalidSection { field, reason } => write!(f, "{field}: {reason}"),
            PromptError::DuplicateKey(key) => {
                write!(f, "sections: key {key:?} is used more than once")?;
                let own = is_system_key(key)
                    || key == focus::TASK_FOCUS_KEY
                    || key.starts_with("satchel:")
                    || key.starts_with("candidate:");
                if own {
                    write!(
                        f,
                        " (satchel names the client's system prompt `system` or `system:N`, and adds `task-focus`, \
                         `satchel:budget` and `candidate:<id>` sections of its own)"
                    )?;
                }
                Ok(())
            }
            PromptError::InvalidSystem(reason) => write!(f, "system: {reason}"),
        }
    }
}

impl std::error::Error for PromptError {}

impl From<DuplicateKey> for PromptError {
    fn from(DuplicateKey(key): DuplicateKey) -> Self {
        PromptError::DuplicateKey(key)
    }
}

/// Rejects a client section with an empty key, a priority outside 0..=100 or a glob that
/// does not parse (whether or not a file is in focus, so the same request always fails alike).
fn validate(index: usize, section: &PromptSection) -> Result<(), PromptError> {
    let invalid = |field: &str, reason: String| PromptError::InvalidSection {
        field: format!("sections[{index}].{field}"),
        reason,
    };
    if section.key.trim().is_empty() {
        return Err(invalid("key", "must not be empty".to_owned()));
    }
    if !(0..=100).contains(&section.priority) {
        return Err(invalid(
            "priority",
            format!("must be in 0..=100, got {}", section.priority),
        ));
    }
    for (j, glob) in section.paths.iter().enumerate() {
        if let Err(e) = boost::parse_glob(glob) {
            return Err(invalid(&format!("paths[{j}]"), format!("{glob:?} is not a glob: {e}")));
        }
    }
    Ok(())
}

/// A section to assemble: its priority boosted by `matcher`, clamped to 0..=100.
fn section<'a>(
    matcher: &FocusMatcher<'_>,
    key: String,
    content: Cow<'a, str>,
    meta: &PromptSection,
    source_type: &str,
) -> Section<'a> {
    let (points, evidence) = matcher.boost_parts(Some(source_type), &content, &meta.paths, meta.priority);
    Section {
        key,
        base_priority: meta.priority,
        priority: (meta.priority + points).clamp(0, 100),
        protected: meta.protected,
        base: false,
        source_type: source_type.to_owned(),
        scope: meta.scope.clone().unwrap_or_else(|| "always-on".to_owned()),
        reason: meta
            .reason
            .clone()
            .unwrap_or_else(|| "Sent by the client in context.prepare sections.".to_owned()),
        evidence,
        content,
    }
}

/// Whether `key` names a section of the client's `system` (`system`, `system:N`).
pub fn is_system_key(key: &str) -> bool {
    key == SYSTEM_KEY || key.starts_with("system:")
}

/// Refuses a client's `system` and `sections` that [`build`] would refuse, whatever the
/// query and the budget: the engine checks a request with it before the request changes
/// its session, so a refused request changes nothing. `taken` says which keys satchel's own
/// sections of this request use (the client's `system`, `task-focus`, learned candidates…): a
/// client section may not share one.
pub fn validate_input(
    system: Option<&Value>,
    sections: &[PromptSection],
    taken: impl Fn(&str) -> bool,
) -> Result<(), PromptError> {
    let mut first_with_key = std::collections::HashMap::with_capacity(sections.len());
    for (i, s) in sections.iter().enumerate() {
        validate(i, s)?;
        if taken(&s.key) {
            return Err(PromptError::DuplicateKey(s.key.clone()));
        }
        if let Some(first) = first_with_key.insert(s.key.as_str(), i) {
            return Err(PromptError::InvalidSection {
                field: format!("sections[{i}].key"),
                reason: format!("{:?} is also the key of sections[{first}]; keys must be unique", s.key),
            });
        }
    }
    SystemParts::split(system).map(drop)
}

/// Assembles the system prompt of a request; see the module documentation.
pub fn build(input: PromptInput<'_>) -> Result<BuiltPrompt<'_>, PromptError> {
    let system_given = input.system.is_some_and(|s| !s.is_null()) || input.base_message.is_some();
    let focus_section = !input.sections.is_empty() && input.task_focus_section;
    validate_input(input.system, input.sections, |key| {
        (system_given && is_system_key(key)) || (focus_section && key == focus::TASK_FOCUS_KEY)
    })?;
    let parts = SystemParts::split(input.system)?;
    let focus = input.query.map(request_focus).unwrap_or_default();
    let matcher = FocusMatcher::new(&focus);
    // Only a client that sends sections gets the focus as a section: a plain `system` is left
    // as sent, so a provider's prompt cache keeps it (and the conversation after it) when the
    // next user message changes the focus.
    let task_focus = if input.sections.is_empty() || !input.task_focus_section {
        None
    } else {
        task_focus_section(&focus)
    };

    let system_meta = PromptSection {
        key: String::new(),
        content: String::new(),
        priority: SYSTEM_PRIORITY,
        protected: false,
        source_type: None,
        scope: None,
        reason: Some("The client's system prompt.".to_owned()),
        paths: Vec::new(),
    };
    let base_message = input.base_message.filter(|_| input.system.is_none());
    let mut sections = Vec::with_capacity(parts.texts.len() + input.sections.len() + 2);
    let message_texts = base_message.map(|text| (SYSTEM_KEY.to_owned(), text));
    for (key, text) in message_texts.iter().chain(&parts.texts) {
        let base = section(&matcher, key.clone(), Cow::Borrowed(*text), &system_meta, SYSTEM_SOURCE);
        sections.push(Section { base: true, ..base });
    }
    for s in input.sections {
        let source = s.source_type.as_deref().unwrap_or("custom");
        sections.push(section(&matcher, s.key.clone(), Cow::Borrowed(&s.content), s, source));
    }
    if let Some(mut tf) = task_focus {
        let content = Cow::Owned(std::mem::take(&mut tf.content));
        sections.push(section(&matcher, tf.key.clone(), content, &tf, focus::TASK_FOCUS_KEY));
    }

    let assembled = assemble(sections, input.budget)?;
    let system = match base_message {
        // The message is sent as it is; `system` is what the client adds beside it.
        Some(_) => {
            let rest: Vec<&str> = assembled.sections[1..]
                .iter()
                .filter(|s| s.report.included)
                .map(|s| s.content())
                .collect();
            (!rest.is_empty()).then(|| Value::String(rest.join(SECTION_SEPARATOR)))
        }
        None => parts.render(&assembled),
    };
    Ok(BuiltPrompt {
        system,
        focus,
        assembled,
    })
}
