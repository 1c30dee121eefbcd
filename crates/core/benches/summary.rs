//! What the extractive summariser costs at compaction time, called as the daemon's `summarize`
//! calls it (`ExtractiveSummarizer.summarize` on a `SummaryInput` with the default config's
//! summary budget, 10,485 tokens at its 131,072-token window). The span holds full original messages of a coding-agent loop: file
//! reads, test runs with panics and error lines, greps, edits, redirections, prose with decision
//! cues and user constraints, about 1 KB per message (~4 MB at 4,000). `first` has no previous summary;
//! `incremental` merges into the summary of an earlier 4,000-message span (with archive ranges),
//! as every compaction after the first does. The budget fit counts tokens, so both the default
//! o200k tokenizer and the byte estimate are measured. Then `summary_message_text`, which the
//! daemon renders and counts after each compaction. Run: `cargo bench -p satchel-core --bench summary`.

use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};
use satchel_core::format::MessageFormat;
use satchel_core::summary::extractive::ExtractiveSummarizer;
use satchel_core::summary::render::summary_message_text;
use satchel_core::summary::{Summarizer, SummaryInput};
use satchel_core::tokens::TokenCounter;
use satchel_protocol::config::Tokenizer;
use satchel_protocol::{ArchiveRange, CompactSummary, Config};
use serde_json::{Value, json};

fn main() {
    divan::main();
}

const SIZES: [usize; 3] = [100, 1_000, 4_000];
const TOKENIZERS: [&str; 2] = ["o200k_base", "estimate"];

/// A small deterministic generator (64-bit LCG), so spans vary without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as usize
    }
}

const CRATES: [&str; 5] = ["core", "storage", "protocol", "satchel", "lexer"];
const DIRS: [&str; 6] = ["src", "src/parser", "src/lexer", "tests", "src/summary", "benches"];

fn module(r: usize) -> String {
    format!("crates/{}/{}/mod_{}.rs", CRATES[r % 5], DIRS[r % 6], r % 150)
}

/// A source file as `read_file` shows it: numbered lines.
fn source(path: &str, lines: usize, seed: usize) -> String {
    let mut out = String::with_capacity(lines * 60);
    for l in 1..=lines {
        let line = match (l + seed) % 6 {
            0 => format!("pub fn parse_{seed}_{l}(input: &str) -> Result<Ast, ParseError> {{"),
            1 => format!("    let token = self.next_token(pos + {l}).ok_or(ParseError::Eof)?;"),
            2 => "    // Skip whitespace and comments before the next token.".to_owned(),
            3 => format!("    match token.kind {{ Kind::Ident => self.ident({l}), _ => self.expr() }}"),
            4 => format!("    debug_assert!(self.pos <= self.input.len(), \"{path}\");"),
            _ => "}".to_owned(),
        };
        out.push_str(&format!("{l:>6}\t{line}\n"));
    }
    out
}

/// A test run: mostly passing, sometimes a panic with its location, sometimes a compile error.
fn test_output(krate: &str, test: &str, r: usize) -> (String, bool) {
    let mut out = format!("   Compiling satchel-{krate} v0.1.0 (/work/repo/crates/{krate})\n");
    out.push_str("    Finished `test` profile [unoptimized + debuginfo] target(s) in 4.21s\n");
    out.push_str(&format!(
        "     Running unittests src/lib.rs (target/debug/deps/satchel_{krate}-{r:x})\n\n"
    ));
    let cases = 10 + r % 30;
    for c in 0..cases {
        out.push_str(&format!("test {test}::case_{c} ... ok\n"));
    }
    match r % 5 {
        0 => {
            out.push_str(&format!(
                "test {test}::edge ... FAILED\n\nfailures:\n\n---- {test}::edge stdout ----\n\
                 thread '{test}::edge' panicked at crates/{krate}/src/lexer.rs:{}:9:\n\
                 assertion `left == right` failed\n  left: 3\n right: 4\n\n\
                 test result: FAILED. {cases} passed; 1 failed; 0 ignored\n",
                100 + r % 400
            ));
            (out, true)
        }
        1 => (
            format!(
                "error[E0308]: mismatched types\n  --> crates/{krate}/src/parser.rs:{}:17\n   |\n\
                 {} |         let end: u32 = start + len;\n   |                  ^^^ expected `u32`, found `usize`\n\n\
                 error: could not compile `satchel-{krate}` (lib) due to 1 previous error\n",
                40 + r % 300,
                40 + r % 300
            ),
            true,
        ),
        _ => {
            out.push_str(&format!(
                "\ntest result: ok. {cases} passed; 0 failed; 0 ignored; finished in 0.02s\n"
            ));
            (out, false)
        }
    }
}

const PROSE: [&str; 6] = [
    "Let me look at how the lexer produces tokens before changing anything.",
    "The issue is that `next_token` stops one byte early because the loop bound uses `len - 1`. \
     I'll change the bound and add a regression test.",
    "I will run the tests for this crate again to confirm the fix.",
    "The root cause is the CRLF handling in the line splitter, so we should normalise endings once at the start.",
    "Tests pass now. Next I'll check the callers of this function.",
    "Instead of patching every caller, let's keep the public API and fix it in one place.",
];

const USER: [&str; 4] = [
    "Please make sure the tests pass and don't change the public API of crates/core. Keep error messages in English.",
    "ok",
    "Also handle CRLF line endings, and never panic on invalid UTF-8 input.",
    "Prefer small commits; avoid touching the benches unless you must.",
];

