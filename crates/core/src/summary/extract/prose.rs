//! Sentences and what they say: a constraint of the user, a decision of the agent, the step
//! it is taking, the plan it states; and user messages that are demonstrations, not tasks.

/// Cue words that make a user's sentence a constraint on its own.
const STRONG_CONSTRAINT_CUES: &[&str] = &[
    "must",
    "mustn't",
    "don't",
    "do not",
    "never",
    "always",
    "avoid",
    "prefer",
    "make sure",
    "ensure",
    "should not",
    "shouldn't",
    "remember",
    "constraint",
    "requirement",
];
/// Cue words that make a sentence a constraint when it speaks to the agent ("you should…",
/// "Keep the diff small"), not when it describes the bug ("it only fails when…").
const WEAK_CONSTRAINT_CUES: &[&str] = &[
    "should",
    "only",
    "keep",
    "without",
    "need to",
    "no more than",
    "at most",
];
/// Words of a sentence that speaks to the agent.
const ADDRESSING: &[&str] = &["you", "please", "we"];
const DECISION_CUES: &[&str] = &[
    "decided",
    "decide",
    "instead",
    "because",
    "rather than",
    "the fix",
    "the issue is",
    "the problem is",
    "the bug is",
    "root cause",
    "the cause",
    "the solution",
    "better to",
    "chose",
    "choose",
    "we'll use",
    "i'll use",
    "we should use",
];
const INTENT_CUES: &[&str] = &[
    "i'll",
    "i will",
    "let's",
    "let me",
    "i'm going to",
    "i am going to",
    "we need to",
    "we will",
];
/// Cues of a step that comes after the current one.
const PLAN_CUES: &[&str] = &[
    "then",
    "after that",
    "afterwards",
    "finally",
    "once",
    "the next step",
    "i will",
    "i'll",
    "we will",
    "we'll",
    "let's",
];
/// Cues that mark intent only as a sentence's first word ("Next, …", "Now …"): inside a
/// sentence they describe ("advances by the next character", "now passes").
const OPENING_INTENT_CUES: &[&str] = &["next", "now"];
/// The same for a later step of the plan ("Next, …").
const OPENING_PLAN_CUES: &[&str] = &["next"];

/// Default openings of a user message that demonstrates how to work instead of asking for
/// work; the daemon's `demonstration_prefixes` replaces them.
pub use satchel_protocol::config::DEFAULT_DEMONSTRATION_PREFIXES as DEMONSTRATION_PREFIXES;

/// Whether a user message is a demonstration: it opens with one of `prefixes` (compared
/// case-insensitively, after leading whitespace).
pub fn is_demonstration<S: AsRef<str>>(text: &str, prefixes: &[S]) -> bool {
    let head: String = text.trim_start().chars().take(200).collect::<String>().to_lowercase();
    prefixes
        .iter()
        .map(|p| p.as_ref().trim().to_lowercase())
        .any(|p| !p.is_empty() && head.starts_with(&p))
}

/// Sentences of prose, whitespace collapsed; code blocks are skipped.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in unfenced_lines(text) {
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, c) in line.char_indices() {
            if matches!(c, '.' | '!' | '?') && bytes.get(i + 1) == Some(&b' ') {
                push_sentence(&line[start..=i], &mut out);
                start = i + 2;
            }
        }
        push_sentence(&line[start.min(line.len())..], &mut out);
    }
    out
}

fn push_sentence(text: &str, out: &mut Vec<String>) {
    let text = super::text::collapse_ws(text);
    if !text.is_empty() {
        out.push(text);
    }
}

/// Sentences worth quoting read like prose: they start with a letter, have a few words, are
/// mostly letters, and do not stop mid-expression. This keeps numbered code listings and
/// argument lists that happen to contain "must" or "only" out of the constraints.
pub fn is_prose(sentence: &str) -> bool {
    let letters = sentence.chars().filter(|c| c.is_alphabetic() || *c == ' ').count();
    sentence.starts_with(char::is_alphabetic)
        && sentence.split(' ').count() >= 3
        && letters * 5 >= sentence.chars().count() * 4
        && !sentence.ends_with([',', '(', '{', '[', ';', '=', '+'])
}

/// Whether a user's sentence states a constraint or preference.
pub fn is_constraint(sentence: &str) -> bool {
    if !is_prose(sentence) {
        return false;
    }
    if has_cue(sentence, STRONG_CONSTRAINT_CUES) {
        return true;
    }
    let first = sentence.split_whitespace().next().unwrap_or("").to_lowercase();
    has_cue(sentence, WEAK_CONSTRAINT_CUES)
        && (has_cue(sentence, ADDRESSING) || WEAK_CONSTRAINT_CUES.contains(&first.as_str()))
}

/// Whether an agent's sentence states a decision or its reason.
pub fn is_decision(sentence: &str) -> bool {
    is_prose(sentence) && has_cue(sentence, DECISION_CUES)
}

/// Whether an agent's sentence says what it is doing now ("Let's run the tests").
pub fn is_intent(sentence: &str) -> bool {
    is_prose(sentence) && (has_cue(sentence, INTENT_CUES) || opens_with(sentence, OPENING_INTENT_CUES))
}

