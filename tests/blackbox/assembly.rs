//! Request assembly through the real binary (issue 15, AceClaw F10, F11, F14, F16): a system
//! prompt of many sections comes back within its budget with the lowest priorities cut, a
//! query naming a file keeps the section that mentions it, protected sections are never cut,
//! and the provider's reported usage corrects the counts, persistently.

use serde_json::{Value, json};

use crate::support::Daemon;
use crate::support::builders::{assistant, user};

/// Characters of each generated section.
const SECTION_CHARS: usize = 5_000;
/// The file the focus test's query names.
const FOCUS_FILE: &str = "src/agent/StreamingAgentLoop.java";
/// Key of the section that mentions [`FOCUS_FILE`].
const FOCUS_KEY: &str = "docs:streaming";

/// `len` characters of text for section `key`, saying `extra` first.
fn section_text(key: &str, extra: &str, len: usize) -> String {
    let mut text = format!("# {key}\n{extra}\n");
    let mut line = 0;
    while text.chars().count() < len {
        text.push_str(&format!(
            "{key} rule {line}: keep the build green and the tests honest. "
        ));
        line += 1;
    }
    text.chars().take(len).collect()
}

/// 40 sections of 5,000 characters (200 KB, over the default 131,072-character budget):
/// four protected ones of priority 100, the rest at priorities 10–45 in a shuffled order, one
/// of them (priority 20, `markdown-memory`) mentioning [`FOCUS_FILE`].
fn forty_sections() -> Vec<Value> {
    let mut sections = Vec::new();
    let mut unprotected = 0usize;
    for i in 0..40usize {
        if i % 10 == 0 {
            sections.push(json!({
                "key": format!("policy:{i}"),
                "content": section_text(&format!("policy:{i}"), "Never push to main.", SECTION_CHARS),
                "priority": 100,
                "protected": true,
                "source_type": "memory",
            }));
            continue;
        }
        // 36 distinct priorities 10..=45 (7 is prime to 36), spread over the prompt.
        let priority = 10 + ((unprotected * 7) % 36) as i64;
        unprotected += 1;
        let (key, source, extra) = if priority == 20 {
            (
                FOCUS_KEY.to_owned(),
                "markdown-memory",
                format!("How the streaming loop in {FOCUS_FILE} retries."),
            )
        } else {
            (format!("notes:{i}"), "custom", String::new())
        };
        sections.push(json!({
            "key": key,
            "content": section_text(&key, &extra, SECTION_CHARS),
            "priority": priority,
            "source_type": source,
        }));
    }
    sections
}

/// A prepare of a one-turn conversation whose user message is `query`, with `sections`.
fn prepare_with_sections(d: &mut Daemon, session: &str, query: &str, sections: &[Value]) -> Value {
    d.call(
        "context.prepare",
        json!({"session_id": session, "messages": [user(query), assistant("on it")], "sections": sections}),
    )
}

/// A factor within rounding of `expected`.
fn assert_near(factor: &Value, expected: f64) {
    let got = factor.as_f64().unwrap_or_else(|| panic!("no factor: {factor}"));
    assert!((got - expected).abs() < 0.001, "factor {got}, expected {expected}");
}

fn chars(v: &Value) -> usize {
    v.as_str().expect("a string").chars().count()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

/// The section report of `key`.
fn section<'a>(prompt: &'a Value, key: &str) -> &'a Value {
    prompt["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no section {key}"))
}

