//! A live session: the messages a client has sent, the summary of those compacted away, and
//! how to render the request.
//!
//! The session holds each live message as the client sent it, its offloaded tool-result texts
//! left in their files. What the model sees is *rendered* from those originals (texts read
//! back): tool results are cut to the limit of the phase the message is in, the summary
//! message goes first, and a repair pass makes sure every tool call has its result. Nothing is
//! ever cut from what satchel keeps.
//!
//! A rendering is made once per message and phase and cached with its JSON text, hash and
//! token count, so a call costs O(new messages): the request is assembled from the cache, and
//! its cached texts are shared into the reply rather than encoded again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use satchel_core::compact::is_user_turn;
use satchel_core::format::MessageFormat;
use satchel_core::hash::MessageHash;
use satchel_core::offload::batched_recent_start;
use satchel_core::render::{RenderedText, ResultControl, insert_summary, summary_message_tokens};
use satchel_core::repair::{Repair, RepairItem, repair};
use satchel_core::summary::render::summary_message_text_for;
use satchel_core::tokens::TokenCounter;
use satchel_core::zones::is_system;
use satchel_protocol::{CompactSummary, Config, ContextMode, Phase, RenderConfig, TokenUsage};
use satchel_storage::{CompactionInfo, OffloadStore};
use serde_json::Value;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3;

mod align;
mod entry;
mod expansion;
mod pins;
pub(crate) mod prompt;
mod request_state;
mod updates;

pub use align::{Alignment, IncomingHashes};
pub use entry::Entry;
use entry::{OLD_SLOT, RECENT_SLOT, to_raw};
pub use expansion::ExpandedSpan;
pub use pins::{PinState, Pins};
pub use request_state::{PhaseReached, RequestState};
pub use updates::SentRequest;

use crate::parallel::map_weighted;

/// A rendered message with at least one truncated text.
#[derive(Debug)]
pub struct TruncatedMessage {
    /// Position among the live messages.
    pub position: usize,
    /// Index in the session's original history.
    pub index: usize,
    /// The phase it was rendered in.
    pub phase: Phase,
    /// Its offloaded texts as rendered.
    pub texts: Vec<RenderedText>,
}

/// One message of the outgoing request: a cached rendering, borrowed, or one the summary
/// insertion or the repair pass wrote.
#[derive(Debug)]
pub enum Outgoing<'a> {
    /// A live message as rendered, with its JSON text and hash.
    Cached {
        /// The rendered message.
        value: &'a Value,
        /// Its JSON text.
        raw: &'a Arc<RawValue>,
        /// Its hash.
        hash: MessageHash,
    },
    /// A message made for this request.
    Owned(Value),
}

impl RepairItem for Outgoing<'_> {
    fn value(&self) -> &Value {
        match self {
            Outgoing::Cached { value, .. } => value,
            Outgoing::Owned(value) => value,
        }
    }

    fn into_value(self) -> Value {
        match self {
            Outgoing::Cached { value, .. } => value.clone(),
            Outgoing::Owned(value) => value,
        }
    }

    fn from_value(value: Value) -> Self {
        Outgoing::Owned(value)
    }
}

/// The request as it leaves satchel, with what is needed to account for it.
#[derive(Debug)]
pub struct RenderedRequest<'a> {
    /// The messages, summary first, repaired.
    pub messages: Vec<Outgoing<'a>>,
    /// Live messages carrying truncated texts.
    pub truncated: Vec<TruncatedMessage>,
    /// What the repair pass changed.
    pub repairs: Vec<Repair>,
}

impl RenderedRequest<'_> {
    /// The messages as JSON texts (shared, not copied, for cached renderings), and the hash of
    /// each.
    pub fn to_json(&self) -> (Vec<Arc<RawValue>>, Vec<MessageHash>) {
        self.messages
            .iter()
            .map(|message| match message {
                Outgoing::Cached { raw, hash, .. } => (Arc::clone(raw), *hash),
                Outgoing::Owned(value) => (to_raw(value), MessageHash::of_value(value)),
            })
            .unzip()
    }
}