/// Whether the sentence's first word is one of `cues`.
fn opens_with(sentence: &str, cues: &[&str]) -> bool {
    let first = sentence
        .split(|c: char| c.is_whitespace() || c == ',' || c == ':')
        .find(|w| !w.is_empty())
        .unwrap_or("");
    cues.iter().any(|cue| first.eq_ignore_ascii_case(cue))
}

/// The steps an agent's message plans: its list items when it has two or more, else its
/// sentences with a plan cue ("Next I will…", "Then…", "Let's…").
pub fn plan_steps(text: &str) -> Vec<String> {
    let lines: Vec<&str> = unfenced_lines(text).filter(|l| !is_label(l)).collect();
    let listed: Vec<String> = lines
        .iter()
        .filter_map(|l| strip_list_marker(l))
        .map(super::text::collapse_ws)
        .filter(|l| !l.is_empty())
        .collect();
    if listed.len() >= 2 {
        return listed;
    }
    sentences(text)
        .into_iter()
        .filter(|s| is_prose(s) && (has_cue(s, PLAN_CUES) || opens_with(s, OPENING_PLAN_CUES)) && !s.ends_with(':'))
        .collect()
}

/// True when `text` contains one of `cues` as whole words (a cue word may take an `s`, `d`,
/// `ed` or `ing` ending, so "prefers" and "avoiding" count). Case-insensitive.
pub fn has_cue(text: &str, cues: &[&str]) -> bool {
    let lower = text.to_lowercase().replace('\u{2019}', "'");
    cues.iter().any(|cue| {
        lower.match_indices(cue).any(|(at, _)| {
            // `_` joins words in code (`next_token`): a cue inside such a name is not a cue.
            let word = |c: char| c.is_alphanumeric() || c == '_';
            let before_ok = lower[..at].chars().next_back().is_none_or(|c| !word(c));
            let rest = &lower[at + cue.len()..];
            let word_end = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            before_ok && matches!(&rest[..word_end], "" | "s" | "d" | "ed" | "ing")
        })
    })
}

/// Section labels such as SWE-agent's `DISCUSSION` carry no content.
fn is_label(line: &str) -> bool {
    !line.contains(' ') && !line.chars().any(char::is_lowercase)
}

fn strip_list_marker(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) {
        return Some(rest);
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let rest = &line[digits..];
    (digits > 0)
        .then(|| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")))
        .flatten()
}

/// Trimmed, non-empty lines outside fenced code blocks.
pub fn unfenced_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter_map(move |line| {
        let line = line.trim();
        if line.starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced && !line.is_empty()).then_some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_speak_to_the_agent() {
        for yes in [
            "You must not change the public API.",
            "Keep the changes minimal and never touch vendor/.",
            "Also, always run clippy before you finish.",
            "You should always wait for feedback after every command.",
            "Please only change the parser.",
        ] {
            assert!(is_constraint(yes), "{yes}");
        }
        for no in [
            "It only fails when the input is empty.",
            "The value should be 345 but is 344.",
            "cargo test --only-this",
        ] {
            assert!(!is_constraint(no), "{no}");
        }
    }

    #[test]
    fn decisions_are_reasons_not_every_intent() {
        assert!(is_decision("The issue is a missing dependency."));
        assert!(is_decision("I'll add it to Cargo.toml instead of vendoring."));
        assert!(!is_decision("Let's navigate into the src directory."));
        assert!(is_intent("Let's navigate into the src directory."));
        assert!(!is_intent("The next_token function assumes one byte per character."));
    }

    #[test]
    fn plans_are_lists_or_plan_sentences() {
        assert_eq!(
            plan_steps("Next I'll check the manifest:\n1. Open Cargo.toml\n2. Rerun the build"),
            ["Open Cargo.toml", "Rerun the build"]
        );
        assert_eq!(
            plan_steps("The edit is in. Now let's run the tests. Then we can submit."),
            ["Now let's run the tests.", "Then we can submit."]
        );
        assert!(plan_steps("Exit due to cost limit").is_empty());
        // "next" and "now" plan only as a sentence's first word: a report of what was done
        // is not a step still to take.
        let report = "Fixed: `next_token` now advances by the length of the next character.";
        assert!(plan_steps(report).is_empty() && !is_intent(report));
        assert_eq!(plan_steps("Next, rerun the suite."), ["Next, rerun the suite."]);
        assert!(is_intent("Now run the failing test alone."));
        assert!(
            plan_steps("Now run the failing test alone.").is_empty(),
            "the step under way"
        );
    }

    #[test]
    fn demonstrations_are_recognised_by_their_opening() {
        assert!(is_demonstration(
            "Here is a demonstration of how to correctly accomplish this task.",
            DEMONSTRATION_PREFIXES
        ));
        assert!(!is_demonstration("Fix the demonstration page", DEMONSTRATION_PREFIXES));
        assert!(is_demonstration("EXAMPLE RUN: ...", &["example run"]));
    }
}
