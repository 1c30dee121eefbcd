//! The default summariser: deterministic extraction, no model.
//!
//! Compaction must work offline and must never fail for want of a model, and what an agent
//! most needs after compaction is exact: the user's words, the files it touched, the commands
//! it ran and the errors it saw. Those are copied verbatim rather than paraphrased, because a
//! paraphrased path or error line is worse than none. Prose sections (decisions, intent, next
//! steps) are the assistant's own sentences, picked by cue words.
//!
//! Merging is incremental: the previous summary is kept item by item and the new span's items
//! are appended, so nothing is re-summarised and repeated compactions do not drift.
//!
//! The budget is enforced by dropping whole items, lowest value first, and the identifiers of
//! the newest span last: they are what the agent was just working with. Finding how many to
//! drop takes one estimate from per-item sizes and a few exact renders (a bisection), never a
//! render per dropped item.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

use satchel_protocol::{ArchiveRange, CompactSummary, CriticalContext, MessageFormat};
use serde_json::Value;

use super::render::{SUMMARY_HEADING, budget_before_next_range, code_span, render_summary};
use super::{SummarizeError, Summarizer, SummaryInput};
use crate::format::{self, ToolCall};
use crate::tokens::TokenCounter;

/// The built-in summariser: copies requests, constraints, paths, commands and error lines
/// verbatim from the span and merges them into the previous summary, within the token budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl Summarizer for ExtractiveSummarizer {
    fn summarize(&self, input: &SummaryInput<'_>) -> Result<CompactSummary, SummarizeError> {
        let span = Extract::from_messages(input.messages, input.format);
        let mut draft = Draft::merge(input.previous, span);
        if let Some(instruction) = input.instruction {
            draft.restrict(instruction);
        }
        draft.instruction = input.instruction.map(str::to_owned);
        Ok(draft.fit(input.max_tokens, input.counter))
    }
}

/// Longest command kept: the retention check compares the first line cut to this many chars.
const COMMAND_CHARS: usize = 200;
const ERROR_CHARS: usize = 300;
const SENTENCE_CHARS: usize = 300;
const PATH_CHARS: usize = 300;
const REQUEST_CHARS: usize = 600;
const STEP_CHARS: usize = 400;
/// Done items only remind what happened; the full command is under "Commands run".
const DONE_COMMAND_CHARS: usize = 80;
/// Cap for items carried over from a previous summary, which another backend may have written.
const ITEM_CHARS: usize = 600;
/// How many of the most recent failing results may be reported as blocked.
const BLOCKED_LAST: usize = 3;
const MAX_STEPS: usize = 5;
/// Shorter user messages ("ok", "go on") are replies, not new goals.
const MIN_REQUEST_WORDS: usize = 3;
/// Tokens a list item costs beyond its text (bullet, indentation, code fence, newline).
const ITEM_OVERHEAD_TOKENS: u64 = 3;

const CONSTRAINT_CUES: &[&str] = &[
    "must",
    "don't",
    "do not",
    "never",
    "always",
    "should",
    "only",
    "prefer",
    "avoid",
    "without",
    "keep",
    "ensure",
    "need to",
    "make sure",
];
const DECISION_CUES: &[&str] = &[
    "i'll",
    "i will",
    "let's",
    "let us",
    "we should",
    "decided",
    "decide",
    "instead",
    "because",
    "the fix",
    "the issue is",
    "the problem is",
    "root cause",
];
const INTENT_CUES: &[&str] = &[
    "i'll",
    "i will",
    "let's",
    "let me",
    "i'm going to",
    "i am going to",
    "we need to",
    "next",
];
const ERROR_CUES: &[&str] = &[
    "error",
    "exception",
    "traceback",
    "failed",
    "fatal",
    "panicked",
    "cannot",
    "not found",
    "no such file",
];
/// Tool names that change files.
const EDIT_TOOL_CUES: &[&str] = &["write", "edit", "patch", "replace", "create", "insert"];
/// Sub-commands of editor tools (Anthropic's text editor) that only look.
const VIEW_SUBCOMMANDS: &[&str] = &["view", "read", "show", "list", "cat"];
/// Tool names that only look, so a successful call is not worth a "done" line.
const READ_TOOL_CUES: &[&str] = &["read", "view", "list", "search", "find", "get", "open", "grep", "glob"];
/// Shell and SWE-agent commands that only look.
const READ_COMMANDS: &str = "open goto scroll_up scroll_down search_file search_dir find_file ls cat head tail grep rg find \
    pwd cd less more wc which file stat tree nl";
/// Extensions that make a dotted name a file rather than, say, `self.value` or `java.lang`.
const FILE_EXTENSIONS: &str = "7z a asm avi bak bash bat bib bin bmp bz2 c cc cfg cjs class clj cmake cmd conf cpp crt cs \
    csproj css csv cxx dart dat db deb diff dll doc docx dockerfile egg ejs el env erb erl ex exe \
    exs fish flac gif go gql gradle graphql gz h h5 hbs hcl hh hpp hs htm html ico img in ini ipynb \
    iso j2 jar java jpeg jpg js json jsonl jsx key kt kts less lock log lua m m4v md mdx mjs mk mkv \
    ml mli mov mp3 mp4 mpeg nix npy npz o odt ogg onnx orig otf out parquet patch pcap pcapng pdf \
    pem php pickle pid pkl pl plist pm png properties proto ps1 pt pth py pyc pyi pyx r rake rb rej \
    rpm rs rst s sass scala scss sh so sol sql sqlite sqlite3 svelte svg swift swp tar tex tf tfvars \
    tgz tmp toml tpl ts tsv tsx ttf txt typed v vim vue war wasm wav webm webp whl woff woff2 xls \
    xlsx xml xz yaml yml zig zip zsh";

/// Names after the dot of well-known dotfiles; other `.name` tokens are usually method calls.
const DOTFILES: &str = "babelrc bashrc dockerignore editorconfig env eslintrc gitattributes gitignore gitmodules npmrc \
    prettierrc profile vimrc zshrc";

/// A list that keeps the first occurrence of each non-empty string, in order.
#[derive(Debug, Default)]
struct Unique {
    items: Vec<String>,
    seen: HashSet<String>,
}

impl Unique {
    fn push(&mut self, item: String) {
        if !item.is_empty() && !self.seen.contains(&item) {
            self.seen.insert(item.clone());
            self.items.push(item);
        }
    }
}

/// What one span says, before merging.
#[derive(Debug, Default)]
struct Extract {
    requests: Unique,
    constraints: Unique,
    /// Chronological; merged newest first.
    decisions: Unique,
    done: Unique,
    in_progress: Option<String>,
    blocked: Vec<String>,
    next_steps: Vec<String>,
    files_read: Unique,
    files_modified: Unique,
    commands: Unique,
    errors: Unique,
    /// Dotted names that look like code identifiers rather than files (`this.foo`), kept as
    /// notes because the user or a tool call named them exactly.
    identifiers: Unique,
}

/// What a call did, remembered until its result arrives.
#[derive(Debug)]
struct CallFacts {
    key: String,
    modified: Vec<String>,
    read_only: bool,
}

/// How a result ended, for the blocked list.
#[derive(Debug)]
struct Outcome {
    key: Option<String>,
    error: Option<String>,
}

impl Extract {
    fn from_messages(messages: &[Value], format: MessageFormat) -> Extract {
        let mut ex = Extract::default();
        let mut calls: HashMap<String, CallFacts> = HashMap::new();
        let mut current_file: Option<String> = None;
        let mut outcomes: Vec<Outcome> = Vec::new();
        let mut last_assistant_text: Option<String> = None;
        let mut pending_request: Option<&str> = None;
        for message in messages {
            match message.get("role").and_then(Value::as_str) {
                Some("user") => {
                    // A summary message compacted again is already merged through `previous`.
                    for text in text_blocks(message) {
                        if !text.trim().is_empty() && !text.starts_with(SUMMARY_HEADING) {
                            ex.user_text(text);
                            pending_request = Some(text);
                        }
                    }
                    ex.results(message, format, &calls, &mut outcomes);
                }
                Some("tool") => ex.results(message, format, &calls, &mut outcomes),
                Some("assistant") => {
                    let text = text_blocks(message).collect::<Vec<_>>().join("\n");
                    if !text.trim().is_empty() {
                        ex.assistant_text(&text);
                        last_assistant_text = Some(text);
                    }
                    pending_request = None;
                    for call in format::tool_calls(message, format) {
                        let facts = ex.call(&call, &mut current_file);
                        calls.insert(call.id, facts);
                    }
                }
                _ => {}
            }
        }
        ex.blocked = blocked(&outcomes);
        ex.next_steps = next_steps(last_assistant_text.as_deref(), pending_request);
        ex
    }

