//! AceClaw's Phase 0 "memory flush": before a span is compacted, the files it changed, the
//! commands it ran and the errors it hit are listed as plain lines for the daily memory, so
//! they outlive the summary even when its budget drops them.
//!
//! AceClaw matches only `write_file`/`edit_file`/`bash` with a regular expression over the
//! argument JSON (an escaped quote ends its command early) and flags only results the tool
//! marked as errors. Here the arguments are parsed, the tool names of the common agents are
//! known, and a result is a failure by the same outcome detection the extractive summariser
//! uses ([`failure_line`]), so a failed `cargo test` counts although no tool flagged it.

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde_json::Value;

use crate::format::{self, MessageFormat};
use crate::summary::extract::calls::{CallFacts, shell_command};
use crate::summary::extract::outcome::failure_line;
use crate::summary::extract::text::{collapse_ws, cut_words};
use crate::summary::render::COMPACTED_MARKER;
use crate::summary::span::{is_flagged, text_blocks};

/// Tools that write files, by lower-case name: their path argument is a modified file.
const WRITE_TOOLS: &[&str] = &[
    "write_file",
    "edit_file",
    "create_file",
    "write",
    "edit",
    "multiedit",
    "str_replace_editor",
    "str_replace_based_edit_tool",
];
/// Sub-commands of the text-editor tools that change the file (`view` and `undo_edit` are
/// not counted, as in AceClaw's list).
const WRITE_SUBCOMMANDS: &[&str] = &["create", "str_replace", "insert"];
/// Arguments that name the file a write tool changes.
const PATH_KEYS: &[&str] = &["path", "file_path", "filename"];
/// Tools that run shell commands, by lower-case name.
const SHELL_TOOLS: &[&str] = &[
    "bash",
    "shell",
    "execute_bash",
    "run_command",
    "run_shell_command",
    "terminal",
];
/// Commands this short are navigation, not work worth remembering (AceClaw: more than 10).
const MIN_COMMAND_CHARS: usize = 10;
/// Longest command kept (AceClaw's cut).
const COMMAND_CHARS: usize = 100;
/// Longest error kept (AceClaw's cut).
const ERROR_CHARS: usize = 200;

/// What Phase 0 extracts from a span, each list de-duplicated in order of first appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phase0 {
    /// Files written or edited.
    pub modified_files: Vec<String>,
    /// Shell commands run, whitespace collapsed, cut to 100 chars.
    pub commands: Vec<String>,
    /// Failure lines of tool results, cut to 200 chars.
    pub errors: Vec<String>,
}

impl Phase0 {
    /// The items as AceClaw's memory lines: `Modified file: …`, `Executed: …`,
    /// `Error encountered: …`, in that order.
    pub fn lines(&self) -> Vec<String> {
        let files = self.modified_files.iter().map(|f| format!("Modified file: {f}"));
        let commands = self.commands.iter().map(|c| format!("Executed: {c}"));
        let errors = self.errors.iter().map(|e| format!("Error encountered: {e}"));
        files.chain(commands).chain(errors).collect()
    }

    /// Nothing was found.
    pub fn is_empty(&self) -> bool {
        self.modified_files.is_empty() && self.commands.is_empty() && self.errors.is_empty()
    }

    fn push(list: &mut Vec<String>, item: String) {
        if !item.is_empty() && !list.contains(&item) {
            list.push(item);
        }
    }
}

