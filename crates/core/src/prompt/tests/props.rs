//! Invariants for any sections, budget and query: the prompt fits unless the protected
//! sections alone do not (and then says so), keeps the order, and every text is the original
//! or a truthful head-and-tail cut of it; nothing panics on any Unicode.

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,80}",
        "\\PC{0,20}".prop_map(|s| s.repeat(60)),
        (0usize..4_000).prop_map(|n| body("x", n)),
        "(é🦀字\n|<!-- \\[TRUNCATED\\] Original: [0-9]{1,4} chars, showing first [0-9]{1,3} + last [0-9]{1,3} chars -->){1,200}",
        Just(String::new()),
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,200}",
        "((fix|continue|test|`[A-Za-z_.]{1,12}`|[a-z]{1,6}/[A-Za-z]{1,8}\\.(rs|java)|[A-Z][a-z]{1,5}[A-Z][a-z]{1,5}|x\\.x|and) {0,3}){0,12}",
    ]
}

fn sections() -> impl Strategy<Value = Vec<PromptSection>> {
    prop::collection::vec(
        (
            text(),
            0i64..=100,
            prop::bool::weighted(0.2),
            prop::sample::select(vec![
                None,
                Some("memory"),
                Some("auto-memory"),
                Some("markdown-memory"),
                Some("journal"),
                Some("rules"),
                Some("candidates"),
                Some("git"),
                Some("other"),
            ]),
        ),
        0..12,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (content, priority, protected, source_type))| PromptSection {
                key: format!("s{i}"),
                content,
                priority,
                protected,
                source_type: source_type.map(str::to_owned),
                scope: None,
                reason: None,
                paths: vec!["src/**/*.rs".into(), "*.java".into()],
            })
            .collect()
    })
}

fn any_budget() -> impl Strategy<Value = SystemPromptBudget> {
    (0usize..3_000, 0usize..8_000).prop_map(|(per, total)| budget(per, total))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn assembly_fits_keeps_order_and_cuts_truthfully(
        sections in sections(),
        system in prop::option::of(text()),
        blocks in any::<bool>(),
        query in prop::option::of(query()),
        budget in any_budget(),
    ) {
        let system = system.map(|s| if blocks { json!([{"type": "text", "text": s}, {"type": "image"}]) } else { json!(s) });
        let built = crate::prompt::build(PromptInput {
            system: system.as_ref(),
            base_message: None,
            sections: &sections,
            query: query.as_deref(),
            budget,
            task_focus_section: true,
        }).expect("generated sections are valid");
        invariants(&built.assembled, budget);

        // Insertion order: the system first, the client's sections as sent, the focus last.
        let keys: Vec<&str> = built.assembled.sections.iter().map(|s| s.report.key.as_str()).collect();
        let mut expected: Vec<String> = Vec::new();
        if system.is_some() {
            expected.push(if blocks { "system:0".into() } else { "system".into() });
        }
        expected.extend(sections.iter().map(|s| s.key.clone()));
        if !sections.is_empty() && crate::prompt::task_focus_section(&built.focus).is_some() {
            expected.push("task-focus".into());
        }
        prop_assert_eq!(keys, expected);

        // Boosts stay within the cap and priorities within 0..=100.
        for s in &built.assembled.sections {
            let r = &s.report;
            prop_assert!((0..=100).contains(&r.priority));
            prop_assert!(r.priority - r.base_priority <= MAX_FOCUS_BOOST && r.priority >= r.base_priority);
        }

        // What is sent is the prompt: a string as is, blocks joined.
        match &built.system {
            Some(serde_json::Value::String(s)) => prop_assert_eq!(s, &built.assembled.prompt),
            Some(serde_json::Value::Array(out)) => {
                let texts: Vec<&str> = out.iter().filter_map(|b| b.get("text").and_then(|t| t.as_str())).collect();
                prop_assert_eq!(texts.join("\n\n"), built.assembled.prompt.clone());
                prop_assert!(out.iter().any(|b| b["type"] == "image"));
            }
            Some(other) => prop_assert!(false, "unexpected system {other:?}"),
            None => prop_assert!(system.is_none() && built.assembled.prompt.is_empty()),
        }
    }

    #[test]
    fn focus_respects_its_limits_on_any_text(q in "\\PC{0,400}") {
        let f = request_focus(&q);
        prop_assert!(f.query_summary.chars().count() <= crate::prompt::focus::MAX_SUMMARY_CHARS);
        prop_assert!(f.active_file_paths.len() <= crate::prompt::focus::MAX_FILES);
        prop_assert!(f.active_symbols.len() <= crate::prompt::focus::MAX_SYMBOLS);
        prop_assert!(f.active_symbols.iter().all(|s| !f.active_file_paths.contains(s)));
        let section = typed(sec("s", 50, q.clone()), "other");
        let (points, _) = boost(&section, &f);
        prop_assert!((0..=MAX_FOCUS_BOOST).contains(&points));
    }

    #[test]
    fn truncate_never_exceeds_and_never_splits(t in text(), max in 0usize..5_000) {
        let cut = truncate::truncate(&t, max);
        let n = cut.chars().count();
        prop_assert!(n <= max || cut == t.as_str());
        if cut != t.as_str() && !cut.is_empty() {
            assert_is_cut_of(&cut, &t);
        }
    }
}
