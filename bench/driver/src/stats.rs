//! Small statistics over latency samples, and the rounding the report uses.
//!
//! Every time in a result is in milliseconds with 3 decimals (microsecond resolution): finer
//! digits would only be noise for a whole-process round trip, and a fixed precision keeps the
//! JSON lines short and diffable.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// A duration in milliseconds, rounded to the microsecond.
pub fn ms(duration: Duration) -> f64 {
    round3(duration.as_secs_f64() * 1e3)
}

/// Rounds to 3 decimals.
pub fn round3(value: f64) -> f64 {
    (value * 1e3).round() / 1e3
}

/// Mebibytes from the kibibytes that `/proc/<pid>/status` reports, to 0.1 MiB.
pub fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

/// The `q` quantile (0..=1) with linear interpolation between the closest ranks, as numpy's
/// default does; `None` without samples. Interpolating keeps the median of an even count (e.g.
/// `--repeat 2`) the usual mean of the two middle values.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let last = sorted.len().checked_sub(1)?;
    let rank = q.clamp(0.0, 1.0) * last as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64))
}

/// The median in milliseconds, rounded; `None` without samples.
pub fn median_ms(samples: &[Duration]) -> Option<f64> {
    let values: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    quantile(&values, 0.5).map(round3)
}

/// The `q` quantile in milliseconds, rounded; `None` without samples.
pub fn quantile_ms(samples: &[Duration], q: f64) -> Option<f64> {
    let values: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    quantile(&values, q).map(round3)
}

/// `{count, p50_ms, p95_ms, max_ms}` of per-call latencies (the steady and replay scenarios).
pub fn percentiles(samples: &[Duration]) -> Map<String, Value> {
    let values: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let at = |q: f64| quantile(&values, q).map(round3);
    Map::from_iter([
        ("count".to_owned(), json!(samples.len())),
        ("p50_ms".to_owned(), json!(at(0.5))),
        ("p95_ms".to_owned(), json!(at(0.95))),
        ("max_ms".to_owned(), json!(at(1.0))),
    ])
}

/// `{runs, median_ms, min_ms, max_ms}` of repeated whole runs (startup, first pass).
pub fn spread(samples: &[Duration]) -> Map<String, Value> {
    let values: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let at = |q: f64| quantile(&values, q).map(round3);
    Map::from_iter([
        ("runs".to_owned(), json!(samples.len())),
        ("median_ms".to_owned(), json!(at(0.5))),
        ("min_ms".to_owned(), json!(at(0.0))),
        ("max_ms".to_owned(), json!(at(1.0))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates_between_ranks() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[3.0], 0.95), Some(3.0));
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.5), Some(2.5));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 1.0), Some(5.0));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.0), Some(1.0));
    }

    #[test]
    fn durations_round_to_the_microsecond() {
        assert_eq!(ms(Duration::from_nanos(1_234_567)), 1.235);
        assert_eq!(mib(2048), 2.0);
    }
}
