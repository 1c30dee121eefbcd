//! Reconciliation: how a full list a client sends lines up with what the session holds,
//! recognised by hash (exact text first, structure where the text differs, and the
//! renderings satchel returned).

use satchel_core::hash::{MessageHash, text_hash};
use satchel_protocol::{Config, Phase};
use serde_json::value::RawValue;

use super::{Entry, Session};

/// The hashes of a received list: exact-text hashes of every message, structural ones
/// computed only where those do not decide.
pub struct IncomingHashes<'a> {
    texts: &'a [Box<RawValue>],
    text_hashes: Vec<u128>,
    hashes: Vec<Option<MessageHash>>,
}

impl<'a> IncomingHashes<'a> {
    /// The hashes of `texts`.
    pub fn new(texts: &'a [Box<RawValue>]) -> Self {
        IncomingHashes {
            texts,
            text_hashes: texts.iter().map(|t| text_hash(t.get())).collect(),
            hashes: vec![None; texts.len()],
        }
    }

    /// Messages received.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// The exact-text hash of message `j`.
    pub fn text_hash(&self, j: usize) -> u128 {
        self.text_hashes[j]
    }

    /// The structural hash of message `j`.
    pub fn hash(&mut self, j: usize) -> MessageHash {
        *self.hashes[j]
            .get_or_insert_with(|| MessageHash::of_json(self.texts[j].get()).expect("a RawValue holds valid JSON"))
    }
}

/// How a received full list relates to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// The first `consumed` received messages are known; the rest are new.
    Extends {
        /// Messages recognised.
        consumed: usize,
    },
    /// The history diverges at original index `at`, after everything compacted: live
    /// messages from there are replaced.
    DivergesAt {
        /// First differing original index.
        at: usize,
    },
    /// The history diverges inside the compacted part: the session starts over.
    Reset,
}

impl Session {
    /// Aligns a full list sent by a client with what the session holds.
    ///
    /// A message matches when it is identical to what the client first sent, or to what
    /// satchel returned for it; a client may also send back the whole last request (summary
    /// message included) followed by new messages. Costs one hash comparison per message
    /// unless a message differs from its original.
    pub fn align(&mut self, incoming: &mut IncomingHashes<'_>, config: &Config) -> Alignment {
        let render = self.check_render_key(config);
        let known = self.original_hashes.len();
        // Live entries are sorted by original index: find them by binary search.
        let live_position = |entries: &[Entry], j: usize| entries.binary_search_by_key(&j, |e| e.index).ok();
        let mut original_prefix = 0;
        while original_prefix < incoming.len().min(known) {
            let j = original_prefix;
            let same_text = self.text_hashes[j] == Some(incoming.text_hash(j));
            let matches = same_text
                || incoming.hash(j) == self.original_hashes[j]
                || live_position(&self.entries, j).is_some_and(|p| {
                    let entry = &mut self.entries[p];
                    !entry.offloaded.is_empty()
                        && [Phase::Recent, Phase::Old]
                            .into_iter()
                            .any(|phase| entry.rendered_hash(phase, render, &self.offloads) == incoming.hash(j))
                });
            if matches && !same_text {
                self.text_hashes[j] = Some(incoming.text_hash(j));
            }
            if !matches {
                break;
            }
            original_prefix += 1;
        }
        if original_prefix == known {
            return Alignment::Extends { consumed: known };
        }
        // After a restart the last view is not in memory: render it again.
        if self.last_output.is_empty() && self.summary.is_some() {
            let (_, hashes) = self.render(config, false).to_json();
            self.last_output = hashes;
        }
        let view = self.last_output.len();
        if view > 0 && incoming.len() >= view && (0..view).all(|j| incoming.hash(j) == self.last_output[j]) {
            return Alignment::Extends { consumed: view };
        }
        let compacted_from_here = (original_prefix..known).any(|i| live_position(&self.entries, i).is_none());
        if compacted_from_here {
            Alignment::Reset
        } else {
            Alignment::DivergesAt { at: original_prefix }
        }
    }
}
