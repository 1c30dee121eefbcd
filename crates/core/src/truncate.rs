//! Model-visible excerpts of long tool outputs.
//!
//! A tool output that is too large for the context is stored in full in a file and the
//! message keeps only an excerpt: a head, a notice saying what was cut and how to read the
//! rest, and optionally a tail so the end of the output (exit status, errors) stays visible.
//!
//! Unlike the peer design (which re-parses its own notice to truncate again), every call
//! starts from the full original text and renders the excerpt from scratch. The notice is
//! never parsed back, so outputs that themselves contain [`TRUNCATION_MARKER`] are handled
//! like any other text, and the numbers in the notice are always the real ones.
//!
//! The daemon renders excerpts of every old tool result on every request, so the work per
//! call is bounded by the budget: only the head and tail windows are looked at, and whole-text
//! facts come from a precomputed [`TextStats`].

/// First line of every truncation notice (same marker as the peer, so its readers still match).
pub const TRUNCATION_MARKER: &str = "<<<TRUNCATED>>>";

/// Line that separates the notice from the tail of the output.
pub const TAIL_MARKER: &str = "<<<TAIL>>>";

/// How much of an output may stay in the context.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExcerptLimits {
    /// Upper bound on the bytes of the original text kept (head + tail; the notice is extra).
    pub max_bytes: usize,
    /// Outputs up to `max_bytes + slack_bytes` are kept whole: cutting a handful of bytes and
    /// adding a notice would cost more than it saves.
    pub slack_bytes: usize,
    /// Share of `max_bytes` given to the tail; `0.0` disables the tail.
    pub tail_ratio: f64,
}

impl ExcerptLimits {
    /// Bytes available for the tail: `floor(max_bytes * tail_ratio)`, never more than `max_bytes`.
    pub fn tail_budget(&self) -> usize {
        // `as` saturates and maps NaN to 0, so a nonsensical ratio cannot panic or overflow.
        ((self.max_bytes as f64 * self.tail_ratio).floor() as usize).min(self.max_bytes)
    }

    /// Bytes available for the head: whatever the tail does not take.
    pub fn head_budget(&self) -> usize {
        self.max_bytes - self.tail_budget()
    }
}

/// Where the full text lives, as the agent should be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRef<'a> {
    /// Workspace-relative path, e.g. `tool_result/<uuid>.txt`: what `context.read` takes.
    pub path: &'a str,
    /// The workspace root (absolute), when the notice should give the agent's own `read_file`
    /// tool the absolute path of the file; `None` gives it `path` as it is.
    pub root: Option<&'a str>,
    /// The result's stable id (`r12`), which `context.pin` and `context.purge` take.
    pub id: Option<&'a str>,
}

impl FileRef<'_> {
    /// The path the notice gives `read_file`: `root` joined with `path` (with the root's
    /// separator), or `path` alone when there is no root.
    pub fn read_file_path(&self) -> String {
        match self.root {
            None => self.path.to_owned(),
            Some(root) => {
                // A Windows root (`C:\ws`) gets backslashes throughout; any other gets `/`.
                let windows = root.contains('\\') && !root.contains('/');
                let sep = if windows { '\\' } else { '/' };
                let rel = if windows {
                    self.path.replace('/', "\\")
                } else {
                    self.path.to_owned()
                };
                let root = root.trim_end_matches(sep);
                format!("{root}{sep}{rel}")
            }
        }
    }
}

/// Facts about the full text, computed once when it enters so that rendering never scans it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextStats {
    /// Length of the text in bytes.
    pub total_bytes: usize,
    /// Number of lines; a trailing `'\n'` ends the last line rather than starting an empty one,
    /// so `"a\nb\n"` and `"a\nb"` both have 2 lines and `""` has 0.
    pub total_lines: usize,
}

impl TextStats {
    /// Measures `text` (one pass over it).
    pub fn of(text: &str) -> Self {
        let unterminated = !text.is_empty() && !text.ends_with('\n');
        Self {
            total_bytes: text.len(),
            total_lines: count_newlines(text) + usize::from(unterminated),
        }
    }
}

