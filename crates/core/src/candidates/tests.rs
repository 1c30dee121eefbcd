//! Lifecycle checks with a fake clock: every transition, the merge window, decay and grace,
//! retention, feedback, the prompt text and the canonical bytes.

use chrono::{DateTime, Duration, TimeZone, Utc};
use satchel_protocol::{
    Candidate, CandidateEvidence, CandidateKind, CandidateState, FeedbackOutcome, ObserveEvidence, ObserveParams,
};

use super::*;
use CandidateState::*;

/// Day `d` of the fake clock (2026-01-01T00:00:00Z + d days).
fn day(d: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::days(d)
}

fn obs(text: &str, kind: CandidateKind) -> ObserveParams {
    ObserveParams {
        text: text.into(),
        kind,
        tags: vec![],
        files: vec![],
        symbols: vec![],
        evidence: None,
        session_id: None,
    }
}

/// A candidate in `state` with the counts, last seen on day `seen`.
fn cand(id: &str, state: CandidateState, counts: (u32, u32, u32), seen: i64) -> Candidate {
    let at = timestamp(day(seen));
    Candidate {
        id: id.into(),
        text: format!("rule {id}"),
        kind: CandidateKind::Rule,
        tags: vec![],
        files: vec![],
        symbols: vec![],
        source_session: None,
        evidence: vec![CandidateEvidence {
            at: at.clone(),
            session_id: None,
            failure: None,
            fix: None,
            note: None,
        }],
        state,
        score: 0.0,
        observations: counts.0,
        successes: counts.1,
        failures: counts.2,
        created_at: at.clone(),
        last_seen_at: at.clone(),
        state_since: at,
        cooldown_until: (state == Demoted).then(|| timestamp(day(seen + COOLDOWN_DAYS))),
    }
}

/// Evaluates one candidate on day `now` and checks the transition (`None`: it stays) or its
/// removal (`Some(None)` is not used: removal is `expect_removed`).
fn check(c: Candidate, now: i64, expect: Option<CandidateState>) {
    let mut v = vec![c.clone()];
    let (changes, removed) = evaluate(&mut v, day(now));
    assert!(removed.is_empty(), "removed {removed:?}");
    match expect {
        None => assert!(changes.is_empty(), "unexpected {changes:?}"),
        Some(to) => {
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert_eq!((changes[0].from, changes[0].to), (c.state, to), "{}", changes[0].reason);
            assert_eq!(v[0].state, to);
            assert_eq!(v[0].state_since, timestamp(day(now)));
        }
    }
    validate(&v[0]).unwrap();
}

fn reason(c: Candidate, now: i64) -> String {
    let mut v = vec![c];
    let (changes, _) = evaluate(&mut v, day(now));
    changes
        .into_iter()
        .map(|c| format!("{:?} -> {:?}: {}", c.from, c.to, c.reason))
        .collect()
}

#[test]
fn shadow_promotion_gates() {
    check(cand("a", Shadow, (2, 0, 0), 0), 0, Some(Promoted));
    check(cand("b", Shadow, (1, 0, 0), 0), 0, None);
    // Enough score but more failures than successes.
    check(cand("c", Shadow, (5, 0, 1), 0), 0, None);
    // Two observations decayed under the promotion score (2 × 0.5^(1/30) < 2).
    check(cand("d", Shadow, (2, 0, 0), 0), 8, None);
    check(cand("e", Shadow, (2, 0, 0), 0), 7, Some(Promoted));
    insta::assert_snapshot!(reason(cand("a", Shadow, (2, 0, 0), 0), 0), @"Shadow -> Promoted: 2 observations, score 2.00 >= 2.00, 0 failures <= 0 successes");
}