/// One call and its result: (tool name, arguments, result text).
fn call(r: &mut Rng, turn: usize) -> (&'static str, Value, String) {
    let pick = r.next();
    let path = module(r.next());
    match pick % 8 {
        0 | 1 => {
            let lines = 30 + r.next() % 60;
            ("read_file", json!({"path": path}), source(&path, lines, turn))
        }
        2 | 3 => {
            let krate = CRATES[r.next() % 5];
            let test = format!("mod_{}::tests", r.next() % 150);
            let (out, _) = test_output(krate, &test, r.next());
            (
                "bash",
                json!({"command": format!("cargo test -p satchel-{krate} {test}")}),
                out,
            )
        }
        4 => {
            let symbol = format!("parse_{}", r.next() % 400);
            let hits: String = (0..5 + r.next() % 20)
                .map(|h| {
                    format!(
                        "{}:{}:pub fn {symbol}(input: &str) -> Result<Ast, ParseError> {{\n",
                        module(h + turn),
                        10 + h
                    )
                })
                .collect();
            (
                "bash",
                json!({"command": format!("rg -n \"fn {symbol}\" crates/")}),
                hits,
            )
        }
        5 => (
            "str_replace_editor",
            json!({"command": "str_replace", "path": path, "old_str": "pos < len - 1", "new_str": "pos < len"}),
            format!(
                "The file {path} has been edited. Here's the result of running `cat -n` on a snippet:\n{}",
                source(&path, 8, turn)
            ),
        ),
        6 => (
            "bash",
            json!({"command": format!("python3 scripts/check_api.py --crate {} > build/api_{turn}.txt", CRATES[turn % 5])}),
            if turn.is_multiple_of(3) {
                "Traceback (most recent call last):\n  File \"scripts/check_api.py\", line 12, in <module>\n\
                 FileNotFoundError: [Errno 2] No such file or directory: 'build/api.json'\n"
                    .to_owned()
            } else {
                String::new()
            },
        ),
        _ => {
            let dir = DIRS[r.next() % 6];
            let listing: String = (0..10 + r.next() % 20)
                .map(|f| format!("-rw-r--r-- 1 dev dev {:>6} Jan  1 12:00 mod_{f}.rs\n", 100 + f * 37))
                .collect();
            ("bash", json!({"command": format!("ls -la {dir}")}), listing)
        }
    }
}

/// A compacted span of `n` OpenAI messages; `seed` makes different spans of one session.
fn span(n: usize, seed: u64) -> Vec<Value> {
    let mut r = Rng(seed);
    let mut messages = vec![json!({"role": "user", "content": USER[0]})];
    let mut turn = 0;
    while messages.len() < n {
        turn += 1;
        let (name, args, result) = call(&mut r, turn);
        let id = format!("call_{seed}_{turn}");
        messages.push(json!({
            "role": "assistant",
            "content": PROSE[r.next() % PROSE.len()],
            "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}],
        }));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
        if turn % 12 == 0 {
            messages.push(json!({"role": "user", "content": USER[r.next() % USER.len()]}));
        }
    }
    messages.truncate(n);
    messages
}

fn bytes(messages: &[Value]) -> usize {
    messages.iter().map(|m| m.to_string().len()).sum()
}

fn counter(tokenizer: &str) -> TokenCounter {
    let tokenizer: Tokenizer = serde_json::from_value(Value::from(tokenizer)).expect("a tokenizer name");
    let counter = TokenCounter::new(tokenizer, Config::default().tokens.token_count_estimate_divisor.get());
    counter.count_text("warm up the singleton");
    counter
}

fn summarize(previous: Option<&CompactSummary>, messages: &[Value], counter: &TokenCounter) -> CompactSummary {
    let input = SummaryInput {
        previous,
        ..SummaryInput::new(
            messages,
            MessageFormat::Openai,
            Config::default().summary_budget_tokens(),
            counter,
        )
    };
    ExtractiveSummarizer
        .summarize(&input)
        .expect("the extractive summariser never fails")
}

/// The summary in force after an earlier compaction of 4,000 messages.
fn previous_summary(counter: &TokenCounter) -> CompactSummary {
    let mut summary = summarize(None, &span(4_000, 7), counter);
    summary.archive = (0..3)
        .map(|k| ArchiveRange {
            file: format!("dialog/2025-01-0{}.jsonl", k + 1),
            start_line: 1 + k * 4_000,
            end_line: (k + 1) * 4_000,
            first_index: k * 1_333,
            last_index: (k + 1) * 1_333 - 1,
            messages: 1_333,
        })
        .collect();
    summary
}

fn bench_summarize(bencher: Bencher, n: usize, tokenizer: &str, incremental: bool) {
    let counter = counter(tokenizer);
    let previous = incremental.then(|| previous_summary(&counter));
    let messages = span(n, 1);
    bencher
        .counter(ItemsCount::new(n))
        .counter(BytesCount::new(bytes(&messages)))
        .bench(|| summarize(previous.as_ref(), divan::black_box(&messages), &counter));
}

/// The first compaction of a session: no previous summary.
#[divan::bench(args = TOKENIZERS, consts = SIZES, sample_count = 20)]
fn first<const N: usize>(bencher: Bencher, tokenizer: &str) {
    bench_summarize(bencher, N, tokenizer, false);
}

/// A later compaction: the new span merged into the previous summary.
#[divan::bench(args = TOKENIZERS, consts = SIZES, sample_count = 20)]
fn incremental<const N: usize>(bencher: Bencher, tokenizer: &str) {
    bench_summarize(bencher, N, tokenizer, true);
}

/// Rendering the summary message the daemon counts after each compaction.
#[divan::bench]
fn message_text(bencher: Bencher) {
    let counter = counter("o200k_base");
    let previous = previous_summary(&counter);
    let summary = summarize(Some(&previous), &span(4_000, 1), &counter);
    bencher.bench(|| summary_message_text(divan::black_box(&summary)));
}
