//! Template text in the user's messages: what an agent framework puts into every request
//! (SWE-agent's "Remember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME", its demonstration's
//! instructions) reads like the user's directives but is not theirs. A sentence is template
//! when a demonstration holds it, or when it is part of a block of sentences that two
//! requests (or a request and the constraints of earlier compactions) share. A user who
//! repeats one directive in a new message is insisting, not templating: a block takes
//! [`SHARED_SENTENCES`] sentences or more. Template sentences are left out of the
//! constraints: the framework sends them again with every request anyway.

use std::collections::HashSet;

use super::extract::text::{collapse_ws, cut_words};

/// Sentences two texts must share for their shared sentences to be a template block.
pub(crate) const SHARED_SENTENCES: usize = 3;

/// The key a sentence is compared by: whitespace collapsed, case folded, cut as a constraint
/// is cut (so a kept constraint compares with the sentence it came from).
pub(crate) fn sentence_key(sentence: &str, max_chars: usize) -> String {
    cut_words(&collapse_ws(sentence), max_chars).to_lowercase()
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

    /// A request's directives.
    pub fn request(&mut self, keys: impl IntoIterator<Item = String>) {
        self.requests.push(keys.into_iter().collect());
    }

    /// The template keys, given the constraints earlier compactions kept (`earlier`, keys).
    pub fn keys(&self, earlier: HashSet<String>) -> HashSet<String> {
        let mut template = self.demonstrations.clone();
        let sets: Vec<&HashSet<String>> = self.requests.iter().chain([&earlier]).collect();
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
        let found = templates.keys(HashSet::new());
        let expected: HashSet<String> = keys(&[&block[..], &["Use the find_file command."]].concat())
            .into_iter()
            .collect();
        assert_eq!(found, expected, "the user's insistence is theirs");
        // A block shared with what earlier compactions kept is template too.
        let mut later = Templates::default();
        later.request(keys(&block));
        assert_eq!(later.keys(keys(&block).into_iter().collect()).len(), 3);
        assert!(later.keys(keys(&block[..2]).into_iter().collect()).is_empty());
    }
}
