use super::*;
use crate::Config;
use crate::config::ContextMode;
use serde_json::json;

fn layer(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn resolved(value: Value) -> Resolved {
    resolve(&layer(value)).unwrap_or_else(|e| panic!("{e}"))
}

fn error(value: Value) -> AliasError {
    resolve(&layer(value)).expect_err("should be refused")
}

/// The defaults with a resolved layer over them, as the daemon's file layer does.
fn config(value: Value) -> Config {
    let mut merged = layer(serde_json::to_value(Config::default()).unwrap());
    merged.extend(resolved(value).values);
    serde_json::from_value(Value::Object(merged)).unwrap_or_else(|e| panic!("{e}"))
}

fn config_keys() -> Map<String, Value> {
    layer(serde_json::to_value(Config::default()).unwrap())
}

/// The object `{a: {b: {c: value}}}` for the path `a.b.c`.
fn nest(path: &str, value: Value) -> Value {
    path.rsplit('.').fold(value, |inner, field| json!({ field: inner }))
}

/// A value of the right type for `key`, different from its default.
fn sample(key: &str) -> Value {
    match &config_keys()[key] {
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) if n.is_u64() => json!(n.as_u64().unwrap() + 1),
        Value::Number(n) => json!(n.as_f64().unwrap() * 0.9),
        Value::String(s) => json!(format!("{s}2")),
        other => panic!("{key}: no sample for {other}"),
    }
}

#[test]
fn every_alias_sets_a_config_key() {
    let keys = config_keys();
    for alias in FILE_ALIASES {
        if let Some(key) = alias.target.key() {
            assert!(keys.contains_key(key), "{} → {key} is not a config key", alias.path);
        }
    }
    for alias in ENV_ALIASES {
        assert!(
            keys.contains_key(alias.key),
            "{} → {} is not a config key",
            alias.var,
            alias.key
        );
    }
}

/// The spec's tables, field by field (`02` CoPaw `agents.running`, `03` QwenPaw `running` and
/// `light_context_config`): each is in the table, and the table has nothing else.
#[test]
fn the_table_is_exactly_the_specs_fields() {
    let spec = [
        // 02: CoPaw's context management and tool compaction parameters.
        "max_input_length",
        "memory_compact_ratio",
        "memory_reserve_ratio",
        "enable_tool_result_compact",
        "tool_result_compact_keep_n",
        // 03: QwenPaw's `running` top-level fields.
        "context_manager_backend",
        "memory_manager_backend",
        // 03: `running.light_context_config`.
        "light_context_config.dialog_path",
        "light_context_config.token_count_estimate_divisor",
        // 03: `running.light_context_config.context_compact_config`.
        "light_context_config.context_compact_config.enabled",
        "light_context_config.context_compact_config.compact_threshold_ratio",
        "light_context_config.context_compact_config.reserve_threshold_ratio",
        // 03: `running.light_context_config.tool_result_pruning_config`.
        "light_context_config.tool_result_pruning_config.enabled",
        "light_context_config.tool_result_pruning_config.pruning_recent_n",
        "light_context_config.tool_result_pruning_config.pruning_old_msg_max_bytes",
        "light_context_config.tool_result_pruning_config.pruning_recent_msg_max_bytes",
        "light_context_config.tool_result_pruning_config.offload_retention_days",
    ];
    let mut table: Vec<&str> = FILE_ALIASES.iter().map(|a| a.path).collect();
    let mut spec = spec.to_vec();
    table.sort_unstable();
    spec.sort_unstable();
    assert_eq!(table, spec);
    let vars: Vec<&str> = ENV_ALIASES.iter().map(|a| a.var).collect();
    assert_eq!(
        vars,
        [
            "COPAW_MEMORY_COMPACT_THRESHOLD",
            "COPAW_MEMORY_COMPACT_RATIO",
            "COPAW_MEMORY_COMPACT_KEEP_RECENT",
            "FTS_ENABLED",
            "MEMORY_STORE_BACKEND",
            "EMBEDDING_BASE_URL",
            "EMBEDDING_MODEL_NAME",
            "EMBEDDING_DIMENSIONS",
            "EMBEDDING_CACHE_ENABLED",
            "EMBEDDING_MAX_CACHE_SIZE",
            "EMBEDDING_MAX_INPUT_LENGTH",
            "EMBEDDING_MAX_BATCH_SIZE"
        ]
    );
}

