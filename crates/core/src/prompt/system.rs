//! The client's `system` as sections, and the assembled prompt back in the client's shape.
//!
//! A string becomes one section (`system`) and goes back as the whole assembled prompt. An
//! Anthropic block array becomes one section per text block (`system:N`, N its index) and
//! goes back as the same array, each text block carrying its section's final text (every
//! other field, `cache_control` included, kept), dropped blocks removed, other blocks as they
//! were, followed by one text block per further section included. Keeping the client's blocks
//! in place keeps its cache breakpoints on the text they were set on.

use serde_json::{Map, Value};

use super::PromptError;
use super::assemble::Assembled;

/// Key of the section made of a string `system`.
pub const SYSTEM_KEY: &str = "system";
/// Priority of the client's system prompt (AceClaw's base prompt).
pub const SYSTEM_PRIORITY: i64 = 95;
/// Source type of the client's system prompt.
pub const SYSTEM_SOURCE: &str = "base";

/// The client's `system`, split into the texts that become sections.
#[derive(Debug)]
pub(crate) struct SystemParts<'a> {
    /// The array when `system` is one; `None` for a string or no `system`.
    blocks: Option<&'a [Value]>,
    /// Whether a `system` was given.
    given: bool,
    /// (key, text) of each section, in order.
    pub texts: Vec<(String, &'a str)>,
}

fn text_of(block: &Value) -> Option<&str> {
    (block.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| block.get("text").and_then(Value::as_str))
        .flatten()
}

impl<'a> SystemParts<'a> {
    /// Splits `system` (absent or `null`: nothing).
    pub fn split(system: Option<&'a Value>) -> Result<Self, PromptError> {
        match system {
            None | Some(Value::Null) => Ok(SystemParts {
                blocks: None,
                given: false,
                texts: Vec::new(),
            }),
            Some(Value::String(text)) => Ok(SystemParts {
                blocks: None,
                given: true,
                texts: vec![(SYSTEM_KEY.to_owned(), text.as_str())],
            }),
            Some(Value::Array(blocks)) => Ok(SystemParts {
                blocks: Some(blocks),
                given: true,
                texts: blocks
                    .iter()
                    .enumerate()
                    .filter_map(|(i, block)| Some((format!("{SYSTEM_KEY}:{i}"), text_of(block)?)))
                    .collect(),
            }),
            Some(_) => Err(PromptError::InvalidSystem(
                "must be a string or an array of content blocks".to_owned(),
            )),
        }
    }

    /// The `system` to send: the client's shape filled with `assembled`, whose first sections
    /// are this split's texts, in order. `None` when no `system` was given and nothing was
    /// assembled, so the request gets no system prompt it did not have.
    pub fn render(&self, assembled: &Assembled<'_>) -> Option<Value> {
        let Some(blocks) = self.blocks else {
            return (self.given || !assembled.prompt.is_empty()).then(|| Value::String(assembled.prompt.clone()));
        };
        let mut sections = assembled.sections.iter();
        let mut out = Vec::with_capacity(blocks.len() + assembled.sections.len().saturating_sub(self.texts.len()));
        for block in blocks {
            if text_of(block).is_none() {
                out.push(block.clone());
                continue;
            }
            let Some(section) = sections.next().filter(|s| s.report.included) else {
                continue;
            };
            // Rebuilt field by field rather than cloned: the old text may be large.
            let fields = block.as_object().into_iter().flatten().map(|(name, value)| {
                let value = match name.as_str() {
                    "text" => Value::String(section.content().to_owned()),
                    _ => value.clone(),
                };
                (name.clone(), value)
            });
            out.push(Value::Object(fields.collect()));
        }
        for section in sections.filter(|s| s.report.included) {
            let mut block = Map::new();
            block.insert("type".to_owned(), Value::String("text".to_owned()));
            block.insert("text".to_owned(), Value::String(section.content().to_owned()));
            out.push(Value::Object(block));
        }
        Some(Value::Array(out))
    }
}