#[test]
fn a_lesson_needs_observations_from_two_sessions() {
    let lesson = |session: Option<&str>| {
        let mut o = obs(
            "`npm test -- part1` failed: 1 failed → fixed: `npm test -- part2` succeeded",
            CandidateKind::Lesson,
        );
        o.evidence = Some(ObserveEvidence {
            failure: Some("`npm test -- part1` failed: 1 failed".into()),
            fix: Some("`npm test -- part2` succeeded".into()),
            note: None,
        });
        o.session_id = session.map(str::to_owned);
        o
    };
    // One extractive pairing (a compaction's lesson): a bonus in the score, never promotion.
    let mut v = Vec::new();
    upsert(&mut v, &lesson(Some("s1")), day(0), || "c1".into());
    assert_eq!(base_score(&v[0]), 2.0);
    check(v[0].clone(), 0, None);
    // Paired again in the same session: one source still.
    upsert(&mut v, &lesson(Some("s1")), day(1), || unreachable!());
    assert_eq!((v[0].observations, evidence_sources(&v[0])), (2, 1));
    check(v[0].clone(), 1, None);
    // Another session hit the same failure and the same fix.
    upsert(&mut v, &lesson(Some("s2")), day(2), || unreachable!());
    assert_eq!(evidence_sources(&v[0]), 2);
    check(v[0].clone(), 2, Some(Promoted));
    insta::assert_snapshot!(reason(v[0].clone(), 2), @"Shadow -> Promoted: 3 observations from 2 sources, score 4.00 >= 2.00, 0 failures <= 0 successes");
    // A client's own observations name no session: each is a source.
    let mut w = Vec::new();
    upsert(&mut w, &lesson(None), day(0), || "c2".into());
    check(w[0].clone(), 0, None);
    upsert(&mut w, &lesson(None), day(0), || unreachable!());
    check(w[0].clone(), 0, Some(Promoted));
    // A user's correction repeated in one session needs no second session.
    let mut c = cand("r", Shadow, (2, 0, 0), 0);
    c.kind = CandidateKind::Correction;
    c.evidence[0].session_id = Some("s1".into());
    check(c, 0, Some(Promoted));
}

#[test]
fn promoted_becomes_in_use_when_injected() {
    let mut c = cand("a", Promoted, (2, 0, 0), 0);
    let change = mark_injected(&mut c, day(1)).unwrap();
    assert_eq!((change.from, change.to, c.state), (Promoted, InUse, InUse));
    assert_eq!(c.state_since, timestamp(day(1)));
    assert_eq!(mark_injected(&mut c, day(2)), None);
    let mut s = cand("s", Shadow, (1, 0, 0), 0);
    assert_eq!(mark_injected(&mut s, day(0)), None);
    assert_eq!(s.state, Shadow);
}

#[test]
fn demotion_gates() {
    // Failures exceed successes by 2 (before the archive floor, though the score is negative).
    check(cand("a", Promoted, (4, 1, 3), 0), 0, Some(Demoted));
    check(cand("b", InUse, (9, 0, 2), 0), 0, Some(Demoted));
    check(cand("c", InUse, (9, 1, 2), 0), 0, None);
    // Score decayed under the floor: 2 × 0.5^(31/30) < 1 at day 38; exactly 1.0 at day 37.
    check(cand("d", InUse, (2, 0, 0), 0), 37, None);
    check(cand("e", InUse, (2, 0, 0), 0), 38, Some(Demoted));
    let mut v = vec![cand("f", Promoted, (4, 1, 3), 0)];
    evaluate(&mut v, day(3));
    assert_eq!(v[0].cooldown_until.as_deref(), Some("2026-01-11T00:00:00Z"));
    insta::assert_snapshot!(reason(cand("a", Promoted, (4, 1, 3), 0), 0), @"Promoted -> Demoted: 3 failures vs 1 successes (margin >= 2); cooldown 7 days");
    insta::assert_snapshot!(reason(cand("e", InUse, (2, 0, 0), 0), 38), @"InUse -> Demoted: score 0.98 < 1.00; cooldown 7 days");
}

#[test]
fn demoted_returns_to_shadow_after_the_cooldown() {
    let c = cand("a", Demoted, (3, 0, 0), 10); // cooldown until day 17
    check(c.clone(), 16, None);
    check(c.clone(), 17, Some(Shadow));
    let mut v = vec![c];
    evaluate(&mut v, day(17));
    assert_eq!(v[0].cooldown_until, None);
}

#[test]
fn archived_when_the_score_decays_under_the_floor() {
    // One observation: 0.5 at day 37 (not under), under it at day 38.
    check(cand("a", Shadow, (1, 0, 0), 0), 37, None);
    check(cand("a", Shadow, (1, 0, 0), 0), 38, Some(Archived));
    check(cand("b", Demoted, (2, 0, 0), 0), 68, Some(Archived));
    check(cand("c", Archived, (1, 0, 0), 0), 60, None);
    insta::assert_snapshot!(reason(cand("a", Shadow, (1, 0, 0), 0), 38), @"Shadow -> Archived: score 0.49 < 0.50 after 38 idle days");
}

