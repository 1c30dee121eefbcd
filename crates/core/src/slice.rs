//! Windows into a stored text: the pure half of `context.read`.
//!
//! Truncation notices point the agent at a stored file and a position (a line, or a byte
//! offset when a single line was too long). This module turns such a position and a size
//! limit into the next window of the text, cut on the same rules as the excerpt (whole lines
//! when possible, never inside a char), and says exactly where the following window starts,
//! so that reading window after window reproduces the file byte for byte.

use std::fmt;

use crate::truncate::{TextStats, count_newlines, cut_back};

/// What part of a stored text to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRequest {
    /// 1-based line to start at; defaults to 1. Ignored when `byte_offset` is given.
    pub start_line: Option<usize>,
    /// Byte offset to start at; wins over `start_line` because it can point inside a line.
    pub byte_offset: Option<usize>,
    /// Upper bound on the bytes returned.
    pub max_bytes: usize,
}

/// A window of a stored text and where it sits in the whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice<'a> {
    /// The returned text: `text[byte_offset..byte_offset + content.len()]`.
    pub content: &'a str,
    /// Byte offset where `content` starts.
    pub byte_offset: usize,
    /// 1-based line `content` starts in.
    pub start_line: usize,
    /// Last line `content` touches; `start_line - 1` when `content` is empty.
    pub end_line: usize,
    /// Byte offset right after `content`; `None` at end of text.
    pub next_byte_offset: Option<usize>,
    /// Line containing `next_byte_offset`. Reading on from it is exact only when `content`
    /// ends with `'\n'`; otherwise it re-reads the start of that line. `None` at end of text.
    pub next_line: Option<usize>,
    /// Whether `content` reaches the end of the text.
    pub eof: bool,
    /// Lines in the whole text (see [`TextStats::total_lines`]).
    pub total_lines: usize,
    /// Bytes in the whole text.
    pub total_bytes: usize,
}

/// A start position the text does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A 1-based line.
    Line(usize),
    /// A byte offset.
    ByteOffset(usize),
}

/// Why a [`SliceRequest`] cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceError {
    /// `max_bytes` was 0, which could never make progress.
    ZeroMaxBytes,
    /// `byte_offset` falls inside a multi-byte UTF-8 char.
    NotCharBoundary {
        /// The requested offset.
        byte_offset: usize,
    },
    /// The start position lies beyond the end of the text.
    OutOfRange {
        /// The requested position.
        requested: Position,
        /// Lines in the text.
        total_lines: usize,
        /// Bytes in the text.
        total_bytes: usize,
    },
}

impl fmt::Display for SliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroMaxBytes => f.write_str("max_bytes must be at least 1"),
            Self::NotCharBoundary { byte_offset } => write!(
                f,
                "byte_offset {byte_offset} is inside a multi-byte UTF-8 character; \
                 use an offset given by a truncation notice or a previous read"
            ),
            Self::OutOfRange {
                requested: Position::Line(line),
                total_lines,
                ..
            } => write!(
                f,
                "start_line {line} is out of range: lines are numbered from 1 and the file has \
                 {total_lines} lines (valid: 1-{})",
                total_lines + 1
            ),
            Self::OutOfRange {
                requested: Position::ByteOffset(offset),
                total_bytes,
                ..
            } => write!(
                f,
                "byte_offset {offset} is out of range: the file has {total_bytes} bytes \
                 (valid: 0-{total_bytes})"
            ),
        }
    }
}

impl std::error::Error for SliceError {}

