//! The one budget-fitting routine of both summarisers: a `Draft` becomes the most detailed
//! [`CompactSummary`] whose rendering fits the token budget.
//!
//! The budget is served by field priority ([`Field::PRIORITY`], or the order an instruction
//! asks for). Detail is given up in a fixed order of steps, least valuable first:
//!
//! 1. identifiers from earlier spans move into counted groups ("and 37 more in `src/`"),
//!    but the newest 40 files modified, then notes, then the prose of earlier spans (done,
//!    decisions) is dropped;
//! 2. the opening of every request but the newest is cut to its first lines;
//! 3. field by field, lowest priority first: the newest span's identifiers move into groups
//!    (oldest first), together with the files modified kept in step 1, prose items are
//!    dropped (oldest first); unless an instruction set the order, the artifact trail (files
//!    modified, errors, commands that run checks) moves into groups only once the prose
//!    (done, in progress, decisions, next steps) is gone;
//! 4. the newest request and the constraints are cut to their first lines;
//! 5. requests are cut to their task line (past the opening they share with other requests),
//!    goal statements dropped, constraints cut short, older requests reduced to references
//!    ("messages 3, 17") and the oldest constraints counted;
//! 6. for budgets far too small for the text, the newest request too.
//!
//! Requests are never dropped: the last step still names each one and where it is archived.
//! The number of steps taken is found by bisection over exact renders, so a summary never
//! exceeds its budget and large drafts are rendered a few times, not once per item.

use std::collections::{BTreeMap, HashSet};

use satchel_protocol::{CompactSummary, CriticalContext, IdentifierList, ItemGroup, MessageFormat, OmittedItems};

use super::extract::calls::runs_checks;
use super::extract::text::cut_words;
use super::fields::{Field, field_of_list};
use super::merge::Draft;
use super::render::{summary_message_text, with_next_range};
use super::span::SENTENCE_CHARS;
use super::template::{LEFT_OUT, sentence_key, split_sentences, template_key};
use crate::render::summary_message_tokens;
use crate::tokens::TokenCounter;

/// Chars of a request or constraint cut to its first lines: enough for the task line.
pub const HEAD_CHARS: usize = 200;
/// Chars of a request cut to its task line: counted after the opening it shares with
/// another request ("We're currently solving the following issue…"), which says nothing.
pub const BRIEF_CHARS: usize = 120;
/// Files modified listed one by one whatever their age, before the prose gives way: the
/// artifact trail an agent needs most after a compaction.
const TRAIL_LISTED: usize = 40;
/// Groups of omitted items named per list; the rest are only counted.
const GROUPS_KEPT: usize = 8;

/// One way of giving up detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Move an identifier into its list's counted groups.
    Omit(Field, usize),
    /// Drop an item.
    Drop(Field, usize),
    /// Cut an item to this many chars.
    Cut(Field, usize, usize),
    /// Cut a request to this many chars (0: a reference only).
    Request(usize, usize),
}

/// The most detailed summary of `draft` whose message fits `max_tokens` once the caller
/// appends the archive range of the compaction in progress, serving fields in `priority`
/// order.
pub(crate) fn fit(
    draft: &Draft,
    priority: &[Field],
    max_tokens: u64,
    counter: &TokenCounter,
    format: MessageFormat,
) -> CompactSummary {
    let steps = plan(draft, priority);
    // The whole summary message counts, as the daemon counts it, once the caller has
    // archived this compaction.
    let fits = |taken: usize| {
        let shown = summary_message_text(&with_next_range(&build(draft, &steps[..taken])));
        summary_message_tokens(&shown, format, counter) <= max_tokens
    };
    if fits(0) {
        return build(draft, &[]);
    }
    // `lo` does not fit; `hi` fits, or is every step.
    let (mut lo, mut hi) = (0, steps.len());
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    build(draft, &steps[..hi])
}

