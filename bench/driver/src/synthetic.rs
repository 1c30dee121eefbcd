//! A deterministic synthetic coding-agent conversation in OpenAI chat format.
//!
//! It exists so the benchmark runs anywhere, without the shared data or the peers' exporter, on a
//! conversation whose shape resembles a real agent loop: a system prompt, a task, then rounds of
//! `bash` / `read_file` / `grep` calls each answered by its `tool` result. Result sizes follow
//! the profile of the shared trajectories with a heavier tail: mostly 500 B–8 KB, about one in
//! eight 20–120 KB (long test logs, big files), a few tiny ones. Some outputs carry lines of
//! CJK, emoji or Cyrillic, so UTF-8 boundaries get exercised. The same `(tokens, seed)` always
//! gives the same bytes.

use serde_json::{Value, json};

use crate::conversation::json_len;

/// Approximate tokens as bytes / 4, the estimate the peers' generator also sizes by.
const BYTES_PER_TOKEN: u64 = 4;

/// Smallest tool output once a result is clipped to the remaining budget: a tiny conversation
/// still gets real-looking results instead of empty strings.
const MIN_OUTPUT_BYTES: usize = 120;

/// No result is over this share (1/n) of the whole conversation, so a small conversation still
/// has rounds of calls instead of one huge result.
const MAX_OUTPUT_SHARE: usize = 8;

const MODULES: &[&str] = &[
    "parser", "lexer", "config", "server", "cache", "auth", "storage", "render", "cli", "http",
];
const FILES: &[&str] = &[
    "mod", "lib", "error", "types", "state", "codec", "handler", "util", "tests", "builder",
];
const IDENTS: &[&str] = &[
    "token", "span", "offset", "buffer", "request", "session", "limit", "budget", "entry", "cursor", "retry", "frame",
];
const NON_ASCII_LINES: &[&str] = &[
    "// 注意：这里的偏移量按字节计算，不是按字符。",
    "    assert_eq!(render(\"héllo wörld\"), \"héllo wörld\"); // ✅",
    "warning: 日本語のファイル名 `テスト.txt` を開けません 🙏",
    "note: Проверьте кодировку входного файла (UTF-8).",
    "    let emoji = \"👩‍💻🧑🏽‍🚀🏳️‍🌈\"; // ZWJ sequences",
    "error: 파일을 찾을 수 없습니다: src/설정.rs 🚀",
];
const TASKS: &[&str] = &[
    "CI fails on `cargo test -p parser` since yesterday's merge: `parser::tests::unicode_escape` panics. \
     Find the cause and fix it without changing the public API. Run the whole test suite before you stop.",
    "The server returns 500 on `/v1/sessions/{id}` when the id contains a dot. Reproduce it with a test, fix \
     the routing, and keep the old URLs working.",
    "Profile `cache::lookup`; users report 10x slower startups after the storage refactor. Make it at least as \
     fast as before and add a benchmark.",
];
const FOLLOW_UPS: &[&str] = &[
    "Also check that the fix works on Windows paths (backslashes).",
    "Please don't touch the generated files under src/gen/.",
    "请同时更新 CHANGELOG，并保持 API 不变。",
    "Looks good so far. Can you also run clippy with -D warnings?",
    "What about the config loader? It had the same pattern I think.",
];

/// The tools the agent calls, with the kind of output each produces.
#[derive(Clone, Copy)]
enum Tool {
    Bash,
    ReadFile,
    Grep,
}

/// Builds a conversation of about `target_tokens` tokens (bytes/4 of the messages JSON).
pub fn generate(target_tokens: u64, seed: u64) -> Vec<Value> {
    let mut generator = Generator {
        rng: fastrand::Rng::with_seed(seed),
        calls: 0,
    };
    let target_bytes = usize::try_from(target_tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX);
    let mut conversation = Sized {
        messages: Vec::new(),
        bytes: 2,
    };
    conversation.push(json!({"role": "system", "content": system_prompt()}));
    conversation.push(json!({"role": "user", "content": generator.pick(TASKS)}));
    while conversation.bytes < target_bytes {
        generator.round(&mut conversation, target_bytes);
    }
    conversation.push(json!({"role": "assistant", "content": generator.progress_note("Summary")}));
    conversation.messages
}

/// The messages so far and the length of their JSON array, kept up to date as they are pushed.
struct Sized {
    messages: Vec<Value>,
    bytes: usize,
}

impl Sized {
    fn push(&mut self, message: Value) {
        self.bytes += json_len(&message) + usize::from(!self.messages.is_empty());
        self.messages.push(message);
    }
}

struct Generator {
    rng: fastrand::Rng,
    /// Tool calls so far; part of every call id, which keeps ids unique.
    calls: usize,
}

