//! What token counting costs: tiktoken-rs o200k/cl100k against the byte estimate, on ~1 MB of
//! mixed prose, code, HTML and CJK, plus a whole message. Run: `cargo bench -p satchel-core`.
//! (`bpe-openai` was measured at 1.7× tiktoken-rs in `../shared/notes/rust-stack.md` but adds
//! 32 MB of dictionaries; counts are cached per message, so tiktoken-rs is fast enough.)

use satchel_core::tokens::TokenCounter;
use satchel_protocol::config::Tokenizer;

fn main() {
    divan::main();
}

/// ~1 MB of deterministic mixed text.
fn corpus() -> String {
    let prose = "The agent reads the failing test, finds the off-by-one in the lexer, and fixes it. ";
    let code = "fn next_token(input: &str, pos: usize) -> Option<(Token, Span)> { let end = pos + 1; }\n";
    let html = "<div class=\"row\"><span id=\"x12\">value</span><a href=\"/docs/page.html\">link</a></div>\n";
    let cjk = "上下文窗口管理器把旧的工具输出保存到文件中，只保留摘要。";
    let mut text = String::with_capacity(1 << 20);
    let mut i = 0;
    while text.len() < 1_000_000 {
        text.push_str([prose, code, html, cjk][i % 4]);
        i += 1;
    }
    text
}

#[divan::bench(args = ["o200k_base", "cl100k_base", "estimate"])]
fn count_1mb(bencher: divan::Bencher, tokenizer: &str) {
    let tokenizer: Tokenizer = serde_json::from_value(serde_json::Value::from(tokenizer)).unwrap();
    let text = corpus();
    let counter = TokenCounter::new(tokenizer, 4.0);
    counter.count_text("warm up the singleton");
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| counter.count_text(divan::black_box(&text)));
}

#[divan::bench]
fn count_message_with_50kb_tool_result(bencher: divan::Bencher) {
    let mut text = corpus();
    text.truncate(text.floor_char_boundary(50_000));
    let message = serde_json::json!({"role": "tool", "tool_call_id": "call_1", "content": text});
    let counter = TokenCounter::new(Tokenizer::O200kBase, 4.0);
    counter.count_text("warm up");
    bencher.bench(|| counter.count_message(divan::black_box(&message)));
}
