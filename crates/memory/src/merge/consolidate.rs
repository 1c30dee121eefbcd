//! Consolidation by a model: the prompt that asks it to rewrite the new entries of a merge
//! as concise, deduplicated bullets (each citing the entries it covers), the strict parse of
//! its reply, and the `MEMORY.md` it gives. Pure; the daemon makes the call and falls back to
//! the extractive merge when anything here refuses the reply.

use super::*;

/// The system message of a consolidation request: the reply format that
/// [`parse_consolidation`] reads.
pub const CONSOLIDATION_SYSTEM: &str = "You maintain MEMORY.md, the long-term memory file of an AI coding agent: lasting facts under the headings `Preferences and constraints`, `Key decisions`, `Lessons from failures` and `Notes`.

You get the entries MEMORY.md already holds, numbered [M1], [M2]..., and the new entries found in the agent's recent daily logs, numbered [N1], [N2]..., each under its heading and with the log it comes from. Rewrite the new entries as concise, deduplicated bullet points.

Rules:
1. Reply with Markdown only: `## <heading>` lines, each followed by its `- ` bullets, one line per bullet. Use only the four headings above, and only headings that get bullets. No other text, no code fence.
2. End every bullet with the ids of the entries it stands for, in square brackets: `- Use pytest, never unittest [N1, N4]`. Do not write the `(from memory/...)` part: it is added from the ids.
3. Never drop a new entry: every new id appears in at least one bullet. New entries that say the same thing become one bullet citing all their ids.
4. A new entry that repeats or refines an existing entry may be merged into it: write one bullet with the merged text citing the existing id and the new ids, e.g. `- Chose SQLite, with FTS5 for search [M2, N3]`, under the existing entry's heading. That bullet replaces the existing entry, so keep everything the existing entry says. Cite an existing id at most once, and never without a new id.
5. Do not repeat existing entries you do not merge.
6. Keep exact identifiers as written: paths, commands, names, versions, numbers.
7. Write in the language of the entries.";

/// The user message of a consolidation request: the entries `memory` holds under the merge's
/// headings (`[M1]`, `[M2]`…) and the `new` ones (`[N1]`, `[N2]`…, with their provenance).
pub fn consolidation_prompt(memory: &str, new: &NewEntries) -> String {
    let existing = existing_entries(memory);
    let mut out = String::from("# Existing entries of MEMORY.md\n");
    let mut kinds: Vec<&str> = Vec::new();
    for entry in &existing {
        if !kinds.contains(&entry.kind.as_str()) {
            kinds.push(&entry.kind);
        }
    }
    for kind in &kinds {
        out.push_str(&format!("\n## {kind}\n"));
        for (m, entry) in existing.iter().enumerate().filter(|(_, e)| e.kind == *kind) {
            out.push_str(&format!("- [M{}] {}\n", m + 1, entry.text));
        }
    }
    if kinds.is_empty() {
        out.push_str("\n(none)\n");
    }
    out.push_str("\n# New entries\n");
    let mut n = 0;
    for (kind, list) in &new.sections {
        out.push_str(&format!("\n## {kind}\n"));
        for entry in list {
            n += 1;
            out.push_str(&format!("- [N{n}] {}\n", entry.line()));
        }
    }
    out
}

/// An id a bullet of a model's reply cites: `N3` is the third new entry, `M2` the second
/// existing one (both 1-based, as in the [`consolidation_prompt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cited {
    /// A new entry.
    New(usize),
    /// An entry `MEMORY.md` holds.
    Existing(usize),
}

/// One bullet of a model's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bullet {
    /// Its text, without the ids (nor a `(from memory/…)` the model kept).
    pub text: String,
    /// The ids it cites, sorted, new ones first.
    pub cites: Vec<Cited>,
}

