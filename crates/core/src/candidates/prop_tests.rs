//! Property test: random sequences of upsert, feedback, mark_injected and evaluate with random
//! time steps never reach an undefined state.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use satchel_protocol::{Candidate, CandidateKind, CandidateState, FeedbackOutcome, ObserveEvidence, ObserveParams};

use super::*;
use CandidateState::*;

const WORDS: [&str; 6] = ["run", "cargo", "fmt", "before", "commit", "tests"];
const KINDS: [CandidateKind; 4] = [
    CandidateKind::Lesson,
    CandidateKind::Rule,
    CandidateKind::Preference,
    CandidateKind::Correction,
];

#[derive(Debug, Clone)]
enum Op {
    /// Observe the words of the mask (never empty), of a kind, with a failure and fix or not.
    Observe {
        mask: u8,
        kind: usize,
        lesson: bool,
    },
    Feedback {
        pick: usize,
        success: bool,
    },
    MarkInjected {
        pick: usize,
    },
    Evaluate,
    /// Move the clock forward by this many hours (up to 40 days).
    Advance {
        hours: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u8..64, 0..4usize, any::<bool>()).prop_map(|(mask, kind, lesson)| Op::Observe { mask, kind, lesson }),
        (any::<usize>(), any::<bool>()).prop_map(|(pick, success)| Op::Feedback { pick, success }),
        any::<usize>().prop_map(|pick| Op::MarkInjected { pick }),
        Just(Op::Evaluate),
        (0i64..960).prop_map(|hours| Op::Advance { hours }),
    ]
}

/// Transitions `evaluate` may make.
fn allowed(from: CandidateState, to: CandidateState) -> bool {
    matches!(
        (from, to),
        (Shadow, Promoted)
            | (Promoted | InUse, Demoted)
            | (Shadow | Promoted | InUse | Demoted, Archived)
            | (Demoted, Shadow)
    )
}

fn invariants(v: &[Candidate], now: DateTime<Utc>, gone: &BTreeSet<String>) -> Result<(), TestCaseError> {
    let ids: BTreeSet<_> = v.iter().map(|c| c.id.clone()).collect();
    prop_assert_eq!(ids.len(), v.len(), "ids unique");
    for c in v {
        prop_assert!(validate(c).is_ok(), "{:?}: {:?}", c, validate(c));
        prop_assert!(!gone.contains(&c.id), "removed {} came back", c.id);
        prop_assert!(c.observations >= 1);
        prop_assert!(!c.evidence.is_empty() && c.evidence.len() <= MAX_EVIDENCE);
        prop_assert!(c.score.is_finite() && effective_score(c, now).is_finite());
        // The wire form names one of the five states and reads back the same.
        let wire = serde_json::to_value(c).unwrap();
        let state = wire["state"].as_str().unwrap();
        prop_assert!(["shadow", "promoted", "in_use", "archived", "demoted"].contains(&state));
        let back: Candidate = serde_json::from_value(wire).unwrap();
        prop_assert_eq!(&back, c);
    }
    for c in injectable(v) {
        prop_assert!(matches!(c.state, Promoted | InUse), "{:?} injectable", c.state);
        prop_assert!(!gone.contains(&c.id));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_lifecycle_never_reaches_an_undefined_state(ops in prop::collection::vec(op(), 1..80)) {
        let mut now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut v: Vec<Candidate> = Vec::new();
        let mut next = 0u32;
        let mut gone = BTreeSet::new();
        for op in ops {
            match op {
                Op::Observe { mask, kind, lesson } => {
                    let text = WORDS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, w)| *w).collect::<Vec<_>>().join(" ");
                    let o = ObserveParams {
                        text,
                        kind: KINDS[kind],
                        tags: vec![],
                        files: vec![format!("f{mask}.rs")],
                        symbols: vec![],
                        evidence: lesson.then(|| ObserveEvidence { failure: Some("failed".into()), fix: Some("fixed".into()), note: None }),
                        session_id: None,
                    };
                    let before = v.len();
                    let (i, merged) = upsert(&mut v, &o, now, || { next += 1; format!("c{next}") });
                    prop_assert_eq!(v.len(), before + usize::from(!merged));
                    prop_assert!(i < v.len());
                    prop_assert_eq!(&v[i].last_seen_at, &timestamp(now));
                    prop_assert_ne!(v[i].state, Archived);
                }
                Op::Feedback { pick, success } => {
                    if !v.is_empty() {
                        let n = v.len();
                        let outcome = if success { FeedbackOutcome::Success } else { FeedbackOutcome::Failure };
                        feedback(&mut v[pick % n], outcome, now);
                    }
                }
                Op::MarkInjected { pick } => {
                    if !v.is_empty() {
                        let n = v.len();
                        let c = &mut v[pick % n];
                        let from = c.state;
                        let change = mark_injected(c, now);
                        prop_assert_eq!(change.is_some(), from == Promoted);
                        prop_assert_eq!(c.state, if from == Promoted { InUse } else { from });
                    }
                }
                Op::Evaluate => {
                    let before: Vec<_> = v.iter().map(|c| (c.id.clone(), c.state)).collect();
                    let (changes, removed) = evaluate(&mut v, now);
                    for ch in &changes {
                        prop_assert!(allowed(ch.from, ch.to), "{:?}", ch);
                        prop_assert!(!ch.reason.is_empty());
                        prop_assert!(before.contains(&(ch.id.clone(), ch.from)));
                        if ch.to == Promoted {
                            // No single observation is promoted, whatever its evidence.
                            let c = v.iter().find(|c| c.id == ch.id).unwrap();
                            prop_assert!(c.observations >= PROMOTE_MIN_OBSERVATIONS, "{:?}", c);
                        }
                    }
                    prop_assert_eq!(before.len(), v.len() + removed.len());
                    gone.extend(removed);
                }
                Op::Advance { hours } => now += Duration::hours(hours),
            }
            invariants(&v, now, &gone)?;
        }
    }
}
