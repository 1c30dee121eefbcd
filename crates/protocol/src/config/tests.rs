//! The configuration's defaults, checks, wire form and groups.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};

use super::*;

#[test]
fn defaults_are_the_spec_defaults_and_valid() {
    let c = Config::default();
    assert_eq!(c.window.max_input_length, 131_072);
    assert_eq!(c.compact_threshold_tokens(), 104_857);
    assert_eq!(c.recent.pruning_recent_n, 2);
    assert_eq!(
        (
            c.render.pruning_old_msg_max_bytes,
            c.render.pruning_recent_msg_max_bytes
        ),
        (3000, 50_000)
    );
    assert_eq!(c.retention.offload_retention_days, 5.0);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn unknown_keys_are_rejected() {
    let err = serde_json::from_str::<Config>(r#"{"pruning_recent": 3}"#).unwrap_err();
    assert!(err.to_string().contains("pruning_recent"), "{err}");
}

#[test]
fn inverted_limits_name_the_field() {
    let mut c = Config::default();
    c.render.pruning_recent_msg_max_bytes = 10;
    assert_eq!(c.validate().unwrap_err().key, "pruning_recent_msg_max_bytes");
}

/// Every validation rule, broken alone: the error names the key that breaks it.
#[test]
fn every_rule_names_its_own_key() {
    let cases: &[(&str, serde_json::Value)] = &[
        ("max_input_length", 1000.into()),
        ("max_output_tokens", 70_000.into()),
        ("prune_trigger_ratio", 0.0.into()),
        ("prune_target_ratio", 0.9.into()),
        ("prune_protected_turns", 0.into()),
        ("prune_stub_chars", 10.into()),
        ("prompt_max_total_chars", 999.into()),
        ("prompt_max_section_chars", 999.into()),
        ("prompt_max_section_chars", 150_001.into()),
        ("compact_threshold_ratio", 0.0.into()),
        ("compact_threshold_ratio", 1.5.into()),
        ("reserve_threshold_ratio", 0.0.into()),
        ("reserve_threshold_ratio", 0.9.into()),
        ("compact_keep_recent_messages", 10_001.into()),
        ("llm_timeout_secs", 0.0.into()),
        ("llm_timeout_secs", 3601.0.into()),
        ("llm_input_budget_tokens", 999.into()),
        ("llm_max_output_tokens", 99.into()),
        ("llm_temperature", (-0.1).into()),
        ("llm_temperature", 2.1.into()),
        ("summarizer_upstream_model_anthropic", "".into()),
        ("summarizer_upstream_model_openai", " ".into()),
        ("summarizer_upstream_model_openai", "gpt\n4".into()),
        ("summary_max_tokens", 199.into()),
        ("summary_window_share", 0.0.into()),
        ("summary_window_share", 0.26.into()),
        ("token_count_estimate_divisor", 0.5.into()),
        ("token_count_estimate_divisor", 11.0.into()),
        ("pruning_tail_ratio", 0.6.into()),
        ("pruning_old_msg_max_bytes", 0.into()),
        ("pruning_recent_msg_max_bytes", 2_999.into()),
        ("markdown_old_msg_max_bytes", 0.into()),
        ("markdown_old_msg_max_bytes", 99.into()),
        ("markdown_recent_msg_max_bytes", 49_999.into()),
        ("offload_retention_days", 0.0.into()),
        ("max_live_sessions", 0.into()),
        ("session_idle_secs", 0.0.into()),
        ("dialog_path", "".into()),
        ("dialog_path", "../elsewhere".into()),
        ("dialog_path", "/abs".into()),
        ("proxy_listen", "localhost".into()),
        ("proxy_upstream_anthropic", "api.anthropic.com".into()),
        ("proxy_upstream_openai", "ftp://x".into()),
        ("proxy_upstream_openai", "https://api.openai.com/v1/".into()),
    ];
    let defaults = match serde_json::to_value(Config::default()).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("{other}"),
    };
    for (key, bad) in cases {
        assert!(defaults.contains_key(*key), "{key} is not a config key");
        let mut map = defaults.clone();
        map.insert((*key).to_owned(), bad.clone());
        let config: Config = serde_json::from_value(serde_json::Value::Object(map)).unwrap();
        let ConfigError {
            key: named,
            reason: why,
        } = config.validate().expect_err(key);
        assert_eq!(named, *key, "{key} = {bad} was reported as {named}: {why}");
    }
    // The limits at their smallest are valid: each rule is about its own key only.
    let mut smallest = Config::default();
    smallest.render.pruning_old_msg_max_bytes = 100;
    smallest.render.markdown_old_msg_max_bytes = 100;
    smallest.summary.llm_input_budget_tokens = 1_000;
    smallest.summary.llm_max_output_tokens = 100;
    assert_eq!(smallest.validate(), Ok(()));
}

#[test]
fn daemon_only_keys_are_config_keys() {
    let keys = match serde_json::to_value(Config::default()).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("{other}"),
    };
    assert_eq!(DaemonConfig::keys().len(), 35);
    for key in DaemonConfig::keys() {
        assert!(keys.contains_key(key), "{key} is not a config key");
        assert!(DaemonConfig::has_key(key));
    }
    assert!(!DaemonConfig::has_key("llm_model"));
    assert!(!DaemonConfig::has_key("summarizer"));
}