/// A model's reply read strictly as `## heading` lines (one of the merge's headings, any case)
/// each followed by `- ` bullets ending with the ids they stand for; blank lines are allowed,
/// and one code fence around the whole reply. The bullets by heading, in the reply's order (a
/// heading given twice is one); `Err` says what is wrong.
pub fn parse_consolidation(reply: &str) -> Result<Vec<(String, Vec<Bullet>)>, String> {
    let mut out: Vec<(String, Vec<Bullet>)> = Vec::new();
    let mut current: Option<usize> = None;
    for (n, line) in without_fence(reply).lines().enumerate() {
        let line = line.trim_end();
        let at = |why: String| format!("line {}: {why}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(title) = line.strip_prefix("## ") {
            let kind = merge_heading(title.trim())
                .ok_or_else(|| at(format!("`## {}` is not a MEMORY.md heading", clip(title.trim()))))?;
            current = Some(match out.iter().position(|(k, _)| k == kind) {
                Some(i) => i,
                None => {
                    out.push((kind.to_owned(), Vec::new()));
                    out.len() - 1
                }
            });
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            let Some(i) = current else {
                return Err(at("a bullet before any heading".into()));
            };
            out[i].1.push(bullet(item).map_err(at)?);
            continue;
        }
        return Err(at(format!(
            "`{}` is neither a `## ` heading nor a `- ` bullet",
            clip(line)
        )));
    }
    Ok(out)
}

/// `memory` with the entries of a model's `reply` to a [`consolidation_prompt`] of `memory`
/// and `new`: bullets citing an existing entry replace it (their provenance joined), the others
/// are appended under their heading, each with the provenance of the entries it cites. `Err`
/// when the reply does not parse, cites an unknown id, has no bullet, or leaves a new entry
/// out.
pub fn consolidated(memory: &str, new: &NewEntries, reply: &str) -> Result<Merged, String> {
    let numbered = new.numbered();
    if numbered.is_empty() {
        return Ok(extractive(memory, new));
    }
    let sections = parse_consolidation(reply)?;
    if sections.iter().all(|(_, bullets)| bullets.is_empty()) {
        return Err("the reply has no bullet".into());
    }
    let existing = existing_entries(memory);
    let cited_existing = checked_citations(&sections, &existing, numbered.len())?;
    let edits = Edits::of(&sections, &existing, cited_existing, &numbered, &new.repeats);
    Ok(Merged {
        memory: edits.applied(memory, &existing),
        added: numbered.len(),
        duplicates: new.duplicates,
    })
}