/// The summary as the model reads it, rendered once per summary.
#[derive(Debug, Clone)]
struct SummaryView {
    text: String,
    /// The mode it was rendered for (`aceclaw` marks it `[COMPACTED]`).
    mode: ContextMode,
    /// Token count, and the counter key and format it was made with (a Responses summary is
    /// an item whose wrapper counts too).
    tokens: Option<(u128, MessageFormat, u64)>,
}

/// The messages of one session.
///
/// Its fields are private: calls read them through getters and change them only through the
/// methods of `updates.rs`, each of which keeps together the fields it touches (the history's
/// hashes and its live messages, the last request and the calibration it was counted with,
/// the pins and the controls of the results they name).
#[derive(Debug)]
pub struct Session {
    /// Where offloaded texts are read back from, to render a message or archive it.
    offloads: OffloadStore,
    /// Format, once known.
    format: Option<MessageFormat>,
    /// Hash of every message of the original history, by original index (compacted ones too,
    /// so a client resending its full history is recognised).
    original_hashes: Vec<MessageHash>,
    /// By original index, the [`text_hash`](satchel_core::hash::text_hash) of the text a
    /// client last sent for that message, when known: a resend in the same bytes is recognised
    /// without the structural hash.
    text_hashes: Vec<Option<u128>>,
    /// Live messages in order.
    entries: Vec<Entry>,
    /// The summary in force; change it with [`Session::set_summary`].
    summary: Option<CompactSummary>,
    /// The summary's text and token count.
    summary_view: Option<SummaryView>,
    /// Finished compactions, oldest first.
    compactions: Vec<CompactionInfo>,
    /// Hashes of the last request returned, to recognise a client that sends it back as its history.
    last_output: Vec<MessageHash>,
    /// System prompt of the last `context.prepare`, to count a manual compaction's request.
    last_system: Option<Value>,
    /// Tool definitions of the last `context.prepare`.
    last_tools: Option<Vec<Value>>,
    /// Largest request since the daemon loaded the session.
    peak_tokens: u64,
    /// Token usage of the last request returned.
    last_usage: Option<TokenUsage>,
    /// Set when an automatic compaction was skipped because it could not make the request
    /// smaller: the compactable tokens then. It is not tried again until that many more have
    /// accrued (a summary's worth), so a small window does not thrash; any compaction clears it.
    futile_compaction_at: Option<u64>,
    /// What the cached renderings depend on ([`render_key`]); a change clears them.
    render_key: Option<u128>,
    /// What the cached token counts depend on besides the renderings ([`counter_key`]).
    count_key: Option<u128>,
    /// Token counts of system prompts and tool definitions, by hash, valid for `count_key`.
    extras_tokens: HashMap<(MessageHash, bool), u64>,
    /// Calibration, the last system prompt and the monitor's numbers; kept when the
    /// client's history starts over.
    requests: RequestState,
    /// A compacted span `context.expand` asked back, carried by the next request only.
    expansion: Option<ExpandedSpan>,
    /// Pins and purged results (`context.pin`, `context.purge`).
    pins: Pins,
    /// Messages of a lower original index are in the old phase for good. The recent window's
    /// start can compute earlier than before (a compaction shifts the batch boundaries, a
    /// boundary in a run of parallel results widens the window back, a squeezed request is
    /// followed by one that fits); a message that left it coming back would grow its excerpt
    /// again and rewrite the prefix a provider's prompt cache holds. In memory only: a reload
    /// starts from the window as computed.
    old_before: usize,
}

/// The format to process with when none is known yet: plain-text turns look the same in both.
pub fn format_or_default(format: Option<MessageFormat>) -> MessageFormat {
    format.unwrap_or(MessageFormat::Openai)
}

/// What the renderings depend on: the hash of every configuration key rendering reads.
/// Rendering is given nothing but the [`RenderConfig`] hashed, so it cannot depend on more.
fn render_key(render: &RenderConfig) -> u128 {
    let mut hasher = Xxh3::new();
    render.hash(&mut hasher);
    hasher.digest128()
}

/// What token counts depend on besides the rendering: the hash of the counter, which holds
/// everything counting reads.
fn counter_key(counter: &TokenCounter) -> u128 {
    let mut hasher = Xxh3::new();
    counter.hash(&mut hasher);
    hasher.digest128()
}

