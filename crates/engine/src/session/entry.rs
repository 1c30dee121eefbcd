//! One live message: the message as the client sent it (offloaded texts in their files) and
//! its cached renderings per phase, with their JSON texts, hashes and token counts.

use std::sync::Arc;

use satchel_core::hash::MessageHash;
use satchel_core::render::{OffloadedText, RenderedText, ResultControl, render_message};
use satchel_core::tokens::TokenCounter;
use satchel_core::truncate::TextStats;
use satchel_protocol::{Phase, RenderConfig};
use satchel_storage::{OffloadStore, StoredMessage, StoredOffload};
use serde_json::Value;
use serde_json::value::RawValue;

/// One live message of a session.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Index in the session's original history.
    pub index: usize,
    /// Hash of the message as the client sent it.
    pub hash: MessageHash,
    /// The message as the client sent it, except that its offloaded texts are empty: their
    /// files hold them, and a long session would otherwise keep every big tool output in
    /// memory although only excerpts are sent. [`Entry::full_message`] puts them back.
    pub message: Value,
    /// Texts of this message that live in offload files.
    pub offloaded: Vec<OffloadedText>,
    /// The message rendered for the phase it is in, ready to send: slot 0 is the old phase
    /// (and the only slot of a message without offloaded texts, which renders the same in both),
    /// slot 1 the recent phase. Valid for `Session::render_key`.
    pub(super) views: [Option<View>; 2],
    /// Hash of the rendering in each slot, kept after its view is dropped, so that a client
    /// resending an earlier rendering is recognised without rendering it again.
    pub(super) view_hashes: [Option<MessageHash>; 2],
    /// Token counts of the rendering in each slot.
    pub(super) tokens: [Option<u64>; 2],
    /// The offloaded texts, in `offloaded` order, while the call they arrived in runs: their
    /// files may not be written yet, and reading them back would cost a copy anyway.
    pub(super) fresh: Vec<Arc<String>>,
    /// What the client asked for each offloaded text (pinned whole, purged), in `offloaded`
    /// order; empty when nothing was asked.
    pub(super) controls: Vec<ResultControl>,
}

/// A message rendered for one phase, with its JSON text, so that sending it again costs a copy.
#[derive(Debug, Clone)]
pub(super) struct View {
    /// The rendered message; `None` when it is the original (nothing offloaded).
    pub(super) value: Option<Value>,
    /// Its JSON text, shared with the replies that carry it.
    pub(super) raw: Arc<RawValue>,
    /// How its offloaded texts came out.
    pub(super) texts: Vec<RenderedText>,
}

pub(super) const OLD_SLOT: usize = 0;
pub(super) const RECENT_SLOT: usize = 1;

impl Entry {
    /// An entry for a message; `offloaded` lists its texts already saved to files, `raw` is
    /// the message's JSON text as the client sent it, when at hand.
    pub fn new(
        index: usize,
        hash: MessageHash,
        mut message: Value,
        offloaded: Vec<OffloadedText>,
        raw: Option<Box<RawValue>>,
    ) -> Self {
        for text in &offloaded {
            if let Some(slot) = message.pointer_mut(&text.pointer) {
                *slot = Value::String(String::new());
            }
        }
        let mut entry = Entry {
            index,
            hash,
            message,
            offloaded,
            views: [None, None],
            view_hashes: [None, None],
            tokens: [None; 2],
            fresh: Vec::new(),
            controls: Vec::new(),
        };
        if let Some(raw) = raw.filter(|_| entry.offloaded.is_empty()) {
            entry.views[OLD_SLOT] = Some(View {
                value: None,
                raw: Arc::from(raw),
                texts: Vec::new(),
            });
            entry.view_hashes[OLD_SLOT] = Some(hash);
        }
        entry
    }

    /// The persisted form: offloaded texts emptied, since the files hold them.
    pub fn to_stored(&self) -> StoredMessage {
        StoredMessage {
            hash: self.hash.to_string(),
            message: self.message.clone(),
            offloads: self
                .offloaded
                .iter()
                .map(|t| StoredOffload {
                    pointer: t.pointer.clone(),
                    file: t.file.clone(),
                    total_bytes: t.stats.total_bytes,
                    total_lines: t.stats.total_lines,
                })
                .collect(),
        }
    }

    /// Keeps the message's offloaded texts (in `offloaded` order) in memory until
    /// [`Session::forget_fresh_texts`]: the call that brought them renders and compacts from
    /// them while their files are written.
    pub fn with_fresh_texts(mut self, texts: Vec<Arc<String>>) -> Self {
        assert_eq!(texts.len(), self.offloaded.len(), "one fresh text per offloaded text");
        self.fresh = texts;
        self
    }