/// The text to put in the message, plus the numbers stated in its notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// Head, notice and (if any) tail, ready to be shown to the model.
    pub text: String,
    /// Bytes of the original text kept at the start; the head is `text[..head_bytes]`.
    pub head_bytes: usize,
    /// Last line the head shows, entirely or (when the first line alone exceeds the budget)
    /// partly; 0 when the head is empty.
    pub head_end_line: usize,
    /// 1-based line where the omitted part begins (the line the head stops in, if it stops
    /// mid-line).
    pub next_line: usize,
    /// Byte offset in the full text where the omitted part begins (equal to `head_bytes`).
    pub next_byte_offset: usize,
    /// The end of the output, when the limits leave room for it.
    pub tail: Option<TailInfo>,
}

/// Which part of the original text the tail shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailInfo {
    /// Bytes of the original text kept at the end; the tail is `text[byte_offset..]`.
    pub bytes: usize,
    /// 1-based line the tail starts in.
    pub start_line: usize,
    /// Byte offset in the full text where the tail starts.
    pub byte_offset: usize,
}

/// Renders the excerpt of `text` that fits `limits`, or `None` when the text fits
/// (`total_bytes <= max_bytes + slack_bytes`) and should be kept unchanged.
///
/// `stats` must be [`TextStats::of`] this `text`; it is taken precomputed so the cost of a
/// call depends on the budget, not on the size of the text.
pub fn render_excerpt(text: &str, stats: &TextStats, limits: &ExcerptLimits, file: &FileRef<'_>) -> Option<Excerpt> {
    // Only the O(1) part of the stats can be checked without defeating their purpose.
    debug_assert_eq!(stats.total_bytes, text.len(), "stats belong to another text");
    // Slicing decisions use `text.len()` so that stale stats can only skew the notice.
    let len = text.len();
    if len <= limits.max_bytes.saturating_add(limits.slack_bytes) {
        return None;
    }

    let head_budget = limits.head_budget();
    let whole_lines = text[..text.floor_char_boundary(head_budget)].rfind('\n');
    let head_bytes = whole_lines.map_or_else(|| cut_back(text, 0, head_budget), |nl| nl + 1);
    let head = &text[..head_bytes];
    let head_newlines = count_newlines(head);
    let next_line = head_newlines + 1;
    let head_end_line = if whole_lines.is_some() {
        head_newlines
    } else {
        usize::from(head_bytes > 0)
    };

    let tail = tail_start(text, limits.tail_budget()).map(|start| TailInfo {
        bytes: len - start,
        start_line: line_at(text, stats, start),
        byte_offset: start,
    });
    // Head and tail each fit their share of `max_bytes < len`, so something lies between them.
    debug_assert!(tail.is_none_or(|t| t.byte_offset > head_bytes));

    let path = serde_json::Value::from(file.path).to_string();
    let read_path = serde_json::Value::from(file.read_file_path()).to_string();
    let (total_lines, total_bytes) = (stats.total_lines, stats.total_bytes);
    let (coverage, continuation) = if whole_lines.is_some() {
        (
            format!("(lines 1-{head_end_line})"),
            format!(
                "`read_file` with file_path={read_path} start_line={next_line} to read more, \
                 or satchel's `context.read` with {{\"path\": {path}, \"start_line\": {next_line}}}."
            ),
        )
    } else {
        (
            "(the first part of line 1, which is longer than the limit)".to_owned(),
            format!(
                "`read_file` with file_path={read_path} start_line=1 to read more, \
                 or satchel's `context.read` with {{\"path\": {path}, \"byte_offset\": {head_bytes}}} \
                 to continue exactly where this excerpt stops."
            ),
        )
    };

    let mut out = String::with_capacity(limits.max_bytes + 2 * path.len() + read_path.len() + 640);
    out.push_str(head);
    if !head.is_empty() && !head.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "{TRUNCATION_MARKER}\n\
         The output above was truncated.\n\
         The full content is saved to the file and contains {total_lines} lines in total \
         ({total_bytes} bytes).\n\
         This excerpt starts at line 1 and covers the next {head_bytes} bytes {coverage}.\n\
         If the current content is not enough, call {continuation}"
    ));
    if let Some(id) = file.id {
        out.push_str(&format!(
            "\nThis result's id is {id}: `context.pin` keeps it whole, `context.purge` drops it from the requests."
        ));
    }
    if let Some(t) = &tail {
        out.push_str(&format!(
            "\nThe last {} bytes (from line {}) are shown below, after {TAIL_MARKER}, so the end \
             of the output (exit status, errors) stays visible.\n{TAIL_MARKER}\n",
            t.bytes, t.start_line
        ));
        out.push_str(&text[t.byte_offset..]);
    }

    Some(Excerpt {
        text: out,
        head_bytes,
        head_end_line,
        next_line,
        next_byte_offset: head_bytes,
        tail,
    })
}