/// Each key alias, at the top level, under `running` and under `agents.running`: it sets its
/// key, and the key remembers the alias as written.
#[test]
fn every_alias_resolves_at_each_place() {
    for alias in FILE_ALIASES {
        let Target::Key(key) = alias.target else { continue };
        let value = sample(key);
        for place in ["", "running", "agents.running"] {
            let written = if place.is_empty() {
                alias.path.to_owned()
            } else {
                format!("{place}.{}", alias.path)
            };
            let r = resolved(nest(&written, value.clone()));
            assert_eq!(r.values.len(), 1, "{written}");
            assert_eq!(r.values[key], value, "{written} → {key}");
            let expected = (written != key).then_some(written.clone());
            assert_eq!(r.written_as.get(key).cloned(), expected, "{written}");
        }
    }
}

#[test]
fn the_copaw_example_of_the_spec() {
    let c = config(json!({
        "agents": {
            "running": {
                "max_input_length": 128000,
                "memory_compact_ratio": 0.7,
                "memory_reserve_ratio": 0.1,
                "enable_tool_result_compact": true,
                "tool_result_compact_keep_n": 3
            }
        }
    }));
    assert_eq!(c.window.max_input_length, 128_000);
    assert_eq!(
        (
            c.compaction.compact_threshold_ratio,
            c.compaction.reserve_threshold_ratio
        ),
        (0.7, 0.1)
    );
    assert!(c.render.pruning_enabled);
    assert_eq!(c.recent.pruning_recent_n, 3);
    assert_eq!(c.validate(), Ok(()));
    let off = config(json!({"enable_tool_result_compact": false}));
    assert!(!off.render.pruning_enabled, "CoPaw's flag at the top level");
}

