//! `context.prepare`: the pre-reasoning hook, run by the engine in the session's turn.

use satchel_core::limits::{MAX_JSON_DEPTH, too_deep_message, value_depth};
use satchel_engine::Prepared;
use satchel_protocol::PrepareParams;
use serde_json::value::RawValue;

use super::Daemon;
use crate::error::RpcError;
use crate::transport::CallScope;

impl Daemon {
    /// `context.prepare`.
    pub fn prepare(&self, mut params: PrepareParams<Box<RawValue>>, scope: &CallScope) -> Result<Prepared, RpcError> {
        check_depth(&params)?;
        if let Some(recall) = params.memory.take() {
            self.add_recall(&mut params, &recall)?;
        }
        let config = self.effective_config(params.config.as_ref())?;
        let ticket = self.ticket(scope, &params.session_id)?;
        let session_id = params.session_id.clone();
        let work_done_token = params.work_done_token.take();
        let outcome = self.run_with_call(scope, &session_id, work_done_token, |call| {
            self.engine().prepare(ticket, params, &config, call)
        })?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }
}

impl Daemon {
    /// Adds the memory recall section (see [`PrepareParams::memory`]) to the call's sections.
    #[cfg(feature = "memory")]
    fn add_recall(
        &self,
        params: &mut PrepareParams<Box<RawValue>>,
        recall: &satchel_protocol::MemoryRecall,
    ) -> Result<(), RpcError> {
        let memory = self.memory.as_deref().ok_or_else(|| {
            RpcError::MemoryUnavailable("memory_index_enabled is false in this daemon's configuration".into())
        })?;
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

    /// Without the `memory` feature there is nothing to recall from.
    #[cfg(not(feature = "memory"))]
    fn add_recall(
        &self,
        _: &mut PrepareParams<Box<RawValue>>,
        _: &satchel_protocol::MemoryRecall,
    ) -> Result<(), RpcError> {
        Err(RpcError::MemoryUnavailable(
            "this satchel was built without the `memory` feature".into(),
        ))
    }
}

/// The text of the newest user message among `messages` that has any (OpenAI `content`
/// string or text parts, Anthropic text blocks); tool results carried by a user message
/// (Anthropic) are not a user's words.
#[cfg(feature = "memory")]
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

/// Refuses a `system` value or tool definition nested past [`MAX_JSON_DEPTH`], before anything
/// is stored (the engine checks the messages it has not seen, before it hashes them).
fn check_depth(params: &PrepareParams<Box<RawValue>>) -> Result<(), RpcError> {
    if params.system.as_ref().is_some_and(|s| value_depth(s) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params("system", too_deep_message()));
    }
    let tools = params.tools.as_deref().unwrap_or_default();
    if let Some(index) = tools.iter().position(|t| value_depth(t) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params(&format!("tools[{index}]"), too_deep_message()));
    }
    Ok(())
}