#[test]
fn forty_sections_over_budget_come_back_within_it_cut_lowest_priority_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let sections = forty_sections();
    let result = prepare_with_sections(&mut d, "s", "hello there", &sections);
    let prompt = &result["prompt"];
    let budget = prompt["budget"]["maxTotalChars"].as_u64().unwrap() as usize;
    assert_eq!(budget, 131_072, "25 % of the default window, 4 characters a token");
    let system = chars(&result["system"]);
    assert!(system <= budget, "{system} characters over the budget of {budget}");
    assert_eq!(prompt["totalChars"].as_u64().unwrap() as usize, system);

    // The cut sections are the lowest priorities, in prompt order; everything above them is whole.
    let truncated = keys(&prompt["truncatedSectionKeys"]);
    assert!(!truncated.is_empty());
    let by_priority = |key: &String| section(prompt, key)["priority"].as_i64().unwrap();
    let highest_cut = truncated.iter().map(by_priority).max().unwrap();
    let reports = prompt["sections"].as_array().unwrap();
    for report in reports {
        let key = report["key"].as_str().unwrap();
        let cut = truncated.iter().any(|k| k == key);
        assert_eq!(report["truncated"], json!(cut), "{report}");
        if report["protected"] == json!(true) {
            assert!(!cut, "protected {key} was cut");
            assert_eq!(report["finalChars"], report["originalChars"]);
        } else if report["priority"].as_i64().unwrap() > highest_cut {
            assert!(!cut, "{key} is above the cut line {highest_cut} but was cut");
        }
    }
    let prompt_order: Vec<String> = reports
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .filter(|k| truncated.contains(k))
        .collect();
    assert_eq!(truncated, prompt_order, "truncatedSectionKeys in prompt order");
    // Insertion order is kept: the sections of the reply are the request's, in its order.
    let sent: Vec<String> = sections.iter().map(|s| s["key"].as_str().unwrap().to_owned()).collect();
    let kept: Vec<String> = reports
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .filter(|k| sent.contains(k))
        .collect();
    assert_eq!(kept, sent);
    // Without a file, symbol or plan in the query, nothing is boosted.
    assert_eq!(section(prompt, FOCUS_KEY)["priority"], json!(20));
    assert!(truncated.contains(&FOCUS_KEY.to_owned()), "{truncated:?}");
    // The system zone counts the assembled prompt, not the 200 KB sent.
    let system_tokens = result["tokens"]["system"].as_u64().unwrap();
    assert!(system_tokens <= budget as u64 / 3, "{system_tokens} tokens");
    d.shutdown();
}

#[test]
fn a_query_naming_a_file_keeps_the_section_that_mentions_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let sections = forty_sections();
    let query = format!("Fix the retry bug in {FOCUS_FILE} and run the tests");
    let result = prepare_with_sections(&mut d, "s", &query, &sections);
    let prompt = &result["prompt"];
    let focus = &prompt["requestFocus"];
    assert_eq!(focus["activeFilePaths"], json!([FOCUS_FILE]), "{focus}");
    let signals = keys(&focus["planSignals"]);
    assert!(signals.contains(&"code change requested".to_owned()), "{signals:?}");
    assert!(signals.contains(&"verification requested".to_owned()), "{signals:?}");

    let boosted = section(prompt, FOCUS_KEY);
    assert_eq!(boosted["priority"], json!(30), "+10 for a mentioned file: {boosted}");
    assert_eq!(boosted["basePriority"], json!(20));
    let evidence = keys(&boosted["evidence"]);
    assert!(
        evidence.iter().any(|e| e == &format!("files={FOCUS_FILE}")),
        "{evidence:?}"
    );
    let truncated = keys(&prompt["truncatedSectionKeys"]);
    assert!(
        !truncated.contains(&FOCUS_KEY.to_owned()),
        "the boosted section survives: {truncated:?}"
    );
    assert_eq!(boosted["truncated"], json!(false));
    assert!(
        result["system"].as_str().unwrap().contains(FOCUS_FILE),
        "its text is in the prompt"
    );
    // The focus itself is a section of the prompt.
    let task = section(prompt, "task-focus");
    assert_eq!(task["included"], json!(true));

    // Inspect shows the same assembly in AceClaw's shape, and the section in full.
    let inspected = d.call("context.inspect", json!({"session_id": "s", "detail_key": FOCUS_KEY}));
    assert_eq!(inspected["sessionId"], "s");
    assert_eq!(inspected["truncatedSectionKeys"], prompt["truncatedSectionKeys"]);
    assert_eq!(inspected["requestFocus"], prompt["requestFocus"]);
    let detail = &inspected["detail"];
    assert_eq!(detail["key"], FOCUS_KEY);
    assert_eq!(detail["content"], detail["original_content"], "kept whole");
    // Asking what a question about something else would keep changes nothing in the session.
    let hint = d.call(
        "context.inspect",
        json!({"session_id": "s", "query_hint": "what is the weather"}),
    );
    assert_eq!(section(&hint, FOCUS_KEY)["priority"], json!(20));
    let again = d.call("context.inspect", json!({"session_id": "s"}));
    assert_eq!(section(&again, FOCUS_KEY)["priority"], json!(30));
    d.shutdown();
}

