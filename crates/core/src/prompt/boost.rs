//! How a request's focus raises the priority of the sections that mention it (AceClaw's
//! `applyRequestFocusPriority`).

use std::cell::RefCell;
use std::collections::HashMap;

use aho_corasick::{AhoCorasick, Input, MatchKind};
use globset::GlobBuilder;
use satchel_protocol::{PromptSection, RequestFocus};

use super::focus::{CONTINUE, TASK_FOCUS_KEY};

/// Largest boost a section can get, so focus reorders sections of similar priority without
/// inverting tiers (AceClaw's `MAX_FOCUS_BOOST`).
pub const MAX_FOCUS_BOOST: i64 = 12;

/// A rules glob as matched against active files: `*` stays within a directory, and a glob
/// without a slash matches the file name anywhere (`*.rs` is `**/*.rs`), as in gitignore.
pub(crate) fn parse_glob(glob: &str) -> Result<globset::Glob, globset::Error> {
    let anchored = if glob.contains('/') {
        glob.to_owned()
    } else {
        format!("**/{glob}")
    };
    GlobBuilder::new(&anchored).literal_separator(true).build()
}

/// A path as written in a query, as matched: no leading `./`, forward slashes.
fn normalize(path: &str) -> String {
    let mut p = path.replace('\\', "/");
    while let Some(rest) = p.strip_prefix("./") {
        p = rest.to_owned();
    }
    p
}

/// The needles of one kind, files or symbols: they are searched apart so that a file name and
/// a symbol starting at the same place (`Loop.java`, `Loop`) are both seen.
#[derive(Debug)]
struct Needles {
    searcher: AhoCorasick,
    /// For each distinct pattern, the focus entries it stands for (bit `i` is entry `i`): a
    /// file is sought by path and by name, and two files may share a name.
    entries: Vec<u64>,
    /// Every entry: the search stops once all are found.
    complete: u64,
}

impl Needles {
    /// A search for `(pattern, entry)` pairs; `None` when there is nothing to seek.
    fn new(pairs: impl Iterator<Item = (String, usize)>) -> Option<Self> {
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut patterns: Vec<String> = Vec::new();
        let mut entries: Vec<u64> = Vec::new();
        let mut complete = 0;
        for (pattern, entry) in pairs.filter(|(p, entry)| !p.is_empty() && *entry < 64) {
            let id = *ids.entry(pattern).or_insert_with_key(|pattern| {
                patterns.push(pattern.clone());
                entries.push(0);
                patterns.len() - 1
            });
            entries[id] |= 1 << entry;
            complete |= 1 << entry;
        }
        let searcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        (!patterns.is_empty()).then_some(Needles {
            searcher,
            entries,
            complete,
        })
    }

    /// The entries mentioned in `text`.
    ///
    /// Leftmost-longest search is many times faster than an overlapping one (it can use SIMD
    /// prefilters); restarting one byte after each match still finds a mention that starts
    /// inside another. Of two patterns starting at the same place only the longer is seen
    /// (`Loop.run` hides `Loop` there): the section is boosted all the same, only the evidence
    /// names one symbol fewer. Matches start on a character boundary: every pattern starts
    /// with a leading byte.
    fn find(&self, text: &str) -> u64 {
        let mut found = 0;
        let mut at = 0;
        while found != self.complete
            && let Some(m) = self.searcher.find(Input::new(text).span(at..text.len()))
        {
            at = m.start() + 1;
            if bounded(text, m.start(), m.end()) {
                found |= self.entries[m.pattern().as_usize()];
            }
        }
        found
    }
}

/// Finds a focus's files and symbols in section texts. Built once per request: one
/// Aho-Corasick search per kind and section finds every needle, so boosting 40 sections of
/// 100 KB reads each text twice instead of once per file and symbol. Matching is
/// case-sensitive and whole-word: `main.rs` is not found in `domain.rs`, nor `Loop` in
/// `LoopRunner`.
#[derive(Debug)]
pub struct FocusMatcher<'f> {
    focus: &'f RequestFocus,
    files: Option<Needles>,
    symbols: Option<Needles>,
    /// Active files matched by each rules glob met so far.
    globs: RefCell<HashMap<String, u64>>,
}

/// A mention must stand alone: no letter, digit or `_` right before or after it.
fn bounded(text: &str, start: usize, end: usize) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    !text[..start].chars().next_back().is_some_and(word) && !text[end..].chars().next().is_some_and(word)
}

fn list(entries: &[String], mask: u64) -> String {
    let picked: Vec<&str> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && mask & (1 << i) != 0)
        .map(|(_, e)| e.as_str())
        .collect();
    picked.join(",")
}

impl<'f> FocusMatcher<'f> {
    /// A matcher of `focus`'s files (by path or file name) and symbols.
    pub fn new(focus: &'f RequestFocus) -> Self {
        let files = focus.active_file_paths.iter().enumerate().flat_map(|(i, path)| {
            let path = normalize(path);
            let name = path.rsplit('/').next().unwrap_or("").to_owned();
            [(name, i), (path, i)]
        });
        let symbols = focus.active_symbols.iter().enumerate().map(|(i, s)| (s.clone(), i));
        FocusMatcher {
            focus,
            files: Needles::new(files),
            symbols: Needles::new(symbols),
            globs: RefCell::default(),
        }
    }

    /// Active files mentioned in `text`.
    fn files_in(&self, text: &str) -> u64 {
        self.files.as_ref().map_or(0, |n| n.find(text))
    }

