//! The request one call builds and counts: its configuration, its counter and what it sends
//! beside the messages, handed as one value through the pipeline (`prepare`, its compaction,
//! `context.compact`), with the token usage per zone of the request a session would send now.

use std::sync::Arc;

use satchel_core::calibration::corrected;
use satchel_core::format::is_native_compaction;
use satchel_core::hash::MessageHash;
use satchel_core::tokens::TokenCounter;
use satchel_core::zones::{MessageTokens, RequestTokens, zone_usage};
use satchel_protocol::{Action, Config, ContextMode, Phase, PruneReport, TokenUsage};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ingest::Ingested;
use crate::pruning::{Renderings, prune_rendered};
use crate::repair_action;
use crate::session::{Session, TruncatedMessage, format_or_default};

/// The request-level parts of a call, counted in the system and tools zones.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestExtras {
    /// The system prompt sent beside the messages.
    pub system: Option<Value>,
    /// The tool definitions.
    pub tools: Option<Vec<Value>>,
    /// The hash of `system` when it is known (an assembled prompt's).
    pub system_hash: Option<MessageHash>,
    /// The system-prompt sections, as JSON texts; assembled into `system` before counting.
    pub sections: Option<Vec<Box<RawValue>>>,
}

/// The request-wide inputs of one call, shared by its stages.
pub(crate) struct Request<'a> {
    /// The call's effective configuration.
    pub config: &'a Config,
    /// Counts with the configured tokenizer.
    pub counter: TokenCounter,
    /// The system prompt and tool definitions sent beside the messages.
    pub extras: RequestExtras,
}

impl<'a> Request<'a> {
    /// The request of a call under `config`, sending `extras` beside its messages.
    pub(crate) fn new(config: &'a Config, extras: RequestExtras) -> Self {
        Request {
            config,
            counter: TokenCounter::of(&config.tokens),
            extras,
        }
    }

    /// Token usage per zone of the request `session` would send now; `squeeze` counts every
    /// tool result at its old-phase limit. Reads the counts from the session's caches
    /// (counting what is not cached yet), corrects each by the session's calibration (so the
    /// zones and the reserve are measured in the provider's tokens), and [`zone_usage`] adds
    /// them up.
    pub(crate) fn usage(&self, session: &mut Session, squeeze: bool) -> TokenUsage {
        let (config, counter, extras) = (self.config, &self.counter, &self.extras);
        let factor = session.calibration_factor();
        let format = format_or_default(session.format());
        let per_message = session.count_tokens(counter, config, squeeze);
        let (system, tools) = session.extras_tokens(
            extras.system.as_ref(),
            extras.system_hash,
            extras.tools.as_deref(),
            counter,
        );
        let summary = session.summary_tokens(counter, config);
        // The provider drops what comes before its own compaction: those messages cost nothing.
        let entries = session.entries();
        let read_from = entries.iter().rposition(|e| is_native_compaction(&e.message, format));
        let messages: Vec<MessageTokens> = entries
            .iter()
            .zip(per_message)
            .enumerate()
            .map(|(i, (entry, tokens))| {
                let sent = if read_from.is_some_and(|from| i < from) {
                    0
                } else {
                    tokens
                };
                MessageTokens::of(&entry.message, corrected(sent, factor), format)
            })
            .collect();
        let extras = RequestTokens {
            system: corrected(system, factor),
            tools: corrected(tools, factor),
            summary: corrected(summary, factor),
            expanded: corrected(session.expansion().as_ref().map_or(0, |e| e.tokens), factor),
            pinned: corrected(session.pinned_tokens(counter), factor),
        };
        zone_usage(&messages, extras, config)
    }

    /// Whether a request of `usage` is over the trigger at which `aceclaw` mode prunes.
    pub(crate) fn over_trigger(&self, usage: &TokenUsage) -> bool {
        self.config.window.context_mode == ContextMode::Aceclaw && usage.total >= self.config.compact_threshold_tokens()
    }