/// With `task_focus_section_enabled: false` a new user message leaves the system prompt byte
/// for byte as it was (a provider's prompt cache keeps it), and the focus still boosts.
#[test]
fn without_the_task_focus_section_a_new_user_turn_keeps_the_system_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let sections = forty_sections();
    let first_query = format!("Fix the retry bug in {FOCUS_FILE}");
    let second_query = format!("Now run the tests of {FOCUS_FILE} and explain the failures");
    let mut systems = Vec::new();
    for enabled in [true, false] {
        let session = format!("focus-{enabled}");
        let config = json!({"task_focus_section_enabled": enabled});
        let first = d.call(
            "context.prepare",
            json!({"session_id": session, "messages": [user(&first_query), assistant("on it")],
                   "sections": sections, "config": config}),
        );
        let second = d.call(
            "context.prepare",
            json!({"session_id": session, "append": [user(&second_query)], "sections": sections, "config": config}),
        );
        let has_focus = |r: &Value| {
            r["prompt"]["sections"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["key"] == "task-focus")
        };
        assert_eq!(has_focus(&first), enabled);
        assert_eq!(has_focus(&second), enabled);
        assert_eq!(
            section(&second["prompt"], FOCUS_KEY)["priority"],
            json!(30),
            "boosted either way"
        );
        systems.push((first["system"].clone(), second["system"].clone()));
    }
    assert_ne!(
        systems[0].0, systems[0].1,
        "the task-focus section follows the newest user message"
    );
    assert_eq!(
        systems[1].0, systems[1].1,
        "without it the prompt is byte-stable across user turns"
    );
    d.shutdown();
}

#[test]
fn protected_sections_over_the_budget_are_sent_whole_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let big = section_text("soul", "You are careful.", 60_000);
    let sections = json!([
        {"key": "soul", "content": big, "priority": 100, "protected": true},
        {"key": "policy", "content": big, "priority": 90, "protected": true},
        {"key": "policy2", "content": big, "priority": 90, "protected": true},
        {"key": "notes", "content": "small notes", "priority": 10},
    ]);
    let result = d.call(
        "context.prepare",
        json!({"session_id": "p", "messages": [user("hi")], "sections": sections}),
    );
    let prompt = &result["prompt"];
    for key in ["soul", "policy", "policy2"] {
        let report = section(prompt, key);
        assert_eq!(report["finalChars"], json!(60_000), "{report}");
        assert_eq!(report["truncated"], json!(false));
    }
    let over = prompt["overBudget"].as_str().expect("over budget is reported");
    assert!(over.contains("soul") && over.contains("policy2"), "{over}");
    let over_limit = result["over_limit"].as_str().expect("and in over_limit");
    assert!(over_limit.contains("protected"), "{over_limit}");
    d.shutdown();
}