#[test]
fn clients_see_no_header_value_and_no_url_credentials() {
    let mut c = Config::default();
    c.daemon.llm.llm_extra_headers = [("X-Org".to_owned(), "org-secret-1".to_owned())].into();
    c.daemon.llm.llm_base_url = "https://user:pa55@llm.example.com:8443/v1?api-key=k3y".into();
    c.daemon.proxy.proxy_token = "pr0xy-t0ken".into();
    c.daemon.proxy.proxy_upstream_openai = "https://u:upstr3am@gw.example.com".into();
    let shown = c.for_clients();
    assert_eq!(shown.daemon.llm.llm_extra_headers["X-Org"], REDACTED);
    assert_eq!(
        shown.daemon.llm.llm_base_url,
        "https://[redacted]@llm.example.com:8443/v1?[redacted]"
    );
    let text = serde_json::to_string(&shown).unwrap();
    assert_eq!(shown.daemon.proxy.proxy_token, REDACTED);
    for secret in ["org-secret-1", "pa55", "k3y", "pr0xy-t0ken", "upstr3am"] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }
    assert_eq!(
        shown.daemon.llm.llm_api_key_env, c.daemon.llm.llm_api_key_env,
        "only the variable's name"
    );
    let plain = Config::default();
    assert_eq!(plain.for_clients(), plain, "nothing to hide by default");
}

/// The wire form is the flat object of every key: the groups add no level, and it reads back.
#[test]
fn the_wire_form_is_flat_and_reads_back() {
    let value = serde_json::to_value(Config::default()).unwrap();
    let Value::Object(keys) = &value else { panic!("{value}") };
    assert_eq!(keys.len(), 81);
    assert_eq!(keys.keys().cloned().collect::<Vec<_>>(), Config::keys());
    assert!(
        keys.values().all(|v| !v.is_object() || v == &json!({})),
        "a group nested: {value}"
    );
    assert_eq!(serde_json::from_value::<Config>(value).unwrap(), Config::default());
    let mut changed = Config::default();
    changed.render.markdown_file_extensions = vec![".txt".into()];
    changed.daemon.memory_index.memory_max_results = 9;
    let back: Config = serde_json::from_value(serde_json::to_value(&changed).unwrap()).unwrap();
    assert_eq!(back, changed);
}

