//! Reading a summary back from Markdown: a model's reply, or a summary pasted into a
//! conversation (satchel's own rendering parses back to the same summary).
//!
//! The `##` headings of [`super::render`] (and their Chinese and near-synonym forms) open the
//! lists of [`Field`]; under Goal, request lines (`(message 12, …) text`) become requests;
//! lines that count omitted items are skipped (the count lives in the archive, not here).

use std::collections::HashSet;

use satchel_protocol::{ArchiveLine, CompactSummary, UserRequest};

use super::fields::Field;
use super::render::{OMITTED_OPENING, REFERENCES_OPENING, REQUEST_FILE_OPENING, leading_code_span};

/// The section a heading opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before the first heading, or under a heading that is not a summary section.
    Other,
    List(Field),
    /// `## Progress` itself: checked items are done, others in progress.
    Progress,
    Critical,
}

fn section_of(name: &str) -> Option<Section> {
    Some(match name {
        "goal" | "goals" | "目标" => Section::List(Field::Goal),
        n if n.starts_with("constraints") || n.starts_with("约束") => Section::List(Field::Constraints),
        "progress" | "进展" => Section::Progress,
        "done" | "completed" | "已完成" => Section::List(Field::Done),
        "in progress" | "进行中" => Section::List(Field::InProgress),
        "blocked" | "blockers" | "阻塞" => Section::List(Field::Blocked),
        "key decisions" | "decisions" | "关键决策" => Section::List(Field::Decisions),
        "next steps" | "下一步" => Section::List(Field::NextSteps),
        "critical context" | "关键上下文" => Section::Critical,
        _ => return None,
    })
}

/// The labels [`render_summary`] writes under `## Critical Context` (and near synonyms).
fn label_of(name: &str) -> Option<Field> {
    Some(match name {
        "files modified" | "modified files" | "files changed" | "changed files" | "files created or modified" => {
            Field::FilesModified
        }
        "files read" | "read files" | "files referenced" => Field::FilesRead,
        "commands run" | "commands" | "commands executed" => Field::Commands,
        "errors seen" | "errors" | "error messages" => Field::Errors,
        "notes" => Field::Notes,
        "findings" | "key findings" => Field::Findings,
        _ => return None,
    })
}

/// Heading or label text, lower-cased, without emphasis, colons and surrounding blanks.
fn normalize(name: &str) -> String {
    name.trim()
        .trim_matches(|c: char| c == '*' || c == '_' || c == ':' || c == '：' || c.is_whitespace())
        .to_lowercase()
}

/// Why a reply is not a summary, or the summary it holds.
pub fn parse_summary(reply: &str) -> Result<CompactSummary, String> {
    // Reasoning models may prepend their thinking.
    let body = match reply.rfind("</think>") {
        Some(at) => &reply[at + "</think>".len()..],
        None => reply,
    };
    if body.trim().is_empty() {
        return Err("empty reply".into());
    }
    if !body.contains("##") {
        return Err("invalid format (no ## heading)".into());
    }
    let mut parser = Parser::default();
    for line in body.lines() {
        parser.line(line);
    }
    if !parser.saw_goal_or_progress {
        return Err("invalid format (no ## Goal or ## Progress section)".into());
    }
    let mut summary = parser.summary;
    for field in Field::ALL {
        dedup(field.of_mut(&mut summary));
    }
    Ok(summary)
}

/// Reads the model's Markdown line by line into a summary.
#[derive(Default)]
struct Parser {
    summary: CompactSummary,
    section: Option<Section>,
    /// Critical-context sub-list in force and the indentation of its label (`None` when the
    /// label was a heading, which holds until the next heading).
    label: Option<(Field, Option<usize>)>,
    /// The list whose last item a non-bullet line continues (reset by a blank line).
    open: Option<Field>,
    saw_goal_or_progress: bool,
    /// Indentation of the `Demonstrations` label while its items are read.
    demonstrations: Option<usize>,
    /// The archive file named above the request lines.
    request_file: Option<String>,
}