#[test]
fn retention_removes_after_90_idle_days() {
    let mut v = vec![cand("a", Archived, (1, 0, 0), 0), cand("b", InUse, (50, 0, 0), 1)];
    let (_, removed) = evaluate(&mut v, day(89));
    assert!(removed.is_empty());
    let (changes, removed) = evaluate(&mut v, day(90));
    assert_eq!(removed, vec!["a".to_owned()]);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(v.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["b"]);
}

#[test]
fn decay_waits_for_the_grace_then_halves_every_30_days() {
    let c = cand("a", Shadow, (4, 0, 0), 0);
    assert_eq!(effective_score(&c, day(0)), 4.0);
    assert_eq!(effective_score(&c, day(7)), 4.0);
    assert!((effective_score(&c, day(37)) - 2.0).abs() < 1e-9);
    assert!((effective_score(&c, day(67)) - 1.0).abs() < 1e-9);
    // A clock that went back counts as no idle time; a negative score is not decayed.
    assert_eq!(effective_score(&c, day(-3)), 4.0);
    assert_eq!(effective_score(&cand("b", Shadow, (1, 0, 1), 0), day(60)), -2.0);
}

/// Texts of `n` words `w{from}`..`w{from+n-1}`.
fn words(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

#[test]
fn merge_window() {
    let base = || {
        let mut v = Vec::new();
        upsert(&mut v, &obs(&words(0, 75), CandidateKind::Rule), day(0), || "c1".into());
        v
    };
    let merged = |text: &str, kind, d| {
        let mut v = base();
        let (i, merged) = upsert(&mut v, &obs(text, kind), day(d), || "c2".into());
        assert_eq!(merged, i == 0);
        merged
    };
    // 50 shared of 100: 0.50 merges; 49 of 100: 0.49 does not.
    assert_eq!(jaccard(&tokens(&words(0, 75)), &tokens(&words(25, 75))), 0.50);
    assert!(merged(&words(25, 75), CandidateKind::Rule, 0));
    assert_eq!(jaccard(&tokens(&words(0, 75)), &tokens(&words(26, 74))), 0.49);
    assert!(!merged(&words(26, 74), CandidateKind::Rule, 0));
    // Last seen 30 days ago merges, 31 does not; another kind never.
    assert!(merged(&words(0, 75), CandidateKind::Rule, 30));
    assert!(!merged(&words(0, 75), CandidateKind::Rule, 31));
    assert!(!merged(&words(0, 75), CandidateKind::Preference, 0));
    // Case and punctuation do not count.
    assert_eq!(
        jaccard(
            &tokens("Run `cargo fmt`, then commit!"),
            &tokens("run cargo-fmt then COMMIT")
        ),
        1.0
    );
}

#[test]
fn a_merge_adds_evidence_and_unions_the_scope() {
    let mut v = Vec::new();
    let mut first = obs("Use the typed errors in storage", CandidateKind::Rule);
    first.files = vec!["a.rs".into()];
    first.session_id = Some("s1".into());
    upsert(&mut v, &first, day(0), || "c1".into());
    let mut second = obs("use typed errors in storage!", CandidateKind::Rule);
    second.files = vec!["a.rs".into(), "b.rs".into()];
    second.symbols = vec!["StoreError".into()];
    second.tags = vec!["errors".into()];
    second.session_id = Some("s2".into());
    second.evidence = Some(ObserveEvidence {
        note: Some("asked twice".into()),
        ..Default::default()
    });
    let (i, merged) = upsert(&mut v, &second, day(3), || unreachable!());
    assert_eq!((i, merged, v.len()), (0, true, 1));
    let c = &v[0];
    assert_eq!(
        (c.observations, c.files.clone(), c.symbols.clone()),
        (2, vec!["a.rs".into(), "b.rs".into()], vec!["StoreError".into()])
    );
    assert_eq!(c.tags, vec!["errors".to_owned()]);
    assert_eq!(c.text, "Use the typed errors in storage");
    assert_eq!(c.source_session.as_deref(), Some("s1"));
    assert_eq!(c.evidence.len(), 2);
    assert_eq!(c.evidence[1].session_id.as_deref(), Some("s2"));
    assert_eq!(
        (c.created_at.as_str(), c.last_seen_at.as_str()),
        ("2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z")
    );
    assert_eq!(c.score, 2.0);
}

#[test]
fn merges_keep_the_scope_lists_within_one_observations_limit() {
    let mut v = Vec::new();
    for batch in 0..3 {
        let mut o = obs("Use the typed errors in storage", CandidateKind::Rule);
        o.tags = (0..MAX_OBSERVE_LIST_ITEMS).map(|i| format!("t{batch}-{i}")).collect();
        upsert(&mut v, &o, day(batch), || "c1".into());
    }
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].tags.len(), MAX_OBSERVE_LIST_ITEMS);
    assert_eq!(v[0].tags[0], "t2-0", "the newest are kept");
}

