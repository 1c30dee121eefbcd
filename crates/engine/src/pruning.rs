//! Transient request pruning in `aceclaw` mode (F12): the request a session renders, with old
//! tool results as stubs and old reasoning left out, for this call only. The session, the
//! offload files and the archive keep every text; the next call renders from them again.

use std::collections::HashMap;

use satchel_core::calibration::{corrected, uncorrected};
use satchel_core::hash::MessageHash;
use satchel_core::prune::{PrunableText, PrunePlan, PruneRequest, prune_for_request};
use satchel_core::repair::RepairItem;
use satchel_core::tokens::TokenCounter;
use satchel_core::truncate::TextStats;
use satchel_protocol::{Config, MessageFormat, PruneReport, TokenUsage};

use crate::session::{Outgoing, RenderedRequest, Session};

/// The offloaded texts and token count of each live message's current rendering, by the
/// rendering's hash: taken before the request is rendered (a rendering borrows the session).
pub(crate) struct Renderings {
    by_hash: HashMap<MessageHash, Rendering>,
}

struct Rendering {
    tokens: Option<u64>,
    texts: Vec<(String, String, TextStats)>,
}

impl Renderings {
    /// What `session` renders now; its views must be up to date (counted by `usage`).
    pub(crate) fn of(session: &Session) -> Self {
        let by_hash = session
            .renderings()
            .into_iter()
            .map(|(hash, (position, tokens))| {
                let texts = session.entries()[position]
                    .offloaded
                    .iter()
                    .map(|t| (t.pointer.clone(), t.file.clone(), t.stats))
                    .collect();
                (hash, Rendering { tokens, texts })
            })
            .collect();
        Renderings { by_hash }
    }
}

/// Prunes `rendered` in place until the request is under `config`'s prune target, and says
/// what that did. `usage` is the request's (corrected) usage before, `factor` the session's
/// calibration: pruning counts in satchel's own tokens, the report in corrected ones.
pub(crate) fn prune_rendered(
    rendered: &mut RenderedRequest<'_>,
    renderings: &Renderings,
    format: MessageFormat,
    counter: &TokenCounter,
    usage: &TokenUsage,
    factor: f64,
    config: &Config,
) -> PruneReport {
    let mut tokens = Vec::with_capacity(rendered.messages.len());
    let mut texts = Vec::new();
    for (position, message) in rendered.messages.iter().enumerate() {
        let found = match message {
            Outgoing::Cached { hash, .. } => renderings.by_hash.get(hash),
            Outgoing::Owned(_) => None,
        };
        tokens.push(
            found
                .and_then(|r| r.tokens)
                .unwrap_or_else(|| counter.count_message(message.value())),
        );
        for (pointer, file, stats) in found.map_or(&[][..], |r| &r.texts[..]) {
            texts.push(PrunableText {
                position,
                pointer,
                file,
                stats: *stats,
            });
        }
    }
    let request = PruneRequest {
        messages: &rendered.messages,
        format,
        offloaded: &texts,
        tokens: &tokens,
        total: uncorrected(usage.total, factor),
        target: uncorrected(config.prune_target_tokens(), factor),
        plan: PrunePlan::of(&config.prune),
    };
    let pruned = prune_for_request(&request, |message| counter.count_message(message));
    let saved = corrected(pruned.report.tokens_before - pruned.report.tokens_after, factor);
    let report = PruneReport {
        tokens_before: usage.total,
        tokens_after: usage.total.saturating_sub(saved),
        ..pruned.report
    };
    pruned.apply(&mut rendered.messages);
    report
}

/// `usage` less the `saved` tokens pruning took off: they come off old messages, which are
/// the compactable zone.
pub(crate) fn usage_after(usage: &TokenUsage, report: &PruneReport) -> TokenUsage {
    let saved = report.tokens_before - report.tokens_after;
    TokenUsage {
        compactable: usage.compactable.saturating_sub(saved),
        messages: usage.messages.saturating_sub(saved),
        total: usage.total.saturating_sub(saved),
        ..usage.clone()
    }
}