/// Checks the ids the bullets of `sections` cite against the `existing` entries and the
/// `new_count` new ones: every bullet cites a new entry, every new entry is cited, an existing
/// one at most once and only under its own heading. Which existing entries are cited.
fn checked_citations(
    sections: &[(String, Vec<Bullet>)],
    existing: &[Existing],
    new_count: usize,
) -> Result<Vec<bool>, String> {
    let mut cited_new = vec![false; new_count];
    let mut cited_existing = vec![false; existing.len()];
    for (kind, bullets) in sections {
        for bullet in bullets {
            if !bullet.cites.iter().any(|c| matches!(c, Cited::New(_))) {
                return Err(format!("a bullet under `{kind}` cites no new entry"));
            }
            for cited in &bullet.cites {
                match *cited {
                    Cited::New(n) => {
                        *cited_new
                            .get_mut(n - 1)
                            .ok_or_else(|| format!("N{n} is not a new entry"))? = true;
                    }
                    Cited::Existing(m) => {
                        let entry = existing
                            .get(m - 1)
                            .ok_or_else(|| format!("M{m} is not an existing entry"))?;
                        if entry.kind != *kind {
                            return Err(format!("M{m} is under `{}`, not `{kind}`", entry.kind));
                        }
                        if std::mem::replace(&mut cited_existing[m - 1], true) {
                            return Err(format!("M{m} is cited twice"));
                        }
                    }
                }
            }
        }
    }
    let missing: Vec<String> = (1..=new_count)
        .filter(|n| !cited_new[n - 1])
        .map(|n| format!("N{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("the reply leaves out {}", missing.join(", ")));
    }
    Ok(cited_existing)
}

/// What a checked reply does to `MEMORY.md`.
struct Edits {
    /// What replaces each existing entry (`None`: kept as it is).
    replaced: Vec<Option<Entry>>,
    /// The existing entries that go.
    removed: Vec<bool>,
    /// The new list items by heading.
    appended: Vec<(String, Vec<Entry>)>,
}

impl Edits {
    /// The edits of the bullets of `sections`, given the `existing` entries (those
    /// `cited_existing`), the `numbered` new ones and the `repeats` of existing ones.
    fn of(
        sections: &[(String, Vec<Bullet>)],
        existing: &[Existing],
        mut cited_existing: Vec<bool>,
        numbered: &[(&str, &Entry)],
        repeats: &[Entry],
    ) -> Edits {
        let mut edits = Edits {
            replaced: vec![None; existing.len()],
            removed: vec![false; existing.len()],
            appended: Vec::new(),
        };
        for (kind, bullets) in sections {
            for bullet in bullets {
                let mut from: Vec<String> = Vec::new();
                let mut olds: Vec<usize> = Vec::new();
                for cited in &bullet.cites {
                    match *cited {
                        Cited::New(n) => from.extend(fingerprinted(numbered[n - 1].1)),
                        Cited::Existing(m) => olds.push(m - 1),
                    }
                }
                if olds.is_empty() {
                    // A bullet saying word for word what an earlier bullet or an entry of
                    // `MEMORY.md` says is merged into it, as if the model had cited it.
                    let key = normalized(&bullet.text);
                    let earlier = edits
                        .appended
                        .iter_mut()
                        .flat_map(|(_, list)| list.iter_mut())
                        .find(|entry| normalized(&entry.text) == key);
                    if let Some(entry) = earlier {
                        entry.from.extend(from);
                        entry.from = grouped(std::mem::take(&mut entry.from));
                        continue;
                    }
                    let same =
                        (0..existing.len()).find(|&m| !cited_existing[m] && normalized(&existing[m].text) == key);
                    if let Some(m) = same {
                        cited_existing[m] = true;
                        olds.push(m);
                    }
                }
                for &m in &olds {
                    from.extend(replaced_provenance(&existing[m], repeats));
                }
                let entry = Entry {
                    text: bullet.text.clone(),
                    from: grouped(from),
                };
                edits.put(kind, &olds, entry);
            }
        }
        edits
    }

    /// Puts `entry`, under heading `kind`, in place of the existing entries `olds` (the first
    /// replaced, the rest removed), or appends it when it replaces none.
    fn put(&mut self, kind: &str, olds: &[usize], entry: Entry) {
        match olds.split_first() {
            Some((&first, rest)) => {
                self.replaced[first] = Some(entry);
                for &m in rest {
                    self.removed[m] = true;
                }
            }
            None => match self.appended.iter_mut().find(|(k, _)| k == kind) {
                Some((_, list)) => list.push(entry),
                None => self.appended.push((kind.to_owned(), vec![entry])),
            },
        }
    }

    /// `memory`, whose entries are `existing`, with the edits made.
    fn applied(&self, memory: &str, existing: &[Existing]) -> String {
        let lines: Vec<&str> = memory.split_inclusive('\n').collect();
        let mut kept: Vec<Option<String>> = lines.iter().map(|l| Some((*l).to_owned())).collect();
        for (m, old) in existing.iter().enumerate() {
            let replacement = self.replaced[m].as_ref().filter(|_| !self.removed[m]);
            if replacement.is_none() && !self.removed[m] {
                continue;
            }
            for i in old.lines.clone() {
                kept[i] = None;
            }
            if let Some(entry) = replacement {
                let start = old.lines.start;
                let indent = &lines[start][..lines[start].len() - lines[start].trim_start().len()];
                let newline = if lines[old.lines.end - 1].ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                kept[start] = Some(format!("{indent}- {}{newline}", entry.line()));
            }
        }
        let mut out: String = kept.into_iter().flatten().collect();
        for (kind, list) in &self.appended {
            let lines: Vec<String> = list.iter().map(Entry::line).collect();
            out = insert_under(&out, kind, &lines);
        }
        out
    }
}

/// The provenance of a model's bullet standing for `entry`: each log with the entry's
/// fingerprint, so that a later merge of the same log knows the entry is in, rewritten.
fn fingerprinted(entry: &Entry) -> Vec<String> {
    let hash = fingerprint(&normalized(&entry.text));
    entry.from.iter().map(|path| format!("{path}#{hash}")).collect()
}

/// The provenance a bullet replacing `old` keeps of it: its own, each log named without a
/// fingerprint given `old`'s (it came from that log as written), and the logs of this merge
/// that repeat it.
fn replaced_provenance(old: &Existing, repeats: &[Entry]) -> Vec<String> {
    let key = normalized(&old.text);
    let hash = fingerprint(&key);
    let mut from: Vec<String> = provenance_of(&old.text)
        .into_iter()
        .map(|path| {
            if path.contains('#') {
                path
            } else {
                format!("{path}#{hash}")
            }
        })
        .collect();
    for repeat in repeats.iter().filter(|r| normalized(&r.text) == key) {
        from.extend(repeat.from.iter().map(|path| format!("{path}#{hash}")));
    }
    from
}

/// Provenance items one per log, in order, each with its fingerprints sorted:
/// `memory/a.md#1, memory/a.md#2` → `memory/a.md#1#2`.
fn grouped(from: Vec<String>) -> Vec<String> {
    let mut logs: Vec<(String, Vec<String>)> = Vec::new();
    for item in &from {
        let mut parts = item.split('#');
        let path = parts.next().unwrap_or_default();
        let hashes = parts.filter(|h| !h.is_empty()).map(str::to_owned);
        match logs.iter_mut().find(|(p, _)| p == path) {
            Some((_, list)) => list.extend(hashes),
            None => logs.push((path.to_owned(), hashes.collect())),
        }
    }
    logs.sort();
    logs.into_iter()
        .map(|(path, mut hashes)| {
            hashes.sort();
            hashes.dedup();
            std::iter::once(path).chain(hashes).collect::<Vec<_>>().join("#")
        })
        .collect()
}

/// The fingerprint of an entry, from its [`normalized`] text: 8 hex digits.
pub(super) fn fingerprint(normalized: &str) -> String {
    format!("{:08x}", xxhash_rust::xxh3::xxh3_64(normalized.as_bytes()) as u32)
}

/// An entry `MEMORY.md` holds under one of the merge's headings.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Existing {
    /// The heading.
    kind: String,
    /// Its text, continuation lines joined, provenance included.
    text: String,
    /// Its lines, as indexes into `memory.split_inclusive('\n')`.
    lines: Range<usize>,
}