#[test]
fn an_archived_candidate_that_is_matched_goes_back_to_shadow() {
    let mut v = vec![cand("a", Archived, (1, 0, 1), 0)];
    let (_, merged) = upsert(&mut v, &obs("rule a", CandidateKind::Rule), day(20), || unreachable!());
    assert!(merged);
    assert_eq!(
        (v[0].state, v[0].state_since.as_str()),
        (Shadow, "2026-01-21T00:00:00Z")
    );
}

#[test]
fn feedback_counts_and_refreshes() {
    let mut c = cand("a", InUse, (2, 0, 0), 0);
    feedback(&mut c, FeedbackOutcome::Success, day(20));
    assert_eq!((c.successes, c.failures, c.score), (1, 0, 4.0));
    assert_eq!(c.last_seen_at, timestamp(day(20)));
    feedback(&mut c, FeedbackOutcome::Failure, day(21));
    assert_eq!((c.successes, c.failures, c.score), (1, 1, 1.0));
    c.failures = u32::MAX;
    feedback(&mut c, FeedbackOutcome::Failure, day(21));
    assert_eq!(c.failures, u32::MAX);
}

#[test]
fn a_section_shows_the_candidate_its_evidence_and_its_scope() {
    let mut lesson = cand("c1", InUse, (1, 0, 0), 0);
    lesson.text = "Run `cargo fmt --all`\nbefore clippy.".into();
    lesson.evidence[0].failure = Some("clippy -D warnings failed on formatting".into());
    lesson.evidence[0].fix = Some("cargo fmt --all".into());
    lesson.files = vec!["src/lib.rs".into()];
    lesson.symbols = vec!["Parser".into(), "Lexer".into()];
    let mut rule = cand("c2", Promoted, (2, 0, 0), 0);
    rule.evidence[0].note = Some("the user asked twice".into());
    let plain = cand("c3", Promoted, (2, 0, 0), 0);
    let text = [&lesson, &rule, &plain].map(section_text).join("\n");
    insta::assert_snapshot!(text, @r"
    Learned [c1]: Run `cargo fmt --all` before clippy.
      after: clippy -D warnings failed on formatting → fix: cargo fmt --all
      applies to: files src/lib.rs; symbols Parser, Lexer
    Learned [c2]: rule c2
      note: the user asked twice
    Learned [c3]: rule c3
    ");
}

#[test]
fn injectable_is_promoted_and_in_use_only() {
    let v = [Shadow, Promoted, InUse, Archived, Demoted].map(|s| cand(&format!("{s:?}"), s, (2, 0, 0), 0));
    let ids: Vec<_> = injectable(&v).iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids, ["Promoted", "InUse"]);
}

#[test]
fn validate_rejects_bad_entries() {
    assert!(validate(&cand("a", Demoted, (1, 0, 0), 0)).is_ok());
    let mut c = cand("a", Demoted, (1, 0, 0), 0);
    c.cooldown_until = None;
    assert!(validate(&c).is_err());
    let mut c = cand("a", Shadow, (1, 0, 0), 0);
    c.last_seen_at = "yesterday".into();
    assert_eq!(
        validate(&c).unwrap_err(),
        r#"last_seen_at is not RFC 3339: "yesterday""#
    );
}
