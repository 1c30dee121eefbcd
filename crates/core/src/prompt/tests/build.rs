//! `build`: the client's `system` in and out, validation, and a whole request.

use serde_json::{Value, json};

use super::*;

fn build_with<'a>(
    system: Option<&'a Value>,
    sections: &'a [PromptSection],
    query: Option<&'a str>,
    budget: SystemPromptBudget,
) -> BuiltPrompt<'a> {
    let built = super::super::build(PromptInput {
        system,
        base_message: None,
        sections,
        query,
        budget,
        task_focus_section: true,
    })
    .expect("valid input");
    invariants(&built.assembled, budget);
    built
}

/// The `system` sent back and the assembly, for one snapshot.
fn check_system(name: &str, system: Option<&Value>, sections: &[PromptSection], budget: SystemPromptBudget) {
    let built = build_with(system, sections, None, budget);
    let sent = match &built.system {
        Some(Value::String(s)) => format!("string: {}", brief(s)),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| {
                let mut b = b.clone();
                if let Some(Value::String(text)) = b.get_mut("text") {
                    *text = brief(text);
                }
                b.to_string()
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => format!("{other:?}"),
    };
    insta::assert_snapshot!(name, format!("{sent}\n---\n{}", render(&built.assembled)));
}

#[test]
fn a_string_system_comes_back_as_the_whole_prompt() {
    let system = json!("You are a careful coding agent.");
    check_system(
        "system_string",
        Some(&system),
        &[sec("rules", 88, "Use tabs.")],
        SystemPromptBudget::DEFAULT,
    );
}

#[test]
fn system_blocks_keep_their_fields_and_places() {
    let system = json!([
        {"type": "text", "text": body("intro", 600), "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "text", "text": body("tools", 1_500), "citations": null},
        {"type": "text", "text": ""},
    ]);
    check_system(
        "system_blocks",
        Some(&system),
        &[sec("rules", 88, "Use tabs."), sec("git", 40, body("git", 400))],
        budget(1_000, 2_200),
    );
}

#[test]
fn the_clients_system_blocks_are_never_cut_and_an_overrun_is_reported() {
    let system = json!([
        {"type": "text", "text": body("intro", 900), "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "short"},
    ]);
    check_system(
        "system_blocks_over_budget",
        Some(&system),
        &[protected(sec("memory:soul", 100, body("soul", 1_000)))],
        budget(1_000, 1_100),
    );
}

#[test]
fn without_a_system_the_prompt_is_a_string_or_nothing() {
    let none = build_with(None, &[], None, SystemPromptBudget::DEFAULT);
    assert_eq!(none.system, None);
    let null = json!(null);
    assert_eq!(
        build_with(Some(&null), &[], None, SystemPromptBudget::DEFAULT).system,
        None
    );
    let empty = json!("");
    assert_eq!(
        build_with(Some(&empty), &[], None, SystemPromptBudget::DEFAULT).system,
        Some(json!(""))
    );
    let sections = [sec("rules", 88, "Use tabs.")];
    let built = build_with(None, &sections, None, SystemPromptBudget::DEFAULT);
    assert_eq!(built.system, Some(json!("Use tabs.")));
}

#[test]
fn invalid_input_is_rejected_naming_the_field() {
    let mut errors = String::new();
    let task_focus = sec("task-focus", 50, "mine");
    let cases: Vec<(Option<Value>, Vec<PromptSection>, Option<&str>)> = vec![
        (None, vec![sec("a", 101, "x")], None),
        (None, vec![sec("a", 50, "x"), sec("b", -1, "x")], None),
        (None, vec![sec(" ", 50, "x")], None),
        (None, vec![sec("a", 50, "x"), sec("a", 60, "y")], None),
        (None, vec![task_focus], Some("fix `Foo`")),
        (Some(json!("base")), vec![sec("system", 50, "x")], None),
        (Some(json!(42)), vec![], None),
        (
            None,
            vec![PromptSection {
                paths: vec!["src/**/*.rs".into(), "src/[".into()],
                ..typed(sec("rules", 88, "x"), "rules")
            }],
            None,
        ),
    ];
    for (system, sections, query) in &cases {
        let err = super::super::build(PromptInput {
            system: system.as_ref(),
            base_message: None,
            sections,
            query: *query,
            budget: SystemPromptBudget::DEFAULT,
            task_focus_section: true,
        })
        .unwrap_err();
        let _ = writeln!(errors, "{} | {err}", err.field());
    }
    insta::assert_snapshot!("invalid_input", errors);
}

/// AceClaw's tiers and sections at their base priorities.
fn aceclaw_sections() -> Vec<PromptSection> {
    vec![
        protected(typed(sec("memory:soul", 100, body("soul", 1_200)), "memory")),
        protected(typed(sec("memory:policy", 90, body("policy", 800)), "memory")),
        PromptSection {
            paths: vec!["src/agent/**".into()],
            ..typed(sec("rules", 88, body("rules", 900)), "rules")
        },
        typed(sec("memory:workspace", 80, body("workspace", 2_500)), "memory"),
        typed(sec("environment", 72, body("env", 600)), "environment"),
        typed(
            sec("memory:auto", 60, format!("{} StreamingAgentLoop", body("auto", 4_000))),
            "auto-memory",
        ),
        typed(sec("skills", 58, body("skills", 1_500)), "skills"),
        typed(sec("memory:markdown", 55, body("markdown", 2_000)), "markdown-memory"),
        typed(sec("candidates", 54, body("candidates", 1_000)), "candidates"),
        typed(sec("memory:journal", 50, body("journal", 3_000)), "journal"),
        typed(sec("git", 40, body("git", 1_800)), "git"),
    ]
}

#[test]
fn a_whole_request_is_boosted_cut_and_reported() {
    let system = json!("You are AceClaw.");
    let sections = aceclaw_sections();
    let query = "continue: fix the `StreamingAgentLoop` bug in src/agent/StreamingAgentLoop.java";
    let built = build_with(Some(&system), &sections, Some(query), budget(2_000, 12_000));
    let focus = &built.focus;
    assert_eq!(focus.active_file_paths, ["src/agent/StreamingAgentLoop.java"]);
    assert_eq!(built.system, Some(Value::String(built.assembled.prompt.clone())));
    insta::assert_snapshot!("whole_request", render(&built.assembled));
}

#[test]
fn inspect_data_keeps_originals_and_finals() {
    let sections = [sec("git", 40, body("git", 3_000))];
    let built = build_with(None, &sections, None, budget(1_000, 5_000));
    let git = &built.assembled.sections[0];
    assert_eq!(git.original, sections[0].content.as_str());
    assert_eq!(git.content().chars().count(), git.report.final_chars);
    assert!(git.report.truncated && git.report.included);
    assert_eq!(built.assembled.truncated_section_keys, ["git"]);
    let owned: BuiltPrompt<'static> = built.clone().into_owned();
    assert_eq!(owned, built);
}

#[test]
fn without_the_task_focus_section_the_prompt_stays_the_same_across_user_messages() {
    let system = json!("You are AceClaw.");
    let sections = aceclaw_sections();
    let queries = [
        "continue: fix the `StreamingAgentLoop` bug in src/agent/StreamingAgentLoop.java",
        "now run the tests for src/agent/StreamingAgentLoop.java",
    ];
    let prompt = |query: &'static str, task_focus_section: bool| {
        super::super::build(PromptInput {
            system: Some(&system),
            base_message: None,
            sections: &sections,
            query: Some(query),
            budget: SystemPromptBudget::DEFAULT,
            task_focus_section,
        })
        .expect("valid input")
    };
    let [with_first, with_second] = queries.map(|q| prompt(q, true));
    assert_ne!(with_first.assembled.prompt, with_second.assembled.prompt);
    let [first, second] = queries.map(|q| prompt(q, false));
    assert_eq!(first.assembled.prompt, second.assembled.prompt);
    assert!(first.assembled.sections.iter().all(|s| s.report.key != "task-focus"));
    // The focus still boosts: `memory:auto` names the symbol, `rules` covers the path.
    let boosted = |built: &BuiltPrompt<'_>, key: &str| {
        let s = built.assembled.sections.iter().find(|s| s.report.key == key).unwrap();
        s.report.priority > s.report.base_priority
    };
    assert!(boosted(&first, "memory:auto") && boosted(&first, "rules"));
}

/// A real agent's prompt: 315 numbered instructions, about 24,000 characters.
fn agent_prompt() -> String {
    (1..=315)
        .map(|i| format!("{i}. Instruction number {i}: keep the change small and run the tests."))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_long_system_prompt_is_never_cut_by_the_per_section_cap() {
    let prompt = agent_prompt();
    assert!(prompt.len() > 20_000, "over the per-section cap of 20,000");
    let system = json!(prompt);
    let sections = [sec("notes", 40, body("notes", 3_000))];
    let built = build_with(Some(&system), &sections, None, SystemPromptBudget::DEFAULT);
    let sent = built.system.as_ref().and_then(Value::as_str).expect("a string");
    assert!(sent.starts_with(&prompt), "every instruction is sent, in order");
    assert!(built.assembled.truncated_section_keys.is_empty());
    assert_eq!(built.assembled.over_budget, None);

    // Over the total, the other sections make room: the prompt itself stays whole.
    let tight = budget(20_000, prompt.chars().count() + 1_000);
    let built = build_with(Some(&system), &sections, None, tight);
    assert_eq!(
        built.system,
        Some(json!(format!("{prompt}\n\n{}", built.assembled.sections[1].content())))
    );
    assert_eq!(built.assembled.truncated_section_keys, ["notes"]);

    // Alone over the total: sent whole, and the assembly says so.
    let small = budget(4_000, 16_000);
    let built = build_with(Some(&system), &sections, None, small);
    assert_eq!(built.system, Some(json!(prompt)));
    let over = built.assembled.kept_whole_over_budget.expect("over the budget");
    assert_eq!(over.sections, [("system".to_owned(), prompt.chars().count())]);
    assert_eq!(over.max_total_chars, 16_000);
}

#[test]
fn a_leading_system_message_is_assembled_like_system_but_not_sent_again() {
    let prompt = agent_prompt();
    let sections = [sec("rules", 88, "Use tabs.")];
    let built = super::super::build(PromptInput {
        system: None,
        base_message: Some(&prompt),
        sections: &sections,
        query: None,
        budget: SystemPromptBudget::DEFAULT,
        task_focus_section: true,
    })
    .expect("valid input");
    invariants(&built.assembled, SystemPromptBudget::DEFAULT);
    // The message carries the base prompt; `system` is only what the client adds beside it.
    assert_eq!(built.system, Some(json!("Use tabs.")));
    let keys: Vec<&str> = built.assembled.sections.iter().map(|s| s.report.key.as_str()).collect();
    assert_eq!(keys, ["system", "rules"]);
    assert_eq!(built.assembled.sections[0].report.final_chars, prompt.chars().count());
    assert_eq!(built.assembled.sections[0].report.source_type, "base");
}