/// The list items of `memory` under a `## ` heading of the merge ([`KINDS`], [`NOTES`]), in
/// order. A section ends at the next heading of level 1 or 2, as for [`insert_under`].
fn existing_entries(memory: &str) -> Vec<Existing> {
    let mut out: Vec<Existing> = Vec::new();
    let mut kind: Option<&str> = None;
    let mut open = false;
    let mut in_fence = false;
    for (i, line) in memory.split_inclusive('\n').enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            open = false;
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(title) = heading(trimmed) {
            open = false;
            match trimmed.bytes().take_while(|b| *b == b'#').count() {
                1 => kind = None,
                2 => kind = merge_kinds().find(|k| *k == title),
                _ => {}
            }
            continue;
        }
        if trimmed.is_empty() {
            open = false;
            continue;
        }
        let Some(kind) = kind else { continue };
        match (entry_of(line), out.last_mut()) {
            (Some(text), _) => {
                out.push(Existing {
                    kind: kind.to_owned(),
                    text,
                    lines: i..i + 1,
                });
                open = true;
            }
            (None, Some(last)) if open => {
                last.text.push(' ');
                last.text.push_str(trimmed);
                last.lines.end = i + 1;
            }
            (None, _) => {}
        }
    }
    out
}

/// The headings a merge writes under.
fn merge_kinds() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(kind, _)| *kind).chain([NOTES])
}

