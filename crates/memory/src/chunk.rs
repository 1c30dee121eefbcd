//! Markdown cut by its structure into the chunks the index stores and search returns.
//!
//! A chunk is a list item (with its continuation and nested lines), a paragraph, a fenced code
//! block, or a heading that has no body. It is always whole lines, so a hit can be cited as
//! `path:start-end` and read back with the file's own line numbers.
//!
//! A note rarely repeats where and when it was written, so each chunk carries a *context*: the
//! date of a daily log (`memory/YYYY-MM-DD.md`), the trail of headings above it and each of
//! their *leads* (a short first paragraph under a heading, such as `Date: 1:56 pm on 8 May,
//! 2023`). The index searches the context as a second, lighter column and embeds it with the
//! text; it is not part of the chunk's lines or snippet. A heading with a body is context
//! only, never a chunk of its own.

mod blocks;

use xxhash_rust::xxh3::Xxh3;

use blocks::{Block, Kind, Line};

/// A chunk past this many characters is cut at a line boundary: it keeps a hit's snippet and
/// an embedding's input to a paragraph or two. A single longer line, or a code block, stays
/// one chunk, since a chunk never splits a line or a fence.
pub const MAX_CHUNK_CHARS: usize = 1600;

/// A first paragraph under a heading at most this long is the section's lead, repeated in the
/// context of every chunk of the section: long enough for a date line or a one-line summary,
/// short enough that it does not drown the chunk's own words.
pub const MAX_LEAD_CHARS: usize = 200;

/// Separates the headings of a context's trail.
const TRAIL_SEPARATOR: &str = " > ";

/// One chunk of a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First line, 1-based.
    pub start_line: u32,
    /// Last line, 1-based, inclusive.
    pub end_line: u32,
    /// The lines `start_line..=end_line`, joined by `\n` (without `\r`).
    pub text: String,
    /// Daily-log date, heading trail and section leads, one per line; may be empty.
    pub context: String,
    /// xxh3 of text and context (not of the path or lines): the same chunk moved within a file
    /// or to another file keeps its hash, so it is neither re-indexed nor re-embedded.
    pub hash: u64,
}

/// The chunks of the Markdown `text` of the file at `rel_path` (workspace-relative; only its
/// name is used, for a daily log's date), in line order.
pub fn chunk_markdown(rel_path: &str, text: &str) -> Vec<Chunk> {
    chunk_resumable(rel_path, text).0
}

/// Where chunking can go on when text is appended to a file: at its last block, which the
/// new text may continue (a paragraph, a list item, an open code fence, the lead under a
/// heading), with the headings in force before it. Every block before it ends where it ends
/// whatever follows: the parser looks past a block only to a line that starts the next one.
/// The default is the start of a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    /// The last block's first line, 0-based.
    line: usize,
    /// Where that line starts in the file's text, in bytes.
    byte: usize,
    /// The headings in force before that block.
    stack: Vec<Section>,
    /// Whether the block before it is a heading (a paragraph there is the section's lead).
    after_heading: bool,
}

impl Resume {
    /// The first line (1-based) whose chunks a resumed chunking replaces.
    pub fn first_line(&self) -> u32 {
        line_number(self.line)
    }

    /// Where that line starts in the file's text, in bytes.
    pub fn tail_start(&self) -> usize {
        self.byte
    }
}

/// [`chunk_markdown`], and where chunking can resume after an append.
pub fn chunk_resumable(rel_path: &str, text: &str) -> (Vec<Chunk>, Resume) {
    chunk_appended(rel_path, text, &Resume::default())
}

