//! Merging: the summary in force, summaries pasted into the span, and what the span says,
//! into one [`Draft`] whose items know whether the newest span produced them.
//!
//! Nothing is re-summarised: earlier items are kept as they are and new ones appended, so
//! repeated compactions do not drift. Constraints and requests accumulate (de-duplicated);
//! prose lists keep their newest items; the blocked list keeps failures until a later
//! success in the same area clears them.

use std::collections::{HashMap, HashSet};

use satchel_protocol::{ArchiveRange, CompactSummary, OmittedItems, UserRequest};

use super::extract::calls::area;
use super::extract::paths::is_junk;
use super::extract::text::{cut_words, normalized};
use super::fields::Field;
use super::render::{code_span, leading_code_span};
use super::span::{Outcome, SHORT_COMMAND_CHARS, SpanFacts};

/// Cap for items carried over from a previous summary, which another backend may have written.
const ITEM_CHARS: usize = 600;
/// Newest unresolved failures reported as blocked.
const BLOCKED_LAST: usize = 3;
/// Newest decisions kept: older ones are in the archive, and a long list of reasons would
/// crowd out the identifiers.
const MAX_DECISIONS: usize = 10;
/// Newest done items kept.
const MAX_DONE: usize = 20;

/// One item of a list under construction.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub text: String,
    /// Came from (or reappeared in) the newest span.
    pub fresh: bool,
}

/// A summary under construction.
#[derive(Debug, Clone, Default)]
pub(crate) struct Draft {
    /// The lists, indexed by `Field as usize`.
    pub lists: [Vec<Item>; 12],
    /// The user's requests and demonstrations, oldest first, and whether they are new.
    pub requests: Vec<(UserRequest, bool)>,
    /// Items that earlier compactions left out of the identifier lists.
    pub omitted: Vec<OmittedItems>,
    pub archive: Vec<ArchiveRange>,
    pub instruction: Option<String>,
    pub instruction_effect: Option<String>,
}

impl Draft {
    pub fn list(&self, field: Field) -> &[Item] {
        &self.lists[field as usize]
    }

    pub fn list_mut(&mut self, field: Field) -> &mut Vec<Item> {
        &mut self.lists[field as usize]
    }

    /// Merges `previous` (and the summaries pasted into the span) with the span's facts.
    pub fn merge(previous: Option<&CompactSummary>, mut span: SpanFacts) -> Draft {
        let mut base = previous.cloned().unwrap_or_default();
        for pasted in std::mem::take(&mut span.pasted) {
            base = combine(base, pasted);
        }
        let ctx = &base.critical_context;
        let mut draft = Draft {
            archive: base.archive.clone(),
            omitted: ctx.omitted.clone(),
            ..Draft::default()
        };

        let mut modified = merge_items(&ctx.files_modified, span.files_modified.items);
        let read_before: Vec<String> = ctx.files_read.iter().filter(|p| !is_junk(p)).cloned().collect();
        let mut read = merge_items(&read_before, span.files_read.items);
        // A file read and later modified is listed once, as modified, and stays as fresh as
        // its freshest mention.
        let modified_at: HashMap<String, usize> = modified
            .iter()
            .enumerate()
            .map(|(i, item)| (item.text.clone(), i))
            .collect();
        read.retain(|item| match modified_at.get(&item.text) {
            Some(&i) => {
                modified[i].fresh |= item.fresh;
                false
            }
            None => true,
        });

        let mut decisions: Vec<String> = span.decisions.items;
        decisions.reverse();
        decisions.extend(base.key_decisions.iter().cloned());
        let mut decisions = merge_items(&[], decisions);
        decisions.truncate(MAX_DECISIONS);

        let mut done = merge_items(&base.done, span.done.items);
        if done.len() > MAX_DONE {
            done.drain(..done.len() - MAX_DONE);
        }
        let in_progress = match span.in_progress {
            Some(text) => fresh(vec![text]),
            None => merge_items(&base.in_progress, Vec::new()),
        };
        // A plan from before this span was carried out by it unless it did no work at all.
        let next_steps = if !span.next_steps.is_empty() {
            fresh(span.next_steps)
        } else if span.outcomes.is_empty() {
            merge_items(&base.next_steps, Vec::new())
        } else {
            Vec::new()
        };
        let notes: Vec<String> = span.identifiers.items.iter().map(|i| code_span(i)).collect();

        draft.requests = base.requests.iter().map(|r| (r.clone(), false)).collect();
        for request in span.requests {
            // The same request again (a retry, a repeated task) is listed once, at its newest
            // place; a summary compacted again brings nothing new.
            let key = normalized(&request.text);
            if let Some(at) = draft.requests.iter().position(|(r, _)| normalized(&r.text) == key) {
                if draft.requests[at].0.index >= request.index {
                    continue;
                }
                draft.requests.remove(at);
            }
            draft.requests.push((request, true));
        }

        *draft.list_mut(Field::Goal) = merge_items(&base.goal, Vec::new());
        *draft.list_mut(Field::Constraints) = merge_items(&base.constraints, span.constraints.items);
        *draft.list_mut(Field::Done) = done;
        *draft.list_mut(Field::InProgress) = in_progress;
        *draft.list_mut(Field::Blocked) = blocked(&base.blocked, &span.outcomes);
        *draft.list_mut(Field::Decisions) = decisions;
        *draft.list_mut(Field::NextSteps) = next_steps;
        *draft.list_mut(Field::FilesModified) = modified;
        *draft.list_mut(Field::FilesRead) = read;
        *draft.list_mut(Field::Commands) = merge_items(&ctx.commands, span.commands.items);
        *draft.list_mut(Field::Errors) = merge_items(&ctx.errors, span.errors.items);
        *draft.list_mut(Field::Notes) = merge_items(&ctx.notes, notes);
        draft
    }
}