/// The merge heading `title` names, in any case.
fn merge_heading(title: &str) -> Option<&'static str> {
    merge_kinds().find(|k| k.eq_ignore_ascii_case(title))
}

/// The text of a bullet's line after `- `: its ids are the trailing `[N1, M2]` groups, a
/// `(from memory/…)` before or after them is dropped.
fn bullet(item: &str) -> Result<Bullet, String> {
    let mut text = item.trim();
    let mut cites = Vec::new();
    loop {
        text = without_provenance(text.trim_end()).trim_end();
        let Some((rest, ids)) = text
            .strip_suffix(']')
            .and_then(|t| t.rfind('[').map(|open| (&t[..open], &t[open + 1..])))
        else {
            break;
        };
        let Some(ids) = ids.split(',').map(|id| cited(id.trim())).collect::<Option<Vec<_>>>() else {
            break;
        };
        cites.extend(ids);
        text = rest;
    }
    let text = text.trim_end();
    if cites.is_empty() {
        return Err(format!("`{}` cites no entry id", clip(item)));
    }
    if text.is_empty() {
        return Err(format!("`{}` has no text", clip(item)));
    }
    cites.sort();
    cites.dedup();
    Ok(Bullet {
        text: text.to_owned(),
        cites,
    })
}

/// `N3` / `M2` (either case), numbered from 1.
fn cited(id: &str) -> Option<Cited> {
    let mut chars = id.chars();
    let kind = chars.next()?;
    let number: usize = chars.as_str().parse().ok().filter(|n| *n > 0)?;
    if !chars.as_str().bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match kind {
        'N' | 'n' => Some(Cited::New(number)),
        'M' | 'm' => Some(Cited::Existing(number)),
        _ => None,
    }
}

/// `text` without a trailing ` (from memory/…)`.
fn without_provenance(text: &str) -> &str {
    match text.rfind("(from memory/") {
        Some(at) if text.ends_with(')') => text[..at].trim_end(),
        _ => text,
    }
}

/// The daily logs a trailing ` (from memory/a.md, memory/b.md)` of `text` names.
pub(super) fn provenance_of(text: &str) -> Vec<String> {
    let Some(at) = text.rfind("(from memory/").filter(|_| text.ends_with(')')) else {
        return Vec::new();
    };
    text[at + "(from ".len()..text.len() - 1]
        .split(',')
        .map(str::trim)
        .filter(|path| path.starts_with("memory/"))
        .map(str::to_owned)
        .collect()
}

/// `reply` without one code fence around all of it.
fn without_fence(reply: &str) -> &str {
    let reply = reply.trim();
    match reply.strip_prefix("```").and_then(|r| r.strip_suffix("```")) {
        Some(inner) => inner.split_once('\n').map_or("", |(_, body)| body),
        None => reply,
    }
}