/// Every step, in the order they are taken.
fn plan(draft: &Draft, priority: &[Field]) -> Vec<Step> {
    let mut steps = Vec::new();
    let lowest_first: Vec<Field> = priority.iter().rev().copied().collect();
    let indices = |field: Field, fresh: bool| -> Vec<usize> {
        draft
            .list(field)
            .iter()
            .enumerate()
            .filter(|(_, item)| item.fresh == fresh)
            .map(|(i, _)| i)
            .collect()
    };
    // 1. Earlier spans' identifiers, then notes. Files modified are the artifact trail: only
    //    the oldest past the newest `TRAIL_LISTED` become counts here; the rest give way in
    //    step 3 with the newest span's identifiers.
    let modified = draft.list(Field::FilesModified).len();
    let (older_modified, trail): (Vec<usize>, Vec<usize>) =
        (0..modified).partition(|&i| !draft.list(Field::FilesModified)[i].fresh && i + TRAIL_LISTED < modified);
    for &field in &lowest_first {
        if field == Field::FilesModified {
            steps.extend(older_modified.iter().map(|&i| Step::Omit(field, i)));
        } else if field.identifier_list().is_some() && field != Field::Notes {
            steps.extend(indices(field, false).into_iter().map(|i| Step::Omit(field, i)));
        }
    }
    steps.extend((0..draft.list(Field::Notes).len()).map(|i| Step::Omit(Field::Notes, i)));
    // 1b. Prose from earlier spans (what was done and decided before): the newest span's
    //     work outranks it. Blocked items stay: they are open until a success clears them.
    for &field in &lowest_first {
        if matches!(
            field,
            Field::Done | Field::Decisions | Field::InProgress | Field::NextSteps
        ) {
            steps.extend(indices(field, false).into_iter().map(|i| Step::Drop(field, i)));
        }
    }
    // 2. Every request's opening but the newest one's.
    let newest = draft.requests.iter().rposition(|(r, _)| !r.demonstration);
    let older: Vec<usize> = (0..draft.requests.len()).filter(|&i| Some(i) != newest).collect();
    steps.extend(older.iter().map(|&i| Step::Request(i, HEAD_CHARS)));
    // 3. Field by field, lowest priority first. Identifier lists next to each other in that
    //    order give up their items together, oldest first across the lists (each list is
    //    chronological, so an item's relative position stands in for its time): the last
    //    command, the files it touched and the error it hit survive together. Unless an
    //    instruction set the order, the artifact trail (files modified, errors, commands that
    //    run checks) gives way only after the prose (done, in progress, decisions, next steps).
    let defer_trail = priority == Field::PRIORITY;
    let mut deferred: Vec<Step> = Vec::new();
    let mut run: Vec<Field> = Vec::new();
    for &field in lowest_first.iter().chain([Field::Goal].iter()) {
        let interleaved = field.identifier_list().is_some() && field != Field::Notes;
        if interleaved {
            run.push(field);
            continue;
        }
        for step in interleave(draft, &run, &trail) {
            match step {
                Step::Omit(list, i) if defer_trail && is_trail(list, &draft.list(list)[i].text) => deferred.push(step),
                _ => steps.push(step),
            }
        }
        run.clear();
        if !PROSE.contains(&field) {
            steps.append(&mut deferred);
        }
        let len = draft.list(field).len();
        match field {
            Field::Notes | Field::Goal | Field::Constraints => {}
            // Stored newest first.
            Field::Decisions => steps.extend((0..len).rev().map(|i| Step::Drop(field, i))),
            // The later steps of a plan go first.
            Field::NextSteps => steps.extend((0..len).rev().map(|i| Step::Drop(field, i))),
            _ => steps.extend((0..len).map(|i| Step::Drop(field, i))),
        }
    }
    // 4. The newest request and the constraints, cut to their first lines.
    steps.extend(newest.map(|i| Step::Request(i, HEAD_CHARS)));
    for field in [Field::Constraints, Field::Goal] {
        steps.extend((0..draft.list(field).len()).map(|i| Step::Cut(field, i, HEAD_CHARS)));
    }
    // 5. Task lines, goal statements dropped, brief constraints, references, and at last the
    //    oldest constraints only counted.
    steps.extend(older.iter().chain(&newest).map(|&i| Step::Request(i, BRIEF_CHARS)));
    let goals = draft.list(Field::Goal).len();
    steps.extend((0..goals.saturating_sub(1)).map(|i| Step::Drop(Field::Goal, i)));
    let constraints = draft.list(Field::Constraints).len();
    steps.extend((0..constraints).map(|i| Step::Cut(Field::Constraints, i, BRIEF_CHARS)));
    steps.extend(older.iter().map(|&i| Step::Request(i, 0)));
    steps.extend((0..constraints.saturating_sub(1)).map(|i| Step::Omit(Field::Constraints, i)));
    // 6. Only for budgets far too small for the text (a few hundred tokens of exotic script):
    //    the newest request becomes a reference too, the last constraint a count.
    steps.extend(newest.map(|i| Step::Request(i, 0)));
    steps.extend(constraints.checked_sub(1).map(|i| Step::Omit(Field::Constraints, i)));
    steps
}

