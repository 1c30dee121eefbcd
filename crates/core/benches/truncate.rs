//! What cutting a tool result costs, through the calls the daemon makes: `ingest` is the work
//! done once when a result enters (`TextStats::of` + `offload::must_offload`), `render_recent` /
//! `render_old` are `render::render_message` in each phase (50,000- and 3,000-byte limits by
//! default), which the daemon repeats for every result on every request, and `excerpt_*` is
//! `truncate::render_excerpt` alone, without the message clone, to show the O(limit) part.
//! Outputs of 10 KB to 10 MB: ASCII log lines, multi-byte lines (CJK, emoji, ZWJ sequences mixed
//! with ASCII), and a single line with no newline (minified JSON). Throughput is per byte of the
//! full output. Run: `cargo bench -p satchel-core --bench truncate`.

use divan::Bencher;
use divan::counter::BytesCount;
use satchel_core::format::ToolCall;
use satchel_core::offload;
use satchel_core::render::{OffloadedText, render_message};
use satchel_core::truncate::{FileRef, TextStats, render_excerpt};
use satchel_protocol::{Config, Phase};
use serde_json::{Value, json};

fn main() {
    divan::main();
}

const SIZES: [usize; 4] = [10_000, 100_000, 1_000_000, 10_000_000];

/// The shape of a tool output.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Build/test log lines, ~60-90 bytes each.
    AsciiLines,
    /// CJK, emoji (with ZWJ families and skin tones) and ASCII lines mixed.
    MultiByte,
    /// One line without a newline: minified JSON.
    LongLine,
}

const SHAPES: [Shape; 3] = [Shape::AsciiLines, Shape::MultiByte, Shape::LongLine];

/// A deterministic output of `shape`, cut to at most `size` bytes on a char boundary.
fn output(shape: Shape, size: usize) -> String {
    let mut text = String::with_capacity(size + 128);
    let mut i = 0usize;
    while text.len() < size {
        let line = match shape {
            Shape::AsciiLines => match i % 4 {
                0 => format!(
                    "   Compiling crate-{i} v0.{}.{} (/work/crates/crate-{i})\n",
                    i % 10,
                    i % 7
                ),
                1 => format!("test module_{}::case_{i} ... ok\n", i % 97),
                2 => format!(
                    "warning: unused variable `x{i}` --> src/lib_{}.rs:{}:9\n",
                    i % 13,
                    i % 500
                ),
                _ => format!(
                    "error[E0308]: mismatched types at src/parser.rs:{}:{}\n",
                    i % 900,
                    i % 80
                ),
            },
            Shape::MultiByte => match i % 4 {
                0 => format!("日志：第{i}行 处理完成，耗时 {}ms ✅\n", i % 1000),
                1 => format!("🚀 deploy step {i} 👨\u{200D}👩\u{200D}👧 done — 👍🏽 ok\n"),
                2 => format!("plain ascii line {i}: value={}\n", i * 31 % 10_007),
                _ => format!("エラー: ファイルが見つかりません src/モジュール_{i}.rs (é\u{301})\n"),
            },
            Shape::LongLine => format!(
                r#"{{"id":{i},"name":"item-{i}","tags":["a","b"],"score":{}}},"#,
                i % 100
            ),
        };
        text.push_str(&line);
        i += 1;
    }
    text.truncate(text.floor_char_boundary(size));
    text
}

/// A tool message holding `text` and its offload record, as the daemon keeps them: a plain
/// `bash` result, so the limits are `pruning_recent_msg_max_bytes` / `pruning_old_msg_max_bytes`.
fn offloaded_message(text: String) -> (Value, Vec<OffloadedText>) {
    let stats = TextStats::of(&text);
    let message = json!({"role": "tool", "tool_call_id": "call_1", "content": text});
    let offloaded = vec![OffloadedText {
        pointer: "/content".into(),
        file: "tool_result/0f8fad5b-d9cb-469f-a165-70867728950e.txt".into(),
        stats,
        call: Some(bash_call()),
    }];
    (message, offloaded)
}

fn bash_call() -> ToolCall {
    ToolCall {
        id: "call_1".into(),
        name: "bash".into(),
        arguments: r#"{"command":"cargo test --workspace"}"#.into(),
    }
}

/// On entry: measure the text and decide whether it goes to a file (the save itself is I/O).
#[divan::bench(consts = SIZES, args = SHAPES)]
fn ingest<const N: usize>(bencher: Bencher, shape: Shape) {
    let text = output(shape, N);
    let config = Config::default();
    let call = bash_call();
    bencher.counter(BytesCount::of_str(&text)).bench(|| {
        let text = divan::black_box(text.as_str());
        let kind = offload::classify(Some(&call), &config.render);
        (offload::must_offload(text.len(), kind, &config), TextStats::of(text))
    });
}

fn bench_render(bencher: Bencher, shape: Shape, size: usize, phase: Phase) {
    let (message, offloaded) = offloaded_message(output(shape, size));
    let config = Config::default();
    bencher
        .counter(BytesCount::new(offloaded[0].stats.total_bytes))
        .bench(|| {
            render_message(
                divan::black_box(&message),
                &offloaded,
                phase,
                &config.render,
                "/home/user/workspace",
                Some(12),
                &[],
            )
        });
}

/// First phase (50,000 bytes): 10 KB stays whole, larger outputs are cut.
#[divan::bench(consts = SIZES, args = SHAPES)]
fn render_recent<const N: usize>(bencher: Bencher, shape: Shape) {
    bench_render(bencher, shape, N, Phase::Recent);
}

/// Second phase (3,000 bytes): every size is cut.
#[divan::bench(consts = SIZES, args = SHAPES)]
fn render_old<const N: usize>(bencher: Bencher, shape: Shape) {
    bench_render(bencher, shape, N, Phase::Old);
}

fn bench_excerpt(bencher: Bencher, shape: Shape, size: usize, phase: Phase) {
    let text = output(shape, size);
    let stats = TextStats::of(&text);
    let config = Config::default();
    let render_config = &config.render;
    let kind = offload::classify(Some(&bash_call()), render_config);
    let limits = offload::excerpt_limits(kind, phase, render_config).expect("plain results have limits");
    let file = FileRef {
        path: "tool_result/0f8fad5b-d9cb-469f-a165-70867728950e.txt",
        root: Some("/home/user/workspace"),
        id: None,
    };
    bencher
        .counter(BytesCount::new(text.len()))
        .bench(|| render_excerpt(divan::black_box(&text), &stats, &limits, &file));
}

/// `render_excerpt` alone in the first phase: bounded by the limit, not the output.
#[divan::bench(consts = SIZES, args = SHAPES)]
fn excerpt_recent<const N: usize>(bencher: Bencher, shape: Shape) {
    bench_excerpt(bencher, shape, N, Phase::Recent);
}

/// `render_excerpt` alone in the second phase.
#[divan::bench(consts = SIZES, args = SHAPES)]
fn excerpt_old<const N: usize>(bencher: Bencher, shape: Shape) {
    bench_excerpt(bencher, shape, N, Phase::Old);
}