    /// Prunes the request `session` renders now (`aceclaw` mode) and returns what that did,
    /// without keeping the pruned request.
    pub(crate) fn prune(&self, session: &mut Session, usage: &TokenUsage) -> PruneReport {
        let renderings = Renderings::of(session);
        let format = format_or_default(session.format());
        let factor = session.calibration_factor();
        let mut rendered = session.render(self.config, false);
        prune_rendered(
            &mut rendered,
            &renderings,
            format,
            &self.counter,
            usage,
            factor,
            self.config,
        )
    }

    /// Renders the request `session` sends now, as JSON texts and their hashes, pruned when
    /// `prune_from` (its usage) is given, and adds its truncations, repairs and pruning to
    /// `actions`.
    pub(crate) fn render(
        &self,
        session: &mut Session,
        squeeze: bool,
        prune_from: Option<&TokenUsage>,
        ingested: &Ingested,
        actions: &mut Vec<Action>,
    ) -> (Vec<Arc<RawValue>>, Vec<MessageHash>, Option<PruneReport>) {
        let renderings = prune_from.map(|_| Renderings::of(session));
        let format = format_or_default(session.format());
        let factor = session.calibration_factor();
        let mut rendered = session.render(self.config, squeeze);
        let pruned = prune_from.zip(renderings.as_ref()).map(|(usage, renderings)| {
            prune_rendered(
                &mut rendered,
                renderings,
                format,
                &self.counter,
                usage,
                factor,
                self.config,
            )
        });
        let (json, hashes) = rendered.to_json();
        actions.extend(truncation_actions(
            &rendered.truncated,
            ingested.first_new_index,
            ingested.recent_start_before,
        ));
        actions.extend(rendered.repairs.iter().map(repair_action));
        (json, hashes, pruned)
    }

    /// Tokens at the start of the request (tools, system, then `messages` with their
    /// `hashes`) identical to the previous request the session returned: the part a
    /// provider's prompt cache can reuse. Counted from the cached per-message counts.
    pub(crate) fn stable_prefix_tokens(
        &self,
        session: &mut Session,
        messages: &[Arc<RawValue>],
        hashes: &[MessageHash],
    ) -> u64 {
        if session.last_usage().is_none() || self.extras.tools.as_ref() != session.last_tools() {
            return 0;
        }
        let (system, tools) = session.extras_tokens(
            self.extras.system.as_ref(),
            self.extras.system_hash,
            self.extras.tools.as_deref(),
            &self.counter,
        );
        let factor = session.calibration_factor();
        if self.extras.system.as_ref() != session.last_system() {
            return corrected(tools, factor);
        }
        let shared = hashes
            .iter()
            .zip(session.last_output())
            .take_while(|(now, before)| now == before)
            .count();
        let divisor = self.config.tokens.token_count_estimate_divisor.get();
        corrected(
            tools + system + session.prefix_tokens(hashes, messages, shared, divisor),
            factor,
        )
    }
}

/// The `truncated` actions of a call: texts of messages new in this call, and of messages
/// that left the recent window in it (their cut changed from the recent to the old limit).
fn truncation_actions(
    truncated: &[TruncatedMessage],
    first_new_index: usize,
    recent_start_before: usize,
) -> Vec<Action> {
    let mut actions = Vec::new();
    for TruncatedMessage {
        position,
        index,
        phase,
        texts,
    } in truncated
    {
        let changed = *index >= first_new_index || (*phase == Phase::Old && *position >= recent_start_before);
        if !changed {
            continue;
        }
        for text in texts {
            if let Some(kept_bytes) = text.kept_bytes {
                actions.push(Action::Truncated {
                    index: *index,
                    pointer: text.pointer.clone(),
                    phase: *phase,
                    file: text.file.clone(),
                    kept_bytes,
                    total_bytes: text.total_bytes,
                });
            }
        }
    }
    actions
}