fn fresh(items: Vec<String>) -> Vec<Item> {
    items.into_iter().map(|text| Item { text, fresh: true }).collect()
}

/// `b`'s items appended to `a`'s where new (a summary pasted after `a` was written).
fn combine(mut a: CompactSummary, b: CompactSummary) -> CompactSummary {
    for field in Field::ALL {
        let items: Vec<String> = field.of(&b).clone();
        let list = field.of_mut(&mut a);
        let mut seen: HashSet<String> = list.iter().map(|t| normalized(t)).collect();
        list.extend(items.into_iter().filter(|t| seen.insert(normalized(t))));
    }
    let known: HashSet<String> = a.requests.iter().map(|r| normalized(&r.text)).collect();
    a.requests
        .extend(b.requests.into_iter().filter(|r| !known.contains(&normalized(&r.text))));
    a.critical_context.omitted.extend(b.critical_context.omitted);
    a.archive.splice(0..0, b.archive);
    a
}

/// Previous items (capped, not fresh) followed by new ones (fresh); a new item equal to an
/// old one (ignoring case, spacing and final punctuation) refreshes it instead of repeating it.
pub(crate) fn merge_items(previous: &[String], new: Vec<String>) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::with_capacity(previous.len() + new.len());
    let mut at: HashMap<String, usize> = HashMap::new();
    for text in previous {
        let text = cut_words(text, ITEM_CHARS);
        let key = normalized(&text);
        if !key.is_empty() && !at.contains_key(&key) {
            at.insert(key, items.len());
            items.push(Item { text, fresh: false });
        }
    }
    for text in new {
        let key = normalized(&text);
        match at.get(&key) {
            Some(&i) => items[i].fresh = true,
            None if !key.is_empty() => {
                at.insert(key, items.len());
                items.push(Item { text, fresh: true });
            }
            None => {}
        }
    }
    items
}

/// The newest failures that nothing later fixed: earlier blocked items stay until a success
/// in their area (the same command area, or an edit of the same file) clears them.
fn blocked(previous: &[String], outcomes: &[Outcome]) -> Vec<Item> {
    let cleared: HashSet<&str> = outcomes
        .iter()
        .filter(|o| o.error.is_none())
        .flat_map(|o| o.areas.iter().map(String::as_str))
        .collect();
    let mut items: Vec<(Vec<String>, Item)> = previous
        .iter()
        .filter_map(|text| {
            let areas = leading_code_span(text)
                .map(|(key, _)| vec![area(&key)])
                .unwrap_or_default();
            let resolved = areas.iter().any(|a| cleared.contains(a.as_str()));
            (!resolved).then(|| {
                (
                    areas,
                    Item {
                        text: cut_words(text, ITEM_CHARS),
                        fresh: false,
                    },
                )
            })
        })
        .collect();
    for (i, outcome) in outcomes.iter().enumerate() {
        let Some(error) = &outcome.error else { continue };
        let later_success = outcomes[i + 1..]
            .iter()
            .any(|o| o.error.is_none() && o.areas.iter().any(|a| outcome.areas.contains(a)));
        if later_success {
            continue;
        }
        let text = match &outcome.key {
            Some(key) => format!("{} failed: {error}", code_span(&cut_words(key, SHORT_COMMAND_CHARS))),
            None => error.clone(),
        };
        // A newer failure in the same area replaces the older one.
        items.retain(|(areas, _)| areas.is_empty() || !areas.iter().any(|a| outcome.areas.contains(a)));
        items.push((outcome.areas.clone(), Item { text, fresh: true }));
    }
    let mut seen = HashSet::new();
    items.retain(|(_, item)| seen.insert(normalized(&item.text)));
    let skip = items.len().saturating_sub(BLOCKED_LAST);
    items.into_iter().skip(skip).map(|(_, item)| item).collect()
}
