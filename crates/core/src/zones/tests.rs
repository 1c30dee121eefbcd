//! Zone accounting, the compaction trigger and the over-limit message: one `check` helper
//! per function, with the request written as token counts (`sys(n)` a system message).

use satchel_protocol::config::Tokenizer;
use serde_json::json;

use super::*;

/// A window of 10 000 tokens: compaction at 8 000, a reserve of 1 000, a summary budget of 500.
fn config() -> Config {
    let mut config = Config::default();
    config.window.max_input_length = 10_000;
    config.summary.summary_max_tokens = 500;
    config.tokens.tokenizer = Tokenizer::Estimate;
    config
}

fn msg(tokens: u64) -> MessageTokens {
    MessageTokens { system: false, tokens }
}

fn sys(tokens: u64) -> MessageTokens {
    MessageTokens { system: true, tokens }
}

/// The zones as a client reads them: (system, tools, summary, compactable, reserved, messages, total).
type Zones = (u64, u64, u64, u64, u64, u64, u64);

/// Checks the zones of `messages` beside `extras`, and what every request carries besides.
fn check(messages: &[MessageTokens], extras: RequestTokens, expect: Zones) {
    let config = config();
    let usage = zone_usage(messages, extras, &config);
    let got = (
        usage.system,
        usage.tools,
        usage.summary,
        usage.compactable,
        usage.reserved,
        usage.messages,
        usage.total,
    );
    assert_eq!(got, expect, "zones of {messages:?} with {extras:?}");
    assert_eq!(usage.compactable + usage.reserved, usage.messages);
    assert_eq!((usage.limit, usage.threshold), (10_000, 8_000));
    assert_eq!(usage.tokenizer, Tokenizer::Estimate);
}

#[test]
fn an_empty_request_is_all_zeros() {
    check(&[], RequestTokens::default(), (0, 0, 0, 0, 0, 0, 0));
}

#[test]
fn extras_count_in_their_zones_and_in_the_total() {
    let extras = RequestTokens {
        system: 30,
        tools: 200,
        summary: 400,
        expanded: 0,
        pinned: 0,
    };
    check(&[msg(100)], extras, (30, 200, 400, 0, 100, 100, 730));
}

#[test]
fn system_messages_count_in_the_system_zone_wherever_they_are() {
    let extras = RequestTokens {
        system: 10,
        ..RequestTokens::default()
    };
    let messages = [sys(100), msg(300), msg(400), sys(50), msg(500)];
    // The reserve takes 500 + 400; 300 more would pass 1 000. The system message between
    // them neither counts nor ends the run.
    check(&messages, extras, (160, 0, 0, 300, 900, 1_200, 1_360));
}

#[test]
fn the_reserve_is_the_newest_run_that_fits() {
    // A message that does not fit ends the run even when an older one would still fit.
    check(
        &[msg(100), msg(2_000), msg(200)],
        RequestTokens::default(),
        (0, 0, 0, 2_100, 200, 2_300, 2_300),
    );
    // Filling the reserve exactly still fits.
    check(
        &[msg(50), msg(600), msg(400)],
        RequestTokens::default(),
        (0, 0, 0, 50, 1_000, 1_050, 1_050),
    );
    // A newest message larger than the reserve leaves it empty.
    check(
        &[msg(10), msg(1_001)],
        RequestTokens::default(),
        (0, 0, 0, 1_011, 0, 1_011, 1_011),
    );
}

#[test]
fn message_tokens_know_system_messages_by_role() {
    assert_eq!(
        MessageTokens::of(
            &json!({"role": "system", "content": "be brief"}),
            7,
            MessageFormat::Openai
        ),
        sys(7)
    );
    assert_eq!(
        MessageTokens::of(&json!({"role": "user", "content": "hi"}), 3, MessageFormat::Openai),
        msg(3)
    );
    assert_eq!(
        MessageTokens::of(&json!({"content": "no role"}), 3, MessageFormat::Openai),
        msg(3)
    );
}

/// Checks whether a request of `total` tokens, `compactable` of them, compacts.
fn check_due(total: u64, compactable: u64, futile_at: Option<u64>, config: &Config, expect: CompactionDue) {
    let usage = TokenUsage {
        total,
        compactable,
        ..TokenUsage::default()
    };
    assert_eq!(
        compaction_due(&usage, futile_at, config),
        expect,
        "total {total}, compactable {compactable}, futile at {futile_at:?}"
    );
}

#[test]
fn compaction_is_due_from_the_threshold_on() {
    let config = config();
    check_due(7_999, 7_000, None, &config, CompactionDue::No);
    check_due(8_000, 7_000, None, &config, CompactionDue::Yes);
    let mut off = config;
    off.compaction.compact_enabled = false;
    check_due(20_000, 19_000, None, &off, CompactionDue::No);
}

#[test]
fn a_futile_compaction_waits_for_a_summary_s_worth_of_new_messages() {
    let config = config();
    check_due(9_000, 6_000, Some(6_000), &config, CompactionDue::Deferred);
    check_due(9_000, 6_499, Some(6_000), &config, CompactionDue::Deferred);
    check_due(9_000, 6_500, Some(6_000), &config, CompactionDue::Yes);
    // Under the threshold nothing is deferred: there is nothing to do.
    check_due(7_000, 6_000, Some(6_000), &config, CompactionDue::No);
}

/// A request of 12 345 tokens against the window of [`config`].
fn over() -> TokenUsage {
    zone_usage(
        &[sys(45), msg(10_000), msg(900)],
        RequestTokens {
            system: 100,
            tools: 800,
            summary: 500,
            expanded: 0,
            pinned: 0,
        },
        &config(),
    )
}

/// Checks the `over_limit` message of [`over`] for `reason` against snapshot `name`.
fn check_over_limit(reason: Option<OverLimitReason>, name: &str) {
    let usage = over();
    let text = over_limit_message(&usage, reason.as_ref()).expect("12 345 tokens are over 10 000");
    insta::assert_snapshot!(name, text);
}

#[test]
fn over_limit_messages_name_the_zones_and_the_reason() {
    assert_eq!(over().total, 12_345);
    check_over_limit(None, "over_limit_default");
    check_over_limit(Some(OverLimitReason::MinimalTail), "over_limit_default");
    check_over_limit(Some(OverLimitReason::CompactionDeferred), "over_limit_deferred");
    check_over_limit(
        Some(OverLimitReason::NothingCompactable),
        "over_limit_nothing_compactable",
    );
    check_over_limit(
        Some(OverLimitReason::CompactionFutile(
            "compaction skipped: the summary (600 tokens) would not be smaller than the 550 tokens it replaces".into(),
        )),
        "over_limit_futile",
    );
}

#[test]
fn a_request_within_its_limit_has_no_over_limit_message() {
    let mut usage = over();
    usage.total = usage.limit;
    assert_eq!(
        over_limit_message(&usage, Some(&OverLimitReason::NothingCompactable)),
        None
    );
    usage.total = usage.limit + 1;
    assert!(over_limit_message(&usage, None).is_some());
}
