//! What the calls change in a session, one method per change. Each keeps together the fields
//! it touches: the history's hashes with its live messages, the last request with the usage
//! and calibration it was counted with, the pins with the controls of the results they name.
//! The calls themselves (the `impl Engine` files) log first, then apply one of these.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use satchel_core::hash::MessageHash;
use satchel_protocol::{
    AgentCompaction, Calibration, CompactSummary, Config, MessageFormat, SessionOrigin, TokenUsage,
};
use satchel_storage::{CompactionInfo, PinRecord};
use serde_json::{Map, Value};

use super::prompt::PromptState;
use super::{Alignment, Entry, ExpandedSpan, PhaseReached, PinState, Session};

/// A request a committed `prepare` returned, as the session keeps it.
pub struct SentRequest {
    /// Hashes of the messages returned, to recognise them when sent back.
    pub output_hashes: Vec<MessageHash>,
    /// The system prompt sent beside them.
    pub system: Option<Value>,
    /// The tool definitions sent beside them.
    pub tools: Option<Vec<Value>>,
    /// The assembled prompt, if any.
    pub prompt: Option<Arc<PromptState>>,
}

impl Session {
    /// Takes in a call's reconciled messages (already logged): cuts the history where the
    /// client's `alignment` says it diverges, or starts over (keeping the request-side
    /// state), then appends the new messages with their hashes and sets the format.
    pub fn take_in(
        &mut self,
        alignment: Alignment,
        hashes: &[MessageHash],
        text_hashes: &[Option<u128>],
        entries: Vec<Entry>,
        format: Option<MessageFormat>,
    ) {
        match alignment {
            Alignment::Extends { .. } => {}
            Alignment::DivergesAt { at } => {
                self.history_replaced_from(at);
                self.original_hashes.truncate(at);
                self.text_hashes.truncate(at);
                self.entries.retain(|e| e.index < at);
            }
            Alignment::Reset => {
                let requests = std::mem::take(&mut self.requests);
                *self = Session::new(self.format, self.offloads.clone());
                self.requests = requests;
            }
        }
        self.original_hashes.extend_from_slice(hashes);
        self.text_hashes.extend(text_hashes.iter().copied());
        self.entries.extend(entries);
        self.format = format;
    }

    /// Keeps what a committed `prepare` returned: its request, to recognise it when sent
    /// back, its extras and usage, for a later manual compaction and for inspection. The
    /// span `context.expand` brought back was carried by it, and is done.
    pub fn remember_sent(&mut self, sent: SentRequest, usage: &TokenUsage) {
        for entry in &mut self.entries {
            // The call's writes are durable: the files hold the texts.
            entry.fresh = Vec::new();
        }
        self.peak_tokens = self.peak_tokens.max(usage.total);
        self.last_output = sent.output_hashes;
        self.last_system = sent.system;
        self.last_tools = sent.tools;
        self.set_last_usage(usage.clone());
        self.requests.last_prompt = sent.prompt;
        self.expansion = None;
    }

    /// Takes `usage` as the last request's, counted with the calibration in force: a usage
    /// the provider reports for it next is matched against this count.
    pub fn set_last_usage(&mut self, usage: TokenUsage) {
        self.last_usage = Some(usage);
        self.requests.last_factor = Some(self.requests.calibration.factor);
        self.requests.calibration_before_report = None;
    }

    /// Takes `calibration`, learned from a usage report computed from `before` (the
    /// calibration before the last request's first report): a report sent again is computed
    /// from `before` again, replacing this one instead of counting twice.
    pub fn calibrate(&mut self, before: Calibration, calibration: Calibration) {
        self.requests.calibration_before_report = Some(before);
        self.requests.calibration = calibration;
    }

    /// Records what the last request's phases did: `saved` tokens off it, and whether it
    /// ended under its threshold.
    pub fn record_phases(&mut self, phases: Vec<PhaseReached>, saved: u64, fits: bool) {
        self.requests.record_phases(phases, saved, fits);
    }

    /// Remembers that the prompt inputs hashing to `key` were found valid.
    pub fn prompt_inputs_checked(&mut self, key: u128) {
        self.requests.checked_prompt_inputs = Some(key);
    }

    /// Keeps a `prepare`'s `config` overrides and its effective configuration; equal
    /// overrides keep the effective configuration remembered (the daemon's is fixed).
    pub fn remember_config(&mut self, overrides: Map<String, Value>, config: &Config) {
        if overrides != self.requests.config_overrides {
            self.requests.config_overrides = overrides;
            self.requests.last_config = None;
        }
        if self.requests.last_config.is_none() {
            self.requests.last_config = Some(Arc::new(config.clone()));
        }
    }