/// The chunks of `text` from `resume`'s line on, `text` being the file's whole new content
/// and `resume` what chunking its earlier content returned (that content must be a prefix
/// of `text`). The chunks before that line are those of the earlier content. Only the lines
/// from there are read: an append costs its own size, not the file's.
pub fn chunk_appended(rel_path: &str, text: &str, resume: &Resume) -> (Vec<Chunk>, Resume) {
    let tail = &text[resume.byte..];
    let lines = blocks::lines(tail);
    let blocks = blocks::blocks(&lines);
    let mut out = Vec::new();
    let mut sections = Sections {
        date: daily_date(rel_path),
        stack: resume.stack.clone(),
    };
    let mut next = Resume {
        line: resume.line,
        byte: resume.byte,
        stack: sections.stack.clone(),
        after_heading: resume.after_heading,
    };
    for (at, block) in blocks.iter().enumerate() {
        let follows_heading = if at == 0 {
            resume.after_heading
        } else {
            matches!(blocks[at - 1].kind, Kind::Heading { .. })
        };
        if at + 1 == blocks.len() {
            next = Resume {
                line: resume.line + block.start,
                byte: resume.byte + (lines[block.start].text.as_ptr() as usize - tail.as_ptr() as usize),
                stack: sections.stack.clone(),
                after_heading: follows_heading,
            };
        }
        let chunk = |start: usize, end: usize, context: String| chunk(&lines, resume.line, start, end, context);
        match &block.kind {
            Kind::Heading { level, title } => {
                sections.stack.retain(|s| s.level < *level);
                let has_body = blocks.get(at + 1).is_some_and(|next| match &next.kind {
                    Kind::Heading { level: next_level, .. } => next_level > level,
                    _ => true,
                });
                if !has_body {
                    out.push(chunk(block.start, block.end, sections.context()));
                }
                sections.stack.push(Section {
                    level: *level,
                    title: title.clone(),
                    lead: None,
                });
            }
            Kind::Break => {}
            Kind::Code => out.push(chunk(block.start, block.end, sections.context())),
            Kind::Paragraph | Kind::ListItem => {
                let context = sections.context();
                for (start, end) in pieces(&lines, block) {
                    out.push(chunk(start, end, context.clone()));
                }
                if block.kind == Kind::Paragraph && follows_heading {
                    sections.set_lead(&lines[block.start..=block.end]);
                }
            }
        }
    }
    (out, next)
}

/// A heading in force.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    level: usize,
    title: String,
    lead: Option<String>,
}

/// Where the chunker is: the file's date and the headings above the current block.
struct Sections {
    date: Option<String>,
    stack: Vec<Section>,
}