impl Session {
    /// An empty session in `format`, reading offloaded texts from `offloads`.
    pub fn new(format: Option<MessageFormat>, offloads: OffloadStore) -> Self {
        Session {
            offloads,
            format,
            original_hashes: Vec::new(),
            text_hashes: Vec::new(),
            entries: Vec::new(),
            summary: None,
            summary_view: None,
            compactions: Vec::new(),
            last_output: Vec::new(),
            last_system: None,
            last_tools: None,
            peak_tokens: 0,
            futile_compaction_at: None,
            last_usage: None,
            render_key: None,
            count_key: None,
            extras_tokens: HashMap::new(),
            requests: RequestState::default(),
            expansion: None,
            pins: Pins::default(),
            old_before: 0,
        }
    }

    /// Format, once known.
    pub fn format(&self) -> Option<MessageFormat> {
        self.format
    }

    /// Messages of the client's history, compacted ones included.
    pub fn history_len(&self) -> usize {
        self.original_hashes.len()
    }

    /// The exact-text hash of what a client last sent for message `index`, when known.
    pub fn text_hash(&self, index: usize) -> Option<u128> {
        self.text_hashes.get(index).copied().flatten()
    }

    /// Live messages in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Finished compactions, oldest first.
    pub fn compactions(&self) -> &[CompactionInfo] {
        &self.compactions
    }

    /// Hashes of the last request returned.
    pub fn last_output(&self) -> &[MessageHash] {
        &self.last_output
    }

    /// System prompt of the last `context.prepare`.
    pub fn last_system(&self) -> Option<&Value> {
        self.last_system.as_ref()
    }

    /// Tool definitions of the last `context.prepare`.
    pub fn last_tools(&self) -> Option<&Vec<Value>> {
        self.last_tools.as_ref()
    }

    /// Largest request since the daemon loaded the session.
    pub fn peak_tokens(&self) -> u64 {
        self.peak_tokens
    }

    /// Token usage of the last request returned.
    pub fn last_usage(&self) -> Option<&TokenUsage> {
        self.last_usage.as_ref()
    }

    /// The compactable tokens when an automatic compaction was last found futile.
    pub fn futile_compaction_at(&self) -> Option<u64> {
        self.futile_compaction_at
    }

    /// Where the session's requests come from, when the proxy made it.
    pub fn origin(&self) -> Option<&satchel_protocol::SessionOrigin> {
        self.requests.origin.as_ref()
    }

    /// Calibration, the last system prompt and the monitor's numbers.
    pub fn requests(&self) -> &RequestState {
        &self.requests
    }

    /// The factor counts are corrected by now (the calibration's).
    pub fn calibration_factor(&self) -> f64 {
        self.requests.calibration.factor
    }

    /// The span `context.expand` asked back, carried by the next request.
    pub fn expansion(&self) -> Option<&ExpandedSpan> {
        self.expansion.as_ref()
    }

    /// Pins and purged results.
    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    /// Messages compacted away.
    pub fn archived_count(&self) -> usize {
        self.original_hashes.len() - self.entries.len()
    }

    /// The summary in force.
    pub fn summary(&self) -> Option<&CompactSummary> {
        self.summary.as_ref()
    }

    /// Replaces the summary (a compaction finished).
    pub fn set_summary(&mut self, summary: Option<CompactSummary>) {
        let mode = self.summary_view.as_ref().map_or(ContextMode::default(), |v| v.mode);
        self.summary_view = summary.as_ref().map(|s| SummaryView {
            text: summary_message_text_for(s, mode),
            mode,
            tokens: None,
        });
        self.summary = summary;
        // The pinned block follows the summary, or stands alone without one.
        self.pins.changed();
    }

    /// Gives each live message's offloaded texts the control its pins and purges ask for,
    /// dropping the renderings of those whose control changed.
    pub fn apply_result_controls(&mut self) {
        for entry in &mut self.entries {
            if entry.offloaded.is_empty() {
                continue;
            }
            let controls: Vec<ResultControl> = (0..entry.offloaded.len())
                .map(|k| self.pins.control(entry.index, k))
                .collect();
            let controls = if controls.iter().all(|c| *c == ResultControl::ByPhase) {
                Vec::new()
            } else {
                controls
            };
            if controls != entry.controls {
                entry.controls = controls;
                entry.views = [None, None];
                entry.view_hashes = [None, None];
                entry.tokens = [None; 2];
            }
        }
    }

