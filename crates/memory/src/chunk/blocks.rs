//! The block structure of a Markdown file, line by line: ATX headings, fenced code blocks,
//! list items (with their continuation and nested lines), paragraphs and thematic breaks.
//!
//! This is deliberately a small subset of CommonMark: memory files are notes written by people
//! and by compaction, and all the chunker needs is where a block starts and ends. Setext
//! headings, block quotes and tables are read as paragraphs.

/// One line of the file, without its line ending (`\n` or `\r\n`).
pub(super) struct Line<'a> {
    pub text: &'a str,
    /// `text.chars().count()`, counted once: chunk sizes are measured in characters.
    pub chars: usize,
}

impl Line<'_> {
    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }
}

/// The lines of `text`. A final line ending does not start another line, and an empty text
/// has no lines.
pub(super) fn lines(text: &str) -> Vec<Line<'_>> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|line| {
            let text = line.strip_suffix('\r').unwrap_or(line);
            Line {
                text,
                chars: text.chars().count(),
            }
        })
        .collect()
}

/// What a block is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// An ATX heading (`## Title`), always one line.
    Heading {
        level: usize,
        title: String,
    },
    Paragraph,
    ListItem,
    /// A fenced code block, kept whole.
    Code,
    /// A thematic break (`---`): separates blocks, indexes nothing.
    Break,
}

/// A block: lines `start..=end` (0-based), never starting or ending on a blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Block {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// Spans inside the block that must not be cut apart (a code fence inside a list item).
    pub keep_together: Vec<(usize, usize)>,
}

/// The blocks of `lines`, in order.
pub(super) fn blocks(lines: &[Line<'_>]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let text = lines[i].text;
        let block = |kind, end| Block {
            kind,
            start: i,
            end,
            keep_together: Vec::new(),
        };
        let next = if lines[i].is_blank() {
            i + 1
        } else if let Some(fence) = Fence::open(text, MAX_BLOCK_INDENT) {
            let end = fence.end(lines, i);
            out.push(block(Kind::Code, end));
            end + 1
        } else if let Some((level, title)) = heading(text) {
            out.push(block(Kind::Heading { level, title }, i));
            i + 1
        } else if is_thematic_break(text) {
            out.push(block(Kind::Break, i));
            i + 1
        } else if let Some(indent) = list_item(text) {
            let (end, keep_together) = item_end(lines, i, indent);
            out.push(Block {
                keep_together,
                ..block(Kind::ListItem, end)
            });
            end + 1
        } else {
            let end = paragraph_end(lines, i);
            out.push(block(Kind::Paragraph, end));
            end + 1
        };
        i = next;
    }
    out
}

/// CommonMark's limit: indented four columns or more, a line is not a heading, fence or break.
const MAX_BLOCK_INDENT: usize = 3;