/// Where the tail starts: the earliest line start within the last `budget` bytes, or a
/// char boundary inside the last line when that line alone is longer than the budget.
fn tail_start(text: &str, budget: usize) -> Option<usize> {
    let len = text.len();
    if budget == 0 || budget >= len {
        return None;
    }
    let from = len - budget;
    // A '\n' at `from - 1` already makes `from` a line start; a '\n' as the very last byte
    // starts nothing.
    let start = text.as_bytes()[from - 1..len - 1]
        .iter()
        .position(|&b| b == b'\n')
        .map_or_else(|| cut_forward(text, from), |p| from + p);
    (start < len).then_some(start)
}

/// 1-based line containing byte `offset`, counting only the bytes after it.
fn line_at(text: &str, stats: &TextStats, offset: usize) -> usize {
    // An unterminated last line is counted in `total_lines` but has no '\n' of its own.
    let unterminated = !text.is_empty() && !text.ends_with('\n');
    let total_newlines = stats.total_lines.saturating_sub(usize::from(unterminated));
    (total_newlines + 1).saturating_sub(count_newlines(&text[offset..]))
}

pub(crate) fn count_newlines(s: &str) -> usize {
    // memchr's vectorised search: every offloaded result is measured once on arrival.
    memchr::memchr_iter(b'\n', s.as_bytes()).count()
}

/// Largest cut in `(floor, limit]` that is a char boundary and, where cheaply detectable,
/// does not split a grapheme cluster; falls back to the plain char boundary (which may be
/// `floor` itself) when the whole window is one cluster.
pub(crate) fn cut_back(text: &str, floor: usize, limit: usize) -> usize {
    let char_cut = text.floor_char_boundary(limit);
    let mut cut = char_cut;
    while cut > floor && splits_cluster(text, cut) {
        cut = text.floor_char_boundary(cut - 1);
    }
    if cut > floor { cut } else { char_cut }
}

/// Smallest char boundary at or after `from` that does not split a grapheme cluster, with the
/// same fallback as [`cut_back`].
fn cut_forward(text: &str, from: usize) -> usize {
    let char_cut = text.ceil_char_boundary(from);
    let mut cut = char_cut;
    while cut < text.len() && splits_cluster(text, cut) {
        cut = text.ceil_char_boundary(cut + 1);
    }
    if cut < text.len() { cut } else { char_cut }
}