    /// Tokens of the pinned block, counted once per block and counter.
    pub fn pinned_tokens(&mut self, counter: &TokenCounter) -> u64 {
        let after_summary = self.summary_view.is_some();
        self.pins.tokens(after_summary, counter, counter_key(counter))
    }

    /// The text of the summary message.
    pub fn summary_text(&self) -> Option<&str> {
        self.summary_view.as_ref().map(|v| v.text.as_str())
    }

    /// Tokens of the summary message, counted once per summary and counter.
    pub fn summary_tokens(&mut self, counter: &TokenCounter, config: &Config) -> u64 {
        self.sync_summary_view(config.window.context_mode);
        let key = counter_key(counter);
        let format = format_or_default(self.format);
        let Some(view) = &mut self.summary_view else {
            return 0;
        };
        match &view.tokens {
            Some((made_with, made_for, tokens)) if *made_with == key && *made_for == format => *tokens,
            _ => {
                let tokens = summary_message_tokens(&view.text, format, counter);
                view.tokens = Some((key, format, tokens));
                tokens
            }
        }
    }

    /// Renders the summary message again when the mode it is rendered for changed.
    fn sync_summary_view(&mut self, mode: ContextMode) {
        if let (Some(summary), Some(view)) = (&self.summary, &mut self.summary_view)
            && view.mode != mode
        {
            *view = SummaryView {
                text: summary_message_text_for(summary, mode),
                mode,
                tokens: None,
            };
        }
    }

