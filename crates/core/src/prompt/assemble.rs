//! Sections in, one prompt out, under a budget (AceClaw's `ContextAssemblyPlan` with
//! `TierTruncator`'s two passes).
//!
//! Pass 1 cuts every section over the per-section cap. Pass 2, while the prompt is over the
//! total, cuts the section of lowest (boosted) priority, the later one on ties, only as far as
//! needed, dropping it when the cut would leave too little beside the marker. Every cut starts
//! from the section's original text, so a section never carries two markers (AceClaw cuts
//! its pass-1 result again).
//!
//! Protected sections are never cut. AceClaw's `ContextAssemblyPlan` cuts them in a last pass
//! when the rest was not enough (only `TierTruncator` really spares them); here the prompt is
//! left over budget instead and [`Assembled::over_budget`] says which protected sections
//! exceed it, so whoever marked them protected can decide.
//!
//! Nor is the client's own system prompt (a [`Section::base`] section) ever cut: AceClaw's
//! per-section cap is for memory tiers, and a real agent's prompt (20–60 K characters) is
//! its instructions, whose middle the model must not lose. It counts toward the total, so the
//! other sections make room for it; when it alone is over the total it is sent whole and
//! [`Assembled::over_budget`] says so (the engine reports it as an action and in
//! `over_limit`).
//!
//! Lengths are counted once per section; pass 2 keeps a running total and sorts once, so the
//! work is O(n log n) in the sections plus one pass over each text cut.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use satchel_protocol::SectionReport;

use super::budget::SystemPromptBudget;
use super::truncate::cut;

/// Separator between sections; it counts in the total.
pub const SECTION_SEPARATOR: &str = "\n\n";

/// One section to assemble, with its priority already boosted.
#[derive(Debug, Clone, PartialEq)]
pub struct Section<'a> {
    /// Unique key.
    pub key: String,
    /// The text (borrowed from the request where possible: most sections go through whole).
    pub content: Cow<'a, str>,
    /// Priority as sent.
    pub base_priority: i64,
    /// Priority after the focus boost: the one truncation uses.
    pub priority: i64,
    /// Never cut.
    pub protected: bool,
    /// The client's own system prompt (its `system`, or its leading system message): never
    /// cut, counted toward the total only.
    pub base: bool,
    /// Where it comes from (`memory`, `rules`, `base`, …).
    pub source_type: String,
    /// `always-on` or `task-local`.
    pub scope: String,
    /// Why it is in the prompt.
    pub reason: String,
    /// Why its priority is what it is.
    pub evidence: Vec<String>,
}

/// Two sections share a key: inspect and the rendering of `system` blocks address sections
/// by key, so it must be unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey(pub String);

impl fmt::Display for DuplicateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "section key {:?} is used more than once", self.0)
    }
}

impl std::error::Error for DuplicateKey {}

/// A section after assembly.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembledSection<'a> {
    /// The text as sent.
    pub original: Cow<'a, str>,
    /// The cut text when it was cut and kept; `None` when it went through whole or was dropped.
    cut: Option<String>,
    /// What inspect shows of it.
    pub report: SectionReport,
}

impl AssembledSection<'_> {
    /// The same section owning its original text, to be kept beyond the request.
    pub fn into_owned(self) -> AssembledSection<'static> {
        AssembledSection {
            original: Cow::Owned(self.original.into_owned()),
            cut: self.cut,
            report: self.report,
        }
    }

    /// The text in the prompt: empty when the section was dropped.
    pub fn content(&self) -> &str {
        match (&self.cut, self.report.included) {
            (_, false) => "",
            (Some(cut), true) => cut,
            (None, true) => &self.original,
        }
    }
}