/// The last line of the paragraph starting at `start`: it runs until a blank line or a line
/// that starts another block.
fn paragraph_end(lines: &[Line<'_>], start: usize) -> usize {
    let mut end = start;
    while let Some(line) = lines.get(end + 1) {
        if line.is_blank() || starts_block(line.text) {
            break;
        }
        end += 1;
    }
    end
}

/// Whether `text` starts a block that interrupts a paragraph or ends a list item.
fn starts_block(text: &str) -> bool {
    heading(text).is_some()
        || Fence::open(text, MAX_BLOCK_INDENT).is_some()
        || is_thematic_break(text)
        || list_item(text).is_some_and(|indent| indent <= MAX_BLOCK_INDENT)
}

/// The last line of the list item starting at `start` (its marker indented `indent` columns),
/// and the code fences inside it. The item takes every following line indented deeper than its
/// marker (continuation paragraphs, nested items), blank lines between them, and lazy
/// continuation lines directly after a line of it.
fn item_end(lines: &[Line<'_>], start: usize, indent: usize) -> (usize, Vec<(usize, usize)>) {
    let mut keep_together = Vec::new();
    let mut end = start;
    let mut j = start + 1;
    while let Some(line) = lines.get(j) {
        if line.is_blank() {
            j += 1;
            continue;
        }
        if indentation(line.text).0 > indent {
            // A fence inside the item runs to its closing line, whatever that line's indent.
            if let Some(fence) = Fence::open(line.text, usize::MAX) {
                let close = fence.end(lines, j);
                keep_together.push((j, close));
                end = close;
            } else {
                end = j;
            }
        } else if end + 1 == j && !starts_block(line.text) && list_item(line.text).is_none() {
            end = j;
        } else {
            break;
        }
        j = end + 1;
    }
    (end, keep_together)
}

/// Columns and bytes of leading whitespace (a tab advances to the next multiple of 4).
fn indentation(text: &str) -> (usize, usize) {
    let mut columns = 0;
    for (at, c) in text.char_indices() {
        match c {
            ' ' => columns += 1,
            '\t' => columns += 4 - columns % 4,
            _ => return (columns, at),
        }
    }
    (columns, text.len())
}

/// The text after at most `max` columns of indentation, or `None` when indented deeper.
fn unindented(text: &str, max: usize) -> Option<&str> {
    let (columns, at) = indentation(text);
    (columns <= max).then(|| &text[at..])
}

/// An ATX heading's level and title (`## Title ##` → 2, `Title`).
fn heading(text: &str) -> Option<(usize, String)> {
    let rest = unindented(text, MAX_BLOCK_INDENT)?;
    let level = rest.bytes().take_while(|&b| b == b'#').count();
    let after = &rest[level..];
    if !(1..=6).contains(&level) || !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    let title = after.trim();
    // A closing sequence of `#` is not part of the title when a space precedes it.
    let stripped = title.trim_end_matches('#');
    let title = if stripped.is_empty() || stripped.ends_with([' ', '\t']) {
        stripped.trim_end()
    } else {
        title
    };
    Some((level, title.to_owned()))
}

/// `---`, `***` or `___` (three or more, spaces allowed between).
fn is_thematic_break(text: &str) -> bool {
    let Some(rest) = unindented(text, MAX_BLOCK_INDENT) else {
        return false;
    };
    let mut marks = rest.chars().filter(|c| !matches!(c, ' ' | '\t'));
    let Some(first @ ('-' | '*' | '_')) = marks.next() else {
        return false;
    };
    let mut count = 1;
    for c in marks {
        if c != first {
            return false;
        }
        count += 1;
    }
    count >= 3
}

/// The indentation of a list item's marker (`-`, `*`, `+`, `1.`, `1)`), if `text` starts one.
fn list_item(text: &str) -> Option<usize> {
    if is_thematic_break(text) {
        return None;
    }
    let (indent, at) = indentation(text);
    let rest = &text[at..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let marker = match digits {
        0 if rest.starts_with(['-', '*', '+']) => 1,
        1..=9 if rest[digits..].starts_with(['.', ')']) => digits + 1,
        _ => return None,
    };
    let after = &rest[marker..];
    (after.is_empty() || after.starts_with([' ', '\t'])).then_some(indent)
}

/// An opening code fence: its character and length.
struct Fence {
    mark: char,
    len: usize,
}

impl Fence {
    /// The fence `text` opens, if indented at most `max_indent` columns.
    fn open(text: &str, max_indent: usize) -> Option<Fence> {
        let rest = unindented(text, max_indent)?;
        let mark = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
        let len = rest.chars().take_while(|&c| c == mark).count();
        // A backtick fence's info string cannot contain a backtick (that is inline code).
        let info_ok = mark == '~' || !rest[len..].contains('`');
        (len >= 3 && info_ok).then_some(Fence { mark, len })
    }

    /// The line that closes this fence opened at `open`; an unclosed fence runs to the last
    /// non-blank line of the file.
    fn end(&self, lines: &[Line<'_>], open: usize) -> usize {
        let closes = |line: &Line<'_>| {
            let rest = line.text.trim();
            rest.chars().take_while(|&c| c == self.mark).count() >= self.len && rest.chars().all(|c| c == self.mark)
        };
        match lines.iter().skip(open + 1).position(closes) {
            Some(offset) => open + 1 + offset,
            None => (open..lines.len())
                .rev()
                .find(|&j| !lines[j].is_blank())
                .unwrap_or(open),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, usize, usize)> {
        blocks(&lines(text))
            .into_iter()
            .map(|b| (b.kind, b.start, b.end))
            .collect()
    }

    #[test]
    fn lines_drop_line_endings() {
        let texts: Vec<&str> = lines("a\r\nb\n\nc").iter().map(|l| l.text).collect();
        assert_eq!(texts, ["a", "b", "", "c"]);
        assert_eq!(lines("a\n").len(), 1);
        assert_eq!(lines("\n").len(), 1);
        assert!(lines("").is_empty());
    }

    #[test]
    fn headings_need_a_space_and_lose_closing_hashes() {
        assert_eq!(heading("## Title ##"), Some((2, "Title".into())));
        assert_eq!(heading("# C#"), Some((1, "C#".into())));
        assert_eq!(heading("#"), Some((1, String::new())));
        assert_eq!(heading("#hashtag"), None);
        assert_eq!(heading("####### seven"), None);
        assert_eq!(heading("    # indented code"), None);
    }

    #[test]
    fn breaks_and_list_markers() {
        assert!(is_thematic_break("- - -"));
        assert!(is_thematic_break("***"));
        assert!(!is_thematic_break("--"));
        assert!(!is_thematic_break("-*-"));
        assert_eq!(list_item("  - item"), Some(2));
        assert_eq!(list_item("12. item"), Some(0));
        assert_eq!(list_item("-"), Some(0));
        assert_eq!(list_item("-item"), None);
        assert_eq!(list_item("2023. was a year"), Some(0));
        assert_eq!(list_item("1234567890. too long"), None);
    }

    #[test]
    fn a_list_item_takes_its_nested_and_lazy_lines() {
        let text = "- a\n  - nested\n\n  more of a\nlazy\n- b\n\nafter";
        assert_eq!(
            kinds(text),
            [(Kind::ListItem, 0, 4), (Kind::ListItem, 5, 5), (Kind::Paragraph, 7, 7)]
        );
    }

    #[test]
    fn fences_run_to_their_closing_line_or_the_last_line() {
        let text = "```rust\nfn main() {}\n\n```\n~~~\nopen\n\n";
        assert_eq!(kinds(text), [(Kind::Code, 0, 3), (Kind::Code, 4, 5)]);
        assert_eq!(kinds("``` a`b\n"), [(Kind::Paragraph, 0, 0)]);
    }
}