    /// Active symbols mentioned in `text`.
    fn symbols_in(&self, text: &str) -> u64 {
        self.symbols.as_ref().map_or(0, |n| n.find(text))
    }

    /// Active files matched by one of `globs`, tried on the path and on each of its suffixes
    /// at a `/`, so `src/**/*.rs` matches `/home/me/project/src/a.rs`. Invalid globs match nothing.
    ///
    /// Compiling a glob costs some 15 µs (it is a regex), so each distinct glob is compiled
    /// once per matcher, that is once per request, and only when a file is in focus.
    fn glob_matches(&self, globs: &[String]) -> u64 {
        if self.focus.active_file_paths.is_empty() {
            return 0;
        }
        let mut cache = self.globs.borrow_mut();
        let mut mask = 0;
        for glob in globs {
            if let Some(matched) = cache.get(glob) {
                mask |= matched;
                continue;
            }
            let matched = parse_glob(glob).map_or(0, |glob| {
                let matcher = glob.compile_matcher();
                let mut matched = 0;
                for (i, path) in self.focus.active_file_paths.iter().enumerate().take(64) {
                    let path = normalize(path);
                    let mut suffixes =
                        std::iter::once(path.as_str()).chain(path.match_indices('/').map(|(at, _)| &path[at + 1..]));
                    if suffixes.any(|s| !s.is_empty() && matcher.is_match(s)) {
                        matched |= 1 << i;
                    }
                }
                matched
            });
            cache.insert(glob.clone(), matched);
            mask |= matched;
        }
        mask
    }

    /// [`boost`] of one section.
    pub fn boost(&self, section: &PromptSection) -> (i64, Vec<String>) {
        self.boost_parts(
            section.source_type.as_deref(),
            &section.content,
            &section.paths,
            section.priority,
        )
    }

    /// The boost of a section given by its parts (the `system` sections are not `PromptSection`s).
    pub(crate) fn boost_parts(
        &self,
        source_type: Option<&str>,
        content: &str,
        paths: &[String],
        priority: i64,
    ) -> (i64, Vec<String>) {
        let focus = self.focus;
        let continues = focus.plan_signals.iter().any(|s| s == CONTINUE);
        let (mut raw, mut files, mut symbols, mut plan) = (0, 0, 0, false);
        match source_type.unwrap_or("") {
            kind @ ("memory" | "auto-memory" | "learned-signals" | "markdown-memory" | "journal") => {
                // Every memory tier gets the symbol row, as in AceClaw's code.
                symbols = self.symbols_in(content);
                raw += if symbols != 0 { 16 } else { 0 };
                match kind {
                    "auto-memory" | "learned-signals" if !focus.query_summary.is_empty() => raw += 8,
                    "markdown-memory" => {
                        files = self.files_in(content);
                        raw += if files != 0 { 10 } else { 0 };
                    }
                    "journal" if continues => (raw, plan) = (raw + 12, true),
                    _ => {}
                }
            }
            "rules" => {
                files = self.glob_matches(paths);
                raw += if files != 0 { 4 } else { 0 };
            }
            "candidates" => {
                symbols = self.symbols_in(content);
                raw += if symbols != 0 { 6 } else { 0 };
            }
            "git" if continues => (raw, plan) = (6, true),
            "git" | TASK_FOCUS_KEY => {}
            _ => {
                // Not in AceClaw's table: a section of another type is boosted by what it mentions.
                (files, symbols) = (self.files_in(content), self.symbols_in(content));
                raw += if files != 0 { 10 } else { 0 } + if symbols != 0 { 6 } else { 0 };
            }
        }
        let points = raw.min(MAX_FOCUS_BOOST);
        let mut evidence = vec![format!("priority={priority}")];
        if files != 0 {
            evidence.push(format!("files={}", list(&focus.active_file_paths, files)));
        }
        if symbols != 0 {
            evidence.push(format!("symbols={}", list(&focus.active_symbols, symbols)));
        }
        if plan {
            evidence.push(format!("plan={CONTINUE}"));
        }
        if points > 0 {
            evidence.push(format!("boost=+{points}"));
        }
        if raw > MAX_FOCUS_BOOST {
            evidence.push(format!("boost capped from +{raw} to +{MAX_FOCUS_BOOST}"));
        }
        (points, evidence)
    }
}

/// How much `focus` raises `section`'s priority, at most [`MAX_FOCUS_BOOST`], and why.
///
/// | source type | when | points |
/// |---|---|---|
/// | `memory` (and every memory tier below) | an active symbol is in the text | +16 |
/// | `auto-memory`, `learned-signals` | there is a query | +8 |
/// | `markdown-memory` | an active file is in the text | +10 |
/// | `journal` | the user continues | +12 |
/// | `rules` | an active file matches one of its `paths` globs | +4 |
/// | `candidates` | an active symbol is in the text | +6 |
/// | `git` | the user continues | +6 |
/// | `task-focus` | never (it lists the focus itself) | 0 |
/// | any other, or none | an active file / symbol is in the text | +10 / +6 |
///
/// The sum is capped at [`MAX_FOCUS_BOOST`] as in AceClaw's code, so the document's "+16"
/// row gives +12. The last row is ours: sections of types AceClaw does not know still rise
/// when they are about what the user asks. The caller clamps `priority + points` to 0..=100.
pub fn boost(section: &PromptSection, focus: &RequestFocus) -> (i64, Vec<String>) {
    FocusMatcher::new(focus).boost(section)
}