/// The assembled prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled<'a> {
    /// Included sections joined by [`SECTION_SEPARATOR`].
    pub prompt: String,
    /// `prompt`'s length in characters.
    pub total_chars: usize,
    /// Every section, in insertion order, dropped ones included.
    pub sections: Vec<AssembledSection<'a>>,
    /// Keys of the sections cut or dropped to fit, in prompt order.
    pub truncated_section_keys: Vec<String>,
    /// Set when the sections never cut (protected ones, the client's system prompt) alone
    /// exceed the total: names them, their size and the budget.
    pub over_budget: Option<String>,
    /// The same as numbers, for the engine's action.
    pub kept_whole_over_budget: Option<OverBudget>,
}

/// Sections that are never cut and alone exceed the total budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// Their keys and characters, in prompt order.
    pub sections: Vec<(String, usize)>,
    /// Their characters, with separators.
    pub chars: usize,
    /// The total budget.
    pub max_total_chars: usize,
}

impl Assembled<'_> {
    /// The same assembly owning every text, to be kept beyond the request (inspect's detail).
    pub fn into_owned(self) -> Assembled<'static> {
        Assembled {
            prompt: self.prompt,
            total_chars: self.total_chars,
            sections: self.sections.into_iter().map(AssembledSection::into_owned).collect(),
            truncated_section_keys: self.truncated_section_keys,
            over_budget: self.over_budget,
            kept_whole_over_budget: self.kept_whole_over_budget,
        }
    }
}

/// Working state of one section during the passes.
struct Slot {
    chars: usize,
    original_chars: usize,
    included: bool,
    truncated: bool,
    cut: Option<String>,
}

/// Assembles `sections` in order under `budget`. Protected sections are never cut, even when
/// they alone exceed the budget (AceClaw's `ContextAssemblyPlan` would cut them last):
/// [`Assembled::over_budget`] says so instead.
pub fn assemble<'a>(sections: Vec<Section<'a>>, budget: SystemPromptBudget) -> Result<Assembled<'a>, DuplicateKey> {
    let mut seen = HashSet::with_capacity(sections.len());
    if let Some(dup) = sections.iter().find(|s| !seen.insert(s.key.as_str())) {
        return Err(DuplicateKey(dup.key.clone()));
    }

    let mut slots = capped_slots(&sections, budget);
    let total = fit_total(&sections, &mut slots, budget);
    let kept_whole_over_budget = kept_whole_overrun(&sections, &slots, budget);
    let over_budget = kept_whole_over_budget.as_ref().map(OverBudget::notice);
    let mut prompt = String::with_capacity(
        sections
            .iter()
            .zip(&slots)
            .filter(|(_, slot)| slot.included)
            .map(|(s, slot)| slot.cut.as_ref().map_or(s.content.len(), String::len) + SECTION_SEPARATOR.len())
            .sum(),
    );
    let mut truncated_section_keys = Vec::new();
    let mut out = Vec::with_capacity(sections.len());
    for (section, slot) in sections.into_iter().zip(slots) {
        if slot.included {
            if !prompt.is_empty() {
                prompt.push_str(SECTION_SEPARATOR);
            }
            prompt.push_str(slot.cut.as_deref().unwrap_or(&section.content));
        }
        if slot.truncated {
            truncated_section_keys.push(section.key.clone());
        }
        let final_chars = if slot.included { slot.chars } else { 0 };
        let report = SectionReport {
            key: section.key,
            source_type: section.source_type,
            scope_type: section.scope,
            inclusion_reason: section.reason,
            priority: section.priority,
            base_priority: section.base_priority,
            protected: section.protected,
            original_chars: slot.original_chars,
            final_chars,
            estimated_tokens: final_chars.div_ceil(4) as u64,
            included: slot.included,
            truncated: slot.truncated,
            evidence: section.evidence,
        };
        out.push(AssembledSection {
            original: section.content,
            cut: slot.cut,
            report,
        });
    }
    Ok(Assembled {
        prompt,
        total_chars: total,
        sections: out,
        truncated_section_keys,
        over_budget,
        kept_whole_over_budget,
    })
}

