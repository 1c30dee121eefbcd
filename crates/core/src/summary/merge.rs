//! Merging: the summary in force, summaries pasted into the span, and what the span says,
//! into one [`Draft`] whose items know whether the newest span produced them.
//!
//! Nothing is re-summarised: earlier items are kept as they are and new ones appended, so
//! repeated compactions do not drift. Constraints and requests accumulate (de-duplicated);
//! prose lists keep their newest items; the blocked list keeps failures until a later
//! success in the same area clears them. A failure that a retry fixed after a change becomes
//! a try-error lesson (what failed and what fixed it), kept for the memory note and observed
//! as a learning candidate.

use std::collections::{HashMap, HashSet};

use satchel_protocol::{ArchiveRange, CompactSummary, OmittedItems, UserRequest};

use super::extract::calls::{area, same_command};
use super::extract::paths::is_junk;
use super::extract::text::{cut_words, normalized};
use super::fields::Field;
use super::render::{code_span, leading_code_span};
use super::span::{Outcome, SENTENCE_CHARS, SHORT_COMMAND_CHARS, SpanFacts};
use super::template::{factor, sentence_key, split_sentences, template_candidates, template_key};

/// Cap for items carried over from a previous summary, which another backend may have written.
const ITEM_CHARS: usize = 600;
/// Newest unresolved failures reported as blocked.
const BLOCKED_LAST: usize = 3;
/// Newest decisions kept: older ones are in the archive, and a long list of reasons would
/// crowd out the identifiers.
const MAX_DECISIONS: usize = 10;
/// Newest done items kept.
const MAX_DONE: usize = 20;
/// Newest findings kept: what a long session turns on is a handful of values.
const MAX_FINDINGS: usize = 24;
/// Template sentences remembered: a framework's block is a dozen or two.
const MAX_TEMPLATE: usize = 128;
/// Newest lessons kept: enough for the memory note to tell new lessons from known ones.
const MAX_LESSONS: usize = 10;
/// Longest lesson.
const LESSON_CHARS: usize = 300;
/// Longest error line quoted in a lesson.
const LESSON_ERROR_CHARS: usize = 120;
/// Longest command named in a lesson.
const LESSON_COMMAND_CHARS: usize = 60;
/// Steps of a fix named in a lesson: the last ones, nearest to the success.
const FIX_STEPS: usize = 3;
/// Files of one editing step named in a lesson.
const FIX_FILES: usize = 3;

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
    pub lists: [Vec<Item>; 13],
    /// The user's requests and demonstrations, oldest first, and whether they are new.
    pub requests: Vec<(UserRequest, bool)>,
    /// Items that earlier compactions left out of the identifier lists.
    pub omitted: Vec<OmittedItems>,
    pub archive: Vec<ArchiveRange>,
    pub instruction: Option<String>,
    pub instruction_effect: Option<String>,
    /// Try-error lessons of every span so far, oldest first (not rendered; see
    /// [`CompactSummary::lessons`]).
    pub lessons: Vec<String>,
    /// The framework's template sentences known so far (see [`CompactSummary::template`]).
    pub template: Vec<String>,
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
        // A path another one lies under is a directory (`src/test` of `src/test/A.java`),
        // not a file read. The earlier summary's list counts too, and its omitted groups.
        let paths: Vec<&str> = read
            .iter()
            .chain(&modified)
            .map(|i| i.text.as_str())
            .chain(ctx.files_read.iter().map(String::as_str))
            .collect();
        let is_directory = |dir: &str| {
            let prefix = format!("{}/", dir.trim_end_matches('/'));
            paths.iter().any(|p| p.starts_with(&prefix))
        };
        let directories: HashSet<String> = read
            .iter()
            .filter(|i| is_directory(&i.text))
            .map(|i| i.text.clone())
            .collect();
        read.retain(|item| !directories.contains(&item.text));

        let mut decisions: Vec<String> = span.decisions.items;
        decisions.reverse();
        decisions.extend(base.key_decisions.iter().cloned());
        let mut decisions = merge_items(&[], decisions);
        decisions.truncate(MAX_DECISIONS);

        // A failure the span fixed (often reproduced on purpose before the fix) is progress:
        // it is done, with its fix, and no longer blocked.
        let fixed: Vec<String> = lessons(&base.blocked, &span.outcomes)
            .into_iter()
            .map(|lesson| format!("Reproduced, then fixed: {lesson}"))
            .collect();
        let mut done = merge_items(&base.done, span.done.items.into_iter().chain(fixed).collect());
        if done.len() > MAX_DONE {
            done.drain(..done.len() - MAX_DONE);
        }
        let in_progress = match span.in_progress {
            Some(text) => fresh(vec![text]),
            None if span.step_ended => Vec::new(),
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
        // The framework's template is not the user's: left out, here and from before, and
        // remembered so that a later request repeating it is recognised.
        let key = |c: &String| sentence_key(c, SENTENCE_CHARS);
        let mut earlier: Vec<HashSet<String>> = base
            .requests
            .iter()
            .map(|r| template_candidates(&r.text, SENTENCE_CHARS).into_iter().collect())
            .collect();
        earlier.push(base.constraints.iter().map(key).collect());
        let mut template = span.templates.keys(&earlier);
        template.extend(base.template.iter().map(key));
        let (base_template, base_constraints): (Vec<String>, Vec<String>) = base
            .constraints
            .iter()
            .cloned()
            .partition(|c| template.contains(&key(c)));
        let (span_template, span_constraints): (Vec<String>, Vec<String>) = span
            .constraints
            .items
            .iter()
            .cloned()
            .partition(|c| template.contains(&key(c)));
        *draft.list_mut(Field::Constraints) = merge_items(&base_constraints, span_constraints);
        // The requests' template, shown once: in the newest request that holds it.
        let from_requests: Vec<String> = draft
            .requests
            .iter()
            .flat_map(|(r, _)| split_sentences(&r.text))
            .filter(|s| template_key(s, SENTENCE_CHARS).is_some_and(|k| template.contains(&k)))
            .map(|s| cut_words(s, SENTENCE_CHARS))
            .collect();
        let mut texts: Vec<&mut String> = draft.requests.iter_mut().map(|(r, _)| &mut r.text).collect();
        factor(&mut texts, &template, SENTENCE_CHARS);
        let known = base
            .template
            .iter()
            .cloned()
            .chain(base_template)
            .chain(span_template)
            .chain(from_requests);
        draft.template = merge_items(&[], known.collect()).into_iter().map(|i| i.text).collect();
        if draft.template.len() > MAX_TEMPLATE {
            draft.template.drain(..draft.template.len() - MAX_TEMPLATE);
        }
        *draft.list_mut(Field::Done) = done;
        *draft.list_mut(Field::InProgress) = in_progress;
        *draft.list_mut(Field::Blocked) = blocked(&base.blocked, &span.outcomes);
        let mut lessons = merge_items(&base.lessons, lessons(&base.blocked, &span.outcomes));
        if lessons.len() > MAX_LESSONS {
            lessons.drain(..lessons.len() - MAX_LESSONS);
        }
        draft.lessons = lessons.into_iter().map(|item| item.text).collect();
        *draft.list_mut(Field::Decisions) = decisions;
        *draft.list_mut(Field::NextSteps) = next_steps;
        *draft.list_mut(Field::FilesModified) = modified;
        *draft.list_mut(Field::FilesRead) = read;
        *draft.list_mut(Field::Commands) = merge_items(&ctx.commands, span.commands.items);
        *draft.list_mut(Field::Errors) = merge_items(&ctx.errors, span.errors.items);
        *draft.list_mut(Field::Notes) = merge_items(&ctx.notes, notes);
        let mut findings = merge_items(&ctx.findings, span.findings);
        if findings.len() > MAX_FINDINGS {
            findings.drain(..findings.len() - MAX_FINDINGS);
        }
        *draft.list_mut(Field::Findings) = findings;
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
    let mut seen: HashSet<String> = a.lessons.iter().map(|t| normalized(t)).collect();
    a.lessons
        .extend(b.lessons.into_iter().filter(|t| seen.insert(normalized(t))));
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

/// The span's try-error lessons: a failure, a change, then a retry of the failed call that
/// succeeded, and the change in between (the fix). A retry is the same command (see
/// [`same_command`]) or an edit of a file the failed call edited; another command of the same
/// area proves nothing (`npm test -- part2` passing says nothing about `npm test -- part1`).
/// A run of failed retries that a success ends makes one lesson, of its last failure (the one
/// the fix fixed). Failures of earlier spans still blocked when this span began
/// (`previous_blocked`) and fixed by it are lessons too. A looking command's failure (a wrong
/// path) and a retry that passed with nothing changed in between (a flaky test, a flag
/// flipped) teach nothing and are left out.
fn lessons(previous_blocked: &[String], outcomes: &[Outcome]) -> Vec<String> {
    let mut lessons = Vec::new();
    for text in previous_blocked {
        let Some((key, _)) = leading_code_span(text) else {
            continue;
        };
        let Some(at) = outcomes.iter().position(|o| reruns(&key, o)) else {
            continue;
        };
        // Failing again first: the span's own lesson tells the fix.
        if outcomes[at].error.is_some() {
            continue;
        }
        if let Some(fix) = fix(&outcomes[..at], &outcomes[at]) {
            let failure = cut_words(text, LESSON_COMMAND_CHARS + LESSON_ERROR_CHARS);
            lessons.push(format!("{failure} → fixed: {fix}"));
        }
    }
    for (i, failure) in outcomes.iter().enumerate() {
        let (Some(error), Some(key)) = (&failure.error, &failure.key) else {
            continue;
        };
        if failure.read_only || failure.areas.is_empty() {
            continue;
        }
        let Some(next) = outcomes[i + 1..].iter().position(|o| retries(failure, o)) else {
            continue;
        };
        let retry = &outcomes[i + 1 + next];
        if retry.error.is_some() {
            continue;
        }
        if let Some(fix) = fix(&outcomes[i + 1..i + 1 + next], retry) {
            lessons.push(format!(
                "{} failed: {} → fixed: {fix}",
                code_span(&cut_words(key, LESSON_COMMAND_CHARS)),
                cut_words(error, LESSON_ERROR_CHARS)
            ));
        }
    }
    lessons.into_iter().map(|text| cut_words(&text, LESSON_CHARS)).collect()
}

/// Whether `later` retries the failed call `failure`: the same command, or an edit of a file
/// it edited.
fn retries(failure: &Outcome, later: &Outcome) -> bool {
    failure.key.as_deref().is_some_and(|failed| reruns(failed, later))
        || failure.modified.iter().any(|path| later.modified.contains(path))
}

/// Whether `later` runs the command `failed` again. A blocked item of an earlier summary
/// keeps its command cut to [`SHORT_COMMAND_CHARS`], so `later`'s is compared cut too.
fn reruns(failed: &str, later: &Outcome) -> bool {
    later.key.as_deref().is_some_and(|again| {
        same_command(failed, again) || same_command(failed, &cut_words(again, SHORT_COMMAND_CHARS))
    })
}

/// What fixed a failure: the steps `between` it and its successful `retry` that changed
/// something and succeeded (files edited, commands run; the last few), then the retry. `None`
/// when nothing changed in between: a retry that merely passed is no lesson.
fn fix(between: &[Outcome], retry: &Outcome) -> Option<String> {
    let mut steps: Vec<String> = Vec::new();
    let mut edited: Vec<&str> = Vec::new();
    for outcome in between.iter().filter(|o| o.error.is_none() && !o.read_only) {
        if !outcome.modified.is_empty() {
            for path in &outcome.modified {
                if !edited.contains(&path.as_str()) {
                    edited.push(path);
                }
            }
            continue;
        }
        let Some(key) = &outcome.key else { continue };
        flush_edits(&mut edited, &mut steps);
        let step = code_span(&cut_words(key, LESSON_COMMAND_CHARS));
        if !steps.contains(&step) {
            steps.push(step);
        }
    }
    flush_edits(&mut edited, &mut steps);
    if steps.is_empty() {
        return None;
    }
    let retry_key = retry.key.as_deref()?;
    let passed = format!("{} succeeded", code_span(&cut_words(retry_key, LESSON_COMMAND_CHARS)));
    let skip = steps.len().saturating_sub(FIX_STEPS);
    let shown = if skip > 0 {
        format!("…, {}", steps[skip..].join(", "))
    } else {
        steps.join(", ")
    };
    Some(format!("{shown}, then {passed}"))
}

/// The files edited since the last step, as one step.
fn flush_edits(edited: &mut Vec<&str>, steps: &mut Vec<String>) {
    if edited.is_empty() {
        return;
    }
    let mut files: Vec<String> = edited.iter().take(FIX_FILES).map(|p| code_span(p)).collect();
    if edited.len() > FIX_FILES {
        files.push(format!("{} more", edited.len() - FIX_FILES));
    }
    steps.push(format!("edited {}", files.join(", ")));
    edited.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(key: &str, error: Option<&str>) -> Outcome {
        Outcome {
            key: Some(key.to_owned()),
            areas: vec![area(key)],
            error: error.map(str::to_owned),
            modified: Vec::new(),
            read_only: false,
        }
    }

    fn looked(key: &str, error: Option<&str>) -> Outcome {
        Outcome {
            read_only: true,
            ..ran(key, error)
        }
    }

    fn edited(path: &str) -> Outcome {
        let key = format!("str_replace_based_edit_tool(command=str_replace, path={path}, …)");
        Outcome {
            areas: vec![area(&key), path.to_owned()],
            modified: vec![path.to_owned()],
            ..ran(&key, None)
        }
    }

    const E0432: &str = "error[E0432]: unresolved import `tracing`";

    fn check(previous_blocked: &[&str], outcomes: Vec<Outcome>, expected: &[&str]) {
        let previous: Vec<String> = previous_blocked.iter().map(|b| (*b).to_owned()).collect();
        let lessons = lessons(&previous, &outcomes);
        assert_eq!(lessons, expected);
        assert!(lessons.iter().all(|l| l.chars().count() <= LESSON_CHARS));
    }

    #[test]
    fn a_failure_then_a_success_in_its_area_is_a_lesson_with_its_fix() {
        check(
            &[],
            vec![
                ran("cargo build", Some(E0432)),
                looked("cat Cargo.toml", None),
                edited("Cargo.toml"),
                ran("cargo build", None),
            ],
            &[
                "`cargo build` failed: error[E0432]: unresolved import `tracing` → fixed: edited `Cargo.toml`, \
               then `cargo build` succeeded",
            ],
        );
        check(
            &[],
            vec![
                ran("cargo build", Some(E0432)),
                ran("cargo add tracing", None),
                ran("cargo build", None),
            ],
            &[
                "`cargo build` failed: error[E0432]: unresolved import `tracing` → fixed: `cargo add tracing`, \
               then `cargo build` succeeded",
            ],
        );
        // The retry may change its options; the change in between is the fix.
        check(
            &[],
            vec![
                ran("mvn -q test", Some("BUILD FAILURE")),
                edited("pom.xml"),
                ran("mvn -q -o test", None),
            ],
            &["`mvn -q test` failed: BUILD FAILURE → fixed: edited `pom.xml`, then `mvn -q -o test` succeeded"],
        );
        // A failed edit, another change, and the same file edited again.
        check(
            &[],
            vec![
                Outcome {
                    error: Some("No replacement was performed".into()),
                    ..edited("src/lib.rs")
                },
                ran("cargo fmt", None),
                edited("src/lib.rs"),
            ],
            &[
                "`str_replace_based_edit_tool(command=str_replace,…` failed: No replacement was performed → fixed: \
               `cargo fmt`, then `str_replace_based_edit_tool(command=str_replace,…` succeeded",
            ],
        );
    }

    #[test]
    fn only_a_retry_of_the_failed_command_can_fix_it() {
        const FAILED: &str = "Tests: 1 failed, 4 passed";
        // Another selection of the same test runner passing fixes nothing (issue 27's false
        // lesson "part1 failed → fixed: part2 succeeded").
        check(
            &[],
            vec![ran("npm test -- part1", Some(FAILED)), ran("npm test -- part2", None)],
            &[],
        );
        check(
            &[],
            vec![
                ran("npm test -- part1", Some(FAILED)),
                edited("src/part1.js"),
                ran("npm test -- part2", None),
            ],
            &[],
        );
        check(
            &[],
            vec![
                ran("cd /repo && npm test -- --grep part1", Some(FAILED)),
                edited("src/part1.js"),
                ran("cd /repo && npm test -- --grep part2", None),
            ],
            &[],
        );
        // Another program on the same target, or another target of the same program.
        check(
            &[],
            vec![
                ran("python reproduce.py", Some("AssertionError")),
                edited("src/app.py"),
                ran("python setup.py", None),
            ],
            &[],
        );
        // The selection that failed, passing after a change, is the lesson; the other
        // selection's run in between is part of what happened.
        check(
            &[],
            vec![
                ran("npm test -- part1", Some(FAILED)),
                ran("npm test -- part2", None),
                edited("src/part1.js"),
                ran("./node_modules/.bin/npm test -- part1", None),
            ],
            &[
                "`npm test -- part1` failed: Tests: 1 failed, 4 passed → fixed: `npm test -- part2`, edited \
               `src/part1.js`, then `./node_modules/.bin/npm test -- part1` succeeded",
            ],
        );
        // An earlier span's blocker is fixed only by its own command too.
        check(
            &["`npm test -- part1` failed: Tests: 1 failed, 4 passed"],
            vec![edited("src/part1.js"), ran("npm test -- part2", None)],
            &[],
        );
    }

    #[test]
    fn failures_without_a_visible_fix_teach_nothing() {
        // No later success: a blocker, not a lesson.
        let outcomes = vec![ran("cargo build", Some(E0432)), edited("Cargo.toml")];
        check(&[], outcomes.clone(), &[]);
        assert_eq!(
            blocked(&[], &outcomes).into_iter().map(|i| i.text).collect::<Vec<_>>(),
            ["`cargo build` failed: error[E0432]: unresolved import `tracing`"]
        );
        // A rerun that passed with nothing changed (a flaky test).
        check(
            &[],
            vec![
                ran("cargo test", Some("test result: FAILED. 1 passed; 1 failed")),
                looked("git status", None),
                ran("cargo test", None),
            ],
            &[],
        );
        // A looking command's failure is a wrong path.
        check(
            &[],
            vec![
                looked("grep -rn Foo srcx", Some("grep: srcx: No such file or directory")),
                looked("grep -rn Foo src", None),
            ],
            &[],
        );
    }

    #[test]
    fn a_run_of_failures_teaches_its_last_fix() {
        check(
            &[],
            vec![
                ran("cargo build", Some(E0432)),
                edited("Cargo.toml"),
                ran("cargo build", Some("error[E0308]: mismatched types")),
                edited("src/main.rs"),
                edited("src/lib.rs"),
                ran("cargo fmt", Some("error: unexpected token")),
                ran("cargo build", None),
            ],
            &[
                "`cargo build` failed: error[E0308]: mismatched types → fixed: edited `src/main.rs`, `src/lib.rs`, \
               then `cargo build` succeeded",
            ],
        );
    }

    #[test]
    fn long_fixes_keep_their_last_steps_and_the_cap() {
        let outcomes: Vec<Outcome> = std::iter::once(ran("make all", Some(&"error: x ".repeat(40))))
            .chain((0..5).map(|i| ran(&format!("apt-get install -y libfoo{i}-dev"), None)))
            .chain(std::iter::once(ran("make all", None)))
            .collect();
        let lessons = lessons(&[], &outcomes);
        assert_eq!(lessons.len(), 1);
        assert!(lessons[0].chars().count() <= LESSON_CHARS, "{}", lessons[0]);
        assert!(lessons[0].contains("libfoo4-dev"), "{}", lessons[0]);
        assert!(!lessons[0].contains("libfoo1-dev"), "{}", lessons[0]);
    }

    #[test]
    fn a_blocker_of_an_earlier_span_fixed_now_is_a_lesson() {
        let blocker = "`cargo build` failed: error[E0432]: unresolved import `tracing`";
        check(
            &[blocker],
            vec![edited("Cargo.toml"), ran("cargo build --offline", None)],
            &[
                "`cargo build` failed: error[E0432]: unresolved import `tracing` → fixed: edited `Cargo.toml`, \
               then `cargo build --offline` succeeded",
            ],
        );
        // Cleared with no fix in sight: the memory note says it was resolved later.
        check(&[blocker], vec![ran("cargo build", None)], &[]);
        // Failing again first: the span's own lesson tells the fix.
        check(
            &[blocker],
            vec![
                ran("cargo build", Some("error[E0308]: mismatched types")),
                edited("src/main.rs"),
                ran("cargo build", None),
            ],
            &[
                "`cargo build` failed: error[E0308]: mismatched types → fixed: edited `src/main.rs`, then \
               `cargo build` succeeded",
            ],
        );
    }

    #[test]
    fn lessons_accumulate_once_each_and_only_the_newest_are_kept() {
        let span = |outcomes: Vec<Outcome>| {
            let mut facts = SpanFacts::default();
            facts.outcomes = outcomes;
            facts
        };
        let fixed = |program: &str| {
            vec![
                ran(&format!("{program} build"), Some("error: boom")),
                edited("Cargo.toml"),
                ran(&format!("{program} build"), None),
            ]
        };
        let mut summary = CompactSummary::default();
        for i in 0..12 {
            let draft = Draft::merge(Some(&summary), span(fixed(&format!("tool{i}"))));
            summary.lessons = draft.lessons;
        }
        assert_eq!(summary.lessons.len(), MAX_LESSONS);
        assert!(
            summary.lessons[0].starts_with("`tool2 build` failed"),
            "{:?}",
            summary.lessons
        );
        assert!(summary.lessons[9].starts_with("`tool11 build` failed"));
        // The same lesson learned again is not repeated.
        let again = Draft::merge(Some(&summary), span(fixed("tool11")));
        assert_eq!(again.lessons, summary.lessons);
    }
}