impl Sections {
    fn context(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        parts.extend(self.date.as_deref());
        let trail: Vec<&str> = self
            .stack
            .iter()
            .map(|s| s.title.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        let trail = trail.join(TRAIL_SEPARATOR);
        if !trail.is_empty() {
            parts.push(&trail);
        }
        parts.extend(self.stack.iter().filter_map(|s| s.lead.as_deref()));
        parts.join("\n")
    }

    /// Makes `paragraph`, the first block under the innermost heading, that section's lead if
    /// it is short enough. The paragraph stays a chunk of its own too.
    fn set_lead(&mut self, paragraph: &[Line<'_>]) {
        let lead = paragraph.iter().map(|l| l.text.trim()).collect::<Vec<_>>().join(" ");
        if let Some(section) = self.stack.last_mut()
            && lead.chars().count() <= MAX_LEAD_CHARS
        {
            section.lead = Some(lead);
        }
    }
}

/// The date of a daily log `YYYY-MM-DD.md`, written both ways (`2023-05-08 (8 May 2023)`), so
/// a query with either form finds the day's notes.
fn daily_date(rel_path: &str) -> Option<String> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = rel_path.rsplit(['/', '\\']).next()?;
    let stem = name.strip_suffix(".md")?;
    let bytes = stem.as_bytes();
    let shape_ok = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && [0, 1, 2, 3, 5, 6, 8, 9].iter().all(|&i| bytes[i].is_ascii_digit());
    if !shape_ok {
        return None;
    }
    let month: usize = stem[5..7].parse().ok()?;
    let day: u32 = stem[8..10].parse().ok()?;
    let name = MONTHS.get(month.checked_sub(1)?)?;
    (1..=31)
        .contains(&day)
        .then(|| format!("{stem} ({day} {name} {})", &stem[..4]))
}

/// A paragraph or list item as one or more line ranges of at most [`MAX_CHUNK_CHARS`], cut
/// only between lines and never inside a span that must stay together.
fn pieces(lines: &[Line<'_>], block: &Block) -> Vec<(usize, usize)> {
    let size = |start: usize, end: usize| lines[start..=end].iter().map(|l| l.chars + 1).sum::<usize>() - 1;
    if size(block.start, block.end) <= MAX_CHUNK_CHARS {
        return vec![(block.start, block.end)];
    }
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    let mut j = block.start;
    while j <= block.end {
        let atom_end = block
            .keep_together
            .iter()
            .find(|&&(start, _)| start == j)
            .map_or(j, |&(_, end)| end);
        current = match current {
            // Blank lines are never the first or last line of a piece.
            None if lines[j].is_blank() => None,
            None => Some((j, atom_end)),
            Some((start, end)) if size(start, atom_end) > MAX_CHUNK_CHARS => {
                out.push((start, end));
                (!lines[j].is_blank()).then_some((j, atom_end))
            }
            Some((start, end)) => Some((start, if lines[atom_end].is_blank() { end } else { atom_end })),
        };
        j = atom_end + 1;
    }
    out.extend(current);
    out
}

/// The chunk of lines `start..=end` (0-based in `lines`, which start at the file's line
/// `first`).
fn chunk(lines: &[Line<'_>], first: usize, start: usize, end: usize, context: String) -> Chunk {
    let text = lines[start..=end].iter().map(|l| l.text).collect::<Vec<_>>().join("\n");
    let mut hasher = Xxh3::new();
    // The length prefix keeps (text, context) pairs apart whatever bytes they contain.
    hasher.update(&(text.len() as u64).to_le_bytes());
    hasher.update(text.as_bytes());
    hasher.update(context.as_bytes());
    Chunk {
        start_line: line_number(first + start),
        end_line: line_number(first + end),
        text,
        context,
        hash: hasher.digest(),
    }
}

/// The 1-based number of the 0-based line `index`; a file past `u32::MAX` lines is not a note.
fn line_number(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    //! One `check(name, path, markdown)` helper renders the chunks of a sample and compares them
    //! with their snapshot in `src/snapshots/` (insta; `INSTA_UPDATE=always` writes new ones);
    //! the property tests check the line invariants on generated Markdown.

    use proptest::prelude::*;

    use super::*;

    /// The chunks of `markdown` as `start-end`, the context (`ctx:` lines) and the text.
    fn render(chunks: &[Chunk]) -> String {
        let mut out = String::new();
        for chunk in chunks {
            out.push_str(&format!("{}-{}\n", chunk.start_line, chunk.end_line));
            for line in chunk.context.lines() {
                out.push_str(&format!("  ctx: {line}\n"));
            }
            for line in chunk.text.lines() {
                out.push_str(&format!("  | {line}\n"));
            }
        }
        out
    }

    fn check(name: &str, rel_path: &str, markdown: &str) {
        let chunks = chunk_markdown(rel_path, markdown);
        assert_invariants(markdown, &chunks);
        insta::assert_snapshot!(name, render(&chunks), markdown);
    }

    #[test]
    fn headings_are_context_unless_they_have_no_body() {
        check(
            "headings",
            "MEMORY.md",
            "# Memory\n\n## Preferences\nThe user's standing choices.\n\n- tabs, not spaces\n- short commit titles\n\n\
             ### Editor\n- helix\n\n## Empty section\n## Projects ##\n\nsatchel: a context daemon.\nWritten in Rust.\n\n\
             ---\n\n# Trailing heading\n",
        );
    }

    #[test]
    fn a_session_date_lead_reaches_every_turn() {
        check(
            "session_lead",
            "memory/conv-26.md",
            "# conv-26 session 1\nDate: 1:56 pm on 8 May, 2023\n\n- Caroline: I went to a LGBTQ support group yesterday.\n\
             - Melanie: That's great, how was it?\n\n# conv-26 session 2\n\nDate: 1:14 pm on 25 May, 2023\n\n\
             - Melanie: I ran a charity race for mental health last Saturday.\n",
        );
    }

    #[test]
    fn a_daily_log_carries_its_date() {
        check(
            "daily_log",
            "memory/2026-11-22.md",
            "\n## Compaction of session `s1` at 2026-11-22T10:00:00Z\n\n### Key decisions\n\n\
             - keep the index derived from the files\n\n### Lessons from failures\n\n- `cargo test` failed: ECONNREFUSED (resolved later)\n",
        );
    }

    #[test]
    fn nested_lists_stay_with_their_item() {
        check(
            "nested_lists",
            "MEMORY.md",
            "- project satchel\n  - daemon in Rust\n    - tokio\n\n  continuation paragraph of the item\n\
             lazy line\n- second item\n1. ordered\n2) other style\n\nAfter the list.\n- interrupts\n",
        );
    }

    #[test]
    fn code_fences_are_kept_whole() {
        check(
            "code_fences",
            "MEMORY.md",
            "Run this:\n```sh\n# not a heading\n\ncargo test -p satchel-memory\n```\n- item with code\n\n  ~~~\n  let x = 1;\n\n  ~~~\n\
             \n````\nunclosed ``` fence\n\n",
        );
    }

    #[test]
    fn crlf_and_no_trailing_newline() {
        check(
            "crlf",
            "MEMORY.md",
            "# Title\r\nfirst paragraph\r\n\r\n- item\r\n  more\r\n\r\nlast line",
        );
    }

    #[test]
    fn cjk_text() {
        check(
            "cjk",
            "memory/2024-02-29.md",
            "# 项目记忆\n用户喜欢简洁的回答。\n\n- 使用 Rust 编写守护进程\n- メモリ検索はハイブリッド\n\n## 한국어 메모\n검색 결과를 확인하세요.\n",
        );
    }

    #[test]
    fn long_paragraphs_are_cut_between_lines() {
        let line = "word ".repeat(70);
        let long_line = "x".repeat(MAX_CHUNK_CHARS + 10);
        let markdown = format!("{}\n{long_line}\n{line}\n", [line.trim_end(); 10].join("\n"));
        let chunks = chunk_markdown("MEMORY.md", &markdown);
        assert_invariants(&markdown, &chunks);
        let ranges: Vec<(u32, u32)> = chunks.iter().map(|c| (c.start_line, c.end_line)).collect();
        assert_eq!(ranges, [(1, 4), (5, 8), (9, 10), (11, 11), (12, 12)]);
    }

    #[test]
    fn empty_and_blank_files_have_no_chunks() {
        assert!(chunk_markdown("MEMORY.md", "").is_empty());
        assert!(chunk_markdown("MEMORY.md", "\n \r\n\t\n").is_empty());
        assert!(chunk_markdown("MEMORY.md", "---\n").is_empty());
    }

    #[test]
    fn the_hash_follows_text_and_context_not_position() {
        let first = chunk_markdown("memory/a.md", "- same\n");
        let moved = chunk_markdown("memory/b.md", "\n\n- other\n\n- same\n");
        assert_eq!(first[0].hash, moved[1].hash);
        let under_heading = chunk_markdown("memory/a.md", "# Title\n- same\n");
        assert_ne!(first[0].hash, under_heading[0].hash);
        let dated = chunk_markdown("memory/2026-01-02.md", "- same\n");
        assert_eq!(dated[0].context, "2026-01-02 (2 January 2026)");
        assert_eq!(daily_date("memory/2026-13-02.md"), None);
        assert_eq!(daily_date("memory/notes.md"), None);
    }

    /// Chunks are whole lines in increasing, disjoint ranges, never start or end on a blank
    /// line, and every line with content is in exactly one chunk, except headings with a body
    /// and thematic breaks.
    fn assert_invariants(markdown: &str, chunks: &[Chunk]) {
        let lines = blocks::lines(markdown);
        let mut covered = vec![false; lines.len()];
        let mut previous_end = 0;
        for chunk in chunks {
            let (start, end) = (chunk.start_line as usize, chunk.end_line as usize);
            assert!(start > previous_end && start <= end && end <= lines.len(), "{chunk:?}");
            previous_end = end;
            let expected: Vec<&str> = lines[start - 1..end].iter().map(|l| l.text).collect();
            assert_eq!(chunk.text, expected.join("\n"));
            assert!(!lines[start - 1].is_blank() && !lines[end - 1].is_blank(), "{chunk:?}");
            let oversize = chunk.text.chars().count() > MAX_CHUNK_CHARS;
            let has_fence = chunk.text.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("```") || l.starts_with("~~~")
            });
            assert!(!oversize || start == end || has_fence, "{chunk:?}");
            covered[start - 1..end].iter_mut().for_each(|c| *c = true);
        }
        let all = blocks::blocks(&lines);
        for (index, line) in lines.iter().enumerate() {
            let skipped = all
                .iter()
                .any(|b| b.start == index && matches!(b.kind, Kind::Heading { .. } | Kind::Break));
            assert!(
                covered[index] || line.is_blank() || skipped,
                "line {} uncovered: {:?}",
                index + 1,
                line.text
            );
        }
    }

    fn markdown_line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("   ".to_owned()),
            (1..=4usize, "[a-z ]{0,12}").prop_map(|(level, t)| format!("{} {t}", "#".repeat(level))),
            ("[ ]{0,6}", "[-*+]|[0-9]\\.", "[a-z ]{0,20}").prop_map(|(i, m, t)| format!("{i}{m} {t}")),
            "[`~]{3,4}[a-z]{0,3}",
            "[ ]{2,4}(```|~~~)[a-z]{0,3}",
            "---|\\* \\* \\*",
            "[a-zA-Z0-9 .,:'|]{1,60}",
            "[ ]{1,6}[a-z]{1,10}",
            "[记忆系统メモリ검색 ]{1,10}",
            "[a-z ]{1500,1700}",
        ]
    }

    proptest! {
        #[test]
        fn chunks_keep_the_line_invariants(
            lines in proptest::collection::vec(markdown_line(), 0..60),
            crlf in any::<bool>(),
            trailing_newline in any::<bool>(),
        ) {
            let mut markdown = lines.join(if crlf { "\r\n" } else { "\n" });
            if trailing_newline {
                markdown.push('\n');
            }
            let chunks = chunk_markdown("memory/2026-11-22.md", &markdown);
            assert_invariants(&markdown, &chunks);
        }

        /// Chunking resumed after an append gives the chunks of the whole new content: those
        /// before the resume line are the earlier content's, the rest are the resumed ones.
        #[test]
        fn a_resumed_chunking_equals_a_whole_one(
            before in proptest::collection::vec(markdown_line(), 0..40),
            appends in proptest::collection::vec(proptest::collection::vec(markdown_line(), 1..8), 1..4),
        ) {
            let path = "memory/2026-11-22.md";
            let mut text = before.iter().map(|l| format!("{l}\n")).collect::<String>();
            let (mut chunks, mut resume) = chunk_resumable(path, &text);
            for append in appends {
                text.extend(append.iter().map(|l| format!("{l}\n")));
                let (tail, next) = chunk_appended(path, &text, &resume);
                chunks.retain(|c| c.start_line < resume.first_line());
                chunks.extend(tail);
                resume = next;
                prop_assert_eq!(&chunks, &chunk_markdown(path, &text));
            }
        }
    }
}
