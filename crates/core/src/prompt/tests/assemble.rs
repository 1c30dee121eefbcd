//! The budget and the two passes.

use satchel_protocol::Config;

use super::*;
use satchel_protocol::config::{PromptConfig, WindowConfig};

fn show(b: SystemPromptBudget) -> String {
    let wire = b.to_wire();
    format!(
        "{} per section, {} total (~{} tokens)",
        wire.max_per_tier_chars, wire.max_total_chars, wire.budget_tokens_estimate
    )
}

#[test]
fn budgets_scale_with_the_window_and_the_config() {
    let mut out = format!("default: {}\n", show(SystemPromptBudget::DEFAULT));
    for (label, window, output) in [
        ("4K window, all output", 4_096, 4_096),
        ("8K window, 2K output", 8_192, 2_048),
        ("32K window, 4K output", 32_768, 4_096),
        ("128K window, 16K output", 131_072, 16_384),
        ("128K window, no output", 131_072, 0),
        ("200K window, 16K output", 200_000, 16_384),
        ("1M window, 32K output", 1_000_000, 32_768),
        ("output over the window", 1_000, 5_000),
    ] {
        let _ = writeln!(
            out,
            "{label}: {}",
            show(SystemPromptBudget::for_context_window(window, output))
        );
    }
    let configs = [
        ("default config", Config::default()),
        (
            "config caps below the window's",
            Config {
                prompt: PromptConfig {
                    prompt_max_total_chars: 5_000,
                    prompt_max_section_chars: 3_000,
                },
                ..Config::default()
            },
        ),
        (
            "8K window under the default caps",
            Config {
                window: WindowConfig {
                    max_input_length: 8_192,
                    max_output_tokens: 2_048,
                    ..WindowConfig::default()
                },
                ..Config::default()
            },
        ),
    ];
    for (label, config) in configs {
        let _ = writeln!(out, "{label}: {}", show(SystemPromptBudget::of_config(&config)));
    }
    insta::assert_snapshot!("budgets", out);
}

#[test]
fn pass_one_cuts_each_section_to_the_section_cap_except_protected_ones() {
    check(
        "pass_one",
        &[
            sec("memory:workspace", 80, body("work", 3_000)),
            sec("rules", 88, body("rules", 800)),
            protected(sec("memory:soul", 100, body("soul", 3_000))),
        ],
        budget(1_000, 100_000),
    );
}

#[test]
fn pass_two_cuts_the_lowest_priority_first_and_only_as_far_as_needed() {
    // 3 × 1 500 + 2 separators = 4 504 over 4 000: git (40) gives up 504 characters.
    check(
        "pass_two_lowest_first",
        &[
            sec("environment", 72, body("env", 1_500)),
            sec("git", 40, body("git", 1_500)),
            sec("skills", 58, body("skills", 1_500)),
        ],
        budget(2_000, 4_000),
    );
}

#[test]
fn pass_two_drops_whole_sections_then_cuts_the_next() {
    // Over by 1 504: git (1 500) cannot give that much, so it goes with its separator, and
    // skills gives the last 2.
    check(
        "pass_two_drop_then_cut",
        &[
            sec("environment", 72, body("env", 1_500)),
            sec("git", 40, body("git", 1_500)),
            sec("skills", 58, body("skills", 1_500)),
        ],
        budget(2_000, 3_000),
    );
}

#[test]
fn on_ties_the_later_section_is_cut_first() {
    check(
        "ties_later_first",
        &[
            sec("candidates:a", 54, body("a", 1_200)),
            sec("candidates:b", 54, body("b", 1_200)),
            sec("candidates:c", 54, body("c", 1_200)),
        ],
        budget(2_000, 3_000),
    );
}

#[test]
fn a_section_that_cannot_hold_the_marker_is_dropped() {
    // Over by 22: the journal would keep 98 characters, too few beside the marker.
    check(
        "dropped_below_marker",
        &[
            sec("memory:workspace", 80, body("work", 2_000)),
            sec("memory:journal", 50, body("journal", 120)),
        ],
        budget(5_000, 2_100),
    );
}

#[test]
fn a_section_cut_twice_carries_one_marker_counted_from_its_original() {
    let sections = [
        sec("memory:auto", 60, body("auto", 9_000)),
        sec("rules", 88, body("rules", 1_500)),
    ];
    let built = built(&sections, None, budget(2_000, 3_000));
    let auto = built.assembled.sections[0].content();
    assert_eq!(auto.matches("<!-- [TRUNCATED]").count(), 1);
    assert!(auto.contains("Original: 9000 chars"));
    insta::assert_snapshot!("cut_twice", render(&built.assembled));
}

#[test]
fn protected_sections_are_never_cut_and_an_overrun_is_reported() {
    check(
        "protected_over_budget",
        &[
            protected(sec("memory:soul", 100, body("soul", 2_000))),
            sec("base", 95, body("base", 500)),
            protected(sec("memory:policy", 90, body("policy", 1_500))),
        ],
        budget(1_000, 3_000),
    );
}

#[test]
fn higher_priorities_give_way_to_protected_sections() {
    check(
        "protected_fit_others_cut",
        &[
            protected(sec("memory:soul", 10, body("soul", 2_500))),
            sec("base", 99, body("base", 1_000)),
        ],
        budget(5_000, 3_000),
    );
}

#[test]
fn empty_sections_are_left_out_without_counting_as_cut() {
    check(
        "empty_sections",
        &[sec("git", 40, ""), sec("rules", 88, "Use tabs."), sec("skills", 58, "")],
        budget(1_000, 1_000),
    );
}

#[test]
fn duplicate_keys_are_rejected_by_name() {
    let dup = assemble(
        vec![
            Section {
                key: "rules".into(),
                content: "a".into(),
                base_priority: 1,
                priority: 1,
                protected: false,
                base: false,
                source_type: "rules".into(),
                scope: "always-on".into(),
                reason: String::new(),
                evidence: Vec::new(),
            };
            2
        ],
        SystemPromptBudget::DEFAULT,
    );
    assert_eq!(dup.unwrap_err(), DuplicateKey("rules".into()));
}

#[test]
fn truncation_keeps_seventy_and_twenty_percent_with_the_marker_inside() {
    let text = body("t", 10_000);
    let mut out = String::new();
    for max in [10_000, 9_999, 1_000, 200, 120, 100, 90] {
        let cut = truncate::truncate(&text, max);
        let _ = writeln!(out, "{max}: {} chars: {}", cut.chars().count(), brief(&cut));
        assert!(cut.chars().count() <= max);
    }
    insta::assert_snapshot!("truncate_sizes", out);
}