impl Generator {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.rng.usize(..items.len())]
    }

    /// One assistant turn: 1–3 tool calls, their results, and sometimes a note and a user reply.
    fn round(&mut self, conversation: &mut Sized, target_bytes: usize) {
        let n_calls = match self.rng.u8(..10) {
            0..7 => 1,
            7..9 => 2,
            _ => 3,
        };
        let mut calls = Vec::new();
        let mut results = Vec::new();
        // Bytes once this round's earlier results are in: each result is clipped to what is left.
        let mut planned = conversation.bytes;
        for _ in 0..n_calls {
            self.calls += 1;
            let id = format!("call_{:05}_{:08x}", self.calls, self.rng.u32(..));
            let tool = match self.rng.u8(..20) {
                0..9 => Tool::Bash,
                9..16 => Tool::ReadFile,
                _ => Tool::Grep,
            };
            let remaining = target_bytes
                .saturating_sub(planned)
                .min(target_bytes / MAX_OUTPUT_SHARE);
            let size = self.output_size().min(remaining.max(MIN_OUTPUT_BYTES));
            planned += size;
            let (name, arguments, output) = self.tool_call(tool, size);
            calls.push(
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}),
            );
            results.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        }
        let thought = (self.rng.u8(..10) < 3).then(|| format!("Let me look at the {}.", self.pick(IDENTS)));
        conversation.push(json!({"role": "assistant", "content": thought, "tool_calls": calls}));
        for result in results {
            conversation.push(result);
        }
        if self.rng.u8(..100) < 12 {
            let note = self.progress_note("Progress");
            conversation.push(json!({"role": "assistant", "content": note}));
            if self.rng.bool() {
                conversation.push(json!({"role": "user", "content": self.pick(FOLLOW_UPS)}));
            }
        }
    }

    /// Output sizes: 6 % tiny, 82 % 500 B–8 KB, 12 % 20–120 KB.
    fn output_size(&mut self) -> usize {
        match self.rng.u8(..100) {
            0..6 => self.rng.usize(100..500),
            6..88 => self.rng.usize(500..8_000),
            _ => self.rng.usize(20_000..120_000),
        }
    }

    /// The call's tool name, its arguments and an output of about `size` bytes.
    fn tool_call(&mut self, tool: Tool, size: usize) -> (&'static str, Value, String) {
        let module = self.pick(MODULES);
        let file = self.pick(FILES);
        let non_ascii = self.rng.u8(..4) == 0;
        match tool {
            Tool::Bash => match self.rng.u8(..4) {
                0 | 1 => {
                    let command = format!("cargo test -p {module} 2>&1 | tail -n 400");
                    (
                        "bash",
                        json!({"command": command}),
                        self.lines(size, non_ascii, |g| g.test_line(module)),
                    )
                }
                2 => {
                    let command = format!("cargo build -p {module} --message-format short");
                    (
                        "bash",
                        json!({"command": command}),
                        self.lines(size, non_ascii, |g| g.build_line(module)),
                    )
                }
                _ => {
                    let command = format!("git log -p --stat -- src/{module}/ | head -n 2000");
                    (
                        "bash",
                        json!({"command": command}),
                        self.lines(size, non_ascii, |g| g.code_line(true)),
                    )
                }
            },
            Tool::ReadFile => {
                let markdown = self.rng.u8(..8) == 0;
                let path = if markdown {
                    format!("docs/{module}.md")
                } else {
                    format!("src/{module}/{file}.rs")
                };
                let output = if markdown {
                    self.lines(size, non_ascii, |g| g.markdown_line())
                } else {
                    self.lines(size, non_ascii, |g| g.code_line(false))
                };
                ("read_file", json!({"path": path}), output)
            }
            Tool::Grep => {
                let pattern = format!("fn {}_", self.pick(IDENTS));
                (
                    "grep",
                    json!({"pattern": pattern, "path": "src", "line_numbers": true}),
                    { self.lines(size, non_ascii, |g| g.grep_line()) },
                )
            }
        }
    }

    /// Lines from `line` until `size` bytes; with `non_ascii`, about 3 % are non-ASCII lines.
    fn lines(&mut self, size: usize, non_ascii: bool, mut line: impl FnMut(&mut Self) -> String) -> String {
        let mut out = String::with_capacity(size + 200);
        while out.len() < size {
            if non_ascii && self.rng.u8(..100) < 3 {
                out.push_str(self.pick(NON_ASCII_LINES));
            } else {
                out.push_str(&line(self));
            }
            out.push('\n');
        }
        out
    }

    fn test_line(&mut self, module: &str) -> String {
        let name = format!("{module}::tests::{}_{}", self.pick(IDENTS), self.rng.u16(..500));
        match self.rng.u8(..40) {
            0 => format!(
                "test {name} ... FAILED\n---- {name} stdout ----\nthread '{name}' panicked at src/{module}/lib.rs:{}:9:\n\
                 assertion `left == right` failed\n  left: {}\n right: {}",
                self.rng.u16(1..900),
                self.rng.u32(..),
                self.rng.u32(..)
            ),
            1 => format!(
                "test result: FAILED. {} passed; 1 failed; 0 ignored",
                self.rng.u16(10..400)
            ),
            _ => format!("test {name} ... ok"),
        }
    }

    fn build_line(&mut self, module: &str) -> String {
        let file = self.pick(FILES);
        match self.rng.u8(..6) {
            0 => format!(
                "src/{module}/{file}.rs:{}:{}: warning: unused variable: `{}`",
                self.rng.u16(1..900),
                self.rng.u8(1..80),
                self.pick(IDENTS)
            ),
            1 => format!(
                "src/{module}/{file}.rs:{}:{}: error[E0308]: mismatched types: expected `usize`, found `u32`",
                self.rng.u16(1..900),
                self.rng.u8(1..80)
            ),
            _ => format!(
                "   Compiling {module}-{file} v0.{}.{}",
                self.rng.u8(..20),
                self.rng.u8(..20)
            ),
        }
    }

    fn code_line(&mut self, diff: bool) -> String {
        let indent = "    ".repeat(self.rng.usize(..4));
        let (a, b) = (self.pick(IDENTS), self.pick(IDENTS));
        let body = match self.rng.u8(..5) {
            0 => format!(
                "pub fn {a}_{b}(&mut self, {a}: usize) -> Result<{}, Error> {{",
                capitalise(b)
            ),
            1 => format!("let {a} = self.{b}.get({a}).ok_or(Error::Missing(\"{b}\"))?;"),
            2 => format!("// {a} must stay below the {b} limit, see the module docs"),
            3 => format!(
                "if {a}.len() > {} {{ return Err(Error::TooLong); }}",
                self.rng.u16(..4096)
            ),
            _ => "}".to_owned(),
        };
        let prefix = if diff { ["+", "-", " "][self.rng.usize(..3)] } else { "" };
        format!("{prefix}{indent}{body}")
    }

    fn markdown_line(&mut self) -> String {
        match self.rng.u8(..6) {
            0 => format!("## The {} {}", self.pick(IDENTS), self.pick(MODULES)),
            1 => String::new(),
            _ => format!(
                "- The `{}` keeps its {} within the {}; see `src/{}/{}.rs`.",
                self.pick(MODULES),
                self.pick(IDENTS),
                self.pick(IDENTS),
                self.pick(MODULES),
                self.pick(FILES)
            ),
        }
    }

    fn grep_line(&mut self) -> String {
        let (module, file, ident) = (self.pick(MODULES), self.pick(FILES), self.pick(IDENTS));
        format!(
            "src/{module}/{file}.rs:{}:    pub fn {ident}_{}(&self) -> usize {{",
            self.rng.u16(1..2000),
            self.rng.u8(..50)
        )
    }

    fn progress_note(&mut self, heading: &str) -> String {
        let (module, ident) = (self.pick(MODULES), self.pick(IDENTS));
        format!(
            "{heading}: the {ident} handling in src/{module}/ is the culprit; the {} check runs before the {} is \
             updated. I changed the order and the failing test passes now; next I will run the full suite.",
            self.pick(IDENTS),
            self.pick(IDENTS)
        )
    }
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

