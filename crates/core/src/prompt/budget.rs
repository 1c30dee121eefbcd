//! The character budget of the system prompt (AceClaw's `SystemPromptBudget`).
//!
//! Characters, not tokens: the budget is enforced before any tokenizer runs, and AceClaw's
//! ~4 characters per token is close enough to size a prompt that must leave most of the
//! window to the conversation.

use satchel_protocol::{Config, PromptBudget};

/// Characters per token assumed when converting the window into a character budget.
const CHARS_PER_TOKEN: u64 = 4;
/// Smallest total budget a window can scale down to (AceClaw's document: 1K).
const MIN_TOTAL_CHARS: usize = 1_000;
/// Smallest per-section budget.
const MIN_SECTION_CHARS: usize = 1_000;

/// How many characters the assembled system prompt, and each of its sections, may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemPromptBudget {
    /// Largest section after pass 1 (AceClaw's `maxPerTierChars`).
    pub max_per_section_chars: usize,
    /// Largest assembled prompt, separators included (AceClaw's `maxTotalChars`).
    pub max_total_chars: usize,
}

impl SystemPromptBudget {
    /// AceClaw's default: 20 000 characters a section, 150 000 in all.
    pub const DEFAULT: SystemPromptBudget = SystemPromptBudget {
        max_per_section_chars: 20_000,
        max_total_chars: 150_000,
    };

    /// The budget for a window: the prompt may take a quarter of the effective window
    /// (`context_tokens - max_output_tokens`) at 4 characters a token, clamped to
    /// 1 000..=150 000; a section a quarter of that, clamped to 1 000..=20 000 and never more
    /// than the total.
    ///
    /// AceClaw's code clamps the total at 4 000 rather than its document's 1 000; we follow the
    /// document, so a tiny window is not handed a prompt bigger than a quarter of it.
    pub fn for_context_window(context_tokens: u64, max_output_tokens: u64) -> Self {
        let effective = context_tokens.saturating_sub(max_output_tokens);
        let chars = (effective / 4).saturating_mul(CHARS_PER_TOKEN);
        let total = usize::try_from(chars)
            .unwrap_or(usize::MAX)
            .clamp(MIN_TOTAL_CHARS, Self::DEFAULT.max_total_chars);
        let per_section = (total / 4)
            .clamp(MIN_SECTION_CHARS, Self::DEFAULT.max_per_section_chars)
            .min(total);
        SystemPromptBudget {
            max_per_section_chars: per_section,
            max_total_chars: total,
        }
    }

    /// The budget of a configuration: its window's budget, lowered by `prompt_max_total_chars`
    /// and `prompt_max_section_chars` when those are smaller.
    pub fn of_config(config: &Config) -> Self {
        let window = Self::for_context_window(config.window.max_input_length, config.window.max_output_tokens);
        let total = window.max_total_chars.min(config.prompt.prompt_max_total_chars);
        SystemPromptBudget {
            max_per_section_chars: window
                .max_per_section_chars
                .min(config.prompt.prompt_max_section_chars)
                .min(total),
            max_total_chars: total,
        }
    }

    /// The budget as `context.inspect` reports it, with AceClaw's `maxTotalChars / 4` token estimate.
    pub fn to_wire(&self) -> PromptBudget {
        PromptBudget {
            max_per_tier_chars: self.max_per_section_chars,
            max_total_chars: self.max_total_chars,
            budget_tokens_estimate: (self.max_total_chars / 4) as u64,
        }
    }
}

impl Default for SystemPromptBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}