    fn user_text(&mut self, text: &str) {
        self.requests.push(cut_words(&collapse_ws(text), REQUEST_CHARS));
        for sentence in sentences(text) {
            if is_prose(&sentence) && has_cue(&sentence, CONSTRAINT_CUES) {
                self.constraints.push(cut_words(&sentence, SENTENCE_CHARS));
            }
        }
        for token in path_tokens(text) {
            self.reference(token, &[]);
        }
    }

    fn assistant_text(&mut self, text: &str) {
        for sentence in sentences(text).into_iter().filter(|s| is_prose(s)) {
            if has_cue(&sentence, DECISION_CUES) {
                self.decisions.push(cut_words(&sentence, SENTENCE_CHARS));
            }
            if has_cue(&sentence, INTENT_CUES) {
                self.in_progress = Some(cut_words(&sentence, SENTENCE_CHARS));
            }
        }
    }

    /// Files a path-like token into read, modified or identifiers.
    fn reference(&mut self, token: &str, modified: &[String]) {
        let Some(kind) = path_kind(token) else { return };
        let path = cut_chars(token, PATH_CHARS).0.to_owned();
        if modified.contains(&path) {
            return; // listed under modified by the caller
        }
        match kind {
            PathKind::File => self.files_read.push(path),
            PathKind::Identifier => self.identifiers.push(path),
        }
    }

    fn call(&mut self, call: &ToolCall, current_file: &mut Option<String>) -> CallFacts {
        let args: Value =
            serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()));
        let name = call.name.to_ascii_lowercase();
        let editor = EDIT_TOOL_CUES.iter().any(|cue| name.contains(cue));
        let shell = if editor { None } else { shell_command(&args) };
        let mut strings = Vec::new();
        collect_strings(&args, &mut strings);
        let whole_paths: Vec<&str> = strings
            .iter()
            .copied()
            .filter(|s| !s.chars().any(char::is_whitespace) && path_kind(s) == Some(PathKind::File))
            .collect();

        let mut modified = Vec::new();
        let read_only;
        let key = match &shell {
            Some(command) => {
                modified = shell_modifications(command, current_file);
                read_only = modified.is_empty() && is_read_command(command);
                command_key(command)
            }
            None => {
                let viewing = args
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| VIEW_SUBCOMMANDS.contains(&c));
                if editor && !viewing {
                    match whole_paths.first() {
                        Some(first) => {
                            modified.extend(whole_paths.iter().map(|p| (*p).to_owned()));
                            *current_file = Some((*first).to_owned());
                        }
                        // An editor call that names no file edits the open one (SWE-agent).
                        None => modified.extend(current_file.clone()),
                    }
                } else if let Some(first) = whole_paths.first()
                    && (viewing || name.contains("open"))
                {
                    *current_file = Some((*first).to_owned());
                }
                read_only = modified.is_empty() && (viewing || READ_TOOL_CUES.iter().any(|cue| name.contains(cue)));
                tool_key(&call.name, &args)
            }
        };
        for s in &strings {
            if whole_paths.contains(s) {
                self.reference(s, &modified);
            } else {
                for token in path_tokens(s) {
                    self.reference(token, &modified);
                }
            }
        }
        for path in &modified {
            self.files_modified.push(cut_chars(path, PATH_CHARS).0.to_owned());
        }
        self.commands.push(key.clone());
        CallFacts {
            key,
            modified,
            read_only,
        }
    }

    fn results(
        &mut self,
        message: &Value,
        format: MessageFormat,
        calls: &HashMap<String, CallFacts>,
        outcomes: &mut Vec<Outcome>,
    ) {
        if !format::has_tool_result(message, format) {
            return;
        }
        let texts = format::result_texts(message, format);
        for id in format::result_ids(message, format) {
            let text = texts
                .iter()
                .filter(|t| t.call_id.as_deref().unwrap_or("") == id)
                .filter_map(|t| message.pointer(&t.pointer).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            let error = first_error_line(&text, is_error_result(message, &id));
            let facts = calls.get(&id);
            match (&error, facts) {
                (Some(line), _) => self.errors.push(line.clone()),
                (None, Some(facts)) => self.succeeded(facts),
                (None, None) => {}
            }
            outcomes.push(Outcome {
                key: facts.map(|f| f.key.clone()),
                error,
            });
        }
    }

    fn succeeded(&mut self, facts: &CallFacts) {
        if !facts.modified.is_empty() {
            for path in &facts.modified {
                self.done.push(format!("Modified {}", code_span(path)));
            }
        } else if !facts.read_only {
            self.done
                .push(format!("Ran {}", code_span(&cut_words(&facts.key, DONE_COMMAND_CHARS))));
        }
    }
}

fn text_blocks(message: &Value) -> impl Iterator<Item = &str> {
    let content = message.get("content");
    let whole = content.and_then(Value::as_str);
    let parts = content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str));
    whole.into_iter().chain(parts)
}

fn is_error_result(message: &Value, id: &str) -> bool {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|b| {
            b.get("tool_use_id").and_then(Value::as_str) == Some(id)
                && b.get("is_error").and_then(Value::as_bool) == Some(true)
        })
}

/// Phrases that contain an error cue but report success (`test result: ok. 12 passed; 0 failed`).
const SUCCESS_PHRASES: &[&str] = &[
    "0 failed",
    "0 errors",
    "0 error",
    "no errors",
    "errors: 0",
    "failed: 0",
    "failures: 0",
];

/// Whether a line names an error, once success reports such as "0 failed" are discounted.
fn reads_like_error(line: &str) -> bool {
    let mut lower = line.to_ascii_lowercase();
    for phrase in SUCCESS_PHRASES {
        // Only a whole count of zero: "10 failed" is a failure.
        while let Some(at) = lower
            .match_indices(phrase)
            .map(|(i, _)| i)
            .find(|&i| !lower[..i].ends_with(|c: char| c.is_ascii_digit()))
        {
            lower.replace_range(at..at + phrase.len(), " ");
        }
    }
    ERROR_CUES.iter().any(|cue| lower.contains(cue))
}

/// Whether some line of `text` may read like an error: one pass over the whole text, which
/// settles most tool outputs at once instead of lowering and searching them line by line.
///
/// A line can only read like an error if it holds an error cue, or a success phrase whose
/// removal joins two halves of one; every success phrase but "failures: 0" holds a cue.
fn may_read_like_error(text: &str) -> bool {
    static CUES: LazyLock<AhoCorasick> = LazyLock::new(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(ERROR_CUES.iter().chain(&["failures: 0"]))
            .expect("a handful of literal patterns always build")
    });
    CUES.is_match(text)
}

/// The first line that reads like an error, or the first line at all when the tool flagged
/// the result as an error; trimmed and cut to [`ERROR_CHARS`].
fn first_error_line(text: &str, flagged: bool) -> Option<String> {
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let first = lines.clone().next();
    let error = if may_read_like_error(text) {
        lines.find(|line| reads_like_error(line))
    } else {
        None
    };
    error
        .or(first.filter(|_| flagged))
        .map(|line| cut_chars(line, ERROR_CHARS).0.to_owned())
}

/// Failures among the last [`BLOCKED_LAST`] failing results that no later run of the same
/// command fixed.
fn blocked(outcomes: &[Outcome]) -> Vec<String> {
    let mut succeeded: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    let mut failures = 0;
    for outcome in outcomes.iter().rev() {
        let key = outcome.key.as_deref();
        match &outcome.error {
            None => {
                succeeded.extend(key);
            }
            Some(error) => {
                failures += 1;
                if failures > BLOCKED_LAST {
                    break;
                }
                match key {
                    Some(key) if succeeded.contains(key) => {}
                    Some(key) => out.push(format!(
                        "{} failed: {error}",
                        code_span(&cut_words(key, DONE_COMMAND_CHARS))
                    )),
                    None => out.push(error.clone()),
                }
            }
        }
    }
    out.reverse();
    let mut seen = HashSet::new();
    out.retain(|item| seen.insert(item.clone()));
    out
}

/// The plan in the last assistant text (its list items, or its prose), and the user's last
/// request when no assistant message followed it.
fn next_steps(last_assistant_text: Option<&str>, pending_request: Option<&str>) -> Vec<String> {
    let mut steps = Vec::new();
    if let Some(text) = last_assistant_text {
        let lines: Vec<&str> = unfenced_lines(text).filter(|l| !is_label(l)).collect();
        let listed: Vec<&str> = lines.iter().filter_map(|l| strip_list_marker(l)).collect();
        if listed.len() >= 2 {
            steps.extend(
                listed
                    .iter()
                    .take(MAX_STEPS)
                    .map(|l| cut_words(&collapse_ws(l), STEP_CHARS)),
            );
        } else if !lines.is_empty() {
            steps.push(cut_words(&collapse_ws(&lines.join(" ")), STEP_CHARS));
        }
    }
    if let Some(request) = pending_request {
        steps.push(format!(
            "Answer the user's latest request: {}",
            cut_words(&collapse_ws(request), STEP_CHARS)
        ));
    }
    steps
}