fn system_prompt() -> String {
    let mut prompt = String::from(
        "You are a coding agent working in a Rust repository. You have three tools: `bash` runs a shell \
         command and returns its output, `read_file` returns a file's content, `grep` searches the tree.\n",
    );
    for (i, rule) in [
        "Read the relevant code before you change it.",
        "Run the tests after every change and read the failures in full.",
        "Keep the public API stable unless the user asks otherwise.",
        "Prefer small, reviewable diffs; explain each change in one sentence.",
        "Never commit; the user reviews and commits.",
    ]
    .iter()
    .cycle()
    .take(40)
    .enumerate()
    {
        prompt.push_str(&format!("{}. {rule}\n", i + 1));
    }
    prompt
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn same_seed_same_bytes() {
        assert_eq!(generate(20_000, 7), generate(20_000, 7));
        assert_ne!(generate(20_000, 7), generate(20_000, 8));
    }

    #[test]
    fn size_is_near_the_target() {
        for tokens in [10_000, 130_000] {
            let bytes = serde_json::to_string(&generate(tokens, 7)).unwrap().len() as u64;
            let target = tokens * BYTES_PER_TOKEN;
            assert!(
                bytes >= target && bytes < target + target / 10 + 2_000,
                "{tokens}: {bytes} bytes"
            );
        }
    }

    #[test]
    fn every_call_is_answered_right_after_it_and_ids_are_unique() {
        let messages = generate(200_000, 3);
        let mut seen = HashSet::new();
        let mut pending: Vec<String> = Vec::new();
        for message in &messages {
            if message["role"] == "tool" {
                let id = message["tool_call_id"].as_str().unwrap();
                assert!(pending.first().is_some_and(|p| p == id), "result {id} out of order");
                pending.remove(0);
            } else {
                assert!(pending.is_empty(), "message between a call and its result");
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    let id = call["id"].as_str().unwrap().to_owned();
                    assert!(seen.insert(id.clone()), "duplicate id {id}");
                    pending.push(id);
                }
            }
        }
        assert!(pending.is_empty());
        assert!(
            messages
                .iter()
                .any(|m| m["content"].as_str().is_some_and(|c| !c.is_ascii()))
        );
    }
}
