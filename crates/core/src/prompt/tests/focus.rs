//! Request focus: what is extracted from a query, and how it boosts each kind of section.

use satchel_protocol::RequestFocus;
use serde_json::json;

use super::*;

fn show_focus(f: &RequestFocus) -> String {
    format!(
        "  files: {:?}\n  symbols: {:?}\n  plan: {:?}\n",
        f.active_file_paths, f.active_symbols, f.plan_signals
    )
}

/// The focus of each query, one block per query.
fn check_focus(name: &str, queries: &[&str]) {
    let mut out = String::new();
    for q in queries {
        let f = request_focus(q);
        let _ = write!(out, "> {q}\n{}", show_focus(&f));
        assert!(
            f.active_file_paths.len() <= crate::prompt::focus::MAX_FILES
                && f.active_symbols.len() <= crate::prompt::focus::MAX_SYMBOLS
        );
    }
    insta::assert_snapshot!(name, out);
}

#[test]
fn paths_are_words_with_a_slash_or_a_file_extension() {
    check_focus(
        "focus_paths",
        &[
            "fix the bug in src/a/B.java, then run ./x.py.",
            "look at `crates/core/src/prompt/mod.rs` and (Cargo.toml)",
            "the panic is at src/main.rs:42:7; see docs/ too",
            "and/or yes/no km/h 1/2 https://example.com/a.rs are not paths, ~/notes and /etc/hosts are",
            "a.rs b.rs c.rs d.rs e.rs f.rs g.rs a.rs",
            "AppService.validate and e.g. version 1.2 are not files; README.md is",
            "handle inputting/reading and client/server in crates/parser, tests/fixtures and scripts/; src/bits/x too",
            "module_1/parse and web-app/ui and lib/Foo are code, Input/Output is prose",
        ],
    );
}

#[test]
fn symbols_come_from_backticks_camel_case_and_qualified_names() {
    check_focus(
        "focus_symbols",
        &[
            "Please fix `StreamingAgentLoop` and `parse_args()` in The module",
            "why does AppService.validate() call HTTPServer's iOS handler",
            "`a.b.c.d.e.f` has six segments, `a.b.c.d.e.f.g` seven; dev.aceclaw.App is qualified, self.foo is not",
            "`x` is too short but `xy` is not; `cargo test` is a command and `src/lib.rs` a path",
            "call run() then crate::prompt::build and Foo::new()",
            "One Two ThreeFour fiveSix SevenEight NineTen ElevenTwelve ThirteenX FourteenY FifteenZ SixteenW SeventeenV",
            "MAX_FOCUS_BOOST and README shout, `MAX_FOCUS_BOOST` is quoted",
        ],
    );
}

#[test]
fn plan_signals_match_whole_words() {
    check_focus(
        "focus_plan_signals",
        &[
            "continue",
            "go on with the next step",
            "keep going",
            "what are the next steps? make a plan",
            "list the steps to release",
            "fix it, add a test",
            "refactor and update the docs, then review",
            "please verify and check the changes",
            "the latest prefix of the planet is contested",
            "resuming: implementing, edited, testing, reviewed",
        ],
    );
}

#[test]
fn the_query_summary_is_whitespace_normalised_and_capped_at_160_chars() {
    let f = request_focus("  fix\n\tthe   bug  ");
    assert_eq!(f.query_summary, "fix the bug");
    let f = request_focus(&"word ".repeat(100));
    assert_eq!(f.query_summary.chars().count(), 160);
    assert!(f.query_summary.ends_with(" wo..."));
    // A cut that ends in a space drops it before the ellipsis.
    let f = request_focus(&format!("{}\n\n{}", "a".repeat(156), "b".repeat(10)));
    assert_eq!(f.query_summary, format!("{}...", "a".repeat(156)));
    let cjk = "字".repeat(500);
    let f = request_focus(&cjk);
    assert_eq!(f.query_summary.chars().count(), 160);
    insta::assert_snapshot!(
        "focus_summary",
        request_focus(&"a long request ".repeat(20)).query_summary
    );
}