/// Returns the window of `text` that `req` asks for: at most `max_bytes` bytes from the start
/// position, ending after a `'\n'` when at least one whole line fits, otherwise at a char
/// boundary inside the line.
///
/// The one exception to `max_bytes`: when it is narrower than the char at the start position,
/// that whole char is returned so that reading on always makes progress.
pub fn slice_text<'a>(text: &'a str, req: &SliceRequest) -> Result<Slice<'a>, SliceError> {
    if req.max_bytes == 0 {
        return Err(SliceError::ZeroMaxBytes);
    }
    let TextStats {
        total_bytes,
        total_lines,
    } = TextStats::of(text);
    let out_of_range = |requested| SliceError::OutOfRange {
        requested,
        total_lines,
        total_bytes,
    };

    let (start, start_line) = match (req.byte_offset, req.start_line.unwrap_or(1)) {
        (Some(offset), _) if offset > total_bytes => {
            return Err(out_of_range(Position::ByteOffset(offset)));
        }
        (Some(offset), _) if !text.is_char_boundary(offset) => {
            return Err(SliceError::NotCharBoundary { byte_offset: offset });
        }
        (Some(offset), _) => (offset, 1 + count_newlines(&text[..offset])),
        (None, line) if line == 0 || line > total_lines + 1 => {
            return Err(out_of_range(Position::Line(line)));
        }
        (None, 1) => (0, 1),
        // Past the last '\n' only the (unterminated) end of text remains.
        (None, line) => (
            text.match_indices('\n')
                .nth(line - 2)
                .map_or(total_bytes, |(nl, _)| nl + 1),
            line,
        ),
    };

    let limit = start.saturating_add(req.max_bytes);
    let end = if limit >= total_bytes {
        total_bytes
    } else {
        match text[start..text.floor_char_boundary(limit)].rfind('\n') {
            Some(nl) => start + nl + 1,
            None => match cut_back(text, start, limit) {
                cut if cut > start => cut,
                _ => text.ceil_char_boundary(start + 1),
            },
        }
    };

    let content = &text[start..end];
    let newlines = count_newlines(content);
    let end_line = if content.is_empty() || content.ends_with('\n') {
        start_line + newlines - 1
    } else {
        start_line + newlines
    };
    let eof = end == total_bytes;
    Ok(Slice {
        content,
        byte_offset: start,
        start_line,
        end_line,
        next_byte_offset: (!eof).then_some(end),
        next_line: (!eof).then_some(start_line + newlines),
        eof,
        total_lines,
        total_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(start_line: Option<usize>, byte_offset: Option<usize>, max_bytes: usize) -> SliceRequest {
        SliceRequest {
            start_line,
            byte_offset,
            max_bytes,
        }
    }

    const TEXT: &str = "one\ntwo\nthree\nfour";

    #[test]
    fn reads_whole_lines_from_the_start() {
        let s = slice_text(TEXT, &req(None, None, 10)).unwrap();
        assert_eq!(
            s,
            Slice {
                content: "one\ntwo\n",
                byte_offset: 0,
                start_line: 1,
                end_line: 2,
                next_byte_offset: Some(8),
                next_line: Some(3),
                eof: false,
                total_lines: 4,
                total_bytes: 18,
            }
        );
    }

    #[test]
    fn reads_from_a_line_to_the_end() {
        let s = slice_text(TEXT, &req(Some(3), None, 100)).unwrap();
        assert_eq!(s.content, "three\nfour");
        assert_eq!((s.byte_offset, s.start_line, s.end_line), (8, 3, 4));
        assert_eq!((s.next_byte_offset, s.next_line, s.eof), (None, None, true));
    }

    #[test]
    fn byte_offset_wins_and_can_start_mid_line() {
        let s = slice_text(TEXT, &req(Some(1), Some(10), 6)).unwrap();
        assert_eq!(s.content, "ree\n");
        assert_eq!((s.start_line, s.end_line, s.next_line), (3, 3, Some(4)));
        assert_eq!(s.next_byte_offset, Some(14));
    }

    #[test]
    fn long_line_is_cut_at_a_char_boundary() {
        let text = "你好世界\nx";
        let s = slice_text(text, &req(None, None, 7)).unwrap();
        assert_eq!(s.content, "你好");
        assert_eq!((s.end_line, s.next_byte_offset, s.next_line), (1, Some(6), Some(1)));
        let s = slice_text(text, &req(None, Some(6), 7)).unwrap();
        assert_eq!(s.content, "世界\n");
    }

    #[test]
    fn a_char_wider_than_max_bytes_is_returned_whole() {
        let s = slice_text("😀😀", &req(None, None, 1)).unwrap();
        assert_eq!((s.content, s.next_byte_offset), ("😀", Some(4)));
    }

    #[test]
    fn end_of_text_positions_are_empty_slices() {
        let s = slice_text("", &req(None, None, 5)).unwrap();
        assert_eq!((s.content, s.start_line, s.end_line, s.eof), ("", 1, 0, true));
        let s = slice_text("a\n", &req(Some(2), None, 5)).unwrap();
        assert_eq!((s.content, s.byte_offset, s.eof), ("", 2, true));
        let s = slice_text(TEXT, &req(Some(5), None, 5)).unwrap();
        assert_eq!((s.content, s.byte_offset, s.eof), ("", 18, true));
        let s = slice_text(TEXT, &req(None, Some(18), 5)).unwrap();
        assert_eq!((s.content, s.start_line), ("", 4));
    }

    #[test]
    fn bad_requests_are_errors_with_clear_messages() {
        let err = |r| slice_text("héllo\nworld\n", &r).unwrap_err();
        assert_eq!(err(req(None, None, 0)), SliceError::ZeroMaxBytes);
        assert_eq!(
            err(req(None, Some(2), 5)).to_string(),
            "byte_offset 2 is inside a multi-byte UTF-8 character; \
             use an offset given by a truncation notice or a previous read"
        );
        assert_eq!(
            err(req(Some(4), None, 5)).to_string(),
            "start_line 4 is out of range: lines are numbered from 1 and the file has 2 lines \
             (valid: 1-3)"
        );
        assert_eq!(
            err(req(Some(0), None, 5)),
            SliceError::OutOfRange {
                requested: Position::Line(0),
                total_lines: 2,
                total_bytes: 13
            }
        );
        assert_eq!(
            err(req(None, Some(14), 5)).to_string(),
            "byte_offset 14 is out of range: the file has 13 bytes (valid: 0-13)"
        );
    }

    fn arb_text() -> impl Strategy<Value = String> {
        let fragment = prop_oneof![
            "[a-z]{0,12}",
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            "[你好世界]{1,6}",
            Just("👨\u{200D}👩\u{200D}👧".to_owned()),
            Just("e\u{301}".to_owned()),
            "\\PC{0,20}",
            "[xé]{20,200}",
        ];
        prop_oneof![
            proptest::collection::vec(fragment, 0..30).prop_map(|v| v.concat()),
            any::<String>(),
        ]
    }

    /// Checks one slice against the text and returns where the next one starts.
    fn check(text: &str, s: &Slice<'_>, max_bytes: usize) -> Option<usize> {
        let end = s.byte_offset + s.content.len();
        assert_eq!(&text[s.byte_offset..end], s.content);
        assert!(s.content.len() <= max_bytes);
        assert!(!s.content.is_empty() || s.eof);
        assert_eq!(s.start_line, 1 + count_newlines(&text[..s.byte_offset]));
        assert_eq!(s.eof, end == text.len());
        assert_eq!(s.next_byte_offset, (!s.eof).then_some(end));
        assert_eq!(s.next_line, (!s.eof).then(|| 1 + count_newlines(&text[..end])));
        let touched = s.content.strip_suffix('\n').unwrap_or(s.content);
        let end_line = s.start_line + count_newlines(touched);
        assert_eq!(
            s.end_line,
            if s.content.is_empty() {
                s.start_line - 1
            } else {
                end_line
            }
        );
        // Whole lines whenever the first one fits.
        let first_line_fits = text[s.byte_offset..].find('\n').is_some_and(|nl| nl < max_bytes);
        if first_line_fits && !s.eof {
            assert!(s.content.ends_with('\n'));
        }
        s.next_byte_offset
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn following_byte_offsets_reads_everything(text in arb_text(), max_bytes in 4usize..300) {
            let mut read = String::new();
            let mut offset = Some(0);
            while let Some(at) = offset {
                let s = slice_text(&text, &req(None, Some(at), max_bytes)).unwrap();
                read.push_str(s.content);
                offset = check(&text, &s, max_bytes);
            }
            prop_assert_eq!(read, text);
        }

        #[test]
        fn following_lines_reads_everything(text in arb_text(), max_bytes in 4usize..300) {
            let mut read = String::new();
            let mut next = req(Some(1), None, max_bytes);
            loop {
                let s = slice_text(&text, &next).unwrap();
                read.push_str(s.content);
                let Some(at) = check(&text, &s, max_bytes) else { break };
                next = if s.content.ends_with('\n') {
                    // The line-based continuation lands exactly where the bytes say.
                    let by_line = req(s.next_line, None, max_bytes);
                    prop_assert_eq!(slice_text(&text, &by_line).unwrap().byte_offset, at);
                    by_line
                } else {
                    req(None, Some(at), max_bytes)
                };
            }
            prop_assert_eq!(read, text);
        }

        #[test]
        fn any_max_bytes_makes_progress(text in arb_text(), max_bytes in 1usize..4) {
            let mut offset = Some(0);
            let mut read = String::new();
            while let Some(at) = offset {
                let s = slice_text(&text, &req(None, Some(at), max_bytes)).unwrap();
                prop_assert!(s.eof || !s.content.is_empty());
                prop_assert!(s.content.len() <= max_bytes || s.content.chars().count() == 1);
                read.push_str(s.content);
                offset = s.next_byte_offset;
            }
            prop_assert_eq!(read, text);
        }
    }
}