/// Whether cutting at char boundary `i` would tear a grapheme cluster apart. Only the common
/// cases are covered (combining marks, ZWJ sequences, variation selectors, skin tones, emoji
/// tags, CRLF): a full segmentation would need Unicode tables this crate does not carry.
fn splits_cluster(text: &str, i: usize) -> bool {
    let (Some(prev), Some(next)) = (text[..i].chars().next_back(), text[i..].chars().next()) else {
        return false;
    };
    prev == '\u{200D}'
        || (prev == '\r' && next == '\n')
        || matches!(
            next,
            '\u{0300}'..='\u{036F}'
                | '\u{1AB0}'..='\u{1AFF}'
                | '\u{1DC0}'..='\u{1DFF}'
                | '\u{200D}'
                | '\u{20D0}'..='\u{20FF}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FE20}'..='\u{FE2F}'
                | '\u{1F3FB}'..='\u{1F3FF}'
                | '\u{E0020}'..='\u{E007F}'
                | '\u{E0100}'..='\u{E01EF}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PATH: &str = "tool_result/a b.txt";

    fn limits(max_bytes: usize, tail_ratio: f64) -> ExcerptLimits {
        ExcerptLimits {
            max_bytes,
            slack_bytes: 0,
            tail_ratio,
        }
    }

    fn render(text: &str, limits: &ExcerptLimits) -> Option<Excerpt> {
        render_excerpt(
            text,
            &TextStats::of(text),
            limits,
            &FileRef {
                path: PATH,
                root: None,
                id: None,
            },
        )
    }

    #[test]
    fn counts_lines_without_phantom_last_line() {
        assert_eq!(TextStats::of("").total_lines, 0);
        assert_eq!(TextStats::of("a").total_lines, 1);
        assert_eq!(TextStats::of("a\nb").total_lines, 2);
        assert_eq!(TextStats::of("a\nb\n").total_lines, 2);
        assert_eq!(TextStats::of("\n\n").total_lines, 2);
        assert_eq!(TextStats::of("日本\n").total_bytes, 7);
    }

    #[test]
    fn budgets_split_max_bytes() {
        assert_eq!(limits(1000, 0.2).tail_budget(), 200);
        assert_eq!(limits(1000, 0.2).head_budget(), 800);
        assert_eq!(limits(7, 0.5).tail_budget(), 3);
        assert_eq!(limits(100, 0.0).tail_budget(), 0);
        assert_eq!(limits(100, f64::NAN).tail_budget(), 0);
        assert_eq!(limits(100, 7.0).tail_budget(), 100);
    }

    #[test]
    fn fitting_text_is_left_alone() {
        let l = ExcerptLimits {
            max_bytes: 10,
            slack_bytes: 5,
            tail_ratio: 0.2,
        };
        assert_eq!(render("a\n".repeat(7).as_str(), &l), None);
        assert_eq!(render("a".repeat(15).as_str(), &l), None);
        assert!(render("a".repeat(16).as_str(), &l).is_some());
        assert_eq!(render("", &limits(0, 0.0)), None);
    }

    #[test]
    fn multi_line_ascii_keeps_whole_lines() {
        let e = render("line1\nline2\nline3\nline4\n", &limits(13, 0.0)).unwrap();
        assert_eq!(
            e.text,
            "line1\nline2\n<<<TRUNCATED>>>\n\
             The output above was truncated.\n\
             The full content is saved to the file and contains 4 lines in total (24 bytes).\n\
             This excerpt starts at line 1 and covers the next 12 bytes (lines 1-2).\n\
             If the current content is not enough, call `read_file` with \
             file_path=\"tool_result/a b.txt\" start_line=3 to read more, or satchel's \
             `context.read` with {\"path\": \"tool_result/a b.txt\", \"start_line\": 3}."
        );
        assert_eq!(
            (e.head_bytes, e.head_end_line, e.next_line, e.next_byte_offset),
            (12, 2, 3, 12)
        );
        assert_eq!(e.tail, None);
    }

    #[test]
    fn with_a_root_read_file_gets_the_absolute_path_and_context_read_the_relative_one() {
        let text = "line1\nline2\nline3\nline4\n";
        let file = FileRef {
            path: PATH,
            root: Some("/ws"),
            id: None,
        };
        let e = render_excerpt(text, &TextStats::of(text), &limits(13, 0.0), &file).unwrap();
        assert!(e.text.ends_with(
            "If the current content is not enough, call `read_file` with \
             file_path=\"/ws/tool_result/a b.txt\" start_line=3 to read more, or satchel's \
             `context.read` with {\"path\": \"tool_result/a b.txt\", \"start_line\": 3}."
        ));
        // Without a root, the old workspace-relative form.
        let e = render(text, &limits(13, 0.0)).unwrap();
        assert!(e.text.contains("file_path=\"tool_result/a b.txt\" start_line=3"));
        // A long first line: the absolute path for `read_file`, the byte offset for `context.read`.
        let long = "x".repeat(100);
        let e = render_excerpt(&long, &TextStats::of(&long), &limits(30, 0.0), &file).unwrap();
        assert!(e.text.contains(
            "`read_file` with file_path=\"/ws/tool_result/a b.txt\" start_line=1 to read more, \
             or satchel's `context.read` with {\"path\": \"tool_result/a b.txt\", \"byte_offset\": 30}"
        ));
    }

    #[test]
    fn read_file_path_joins_the_root_with_its_separator() {
        let at = |root| {
            FileRef {
                path: "tool_result/x.txt",
                root,
                id: None,
            }
            .read_file_path()
        };
        assert_eq!(at(None), "tool_result/x.txt");
        assert_eq!(at(Some("/ws")), "/ws/tool_result/x.txt");
        assert_eq!(at(Some("/ws/")), "/ws/tool_result/x.txt");
        assert_eq!(at(Some("/")), "/tool_result/x.txt");
        assert_eq!(at(Some(r"C:\ws")), r"C:\ws\tool_result\x.txt");
        // Quotes and backslashes in the root are escaped in the notice.
        let text = "a\nb\nc\n";
        let file = FileRef {
            path: "tool_result/x.txt",
            root: Some("/w \"s\""),
            id: None,
        };
        let e = render_excerpt(text, &TextStats::of(text), &limits(2, 0.0), &file).unwrap();
        assert!(
            e.text
                .contains(r#"file_path="/w \"s\"/tool_result/x.txt" start_line=2"#)
        );
    }

    #[test]
    fn text_ending_with_newline_counts_real_lines() {
        let e = render("a\nb\nc\n", &limits(4, 0.0)).unwrap();
        assert_eq!(
            e.text,
            "a\nb\n<<<TRUNCATED>>>\n\
             The output above was truncated.\n\
             The full content is saved to the file and contains 3 lines in total (6 bytes).\n\
             This excerpt starts at line 1 and covers the next 4 bytes (lines 1-2).\n\
             If the current content is not enough, call `read_file` with \
             file_path=\"tool_result/a b.txt\" start_line=3 to read more, or satchel's \
             `context.read` with {\"path\": \"tool_result/a b.txt\", \"start_line\": 3}."
        );
    }

    #[test]
    fn cjk_cut_mid_char_keeps_whole_chars_and_says_so() {
        // The budget of 7 ends inside 世 (bytes 6..9).
        let e = render("你好世界", &limits(7, 0.0)).unwrap();
        assert_eq!(
            e.text,
            "你好\n<<<TRUNCATED>>>\n\
             The output above was truncated.\n\
             The full content is saved to the file and contains 1 lines in total (12 bytes).\n\
             This excerpt starts at line 1 and covers the next 6 bytes (the first part of \
             line 1, which is longer than the limit).\n\
             If the current content is not enough, call `read_file` with \
             file_path=\"tool_result/a b.txt\" start_line=1 to read more, or satchel's \
             `context.read` with {\"path\": \"tool_result/a b.txt\", \"byte_offset\": 6} \
             to continue exactly where this excerpt stops."
        );
        assert_eq!(
            (e.head_bytes, e.head_end_line, e.next_line, e.next_byte_offset),
            (6, 1, 1, 6)
        );
    }

    #[test]
    fn peer_overstated_bytes_case_reports_real_bytes() {
        // The peer kept 2 998 bytes of this and claimed 3 000.
        let single = format!("a{}", "测".repeat(2000));
        let e = render(&single, &limits(3000, 0.0)).unwrap();
        assert_eq!(e.head_bytes, 2998);
        let claim = "covers the next 2998 bytes (the first part of line 1";
        assert!(e.text.contains(claim));
        assert!(e.text.contains("\"byte_offset\": 2998}"));

        let lines = "测试数据\n".repeat(500);
        let e = render(&lines, &limits(3000, 0.0)).unwrap();
        assert_eq!((e.head_bytes, e.head_end_line, e.next_line), (2990, 230, 231));
        let claim = "contains 500 lines in total (6500 bytes).\n\
                     This excerpt starts at line 1 and covers the next 2990 bytes (lines 1-230).";
        assert!(e.text.contains(claim));
    }

    #[test]
    fn single_long_line_gets_notice_and_byte_offset() {
        let text = "x".repeat(10 * 1024);
        let e = render(&text, &limits(3000, 0.0)).unwrap();
        let expected = format!(
            "{}\n<<<TRUNCATED>>>\n\
             The output above was truncated.\n\
             The full content is saved to the file and contains 1 lines in total (10240 bytes).\n\
             This excerpt starts at line 1 and covers the next 3000 bytes (the first part of \
             line 1, which is longer than the limit).\n\
             If the current content is not enough, call `read_file` with \
             file_path=\"tool_result/a b.txt\" start_line=1 to read more, or satchel's \
             `context.read` with {{\"path\": \"tool_result/a b.txt\", \"byte_offset\": 3000}} \
             to continue exactly where this excerpt stops.",
            "x".repeat(3000)
        );
        assert_eq!(e.text, expected);
    }

    #[test]
    fn tail_keeps_the_error_at_the_end_of_a_log() {
        let mut log: String = (1..=200).map(|i| format!("step {i:03} ok\n")).collect();
        log.push_str("error: build failed (exit status 1)\n");
        // 400 bytes: 320 for the head (26 lines of 12 bytes), 80 for the tail.
        let e = render(&log, &limits(400, 0.2)).unwrap();
        assert_eq!((e.head_bytes, e.head_end_line, e.next_line), (312, 26, 27));
        assert_eq!(
            e.tail,
            Some(TailInfo {
                bytes: 72,
                start_line: 198,
                byte_offset: log.len() - 72
            })
        );
        assert!(e.text.ends_with(
            "\"start_line\": 27}.\n\
             The last 72 bytes (from line 198) are shown below, after <<<TAIL>>>, so the end \
             of the output (exit status, errors) stays visible.\n\
             <<<TAIL>>>\n\
             step 198 ok\nstep 199 ok\nstep 200 ok\nerror: build failed (exit status 1)\n"
        ));
    }

    #[test]
    fn tail_cuts_inside_an_oversized_last_line() {
        let text = format!("head\n{}", "é".repeat(100));
        let e = render(&text, &limits(20, 0.5)).unwrap();
        // 10 bytes of tail budget end on a char boundary inside the 200-byte last line.
        assert_eq!(
            e.tail,
            Some(TailInfo {
                bytes: 10,
                start_line: 2,
                byte_offset: text.len() - 10
            })
        );
        assert_eq!(e.head_bytes, 5);
    }

    #[test]
    fn marker_in_the_output_is_just_text() {
        let text = format!("{TRUNCATION_MARKER}\n").repeat(1000);
        let e = render(&text, &limits(3000, 0.0)).unwrap();
        assert_eq!((e.head_bytes, e.next_line), (2992, 188));
        let claim = "contains 1000 lines in total (16000 bytes)";
        assert!(e.text.contains(claim));
    }

    #[test]
    fn zwj_emoji_is_not_split() {
        let family = "👨\u{200D}👩\u{200D}👧"; // 18 bytes, one grapheme cluster
        let text = family.repeat(10);
        // A cut at 25 would keep 👨 + ZWJ of the second family.
        let e = render(&text, &limits(25, 0.0)).unwrap();
        assert_eq!(e.head_bytes, 18);
        // When the budget is smaller than one cluster, the char boundary is the fallback.
        let e = render(&text, &limits(9, 0.0)).unwrap();
        assert_eq!(e.head_bytes, 7);
    }

    #[test]
    fn tail_does_not_start_inside_a_zwj_emoji() {
        let family = "👨\u{200D}👩\u{200D}👧";
        let text = format!("head\n{}", family.repeat(10));
        // 25 bytes of tail budget would start at the ZWJ after 👩 in the ninth family.
        let e = render(&text, &limits(50, 0.5)).unwrap();
        assert_eq!(e.tail.map(|t| t.bytes), Some(18));
        assert!(e.text.ends_with(&format!("{TAIL_MARKER}\n{family}")));
        assert_eq!(e.head_bytes, 5);
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,20}",
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            Just(String::new()),
            "[你好世界中文日本語]{1,12}",
            Just("👨\u{200D}👩\u{200D}👧".to_owned()),
            Just("e\u{301}".to_owned()),
            Just("🇫🇷".to_owned()),
            Just(TRUNCATION_MARKER.to_owned()),
            Just(TAIL_MARKER.to_owned()),
            "\\PC{0,30}",
            "[xé]{100,2500}",
        ]
    }

    fn arb_text() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::collection::vec(fragment(), 0..40).prop_map(|v| v.concat()),
            any::<String>(),
        ]
    }

    /// The number right after `label` in `notice`.
    fn number_after(notice: &str, label: &str) -> usize {
        let rest = &notice[notice.find(label).unwrap_or_else(|| panic!("{label:?}")) + label.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest[..digits].parse().unwrap()
    }

    fn line_of(text: &str, offset: usize) -> usize {
        1 + count_newlines(&text[..offset])
    }

    fn check(text: &str, l: &ExcerptLimits) {
        let stats = TextStats::of(text);
        let file = FileRef {
            path: PATH,
            root: None,
            id: None,
        };
        let got = render_excerpt(text, &stats, l, &file);
        assert_eq!(got, render_excerpt(text, &stats, l, &file), "deterministic");
        assert_eq!(got.is_none(), text.len() <= l.max_bytes + l.slack_bytes);
        let Some(e) = got else { return };
        let (head_budget, tail_budget) = (l.head_budget(), l.tail_budget());
        let tail_bytes = e.tail.map_or(0, |t| t.bytes);
        assert!(e.head_bytes + tail_bytes <= l.max_bytes);
        assert!(e.head_bytes <= head_budget && tail_bytes <= tail_budget);

        let head = &text[..e.head_bytes];
        assert!(e.text.starts_with(head));
        assert_eq!(e.next_byte_offset, e.head_bytes);
        assert_eq!(format!("{head}{}", &text[e.next_byte_offset..]), text);
        assert_eq!(e.next_line, line_of(text, e.next_byte_offset));
        let first_line_fits = text.find('\n').is_some_and(|nl| nl < head_budget);
        assert_eq!(head.ends_with('\n'), first_line_fits);
        if first_line_fits {
            assert_eq!(e.next_line, e.head_end_line + 1);
            // As many whole lines as fit.
            let next_nl = text[e.head_bytes..].find('\n').map(|p| e.head_bytes + p + 1);
            assert!(next_nl.is_none_or(|end| end > head_budget));
        } else {
            assert_eq!(e.head_end_line, usize::from(e.head_bytes > 0));
        }

        let notice_start = e.head_bytes + usize::from(!head.is_empty() && !head.ends_with('\n'));
        let mut notice_end = e.text.len();
        match e.tail {
            Some(t) => {
                let tail = &text[t.byte_offset..];
                assert_eq!(t.bytes, tail.len());
                assert!(t.byte_offset > e.head_bytes, "middle is never empty");
                assert_eq!(t.start_line, line_of(text, t.byte_offset));
                let marker = format!("\n{TAIL_MARKER}\n");
                assert!(e.text.ends_with(&format!("{marker}{tail}")));
                notice_end -= marker.len() + tail.len();
                if text.as_bytes()[t.byte_offset - 1] == b'\n' {
                    // As many whole lines as fit.
                    let prev = text[..t.byte_offset - 1].rfind('\n').map_or(0, |p| p + 1);
                    assert!(text.len() - prev > tail_budget);
                } else {
                    let bytes = &text.as_bytes()[..text.len() - 1];
                    let last_line = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                    assert!(text.len() - last_line > tail_budget);
                }
            }
            None => assert!(tail_budget == 0 || text.ceil_char_boundary(text.len() - tail_budget) == text.len()),
        }

        let notice = &e.text[notice_start..notice_end];
        assert!(notice.starts_with(&format!("{TRUNCATION_MARKER}\nThe output above was truncated.\n")));
        assert_eq!(number_after(notice, "contains "), stats.total_lines);
        assert_eq!(number_after(notice, "lines in total ("), text.len());
        assert_eq!(number_after(notice, "covers the next "), e.head_bytes);
        assert_eq!(
            number_after(notice, "file_path=\"tool_result/a b.txt\" start_line="),
            e.next_line
        );
        if first_line_fits {
            assert_eq!(number_after(notice, "bytes (lines 1-"), e.head_end_line);
            assert_eq!(number_after(notice, "\"start_line\": "), e.next_line);
        } else {
            assert!(notice.contains("(the first part of line 1, which is longer than the limit)"));
            assert_eq!(number_after(notice, "\"byte_offset\": "), e.head_bytes);
        }
        if let Some(t) = e.tail {
            assert_eq!(number_after(notice, "The last "), t.bytes);
            assert_eq!(number_after(notice, "bytes (from line "), t.start_line);
        } else {
            assert!(!notice.contains(TAIL_MARKER));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn excerpt_invariants(
            text in arb_text(),
            max_bytes in 0usize..5000,
            slack_bytes in 0usize..200,
            tail_ratio in 0.0f64..0.5,
        ) {
            check(&text, &ExcerptLimits { max_bytes, slack_bytes, tail_ratio });
        }

        #[test]
        fn excerpt_invariants_small_budgets(
            text in arb_text(),
            max_bytes in 0usize..64,
            tail_ratio in prop_oneof![Just(0.0), Just(0.5), 0.0f64..0.5],
        ) {
            check(&text, &ExcerptLimits { max_bytes, slack_bytes: 0, tail_ratio });
        }
    }
}