impl Parser {
    fn line(&mut self, line: &str) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("```") || line.starts_with(OMITTED_OPENING) {
            self.open = None;
            return;
        }
        if trimmed.starts_with('#') {
            self.heading(trimmed.trim_start_matches('#'));
            self.demonstrations = None;
            return;
        }
        let section = match self.section {
            None | Some(Section::Other) => return,
            Some(section) => section,
        };
        let indent: usize = line
            .chars()
            .take_while(|c| c.is_whitespace())
            .map(|c| if c == '\t' { 4 } else { 1 })
            .sum();
        let (bullet, content) = strip_bullet(trimmed);
        if bullet && content.starts_with("… ") {
            // A count of omitted items: the items themselves are in the archive.
            self.open = None;
            return;
        }
        let (checked, content) = strip_checkbox(content);
        let field = match section {
            Section::Other => return,
            Section::List(Field::Goal) if !bullet && content.starts_with(REQUEST_FILE_OPENING) => {
                self.request_file = leading_code_span(&content[REQUEST_FILE_OPENING.len()..]).map(|(file, _)| file);
                self.open = None;
                return;
            }
            Section::List(Field::Goal) if bullet && content.starts_with("(message") => {
                let mut requests = parse_requests(content, false);
                for request in &mut requests {
                    if let (Some(archived), Some(file)) = (&mut request.archived, &self.request_file)
                        && archived.file.is_empty()
                    {
                        archived.file = file.clone();
                    }
                }
                self.summary.requests.extend(requests);
                self.open = None;
                return;
            }
            Section::List(field) => field,
            Section::Progress if checked == Some(true) => Field::Done,
            Section::Progress => Field::InProgress,
            Section::Critical if bullet && content.to_lowercase().starts_with("demonstrations") => {
                self.demonstrations = Some(indent);
                self.label = None;
                self.open = None;
                return;
            }
            Section::Critical if bullet && self.demonstrations.is_some_and(|at| indent > at) => {
                self.summary.requests.extend(parse_requests(content, true));
                self.open = None;
                return;
            }
            Section::Critical => {
                self.demonstrations = None;
                if bullet && let Some((field, rest)) = label_line(content) {
                    let nested = matches!(self.label, Some((_, Some(at))) if indent > at);
                    if !nested {
                        self.label = Some((field, Some(indent)));
                        self.open = None;
                        self.push_inline(field, rest);
                        return;
                    }
                }
                match self.label {
                    Some((field, None)) => field,
                    Some((field, Some(at))) if indent > at => field,
                    _ => {
                        self.label = None;
                        Field::Notes
                    }
                }
            }
        };
        if !bullet
            && let Some(open) = self.open
            && let Some(last) = open.of_mut(&mut self.summary).last_mut()
        {
            last.push(' ');
            last.push_str(content);
            return;
        }
        self.push(field, content);
    }

    fn heading(&mut self, name: &str) {
        let name = normalize(name);
        self.open = None;
        if let Some(section) = section_of(&name) {
            self.saw_goal_or_progress |= matches!(
                section,
                Section::List(Field::Goal | Field::Done | Field::InProgress | Field::Blocked) | Section::Progress
            );
            self.section = Some(section);
            self.label = None;
        } else if self.section == Some(Section::Critical)
            && let Some(field) = label_of(&name)
        {
            self.label = Some((field, None));
        } else {
            self.section = Some(Section::Other);
            self.label = None;
        }
    }

    /// The rest of a `Files modified: …` line: nothing, a list of code spans, or one item.
    fn push_inline(&mut self, field: Field, rest: &str) {
        let rest = rest.trim();
        if rest.is_empty() || is_none(rest) {
            return;
        }
        match code_span_list(rest) {
            Some(items) => {
                for item in items {
                    self.push(field, &item);
                }
            }
            None => self.push(field, rest),
        }
    }

    fn push(&mut self, field: Field, content: &str) {
        let content = content.trim();
        if content.is_empty() || is_none(content) {
            self.open = None;
            return;
        }
        let item = if field.is_identifier() {
            match leading_code_span(content) {
                Some((inner, _)) if !inner.trim().is_empty() => inner,
                _ => content.to_owned(),
            }
        } else {
            content.to_owned()
        };
        field.of_mut(&mut self.summary).push(item);
        self.open = Some(field);
    }
}