#[test]
fn the_qwenpaw_example_of_the_spec() {
    let c = config(json!({
        "agents": {
            "running": {
                "max_input_length": 128000,
                "context_manager_backend": "light",
                "memory_manager_backend": "remelight",
                "light_context_config": {
                    "dialog_path": "archive",
                    "token_count_estimate_divisor": 3.5,
                    "context_compact_config": {
                        "enabled": false,
                        "compact_threshold_ratio": 0.75,
                        "reserve_threshold_ratio": 0.15
                    },
                    "tool_result_pruning_config": {
                        "enabled": false,
                        "pruning_recent_n": 4,
                        "pruning_old_msg_max_bytes": 2000,
                        "pruning_recent_msg_max_bytes": 40000,
                        "offload_retention_days": 2
                    }
                }
            }
        }
    }));
    assert_eq!(c.window.max_input_length, 128_000);
    assert_eq!(c.window.context_mode, ContextMode::Qwenpaw);
    assert_eq!(
        (
            c.daemon.sessions.dialog_path.as_str(),
            c.tokens.token_count_estimate_divisor.get()
        ),
        ("archive", 3.5)
    );
    assert!(!c.compaction.compact_enabled);
    assert_eq!(
        (
            c.compaction.compact_threshold_ratio,
            c.compaction.reserve_threshold_ratio
        ),
        (0.75, 0.15)
    );
    assert!(!c.render.pruning_enabled);
    assert_eq!(c.recent.pruning_recent_n, 4);
    assert_eq!(
        (
            c.render.pruning_old_msg_max_bytes,
            c.render.pruning_recent_msg_max_bytes
        ),
        (2000, 40_000)
    );
    assert_eq!(c.retention.offload_retention_days, 2.0);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn flat_keys_and_unknown_top_level_keys_pass_through() {
    let r = resolved(json!({"pruning_slack_bytes": 7, "not_a_key": 1, "dialog_path": "d"}));
    assert_eq!(
        r.values,
        layer(json!({"pruning_slack_bytes": 7, "not_a_key": 1, "dialog_path": "d"}))
    );
    assert!(r.written_as.is_empty());
}

#[test]
fn an_alias_and_its_flat_key_with_different_values_conflict() {
    let e = error(json!({"memory_compact_ratio": 0.7, "compact_threshold_ratio": 0.8}));
    assert_eq!(
        e.to_string(),
        "`memory_compact_ratio` (0.7) and `compact_threshold_ratio` (0.8) both set compact_threshold_ratio"
    );
    assert_eq!(e.name(), "compact_threshold_ratio");
    // In either order, and nested.
    let e = error(json!({"pruning_enabled": true, "running": {"enable_tool_result_compact": false}}));
    assert_eq!(
        e.to_string(),
        "`pruning_enabled` (true) and `running.enable_tool_result_compact` (false) both set pruning_enabled"
    );
    assert_eq!(e.name(), "running.enable_tool_result_compact");
}

#[test]
fn two_aliases_of_one_key_conflict() {
    let e = error(json!({"agents": {"running": {
        "memory_compact_ratio": 0.7,
        "light_context_config": {"context_compact_config": {"compact_threshold_ratio": 0.75}}
    }}}));
    assert_eq!(
        e.to_string(),
        "`agents.running.memory_compact_ratio` (0.7) and \
         `agents.running.light_context_config.context_compact_config.compact_threshold_ratio` (0.75) \
         both set compact_threshold_ratio"
    );
    // The same alias at two places.
    let e = error(json!({"running": {"max_input_length": 64000}, "agents": {"running": {"max_input_length": 128000}}}));
    assert!(e.to_string().contains("`running.max_input_length` (64000)"), "{e}");
    assert!(
        e.to_string().contains("`agents.running.max_input_length` (128000)"),
        "{e}"
    );
    let e = error(json!({
        "enable_tool_result_compact": true,
        "light_context_config": {"tool_result_pruning_config": {"enabled": false}}
    }));
    assert!(e.to_string().ends_with("both set pruning_enabled"), "{e}");
}

#[test]
fn the_same_value_twice_is_no_conflict() {
    let r = resolved(json!({
        "compact_threshold_ratio": 0.7,
        "memory_compact_ratio": 0.7,
        "agents": {"running": {"memory_compact_ratio": 0.7, "tool_result_compact_keep_n": 3}},
        "running": {"light_context_config": {"tool_result_pruning_config": {"pruning_recent_n": 3.0}}}
    }));
    assert_eq!(r.values["compact_threshold_ratio"], json!(0.7));
    assert_eq!(r.values["pruning_recent_n"], json!(3));
    // Written as the flat key too: errors about its value name the key itself.
    assert!(!r.written_as.contains_key("compact_threshold_ratio"));
    assert_eq!(
        r.written_as["pruning_recent_n"],
        "agents.running.tool_result_compact_keep_n"
    );
}

#[test]
fn fields_the_spec_does_not_list_are_refused_where_they_are() {
    let e = error(json!({"running": {"light_context_config": {"context_compact_config": {"ratio": 0.7}}}}));
    assert_eq!(e.name(), "running.light_context_config.context_compact_config.ratio");
    assert!(
        e.to_string()
            .ends_with("the spec's fields there are: enabled, compact_threshold_ratio, reserve_threshold_ratio"),
        "{e}"
    );
    let e = error(json!({"agents": {"defaults": {}}}));
    assert_eq!(e.name(), "agents.defaults");
    assert!(e.to_string().ends_with("are: running, language"), "{e}");
    // satchel's own keys are flat, not inside `running`.
    let e = error(json!({"running": {"pruning_slack_bytes": 10}}));
    assert_eq!(e.name(), "running.pruning_slack_bytes");
    assert!(e.to_string().contains("light_context_config"), "{e}");
    let e = error(json!({"light_context_config": {"tool_result_pruning_config": {"max_bytes": 1}}}));
    assert_eq!(e.name(), "light_context_config.tool_result_pruning_config.max_bytes");
    assert!(e.to_string().contains("offload_retention_days"), "{e}");
}

#[test]
fn nested_objects_must_be_objects() {
    for (value, name) in [
        (json!({"running": 1}), "running"),
        (json!({"agents": []}), "agents"),
        (json!({"agents": {"running": "x"}}), "agents.running"),
        (
            json!({"running": {"light_context_config": {"context_compact_config": true}}}),
            "running.light_context_config.context_compact_config",
        ),
    ] {
        assert_eq!(error(value), AliasError::NotAnObject { name: name.into() });
    }
}

#[test]
fn the_backend_fields_accept_only_what_satchel_is() {
    let r = resolved(json!({"running": {"context_manager_backend": "light", "memory_manager_backend": "remelight"}}));
    assert_eq!(r.values, layer(json!({"context_mode": "qwenpaw"})));
    let e = error(json!({"running": {"context_manager_backend": "heavy"}}));
    assert_eq!(e.name(), "running.context_manager_backend");
    assert!(
        e.to_string()
            .starts_with("`running.context_manager_backend` is \"heavy\": satchel implements only"),
        "{e}"
    );
    let e = error(json!({"memory_manager_backend": "mem0"}));
    assert!(e.to_string().contains("no other memory manager"), "{e}");
    let r = resolved(json!({"context_mode": "qwenpaw", "agents": {"running": {"context_manager_backend": "light"}}}));
    assert_eq!(
        r.values,
        layer(json!({"context_mode": "qwenpaw"})),
        "the same mode twice"
    );
    // `light` is the qwenpaw mode: with another context_mode in the same layer, both are named.
    let e = error(json!({"context_mode": "aceclaw", "running": {"context_manager_backend": "light"}}));
    assert_eq!(
        e.to_string(),
        "`context_mode` (\"aceclaw\") and `running.context_manager_backend` (\"light\") both set context_mode"
    );
}

/// The README's list of the spec's names is [`markdown`], between its markers. Run with
/// `UPDATE_README=1` to rewrite it after changing the table.
#[test]
fn readme_lists_the_table() {
    const BEGIN: &str = "<!-- spec-names:begin: generated from crates/protocol/src/aliases.rs -->\n";
    const END: &str = "<!-- spec-names:end -->";
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (start, end) = match (readme.find(BEGIN), readme.find(END)) {
        (Some(start), Some(end)) => (start + BEGIN.len(), end),
        _ => panic!("README.md has no {BEGIN:?} … {END:?} block"),
    };
    let fresh = markdown();
    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(&path, format!("{}{fresh}{}", &readme[..start], &readme[end..])).unwrap();
        return;
    }
    assert!(
        readme[start..end] == fresh,
        "README.md's list of the spec's names is out of date: run `UPDATE_README=1 cargo test -p satchel-protocol aliases`"
    );
}

