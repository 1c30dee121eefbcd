//! The session's cache keys: each changes with everything the cached values depend on, and
//! with nothing else.

use satchel_protocol::config::Tokenizer;
use serde_json::{Map, json};

use super::*;

/// Every configuration key with a value other than the default's, each as the
/// configuration that differs from the default in that key alone.
fn each_key_changed() -> Vec<(String, Config)> {
    let Value::Object(defaults) = serde_json::to_value(Config::default()).unwrap() else {
        panic!("a configuration is an object");
    };
    // Enum keys take another of their names; anything else is changed in place.
    let names = ["relative", "aceclaw", "estimate", "openai", "zh"];
    defaults
        .into_iter()
        .map(|(key, value)| {
            let candidates: Vec<Value> = match &value {
                Value::Bool(b) => vec![json!(!b)],
                Value::Number(n) => match n.as_u64() {
                    Some(n) => vec![json!(n + 1)],
                    None => vec![json!(n.as_f64().unwrap() + 0.125)],
                },
                Value::String(s) => std::iter::once(json!(format!("{s}x")))
                    .chain(names.iter().map(|n| json!(n)))
                    .collect(),
                Value::Array(items) => {
                    let mut items = items.clone();
                    items.push(json!(".changed"));
                    vec![Value::Array(items)]
                }
                Value::Object(map) => {
                    let mut map = map.clone();
                    map.insert("X-Changed".into(), json!("1"));
                    vec![Value::Object(map)]
                }
                Value::Null => vec![json!(1)],
            };
            let changed = candidates
                .into_iter()
                .filter(|candidate| *candidate != value)
                .find_map(|candidate| {
                    serde_json::from_value::<Config>(Value::Object(Map::from_iter([(key.clone(), candidate)]))).ok()
                })
                .unwrap_or_else(|| panic!("no other value of `{key}` found"));
            assert_ne!(changed, Config::default(), "`{key}` changed");
            (key, changed)
        })
        .collect()
}

#[test]
fn the_render_key_changes_with_every_key_rendering_reads_and_no_other() {
    let base = Config::default();
    let base_key = render_key(&base.render);
    let mut changing = Vec::new();
    for (key, changed) in each_key_changed() {
        let read_by_rendering = changed.render != base.render;
        let new_key = render_key(&changed.render);
        assert_eq!(
            new_key != base_key,
            read_by_rendering,
            "`{key}`: the cache key and what rendering reads disagree"
        );
        if read_by_rendering {
            changing.push(key);
        }
    }
    changing.sort();
    assert_eq!(
        changing,
        [
            "markdown_file_extensions",
            "markdown_old_msg_max_bytes",
            "markdown_recent_msg_max_bytes",
            "markdown_tool_names",
            "offload_notice_path",
            "pruning_enabled",
            "pruning_old_msg_max_bytes",
            "pruning_recent_msg_max_bytes",
            "pruning_slack_bytes",
            "pruning_tail_ratio",
            "read_file_tool_names",
        ]
    );
}

#[test]
fn the_count_key_changes_with_the_tokenizer_and_the_divisor() {
    let base = TokenCounter::new(Tokenizer::Estimate, 4.0);
    assert_eq!(
        counter_key(&base),
        counter_key(&TokenCounter::new(Tokenizer::Estimate, 4.0))
    );
    for other in [
        TokenCounter::new(Tokenizer::O200kBase, 4.0),
        TokenCounter::new(Tokenizer::Cl100kBase, 4.0),
        TokenCounter::new(Tokenizer::Estimate, 3.5),
    ] {
        assert_ne!(counter_key(&base), counter_key(&other), "{other:?}");
    }
}