/// Pass 1: a slot for each of `sections`, cut to the per-section cap unless kept whole.
fn capped_slots(sections: &[Section<'_>], budget: SystemPromptBudget) -> Vec<Slot> {
    sections
        .iter()
        .map(|s| {
            let chars = s.content.chars().count();
            let mut slot = Slot {
                chars,
                original_chars: chars,
                included: chars > 0,
                truncated: false,
                cut: None,
            };
            if !s.kept_whole() && chars > budget.max_per_section_chars {
                apply_cut(&mut slot, &s.content, budget.max_per_section_chars);
            }
            slot
        })
        .collect()
}

/// Pass 2: cuts or drops the sections not kept whole, lowest priority first, later first on ties,
/// until the prompt fits the total; returns the prompt's length in characters.
fn fit_total(sections: &[Section<'_>], slots: &mut [Slot], budget: SystemPromptBudget) -> usize {
    let mut total = joined_chars(slots.iter().filter(|s| s.included).map(|s| s.chars));
    if total <= budget.max_total_chars {
        return total;
    }
    let mut order: Vec<usize> = (0..sections.len())
        .filter(|&i| !sections[i].kept_whole() && slots[i].included)
        .collect();
    order.sort_by_key(|&i| (sections[i].priority, std::cmp::Reverse(i)));
    let mut included = slots.iter().filter(|s| s.included).count();
    for i in order {
        if total <= budget.max_total_chars {
            break;
        }
        let slot = &mut slots[i];
        let before = slot.chars;
        let excess = total - budget.max_total_chars;
        if before > excess {
            apply_cut(slot, &sections[i].content, before - excess);
        } else {
            drop_slot(slot);
        }
        if slot.included {
            total -= before - slot.chars;
        } else {
            // The section and one separator leave the prompt.
            included -= 1;
            total -= before + if included > 0 { SECTION_SEPARATOR.len() } else { 0 };
        }
    }
    total
}

/// Length of `lengths` joined by the separator.
fn joined_chars(lengths: impl Iterator<Item = usize>) -> usize {
    let (sum, n) = lengths.fold((0, 0usize), |(sum, n), len| (sum + len, n + 1));
    sum + SECTION_SEPARATOR.len() * n.saturating_sub(1)
}

/// Cuts a section from its original text to at most `max` characters, or drops it.
fn apply_cut(slot: &mut Slot, original: &str, max: usize) {
    match cut(original, slot.original_chars, max) {
        Some((text, chars)) => {
            slot.chars = chars;
            slot.cut = Some(text);
            slot.truncated = true;
        }
        None => drop_slot(slot),
    }
}

fn drop_slot(slot: &mut Slot) {
    slot.included = false;
    slot.truncated = true;
    slot.cut = None;
    slot.chars = 0;
}

/// The sections never cut, when they alone exceed the total.
fn kept_whole_overrun(sections: &[Section<'_>], slots: &[Slot], budget: SystemPromptBudget) -> Option<OverBudget> {
    let kept: Vec<(&str, usize)> = sections
        .iter()
        .zip(slots)
        .filter(|(s, slot)| s.kept_whole() && slot.included)
        .map(|(s, slot)| (s.key.as_str(), slot.chars))
        .collect();
    let chars = joined_chars(kept.iter().map(|(_, chars)| *chars));
    (chars > budget.max_total_chars).then(|| OverBudget {
        sections: kept.iter().map(|(key, chars)| ((*key).to_owned(), *chars)).collect(),
        chars,
        max_total_chars: budget.max_total_chars,
    })
}

impl OverBudget {
    /// The notice the client reads in `over_limit` and the prompt report.
    fn notice(&self) -> String {
        let names: Vec<String> = self
            .sections
            .iter()
            .map(|(key, chars)| format!("{key} ({chars})"))
            .collect();
        format!(
            "sections {} are never cut (the client's system prompt, or protected) and take {} chars with \
             separators, over the system prompt budget of {} chars; they are sent whole and every other \
             section is dropped",
            names.join(", "),
            self.chars,
            self.max_total_chars
        )
    }
}

impl Section<'_> {
    /// Whether the assembly never cuts it.
    fn kept_whole(&self) -> bool {
        self.protected || self.base
    }
}