/// Extracts Phase 0 items from `messages`, the span being compacted.
///
/// Empty when the span starts with a compacted summary: its items were extracted when that
/// summary was made. Satchel's summary is one user message; AceClaw's is a continuation
/// instruction followed by the marked assistant message, so the first two messages after
/// any system ones are looked at.
pub fn extract(messages: &[Value], format: MessageFormat) -> Phase0 {
    let mut out = Phase0::default();
    if starts_compacted(messages) {
        return out;
    }
    // Whether each call only looks, so that what a search found is not read as its failure.
    let mut looks_only: HashMap<String, bool> = HashMap::new();
    let mut current_file = None;
    for message in messages {
        for call in format::tool_calls(message, format) {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments.clone()));
            let name = call.name.to_ascii_lowercase();
            for path in modified_files(&name, &args) {
                Phase0::push(&mut out.modified_files, path);
            }
            if SHELL_TOOLS.contains(&name.as_str())
                && let Some(command) = remembered_command(&args)
            {
                Phase0::push(&mut out.commands, command);
            }
            let facts = CallFacts::of(&call, &mut current_file);
            looks_only.insert(call.id, facts.read_only);
        }
        if !format::has_tool_result(message, format) {
            continue;
        }
        let texts = format::result_texts(message, format);
        for id in format::result_ids(message, format) {
            let output = texts
                .iter()
                .filter(|t| t.call_id.as_deref().unwrap_or("") == id)
                .filter_map(|t| message.pointer(&t.pointer).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            let only = looks_only.get(&id).copied().unwrap_or(false);
            if let Some(line) = failure_line(&output, is_flagged(message, &id), only) {
                Phase0::push(&mut out.errors, cut_words(&line, ERROR_CHARS));
            }
        }
    }
    out
}

fn starts_compacted(messages: &[Value]) -> bool {
    messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) != Some("system"))
        .take(2)
        .any(|m| text_blocks(m).any(|t| t.trim_start().starts_with(COMPACTED_MARKER)))
}

/// Files a call of the write tool `name` (lower case) changes: its path argument, or the
/// files an `apply_patch` patch names.
fn modified_files(name: &str, args: &Value) -> Vec<String> {
    if name == "apply_patch" {
        let patch = match args {
            Value::String(patch) => Some(patch.as_str()),
            _ => ["input", "patch"].iter().find_map(|k| args.get(k)?.as_str()),
        };
        return patch.map(patch_files).unwrap_or_default();
    }
    if !WRITE_TOOLS.contains(&name) {
        return Vec::new();
    }
    if let Some(command) = args.get("command").and_then(Value::as_str)
        && !WRITE_SUBCOMMANDS.contains(&command)
    {
        return Vec::new();
    }
    PATH_KEYS
        .iter()
        .filter_map(|k| args.get(k)?.as_str())
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .take(1)
        .map(str::to_owned)
        .collect()
}

/// Files named in a patch's headers: Codex's `*** Add/Update/Delete File:` and `*** Move
/// to:`, or a unified diff's `+++ b/…` (its `--- a/…` when the file is deleted).
fn patch_files(patch: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut old: Option<&str> = None;
    for line in patch.lines() {
        let codex = ["*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:"]
            .iter()
            .find_map(|h| line.strip_prefix(h));
        let file = if let Some(path) = codex {
            Some(path)
        } else if let Some(path) = line.strip_prefix("--- ") {
            old = Some(path);
            None
        } else if let Some(path) = line.strip_prefix("+++ ") {
            let path = if path.trim() == "/dev/null" {
                old.unwrap_or("")
            } else {
                path
            };
            Some(
                path.strip_prefix("b/")
                    .or_else(|| path.strip_prefix("a/"))
                    .unwrap_or(path),
            )
        } else {
            None
        };
        // A diff header may end with a tab and a timestamp.
        if let Some(file) = file.and_then(|f| f.split('\t').next()).map(str::trim)
            && !file.is_empty()
            && file != "/dev/null"
        {
            Phase0::push(&mut out, file.to_owned());
        }
    }
    out
}

/// The command of a shell call worth remembering: longer than [`MIN_COMMAND_CHARS`], not
/// `cd …` or `ls…`, whitespace collapsed and cut to [`COMMAND_CHARS`].
fn remembered_command(args: &Value) -> Option<String> {
    let command = match args.get("command").or_else(|| args.get("cmd")) {
        // Codex's `["bash", "-lc", "cargo test"]`: the script is what was run.
        Some(Value::Array(parts)) => {
            let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
            match words.as_slice() {
                [shell, "-c" | "-lc", script @ ..] if shell.ends_with("sh") => script.join(" "),
                _ => words.join(" "),
            }
        }
        _ => shell_command(args)?,
    };
    let command = collapse_ws(&command);
    let remembered =
        command.chars().count() > MIN_COMMAND_CHARS && !command.starts_with("cd ") && !command.starts_with("ls");
    remembered.then(|| cut_words(&command, COMMAND_CHARS))
}