/// Section labels such as SWE-agent's `DISCUSSION` carry no content.
fn is_label(line: &str) -> bool {
    !line.contains(' ') && !line.chars().any(char::is_lowercase)
}

fn strip_list_marker(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) {
        return Some(rest);
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let rest = &line[digits..];
    (digits > 0)
        .then(|| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")))
        .flatten()
}

/// Trimmed, non-empty lines outside fenced code blocks.
fn unfenced_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter_map(move |line| {
        let line = line.trim();
        if line.starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced && !line.is_empty()).then_some(line)
    })
}

/// Sentences of prose, whitespace collapsed; code blocks are skipped.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in unfenced_lines(text) {
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, c) in line.char_indices() {
            if matches!(c, '.' | '!' | '?') && bytes.get(i + 1) == Some(&b' ') {
                push_sentence(&line[start..=i], &mut out);
                start = i + 2;
            }
        }
        push_sentence(&line[start.min(line.len())..], &mut out);
    }
    out
}

/// Sentences worth quoting read like prose: they start with a letter, have a few words, are
/// mostly letters, and do not stop mid-expression. This keeps numbered code listings and
/// argument lists that happen to contain "must" or "only" out of the constraints.
fn is_prose(sentence: &str) -> bool {
    let letters = sentence.chars().filter(|c| c.is_alphabetic() || *c == ' ').count();
    sentence.starts_with(char::is_alphabetic)
        && sentence.split(' ').count() >= 3
        && letters * 5 >= sentence.chars().count() * 4
        && !sentence.ends_with([',', '(', '{', '[', ';', '=', '+'])
}

fn push_sentence(text: &str, out: &mut Vec<String>) {
    let text = collapse_ws(text);
    if !text.is_empty() {
        out.push(text);
    }
}