/// The prose a summary gives up before its artifact trail.
const PROSE: [Field; 4] = [Field::NextSteps, Field::InProgress, Field::Done, Field::Decisions];

/// Whether an identifier is part of the artifact trail: a file modified, an error line, or a
/// command that runs checks (its outcome matters later).
fn is_trail(field: Field, text: &str) -> bool {
    match field {
        Field::FilesModified | Field::Errors => true,
        Field::Commands => runs_checks(text),
        _ => false,
    }
}

/// The newest span's items of `fields`, and the earlier files modified of `trail`, oldest
/// first across them by relative position.
fn interleave(draft: &Draft, fields: &[Field], trail: &[usize]) -> Vec<Step> {
    let mut ranked: Vec<(usize, usize, Step)> = Vec::new();
    for &field in fields {
        let fresh: Vec<usize> = (0..draft.list(field).len())
            .filter(|&i| draft.list(field)[i].fresh || (field == Field::FilesModified && trail.contains(&i)))
            .collect();
        let len = fresh.len();
        ranked.extend(
            fresh
                .into_iter()
                .enumerate()
                .map(|(rank, i)| (rank + 1, len, Step::Omit(field, i))),
        );
    }
    // rank_a / len_a < rank_b / len_b, without division; stable, so ties keep field order.
    ranked.sort_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)));
    ranked.into_iter().map(|(_, _, step)| step).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Kept,
    Cut(usize),
    Omitted,
    Dropped,
}

/// The summary after `steps`.
fn build(draft: &Draft, steps: &[Step]) -> CompactSummary {
    let mut fates: [Vec<Fate>; 13] = Default::default();
    for field in Field::ALL {
        fates[field as usize] = vec![Fate::Kept; draft.list(field).len()];
    }
    let mut request_chars: Vec<Option<usize>> = vec![None; draft.requests.len()];
    for &step in steps {
        match step {
            Step::Omit(field, i) => fates[field as usize][i] = Fate::Omitted,
            Step::Drop(field, i) => fates[field as usize][i] = Fate::Dropped,
            Step::Cut(field, i, chars) => {
                let fate = &mut fates[field as usize][i];
                if matches!(*fate, Fate::Kept | Fate::Cut(_)) {
                    *fate = Fate::Cut(chars);
                }
            }
            Step::Request(i, chars) => request_chars[i] = Some(chars),
        }
    }
    let mut summary = CompactSummary {
        archive: draft.archive.clone(),
        instruction: draft.instruction.clone(),
        instruction_effect: draft.instruction_effect.clone(),
        lessons: draft.lessons.clone(),
        template: draft.template.clone(),
        critical_context: CriticalContext {
            omitted: draft.omitted.clone(),
            ..CriticalContext::default()
        },
        ..CompactSummary::default()
    };
    let mut newly_omitted: BTreeMap<IdentifierList, Vec<&str>> = BTreeMap::new();
    for field in Field::ALL {
        let list = field.of_mut(&mut summary);
        for (item, fate) in draft.list(field).iter().zip(&fates[field as usize]) {
            match fate {
                Fate::Kept => list.push(item.text.clone()),
                Fate::Cut(chars) => list.push(cut_words(&item.text, *chars)),
                Fate::Omitted => newly_omitted
                    .entry(field.omission_list().expect("only lists with a count are omitted"))
                    .or_default()
                    .push(&item.text),
                Fate::Dropped => {}
            }
        }
    }
    for (list, items) in newly_omitted {
        add_omitted(&mut summary.critical_context.omitted, list, &items);
    }
    summary.requests = draft
        .requests
        .iter()
        .zip(&request_chars)
        .map(|((request, _), chars)| {
            let mut request = request.clone();
            match chars {
                Some(0) => request.text.clear(),
                Some(BRIEF_CHARS) => request.text = task_line(draft, &request.text),
                Some(chars) => request.text = cut_words(&request.text, *chars),
                None => {}
            }
            request
        })
        .collect();
    summary
}

