//! Layering of the configuration: defaults → `<workspace>/config.json` → `SATCHEL_<KEY>`
//! environment variables → per-request overrides.
//!
//! Layers are merged as JSON objects and deserialised once, so every layer gets the same
//! validation and errors name the offending key.
//!
//! The [`Config::DAEMON_ONLY_KEYS`] come only from the daemon's own layers (the file and its
//! environment): a request naming one is refused. Where the API key is sent, which variable
//! is sent and which headers go with it are the daemon owner's choice, not a client's.

use satchel_protocol::Config;
use satchel_storage::Layout;
use serde_json::{Map, Value};

/// Why a configuration layer was rejected: the key and the reason.
pub type ConfigError = (String, String);

/// The effective base configuration of a workspace.
pub fn load(workspace: &Layout, env: impl Iterator<Item = (String, String)>) -> Result<Config, ConfigError> {
    let mut merged = to_map(&Config::default());
    let path = workspace.config_file();
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let file: Map<String, Value> =
                serde_json::from_str(&text).map_err(|e| (path.display().to_string(), e.to_string()))?;
            merged.extend(file);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err((path.display().to_string(), e.to_string())),
    }
    let keys: Vec<String> = merged.keys().cloned().collect();
    let env: std::collections::HashMap<String, String> = env.collect();
    for key in keys {
        if let Some(raw) = env.get(&format!("SATCHEL_{}", key.to_ascii_uppercase())) {
            // Numbers, booleans and lists are JSON; anything that does not parse is a string.
            let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()));
            merged.insert(key, value);
        }
    }
    finish(merged)
}

/// `base` with a request's overrides applied. A daemon-only key is refused even when its
/// value equals the daemon's (accepting equal values would let a client guess a header).
pub fn apply_overrides(base: &Config, overrides: &Map<String, Value>) -> Result<Config, ConfigError> {
    if let Some(key) = overrides.keys().find(|key| Config::is_daemon_only(key)) {
        return Err((key.clone(), daemon_only_reason(key)));
    }
    let mut merged = to_map(base);
    merged.extend(overrides.clone());
    finish(merged)
}

/// Why a request may not set `key`.
fn daemon_only_reason(key: &str) -> String {
    format!(
        "can only be set in the workspace config.json or the daemon's environment (SATCHEL_{}), never per request",
        key.to_ascii_uppercase()
    )
}

fn to_map(config: &Config) -> Map<String, Value> {
    match serde_json::to_value(config) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

fn finish(merged: Map<String, Value>) -> Result<Config, ConfigError> {
    let config: Config =
        serde_path_to_error::deserialize(Value::Object(merged)).map_err(|e| (field_of(&e), e.inner().to_string()))?;
    config.validate().map_err(|(key, why)| (key.to_owned(), why))?;
    Ok(config)
}

/// The key a deserialisation error is about. For an unknown key the path is the object
/// itself, and serde names the key in backticks in its message.
fn field_of(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    match error.path().to_string() {
        path if path != "." => path,
        _ => error
            .inner()
            .to_string()
            .split('`')
            .nth(1)
            .unwrap_or("config")
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layers_file_then_env() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::write(
            layout.config_file(),
            r#"{"pruning_recent_n": 4, "max_input_length": 32768}"#,
        )
        .unwrap();
        let env = [
            ("SATCHEL_PRUNING_RECENT_N".to_owned(), "6".to_owned()),
            ("SATCHEL_TOKENIZER".to_owned(), "estimate".to_owned()),
        ];
        let c = load(&layout, env.into_iter()).unwrap();
        assert_eq!((c.pruning_recent_n, c.max_input_length), (6, 32768));
        assert_eq!(c.tokenizer, satchel_protocol::config::Tokenizer::Estimate);
    }

    #[test]
    fn overrides_are_validated_and_errors_name_the_key() {
        let base = Config::default();
        let ok = apply_overrides(&base, json!({"pruning_old_msg_max_bytes": 500}).as_object().unwrap()).unwrap();
        assert_eq!(ok.pruning_old_msg_max_bytes, 500);
        let (key, _) = apply_overrides(&base, json!({"pruning_old": 1}).as_object().unwrap()).unwrap_err();
        assert_eq!(key, "pruning_old");
        let (key, _) = apply_overrides(&base, json!({"pruning_recent_n": "x"}).as_object().unwrap()).unwrap_err();
        assert_eq!(key, "pruning_recent_n");
        let (key, _) =
            apply_overrides(&base, json!({"compact_threshold_ratio": 2.0}).as_object().unwrap()).unwrap_err();
        assert_eq!(key, "compact_threshold_ratio");
    }

    #[test]
    fn each_daemon_only_key_is_refused_per_request_and_named() {
        let base = Config::default();
        let values = [
            ("llm_base_url", json!("http://attacker.example/v1")),
            ("llm_api_key_env", json!("HOME")),
            ("llm_extra_headers", json!({"X-Org": "org-1"})),
            ("dialog_path", json!("elsewhere")),
            ("max_live_sessions", json!(4)),
            ("session_idle_secs", json!(60)),
        ];
        assert_eq!(values.len(), Config::DAEMON_ONLY_KEYS.len());
        for (key, value) in values {
            assert!(Config::is_daemon_only(key), "{key}");
            let overrides = json!({"pruning_recent_n": 3, key: value});
            let (field, why) = apply_overrides(&base, overrides.as_object().unwrap()).unwrap_err();
            assert_eq!(field, key);
            assert!(
                why.contains("config.json") && why.contains(&format!("SATCHEL_{}", key.to_ascii_uppercase())),
                "{why}"
            );
        }
    }

    #[test]
    fn a_daemon_only_key_is_refused_even_with_the_daemons_own_value() {
        let base = Config::default();
        let same = json!({"llm_base_url": base.llm_base_url, "llm_extra_headers": {}});
        let (field, _) = apply_overrides(&base, same.as_object().unwrap()).unwrap_err();
        assert_eq!(field, "llm_base_url");
    }

    #[test]
    fn daemon_only_keys_come_from_the_file_and_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::write(
            layout.config_file(),
            r#"{"llm_base_url": "http://127.0.0.1:9/v1", "llm_extra_headers": {"X-Org": "org-1"},
                "dialog_path": "archive", "max_live_sessions": 8}"#,
        )
        .unwrap();
        let env = [
            ("SATCHEL_LLM_API_KEY_ENV".to_owned(), "MY_KEY".to_owned()),
            ("SATCHEL_SESSION_IDLE_SECS".to_owned(), "90".to_owned()),
            (
                "SATCHEL_LLM_EXTRA_HEADERS".to_owned(),
                r#"{"X-Org": "org-2", "X-Team": "t"}"#.to_owned(),
            ),
        ];
        let c = load(&layout, env.into_iter()).unwrap();
        assert_eq!(c.llm_base_url, "http://127.0.0.1:9/v1");
        assert_eq!(c.llm_api_key_env, "MY_KEY");
        assert_eq!(c.llm_extra_headers.len(), 2);
        assert_eq!(c.llm_extra_headers["X-Org"], "org-2");
        assert_eq!((c.dialog_path.as_str(), c.max_live_sessions), ("archive", 8));
        assert_eq!(c.session_idle_secs, 90.0);
        // A request still tunes everything else on top of them.
        let tuned = apply_overrides(
            &c,
            json!({"llm_model": "other", "summarizer": "openai"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (tuned.llm_model.as_str(), tuned.llm_base_url.as_str()),
            ("other", "http://127.0.0.1:9/v1")
        );
    }
}