/// The requests of a request line: `(message 12, 3842 chars, `dialog/…` line 40) text`, or the
/// references line `(messages 3, 17: earlier requests, in the archive)`.
fn parse_requests(content: &str, demonstration: bool) -> Vec<UserRequest> {
    if let Some(rest) = content.strip_prefix(REFERENCES_OPENING) {
        let list = rest.split(':').next().unwrap_or("");
        return list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .map(|index| UserRequest {
                text: String::new(),
                chars: 0,
                index,
                archived: None,
                demonstration,
            })
            .collect();
    }
    let Some(rest) = content.strip_prefix("(message ") else {
        return Vec::new();
    };
    let Some(close) = rest.find(") ") else {
        return Vec::new();
    };
    let (origin, text) = (&rest[..close], rest[close + 2..].trim());
    let mut parts = origin.split(", ");
    let Some(index) = parts.next().and_then(|n| n.trim().parse().ok()) else {
        return Vec::new();
    };
    let mut request = UserRequest {
        text: text.to_owned(),
        chars: text.chars().count(),
        index,
        archived: None,
        demonstration,
    };
    for part in parts {
        if let Some(chars) = part.strip_suffix(" chars").and_then(|n| n.parse().ok()) {
            request.chars = chars;
        } else if let Some((file, rest)) = leading_code_span(part)
            && let Some(line) = rest.trim().strip_prefix("line ").and_then(|n| n.parse().ok())
        {
            request.archived = Some(ArchiveLine { file, line });
        } else if let Some(line) = part.strip_prefix("line ").and_then(|n| n.parse().ok()) {
            // The file is named once above the list.
            request.archived = Some(ArchiveLine {
                file: String::new(),
                line,
            });
        }
    }
    vec![request]
}

/// `(bullet?, text)`: strips `- `, `* `, `+ `, `1. ` or `1) `.
fn strip_bullet(line: &str) -> (bool, &str) {
    for marker in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return (true, rest.trim_start());
        }
    }
    if matches!(line, "-" | "*" | "+") {
        return (true, "");
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits <= 3 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return (true, rest.trim_start());
        }
    }
    (false, line)
}

/// `(Some(checked), text)` for `[x] text` / `[ ] text`.
fn strip_checkbox(text: &str) -> (Option<bool>, &str) {
    for (marker, checked) in [("[x]", true), ("[X]", true), ("[ ]", false)] {
        if let Some(rest) = text.strip_prefix(marker) {
            return (Some(checked), rest.trim_start());
        }
    }
    (None, text)
}

/// `Files modified: rest` → the list and `rest`.
fn label_line(text: &str) -> Option<(Field, &str)> {
    let at = text.find([':', '：'])?;
    let field = label_of(&normalize(&text[..at]))?;
    let colon = text[at..].chars().next().map_or(1, char::len_utf8);
    Some((field, text[at + colon..].trim_start_matches(['*', '_'])))
}

/// `(none)`, `none`, `N/A` and the like, in any emphasis.
fn is_none(text: &str) -> bool {
    let t = text
        .trim_matches(|c: char| c == '*' || c == '_' || c == '`' || c == '.' || c == '"' || c.is_whitespace())
        .to_lowercase();
    matches!(
        t.as_str(),
        "(none)" | "none" | "n/a" | "(n/a)" | "无" | "(无)" | "（无）" | "（none）" | "-" | "—"
    ) || t.starts_with("(none)")
}

/// `` `a`, `b` and `c` `` → `[a, b, c]`; `None` when there is text besides the spans.
fn code_span_list(text: &str) -> Option<Vec<String>> {
    let mut items = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([',', ';', '，', '；', ' ']);
        rest = rest.strip_prefix("and ").unwrap_or(rest);
        if rest.is_empty() {
            return if items.is_empty() { None } else { Some(items) };
        }
        let (item, after) = leading_code_span(rest)?;
        items.push(item);
        rest = after;
    }
}

fn dedup(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}
