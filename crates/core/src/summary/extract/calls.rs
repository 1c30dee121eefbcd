//! What a tool call is: the key it is listed under, the files it changes, whether it only
//! looks, and the area a later success must touch to clear its failure.

use serde_json::Value;

use super::paths::{PathKind, path_kind};
use super::text::{cut_chars, listed, unquote};
use crate::format::ToolCall;

/// Longest command kept: the retention check compares the first line cut to this many chars.
pub const COMMAND_CHARS: usize = 200;

/// Tool names that change files.
const EDIT_TOOL_CUES: &[&str] = &["write", "edit", "patch", "replace", "create", "insert"];
/// Sub-commands of editor tools (Anthropic's text editor) that only look.
const VIEW_SUBCOMMANDS: &[&str] = &["view", "read", "show", "list", "cat"];
/// Tool names that only look, so a successful call is not worth a "done" line.
const READ_TOOL_CUES: &[&str] = &["read", "view", "list", "search", "find", "get", "open", "grep", "glob"];
/// Shell and SWE-agent commands that only look.
const READ_COMMANDS: &str = "open goto scroll_up scroll_down search_file search_dir find_file ls cat head tail grep rg find \
    pwd cd less more wc which file stat tree nl git-log diff";
/// Words that make a command a test or build run, whose success is worth a "done" line.
const TEST_WORDS: &str = "test tests pytest jest vitest mocha unittest check verify build compile javac gcc make \
    cargo mvn mvnw gradle gradlew tox nox ctest go";

/// What a call did, remembered until its result arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFacts {
    /// How the call is listed: a shell command's first line, or `name(key=value, …)`.
    pub key: String,
    /// Files it creates or changes.
    pub modified: Vec<String>,
    /// It only looks (reads, lists, searches): its success is not progress.
    pub read_only: bool,
    /// It runs tests or a build: its success is progress worth reporting.
    pub runs_checks: bool,
    /// Every string argument, for the path tokens they hold.
    pub strings: Vec<String>,
}

impl CallFacts {
    /// Reads `call`; `current_file` is the file an editor call without a path edits (SWE-agent
    /// `open` then `edit`), updated as calls open and create files.
    pub fn of(call: &ToolCall, current_file: &mut Option<String>) -> CallFacts {
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
        let runs_checks = !read_only && modified.is_empty() && runs_checks(&key);
        CallFacts {
            key,
            modified,
            read_only,
            runs_checks,
            strings: strings.into_iter().map(str::to_owned).collect(),
        }
    }
}

/// The area a command works on, which a later success must share to clear its failure: the
/// program and its first argument that is not an option when that names a subcommand or a
/// file (`mvn test`, `python reproduce.py`); the program alone when the argument is data
/// (`submit flat{…}` is cleared by a later `submit 'flag{…}'`).
pub fn area(key: &str) -> String {
    let mut words = key.split_whitespace().filter(|w| !w.starts_with('-') && *w != "…");
    let program = words.next().unwrap_or("");
    let program = program.rsplit('/').next().unwrap_or(program);
    let names_something =
        |arg: &str| !arg.is_empty() && arg.chars().all(|c| c.is_alphanumeric() || "-_./:".contains(c));
    match words.next().map(unquote).filter(|arg| names_something(arg)) {
        Some(arg) => format!("{program} {arg}"),
        None => program.to_owned(),
    }
}

/// Whether two command keys run the same command: the same program with the same arguments
/// that are not options (its subcommand, target, test selection). Options may differ (`cargo
/// build --offline` retries `cargo build`); another target is another command (`npm test --
/// part2` is not a retry of `npm test -- part1`, though both work in the area `npm test`).
/// Every word after `--` is an argument. Only a retry can show that a failure was fixed.
pub fn same_command(a: &str, b: &str) -> bool {
    command_words(a) == command_words(b)
}

/// The program (without its directory) and the arguments of a command key, options left out.
fn command_words(key: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut options_ended = false;
    for word in key.split_whitespace().filter(|w| *w != "…") {
        if !options_ended && word == "--" {
            options_ended = true;
        } else if options_ended || !word.starts_with('-') {
            words.push(unquote(word));
        }
    }
    // `./node_modules/.bin/jest` is `jest`; a tool call (`name(path=a/b.rs)`) is kept whole.
    if let Some(program) = words.first_mut()
        && !program.contains('(')
    {
        *program = program.rsplit('/').next().unwrap_or(program);
    }
    words
}

/// Whether a command runs checks (tests, builds, compilers): its outcome matters later.
pub fn runs_checks(key: &str) -> bool {
    key.split(|c: char| c.is_whitespace() || "/:.()=,".contains(c))
        .any(|word| listed(TEST_WORDS, &word.to_ascii_lowercase()))
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
pub fn shell_command(args: &Value) -> Option<String> {
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
pub fn command_key(command: &str) -> String {
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
/// `touch`/`rm`/`tee`, the target of `mv`/`cp`, and output redirections (`mkdir` makes
/// directories, which are not files).
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
                Some("touch" | "rm" | "tee") => out.extend(args.iter().map(|a| (*a).to_owned())),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_ignore_options_and_paths_to_the_program() {
        assert_eq!(area("mvn -q test -Dtest=Foo"), "mvn test");
        assert_eq!(area("./gradlew test"), "gradlew test");
        assert_eq!(area("python reproduce.py"), "python reproduce.py");
        assert_eq!(area("edit 12:15 …"), "edit 12:15");
        assert_eq!(area("submit flat{People always}"), "submit");
        assert_eq!(area("submit 'flag{People always}'"), "submit");
    }

    #[test]
    fn checks_are_tests_and_builds() {
        assert!(runs_checks("cargo test -p app"));
        assert!(runs_checks("./gradlew test"));
        assert!(runs_checks("javac Foo.java && java Foo"));
        assert!(!runs_checks("python reproduce.py"));
    }
}
