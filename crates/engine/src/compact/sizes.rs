//! How big a compaction's summary, the request after it and its `prepare` result are.

use satchel_core::summary::render::{COMPACTED_OPENING, summary_message_text_for};
use satchel_protocol::{CompactSummary, ContextMode, TokenUsage};
use satchel_storage::CompactionBegun;

use super::CompactError;
use crate::call::CallContext;
use crate::error::EngineError;
use crate::request::Request;
use crate::result_size;
use crate::session::Session;

/// The request's usage once `begun` took effect, estimated from the summary's size: `Err`
/// for an automatic compaction whose summary would not be smaller than the
/// `compacted_tokens` (and previous summary) it replaces.
pub(super) fn estimated_tokens_after(
    session: &mut Session,
    request: &Request<'_>,
    begun: &CompactionBegun,
    compacted_tokens: u64,
    manual: bool,
) -> Result<u64, CompactError> {
    let (config, counter) = (request.config, &request.counter);
    let before_summary = session.summary_tokens(counter, config);
    let summary_tokens = counter.count_text(&summary_message_text_for(&begun.summary, config.window.context_mode)) + 4;
    // A summary that is not smaller than what it replaces would only be run again on the
    // next call (a small window thrashing): an automatic compaction then changes nothing.
    // A manual one was asked for, and runs.
    if !manual && summary_tokens >= compacted_tokens + before_summary {
        return Err(CompactError::Futile(format!(
            "compaction skipped: the summary ({summary_tokens} tokens) would not be smaller than the {} tokens it replaces",
            compacted_tokens + before_summary
        )));
    }
    Ok((begun.tokens_before + summary_tokens).saturating_sub(compacted_tokens + before_summary))
}

/// The size of the request returned after a compaction: with recent results cut to the
/// old-phase limit too when it is still over the window, as `prepare` will do.
pub(super) fn usage_after_compaction(session: &mut Session, request: &Request<'_>) -> TokenUsage {
    let after = request.usage(session, false);
    if after.total > request.config.effective_window() {
        return request.usage(session, true);
    }
    after
}

/// Room in a `prepare` result for what is not a message or the summary: tokens, actions,
/// reconciliation, the archive range.
const RESULT_SLACK_BYTES: usize = 64 << 10;
/// Room per live message for its actions (offloaded, truncated, repaired).
const RESULT_SLACK_PER_MESSAGE: usize = 512;

/// Refuses an automatic compaction whose `prepare` result could not be delivered, before it
/// commits. A compaction only removes messages and puts the summary first, so the request as
/// it stands, plus the new summary as text and as fields, bounds the result.
pub(super) fn check_result_bound(
    session: &mut Session,
    request: &Request<'_>,
    summary: &CompactSummary,
    call: &CallContext<'_>,
) -> Result<(), EngineError> {
    let config = request.config;
    let Some(limit) = call.max_result_bytes else {
        return Ok(());
    };
    let live = session.entries().len();
    let (messages, _) = session.render(config, false).to_json();
    let bound = result_size::json_bytes(&messages)
        + result_size::json_bytes(summary)
        + result_size::json_bytes(&summary_message_text_for(summary, config.window.context_mode))
        + RESULT_SLACK_BYTES
        + RESULT_SLACK_PER_MESSAGE * live;
    result_size::check(bound, Some(limit))
}

/// Tokens the summary may take: its budget, less the `[COMPACTED]` opening it carries in
/// `aceclaw` mode (which the summary's own budget does not see).
pub(super) fn summary_budget(request: &Request<'_>) -> u64 {
    let config = request.config;
    match config.window.context_mode {
        ContextMode::Qwenpaw => config.summary_budget_tokens(),
        ContextMode::Aceclaw => config
            .summary_budget_tokens()
            .saturating_sub(request.counter.count_text(COMPACTED_OPENING)),
    }
}