/// CoPaw's own `config.json` names the agents' language (`agents.language`, which its memory
/// prompts follow: "zh = Chinese, otherwise English"); satchel refused the file for it.
#[test]
fn copaws_agents_language_sets_the_summary_language() {
    use crate::config::SummaryLanguage;
    for (code, language) in [
        ("zh", SummaryLanguage::Zh),
        ("zh-CN", SummaryLanguage::Zh),
        ("en", SummaryLanguage::En),
        ("ja", SummaryLanguage::En),
    ] {
        let c = config(json!({"agents": {"language": code, "running": {"max_input_length": 64000}}}));
        assert_eq!(
            (c.summary.summary_language, c.window.max_input_length),
            (language, 64000),
            "{code}"
        );
    }
    let r = resolved(json!({"agents": {"language": "zh"}}));
    assert_eq!(r.written_as["summary_language"], "agents.language");
    // Said twice, differently: both named.
    let e = error(json!({"agents": {"language": "zh"}, "summary_language": "en"}));
    assert_eq!(
        e.to_string(),
        "`agents.language` (\"zh\") and `summary_language` (\"en\") both set summary_language"
    );
    let e = error(json!({"agents": {"language": 7}}));
    assert_eq!(e.name(), "agents.language");
    let e = error(json!({"agents": {"lang": "zh"}}));
    assert!(e.to_string().contains("running, language"), "{e}");
}
