//! The recall section of `context.prepare`: with a `memory` param, the top hits for the
//! newest user message join the call's sections before the engine sees them, and a call that
//! brings no user message (an agent loop's tool results) keeps the session's last recall, so
//! the prompt's prefix stays the same meanwhile.

use satchel_memory::index::SearchOptions;
use satchel_protocol::memory::{MemoryHit, MemoryRecall, SearchMode};
use satchel_protocol::{PrepareParams, PromptSection};
use serde_json::value::RawValue;

use super::{Memory, MemoryService};
use crate::error::RpcError;

/// Hits `context.prepare` recalls when the client does not say.
const RECALL_MAX_RESULTS: usize = 3;
/// Lowest score of a recalled hit when the client does not say: higher than a search's,
/// because nobody asked for these.
const RECALL_MIN_SCORE: f64 = 0.3;
/// Priority of the recall section when the client does not say.
const RECALL_PRIORITY: i64 = 60;
/// Sessions whose last recall is remembered (for the calls that bring no new user message).
const RECALLS_KEPT: usize = 1024;

impl Memory {
    /// Adds the recall section (see [`PrepareParams::memory`]) to the call's sections.
    pub fn add_recall(&self, params: &mut PrepareParams<Box<RawValue>>, recall: &MemoryRecall) -> Result<(), RpcError> {
        let memory = self.service()?;
        let new_messages = params
            .append
            .as_deref()
            .or(params.messages.as_deref())
            .unwrap_or_default();
        let query = newest_user_text(new_messages);
        if let Some(section) = memory.recall(&params.session_id, query.as_deref(), recall) {
            let json = serde_json::value::to_raw_value(&section)
                .map_err(|e| RpcError::invalid_params("memory", format!("recall section: {e}")))?;
            params.sections.get_or_insert_with(Vec::new).push(json);
        }
        Ok(())
    }
}

impl MemoryService {
    /// The recall section of `session_id` for `context.prepare`: the top hits for `query`
    /// (the newest user message), or, when the call brought none, the session's last one.
    fn recall(&self, session_id: &str, query: Option<&str>, recall: &MemoryRecall) -> Option<PromptSection> {
        let mut recalls = self.recalls.lock().unwrap_or_else(|p| p.into_inner());
        let Some(query) = query.filter(|q| !q.trim().is_empty()) else {
            return recalls.get(session_id).cloned();
        };
        let options = SearchOptions {
            max_results: recall.max_results.unwrap_or(RECALL_MAX_RESULTS).clamp(1, 20),
            min_score: recall.min_score.unwrap_or(RECALL_MIN_SCORE).clamp(0.0, 1.0),
            mode: SearchMode::Auto,
        };
        let hits = match self.index.search(query, &options) {
            Ok(outcome) => outcome.hits,
            Err(e) => {
                tracing::warn!("memory recall failed: {e}");
                self.catch_up.rebuild_if_damaged(&e);
                Vec::new()
            }
        };
        let section = recall_section(&hits, recall.priority.unwrap_or(RECALL_PRIORITY));
        if recalls.len() >= RECALLS_KEPT {
            recalls.clear();
        }
        match &section {
            Some(section) => recalls.insert(session_id.to_owned(), section.clone()),
            None => recalls.remove(session_id),
        };
        section
    }
}

/// The prompt section holding `hits`; `None` when there are none.
fn recall_section(hits: &[MemoryHit], priority: i64) -> Option<PromptSection> {
    if hits.is_empty() {
        return None;
    }
    let mut content = String::from("Relevant long-term memory (from the memory files; `memory.get` reads more):\n");
    let mut evidence = Vec::new();
    for hit in hits {
        let lines = if hit.start_line == hit.end_line {
            format!("{}:{}", hit.path, hit.start_line)
        } else {
            format!("{}:{}-{}", hit.path, hit.start_line, hit.end_line)
        };
        content.push_str(&format!("\n[{lines}]\n{}\n", hit.snippet.trim_end()));
        evidence.push(format!("{lines} ({:.2})", hit.score));
    }
    Some(PromptSection {
        key: "memory:recall".into(),
        content,
        priority: priority.clamp(0, 100),
        protected: false,
        source_type: Some("memory".into()),
        scope: Some("task-local".into()),
        reason: Some(format!(
            "memory search for the newest user message: {}",
            evidence.join(", ")
        )),
        paths: Vec::new(),
    })
}

/// The text of the newest user message among `messages` that has any (OpenAI `content`
/// string or text parts, Anthropic text blocks); tool results carried by a user message
/// (Anthropic) are not a user's words.
fn newest_user_text(messages: &[Box<RawValue>]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Message {
        role: Option<String>,
        content: Option<serde_json::Value>,
    }
    messages.iter().rev().find_map(|raw| {
        let message: Message = serde_json::from_str(raw.get()).ok()?;
        if message.role.as_deref() != Some("user") {
            return None;
        }
        let text = match message.content? {
            serde_json::Value::String(text) => text,
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter(|p| p.get("type").and_then(|t| t.as_str()) == Some("text"))
                .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return None,
        };
        (!text.trim().is_empty()).then_some(text)
    })
}