#[test]
fn newest_query_is_the_newest_user_text_not_a_tool_result() {
    let openai = [
        json!({"role": "user", "content": "fix `Foo`"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}),
    ];
    assert_eq!(newest_query(&openai).as_deref(), Some("fix `Foo`"));
    let parts = [json!({"role": "user", "content": [{"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "b"}]})];
    assert_eq!(newest_query(&parts).as_deref(), Some("a\nb"));
    let anthropic = [
        json!({"role": "user", "content": [{"type": "text", "text": "fix src/a.rs"}]}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]}),
    ];
    assert_eq!(newest_query(&anthropic).as_deref(), Some("fix src/a.rs"));
    let mut go_on = anthropic.to_vec();
    go_on[2]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": "go on"}));
    assert_eq!(newest_query(&go_on).as_deref(), Some("go on"));
    assert_eq!(newest_query(&[json!({"role": "assistant", "content": "hi"})]), None);
}

/// A section to boost: source type, text, rules globs.
type Row<'a> = (Option<&'a str>, &'a str, &'a [&'a str]);

/// The boost of each row for `query`, from base priority `base`.
fn check_boosts(name: &str, query: &str, base: i64, rows: &[Row<'_>]) {
    let focus = request_focus(query);
    let mut out = format!("> {query}\n{}", show_focus(&focus));
    for (source_type, content, globs) in rows {
        let mut s = sec("s", base, *content);
        s.source_type = source_type.map(str::to_owned);
        s.paths = globs.iter().map(|g| (*g).to_owned()).collect();
        let (points, evidence) = boost(&s, &focus);
        assert!((0..=MAX_FOCUS_BOOST).contains(&points));
        let _ = writeln!(
            out,
            "{:<16} {:<40} {globs:?}: +{points} -> {} [{}]",
            source_type.unwrap_or("(none)"),
            format!("{content:?}"),
            (base + points).clamp(0, 100),
            evidence.join("; ")
        );
    }
    insta::assert_snapshot!(name, out);
}

#[test]
fn every_boost_row_of_the_table() {
    check_boosts(
        "boost_rows",
        "continue fixing `StreamingAgentLoop` in src/agent/Loop.java",
        50,
        &[
            (Some("memory"), "StreamingAgentLoop owns the turn", &[]),
            (Some("memory"), "StreamingAgentLoopRunner is unrelated", &[]),
            (Some("auto-memory"), "learned: run tests first", &[]),
            (Some("learned-signals"), "learned: run tests first", &[]),
            (Some("markdown-memory"), "notes on Loop.java", &[]),
            (
                Some("markdown-memory"),
                "notes on src/agent/Loop.java and StreamingAgentLoop",
                &[],
            ),
            (Some("journal"), "yesterday: started the loop", &[]),
            (Some("rules"), "use final fields", &["src/**/*.java"]),
            (Some("rules"), "use final fields", &["*.java"]),
            (Some("rules"), "use final fields", &["docs/**"]),
            (Some("candidates"), "prefer StreamingAgentLoop.run", &[]),
            (Some("candidates"), "nothing relevant", &[]),
            (Some("git"), "M src/agent/Loop.java", &[]),
            (Some("task-focus"), "src/agent/Loop.java StreamingAgentLoop", &[]),
            (Some("tool-guidance"), "edit Loop.java with care", &[]),
            (None, "StreamingAgentLoop in src/agent/Loop.java", &[]),
            (None, "nothing relevant", &[]),
            (None, "see src/agent/StreamingAgentLoop.java", &[]),
        ],
    );
}

#[test]
fn continuation_boosts_need_the_continue_signal() {
    check_boosts(
        "boost_without_continue",
        "review the plan",
        50,
        &[
            (Some("journal"), "yesterday", &[]),
            (Some("git"), "M a.rs", &[]),
            (Some("auto-memory"), "x", &[]),
        ],
    );
}

#[test]
fn a_file_and_a_symbol_starting_at_the_same_place_are_both_seen() {
    check_boosts(
        "boost_same_start",
        "fix `Loop` and `Loop.run` in src/Loop.java",
        50,
        &[
            (None, "see Loop.java", &[]),
            (Some("candidates"), "call Loop.run", &[]),
            (
                Some("markdown-memory"),
                "src/Loop.java: Loops and Loop_x are not Loop",
                &[],
            ),
        ],
    );
}

#[test]
fn boosted_priorities_are_clamped_at_100() {
    check_boosts(
        "boost_clamped",
        "fix `Foo`",
        95,
        &[(Some("memory"), "Foo", &[]), (Some("base"), "Foo", &[])],
    );
}

#[test]
fn without_a_query_nothing_is_boosted() {
    let (points, evidence) = boost(&typed(sec("a", 50, "Foo"), "auto-memory"), &RequestFocus::default());
    assert_eq!((points, evidence), (0, vec!["priority=50".to_owned()]));
}

#[test]
fn the_task_focus_section_lists_the_focus() {
    assert_eq!(task_focus_section(&RequestFocus::default()), None);
    let section = task_focus_section(&request_focus("continue: fix `Foo.bar` in src/a.rs and test it")).unwrap();
    assert_eq!(
        (
            section.key.as_str(),
            section.priority,
            section.source_type.as_deref(),
            section.scope.as_deref()
        ),
        ("task-focus", 89, Some("task-focus"), Some("task-local"))
    );
    insta::assert_snapshot!("task_focus_section", section.content);
}
