//! The system-prompt sections of the `steady_sections` scenario: what an AceClaw-style client
//! resends with every `context.prepare` (memory tiers, rules, git status, journal, Markdown
//! memory, its own sections).
//!
//! [`generate`] builds [`COUNT`] sections of about [`TARGET_CHARS`] characters each, so their
//! total (~160,000 characters) is over the default prompt budget (131,072 characters for a
//! 131,072-token window) and the daemon's truncation really runs. [`PROTECTED`] of them are
//! protected, priorities and source types vary, and the text is deterministic pseudo-prose that
//! names file paths and CamelCase symbols, as real memory and rules do (the request focus boosts
//! sections that mention what the user's message names). The same call always returns the same
//! sections: a client resends identical sections on every call, which is the steady state.

use serde_json::{Value, json};

/// Sections per request.
pub const COUNT: usize = 40;

/// Protected sections among them (never cut by the daemon).
pub const PROTECTED: usize = 4;

/// Characters of a section's content, ±10 %.
pub const TARGET_CHARS: usize = 4_000;

/// Seed of the pseudo-text, fixed so every run and every conversation gets the same sections.
const SEED: u64 = 0x5EC7_1025;

const MODULES: &[&str] = &[
    "parser", "lexer", "config", "server", "cache", "auth", "storage", "render", "cli", "http",
];
const FILES: &[&str] = &[
    "mod", "lib", "error", "types", "state", "codec", "handler", "util", "tests", "builder",
];
const SYMBOLS: &[&str] = &[
    "SessionStore",
    "TokenBudget",
    "RequestFocus",
    "CacheEntry",
    "ConfigLoader",
    "HttpRouter",
    "AuthToken",
    "RenderPass",
    "LexerState",
    "ParseError",
    "StorageBackend",
    "RetryPolicy",
];
const WORDS: &[&str] = &[
    "always",
    "prefer",
    "keep",
    "the",
    "tests",
    "small",
    "and",
    "never",
    "change",
    "public",
    "API",
    "without",
    "a",
    "migration",
    "note",
    "when",
    "refactoring",
    "run",
    "clippy",
    "before",
    "committing",
    "errors",
    "must",
    "carry",
    "context",
    "use",
    "structured",
    "logging",
    "avoid",
    "unwrap",
    "in",
    "library",
    "code",
    "document",
    "every",
    "exported",
    "item",
    "benchmarks",
    "live",
    "under",
    "benches",
    "review",
    "checklist",
    "follows",
    "naming",
    "conventions",
    "module",
    "boundaries",
    "are",
    "strict",
];

/// The kinds of section, in the order they cycle: source type, key prefix, priority range,
/// and whether the section carries `paths` globs (rules do).
const KINDS: &[(&str, &str, std::ops::Range<i64>, bool)] = &[
    ("memory", "memory", 60..80, false),
    ("rules", "rules", 70..88, true),
    ("git", "git", 30..45, false),
    ("journal", "journal", 20..40, false),
    ("markdown-memory", "md", 40..65, false),
    ("custom", "custom", 10..50, false),
];

/// The protected sections, first in the prompt as AceClaw puts its soul and policy tiers:
/// key, source type, priority.
const PROTECTED_SECTIONS: [(&str, &str, i64); PROTECTED] = [
    ("memory:soul", "memory", 100),
    ("policy:managed", "custom", 90),
    ("rules:safety", "rules", 88),
    ("memory:project", "memory", 85),
];

/// The [`COUNT`] sections, as `context.prepare`'s `sections` param expects them.
pub fn generate() -> Vec<Value> {
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut sections = Vec::with_capacity(COUNT);
    for (key, source_type, priority) in PROTECTED_SECTIONS {
        let content = text(&mut rng, key);
        sections.push(json!({
            "key": key,
            "content": content,
            "priority": priority,
            "protected": true,
            "source_type": source_type,
            "reason": "always loaded: identity and policy",
        }));
    }
    for i in PROTECTED..COUNT {
        let (source_type, prefix, priorities, has_paths) = &KINDS[i % KINDS.len()];
        let key = format!("{prefix}:{}-{i}", MODULES[i % MODULES.len()]);
        let content = text(&mut rng, &key);
        let mut section = json!({
            "key": key,
            "content": content,
            "priority": rng.i64(priorities.clone()),
            "source_type": source_type,
            "scope": if i % 3 == 0 { "task-local" } else { "always-on" },
        });
        if i % 2 == 0 {
            section["reason"] = json!(format!("{source_type} tier, loaded for this workspace"));
        }
        if *has_paths {
            let module = MODULES[rng.usize(..MODULES.len())];
            section["paths"] = json!([format!("src/{module}/**/*.rs"), format!("tests/{module}_*.rs")]);
        }
        sections.push(section);
    }
    sections
}

/// About [`TARGET_CHARS`] characters of sentences under a heading, naming paths and symbols.
fn text(rng: &mut fastrand::Rng, key: &str) -> String {
    let target = TARGET_CHARS * 9 / 10 + rng.usize(..=TARGET_CHARS / 5);
    let mut out = format!("## {key}\n\n");
    while out.len() < target {
        let words = rng.usize(8..16);
        for w in 0..words {
            let word = WORDS[rng.usize(..WORDS.len())];
            if w == 0 {
                let mut chars = word.chars();
                if let Some(first) = chars.next() {
                    out.extend(first.to_uppercase());
                    out.push_str(chars.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(word);
            }
            match rng.u8(..24) {
                0 => {
                    let (module, file) = (MODULES[rng.usize(..MODULES.len())], FILES[rng.usize(..FILES.len())]);
                    out.push_str(&format!(" `src/{module}/{file}.rs`"));
                }
                1 => {
                    out.push(' ');
                    out.push_str(SYMBOLS[rng.usize(..SYMBOLS.len())]);
                }
                2 => {
                    let symbol = SYMBOLS[rng.usize(..SYMBOLS.len())];
                    out.push_str(&format!(" `{symbol}::new`"));
                }
                _ => {}
            }
        }
        out.push_str(if rng.u8(..5) == 0 { ".\n- " } else { ". " });
    }
    out.truncate(target);
    // Never end on a half-written word or list marker.
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_deterministic_and_over_the_default_budget() {
        let sections = generate();
        assert_eq!(sections, generate());
        assert_eq!(sections.len(), COUNT);
        let protected = sections.iter().filter(|s| s["protected"] == json!(true)).count();
        assert_eq!(protected, PROTECTED);
        let total: usize = sections.iter().map(|s| s["content"].as_str().unwrap().len()).sum();
        assert!(total > 131_072 && total < 180_000, "{total}");
        let keys: std::collections::HashSet<&str> = sections.iter().map(|s| s["key"].as_str().unwrap()).collect();
        assert_eq!(keys.len(), COUNT, "keys are unique");
        for kind in ["memory", "rules", "git", "journal", "markdown-memory", "custom"] {
            assert!(sections.iter().any(|s| s["source_type"] == json!(kind)), "{kind}");
        }
        assert!(sections.iter().any(|s| s["paths"].is_array()));
    }
}