/// True when `text` contains one of `cues` as whole words (a cue word may take an `s`, `d`,
/// `ed` or `ing` ending, so "prefers" and "avoiding" count). Case-insensitive.
fn has_cue(text: &str, cues: &[&str]) -> bool {
    let lower = text.to_lowercase().replace('\u{2019}', "'");
    cues.iter().any(|cue| {
        lower.match_indices(cue).any(|(at, _)| {
            let before_ok = lower[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
            let rest = &lower[at + cue.len()..];
            let word_end = rest.find(|c: char| !c.is_alphanumeric()).unwrap_or(rest.len());
            before_ok && matches!(&rest[..word_end], "" | "s" | "d" | "ed" | "ing")
        })
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathKind {
    File,
    Identifier,
}

/// The path-like tokens of a text, in order, exactly as this summariser lists them: files
/// (a `/` or a known extension) and dotted identifiers such as `self.value`.
///
/// Tokens are split at whitespace, quotes, brackets and shell punctuation, with trailing
/// sentence punctuation removed. Public so that retention checks can find paths the same way.
pub fn path_tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "'\"`()[]{}<>,;|&=\\".contains(c))
        .map(|t| t.trim_end_matches(['.', ',', ':', ';', '!', '?']))
        .filter(|t| path_kind(t).is_some())
}

/// Whether a token names a file (it has a `/` or a known extension) or a dotted identifier.
fn path_kind(token: &str) -> Option<PathKind> {
    if token.starts_with('-')
        || !token.chars().any(|c| c.is_ascii_alphabetic())
        || token
            .chars()
            .any(|c| !(c.is_alphanumeric() || "_.~/@+%#:-*".contains(c)))
    {
        return None;
    }
    if token.contains('/') {
        return Some(PathKind::File);
    }
    // `Foo.java:12:5` is still `Foo.java`.
    let base = token.trim_end_matches(|c: char| c.is_ascii_digit() || c == ':');
    let base = if base.len() < token.len() && token[base.len()..].starts_with(':') {
        base
    } else {
        token
    };
    let (stem, ext) = base.rsplit_once('.')?;
    let ext_ok = !ext.is_empty()
        && ext.len() <= 10
        && ext.starts_with(|c: char| c.is_ascii_alphabetic())
        && ext.chars().all(|c| c.is_ascii_alphanumeric());
    if !ext_ok || stem.ends_with('.') {
        return None;
    }
    let ext = ext.to_ascii_lowercase();
    if listed(FILE_EXTENSIONS, &ext) || (stem.is_empty() && listed(DOTFILES, &ext)) {
        Some(PathKind::File)
    } else {
        Some(PathKind::Identifier)
    }
}

/// Whether `word` is in a space-separated `list`.
fn listed(list: &str, word: &str) -> bool {
    list.split_ascii_whitespace().any(|w| w == word)
}

fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// The shell text of a call, from its `command`, `cmd` or `script` argument.
fn shell_command(args: &Value) -> Option<String> {
    ["command", "cmd", "script"]
        .iter()
        .find_map(|key| match args.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => Some(parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
            _ => None,
        })
}

/// A command as listed: its first non-empty line, at most [`COMMAND_CHARS`] chars, with ` …`
/// when lines or chars were left out.
fn command_key(command: &str) -> String {
    let mut lines = command.lines().skip_while(|l| l.trim().is_empty());
    let first = lines.next().unwrap_or("");
    let more = lines.any(|l| !l.trim().is_empty());
    let (cut, truncated) = cut_chars(first, COMMAND_CHARS);
    if truncated || more {
        format!("{cut} …")
    } else {
        cut.to_owned()
    }
}

/// A non-shell call as `name(key=value, …)`.
fn tool_key(name: &str, args: &Value) -> String {
    let inner = match args {
        // A sub-command (`command=view`) says most about the call, and a long argument listed
        // before it would push it past the cut.
        Value::Object(map) => map
            .iter()
            .filter(|(k, _)| *k == "command")
            .chain(map.iter().filter(|(k, _)| *k != "command"))
            .map(|(k, v)| match v {
                Value::String(s)
                    if !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || ",()\"".contains(c)) =>
                {
                    format!("{k}={s}")
                }
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    command_key(&format!("{name}({inner})"))
}

fn is_read_command(command: &str) -> bool {
    command
        .split_whitespace()
        .next()
        .is_some_and(|word| listed(READ_COMMANDS, word))
}

/// Files a shell command changes: SWE-agent's `edit` (the open file) and `create`, `sed -i`,
/// `touch`/`rm`/`mkdir`/`tee`, the target of `mv`/`cp`, and output redirections.
fn shell_modifications(command: &str, current_file: &mut Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    let first: Vec<&str> = command
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // SWE-agent's own commands take the whole turn; an `edit` body is file content, not shell.
    match first.as_slice() {
        ["edit", ..] => {
            out.extend(current_file.clone());
            return out;
        }
        ["create", path, ..] => {
            let path = unquote(path).to_owned();
            *current_file = Some(path.clone());
            out.push(path);
            return out;
        }
        ["open", path, ..] => {
            *current_file = Some(unquote(path).to_owned());
            return out;
        }
        _ => {}
    }
    for line in command.lines() {
        for segment in line.split(['|', ';', '&']) {
            let words: Vec<&str> = segment.split_whitespace().map(unquote).collect();
            let args: Vec<&str> = words.iter().skip(1).copied().filter(|w| !w.starts_with('-')).collect();
            match words.first().copied() {
                Some("sed") if words.iter().any(|w| w.starts_with("-i")) => {
                    // The first non-option argument is the script, unless given with -e.
                    let skip = usize::from(!words.contains(&"-e"));
                    out.extend(args.iter().skip(skip).map(|a| (*a).to_owned()));
                }
                Some("touch" | "rm" | "mkdir" | "tee") => out.extend(args.iter().map(|a| (*a).to_owned())),
                Some("mv" | "cp") => out.extend(args.last().map(|a| (*a).to_owned())),
                _ => {}
            }
            for (i, word) in words.iter().enumerate() {
                let target = match *word {
                    ">" | ">>" => words.get(i + 1).copied(),
                    w => w.find('>').map(|at| w[at..].trim_start_matches('>')),
                };
                if let Some(target) = target.filter(|t| {
                    t.chars().any(char::is_alphanumeric) && !t.starts_with(['&', '$', '(']) && !t.starts_with("/dev/")
                }) {
                    out.push(target.to_owned());
                }
            }
        }
        // Lines after a heredoc opener are its body, not shell.
        if line.contains("<<") {
            break;
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

fn unquote(word: &str) -> &str {
    word.trim_matches(|c| c == '\'' || c == '"')
}

fn collapse_ws(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max` chars of `text` (on a char boundary) and whether anything was cut.
fn cut_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

/// `text` cut to at most `max` chars, preferably at a space, with `…` when cut.
fn cut_words(text: &str, max: usize) -> String {
    let (cut, truncated) = cut_chars(text, max.saturating_sub(1));
    if !truncated {
        return text.to_owned();
    }
    let at_space = cut
        .rfind(' ')
        .filter(|&at| at >= cut.len() * 3 / 4)
        .unwrap_or(cut.len());
    format!("{}…", cut[..at_space].trim_end())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sec {
    Goal,
    Constraints,
    Done,
    InProgress,
    Blocked,
    Decisions,
    NextSteps,
    FilesModified,
    FilesRead,
    Commands,
    Errors,
    Notes,
}

const SECTION_COUNT: usize = 12;

#[derive(Debug, Clone)]
struct Item {
    text: String,
    /// Came from (or reappeared in) the newest span.
    fresh: bool,
}

/// A summary under construction: every item knows whether the newest span produced it.
#[derive(Debug)]
struct Draft {
    sections: [Vec<Item>; SECTION_COUNT],
    archive: Vec<ArchiveRange>,
    instruction: Option<String>,
}

impl Draft {
    fn merge(previous: Option<&CompactSummary>, span: Extract) -> Draft {
        let empty = CompactSummary::default();
        let prev = previous.unwrap_or(&empty);
        let ctx = &prev.critical_context;
        let fresh =
            |items: Vec<String>| -> Vec<Item> { items.into_iter().map(|text| Item { text, fresh: true }).collect() };

        let mut modified = merge_items(&ctx.files_modified, span.files_modified.items);
        let mut read = merge_items(&ctx.files_read, span.files_read.items);
        // A file read and later modified is listed once, as modified, and stays as fresh as
        // its freshest mention.
        let modified_at: HashMap<String, usize> = modified
            .iter()
            .enumerate()
            .map(|(i, item)| (item.text.clone(), i))
            .collect();
        read.retain(|item| match modified_at.get(&item.text) {
            Some(&i) => {
                modified[i].fresh |= item.fresh;
                false
            }
            None => true,
        });

        let mut decisions: Vec<String> = span.decisions.items;
        decisions.reverse();
        decisions.extend(prev.key_decisions.iter().map(|d| cut_words(d, ITEM_CHARS)));

        let notes: Vec<String> = span.identifiers.items.iter().map(|i| code_span(i)).collect();
        let in_progress = match span.in_progress {
            Some(text) => fresh(vec![text]),
            None => merge_items(&prev.in_progress, Vec::new()),
        };
        let next_steps = if span.next_steps.is_empty() {
            merge_items(&prev.next_steps, Vec::new())
        } else {
            fresh(span.next_steps)
        };

        let mut sections: [Vec<Item>; SECTION_COUNT] = Default::default();
        // Replies such as "ok" or "go on" are not requests; the first one is kept only when
        // there is nothing else to call the goal.
        let requests = span
            .requests
            .items
            .into_iter()
            .enumerate()
            .filter(|(i, r)| (*i == 0 && prev.goal.is_empty()) || r.split_whitespace().count() >= MIN_REQUEST_WORDS)
            .map(|(_, r)| r)
            .collect();
        sections[Sec::Goal as usize] = merge_items(&prev.goal, requests);
        sections[Sec::Constraints as usize] = merge_items(&prev.constraints, span.constraints.items);
        sections[Sec::Done as usize] = merge_items(&prev.done, span.done.items);
        sections[Sec::InProgress as usize] = in_progress;
        sections[Sec::Blocked as usize] = fresh(span.blocked);
        sections[Sec::Decisions as usize] = merge_items(&[], decisions);
        sections[Sec::NextSteps as usize] = next_steps;
        sections[Sec::FilesModified as usize] = modified;
        sections[Sec::FilesRead as usize] = read;
        sections[Sec::Commands as usize] = merge_items(&ctx.commands, span.commands.items);
        sections[Sec::Errors as usize] = merge_items(&ctx.errors, span.errors.items);
        sections[Sec::Notes as usize] = merge_items(&ctx.notes, notes);
        Draft {
            sections,
            archive: prev.archive.clone(),
            instruction: None,
        }
    }

    fn section(&self, sec: Sec) -> &[Item] {
        &self.sections[sec as usize]
    }

    /// Applies "… only" instructions such as "keep requirements and decisions only": sections
    /// the instruction does not name are emptied. Anything else leaves the draft alone.
    fn restrict(&mut self, instruction: &str) {
        let lower = instruction.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        if !words.contains(&"only") {
            return;
        }
        let mut keep: Vec<Sec> = Vec::new();
        for word in words {
            let named: &[Sec] = match word {
                w if w.starts_with("requirement") || w.starts_with("constraint") || w.starts_with("preference") => {
                    &[Sec::Constraints]
                }
                w if w.starts_with("decision") => &[Sec::Decisions],
                w if w.starts_with("goal") => &[Sec::Goal],
                w if w.starts_with("progress") => &[Sec::Done, Sec::InProgress, Sec::Blocked],
                "next" | "step" | "steps" => &[Sec::NextSteps],
                w if w.starts_with("file") || w.starts_with("path") => &[Sec::FilesRead, Sec::FilesModified],
                w if w.starts_with("command") => &[Sec::Commands],
                w if w.starts_with("error") => &[Sec::Errors],
                w if w.starts_with("note") => &[Sec::Notes],
                "context" => &[
                    Sec::FilesRead,
                    Sec::FilesModified,
                    Sec::Commands,
                    Sec::Errors,
                    Sec::Notes,
                ],
                _ => &[],
            };
            keep.extend_from_slice(named);
        }
        if keep.is_empty() {
            return;
        }
        for (i, items) in self.sections.iter_mut().enumerate() {
            if !keep.iter().any(|s| *s as usize == i) {
                items.clear();
            }
        }
    }

    /// Items in the order they are given up when over budget: older prose first, older
    /// identifiers next, the user's words late, and the newest span's identifiers last.
    fn drop_order(&self) -> Vec<(Sec, usize)> {
        let mut order = Vec::new();
        let all = |sec: Sec| (0..self.section(sec).len()).map(move |i| (sec, i));
        let with = |sec: Sec, fresh: bool| all(sec).filter(move |&(s, i)| self.section(s)[i].fresh == fresh);
        // Decisions are stored newest first.
        order.extend(all(Sec::Decisions).rev());
        order.extend(all(Sec::Done));
        order.extend(all(Sec::Notes));
        for sec in [Sec::Commands, Sec::Errors, Sec::FilesRead, Sec::FilesModified] {
            order.extend(with(sec, false));
        }
        order.extend(all(Sec::Constraints));
        order.extend(all(Sec::Goal).skip(1));
        order.extend(all(Sec::Blocked));
        order.extend(all(Sec::InProgress));
        order.extend(all(Sec::NextSteps).rev());
        order.extend(all(Sec::Goal).take(1));
        // The newest span's identifiers go oldest first across sections, so that the last
        // command, the files it touched and the error it hit survive together. Each list is
        // chronological, so an item's relative position stands in for its time.
        let mut fresh: Vec<(usize, usize, (Sec, usize))> = Vec::new();
        for sec in [Sec::Commands, Sec::FilesRead, Sec::Errors, Sec::FilesModified] {
            let items: Vec<(Sec, usize)> = with(sec, true).collect();
            let len = items.len();
            fresh.extend(items.into_iter().enumerate().map(|(rank, item)| (rank + 1, len, item)));
        }
        fresh.sort_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)));
        order.extend(fresh.into_iter().map(|(_, _, item)| item));
        order
    }

    /// The summary without the first `dropped` items of `order`.
    fn build(&self, order: &[(Sec, usize)], dropped: usize) -> CompactSummary {
        let mut gone: [Vec<bool>; SECTION_COUNT] = Default::default();
        for (g, items) in gone.iter_mut().zip(&self.sections) {
            *g = vec![false; items.len()];
        }
        for &(sec, i) in &order[..dropped] {
            gone[sec as usize][i] = true;
        }
        let take = |sec: Sec| -> Vec<String> {
            self.section(sec)
                .iter()
                .zip(&gone[sec as usize])
                .filter(|(_, gone)| !**gone)
                .map(|(item, _)| item.text.clone())
                .collect()
        };
        CompactSummary {
            goal: take(Sec::Goal),
            constraints: take(Sec::Constraints),
            done: take(Sec::Done),
            in_progress: take(Sec::InProgress),
            blocked: take(Sec::Blocked),
            key_decisions: take(Sec::Decisions),
            next_steps: take(Sec::NextSteps),
            critical_context: CriticalContext {
                files_read: take(Sec::FilesRead),
                files_modified: take(Sec::FilesModified),
                commands: take(Sec::Commands),
                errors: take(Sec::Errors),
                notes: take(Sec::Notes),
            },
            archive: self.archive.clone(),
            instruction: self.instruction.clone(),
        }
    }

    /// The largest summary (fewest items dropped, in [`Draft::drop_order`]) whose rendering
    /// fits `max_tokens`, leaving room for the archive range the caller appends next.
    fn fit(self, max_tokens: u64, counter: &TokenCounter) -> CompactSummary {
        let budget = budget_before_next_range(self.archive.is_empty(), max_tokens, counter);
        let order = self.drop_order();
        let tokens = |dropped: usize| counter.count_text(&render_summary(&self.build(&order, dropped)));
        if tokens(0) <= budget {
            return self.build(&order, 0);
        }
        let n = order.len();
        let fixed = tokens(n);
        if fixed > budget {
            return self.build(&order, n);
        }
        // Estimate from per-item sizes, then bisect with exact counts near the estimate only,
        // so large drafts are never rendered whole more than once.
        let costs: Vec<u64> = order
            .iter()
            .map(|&(sec, i)| counter.count_text(&self.section(sec)[i].text) + ITEM_OVERHEAD_TOKENS)
            .collect();
        let mut kept: u64 = costs.iter().sum();
        let (mut estimate, mut generous) = (None, None);
        for (dropped, cost) in costs.iter().enumerate() {
            if generous.is_none() && fixed + kept <= budget + budget / 8 {
                generous = Some(dropped);
            }
            if fixed + kept <= budget {
                estimate = Some(dropped);
                break;
            }
            kept -= cost;
        }
        let estimate = estimate.unwrap_or(n);
        // `lo` is taken not to fit, `hi` is known to fit.
        let mut lo = generous.unwrap_or(estimate).saturating_sub(1);
        let mut hi = n;
        let mut probe = estimate;
        while lo + 1 < hi {
            if probe <= lo || probe >= hi {
                probe = lo + (hi - lo) / 2;
            }
            if tokens(probe) <= budget {
                hi = probe;
            } else {
                lo = probe;
            }
            probe = lo + (hi - lo) / 2;
        }
        self.build(&order, hi)
    }
}

/// Previous items (capped, stale) followed by new ones (fresh); a new item equal to an old one
/// refreshes the old one in place instead of repeating it.
fn merge_items(previous: &[String], new: Vec<String>) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::with_capacity(previous.len() + new.len());
    let mut at: HashMap<String, usize> = HashMap::new();
    for text in previous {
        let text = cut_words(text, ITEM_CHARS);
        if !text.is_empty() && !at.contains_key(&text) {
            at.insert(text.clone(), items.len());
            items.push(Item { text, fresh: false });
        }
    }
    for text in new {
        match at.get(&text) {
            Some(&i) => items[i].fresh = true,
            None if !text.is_empty() => {
                at.insert(text.clone(), items.len());
                items.push(Item { text, fresh: true });
            }
            None => {}
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use satchel_protocol::config::Tokenizer;
    use serde_json::json;

    use super::*;
    use crate::summary::render::summary_message_text;

    fn counter() -> TokenCounter {
        TokenCounter::new(Tokenizer::O200kBase, 4.0)
    }

    fn run(
        messages: &[Value],
        format: MessageFormat,
        previous: Option<&CompactSummary>,
        instruction: Option<&str>,
        max_tokens: u64,
    ) -> CompactSummary {
        let counter = counter();
        ExtractiveSummarizer
            .summarize(&SummaryInput {
                previous,
                messages,
                format,
                instruction,
                max_tokens,
                counter: &counter,
            })
            .unwrap()
    }

    const REQUEST: &str = "Please fix the failing build in crates/app/src/main.rs. You must not change the public API. \
                           Keep the changes minimal and never touch vendor/.";
    const BUILD: &str = "cargo build --release 2>&1 | tail -n 20";
    const BUILD_ERROR: &str = "error[E0433]: failed to resolve: use of undeclared crate or module `serde`";

    fn openai_session() -> Vec<Value> {
        let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        vec![
            json!({"role": "user", "content": REQUEST}),
            json!({"role": "assistant", "content": "Let's look at the file first.", "tool_calls": [
                call("c1", "bash", json!({"command": "cat crates/app/src/main.rs"}))]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "use serde::Serialize;\nfn main() {}"}),
            json!({"role": "assistant", "content": "The issue is a missing dependency. I'll add it to Cargo.toml instead of vendoring.",
                "tool_calls": [call("c2", "str_replace_based_edit_tool",
                    json!({"command": "str_replace", "path": "crates/app/Cargo.toml", "old_str": "[dependencies]", "new_str": "[dependencies]\nserde = \"1\""}))]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "The file crates/app/Cargo.toml has been edited."}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c3", "bash", json!({"command": BUILD}))]}),
            json!({"role": "tool", "tool_call_id": "c3", "content": format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5")}),
            json!({"role": "assistant", "content": "Next I'll check the workspace manifest:\n1. Open Cargo.toml at the root\n2. Rerun the build"}),
        ]
    }

    fn anthropic_session() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": [{"type": "text", "text": REQUEST}]}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Let's look at the file first."},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "cat crates/app/src/main.rs"}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "use serde::Serialize;\nfn main() {}"}]}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "The issue is a missing dependency. I'll add it to Cargo.toml instead of vendoring."},
                {"type": "tool_use", "id": "t2", "name": "write_file", "input": {"path": "crates/app/Cargo.toml", "content": "[dependencies]\nserde = \"1\""}},
                {"type": "tool_use", "id": "t3", "name": "bash", "input": {"command": BUILD}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "ok"}]},
                {"type": "tool_result", "tool_use_id": "t3", "is_error": true,
                 "content": [{"type": "text", "text": format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5")}]},
                {"type": "text", "text": "Also, always run clippy before you finish."}]}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Next I'll check the workspace manifest:\n1. Open Cargo.toml at the root\n2. Rerun the build"}]}),
        ]
    }

    fn assert_session_kept(summary: &CompactSummary) {
        let text = render_summary(summary);
        assert!(summary.goal[0].starts_with("Please fix the failing build in crates/app/src/main.rs."));
        for constraint in [
            "You must not change the public API.",
            "Keep the changes minimal and never touch vendor/.",
        ] {
            assert!(summary.constraints.contains(&constraint.to_owned()), "{constraint}");
            assert!(text.contains(constraint));
        }
        let ctx = &summary.critical_context;
        assert_eq!(ctx.files_modified, ["crates/app/Cargo.toml"]);
        assert!(
            ctx.files_read.contains(&"crates/app/src/main.rs".to_owned()),
            "{:?}",
            ctx.files_read
        );
        assert!(ctx.files_read.contains(&"vendor/".to_owned()), "{:?}", ctx.files_read);
        for command in ["cat crates/app/src/main.rs", BUILD] {
            assert!(ctx.commands.contains(&command.to_owned()), "{:?}", ctx.commands);
            assert!(text.contains(&code_span(command)));
        }
        assert_eq!(ctx.errors, [BUILD_ERROR]);
        assert!(text.contains(BUILD_ERROR));
        assert_eq!(summary.blocked, [format!("{} failed: {BUILD_ERROR}", code_span(BUILD))]);
        assert_eq!(summary.done, ["Modified `crates/app/Cargo.toml`"]);
        assert_eq!(
            summary.key_decisions,
            [
                "Next I'll check the workspace manifest:",
                "I'll add it to Cargo.toml instead of vendoring.",
                "The issue is a missing dependency.",
                "Let's look at the file first."
            ]
        );
        assert_eq!(summary.in_progress, ["Next I'll check the workspace manifest:"]);
        assert_eq!(summary.next_steps, ["Open Cargo.toml at the root", "Rerun the build"]);
    }

    #[test]
    fn openai_span_keeps_exact_identifiers_and_user_words() {
        let summary = run(&openai_session(), MessageFormat::Openai, None, None, 2500);
        assert_session_kept(&summary);
        assert_eq!(summary.critical_context.commands.len(), 3);
    }

    #[test]
    fn anthropic_span_keeps_exact_identifiers_and_user_words() {
        let summary = run(&anthropic_session(), MessageFormat::Anthropic, None, None, 2500);
        assert_session_kept(&summary);
        assert!(
            summary
                .constraints
                .contains(&"Also, always run clippy before you finish.".to_owned())
        );
        // The write tool is listed as a call, with its arguments.
        assert!(summary.critical_context.commands[1].starts_with("write_file(path=crates/app/Cargo.toml, content="));
    }

    #[test]
    fn success_reports_are_not_errors() {
        assert!(!reads_like_error("test result: ok. 1401 passed; 0 failed; 0 ignored"));
        assert!(!reads_like_error("Build finished with 0 errors"));
        assert!(reads_like_error("test result: FAILED. 0 passed; 10 failed"));
        assert!(reads_like_error("10 errors generated."));
        assert!(reads_like_error("test result: FAILED. 1400 passed; 1 failed"));
        assert!(reads_like_error("error[E0433]: failed to resolve"));
    }

    #[test]
    fn flagged_results_without_error_words_still_count_as_errors() {
        let messages = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "make check"}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": "\n  exit status 2\nmore"}]}),
        ];
        let summary = run(&messages, MessageFormat::Anthropic, None, None, 2500);
        assert_eq!(summary.critical_context.errors, ["exit status 2"]);
        assert_eq!(first_error_line("all good\n", false), None);
        assert_eq!(
            first_error_line("ok\nTraceback (most recent call last):\nValueError: x", false).as_deref(),
            Some("Traceback (most recent call last):")
        );
    }

    #[test]
    fn swe_agent_commands_classify_reads_and_edits() {
        let call = |id: &str, command: &str| {
            json!({"role": "assistant", "content": "DISCUSSION\nLet's continue.", "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]})
        };
        let result = |id: &str, text: &str| json!({"role": "tool", "tool_call_id": id, "content": text});
        let messages = vec![
            call("1", "open /repo/src/main/java/Foo.java 120\n"),
            result("1", "[File: /repo/src/main/java/Foo.java (300 lines total)]"),
            call("2", "edit 12:15\n        return this.value;\n    }\nend_of_edit\n"),
            result("2", "File updated."),
            call("3", "create reproduce.py\n"),
            result("3", "[File: /repo/reproduce.py (1 lines total)]"),
            call(
                "4",
                "sed -i 's/foo/bar/g' src/lib.rs && grep -n bar src/lib.rs > /tmp/hits.txt 2>&1",
            ),
            result("4", ""),
            call("5", "./gradlew test\n"),
            result("5", "/bin/bash: line 7257: ./gradlew: No such file or directory"),
        ];
        let summary = run(&messages, MessageFormat::Openai, None, None, 2500);
        let ctx = &summary.critical_context;
        assert_eq!(
            ctx.files_modified,
            [
                "/repo/src/main/java/Foo.java",
                "reproduce.py",
                "src/lib.rs",
                "/tmp/hits.txt"
            ]
        );
        // The sed script looks like a path; listing it costs little and misses nothing.
        assert_eq!(ctx.files_read, ["s/foo/bar/g", "./gradlew"]);
        assert_eq!(ctx.notes, ["`this.value`"]);
        assert_eq!(
            ctx.commands,
            [
                "open /repo/src/main/java/Foo.java 120",
                "edit 12:15 …",
                "create reproduce.py",
                "sed -i 's/foo/bar/g' src/lib.rs && grep -n bar src/lib.rs > /tmp/hits.txt 2>&1",
                "./gradlew test"
            ]
        );
        assert_eq!(
            ctx.errors,
            ["/bin/bash: line 7257: ./gradlew: No such file or directory"]
        );
        assert_eq!(
            summary.done,
            [
                "Modified `/repo/src/main/java/Foo.java`",
                "Modified `reproduce.py`",
                "Modified `src/lib.rs`",
                "Modified `/tmp/hits.txt`"
            ]
        );
        assert_eq!(summary.next_steps, ["Let's continue."]);
    }

    #[test]
    fn long_commands_keep_their_first_line_cut_on_a_char_boundary() {
        let long = format!("echo {}\nsecond line", "é".repeat(300));
        let key = command_key(&long);
        assert_eq!(key, format!("echo {} …", "é".repeat(195)));
        assert_eq!(command_key("\n  ls -a \n"), "  ls -a ");
        assert_eq!(tool_key("submit", &json!({})), "submit()");
        assert_eq!(
            tool_key("find_file", &json!({"file_name": "missing_colon.py", "dir": "a b"})),
            "find_file(file_name=missing_colon.py, dir=\"a b\")"
        );
        assert_eq!(
            tool_key(
                "str_replace_based_edit_tool",
                &json!({"path": "a.rs", "file_text": "x", "command": "create"})
            ),
            "str_replace_based_edit_tool(command=create, path=a.rs, file_text=x)"
        );
    }

    #[test]
    fn path_detection_separates_files_from_identifiers() {
        let found: Vec<(&str, Option<PathKind>)> =
            "see `src/a.rs:12:5`, Foo.java and self.value (e.g. n/a); 3.14 --flag=x.txt *.java https://x.io/a#L1."
                .split(' ')
                .flat_map(path_tokens)
                .map(|t| (t, path_kind(t)))
                .collect();
        assert_eq!(
            found,
            [
                ("src/a.rs:12:5", Some(PathKind::File)),
                ("Foo.java", Some(PathKind::File)),
                ("self.value", Some(PathKind::Identifier)),
                ("e.g", Some(PathKind::Identifier)),
                ("n/a", Some(PathKind::File)),
                ("x.txt", Some(PathKind::File)),
                ("*.java", Some(PathKind::File)),
                ("https://x.io/a#L1", Some(PathKind::File)),
            ]
        );
    }

    #[test]
    fn cues_match_whole_words() {
        assert!(has_cue("Users prefer tabs", CONSTRAINT_CUES));
        assert!(has_cue("We’re avoiding globals", CONSTRAINT_CUES));
        assert!(has_cue("Don't panic", CONSTRAINT_CUES));
        assert!(!has_cue("The keeper mustard", CONSTRAINT_CUES));
        assert!(!has_cue("Outlet's power", DECISION_CUES));
    }

    #[test]
    fn incremental_merge_keeps_the_previous_summary() {
        let first = run(&openai_session(), MessageFormat::Openai, None, None, 2500);
        let mut previous = first.clone();
        let range = ArchiveRange {
            file: "dialog/2026-11-22.jsonl".into(),
            start_line: 1,
            end_line: 8,
            first_index: 0,
            last_index: 7,
            messages: 8,
        };
        previous.archive.push(range.clone());
        let next = vec![
            json!({"role": "user", "content": "Now also add a --verbose flag to src/cli.rs."}),
            json!({"role": "assistant", "content": "I'll add the flag.", "tool_calls": [{"id": "c9", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\": \"cargo build --release 2>&1 | tail -n 20\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c9", "content": "Finished release"}),
        ];
        let merged = run(&next, MessageFormat::Openai, Some(&previous), None, 2500);
        assert_eq!(merged.goal[0], first.goal[0]);
        assert_eq!(merged.goal[1], "Now also add a --verbose flag to src/cli.rs.");
        assert_eq!(merged.constraints, first.constraints);
        assert_eq!(merged.archive, [range]);
        assert_eq!(
            merged.critical_context.commands, first.critical_context.commands,
            "dedup keeps one copy"
        );
        assert_eq!(merged.critical_context.errors, first.critical_context.errors);
        assert!(merged.critical_context.files_read.contains(&"src/cli.rs".to_owned()));
        assert_eq!(merged.key_decisions[0], "I'll add the flag.");
        assert_eq!(merged.key_decisions[1..], first.key_decisions[..]);
        assert_eq!(
            merged.next_steps,
            ["I'll add the flag."],
            "next steps follow the newest span"
        );
        assert!(merged.blocked.is_empty(), "the failing build succeeded in the new span");
        assert_eq!(merged.in_progress, ["I'll add the flag."]);
    }

    #[test]
    fn short_replies_are_not_goals() {
        let messages = vec![
            json!({"role": "user", "content": "Rename the crate to satchel-core."}),
            json!({"role": "assistant", "content": "Shall I also update the README?"}),
            json!({"role": "user", "content": "yes please"}),
            json!({"role": "assistant", "content": "Done."}),
            json!({"role": "user", "content": "Now bump the version to 0.2.0."}),
        ];
        let summary = run(&messages, MessageFormat::Openai, None, None, 2500);
        assert_eq!(
            summary.goal,
            ["Rename the crate to satchel-core.", "Now bump the version to 0.2.0."]
        );
        let resummarised = [json!({"role": "user", "content": summary_message_text(&summary)})];
        assert_eq!(
            run(&resummarised, MessageFormat::Openai, Some(&summary), None, 2500).goal,
            summary.goal
        );
        let only_reply = run(&messages[2..3], MessageFormat::Openai, None, None, 2500);
        assert_eq!(only_reply.goal, ["yes please"]);
        assert!(run(&messages[2..3], MessageFormat::Openai, Some(&summary), None, 2500).goal == summary.goal);
    }

    #[test]
    fn unanswered_user_request_becomes_a_next_step() {
        let messages = vec![
            json!({"role": "assistant", "content": "Done with the refactor."}),
            json!({"role": "user", "content": "Great, now write the changelog."}),
        ];
        let summary = run(&messages, MessageFormat::Openai, None, None, 2500);
        assert_eq!(
            summary.next_steps,
            [
                "Done with the refactor.",
                "Answer the user's latest request: Great, now write the changelog."
            ]
        );
    }

    #[test]
    fn only_instruction_keeps_the_named_sections() {
        let instruction = "keep requirements and decisions only";
        let summary = run(&openai_session(), MessageFormat::Openai, None, Some(instruction), 2500);
        assert_eq!(summary.instruction.as_deref(), Some(instruction));
        assert!(!summary.constraints.is_empty() && !summary.key_decisions.is_empty());
        assert!(summary.goal.is_empty() && summary.done.is_empty() && summary.next_steps.is_empty());
        assert_eq!(summary.critical_context, CriticalContext::default());

        let steered = run(
            &openai_session(),
            MessageFormat::Openai,
            None,
            Some("focus on the build"),
            2500,
        );
        assert_eq!(steered.instruction.as_deref(), Some("focus on the build"));
        assert_eq!(
            CompactSummary {
                instruction: None,
                ..steered
            },
            run(&openai_session(), MessageFormat::Openai, None, None, 2500)
        );
    }

    /// A long synthetic session: every call distinct, every fifth result failing.
    fn huge_session(messages: usize) -> Vec<Value> {
        let mut out = vec![
            json!({"role": "user", "content": "Migrate every module to the new logging API. Do not change behaviour."}),
        ];
        for i in 0..messages / 2 {
            let command =
                format!("sed -i 's/log::info/tracing::info/' crates/mod_{i}/src/lib_{i}.rs && cargo check -p mod_{i}");
            out.push(
                json!({"role": "assistant", "content": format!("Let's migrate module {i} because it still uses log."),
                "tool_calls": [{"id": format!("c{i}"), "type": "function",
                    "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]}),
            );
            let content = if i % 5 == 0 {
                format!("error[E0432]: unresolved import `tracing` in mod_{i}")
            } else {
                "Finished dev".to_owned()
            };
            out.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": content}));
        }
        out
    }

    #[test]
    fn huge_span_stays_within_budget_quickly_and_keeps_the_newest_identifiers() {
        let messages = huge_session(2000);
        let started = Instant::now();
        let summary = run(&messages, MessageFormat::Openai, None, None, 2500);
        let elapsed = started.elapsed();
        let text = render_summary(&summary);
        let tokens = counter().count_text(&text);
        eprintln!("2000 messages summarised in {elapsed:?}: {tokens} tokens");
        assert!(tokens <= 2500, "{tokens}");
        let last = "sed -i 's/log::info/tracing::info/' crates/mod_999/src/lib_999.rs && cargo check -p mod_999";
        assert!(text.contains(last));
        assert!(text.contains("crates/mod_999/src/lib_999.rs"));
        assert!(text.contains("error[E0432]: unresolved import `tracing` in mod_995"));
        assert_eq!(
            summary,
            run(&messages, MessageFormat::Openai, None, None, 2500),
            "deterministic"
        );
    }

    #[test]
    fn budget_drops_old_material_before_new_identifiers() {
        let mut previous = run(&huge_session(200), MessageFormat::Openai, None, None, 100_000);
        assert_eq!(previous.critical_context.commands.len(), 100);
        previous.archive.push(ArchiveRange {
            file: "dialog/2026-11-22.jsonl".into(),
            start_line: 1,
            end_line: 201,
            first_index: 0,
            last_index: 200,
            messages: 201,
        });
        let summary = run(&openai_session(), MessageFormat::Openai, Some(&previous), None, 3000);
        let text = render_summary(&summary);
        assert!(counter().count_text(&text) <= 3000);
        assert_session_identifiers(&text);
        assert_eq!(summary.archive, previous.archive);
        assert_eq!(summary.goal[0], previous.goal[0], "the goal outlives old identifiers");
        assert_eq!(summary.goal.len(), 2);
        assert!(summary.key_decisions.is_empty(), "prose goes first");
        // Old commands go oldest first: what is left is the end of the old list, then the new.
        let commands = &summary.critical_context.commands;
        let old_kept = commands.len() - 3;
        assert!(old_kept > 0 && old_kept < 100, "{old_kept}");
        assert_eq!(
            commands[..old_kept],
            previous.critical_context.commands[100 - old_kept..]
        );
    }

    fn assert_session_identifiers(text: &str) {
        for kept in [
            "crates/app/src/main.rs",
            "crates/app/Cargo.toml",
            "cat crates/app/src/main.rs",
            BUILD,
            BUILD_ERROR,
        ] {
            assert!(text.contains(kept), "{kept} missing from\n{text}");
        }
    }

    #[test]
    fn tiny_budgets_never_panic() {
        for max in [0, 10, 100, 300] {
            let summary = run(&openai_session(), MessageFormat::Openai, None, None, max);
            if max >= 300 {
                assert!(counter().count_text(&render_summary(&summary)) <= max);
            }
        }
    }

    fn shared_data() -> PathBuf {
        match std::env::var_os("SATCHEL_SHARED_DATA") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
        }
    }

    /// Identifier retention as the daemon measures it. Paths are found by a looser tokenizer
    /// than [`path_tokens`], so the check does not share the extractor's blind spots.
    #[derive(Debug, Default)]
    struct Retention {
        paths: (usize, usize),
        commands: (usize, usize),
        errors: (usize, usize),
        max_tokens: u64,
        misses: Vec<String>,
    }

    impl Retention {
        fn count(found: bool, tally: &mut (usize, usize), what: &str, misses: &mut Vec<String>) {
            tally.1 += 1;
            if found {
                tally.0 += 1;
            } else {
                misses.push(what.to_owned());
            }
        }

        fn measure(&mut self, span: &[Value], format: MessageFormat, text: &str) {
            let mut paths = Vec::new();
            let mut commands = Vec::new();
            let mut errors = Vec::new();
            for message in span {
                let role = message["role"].as_str();
                if role == Some("user") {
                    text_blocks(message).for_each(|t| paths.extend(loose_paths(t)));
                }
                for call in format::tool_calls(message, format) {
                    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    let mut strings = Vec::new();
                    collect_strings(&args, &mut strings);
                    strings.iter().for_each(|s| paths.extend(loose_paths(s)));
                    if let Some(command) = ["command", "cmd", "script"].iter().find_map(|k| args[k].as_str()) {
                        let first = command.split('\n').next().unwrap_or("").trim_end_matches('\r');
                        commands.push(first.chars().take(200).collect::<String>());
                    }
                }
                let texts = format::result_texts(message, format);
                for id in format::result_ids(message, format) {
                    let body: Vec<&str> = texts
                        .iter()
                        .filter(|t| t.call_id.as_deref().unwrap_or("") == id)
                        .filter_map(|t| message.pointer(&t.pointer)?.as_str())
                        .collect();
                    let body = body.join("\n");
                    let flagged = message["content"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|b| b["tool_use_id"] == id.as_str() && b["is_error"] == true)
                    });
                    let lines = || body.lines().map(str::trim).filter(|l| !l.is_empty());
                    let hit = lines().find(|l| {
                        let l = l.to_lowercase();
                        ERROR_CUES.iter().any(|cue| l.contains(cue))
                    });
                    if let Some(line) = hit.or_else(|| lines().next().filter(|_| flagged)) {
                        errors.push(line.chars().take(300).collect::<String>());
                    }
                }
            }
            for (items, tally) in [
                (paths, &mut self.paths),
                (commands, &mut self.commands),
                (errors, &mut self.errors),
            ] {
                let mut seen = HashSet::new();
                for item in items {
                    if seen.insert(item.clone()) {
                        Self::count(text.contains(&item), tally, &item, &mut self.misses);
                    }
                }
            }
        }
    }

    fn loose_paths(text: &str) -> Vec<String> {
        text.split(|c: char| c.is_whitespace() || "`'\"(),;<>[]{}=|*".contains(c))
            .map(|t| t.trim_matches(|c| ":.!?#".contains(c)))
            .filter(|t| {
                !t.starts_with('-')
                    && t.chars().any(|c| c.is_ascii_alphabetic())
                    && t.chars().all(|c| c.is_ascii_alphanumeric() || "_.~/@+-".contains(c))
                    && (t.contains('/')
                        || t.rsplit_once('.').is_some_and(|(_, ext)| {
                            (1..=8).contains(&ext.len())
                                && ext.starts_with(|c: char| c.is_ascii_alphabetic())
                                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        }))
            })
            .map(str::to_owned)
            .collect()
    }

    fn pct((kept, total): (usize, usize)) -> f64 {
        if total == 0 {
            100.0
        } else {
            100.0 * kept as f64 / total as f64
        }
    }

    /// Summarises each shared trajectory in consecutive spans of about 30 messages, each merged
    /// into the previous summary, and checks identifier retention against the targets.
    /// `SATCHEL_SHOW_MISSES=1` lists what was lost; `SATCHEL_SHOW_SUMMARY=<file name part>`
    /// prints the summaries of matching trajectories.
    #[test]
    fn retention_on_shared_trajectories() {
        let dir = shared_data();
        if !dir.join("trajectories").is_dir() {
            eprintln!("SKIPPED: no shared data at {} (set SATCHEL_SHARED_DATA)", dir.display());
            return;
        }
        const SPAN: usize = 30;
        const MAX_TOKENS: u64 = 2500;
        let counter = counter();
        let mut total = Retention::default();
        for (sub, format) in [
            ("trajectories", MessageFormat::Openai),
            ("trajectories_anthropic", MessageFormat::Anthropic),
        ] {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
            for file in files {
                let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
                let messages: Vec<Value> = doc["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] != "system")
                    .cloned()
                    .collect();
                let mut one = Retention::default();
                let mut previous: Option<CompactSummary> = None;
                let mut start = 0;
                while start < messages.len() {
                    // Like the daemon, never separate a result from its call.
                    let mut end = (start + SPAN).min(messages.len());
                    while end < messages.len() && format::has_tool_result(&messages[end], format) {
                        end += 1;
                    }
                    let span = &messages[start..end];
                    let mut summary = ExtractiveSummarizer
                        .summarize(&SummaryInput {
                            previous: previous.as_ref(),
                            messages: span,
                            format,
                            instruction: None,
                            max_tokens: MAX_TOKENS,
                            counter: &counter,
                        })
                        .unwrap();
                    summary.archive.push(ArchiveRange {
                        file: "dialog/2026-11-22.jsonl".into(),
                        start_line: start + 1,
                        end_line: end,
                        first_index: start,
                        last_index: end - 1,
                        messages: end - start,
                    });
                    let text = summary_message_text(&summary);
                    one.max_tokens = one.max_tokens.max(counter.count_text(&text));
                    one.measure(span, format, &render_summary(&summary));
                    if std::env::var_os("SATCHEL_SHOW_SUMMARY")
                        .is_some_and(|v| file.to_string_lossy().contains(&*v.to_string_lossy()))
                    {
                        eprintln!("=== {start}..{end}\n{text}");
                    }
                    previous = Some(summary);
                    start = end;
                }
                eprintln!(
                    "{sub}/{}: paths {:.1}% commands {:.1}% errors {:.1}% max {} tokens",
                    file.file_name().unwrap().to_string_lossy(),
                    pct(one.paths),
                    pct(one.commands),
                    pct(one.errors),
                    one.max_tokens
                );
                if std::env::var_os("SATCHEL_SHOW_MISSES").is_some() {
                    eprintln!("  missed: {:?}", one.misses);
                }
                for (sum, part) in [
                    (&mut total.paths, one.paths),
                    (&mut total.commands, one.commands),
                    (&mut total.errors, one.errors),
                ] {
                    sum.0 += part.0;
                    sum.1 += part.1;
                }
                total.max_tokens = total.max_tokens.max(one.max_tokens);
            }
        }
        eprintln!(
            "retention: paths {:.1}% ({}/{}), commands {:.1}% ({}/{}), errors {:.1}% ({}/{}); max summary message {} tokens",
            pct(total.paths),
            total.paths.0,
            total.paths.1,
            pct(total.commands),
            total.commands.0,
            total.commands.1,
            pct(total.errors),
            total.errors.0,
            total.errors.1,
            total.max_tokens
        );
        assert!(pct(total.paths) >= 95.0);
        assert!(pct(total.commands) >= 80.0);
        assert!(pct(total.errors) >= 90.0);
        assert!(total.max_tokens < 3000);
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use satchel_protocol::config::Tokenizer;
    use serde_json::json;

    use super::*;

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}/[a-z_]{1,12}\\.(rs|py|java)(:[0-9]{1,3})?",
            "cargo test -p [a-z]{1,6}( -- --nocapture)?",
            "sed -i 's/a/b/' [a-z]{1,6}\\.rs",
            "(error|Exception|FAILED)[:a-z ]{0,40}",
            "(Let's|I'll|Because|You must|Never|Please) [a-z ]{0,40}[.!?]",
            "\\PC{0,60}",
            "[a-z]{1,5}\n[a-z `]{0,20}\n```\ncode\n```",
        ]
    }

    /// A conversation of user turns and assistant calls with results, in both formats.
    fn conversation(anthropic: bool) -> impl Strategy<Value = Vec<Value>> {
        prop::collection::vec(
            (
                any::<bool>(),
                prop::collection::vec(fragment(), 1..4),
                fragment(),
                fragment(),
                any::<bool>(),
            ),
            0..40,
        )
        .prop_map(move |turns| {
            let mut out = Vec::new();
            for (i, (user, words, command, output, is_error)) in turns.into_iter().enumerate() {
                let text = words.join(" ");
                let id = format!("c{i}");
                if user {
                    out.push(json!({"role": "user", "content": text}));
                } else if anthropic {
                    out.push(json!({"role": "assistant", "content": [{"type": "text", "text": text},
                        {"type": "tool_use", "id": id, "name": "bash", "input": {"command": command}}]}));
                    out.push(json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": id, "is_error": is_error, "content": output}]}));
                } else {
                    out.push(json!({"role": "assistant", "content": text, "tool_calls": [{"id": id, "type": "function",
                        "function": {"name": "edit_file", "arguments": json!({"path": command, "new": output}).to_string()}}]}));
                    out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
                }
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn summaries_fit_the_budget_and_are_deterministic(
            anthropic in any::<bool>(),
            (first, second) in any::<bool>().prop_flat_map(|a| (conversation(a), conversation(a))),
            max_tokens in 400u64..3000,
        ) {
            let format = if anthropic { MessageFormat::Anthropic } else { MessageFormat::Openai };
            let counter = TokenCounter::new(Tokenizer::O200kBase, 4.0);
            let input = |messages: &'_ [Value], previous: Option<&'_ CompactSummary>| {
                ExtractiveSummarizer.summarize(&SummaryInput {
                    previous,
                    messages,
                    format,
                    instruction: None,
                    max_tokens,
                    counter: &counter,
                }).unwrap()
            };
            let summary = input(&first, None);
            prop_assert!(counter.count_text(&render_summary(&summary)) <= max_tokens);
            prop_assert_eq!(&summary, &input(&first, None));
            let merged = input(&second, Some(&summary));
            prop_assert!(counter.count_text(&render_summary(&merged)) <= max_tokens);
            prop_assert_eq!(merged, input(&second, Some(&summary)));
        }
    }

    /// [`first_error_line`] as it was before [`may_read_like_error`]: every line lowered and
    /// searched.
    fn first_error_line_by_lines(text: &str, flagged: bool) -> Option<String> {
        let mut first = None;
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            first.get_or_insert(line);
            if reads_like_error(line) {
                return Some(cut_chars(line, ERROR_CHARS).0.to_owned());
            }
        }
        first
            .filter(|_| flagged)
            .map(|line| cut_chars(line, ERROR_CHARS).0.to_owned())
    }

    /// Lines built from cues, success phrases, their pieces and noise, in any case.
    fn output_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            prop::sample::select(ERROR_CUES.to_vec()).prop_map(str::to_owned),
            prop::sample::select(SUCCESS_PHRASES.to_vec()).prop_map(str::to_owned),
            "(not|no such|fail|err|or|ures: 0|0|1|found|file)",
            "[a-zA-Z0-9 :]{0,12}",
            "\\PC{0,8}",
        ];
        let line = prop::collection::vec((piece, any::<bool>()), 0..6).prop_map(|pieces| {
            pieces
                .into_iter()
                .map(|(p, upper)| if upper { p.to_ascii_uppercase() } else { p })
                .collect::<String>()
        });
        prop::collection::vec(line, 0..8).prop_map(|lines| lines.join("\n"))
    }

    #[test]
    fn a_cue_that_only_appears_once_a_success_phrase_is_removed_is_found() {
        // "failures: 0" is the one success phrase without a cue of its own.
        let text = "ok\nNOTfailures: 0found";
        assert_eq!(
            first_error_line_by_lines(text, false).as_deref(),
            Some("NOTfailures: 0found")
        );
        assert_eq!(first_error_line(text, false), first_error_line_by_lines(text, false));
    }

    proptest! {
        #[test]
        fn the_whole_text_prefilter_finds_the_same_error_line(text in output_text(), flagged in any::<bool>()) {
            prop_assert_eq!(first_error_line(&text, flagged), first_error_line_by_lines(&text, flagged));
        }
    }
}