    /// The message as the client sent it, its offloaded texts read back from their files.
    pub fn full_message(&self, offloads: &OffloadStore) -> Value {
        self.full(offloads).0
    }

    /// The full message, and its offloaded texts measured as read (a missing file reads as
    /// a notice saying so, which is then what gets rendered).
    pub(super) fn full(&self, offloads: &OffloadStore) -> (Value, Vec<OffloadedText>) {
        let mut message = self.message.clone();
        let mut texts = self.offloaded.clone();
        for (i, text) in texts.iter_mut().enumerate() {
            if let Some(fresh) = self.fresh.get(i) {
                if let Some(slot) = message.pointer_mut(&text.pointer) {
                    *slot = Value::String(String::clone(fresh));
                }
                continue;
            }
            let full = offloads.load(&text.file).unwrap_or_else(|e| {
                tracing::error!(file = %text.file, "offloaded text is missing: {e}");
                format!(
                    "[satchel: the full text of this tool result ({} bytes) was in {} and is missing]",
                    text.stats.total_bytes, text.file
                )
            });
            text.stats = TextStats::of(&full);
            if let Some(slot) = message.pointer_mut(&text.pointer) {
                *slot = Value::String(full);
            }
        }
        (message, texts)
    }

    /// The view slot of `phase`.
    pub(super) fn slot(&self, phase: Phase) -> usize {
        match phase {
            Phase::Recent if !self.offloaded.is_empty() => RECENT_SLOT,
            _ => OLD_SLOT,
        }
    }

    /// Renders the message for `phase` unless that is done already.
    pub(super) fn ensure_view(&mut self, phase: Phase, config: &RenderConfig, offloads: &OffloadStore) -> usize {
        let slot = self.slot(phase);
        if self.views[slot].is_none() {
            let view = if self.offloaded.is_empty() {
                View {
                    value: None,
                    raw: to_raw(&self.message),
                    texts: Vec::new(),
                }
            } else {
                let (full, measured) = self.full(offloads);
                let (value, texts) = render_message(
                    &full,
                    &measured,
                    phase,
                    config,
                    offloads.workspace_root(),
                    Some(self.index),
                    &self.controls,
                );
                View {
                    raw: to_raw(&value),
                    value: Some(value),
                    texts,
                }
            };
            self.view_hashes[slot] = Some(match &view.value {
                None => self.hash,
                Some(value) => MessageHash::of_value(value),
            });
            self.views[slot] = Some(view);
        }
        slot
    }

    /// Hash of the message rendered for `phase`.
    pub(super) fn rendered_hash(
        &mut self,
        phase: Phase,
        config: &RenderConfig,
        offloads: &OffloadStore,
    ) -> MessageHash {
        let slot = self.slot(phase);
        match self.view_hashes[slot] {
            Some(hash) => hash,
            None => {
                self.ensure_view(phase, config, offloads);
                self.view_hashes[slot].unwrap_or(self.hash)
            }
        }
    }

    /// The message as rendered in `slot`; the view must exist.
    pub(super) fn rendered(&self, slot: usize) -> (&Value, &View) {
        let view = self.views[slot].as_ref().expect("view rendered before use");
        (view.value.as_ref().unwrap_or(&self.message), view)
    }

    /// Counts the rendering in `slot` unless it is counted; the view must exist.
    pub(super) fn ensure_tokens(&mut self, slot: usize, counter: &TokenCounter) {
        if self.tokens[slot].is_none() {
            self.tokens[slot] = Some(counter.count_message(self.rendered(slot).0));
        }
    }

    /// Roughly how many bytes must be rendered (offloaded texts are read back) and counted
    /// to bring this message's `phase` view up to date: what [`map_weighted`] balances.
    pub(super) fn pending_work(&self, phase: Phase, counting: bool) -> usize {
        let slot = self.slot(phase);
        let offloaded_bytes = || self.offloaded.iter().map(|t| t.stats.total_bytes).sum::<usize>();
        let render = match &self.views[slot] {
            Some(_) => 0,
            None => 256 + offloaded_bytes(),
        };
        let count = match (&self.views[slot], self.tokens[slot]) {
            (_, Some(_)) => 0,
            _ if !counting => 0,
            (Some(view), None) => view.raw.get().len(),
            (None, None) => 256,
        };
        render + count
    }

    /// Forgets renderings made under another configuration.
    pub(super) fn clear_views(&mut self) {
        self.views = [None, None];
        self.view_hashes = [None, None];
        self.tokens = [None; 2];
    }
}

/// The JSON text of a message.
pub(super) fn to_raw(value: &Value) -> Arc<RawValue> {
    Arc::from(serde_json::value::to_raw_value(value).expect("a JSON value always serialises"))
}
