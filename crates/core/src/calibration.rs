//! Counts that match the provider (AceClaw's `ContextEstimator`, F14): a per-session factor
//! learned from the input tokens the provider reports for a request satchel counted.
//!
//! AceClaw uses the last reported usage as is for the next request; a factor is better: it
//! carries over to requests of another size, and it survives compaction (a provider's
//! tokenizer differs from ours by a rate, not by an amount). The factor moves halfway to each
//! new sample, so one odd report (a cached prompt billed differently) cannot swing it, and
//! it stays in [`MIN_FACTOR`, `MAX_FACTOR`]: a client reporting the usage of another request
//! must not make satchel believe a window is four times fuller than it is.

use satchel_protocol::{Calibration, CalibrationSample};

/// Smallest correction factor.
pub const MIN_FACTOR: f64 = 0.5;
/// Largest correction factor.
pub const MAX_FACTOR: f64 = 2.0;
/// Weight of a new sample against the factor so far.
const SAMPLE_WEIGHT: f64 = 0.5;

/// The calibration after the provider reported `provider_tokens` for a request satchel
/// counted as `counted_tokens` (uncorrected): halfway from the factor so far (1 before any
/// sample) to the sample's. The first sample too: it may be the odd one.
pub fn calibrate(before: &Calibration, provider_tokens: u64, counted_tokens: u64) -> Calibration {
    let sample = (provider_tokens as f64 / counted_tokens.max(1) as f64).clamp(MIN_FACTOR, MAX_FACTOR);
    let factor = before.factor + SAMPLE_WEIGHT * (sample - before.factor);
    Calibration {
        factor: round4(factor.clamp(MIN_FACTOR, MAX_FACTOR)),
        samples: before.samples + 1,
        last: Some(CalibrationSample {
            provider_tokens,
            counted_tokens,
        }),
    }
}

/// `tokens` corrected by `factor`.
pub fn corrected(tokens: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        tokens
    } else {
        (tokens as f64 * factor).round() as u64
    }
}

/// The uncorrected count of a request whose corrected count is `tokens`.
pub fn uncorrected(tokens: u64, factor: f64) -> u64 {
    (tokens as f64 / factor).round() as u64
}

/// Four decimals: the factor is shown and persisted, and noise below that means nothing.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `(provider, counted)` reports in order; checks the factor after each.
    fn check(reports: &[(u64, u64)], expect: &[f64]) {
        let mut calibration = Calibration::default();
        let mut got = Vec::new();
        for &(provider, counted) in reports {
            calibration = calibrate(&calibration, provider, counted);
            got.push(calibration.factor);
        }
        assert_eq!(got, expect, "factors after {reports:?}");
        assert_eq!(calibration.samples, reports.len() as u64);
    }

    #[test]
    fn the_first_report_moves_the_factor_halfway_from_one() {
        check(&[(1_200, 1_000)], &[1.1]);
    }

    #[test]
    fn later_reports_move_it_halfway() {
        check(&[(1_200, 1_000), (1_000, 1_000), (1_000, 1_000)], &[1.1, 1.05, 1.025]);
    }

    #[test]
    fn it_stays_within_bounds() {
        check(&[(10_000, 1_000), (10, 1_000)], &[1.5, 1.0]);
        check(&[(1, 1_000), (1, 1_000), (1, 1_000)], &[0.75, 0.625, 0.5625]);
        check(&[(100, 0)], &[1.5]);
    }

    #[test]
    fn corrections_round_and_invert() {
        assert_eq!(corrected(1_000, 1.0), 1_000);
        assert_eq!(corrected(1_000, 1.2345), 1_235);
        assert_eq!(uncorrected(1_235, 1.2345), 1_000);
    }
}