/// At most 60 characters of `text`, for an error.
fn clip(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::tests::log;

    /// The `MEMORY.md` of the consolidation tests.
    const CASE_MEMORY: &str = "# MEMORY\n\n## Key decisions\n\n- Chose SQLite. (from memory/2026-11-20.md)\n- Deploys go through\n  `make ship`.\n\n## Projects\n\n- satchel\n\n## Notes\n\n- the CI box has 2 cores\n";

    /// The daily logs of the consolidation tests: one new preference on the 23rd, two new
    /// decisions on the 24th, which also repeats a decision `MEMORY.md` has and the
    /// preference of the 23rd.
    fn case_logs() -> [DailyLog; 2] {
        [
            log(
                "memory/2026-11-23.md",
                "### Preferences\n\n- Answers in British English.\n\n### Done\n\n- shipped v2\n",
            ),
            log(
                "memory/2026-11-24.md",
                "### Decisions\n\n- SQLite FTS5 for keyword search\n- JWT over sessions\n- chose SQLite\n\n### Preferences\n\n- answers in british english\n",
            ),
        ]
    }

    fn consolidation_case() -> (&'static str, NewEntries) {
        (CASE_MEMORY, new_entries(CASE_MEMORY, &case_logs()))
    }

    #[test]
    fn the_prompt_numbers_the_existing_entries_of_the_merge_headings_and_the_new_ones() {
        let (memory, new) = consolidation_case();
        assert_eq!(
            consolidation_prompt(memory, &new),
            "# Existing entries of MEMORY.md

## Key decisions
- [M1] Chose SQLite. (from memory/2026-11-20.md)
- [M2] Deploys go through `make ship`.

## Notes
- [M3] the CI box has 2 cores

# New entries

## Preferences and constraints
- [N1] Answers in British English. (from memory/2026-11-23.md)

## Key decisions
- [N2] SQLite FTS5 for keyword search (from memory/2026-11-24.md)
- [N3] JWT over sessions (from memory/2026-11-24.md)
"
        );
        assert_eq!(new.duplicates, 2);
        assert_eq!(
            new.repeats,
            [Entry {
                text: "chose SQLite".into(),
                from: vec!["memory/2026-11-24.md".into()]
            }]
        );
        let empty = consolidation_prompt("", &new);
        assert!(
            empty.starts_with("# Existing entries of MEMORY.md\n\n(none)\n\n# New entries\n"),
            "{empty}"
        );
        for kind in merge_kinds() {
            assert!(CONSOLIDATION_SYSTEM.contains(&format!("`{kind}`")), "{kind}");
        }
    }

    /// `reply` parsed, one line per bullet (`heading: text [ids]`), or `error: why`.
    fn check_parse(reply: &str, expected: &str) {
        let shown = match parse_consolidation(reply) {
            Ok(sections) => sections
                .iter()
                .flat_map(|(kind, bullets)| {
                    bullets.iter().map(move |b| {
                        let ids: Vec<String> = b
                            .cites
                            .iter()
                            .map(|c| match c {
                                Cited::New(n) => format!("N{n}"),
                                Cited::Existing(m) => format!("M{m}"),
                            })
                            .collect();
                        format!("{kind}: {} [{}]\n", b.text, ids.join(" "))
                    })
                })
                .collect(),
            Err(why) => format!("error: {why}\n"),
        };
        assert_eq!(shown, expected, "reply:\n{reply}");
    }

    #[test]
    fn a_reply_parses_as_headings_and_bullets_with_their_ids() {
        check_parse(
            "```markdown\n## key decisions\n\n- Chose SQLite, FTS5 for keyword search [M1, N2]\n- JWT over sessions. (from memory/2026-11-24.md) [n3]\n## Preferences and constraints\n- Replies in British English [N1][N1] (from memory/2026-11-23.md)\n## Key decisions\n- Tabs [see docs] [N4]\n```\n",
            "Key decisions: Chose SQLite, FTS5 for keyword search [N2 M1]
Key decisions: JWT over sessions. [N3]
Key decisions: Tabs [see docs] [N4]
Preferences and constraints: Replies in British English [N1]
",
        );
        check_parse("", "");
        check_parse("## Notes\n", "");
    }

    #[test]
    fn a_reply_with_anything_else_does_not_parse() {
        check_parse(
            "Here is the merged memory:\n\n## Notes\n- x [N1]\n",
            "error: line 1: `Here is the merged memory:` is neither a `## ` heading nor a `- ` bullet\n",
        );
        check_parse("- x [N1]\n", "error: line 1: a bullet before any heading\n");
        check_parse(
            "## Ideas\n- x [N1]\n",
            "error: line 1: `## Ideas` is not a MEMORY.md heading\n",
        );
        check_parse("## Notes\n- x\n", "error: line 2: `x` cites no entry id\n");
        check_parse("## Notes\n- x [N0]\n", "error: line 2: `x [N0]` cites no entry id\n");
        check_parse("## Notes\n- [N1]\n", "error: line 2: `[N1]` has no text\n");
        check_parse(
            "## Notes\n* x [N1]\n",
            "error: line 2: `* x [N1]` is neither a `## ` heading nor a `- ` bullet\n",
        );
        check_parse(
            "## Notes\n- a long entry [N1]\n  wrapped\n",
            "error: line 3: `  wrapped` is neither a `## ` heading nor a `- ` bullet\n",
        );
    }

    #[test]
    fn the_reply_replaces_the_entries_it_merges_into_and_appends_the_rest_with_provenance() {
        let (memory, new) = consolidation_case();
        let reply = "## Key decisions
- Chose SQLite, with FTS5 for keyword search; deploys go through `make ship` [M1, M2, N2]
- JWT over sessions [N3]

## Preferences and constraints
- Replies in British English [N1]
";
        let merged = consolidated(memory, &new, reply).unwrap();
        assert_eq!(
            merged.memory,
            "# MEMORY

## Key decisions

- Chose SQLite, with FTS5 for keyword search; deploys go through `make ship` (from memory/2026-11-20.md#78d852df, memory/2026-11-24.md#0ffd69a6#78d852df)
- JWT over sessions (from memory/2026-11-24.md#07c3560f)

## Projects

- satchel

## Notes

- the CI box has 2 cores

## Preferences and constraints

- Replies in British English (from memory/2026-11-23.md#3c6c8772)
"
        );
        assert_eq!((merged.added, merged.duplicates), (3, 2), "the extractive counts");
        // The next merge of the same logs knows every entry, rewritten or not, by the
        // fingerprints in the provenance: it adds nothing.
        let again = merge(&merged.memory, &case_logs());
        assert_eq!(again.memory, merged.memory);
        assert_eq!((again.added, again.duplicates), (0, 5));
    }

    #[test]
    fn entries_said_twice_become_one_bullet_with_the_provenance_of_both() {
        let (memory, new) = consolidation_case();
        // The model writes the same bullet twice, and once what `MEMORY.md` already says
        // without citing it: both are merged, keeping every provenance.
        let reply = "## Key decisions\n- JWT over sessions [N3]\n- SQLite FTS5 for keyword search [N2]\n- jwt over sessions. [N2]\n\n## Notes\n- The CI box has 2 cores. [N1]\n";
        let merged = consolidated(memory, &new, reply).unwrap();
        assert_eq!(
            merged.memory,
            "# MEMORY\n\n## Key decisions\n\n- Chose SQLite. (from memory/2026-11-20.md)\n- Deploys go through\n  `make ship`.\n- JWT over sessions (from memory/2026-11-24.md#07c3560f#0ffd69a6)\n- SQLite FTS5 for keyword search (from memory/2026-11-24.md#0ffd69a6)\n\n## Projects\n\n- satchel\n\n## Notes\n\n- The CI box has 2 cores. (from memory/2026-11-23.md#3c6c8772)\n"
        );
        assert_eq!((merged.added, merged.duplicates), (3, 2));
    }

    #[test]
    fn a_reply_that_drops_or_invents_an_entry_is_refused() {
        let (memory, new) = consolidation_case();
        let check = |reply: &str, expected: &str| {
            assert_eq!(consolidated(memory, &new, reply), Err(expected.to_owned()), "{reply}");
        };
        check("", "the reply has no bullet");
        check("## Notes\n", "the reply has no bullet");
        check("## Key decisions\n- JWT [N3]\n", "the reply leaves out N1, N2");
        check("## Key decisions\n- all [N1, N2, N3, N4]\n", "N4 is not a new entry");
        check(
            "## Key decisions\n- all [N1, N2, N3, M9]\n",
            "M9 is not an existing entry",
        );
        check(
            "## Notes\n- all [N1, N2, N3, M1]\n",
            "M1 is under `Key decisions`, not `Notes`",
        );
        check(
            "## Key decisions\n- a [N1, M1]\n- b [N2, N3, M1]\n",
            "M1 is cited twice",
        );
        check(
            "## Key decisions\n- a [N1, N2, N3]\n- Chose PostgreSQL [M1]\n",
            "a bullet under `Key decisions` cites no new entry",
        );
        check(
            "Sure! Everything is merged.",
            "line 1: `Sure! Everything is merged.` is neither a `## ` heading nor a `- ` bullet",
        );
    }
}
