//! What a session keeps about its requests beside its messages: the provider calibration,
//! the last assembled system prompt, and the monitor's numbers (AceClaw's `ContextMonitor`).

use std::sync::Arc;

use satchel_protocol::{Calibration, Config, ContextMonitor, Pressure, SessionOrigin, TokenUsage};
use serde_json::{Map, Value};

use super::prompt::PromptState;

/// A phase a request reached on its way under its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseReached {
    /// Old tool results were stubbed and reasoning left out, for this request only.
    Prune,
    /// The older part was compacted into the summary.
    Summarize,
}

impl PhaseReached {
    /// The name inspect shows.
    pub fn name(self) -> &'static str {
        match self {
            PhaseReached::Prune => "prune",
            PhaseReached::Summarize => "summarize",
        }
    }
}

/// The request-side state of a session.
#[derive(Debug, Clone, Default)]
pub struct RequestState {
    /// How counts are corrected by the provider's reported usage; persisted in the log.
    pub calibration: Calibration,
    /// The calibration before the last request's usage was reported: a report sent again
    /// (a client retrying) replaces the first instead of counting twice.
    pub calibration_before_report: Option<Calibration>,
    /// The correction factor the last request was counted with, to recover its uncorrected
    /// count when its usage is reported.
    pub last_factor: Option<f64>,
    /// The system prompt of the last request, for inspect (and to reuse when the next
    /// request sends the same sections and query).
    pub last_prompt: Option<Arc<PromptState>>,
    /// Hash of the last client `system` and sections found valid, so a steady step does not
    /// parse them again to check them before it changes the session.
    pub checked_prompt_inputs: Option<u128>,
    /// Phases the last request reached.
    pub last_phases: Vec<PhaseReached>,
    /// Requests pruning alone brought under the trigger.
    pub pruned_only_count: usize,
    /// Tokens pruning and compaction took off the last request.
    pub last_tokens_saved: u64,
    /// Tokens pruning and compaction took off requests since the session was loaded.
    pub total_tokens_saved: u64,
    /// The per-request `config` overrides of the last `context.prepare`; persisted in the
    /// log when they change.
    pub config_overrides: Map<String, Value>,
    /// Where the session's requests come from when the proxy made it; persisted in the log.
    pub origin: Option<SessionOrigin>,
    /// The effective configuration of the last `context.prepare`, which inspect renders and
    /// counts with (the daemon's own when no prepare ran since the session was loaded).
    pub last_config: Option<Arc<Config>>,
}

impl RequestState {
    /// Records what the last request's phases did: `saved` tokens off it, and whether it
    /// ended under its threshold.
    pub fn record_phases(&mut self, phases: Vec<PhaseReached>, saved: u64, fits: bool) {
        if fits && phases == [PhaseReached::Prune] {
            self.pruned_only_count += 1;
        }
        self.last_phases = phases;
        self.last_tokens_saved = saved;
        self.total_tokens_saved += saved;
    }

    /// The monitor view, for the last request's `usage`.
    pub fn monitor(&self, usage: Option<&TokenUsage>, peak_tokens: u64, compactions: usize) -> ContextMonitor {
        let current = usage.map_or(0, |u| u.total);
        let pressure = usage.map_or(Pressure::Low, TokenUsage::pressure);
        ContextMonitor {
            current_tokens: current,
            pressure_level: pressure.monitor_level().to_owned(),
            peak_tokens,
            compaction_count: compactions,
            pruned_only_count: self.pruned_only_count,
            phases_reached: self.last_phases.iter().map(|p| p.name().to_owned()).collect(),
            last_tokens_saved: self.last_tokens_saved,
            total_tokens_saved: self.total_tokens_saved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monitor_level_is_the_pressure_in_aceclaws_words() {
        let levels: Vec<String> = [0, 499, 500, 599, 600, 999, 1_000, 1_200]
            .into_iter()
            .map(|total| {
                let usage = TokenUsage {
                    total,
                    limit: 1_000,
                    threshold: 600,
                    ..TokenUsage::default()
                };
                let monitor = RequestState::default().monitor(Some(&usage), total, 0);
                assert_eq!(monitor.pressure_level, usage.pressure().monitor_level());
                monitor.pressure_level
            })
            .collect();
        assert_eq!(
            levels,
            [
                "normal", "normal", "watch", "watch", "compact", "compact", "critical", "critical"
            ]
        );
    }

    #[test]
    fn only_a_request_pruning_alone_fixed_counts_as_pruned_only() {
        let mut state = RequestState::default();
        state.record_phases(vec![PhaseReached::Prune], 100, true);
        state.record_phases(vec![PhaseReached::Prune], 10, false);
        state.record_phases(vec![PhaseReached::Prune, PhaseReached::Summarize], 40, true);
        state.record_phases(vec![], 0, true);
        assert_eq!(state.pruned_only_count, 1);
        assert_eq!((state.last_tokens_saved, state.total_tokens_saved), (0, 150));
    }
}