/// A wrong value is named by its key, as serde names a field of a flat struct.
#[test]
fn a_bad_value_names_its_key() {
    for (keys, key, why) in [
        (
            json!({"max_input_length": "abc"}),
            "max_input_length",
            "invalid type: string \"abc\", expected u64",
        ),
        (
            json!({"markdown_tool_names": [1]}),
            "markdown_tool_names[0]",
            "invalid type: integer `1`, expected a string",
        ),
        (
            json!({"pruning_tail_ratio": "s"}),
            "pruning_tail_ratio",
            "invalid type: string \"s\", expected f64",
        ),
        (
            json!({"llm_extra_headers": {"X": 1}}),
            "llm_extra_headers.X",
            "invalid type: integer `1`, expected a string",
        ),
        (
            json!({"memory_merge_days": -1}),
            "memory_merge_days",
            "invalid value: integer `-1`, expected u32",
        ),
    ] {
        let Value::Object(keys) = keys else { unreachable!() };
        assert_eq!(Config::from_keys(keys), Err(ConfigError::new(key, why)));
    }
    let err = Config::from_keys(serde_json::from_str(r#"{"pruning_recent": 3}"#).unwrap()).unwrap_err();
    assert_eq!(err.key, "pruning_recent");
    assert!(
        err.reason
            .starts_with("unknown field `pruning_recent`, expected one of `max_input_length`, "),
        "{err}"
    );
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Each key of `group`'s wire form changed alone (a number up, a flag flipped, a text or
/// list longer, an enum to its other name): the group's hash changes with every one.
fn hash_changes_with_every_key<G>(group: &G, other_names: &[&str])
where
    G: Serialize + serde::de::DeserializeOwned + Hash + PartialEq + std::fmt::Debug,
{
    let Value::Object(keys) = serde_json::to_value(group).unwrap() else {
        panic!("a group is an object")
    };
    for (key, value) in &keys {
        let candidates: Vec<Value> = match value {
            Value::Bool(b) => vec![json!(!b)],
            Value::Number(n) => vec![json!(n.as_f64().unwrap() + 1.0), json!(n.as_u64().unwrap_or(0) + 1)],
            Value::String(s) => other_names
                .iter()
                .map(|n| json!(n))
                .chain([json!(format!("{s}x"))])
                .collect(),
            Value::Array(items) => vec![Value::Array(items.iter().cloned().chain([json!("x")]).collect())],
            other => panic!("`{key}`: {other}"),
        };
        let changed: G = candidates
            .into_iter()
            .filter(|candidate| candidate != value)
            .find_map(|candidate| {
                let mut keys = keys.clone();
                keys.insert(key.clone(), candidate);
                serde_json::from_value(Value::Object(keys)).ok()
            })
            .unwrap_or_else(|| panic!("no other value of `{key}`"));
        assert_ne!(&changed, group, "`{key}`");
        assert_ne!(hash_of(&changed), hash_of(group), "`{key}` is not hashed");
    }
}

#[test]
fn the_cache_keyed_groups_hash_every_key() {
    hash_changes_with_every_key(&RenderConfig::default(), &["relative"]);
    hash_changes_with_every_key(&TokenConfig::default(), &["estimate"]);
}

/// The summary's budget grows with the window: the share, never below the floor nor above a
/// quarter of the window, and under `summary_max_tokens` when that is set.
#[test]
fn the_summary_budget_scales_with_the_window() {
    let budget = |max_input_length: u64, cap: u64| {
        let mut config = Config::default();
        config.window.max_input_length = max_input_length;
        config.summary.summary_max_tokens = cap;
        (config.effective_window(), config.summary_budget_tokens())
    };
    let (window, at_131k) = budget(131_072, 0);
    assert_eq!(at_131k, (window as f64 * 0.08) as u64);
    assert!(at_131k > 10_000, "{at_131k}");
    assert_eq!(
        budget(16_384, 0).1,
        super::SUMMARY_FLOOR_TOKENS,
        "the floor at a small window"
    );
    let (small, at_8k) = budget(8_192, 0);
    assert_eq!(
        at_8k,
        (small / 4).min(super::SUMMARY_FLOOR_TOKENS),
        "a quarter of a tiny window"
    );
    assert_eq!(budget(131_072, 4_000).1, 4_000, "the cap");
    assert_eq!(budget(16_384, 800).1, 800, "a cap under the floor");
}

/// `summarizer: "upstream"` is a value of its own, with a model per provider API that a
/// request may override like `llm_model`.
#[test]
fn the_upstream_summarizer_has_a_model_per_api() {
    let c: Config = serde_json::from_value(json!({
        "summarizer": "upstream",
        "summarizer_upstream_model_anthropic": "claude-test",
    }))
    .unwrap();
    assert_eq!(c.summary.summarizer, SummarizerKind::Upstream);
    assert_eq!(
        (
            c.summary.summarizer_upstream_model_anthropic.as_str(),
            c.summary.summarizer_upstream_model_openai.as_str()
        ),
        ("claude-test", "gpt-4o-mini")
    );
    assert_eq!(c.validate(), Ok(()));
    assert!(!DaemonConfig::has_key("summarizer_upstream_model_openai"));
    let err = serde_json::from_value::<Config>(json!({"summarizer": "upstreams"})).unwrap_err();
    assert!(err.to_string().contains("upstream"), "{err}");
}