    /// Remembers that an automatic compaction was futile with `compactable` tokens.
    pub fn compaction_futile_at(&mut self, compactable: u64) {
        self.futile_compaction_at = Some(compactable);
    }

    /// Drops the compacted messages `indices` and puts `summary` in their place; returns the
    /// summary it replaces.
    pub fn replace_with_summary(&mut self, indices: &[usize], summary: CompactSummary) -> Option<CompactSummary> {
        let compacted: HashSet<usize> = indices.iter().copied().collect();
        self.entries.retain(|e| !compacted.contains(&e.index));
        let previous = self.summary.take();
        self.set_summary(Some(summary));
        previous
    }

    /// Adds a finished compaction; any compaction lets the next automatic one be tried.
    pub fn add_compaction(&mut self, compaction: CompactionInfo) {
        self.futile_compaction_at = None;
        self.compactions.push(compaction);
    }

    /// Sets the span the next request carries (`context.expand`, or one pending on load).
    pub fn set_expansion(&mut self, expansion: Option<ExpandedSpan>) {
        self.expansion = expansion;
    }

    /// Adds a pin (logged as `record`) and gives the results it names their control.
    pub fn pin(&mut self, record: PinRecord) {
        self.pins.made += 1;
        self.pins.pins.push(PinState {
            title: String::new(),
            record,
            text: None,
        });
        self.apply_result_controls();
    }

    /// Removes pin `id` and gives the results it named their control back.
    pub fn unpin(&mut self, id: &str) {
        self.pins.pins.retain(|p| p.record.id != id);
        self.pins.changed();
        self.apply_result_controls();
    }

    /// Purges result `result_id` (`r12`): later requests send its stub.
    pub fn purge(&mut self, result_id: String) {
        self.pins.purged.insert(result_id);
        self.apply_result_controls();
    }

    /// Gives the `position`-th pin the text and title the pinned block shows it with.
    pub fn resolve_pin(&mut self, position: usize, title: String, text: String) {
        let pin = &mut self.pins.pins[position];
        pin.title = title;
        pin.text = Some(text);
        self.pins.changed();
    }
}

// A session as its log holds it, restored on load.
impl Session {
    /// Restores the hashes of the history (`original_hashes`), none of its texts known.
    pub fn restore_history(&mut self, original_hashes: Vec<MessageHash>) {
        self.text_hashes = vec![None; original_hashes.len()];
        self.original_hashes = original_hashes;
    }

    /// Restores a live message; its hash stands for its original index from now on (a log
    /// of an older satchel held another kind).
    pub fn restore_entry(&mut self, entry: Entry) {
        self.original_hashes[entry.index] = entry.hash;
        self.entries.push(entry);
    }

    /// Restores the finished compactions.
    pub fn restore_compactions(&mut self, compactions: Vec<CompactionInfo>) {
        self.compactions = compactions;
    }

    /// Restores the calibration and the `config` overrides last logged.
    pub fn restore_requests(&mut self, calibration: Calibration, config_overrides: Map<String, Value>) {
        self.requests.calibration = calibration;
        self.requests.config_overrides = config_overrides;
    }

    /// Restores where the session's requests come from, as last logged.
    pub fn restore_origin(&mut self, origin: Option<SessionOrigin>) {
        self.requests.origin = origin;
    }

    /// Takes what the proxy said of a request: its API and key source, and the agent's
    /// own compaction if it was one.
    pub fn note_origin(&mut self, api: &str, key_from: &str, compaction: Option<AgentCompaction>) {
        let origin = self.requests.origin.get_or_insert_with(SessionOrigin::default);
        api.clone_into(&mut origin.api);
        key_from.clone_into(&mut origin.key_from);
        origin.agent_compactions.extend(compaction);
    }

    /// Restores the pins in force (`records`), the count ever made and the purged results,
    /// and gives every live result its control.
    pub fn restore_pins(&mut self, records: Vec<PinRecord>, made: usize, purged: BTreeSet<String>) {
        self.pins.made = made;
        self.pins.purged = purged;
        self.pins.pins = records
            .into_iter()
            .map(|record| PinState {
                record,
                text: None,
                title: String::new(),
            })
            .collect();
        self.pins.changed();
        self.apply_result_controls();
    }

    /// The hash the history holds for message `index`.
    pub fn original_hash(&self, index: usize) -> MessageHash {
        self.original_hashes[index]
    }
}