/// A real agent's prompt: `n` numbered instructions of about 76 characters.
fn instructions(n: usize) -> String {
    (1..=n)
        .map(|i| format!("{i}. Instruction {i}: keep each change small, and run the whole test suite after it."))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_clients_system_prompt_is_never_cut_and_an_overrun_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    // 315 instructions, over the 20,000-character section cap: the cap is for memory tiers.
    let prompt = instructions(315);
    assert!(prompt.len() > 24_000);
    let result = d.call(
        "context.prepare",
        json!({"session_id": "plain", "messages": [user("hi")], "system": prompt}),
    );
    assert_eq!(result["system"], json!(prompt), "every instruction, whole");
    assert_eq!(result["prompt"]["truncatedSectionKeys"], json!([]));
    assert!(result["over_limit"].is_null(), "{}", result["over_limit"]);
    assert!(actions_of(&result, "prompt_over_budget").is_empty());

    // Over the whole budget (a quarter of the window): still whole, and said so.
    let huge = section_text("system", "You are a coding agent.", 300_000);
    let blocks = json!([
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": huge},
    ]);
    let result = d.call(
        "context.prepare",
        json!({"session_id": "blocks", "messages": [user("hi")], "system": blocks,
               "sections": [{"key": "extra", "content": "Extra rules.", "priority": 50}]}),
    );
    let system = result["system"].as_array().expect("a list, as sent");
    assert_eq!(
        system,
        blocks.as_array().unwrap(),
        "both blocks whole, the extra section left out"
    );
    let over = actions_of(&result, "prompt_over_budget");
    assert_eq!(over.len(), 1, "{}", result["actions"]);
    assert_eq!(over[0]["keys"], json!(["system:0", "system:1"]));
    assert!(over[0]["chars"].as_u64().unwrap() > over[0]["max_total_chars"].as_u64().unwrap());
    let over_limit = result["over_limit"].as_str().expect("and in over_limit");
    assert!(over_limit.contains("system:1"), "{over_limit}");
    d.shutdown();
}

#[test]
fn an_openai_system_message_is_assembled_and_reported_like_system() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let prompt = instructions(315);
    let messages = json!([{"role": "system", "content": prompt}, user("hi")]);
    let result = d.call("context.prepare", json!({"session_id": "openai", "messages": messages}));
    assert_eq!(result["messages"][0]["content"], json!(prompt), "sent as it came");
    assert!(result["system"].is_null(), "nothing to add beside the message");
    let report = section(&result["prompt"], "system");
    assert_eq!(report["sourceType"], "base");
    assert_eq!(report["originalChars"], json!(prompt.chars().count()));
    assert_eq!(report["finalChars"], report["originalChars"]);

    // With sections, they are budgeted with the message, and `system` carries only them.
    let result = d.call(
        "context.prepare",
        json!({"session_id": "openai", "messages": messages,
               "sections": [{"key": "rules", "content": "Use tabs.", "priority": 80}]}),
    );
    assert_eq!(result["system"], json!("Use tabs."));

    let sections: Vec<&Value> = result["prompt"]["sections"].as_array().unwrap().iter().collect();
    assert_eq!(
        (&sections[0]["key"], &sections[1]["key"]),
        (&json!("system"), &json!("rules"))
    );
    // A client that names a section `system` itself keeps it: the message is then not the base.
    let result = d.call(
        "context.prepare",
        json!({"session_id": "openai", "messages": messages,
               "sections": [{"key": "system", "content": "My own system section.", "priority": 80}]}),
    );
    assert_eq!(result["system"], json!("My own system section."));
    // satchel's own keys are refused, before the call changes anything.
    let refused = d.call_err(
        "context.prepare",
        json!({"session_id": "openai", "messages": messages,
               "sections": [{"key": "task-focus", "content": "x", "priority": 80}]}),
    );
    assert!(refused["message"].as_str().unwrap().contains("task-focus"), "{refused}");
    d.shutdown();
}

/// The actions of `kind` in a prepare result.
fn actions_of<'a>(result: &'a Value, kind: &str) -> Vec<&'a Value> {
    result["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind)
        .collect()
}