    /// Drops every cached rendering when the configuration they depend on changed; returns
    /// that configuration, the one to render with.
    fn check_render_key<'c>(&mut self, config: &'c Config) -> &'c RenderConfig {
        self.sync_summary_view(config.window.context_mode);
        let render = &config.render;
        let key = render_key(render);
        if self.render_key != Some(key) {
            self.entries.iter_mut().for_each(Entry::clear_views);
            self.render_key = Some(key);
        }
        render
    }

    /// Where the recent window starts; `squeeze` puts every message in the old phase (the
    /// last resort when the request does not fit even after compaction).
    fn recent_start(&self, config: &Config, squeeze: bool) -> usize {
        if squeeze {
            return self.entries.len();
        }
        self.recent_start_of(&self.entries, config)
    }

    /// Where the recent window of `entries` (the session's live messages, or the part of them
    /// a call keeps) starts: never before a message that already left it.
    pub fn recent_start_of(&self, entries: &[Entry], config: &Config) -> usize {
        let values: Vec<&Value> = entries.iter().map(|e| &e.message).collect();
        let computed = batched_recent_start(
            &values,
            format_or_default(self.format),
            config.recent.pruning_recent_n,
            config.recent.pruning_phase_batch,
        );
        computed.max(entries.partition_point(|e| e.index < self.old_before))
    }

    /// Remembers that the live messages before `position` are old for good.
    fn settle_old_phase(&mut self, position: usize) {
        let boundary = self
            .entries
            .get(position)
            .map_or(self.original_hashes.len(), |e| e.index);
        self.old_before = self.old_before.max(boundary);
    }

    /// Forgets that messages from original index `at` on left the recent window: the client
    /// replaced them.
    pub fn history_replaced_from(&mut self, at: usize) {
        self.old_before = self.old_before.min(at);
    }

    /// Renders every live message for the phase it is in (from the cache where possible) and
    /// returns each one's view slot; with a `counter`, counts each rendering too. Renderings
    /// of a phase a message has left are dropped. A first pass or a reload renders and counts
    /// thousands of messages, so big batches are shared between threads.
    fn sync_views(&mut self, config: &Config, squeeze: bool, counter: Option<&TokenCounter>) -> Vec<usize> {
        let render = self.check_render_key(config);
        if let Some(counter) = counter {
            self.check_count_key(counter);
        }
        let recent_start = self.recent_start(config, squeeze);
        // A squeezed request (nothing else made it fit) leaves its messages old too: sent
        // whole again next time, they would only overflow the window again.
        self.settle_old_phase(recent_start);
        let phase_at = |position: usize| {
            if position >= recent_start {
                Phase::Recent
            } else {
                Phase::Old
            }
        };
        let offloads = &self.offloads;
        map_weighted(
            &mut self.entries,
            |position, entry| entry.pending_work(phase_at(position), counter.is_some()),
            |position, entry| {
                let slot = entry.ensure_view(phase_at(position), render, offloads);
                if !entry.offloaded.is_empty() {
                    entry.views[1 - slot] = None;
                }
                if let Some(counter) = counter {
                    entry.ensure_tokens(slot, counter);
                }
                slot
            },
        )
    }

    /// Each live message as rendered now (before the summary is inserted), in order.
    pub fn rendered_entries(&mut self, config: &Config, squeeze: bool) -> Vec<&Value> {
        let slots = self.sync_views(config, squeeze, None);
        self.entries
            .iter()
            .zip(slots)
            .map(|(entry, slot)| entry.rendered(slot).0)
            .collect()
    }

    /// Renders the request: live messages with their phase, the summary first, repaired.
    pub fn render(&mut self, config: &Config, squeeze: bool) -> RenderedRequest<'_> {
        let format = format_or_default(self.format);
        let slots = self.sync_views(config, squeeze, None);
        let expanded = self.expansion.as_ref().map_or(&[][..], |e| &e.messages[..]);
        let mut messages = Vec::with_capacity(expanded.len() + self.entries.len() + 1);
        let mut truncated = Vec::new();
        for (position, (entry, slot)) in self.entries.iter().zip(slots).enumerate() {
            let (value, view) = entry.rendered(slot);
            if view.texts.iter().any(|t| t.kept_bytes.is_some()) {
                truncated.push(TruncatedMessage {
                    position,
                    index: entry.index,
                    phase: if slot == RECENT_SLOT { Phase::Recent } else { Phase::Old },
                    texts: view.texts.clone(),
                });
            }
            messages.push(Outgoing::Cached {
                value,
                raw: &view.raw,
                hash: entry.view_hashes[slot].unwrap_or(entry.hash),
            });
        }
        // A span brought back goes after the leading system messages, where the summary goes
        // too, so that it ends up right after the summary.
        let after_system = messages.iter().take_while(|m| is_system(m.value(), format)).count();
        messages.splice(
            after_system..after_system,
            expanded.iter().cloned().map(Outgoing::Owned),
        );
        let summary = self.summary_view.as_ref().map(|v| v.text.as_str());
        let pinned = self.pins.block(summary.is_some());
        match (summary, pinned.is_empty()) {
            (Some(summary), true) => insert_summary(&mut messages, summary, format),
            (Some(summary), false) => insert_summary(&mut messages, &format!("{summary}\n\n{pinned}"), format),
            (None, false) => insert_summary(&mut messages, pinned, format),
            (None, true) => {}
        }
        let (messages, repairs) = repair(messages, format, true);
        RenderedRequest {
            messages,
            truncated,
            repairs,
        }
    }

    /// Clears the token counts when the counter changed.
    fn check_count_key(&mut self, counter: &TokenCounter) {
        let key = counter_key(counter);
        if self.count_key != Some(key) {
            self.entries.iter_mut().for_each(|e| e.tokens = [None; 2]);
            self.extras_tokens.clear();
            self.count_key = Some(key);
        }
    }

    /// Tokens of the system prompt and of the tool definitions sent beside the messages,
    /// counted once per distinct prompt or definition; `system_hash` is the prompt's hash when
    /// the caller knows it (an assembled prompt of 100 KB is not hashed again on every call).
    pub fn extras_tokens(
        &mut self,
        system: Option<&Value>,
        system_hash: Option<MessageHash>,
        tools: Option<&[Value]>,
        counter: &TokenCounter,
    ) -> (u64, u64) {
        self.check_count_key(counter);
        // A prompt that changes on every call (a clock in it) must not grow the cache forever.
        if self.extras_tokens.len() > 256 {
            self.extras_tokens.clear();
        }
        // A tool definition costs its framing overhead in the estimate mode, a message its own:
        // the same value is cached under a different tag for each.
        let mut count = |value: &Value, known: Option<MessageHash>, tool: bool| {
            let hash = known.unwrap_or_else(|| MessageHash::of_value(value));
            *self.extras_tokens.entry((hash, tool)).or_insert_with(|| match tool {
                true => counter.count_tool_definition(value),
                false => counter.count_message(value),
            })
        };
        let system = system.map_or(0, |s| count(s, system_hash, false));
        let tools = tools.map_or(0, |t| t.iter().map(|d| count(d, None, true)).sum());
        (system, tools)
    }

    /// For each live message's current rendering (by its hash): the message's position and
    /// the rendering's token count, when counted. Pruning finds the messages of a rendered
    /// request with it, and their offloaded texts.
    pub fn renderings(&self) -> HashMap<MessageHash, (usize, Option<u64>)> {
        let mut found = HashMap::with_capacity(self.entries.len());
        for (position, entry) in self.entries.iter().enumerate() {
            for slot in [OLD_SLOT, RECENT_SLOT] {
                if entry.views[slot].is_some()
                    && let Some(hash) = entry.view_hashes[slot]
                {
                    found.insert(hash, (position, entry.tokens[slot]));
                }
            }
        }
        found
    }

    /// Tokens of the first `shared` messages of a request this session rendered (`hashes` and
    /// `raws`, as sent), uncorrected: each live message's cached count for the rendering sent,
    /// the summary's, and bytes / `divisor` for a message the repair pass or pruning wrote.
    /// It walks the request beside the live messages, so it costs O(`shared`) and counts
    /// nothing again.
    pub fn prefix_tokens(&self, hashes: &[MessageHash], raws: &[Arc<RawValue>], shared: usize, divisor: f64) -> u64 {
        // A repaired or pruned message stands for at most a few live ones: look that far ahead.
        const LOOKAHEAD: usize = 3;
        let estimate = |raw: &RawValue| (raw.get().len() as f64 / divisor.max(1.0)).ceil() as u64;
        let mut summary = self.summary_view.as_ref();
        // With a pinned block in the summary message, or an expanded span after it, the
        // summary's own count is not the message's: estimate it instead.
        let summary_alone = self.expansion.is_none() && !self.pins.shows_block();
        let mut next = 0;
        let mut tokens = 0;
        for (hash, raw) in hashes.iter().zip(raws).take(shared) {
            let end = (next + LOOKAHEAD).min(self.entries.len());
            let found = (next..end).find_map(|position| {
                let entry = &self.entries[position];
                let slot = [OLD_SLOT, RECENT_SLOT]
                    .into_iter()
                    .find(|&slot| entry.view_hashes[slot] == Some(*hash))?;
                Some((position, entry.tokens[slot]))
            });
            tokens += match found {
                Some((position, counted)) => {
                    next = position + 1;
                    counted.unwrap_or_else(|| estimate(raw))
                }
                None => match summary.take() {
                    Some(_) if !summary_alone => estimate(raw),
                    Some(view) => {
                        let mut summary_tokens = view.tokens.as_ref().map_or_else(|| estimate(raw), |(_, _, t)| *t);
                        // In Anthropic format the summary goes into the first user turn, if any.
                        let format = format_or_default(self.format);
                        if format == MessageFormat::Anthropic
                            && let Some(entry) = self.entries.get(next)
                            && is_user_turn(&entry.message, format)
                        {
                            summary_tokens += entry.tokens[OLD_SLOT].or(entry.tokens[RECENT_SLOT]).unwrap_or(0);
                            next += 1;
                        }
                        summary_tokens
                    }
                    None => estimate(raw),
                },
            };
        }
        tokens
    }

    /// Token count of each rendered live message, from the cache where possible.
    pub fn count_tokens(&mut self, counter: &TokenCounter, config: &Config, squeeze: bool) -> Vec<u64> {
        let slots = self.sync_views(config, squeeze, Some(counter));
        self.entries
            .iter()
            .zip(slots)
            .map(|(entry, slot)| entry.tokens[slot].expect("counted by sync_views"))
            .collect()
    }
}

#[cfg(test)]
mod tests;
