//! tiktoken-rs against bpe-openai (both o200k_base) on ~1 MB of mixed prose, code, HTML and
//! CJK: speed, and that the counts agree. This is the measurement behind satchel's choice of
//! tokenizer crate (see `crates/core/src/tokens.rs`).
#![allow(missing_docs)]

fn main() {
    let text = corpus();
    let tiktoken = tiktoken_rs::o200k_base_singleton().count_ordinary(&text);
    let bpe = bpe_openai::o200k_base().count(&text);
    eprintln!("o200k counts on {} bytes: tiktoken-rs {tiktoken}, bpe-openai {bpe}", text.len());
    assert_eq!(tiktoken, bpe, "the two crates must agree");
    divan::main();
}

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

#[divan::bench]
fn tiktoken_rs_o200k(bencher: divan::Bencher) {
    let text = corpus();
    let bpe = tiktoken_rs::o200k_base_singleton();
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| bpe.count_ordinary(divan::black_box(&text)));
}

#[divan::bench]
fn bpe_openai_o200k(bencher: divan::Bencher) {
    let text = corpus();
    let tokenizer = bpe_openai::o200k_base();
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| tokenizer.count(divan::black_box(&text)));
}