/// A request cut to its task line: the opening it shares with another request (boilerplate
/// such as "We're currently solving the following issue…"), or that the framework's template
/// holds, is left out, so the words that tell this request apart survive.
fn task_line(draft: &Draft, text: &str) -> String {
    let template: HashSet<String> = draft.template.iter().map(|t| sentence_key(t, SENTENCE_CHARS)).collect();
    let sentences = split_sentences(text);
    let opening = sentences
        .iter()
        .take_while(|s| **s == LEFT_OUT || template_key(s, SENTENCE_CHARS).is_some_and(|k| template.contains(&k)))
        .count();
    if opening > 0 && opening < sentences.len() {
        return format!("…{}", cut_words(&sentences[opening..].join(" "), BRIEF_CHARS));
    }
    let shared = draft
        .requests
        .iter()
        .map(|(other, _)| other.text.as_str())
        .filter(|other| *other != text)
        .map(|other| shared_words(text, other))
        .max()
        .unwrap_or(0);
    if shared < MIN_SHARED_OPENING || shared >= text.len() {
        return cut_words(text, BRIEF_CHARS);
    }
    format!("…{}", cut_words(text[shared..].trim_start(), BRIEF_CHARS))
}

/// A shared opening shorter than this is kept: it is part of the request.
const MIN_SHARED_OPENING: usize = 24;

/// Bytes of the longest run of whole words `a` and `b` start with.
fn shared_words(a: &str, b: &str) -> usize {
    let mut end = 0;
    for ((i, ca), cb) in a.char_indices().zip(b.chars()) {
        if ca != cb {
            break;
        }
        if ca == ' ' {
            end = i;
        }
        if i + ca.len_utf8() == a.len() && a.len() <= b.len() {
            end = a.len();
        }
    }
    end
}

/// Counts `items` of `list` into its omitted groups.
pub(crate) fn add_omitted(omitted: &mut Vec<OmittedItems>, list: IdentifierList, items: &[&str]) {
    let at = match omitted.iter().position(|o| o.list == list) {
        Some(at) => at,
        None => {
            omitted.push(OmittedItems {
                list,
                count: 0,
                groups: Vec::new(),
            });
            omitted.len() - 1
        }
    };
    let entry = &mut omitted[at];
    entry.count += items.len();
    let mut groups: BTreeMap<String, usize> = entry.groups.drain(..).map(|g| (g.name, g.count)).collect();
    for (name, count) in groups_of(field_of_list(list), items) {
        *groups.entry(name).or_default() += count;
    }
    let mut groups: Vec<ItemGroup> = groups
        .into_iter()
        .map(|(name, count)| ItemGroup { name, count })
        .collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    groups.truncate(GROUPS_KEPT);
    entry.groups = groups;
    omitted.sort_by_key(|o| o.list);
}

/// Deepest directory prefix used to group paths.
const MAX_GROUP_DEPTH: usize = 6;

/// How omitted items are counted: paths by the deepest directory prefix that still makes at
/// most [`GROUPS_KEPT`] groups (so `crates/` 287, not 287 groups of one), commands by
/// program; other lists are only counted.
fn groups_of(field: Field, items: &[&str]) -> Vec<(String, usize)> {
    let count = |names: Vec<String>| -> Vec<(String, usize)> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for name in names {
            *counts.entry(name).or_default() += 1;
        }
        counts.into_iter().collect()
    };
    match field {
        Field::FilesRead | Field::FilesModified => {
            let dirs: Vec<Vec<&str>> = items
                .iter()
                .map(|p| {
                    let parts: Vec<&str> = p.trim_end_matches('/').split('/').collect();
                    parts[..parts.len().saturating_sub(1)].to_vec()
                })
                .collect();
            let at_depth = |depth: usize| -> Vec<String> {
                dirs.iter()
                    .map(|parts| match parts.len().min(depth) {
                        0 => "./".to_owned(),
                        n => format!("{}/", parts[..n].join("/")),
                    })
                    .collect()
            };
            let mut best = count(at_depth(1));
            for depth in 2..=MAX_GROUP_DEPTH {
                let groups = count(at_depth(depth));
                if groups.len() > GROUPS_KEPT {
                    break;
                }
                best = groups;
            }
            best
        }
        Field::Commands => count(
            items
                .iter()
                .filter_map(|item| {
                    let program = item.split_whitespace().next()?;
                    let program = program.split('(').next().unwrap_or(program);
                    Some(program.rsplit('/').next().unwrap_or(program).to_owned())
                })
                .collect(),
        ),
        _ => Vec::new(),
    }
}
