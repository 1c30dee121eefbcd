//! Findings: values the agent discovered in a tool's output and then used, quoted in a later
//! message of its own or passed to a later call (a seed, a port, an address or offset, a
//! version, a flag, a failing test's name). They are what a long session turns on after a
//! compaction (the seed that solved a challenge), and no other list keeps them: they are
//! neither files nor commands nor errors.
//!
//! A value counts where it first appears in an output, when nothing before it (the user's
//! words, the agent's, earlier calls and outputs) held it.

use std::collections::{HashMap, HashSet};

/// Values of one output looked at, at most: a log of numbers is not a list of findings.
const CANDIDATES_PER_OUTPUT: usize = 400;

/// A value found in an output and used later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The value, as the output wrote it.
    pub value: String,
    /// Which output (by its position among the texts given) it was found in.
    pub output: usize,
}

/// What the agent and its tools wrote, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text<'a> {
    /// The user's words, the agent's, or a call's arguments: a value here is known (before
    /// an output) or used (after it).
    Said(&'a str),
    /// A tool's output: where values are found.
    Output(&'a str),
}

/// The findings of `texts`, oldest first.
pub fn findings(texts: &[Text<'_>]) -> Vec<Finding> {
    // Where each value is said last: used after an output when that is later than it. One
    // pass, linear in the values: a long span holds thousands.
    let mut last_said: HashMap<&str, usize> = HashMap::new();
    for (i, text) in texts.iter().enumerate() {
        if let Text::Said(said) = text {
            for value in values(said) {
                last_said.insert(value, i);
            }
        }
    }
    let mut known: HashSet<&str> = HashSet::new();
    let mut found = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        match *text {
            Text::Said(said) => known.extend(values(said)),
            Text::Output(output) => {
                let mut here: Vec<&str> = Vec::new();
                for value in values(output).take(CANDIDATES_PER_OUTPUT) {
                    let used_after = last_said.get(value).is_some_and(|&at| at > i);
                    if !known.contains(value) && used_after && !here.contains(&value) {
                        here.push(value);
                    }
                }
                known.extend(values(output).take(CANDIDATES_PER_OUTPUT));
                found.extend(here.into_iter().map(|value| Finding {
                    value: value.to_owned(),
                    output: i,
                }));
            }
        }
    }
    found
}

/// The values of a text: words that look like data rather than prose.
fn values(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "\"'`()[],;:<>=|&\\".contains(c))
        .map(|w| w.trim_end_matches(['.', '!', '?']))
        .filter(|w| is_value(w))
}

/// A word that is a value: a number of 4+ digits, a hex number (`0x40060d`), a dotted version
/// (`2.7.8`), a flag (`flag{…}`), or a test's name (`test_handles_unicode`, `JsonWriterTest`).
fn is_value(word: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(word) {
        return word.len() >= 4;
    }
    if let Some(hex) = word.strip_prefix("0x") {
        return hex.len() >= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    let parts: Vec<&str> = word.split('.').collect();
    if parts.len() >= 3 && parts.iter().all(|p| digits(p)) {
        return true;
    }
    if let Some((name, rest)) = word.split_once('{') {
        return rest.ends_with('}')
            && rest.len() >= 4
            && !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    }
    let identifier = word.len() >= 8 && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    identifier && (word.starts_with("test_") || word.ends_with("Test") || word.ends_with("_test"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_found_in_an_output_and_used_later_is_a_finding() {
        let texts = [
            Text::Said("Solve the challenge. The server is on port 8000."),
            Text::Said("{\"command\": \"python3 recover.py\"}"),
            Text::Output("tried 4096 seeds\nseed found: 0x5eed1234 after 2.31s, flag{not_this_one}\nport 8000"),
            Text::Said("The seed is 0x5eed1234; let me decrypt with it."),
            Text::Said("{\"command\": \"python3 decrypt.py --seed 0x5eed1234\"}"),
            Text::Output("flag{s33d_r3c0v3r3d}\nFAILED test_handles_unicode in 1.2.3"),
            Text::Said("{\"command\": \"submit 'flag{s33d_r3c0v3r3d}'\"}"),
            Text::Said("Now rerun test_handles_unicode."),
        ];
        let all = findings(&texts);
        let found: Vec<(&str, usize)> = all.iter().map(|f| (f.value.as_str(), f.output)).collect();
        // 8000 was the user's; 4096 and the first flag were never used; 1.2.3 never used.
        assert_eq!(
            found,
            [
                ("0x5eed1234", 2),
                ("flag{s33d_r3c0v3r3d}", 5),
                ("test_handles_unicode", 5)
            ]
        );
    }

    #[test]
    fn values_and_prose() {
        for word in [
            "54329",
            "0x40060d",
            "2.7.8",
            "CSAW{h3ll0}",
            "test_parser_eof",
            "JsonWriterTest",
        ] {
            assert!(is_value(word), "{word}");
        }
        for word in ["123", "0x1", "1.5", "{}", "the", "latest", "Test", "v2"] {
            assert!(!is_value(word), "{word}");
        }
    }
}
