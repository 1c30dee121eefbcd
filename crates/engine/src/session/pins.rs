//! A session's pins and purges as they shape its requests: which results are sent whole or as
//! stubs, and the pinned block shown after the summary. The calls that change them are in
//! `pins.rs` at the crate root.

use std::collections::BTreeSet;

use satchel_core::pins::{PinnedItem, pinned_block};
use satchel_core::render::{ResultControl, result_id};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::{PinInfo, PinKind};
use satchel_storage::{PinRecord, PinTarget};

/// A pin in force, with its verbatim text once the request shows it in the pinned block.
#[derive(Debug, Clone)]
pub struct PinState {
    /// As logged.
    pub record: PinRecord,
    /// The text the pinned block shows; `None` while its message is live (it is then sent
    /// where it is, whole).
    pub text: Option<String>,
    /// What the block calls it.
    pub title: String,
}

/// What pins and purges make of a session's requests.
#[derive(Debug, Default)]
pub struct Pins {
    /// Pins in force, oldest first.
    pub(super) pins: Vec<PinState>,
    /// Pins ever made in the session: the next is `p{made + 1}`.
    pub(super) made: usize,
    /// Purged results (`r12`).
    pub(super) purged: BTreeSet<String>,
    /// The pinned block as the request shows it, and its token count with the counter key it
    /// was made with; rebuilt when a pin or the summary's presence changes.
    block: Option<(String, Option<(u128, u64)>)>,
}

impl Pins {
    /// Pins in force, oldest first.
    pub fn in_force(&self) -> &[PinState] {
        &self.pins
    }

    /// The id the next pin gets.
    pub fn next_id(&self) -> String {
        format!("p{}", self.made + 1)
    }

    /// Purged results (`r12`), in order.
    pub fn purged(&self) -> impl Iterator<Item = &String> {
        self.purged.iter()
    }

    /// Whether result `result_id` (`r12`) is purged.
    pub fn is_purged(&self, result_id: &str) -> bool {
        self.purged.contains(result_id)
    }

    /// The control of the `k`-th offloaded text of message `index`.
    pub fn control(&self, index: usize, k: usize) -> ResultControl {
        if self.purged.contains(&result_id(index, k)) {
            return ResultControl::Purged;
        }
        let pinned = self.pins.iter().any(|p| match p.record.target {
            PinTarget::Message { index: i } => i == index,
            PinTarget::Result { index: i, k: j } => i == index && j == k,
            PinTarget::Text { .. } => false,
        });
        if pinned {
            ResultControl::Pinned
        } else {
            ResultControl::ByPhase
        }
    }

    /// The pinned block's text (empty when no pin is shown in it): after the summary when
    /// there is one.
    pub fn block(&mut self, after_summary: bool) -> &str {
        if self.block.is_none() {
            let items: Vec<PinnedItem<'_>> = self
                .pins
                .iter()
                .filter_map(|p| {
                    Some(PinnedItem {
                        id: &p.record.id,
                        title: &p.title,
                        text: p.text.as_deref()?,
                    })
                })
                .collect();
            self.block = Some((pinned_block(&items, after_summary), None));
        }
        &self.block.as_ref().expect("just made").0
    }

    /// Tokens of the pinned block, counted once per block and counter.
    pub fn tokens(&mut self, after_summary: bool, counter: &TokenCounter, key: u128) -> u64 {
        self.block(after_summary);
        let (text, tokens) = self.block.as_mut().expect("made by block");
        if text.is_empty() {
            return 0;
        }
        match tokens {
            Some((made_with, n)) if *made_with == key => *n,
            _ => {
                // Alone it is a message of its own; after a summary, part of that message.
                let n = counter.count_text(text) + if after_summary { 1 } else { 4 };
                *tokens = Some((key, n));
                n
            }
        }
    }

    /// Whether the request shows a pinned block (a pin with its text).
    pub fn shows_block(&self) -> bool {
        self.pins.iter().any(|p| p.text.is_some())
    }

    /// Forgets the block, so the next request builds it again.
    pub fn changed(&mut self) {
        self.block = None;
    }

    /// Each pin as `context.pin` and inspect report it.
    pub fn infos(&self) -> Vec<PinInfo> {
        self.pins
            .iter()
            .map(|p| {
                let (kind, message_index, result) = match p.record.target {
                    PinTarget::Message { index } => (PinKind::Message, Some(index), None),
                    PinTarget::Text { .. } => (PinKind::Text, None, None),
                    PinTarget::Result { index, k } => (PinKind::Result, Some(index), Some(result_id(index, k))),
                };
                PinInfo {
                    id: p.record.id.clone(),
                    kind,
                    label: p.record.label.clone(),
                    message_index,
                    result_id: result,
                    in_block: p.text.is_some(),
                    chars: p.text.as_deref().map_or(0, |t| t.chars().count()),
                }
            })
            .collect()
    }
}