#[test]
fn bad_sections_are_refused_naming_the_field_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    let cases = [
        (json!([{"key": "a", "content": "x"}]), "sections[0]"),
        (
            json!([{"key": "a", "content": "x", "priority": 101}]),
            "sections[0].priority",
        ),
        (
            json!([{"key": "a", "content": "x", "priority": 1}, {"key": "a", "content": "y", "priority": 2}]),
            "sections[1].key",
        ),
        (json!([{"key": "", "content": "x", "priority": 1}]), "sections[0].key"),
    ];
    for (sections, field) in cases {
        let error = d.call_err(
            "context.prepare",
            json!({"session_id": "bad", "messages": [user("hi")], "sections": sections}),
        );
        assert_eq!(error["code"], json!(-32602), "{error}");
        let named = error["data"]["details"]["field"].as_str().unwrap_or_default();
        assert!(named.starts_with(field), "{field}: {error}");
    }
    let error = d.call_err("context.inspect", json!({"session_id": "bad"}));
    assert_eq!(error["code"], json!(-32001), "nothing was stored: {error}");
    let ok = d.call(
        "context.prepare",
        json!({"session_id": "bad", "messages": [user("hi")], "sections": [{"key": "a", "content": "x", "priority": 1}]}),
    );
    assert_eq!(ok["system"], "x");
    d.shutdown();
}

#[test]
fn reported_usage_corrects_the_counts_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("SATCHEL_TOKENIZER", "estimate")];
    let mut d = Daemon::start(dir.path(), &env);
    let first = d.call(
        "context.prepare",
        json!({"session_id": "u", "messages": [user(&"words ".repeat(2_000))]}),
    );
    let counted = first["tokens"]["total"].as_u64().unwrap();
    // As a notification, the way a client sends it right after the model call: no reply.
    d.send(
        &json!({"jsonrpc": "2.0", "method": "context.usage",
                "params": {"session_id": "u", "input_tokens": counted * 3 / 2}}),
        crate::support::Framing::Ndjson,
    );
    let inspected = d.call("context.inspect", json!({"session_id": "u"}));
    // Halfway from 1 to the report's 1.5, as documented: one odd report cannot swing it.
    assert_near(&inspected["calibration"]["factor"], 1.25);
    assert_eq!(inspected["calibration"]["samples"], json!(1));
    // Sent again (a client retrying), it replaces the first report instead of counting twice.
    let again = d.call(
        "context.usage",
        json!({"session_id": "u", "input_tokens": counted * 3 / 2}),
    );
    assert_near(&again["factor"], 1.25);
    assert_eq!(again["samples"], json!(1));
    let next = d.call(
        "context.prepare",
        json!({"session_id": "u", "append": [assistant("ok")]}),
    );
    let corrected = next["tokens"]["total"].as_u64().unwrap();
    assert!(
        corrected >= counted * 5 / 4,
        "{corrected} tokens after a 1.25 correction of {counted}"
    );
    // The next report is about the next request.
    let second = d.call("context.usage", json!({"session_id": "u", "input_tokens": corrected}));
    assert_near(&second["factor"], 1.25);
    assert_eq!(second["samples"], json!(2));
    d.shutdown();

    let mut d = Daemon::start(dir.path(), &env);
    let inspected = d.call("context.inspect", json!({"session_id": "u"}));
    assert_eq!(inspected["calibration"]["samples"], json!(2), "persisted");
    assert_near(&inspected["calibration"]["factor"], 1.25);
    // A usage of a request the previous daemon prepared cannot be matched: it is ignored.
    let reloaded = d.call(
        "context.prepare",
        json!({"session_id": "u", "append": [user("and now?")], "usage": {"input_tokens": 1}}),
    );
    assert!(reloaded["tokens"]["total"].as_u64().unwrap() > corrected);
    let inspected = d.call("context.inspect", json!({"session_id": "u"}));
    assert_eq!(inspected["calibration"]["samples"], json!(2));
    let error = d.call_err("context.usage", json!({"session_id": "nobody", "input_tokens": 5}));
    assert_eq!(error["code"], json!(-32001), "{error}");
    d.shutdown();
}
