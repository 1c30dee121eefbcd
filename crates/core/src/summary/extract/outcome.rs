//! Whether a tool result is a failure, and the line that says so.
//!
//! An error is a command's *outcome*, not a word in its output: a successful
//! `grep ErrorHandler`, a file view showing `throws IOException` or a listing of
//! `ErrorThrowingDeserializer.java` is not an error. So the result is judged from what
//! programs print when they fail: a flag from the tool, an exit status, the diagnostic lines
//! of compilers, test runners, shells and interpreters, and a traceback. Lines that quote
//! other text (numbered source lines, search hits, file listings, diffs) are never read as
//! diagnostics. Only the end of a long output is read (where a failure is reported); a
//! traceback anywhere counts.

use super::text::cut_chars;

/// Longest error line kept.
pub const ERROR_CHARS: usize = 300;
/// Non-quoting lines read from the end of an output.
const TAIL_LINES: usize = 30;

/// Starts of lines that report a failure (compared case-insensitively).
const FAILURE_STARTS: &[&str] = &[
    "error",
    "fatal",
    "failed",
    "failure",
    "fail:",
    "fail ",
    "[error]",
    "npm err!",
    "build failure",
    "build failed",
    "exception in thread",
    "caused by:",
    "segmentation fault",
    "execution timed out",
    "timed out",
    "timeout:",
    "wrong ",
    "wrong!",
    "incorrect",
    "usage:",
    "syntaxerror",
    "your proposed edit has introduced",
    "thread '",
    "panic:",
    "assertion failed",
    "test result: failed",
    "failures!",
    "tests failed",
];

/// Phrases that report a failure anywhere in a line (compared case-insensitively).
const FAILURE_PHRASES: &[&str] = &[
    ": error:",
    ": error[",
    "error[e",
    ": fatal error",
    "command not found",
    "no such file or directory",
    "permission denied",
    "cannot find symbol",
    "syntax error",
    "panicked at",
    "returned non-zero exit status",
    "non-zero exit code",
    "is not recognized as",
    "killed",
    "core dumped",
    "compilation failed",
    "could not compile",
    "unable to access",
];

/// The line of `text` that shows the call failed, cut to [`ERROR_CHARS`]; `None` when the
/// result reads as a success.
///
/// `flagged`: the tool marked the result as an error (Anthropic `is_error`); its best
/// diagnostic line, or its first line, is returned. `looks_only`: the call only reads or
/// searches, so only a diagnostic of the tool itself (a missing file, a usage message) is a
/// failure: what it found is data, whatever words it contains.
pub fn failure_line(text: &str, flagged: bool, looks_only: bool) -> Option<String> {
    let found = diagnostic(text, looks_only).or_else(|| {
        flagged
            .then(|| text.lines().map(str::trim).find(|l| !l.is_empty()))
            .flatten()
    });
    found.map(|line| cut_chars(line, ERROR_CHARS).0.to_owned())
}

fn diagnostic(text: &str, looks_only: bool) -> Option<&str> {
    if !looks_only && let Some(line) = traceback_error(text) {
        return Some(line);
    }
    let mut tail: Vec<&str> = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !quotes_other_text(l))
        .take(TAIL_LINES)
        .collect();
    tail.reverse();
    if let Some(status) = tail.iter().rev().find_map(|l| exit_status(l)) {
        return (status != 0).then(|| {
            tail.iter()
                .copied()
                .find(|l| reports_failure(l, looks_only))
                .unwrap_or_else(|| {
                    *tail
                        .iter()
                        .rev()
                        .find(|l| exit_status(l).is_some())
                        .expect("found above")
                })
        });
    }
    tail.into_iter().find(|l| reports_failure(l, looks_only))
}

/// The exception line that ends a Python traceback (`ValueError: bad`), or the traceback's
/// first line when nothing follows it.
fn traceback_error(text: &str) -> Option<&str> {
    let at = text.rfind("Traceback (most recent call last):")?;
    let block = &text[at..];
    let mut last = block.lines().next();
    for line in block.lines().skip(1) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        // The traceback's frames are indented; the first unindented line names the error.
        if !line.starts_with([' ', '\t']) {
            last = Some(trimmed);
            break;
        }
    }
    last.map(str::trim)
}

