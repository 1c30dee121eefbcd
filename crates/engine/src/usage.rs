//! Token usage per zone of the request a session would send now.

use satchel_core::calibration::corrected;
use satchel_core::tokens::TokenCounter;
use satchel_core::zones::{MessageTokens, RequestTokens, zone_usage};
use satchel_protocol::{Config, TokenUsage};
use serde_json::Value;

use crate::session::Session;

/// The request-level parts of a call, counted in the system and tools zones.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestExtras {
    /// The system prompt sent beside the messages.
    pub system: Option<Value>,
    /// The tool definitions.
    pub tools: Option<Vec<Value>>,
    /// The hash of `system` when it is known (an assembled prompt's).
    pub system_hash: Option<satchel_core::hash::MessageHash>,
    /// The system-prompt sections, as JSON texts; assembled into `system` before counting.
    pub sections: Option<Vec<Box<serde_json::value::RawValue>>>,
}

/// Token usage per zone of the request `session` would send now; `squeeze` counts every
/// tool result at its old-phase limit. Reads the counts from the session's caches (counting
/// what is not cached yet), corrects each by the session's calibration (so the zones and
/// the reserve are measured in the provider's tokens), and [`zone_usage`] adds them up.
pub(crate) fn usage(
    session: &mut Session,
    config: &Config,
    counter: &TokenCounter,
    extras: &RequestExtras,
    squeeze: bool,
) -> TokenUsage {
    let factor = session.requests.calibration.factor;
    let per_message = session.count_tokens(counter, config, squeeze);
    let (system, tools) = session.extras_tokens(
        extras.system.as_ref(),
        extras.system_hash,
        extras.tools.as_deref(),
        counter,
    );
    let summary = session.summary_tokens(counter, config);
    let messages: Vec<MessageTokens> = session
        .entries
        .iter()
        .zip(per_message)
        .map(|(entry, tokens)| MessageTokens::of(&entry.message, corrected(tokens, factor)))
        .collect();
    let extras = RequestTokens {
        system: corrected(system, factor),
        tools: corrected(tools, factor),
        summary: corrected(summary, factor),
        expanded: corrected(session.expansion.as_ref().map_or(0, |e| e.tokens), factor),
        pinned: corrected(session.pinned_tokens(counter), factor),
    };
    zone_usage(&messages, extras, config)
}
