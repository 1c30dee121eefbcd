//! What `context.inspect` derives from a session beside its stored numbers: the messages zone
//! by role, what each offloaded result really sends, and the per-request configuration the
//! session was last prepared with.

use std::sync::Arc;

use satchel_core::calibration::corrected;
use satchel_core::format::{self, MessageFormat, has_tool_result};
use satchel_core::offload::recent_start;
use satchel_core::render::{ResultControl, result_id};
use satchel_core::tokens::TokenCounter;
use satchel_core::zones::is_system;
use satchel_protocol::{Config, MessageRoleTokens, OffloadedResult, Phase};
use satchel_storage::SessionRecord;
use serde_json::{Map, Value};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::session::{Session, format_or_default};

impl Engine {
    /// The configuration a session's calls default to: that of its last `context.prepare`
    /// (the daemon's with the overrides it sent, remembered in the log). A call that sends no
    /// `config` of its own (`context.expand`, `context.compact`, `context.inspect`) budgets
    /// against the window the session asked for, not the daemon's.
    pub(crate) fn session_config(&self, session: &Session) -> Arc<Config> {
        if let Some(config) = &session.requests().last_config {
            return Arc::clone(config);
        }
        match (self.apply_overrides)(&self.config, &session.requests().config_overrides) {
            Ok(config) => Arc::new(config),
            Err(e) => {
                // The overrides were valid when logged; a daemon whose configuration changed
                // since may refuse them. Its own configuration is the best left.
                tracing::warn!("a session's remembered config overrides no longer apply ({e}); using the daemon's");
                Arc::new(self.config.clone())
            }
        }
    }

    /// Keeps the call's `config` overrides and effective configuration with the session; the
    /// overrides are logged when they differ from the previous call's, so a restarted daemon
    /// shows them too. Runs in the call's transaction: a failed call rolls the record back.
    pub(crate) fn remember_config(
        &self,
        id: &str,
        session: &mut Session,
        overrides: Option<&Map<String, Value>>,
        config: &Config,
    ) -> Result<(), EngineError> {
        let overrides = overrides.cloned().unwrap_or_default();
        if overrides != session.requests().config_overrides {
            self.sessions.append(
                id,
                &[SessionRecord::RequestConfig {
                    overrides: overrides.clone(),
                }],
            )?;
        }
        session.remember_config(overrides, config);
        Ok(())
    }
}

/// Who wrote a message, as the role split counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
    ToolResults,
}

fn role_of(message: &Value, format: MessageFormat) -> Role {
    match format::role_of(message) {
        Some("assistant") => Role::Assistant,
        Some("tool" | "function") => Role::ToolResults,
        _ if has_tool_result(message, format) => Role::ToolResults,
        _ => Role::User,
    }
}

/// `messages_zone` (the messages zone of the last request) split by role, in proportion to
/// each role's live messages as rendered now under `config`. They are the same renderings the
/// zone was counted from, so the split is exact unless pruning (`aceclaw` mode) or the
/// squeeze changed the request as sent; the proportions then stand for it.
pub(crate) fn role_tokens(session: &mut Session, config: &Config, messages_zone: u64) -> MessageRoleTokens {
    let counter = TokenCounter::of(&config.tokens);
    // The factor `messages_zone` was counted with: a usage reported since changes the next
    // request's counts, not how the last one splits.
    let factor = session.requests().last_factor.unwrap_or(session.calibration_factor());
    let format = format_or_default(session.format());
    let per_message = session.count_tokens(&counter, config, false);
    let mut by_role = [0u64; 3];
    for (entry, tokens) in session.entries().iter().zip(per_message) {
        if is_system(&entry.message, format) {
            continue;
        }
        by_role[role_of(&entry.message, format) as usize] += corrected(tokens, factor);
    }
    let [user, assistant, tool_results] = split(messages_zone, by_role);
    MessageRoleTokens {
        user,
        assistant,
        tool_results,
    }
}

/// `total` in proportion to `weights` (largest remainder), so the parts add up to it exactly.
fn split(total: u64, weights: [u64; 3]) -> [u64; 3] {
    let whole: u64 = weights.iter().sum();
    if whole == total {
        return weights;
    }
    if whole == 0 {
        return [total, 0, 0];
    }
    let exact = weights.map(|w| w as u128 * total as u128);
    let mut parts = exact.map(|e| (e / whole as u128) as u64);
    let mut order = [0, 1, 2];
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % whole as u128));
    let left = total - parts.iter().sum::<u64>();
    for &i in order.iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}

/// The offloaded results of the live messages; with `config` (the session was prepared since
/// it was loaded), the phase each is rendered in and the bytes really sent of it.
pub(crate) fn offloaded(session: &mut Session, config: Option<&Config>) -> Vec<OffloadedResult> {
    let pins = session.pins();
    let mut results: Vec<(usize, OffloadedResult)> = session
        .entries()
        .iter()
        .enumerate()
        .flat_map(|(position, e)| {
            e.offloaded.iter().enumerate().map(move |(k, o)| {
                let control = pins.control(e.index, k);
                let result = OffloadedResult {
                    id: result_id(e.index, k),
                    pinned: control == ResultControl::Pinned,
                    purged: control == ResultControl::Purged,
                    index: e.index,
                    pointer: o.pointer.clone(),
                    file: o.file.clone(),
                    total_bytes: o.stats.total_bytes,
                    total_lines: o.stats.total_lines,
                    tool: o.call.as_ref().map(|c| c.name.clone()),
                    phase: None,
                    sent_bytes: None,
                };
                (position, result)
            })
        })
        .collect();
    let Some(config) = config else {
        return results.into_iter().map(|(_, r)| r).collect();
    };
    let messages: Vec<&Value> = session.entries().iter().map(|e| &e.message).collect();
    let recent = recent_start(
        &messages,
        format_or_default(session.format()),
        config.recent.pruning_recent_n,
    );
    // The renderings are cached from the last request: this reads no offload file.
    let rendered = session.rendered_entries(config, false);
    for (position, result) in &mut results {
        result.phase = Some(if *position >= recent { Phase::Recent } else { Phase::Old });
        result.sent_bytes = rendered[*position]
            .pointer(&result.pointer)
            .and_then(Value::as_str)
            .map(str::len);
    }
    results.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn split_adds_up_to_the_total() {
        assert_eq!(split(10, [2, 3, 5]), [2, 3, 5]);
        assert_eq!(split(5, [2, 3, 5]), [1, 2, 2]);
        assert_eq!(split(7, [0, 0, 0]), [7, 0, 0]);
        assert_eq!(split(0, [4, 0, 9]), [0, 0, 0]);
        for (total, weights) in [(1000, [333, 333, 334]), (99, [1, 1, 1]), (12_345, [7, 0, 11])] {
            assert_eq!(split(total, weights).iter().sum::<u64>(), total);
        }
    }

    #[test]
    fn roles_put_tool_results_apart_in_both_formats() {
        let openai = MessageFormat::Openai;
        let anthropic = MessageFormat::Anthropic;
        assert_eq!(role_of(&json!({"role": "user", "content": "hi"}), openai), Role::User);
        assert_eq!(
            role_of(&json!({"role": "assistant", "content": "ok"}), openai),
            Role::Assistant
        );
        assert_eq!(
            role_of(&json!({"role": "tool", "tool_call_id": "c", "content": "x"}), openai),
            Role::ToolResults
        );
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "x"}]});
        assert_eq!(role_of(&result, anthropic), Role::ToolResults);
        assert_eq!(
            role_of(
                &json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
                anthropic
            ),
            Role::User
        );
    }
}
