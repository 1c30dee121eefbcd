//! The agent-visible budget: a short prompt section that tells the model how full its window
//! is, when the next compaction comes, and what the last one dropped and how to get it back.
//!
//! Its numbers are rounded (the window share to 5 %, tokens to thousands) so the text changes
//! only every few calls: the system prompt it sits in is the start of the request, and a
//! section that changed on every call would defeat the provider's prompt cache.

use satchel_protocol::{DroppedIdentifier, Pressure};

/// The key of the section.
pub const BUDGET_SECTION_KEY: &str = "satchel:budget";
/// Dropped identifiers named in the section; the rest are counted.
const DROPPED_NAMED: usize = 3;

/// What the section says.
#[derive(Debug, Clone, Copy)]
pub struct BudgetFacts<'a> {
    /// Tokens of the last request.
    pub used: u64,
    /// The window.
    pub limit: u64,
    /// Where compaction runs.
    pub threshold: u64,
    /// The last compaction: its id, the messages it summarised, and what its summary no
    /// longer names.
    pub last_compaction: Option<(&'a str, usize, &'a [DroppedIdentifier])>,
}

/// `n` tokens in thousands, rounded: `131k`, `4k`, `800`.
fn thousands(n: u64) -> String {
    if n < 1_000 {
        return n.to_string();
    }
    format!("{}k", (n + 500) / 1_000)
}

/// The section's text.
pub fn budget_section_text(facts: &BudgetFacts<'_>) -> String {
    let limit = facts.limit.max(1);
    // To the nearest 5 % of the window, so the text moves in steps.
    let share = (facts.used * 20 + limit / 2) / limit * 5;
    let used = share * limit / 100;
    let threshold_share = (facts.threshold * 100 + limit / 2) / limit;
    let pressure = match Pressure::of(used, limit, facts.threshold as f64 / limit as f64) {
        Pressure::Low => "low",
        Pressure::Medium => "medium",
        Pressure::High => "high",
        Pressure::Critical => "critical",
    };
    let mut text = format!(
        "## Context budget (satchel)\n\nAbout {share}% of the {}-token window is in use (pressure {pressure}). ",
        thousands(limit)
    );
    if used < facts.threshold {
        text.push_str(&format!(
            "At {threshold_share}% ({} tokens), about {} tokens from now, the older turns are compacted into a \
             summary; their raw messages stay in satchel's archive.",
            thousands(facts.threshold),
            thousands(facts.threshold - used)
        ));
    } else {
        text.push_str(
            "The older turns are being compacted into a summary; their raw messages stay in satchel's archive.",
        );
    }
    if let Some((id, messages, dropped)) = facts.last_compaction {
        text.push_str(&format!(
            "\n\nThe last compaction ({id}) summarised {messages} messages."
        ));
        if !dropped.is_empty() {
            let named: Vec<String> = dropped
                .iter()
                .take(DROPPED_NAMED)
                .map(|d| format!("`{}`", d.text))
                .collect();
            let more = dropped.len().saturating_sub(DROPPED_NAMED);
            text.push_str(&format!(" The summary no longer names {}", named.join(", ")));
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
            text.push('.');
        }
        text.push_str(&format!(
            " satchel's `context.expand` with {{\"compaction_id\": \"{id}\"}} brings that span back for one request."
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use satchel_protocol::DroppedKind;

    use super::*;

    fn check(facts: BudgetFacts<'_>, expected: &str) {
        assert_eq!(budget_section_text(&facts), expected);
    }

    #[test]
    fn early_in_a_session_it_says_how_far_compaction_is() {
        check(
            BudgetFacts {
                used: 41_200,
                limit: 131_072,
                threshold: 104_857,
                last_compaction: None,
            },
            "## Context budget (satchel)\n\nAbout 30% of the 131k-token window is in use (pressure low). At 80% \
             (105k tokens), about 66k tokens from now, the older turns are compacted into a summary; their raw \
             messages stay in satchel's archive.",
        );
    }

    #[test]
    fn after_a_compaction_it_names_what_was_dropped_and_how_to_get_it_back() {
        let dropped: Vec<DroppedIdentifier> = ["cargo test -p parser", "crates/parser/src/lib.rs", "a", "b"]
            .iter()
            .map(|t| DroppedIdentifier {
                kind: DroppedKind::Command,
                text: (*t).into(),
                index: 3,
                mentions: 1,
            })
            .collect();
        check(
            BudgetFacts {
                used: 110_000,
                limit: 131_072,
                threshold: 104_857,
                last_compaction: Some(("c7", 74, &dropped)),
            },
            "## Context budget (satchel)\n\nAbout 85% of the 131k-token window is in use (pressure high). The older \
             turns are being compacted into a summary; their raw messages stay in satchel's archive.\n\nThe last \
             compaction (c7) summarised 74 messages. The summary no longer names `cargo test -p parser`, \
             `crates/parser/src/lib.rs`, `a` and 1 more. satchel's `context.expand` with {\"compaction_id\": \
             \"c7\"} brings that span back for one request.",
        );
    }

    #[test]
    fn the_text_moves_in_steps_of_the_window() {
        let at = |used| {
            budget_section_text(&BudgetFacts {
                used,
                limit: 100_000,
                threshold: 80_000,
                last_compaction: None,
            })
        };
        // 40.1k to 42.4k all read "about 40%".
        assert_eq!(at(40_100), at(42_400));
        assert_ne!(at(42_400), at(42_600));
    }
}
