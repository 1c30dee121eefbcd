//! Template text in the user's messages: what an agent framework puts into every request
//! (SWE-agent's "Remember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME", its demonstration's
//! instructions) reads like the user's directives but is not theirs. A sentence is template
//! when a demonstration holds it, or when it is part of a block of sentences that two
//! requests (or a request and the constraints of earlier compactions) share. A user who
//! repeats one directive in a new message is insisting, not templating: a block takes
//! [`SHARED_SENTENCES`] sentences or more. Template sentences are left out of the
//! constraints (the framework sends them again with every request anyway), and a request's
//! text is factored: a sentence a newer request also holds is shown there only, a `[…]`
//! marking where it was (the newest request is the one every budget keeps longest).

use std::collections::HashSet;

use super::extract::prose::sentences;
use super::extract::text::{collapse_ws, cut_words};

/// Sentences two texts must share for their shared sentences to be a template block.
pub(crate) const SHARED_SENTENCES: usize = 3;

/// The key a sentence is compared by: whitespace collapsed, case folded, cut as a constraint
/// is cut (so a kept constraint compares with the sentence it came from).
pub(crate) fn sentence_key(sentence: &str, max_chars: usize) -> String {
    cut_words(&collapse_ws(sentence), max_chars).to_lowercase()
}

/// A sentence shorter than this is never template: "Thanks." is everyone's.
const MIN_TEMPLATE_CHARS: usize = 20;

/// What stands for a run of sentences left out of a request because a newer one holds them.
pub(crate) const LEFT_OUT: &str = "[…]";

/// The sentences of a whitespace-collapsed text, as written: split after `.`, `!` or `?`
/// followed by a space.
pub(crate) fn split_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?') && bytes.get(i + 1) == Some(&b' ') {
            out.push(&text[start..=i]);
            start = i + 2;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The key of `sentence` when it is long enough to be template.
pub(crate) fn template_key(sentence: &str, max_chars: usize) -> Option<String> {
    (sentence.chars().count() >= MIN_TEMPLATE_CHARS).then(|| sentence_key(sentence, max_chars))
}

/// The keys of the sentences of `text` that may be template: as a stored request splits
/// them (whitespace collapsed), and as constraints are read (line by line, so a heading line
/// such as `INSTRUCTIONS:` is not part of the sentence after it).
pub(crate) fn template_candidates(text: &str, max_chars: usize) -> Vec<String> {
    let collapsed = collapse_ws(text);
    let by_line = sentences(text);
    split_sentences(&collapsed)
        .into_iter()
        .chain(by_line.iter().map(String::as_str))
        .filter_map(|s| template_key(s, max_chars))
        .collect()
}

/// Factors the template out of `texts` (oldest first, whitespace collapsed): a template
/// sentence that a newer text holds is left out of the older one, each run of them replaced
/// by [`LEFT_OUT`].
pub(crate) fn factor(texts: &mut [&mut String], template: &HashSet<String>, max_chars: usize) {
    if template.is_empty() {
        return;
    }
    let mut shown: HashSet<String> = HashSet::new();
    for text in texts.iter_mut().rev() {
        let mut kept: Vec<&str> = Vec::new();
        let mut here = Vec::new();
        let mut changed = false;
        for sentence in split_sentences(text) {
            match template_key(sentence, max_chars).filter(|k| template.contains(k)) {
                Some(key) if shown.contains(&key) => {
                    changed = true;
                    if kept.last() != Some(&LEFT_OUT) {
                        kept.push(LEFT_OUT);
                    }
                }
                Some(key) => {
                    here.push(key);
                    kept.push(sentence);
                }
                None => kept.push(sentence),
            }
        }
        if changed {
            **text = kept.join(" ");
        }
        shown.extend(here);
    }
}

/// The sentences of a span's demonstrations and requests, by key.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    demonstrations: HashSet<String>,
    requests: Vec<HashSet<String>>,
}

impl Templates {
    /// A demonstration's sentences: all template.
    pub fn demonstration(&mut self, keys: impl IntoIterator<Item = String>) {
        self.demonstrations.extend(keys);
    }

    /// A request's sentences.
    pub fn request(&mut self, keys: impl IntoIterator<Item = String>) {
        self.requests.push(keys.into_iter().collect());
    }

    /// The template keys, given the sentences of earlier compactions' requests and
    /// constraints (`earlier`, keys, one set per text).
    pub fn keys(&self, earlier: &[HashSet<String>]) -> HashSet<String> {
        let mut template = self.demonstrations.clone();
        let sets: Vec<&HashSet<String>> = self.requests.iter().chain(earlier).collect();
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                let shared: Vec<&String> = a.intersection(b).collect();
                if shared.len() >= SHARED_SENTENCES {
                    template.extend(shared.into_iter().cloned());
                }
            }
        }
        template
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(sentences: &[&str]) -> Vec<String> {
        sentences.iter().map(|s| sentence_key(s, 300)).collect()
    }

    #[test]
    fn a_shared_block_and_a_demonstration_are_template_a_repeated_directive_is_not() {
        let block = [
            "Always run the tests.",
            "Edit one file at a time.",
            "Wait for feedback.",
        ];
        let mut templates = Templates::default();
        templates.request(keys(&[&block[..], &["Never touch the API."]].concat()));
        templates.request(keys(&[&block[..], &["Keep it short."]].concat()));
        templates.request(keys(&["Never touch the API."]));
        templates.demonstration(keys(&["Use the find_file command."]));
        let found = templates.keys(&[]);
        let expected: HashSet<String> = keys(&[&block[..], &["Use the find_file command."]].concat())
            .into_iter()
            .collect();
        assert_eq!(found, expected, "the user's insistence is theirs");
        // A block shared with what earlier compactions kept is template too.
        let mut later = Templates::default();
        later.request(keys(&block));
        assert_eq!(later.keys(&[keys(&block).into_iter().collect()]).len(), 3);
        assert!(later.keys(&[keys(&block[..2]).into_iter().collect()]).is_empty());
    }

    #[test]
    fn a_template_sentence_is_shown_in_the_newest_text_that_holds_it() {
        let template: HashSet<String> = keys(&[
            "We are solving an issue in your repository.",
            "Always run the tests first, please.",
        ])
        .into_iter()
        .collect();
        let mut old = "We are solving an issue in your repository. ISSUE: the lexer splits UTF-8. Always run the tests first, please. Ok?".to_owned();
        let mut new = "We are solving an issue in your repository. ISSUE: the parser drops a token. Always run the tests first, please.".to_owned();
        let mut other = "Fix the lexer. Thanks.".to_owned();
        factor(&mut [&mut old, &mut other, &mut new], &template, 300);
        assert_eq!(old, "[…] ISSUE: the lexer splits UTF-8. […] Ok?");
        assert!(new.starts_with("We are solving") && new.ends_with("first, please."));
        assert_eq!(other, "Fix the lexer. Thanks.");
    }
}