/// Lines that show other text rather than a program's own report: numbered source lines
/// (`445:  throws IOException`, `Line 12: …`), search hits (`src/a.rs:12: …`), paths alone
/// (a `find` listing), diff lines, and SWE-agent's file-window headers.
fn quotes_other_text(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && line[digits..].starts_with(':') {
        return true;
    }
    if let Some(rest) = line.strip_prefix("Line ") {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with(':') {
            return true;
        }
    }
    let first_word = line.split_whitespace().next().unwrap_or("");
    if first_word.contains('/') && hit_location(first_word) {
        return true;
    }
    if !line.contains(' ') && (line.starts_with('/') || line.starts_with("./")) {
        return true;
    }
    line.starts_with(['+', '-', '@', '>', '|'])
        || line.starts_with("[File:")
        || line.starts_with("diff --git")
        || line.ends_with("more lines above)")
        || line.ends_with("more lines below)")
}

/// `path:12:` or `path:12:5:` — a compiler diagnostic has `error` after it, a search hit not.
fn hit_location(word: &str) -> bool {
    let mut parts = word.split(':');
    parts.next();
    parts
        .next()
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The status in `exit code 2`, `exit status 1`, `Process finished with exit code 0`, …
fn exit_status(line: &str) -> Option<i64> {
    let lower = line.to_ascii_lowercase();
    for marker in [
        "exit code",
        "exit status",
        "exited with code",
        "exit_code",
        "return code",
    ] {
        if let Some(at) = lower.find(marker) {
            let rest = lower[at + marker.len()..].trim_start_matches([' ', ':', '=', '[']);
            let number: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
            if let Ok(status) = number.parse() {
                return Some(status);
            }
        }
    }
    None
}

/// Whether `line` is a program's report of a failure.
fn reports_failure(line: &str, looks_only: bool) -> bool {
    let lower = line.to_ascii_lowercase();
    if lower.starts_with("warning") || reports_success(&lower) {
        return false;
    }
    if looks_only {
        return tool_diagnostic(line, &lower);
    }
    FAILURE_STARTS.iter().any(|s| lower.starts_with(s))
        || FAILURE_PHRASES.iter().any(|p| lower.contains(p))
        || names_an_exception(line)
        || counts_failures(&lower)
        || tool_diagnostic(line, &lower)
}

/// What a looking command prints when it cannot do its job: `grep: x: No such file or
/// directory`, `ls: cannot access`, SWE-agent's `File x not found` and usage messages.
fn tool_diagnostic(line: &str, lower: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    let program_says = first.len() > 1
        && first.ends_with(':')
        && first[..first.len() - 1]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    let complaint = [
        "no such file",
        "cannot",
        "permission denied",
        "not found",
        "invalid",
        "unrecognized",
    ]
    .iter()
    .any(|p| lower.contains(p));
    (program_says && complaint)
        || lower.contains("no such file or directory")
        || lower.contains("command not found")
        || ((lower.starts_with("file ") || lower.starts_with("directory ")) && lower.ends_with("not found"))
        || lower.starts_with("usage:")
        || lower.starts_with("error:")
        || lower.contains("timed out")
}

/// `ValueError: bad`, `java.lang.NullPointerException`, `AssertionError` at the start of a
/// line: a name ending in `Error` or `Exception`, alone or followed by a colon.
fn names_an_exception(line: &str) -> bool {
    let name_end = line
        .find(|c: char| !(c.is_alphanumeric() || c == '.' || c == '_' || c == '$'))
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    (name.ends_with("Error") || name.ends_with("Exception"))
        && (rest.is_empty() || rest.starts_with(':'))
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
}

/// Test-runner summaries with a non-zero failure count: `Tests run: 5, Failures: 1`,
/// `3 failed`, `FAILED (errors=2)`.
fn counts_failures(lower: &str) -> bool {
    for label in ["failures:", "errors:", "failures=", "errors=", "failed:"] {
        if let Some(at) = lower.find(label) {
            let n: String = lower[at + label.len()..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if n.parse::<u64>().is_ok_and(|n| n > 0) {
                return true;
            }
        }
    }
    lower.match_indices(" failed").any(|(at, _)| {
        let before = lower[..at].rsplit(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
        before.parse::<u64>().is_ok_and(|n| n > 0)
    })
}

/// A line that reports success although it holds a failure word (`0 failed`, `BUILD SUCCESS`).
fn reports_success(lower: &str) -> bool {
    if lower.contains("build success") || lower.starts_with("test result: ok") || lower.contains("all tests passed") {
        return true;
    }
    let has_count = ["failures:", "errors:", "failed"].iter().any(|p| lower.contains(p));
    has_count && !counts_failures(lower) && !lower.starts_with("error") && !lower.contains("error:")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, flagged: bool, looks_only: bool, expected: Option<&str>) {
        assert_eq!(failure_line(text, flagged, looks_only).as_deref(), expected, "{text:?}");
    }

    #[test]
    fn failures_are_outcomes() {
        check(
            "   Compiling app\nerror[E0433]: failed to resolve\n --> src/main.rs:1:5",
            false,
            false,
            Some("error[E0433]: failed to resolve"),
        );
        check(
            "ok\nTraceback (most recent call last):\n  File \"x.py\", line 1\n    f()\nValueError: bad\n",
            false,
            false,
            Some("ValueError: bad"),
        );
        check(
            "/bin/bash: line 7: ./gradlew: No such file or directory",
            false,
            false,
            Some("/bin/bash: line 7: ./gradlew: No such file or directory"),
        );
        check(
            "Tests run: 5, Failures: 1, Errors: 0",
            false,
            false,
            Some("Tests run: 5, Failures: 1, Errors: 0"),
        );
        check(
            "test result: FAILED. 1400 passed; 1 failed",
            false,
            false,
            Some("test result: FAILED. 1400 passed; 1 failed"),
        );
        check("EXECUTION TIMED OUT", false, false, Some("EXECUTION TIMED OUT"));
        check("Wrong flag!", false, false, Some("Wrong flag!"));
        check(
            "Foo.java:12: error: cannot find symbol",
            false,
            false,
            Some("Foo.java:12: error: cannot find symbol"),
        );
        check(
            "done\nProcess finished with exit code 2",
            false,
            false,
            Some("Process finished with exit code 2"),
        );
        check("\n  exit status 2\nmore", true, false, Some("exit status 2"));
    }

    #[test]
    fn quoted_text_and_success_reports_are_not_failures() {
        check(
            "[File: /r/Foo.java (300 lines total)]\n445:  public void x() throws IOException {\n446:  }",
            false,
            false,
            None,
        );
        check(
            "Line 493:  public JsonWriter value(double value) throws IOException {",
            false,
            true,
            None,
        );
        check("src/errors.rs:12: pub struct ErrorHandler;", false, true, None);
        check("./src/main/java/ErrorThrowingDeserializer.java", false, true, None);
        check("test result: ok. 12 passed; 0 failed; 0 ignored", false, false, None);
        check(
            "Tests run: 5, Failures: 0, Errors: 0\nBUILD SUCCESS",
            false,
            false,
            None,
        );
        check(
            "Warning: _curses.error: setupterm: could not find terminfo database\nflag{x}",
            false,
            false,
            None,
        );
        check("No matches found for \"Foo\" in /repo", false, true, None);
        check("all good\n", false, false, None);
        check(
            "Found 3 matches for \"Exception\" in /r:\n/r/a.java (2 matches)\nEnd of matches",
            false,
            true,
            None,
        );
    }

    #[test]
    fn a_looking_command_fails_only_by_its_own_diagnostics() {
        check(
            "grep: nope.txt: No such file or directory",
            false,
            true,
            Some("grep: nope.txt: No such file or directory"),
        );
        check(
            "File missing.py not found",
            false,
            true,
            Some("File missing.py not found"),
        );
        check("Directory src not found", false, true, Some("Directory src not found"));
        check(
            "Error: <start_line> must be less than or equal to 300",
            false,
            true,
            Some("Error: <start_line> must be less than or equal to 300"),
        );
    }
}
