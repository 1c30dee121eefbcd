//! Layering of the configuration: defaults → `$XDG_CONFIG_HOME/satchel/config.json` (the
//! user's file; `~/.config/satchel/config.json` when `XDG_CONFIG_HOME` is unset) →
//! `<workspace>/config.json` → `SATCHEL_<KEY>` environment variables → per-request overrides.
//!
//! Layers are merged as JSON objects and deserialised once, so every layer gets the same
//! validation and errors name the offending key. [`load_layers`] also says where each key's
//! value came from (`satchel config` shows it). The user's file is optional: one that cannot
//! be read is skipped with a warning.
//!
//! The files and a request may use the spec's names (CoPaw's `agents.running` keys and
//! `agents.language`, QwenPaw's `light_context_config` tree): [`aliases::resolve`] turns each
//! into flat keys first, and refuses two names that set one key differently. The environment
//! layer also reads CoPaw's `COPAW_MEMORY_COMPACT_*` variables ([`ENV_ALIASES`]);
//! `COPAW_MEMORY_COMPACT_THRESHOLD`, in tokens, becomes a ratio of the window the other layers
//! settle on, and with `COPAW_MEMORY_COMPACT_RATIO` the lower of the two. A list key's variable
//! takes a JSON array or comma-separated text (`SATCHEL_MARKDOWN_TOOL_NAMES=read_skill,load_skill`).
//!
//! The [`DaemonConfig`]'s keys come only from the daemon's own layers (the files and its
//! environment): a request naming one is refused. Where the API key is sent, which variable
//! is sent and which headers go with it are the daemon owner's choice, not a client's.
//!
//! A `SATCHEL_` variable that is none of these (a typo such as `SATCHEL_PRUNING_RECENT`) would
//! be a silent no-op: [`unknown_variables`] names them, with the closest key, for a warning.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use satchel_protocol::ConfigError;
use satchel_protocol::aliases::{self, ENV_ALIASES, EnvUnit, same_value};
use satchel_protocol::{Config, DaemonConfig};
use satchel_storage::Layout;
use serde_json::{Map, Value};

/// Flat key → the name it was last set under when that was not the key itself (a spec alias
/// such as `memory_compact_ratio`, or a `COPAW_` variable), so that an error about its value
/// names what the user wrote.
type WrittenAs = BTreeMap<String, String>;

/// Where a key's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// A configuration file: the user's (`$XDG_CONFIG_HOME/satchel/config.json`) or the
    /// workspace's.
    File(PathBuf),
    /// An environment variable: the key's `SATCHEL_` one or a CoPaw alias.
    Env(String),
}

/// The effective base configuration and where each key came from.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Key → where its value came from (every key of the configuration).
    pub sources: BTreeMap<String, Source>,
    /// The files looked for, lowest layer first, and whether each was read.
    pub files: Vec<(PathBuf, bool)>,
    /// What was skipped and why (the user's file when it cannot be read), for the log.
    pub warnings: Vec<String>,
    /// How settings given twice were combined (CoPaw's threshold and ratio), for the log.
    pub notes: Vec<String>,
}

/// The user's configuration file: `$XDG_CONFIG_HOME/satchel/config.json`, or
/// `$HOME/.config/satchel/config.json` when `XDG_CONFIG_HOME` is unset (or not absolute, as the
/// XDG specification says). `None` without either variable.
pub fn user_config_file(env: &HashMap<String, String>) -> Option<PathBuf> {
    let absolute = |name: &str| env.get(name).map(PathBuf::from).filter(|path| path.is_absolute());
    let base = absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|home| home.join(".config")))?;
    Some(base.join("satchel").join("config.json"))
}

/// The effective base configuration of a workspace, with the source of every key, the files
/// looked for, and what the log should say about them.
///
/// The user's file is optional: one that cannot be read (a `$HOME` that cannot be searched, a
/// file that is not readable) is skipped with a warning. The workspace's file is the daemon's
/// own, and one that cannot be read is an error; so is a file that is not valid JSON.
pub fn load_layers(workspace: &Layout, env: impl Iterator<Item = (String, String)>) -> Result<Loaded, ConfigError> {
    let env: HashMap<String, String> = env.collect();
    let mut merged = to_map(&Config::default());
    let mut sources: BTreeMap<String, Source> = merged.keys().map(|key| (key.clone(), Source::Default)).collect();
    let mut written_as = WrittenAs::new();
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let user_file = user_config_file(&env).map(|path| (path, true));
    for (path, optional) in user_file.into_iter().chain([(workspace.config_file(), false)]) {
        let found = match read_file_layer(&path, &mut merged, &mut written_as, &mut sources) {
            Err(FileError::Unreadable(why)) if optional => {
                warnings.push(format!(
                    "skipping the user configuration {}: it cannot be read ({why})",
                    path.display()
                ));
                false
            }
            Err(FileError::Unreadable(why) | FileError::Invalid(why)) => {
                return Err(ConfigError::new(path.display().to_string(), why));
            }
            Ok(found) => found,
        };
        files.push((path, found));
    }
    let notes = apply_env(&mut merged, &mut written_as, &mut sources, &env)?;
    let config = finish(merged, &written_as)?;
    Ok(Loaded {
        config,
        sources,
        files,
        warnings,
        notes,
    })
}

/// Why a configuration file was not merged.
enum FileError {
    /// It is there (or might be) but cannot be read: the reason.
    Unreadable(String),
    /// It was read but is not a valid layer: the reason.
    Invalid(String),
}

/// Merges the file at `path`, if there is one, over `merged`. Returns whether it was there.
fn read_file_layer(
    path: &Path,
    merged: &mut Map<String, Value>,
    written_as: &mut WrittenAs,
    sources: &mut BTreeMap<String, Source>,
) -> Result<bool, FileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(FileError::Unreadable(e.to_string())),
    };
    let file: Map<String, Value> = serde_json::from_str(&text).map_err(|e| FileError::Invalid(e.to_string()))?;
    let file = aliases::resolve(&file).map_err(|e| FileError::Invalid(e.to_string()))?;
    for (key, value) in file.values {
        written_as.remove(&key);
        if let Some(source) = sources.get_mut(&key) {
            *source = Source::File(path.to_path_buf());
        }
        merged.insert(key, value);
    }
    written_as.extend(file.written_as);
    Ok(true)
}

/// The environment layer: `SATCHEL_<KEY>` for every key, and CoPaw's variables
/// ([`ENV_ALIASES`]). Both override the file; a `COPAW_` and a `SATCHEL_` variable (or two
/// `COPAW_` ones) that set one key differently are an error naming both, but for CoPaw's own
/// documented pair, `COPAW_MEMORY_COMPACT_THRESHOLD` (tokens) and `COPAW_MEMORY_COMPACT_RATIO`:
/// both are honoured, compaction triggering at whichever is reached first. Returns a note for
/// the log saying which one that is.
fn apply_env(
    merged: &mut Map<String, Value>,
    written_as: &mut WrittenAs,
    sources: &mut BTreeMap<String, Source>,
    env: &HashMap<String, String>,
) -> Result<Vec<String>, ConfigError> {
    let mut notes = Vec::new();
    let defaults = to_map(&Config::default());
    let value_of = |key: &str, raw: &str| env_value(raw, defaults.get(key));
    // Key → (variable, value), for every variable of the layer.
    let mut set: BTreeMap<String, (String, Value)> = BTreeMap::new();
    for key in defaults.keys() {
        let var = env_var_of(key);
        if let Some(raw) = env.get(&var) {
            set.insert(key.clone(), (var, value_of(key, raw)));
        }
    }
    for alias in ENV_ALIASES.iter().filter(|a| a.unit == EnvUnit::Same) {
        let Some(raw) = env.get(alias.var) else { continue };
        let value = value_of(alias.key, raw);
        match set.get(alias.key) {
            Some((other, earlier)) if !same_value(earlier, &value) => {
                return Err(ConfigError::new(
                    alias.var,
                    format!(
                        "`{other}` ({earlier}) and `{}` ({value}) both set {}",
                        alias.var, alias.key
                    ),
                ));
            }
            Some(_) => {}
            None => {
                set.insert(alias.key.to_owned(), (alias.var.to_owned(), value));
            }
        }
    }
    for (key, (var, value)) in &set {
        merged.insert(key.clone(), value.clone());
        sources.insert(key.clone(), Source::Env(var.clone()));
        if var.starts_with("SATCHEL_") {
            // Errors about a `SATCHEL_<KEY>` value name the key, as they always have.
            written_as.remove(key);
        } else {
            written_as.insert(key.clone(), var.clone());
        }
    }
    // A threshold in tokens becomes a ratio of the window the other layers settled on.
    for alias in ENV_ALIASES.iter().filter(|a| a.unit == EnvUnit::TokensOfWindow) {
        let Some(raw) = env.get(alias.var) else { continue };
        let tokens: u64 = raw
            .trim()
            .parse()
            .map_err(|_| ConfigError::new(alias.var, format!("must be a whole number of tokens, not {raw:?}")))?;
        let (Some(length), Some(output)) = (
            merged.get("max_input_length").and_then(Value::as_u64),
            merged.get("max_output_tokens").and_then(Value::as_u64),
        ) else {
            continue; // A window that is not a number: the key is named when the layers are read.
        };
        let window = length.saturating_sub(output);
        let ratio = threshold_ratio(tokens, window).ok_or_else(|| {
            ConfigError::new(
                alias.var,
                format!(
                    "{tokens} tokens is not a threshold inside the {window}-token effective window \
                     (max_input_length {length} less max_output_tokens {output}): the ratio must be in (0, 1]"
                ),
            )
        })?;
        if let Some((other, given)) = set.get(alias.key) {
            let agrees = given.as_f64().is_some_and(|r| (window as f64 * r) as u64 == tokens);
            match given.as_f64() {
                // CoPaw documents the ratio beside the threshold (defaults 0.7 and 100000 tokens),
                // so its users set both: each is a trigger, and the first one reached counts.
                Some(given_ratio) if !agrees && other.starts_with("COPAW_") => {
                    // A ratio out of range stays, for validation to name it.
                    if given_ratio <= ratio || given_ratio > 1.0 {
                        if given_ratio > 0.0 && given_ratio <= 1.0 {
                            notes.push(format!(
                                "`{other}` ({given}) and `{}` ({tokens} tokens, {ratio:.4} of the {window}-token \
                                 effective window) both set {}: compaction triggers at whichever is reached first, \
                                 here the ratio",
                                alias.var, alias.key
                            ));
                        }
                        continue;
                    }
                    notes.push(format!(
                        "`{other}` ({given}) and `{}` ({tokens} tokens, {ratio:.4} of the {window}-token effective \
                         window) both set {}: compaction triggers at whichever is reached first, here the threshold",
                        alias.var, alias.key
                    ));
                }
                _ if !agrees => {
                    return Err(ConfigError::new(
                        alias.var,
                        format!(
                            "`{other}` ({given}) and `{}` ({tokens}) both set {} ({tokens} tokens is {ratio:.4} of \
                             the {window}-token window)",
                            alias.var, alias.key
                        ),
                    ));
                }
                _ => {}
            }
        }
        merged.insert(alias.key.to_owned(), ratio.into());
        sources.insert(alias.key.to_owned(), Source::Env(alias.var.to_owned()));
        written_as.insert(alias.key.to_owned(), alias.var.to_owned());
    }
    Ok(notes)
}

/// The `SATCHEL_` variable of a key.
pub fn env_var_of(key: &str) -> String {
    format!("SATCHEL_{}", key.to_ascii_uppercase())
}

/// A variable's value for a key whose default is `default`: numbers, booleans and objects are
/// JSON; a list is a JSON array or comma-separated text (`a,b`; empty text is the empty list);
/// a text key takes the text as it is (a JSON string is unquoted); anything that does not parse
/// is a string, which deserialisation then refuses naming the key.
fn env_value(raw: &str, default: Option<&Value>) -> Value {
    let text = || Value::String(raw.to_owned());
    match default {
        Some(Value::Array(_)) if !raw.trim_start().starts_with('[') => Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| Value::String(item.to_owned()))
                .collect(),
        ),
        Some(Value::String(_)) => match serde_json::from_str(raw) {
            Ok(Value::String(unquoted)) => Value::String(unquoted),
            _ => text(),
        },
        _ => serde_json::from_str(raw).unwrap_or_else(|_| text()),
    }
}

/// `SATCHEL_` variables that are not configuration keys: read by the binary (`SATCHEL_HOME`,
/// `SATCHEL_LOG`, `SATCHEL_FAILPOINTS`, `SATCHEL_PANIC_METHODS`), by the clients and scripts that
/// spawn it (`SATCHEL_BIN`, `SATCHEL_CACHE_DIR`), and by the tests and benchmarks, whose
/// daemons inherit them.
const OTHER_VARIABLES: &[&str] = &[
    "SATCHEL_HOME",
    "SATCHEL_LOG",
    "SATCHEL_FAILPOINTS",
    crate::panic_point::ENV_VAR,
    "SATCHEL_BIN",
    "SATCHEL_CACHE_DIR",
    "SATCHEL_EMBEDDING_MODEL",
    "SATCHEL_SHARED_DATA",
    "SATCHEL_SHOW_MISSES",
    "SATCHEL_SHOW_SUMMARY",
    "SATCHEL_BENCH_DAEMON_LOG",
    "SATCHEL_RETENTION_OUT",
    "SATCHEL_CONTINUITY_OUT",
    "SATCHEL_ASSERT_RETENTION",
    "SATCHEL_ASSERT_CONTINUITY",
    "SATCHEL_FAULT_SEED",
    "SATCHEL_EVICTION_SESSIONS",
    "SATCHEL_CANCEL_TRIALS",
    "SATCHEL_CAMPAIGN_SEED",
    "SATCHEL_CAMPAIGN_KILLS",
    "SATCHEL_CAMPAIGN_FRAMES",
    "SATCHEL_CAMPAIGN_CLIENTS",
    "SATCHEL_CAMPAIGN_CALLS",
    "SATCHEL_CAMPAIGN_CORPUS_DIR",
];

/// A warning for each `SATCHEL_` variable of `env` that satchel does not read: not a key's
/// variable, not one of the [`OTHER_VARIABLES`], and not the variable `config` names for an
/// API key (`llm_api_key_env`, `embedding_api_key_env`). Each names the closest key, if one is
/// close. Sorted by variable.
pub fn unknown_variables<'a>(env: impl Iterator<Item = &'a str>, config: &Config) -> Vec<String> {
    let keys: Vec<String> = to_map(&Config::default()).keys().cloned().collect();
    let mut unknown: Vec<&str> = env
        .filter(|var| var.starts_with("SATCHEL_"))
        .filter(|var| !OTHER_VARIABLES.contains(var))
        .filter(|var| {
            *var != config.daemon.llm.llm_api_key_env && *var != config.daemon.embedding.embedding_api_key_env
        })
        .filter(|var| !keys.iter().any(|key| env_var_of(key) == *var))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    unknown
        .into_iter()
        .map(|var| match closest_key(&var["SATCHEL_".len()..], &keys) {
            Some(key) => format!(
                "ignoring unknown environment variable {var}: no configuration key {:?}; did you mean {}?",
                var["SATCHEL_".len()..].to_ascii_lowercase(),
                env_var_of(key)
            ),
            None => format!(
                "ignoring unknown environment variable {var}: no configuration key {:?} (`satchel config` lists them)",
                var["SATCHEL_".len()..].to_ascii_lowercase()
            ),
        })
        .collect()
}

/// The key closest to `name` (a variable without its prefix) by edit distance, if it is
/// within a third of the name's length (at least 2 edits), or one key starts with the other.
fn closest_key<'k>(name: &str, keys: &'k [String]) -> Option<&'k str> {
    let name = name.to_ascii_lowercase();
    if name.is_empty() {
        return None;
    }
    let allowed = (name.len() / 3).max(2);
    keys.iter()
        .map(|key| (edit_distance(&name, key), key))
        .filter(|(distance, key)| *distance <= allowed || (name.len() >= 6 && key.starts_with(name.as_str())))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, key)| key.as_str())
}

/// Levenshtein distance between two ASCII-ish strings (by `char`).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The `compact_threshold_ratio` that makes compaction trigger at exactly `tokens` of a
/// `window`-token effective window, or `None` when no ratio in (0, 1] does.
///
/// The trigger is `(window × ratio) as u64`, and `tokens / window` may round to just below
/// what gives `tokens` back: the ratio is nudged up to the next float until it does.
fn threshold_ratio(tokens: u64, window: u64) -> Option<f64> {
    if tokens == 0 || tokens > window {
        return None;
    }
    let mut ratio = tokens as f64 / window as f64;
    while ((window as f64 * ratio) as u64) < tokens && ratio < 1.0 {
        ratio = ratio.next_up();
    }
    Some(ratio.min(1.0))
}

/// `base` with a request's overrides applied. The overrides may use the spec's names
/// ([`aliases::resolve`]). A daemon-only key is refused, also through an alias, and even when
/// its value equals the daemon's (accepting equal values would let a client guess a header).
pub fn apply_overrides(base: &Config, overrides: &Map<String, Value>) -> Result<Config, ConfigError> {
    let overrides = aliases::resolve(overrides).map_err(|e| ConfigError::new(e.name(), e.to_string()))?;
    if let Some(key) = overrides.values.keys().find(|key| DaemonConfig::has_key(key)) {
        return Err(match overrides.written_as.get(key) {
            Some(name) => ConfigError::new(name, format!("`{name}` sets {key}, which {}", daemon_only_reason(key))),
            None => ConfigError::new(key, daemon_only_reason(key)),
        });
    }
    let mut merged = to_map(base);
    merged.extend(overrides.values);
    finish(merged, &overrides.written_as)
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

/// The merged layers as a `Config`, checked. An error about a key set through an alias names
/// the alias (and the key).
fn finish(merged: Map<String, Value>, written_as: &WrittenAs) -> Result<Config, ConfigError> {
    let named = |error: ConfigError| match written_as.get(&error.key) {
        Some(name) => ConfigError::new(name, format!("{} (`{name}` sets {})", error.reason, error.key)),
        None => error,
    };
    let config = Config::from_keys(merged).map_err(named)?;
    config.validate().map_err(named)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The effective configuration of the layers.
    fn load(workspace: &Layout, env: impl Iterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        load_layers(workspace, env).map(|loaded| loaded.config)
    }

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
        assert_eq!((c.recent.pruning_recent_n, c.window.max_input_length), (6, 32768));
        assert_eq!(c.tokens.tokenizer, satchel_protocol::config::Tokenizer::Estimate);
    }

    #[test]
    fn sources_name_the_layer_each_key_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("ws"));
        std::fs::create_dir_all(layout.root()).unwrap();
        let user = dir.path().join("xdg").join("satchel");
        std::fs::create_dir_all(&user).unwrap();
        // The user's file is the lower layer: the workspace's wins where both set a key.
        std::fs::write(
            user.join("config.json"),
            r#"{"pruning_recent_n": 4, "summary_max_tokens": 1800}"#,
        )
        .unwrap();
        std::fs::write(layout.config_file(), r#"{"pruning_recent_n": 5}"#).unwrap();
        let env = [
            ("XDG_CONFIG_HOME", dir.path().join("xdg").to_str().unwrap().to_owned()),
            ("SATCHEL_TOKENIZER", "estimate".to_owned()),
            ("COPAW_MEMORY_COMPACT_KEEP_RECENT", "3".to_owned()),
        ];
        let loaded = load_layers(&layout, env.into_iter().map(|(k, v)| (k.to_owned(), v))).unwrap();
        let c = &loaded.config;
        assert_eq!((c.recent.pruning_recent_n, c.summary.summary_max_tokens), (5, 1800));
        let s = &loaded.sources;
        assert_eq!(s["pruning_recent_n"], Source::File(layout.config_file()));
        assert_eq!(s["summary_max_tokens"], Source::File(user.join("config.json")));
        assert_eq!(s["tokenizer"], Source::Env("SATCHEL_TOKENIZER".into()));
        assert_eq!(
            s["compact_keep_recent_messages"],
            Source::Env("COPAW_MEMORY_COMPACT_KEEP_RECENT".into())
        );
        assert_eq!(s["max_input_length"], Source::Default);
        assert_eq!(s.len(), to_map(&Config::default()).len());
        assert_eq!(
            loaded.files,
            [(user.join("config.json"), true), (layout.config_file(), true)]
        );
    }

    #[test]
    fn the_user_file_is_under_xdg_config_home_else_home() {
        let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        assert_eq!(
            user_config_file(&env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/satchel/config.json"))
        );
        // A relative XDG_CONFIG_HOME is ignored, as the specification says.
        assert_eq!(
            user_config_file(&env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.config/satchel/config.json"))
        );
        assert_eq!(user_config_file(&env(&[])), None);
    }

    #[test]
    fn list_variables_take_commas_or_json_and_text_variables_take_text() {
        let c = load_with(
            None,
            &[
                ("SATCHEL_MARKDOWN_TOOL_NAMES", "read_skill, load_skill,"),
                ("SATCHEL_READ_FILE_TOOL_NAMES", r#"["cat", "view"]"#),
                ("SATCHEL_MEMORY_EXTRA_PATHS", ""),
                ("SATCHEL_LLM_MODEL", "4"),
                ("SATCHEL_EMBEDDING_MODEL_NAME", r#""quoted""#),
            ],
        )
        .unwrap();
        assert_eq!(c.render.markdown_tool_names, ["read_skill", "load_skill"]);
        assert_eq!(c.render.read_file_tool_names, ["cat", "view"]);
        assert!(c.daemon.memory_index.memory_extra_paths.is_empty());
        assert_eq!(
            (
                c.summary.llm_model.as_str(),
                c.daemon.embedding.embedding_model_name.as_str()
            ),
            ("4", "quoted")
        );
        // A broken JSON array is still an error naming the key.
        let ConfigError { key: field, .. } =
            load_with(None, &[("SATCHEL_MARKDOWN_TOOL_NAMES", r#"["a", "#)]).unwrap_err();
        assert_eq!(field, "markdown_tool_names");
    }

    #[test]
    fn unknown_satchel_variables_are_named_with_the_closest_key() {
        let mut config = Config::default();
        config.daemon.llm.llm_api_key_env = "SATCHEL_MY_KEY".into();
        let env = [
            "SATCHEL_PRUNING_RECENT",
            "SATCHEL_MAX_INPUT_LENGHT",
            "SATCHEL_ZZZ",
            "SATCHEL_HOME",
            "SATCHEL_LOG",
            "SATCHEL_FAILPOINTS",
            "SATCHEL_BIN",
            "SATCHEL_MY_KEY",
            "SATCHEL_TOKENIZER",
            "OTHER",
        ];
        let warnings = unknown_variables(env.into_iter(), &config);
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        assert!(
            warnings[0].contains("SATCHEL_MAX_INPUT_LENGHT")
                && warnings[0].ends_with("did you mean SATCHEL_MAX_INPUT_LENGTH?")
        );
        assert!(
            warnings[1].contains("SATCHEL_PRUNING_RECENT:")
                && warnings[1].ends_with("did you mean SATCHEL_PRUNING_RECENT_N?")
        );
        assert!(
            warnings[2].contains("SATCHEL_ZZZ") && !warnings[2].contains("did you mean"),
            "{}",
            warnings[2]
        );
    }

    #[test]
    fn overrides_are_validated_and_errors_name_the_key() {
        let base = Config::default();
        let ok = apply_overrides(&base, json!({"pruning_old_msg_max_bytes": 500}).as_object().unwrap()).unwrap();
        assert_eq!(ok.render.pruning_old_msg_max_bytes, 500);
        let ConfigError { key, .. } =
            apply_overrides(&base, json!({"pruning_old": 1}).as_object().unwrap()).unwrap_err();
        assert_eq!(key, "pruning_old");
        let ConfigError { key, .. } =
            apply_overrides(&base, json!({"pruning_recent_n": "x"}).as_object().unwrap()).unwrap_err();
        assert_eq!(key, "pruning_recent_n");
        let ConfigError { key, .. } =
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
            ("memory_index_enabled", json!(false)),
            ("fts_enabled", json!(false)),
            ("memory_store_backend", json!("sqlite")),
            ("memory_extra_paths", json!(["/etc"])),
            ("memory_watch_enabled", json!(false)),
            ("memory_watch_debounce_ms", json!(100)),
            ("memory_watch_poll_ms", json!(0)),
            ("memory_max_results", json!(3)),
            ("memory_min_score", json!(0.2)),
            ("memory_vector_weight", json!(0.7)),
            ("memory_candidate_multiplier", json!(2.0)),
            ("memory_merge_enabled", json!(false)),
            ("memory_merge_time", json!("03:00")),
            ("memory_merge_days", json!(2)),
            ("embedding_backend", json!("openai")),
            ("embedding_base_url", json!("http://attacker.example/v1")),
            ("embedding_api_key_env", json!("HOME")),
            ("embedding_model_name", json!("other")),
            ("embedding_dimensions", json!(8)),
            ("embedding_cache_enabled", json!(false)),
            ("embedding_max_cache_size", json!(1)),
            ("embedding_max_input_length", json!(100)),
            ("embedding_max_batch_size", json!(1)),
            ("embedding_timeout_secs", json!(1)),
            ("embedding_model_path", json!("/tmp/model")),
            ("proxy_listen", json!("0.0.0.0:80")),
            ("proxy_upstream_anthropic", json!("http://attacker.example")),
            ("proxy_upstream_openai", json!("http://attacker.example")),
            ("proxy_token", json!("")),
        ];
        assert_eq!(values.len(), DaemonConfig::keys().len());
        for (key, value) in values {
            assert!(DaemonConfig::has_key(key), "{key}");
            let overrides = json!({"pruning_recent_n": 3, key: value});
            let ConfigError {
                key: field,
                reason: why,
            } = apply_overrides(&base, overrides.as_object().unwrap()).unwrap_err();
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
        let same = json!({"llm_base_url": base.daemon.llm.llm_base_url, "llm_extra_headers": {}});
        let ConfigError { key: field, .. } = apply_overrides(&base, same.as_object().unwrap()).unwrap_err();
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
        assert_eq!(c.daemon.llm.llm_base_url, "http://127.0.0.1:9/v1");
        assert_eq!(c.daemon.llm.llm_api_key_env, "MY_KEY");
        assert_eq!(c.daemon.llm.llm_extra_headers.len(), 2);
        assert_eq!(c.daemon.llm.llm_extra_headers["X-Org"], "org-2");
        assert_eq!(
            (
                c.daemon.sessions.dialog_path.as_str(),
                c.daemon.sessions.max_live_sessions
            ),
            ("archive", 8)
        );
        assert_eq!(c.daemon.sessions.session_idle_secs, 90.0);
        // A request still tunes everything else on top of them.
        let tuned = apply_overrides(
            &c,
            json!({"llm_model": "other", "summarizer": "openai"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (tuned.summary.llm_model.as_str(), tuned.daemon.llm.llm_base_url.as_str()),
            ("other", "http://127.0.0.1:9/v1")
        );
    }

    /// `load` of a workspace whose config.json is `file` (when given), with `env`.
    fn load_with(file: Option<Value>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        if let Some(file) = file {
            std::fs::write(layout.config_file(), file.to_string()).unwrap();
        }
        load(&layout, env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
    }

    #[test]
    fn the_file_accepts_copaw_and_qwenpaw_names() {
        let c = load_with(
            Some(
                json!({"agents": {"running": {"max_input_length": 64000, "memory_compact_ratio": 0.7,
                "tool_result_compact_keep_n": 3}}}),
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                c.window.max_input_length,
                c.compaction.compact_threshold_ratio,
                c.recent.pruning_recent_n
            ),
            (64_000, 0.7, 3)
        );
        let c = load_with(
            Some(json!({"running": {"light_context_config": {"dialog_path": "archive",
                "tool_result_pruning_config": {"offload_retention_days": 2}}}})),
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                c.daemon.sessions.dialog_path.as_str(),
                c.retention.offload_retention_days
            ),
            ("archive", 2.0)
        );
    }

    #[test]
    fn a_conflict_in_the_file_names_the_file_and_both_names() {
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(
            Some(json!({"memory_compact_ratio": 0.7, "compact_threshold_ratio": 0.8})),
            &[],
        )
        .unwrap_err();
        assert!(field.ends_with("config.json"), "{field}");
        assert_eq!(
            why,
            "`memory_compact_ratio` (0.7) and `compact_threshold_ratio` (0.8) both set compact_threshold_ratio"
        );
        // The same value twice is fine.
        let c = load_with(
            Some(json!({"memory_compact_ratio": 0.7, "compact_threshold_ratio": 0.7})),
            &[],
        )
        .unwrap();
        assert_eq!(c.compaction.compact_threshold_ratio, 0.7);
    }

    #[test]
    fn a_bad_value_through_an_alias_names_the_alias() {
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(Some(json!({"agents": {"running": {"memory_compact_ratio": 1.5}}})), &[]).unwrap_err();
        assert_eq!(field, "agents.running.memory_compact_ratio");
        assert!(
            why.contains("(0, 1]") && why.contains("sets compact_threshold_ratio"),
            "{why}"
        );
        let ConfigError { key: field, .. } =
            load_with(Some(json!({"enable_tool_result_compact": "yes"})), &[]).unwrap_err();
        assert_eq!(field, "enable_tool_result_compact");
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(None, &[("COPAW_MEMORY_COMPACT_KEEP_RECENT", "lots")]).unwrap_err();
        assert_eq!(field, "COPAW_MEMORY_COMPACT_KEEP_RECENT");
        assert!(why.contains("sets compact_keep_recent_messages"), "{why}");
    }

    #[test]
    fn the_environment_overrides_an_alias_in_the_file_without_conflict() {
        let file = json!({"running": {"memory_compact_ratio": 0.7}});
        let c = load_with(Some(file.clone()), &[("SATCHEL_COMPACT_THRESHOLD_RATIO", "0.6")]).unwrap();
        assert_eq!(c.compaction.compact_threshold_ratio, 0.6);
        let c = load_with(Some(file), &[("COPAW_MEMORY_COMPACT_RATIO", "0.65")]).unwrap();
        assert_eq!(c.compaction.compact_threshold_ratio, 0.65);
    }

    #[test]
    fn copaw_variables_set_their_keys() {
        let c = load_with(
            None,
            &[
                ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
                ("COPAW_MEMORY_COMPACT_KEEP_RECENT", "3"),
            ],
        )
        .unwrap();
        assert_eq!(
            (
                c.compaction.compact_threshold_ratio,
                c.compaction.compact_keep_recent_messages
            ),
            (0.7, 3)
        );
        // The SATCHEL_ variable of the key is also read.
        let c = load_with(None, &[("SATCHEL_COMPACT_KEEP_RECENT_MESSAGES", "4")]).unwrap();
        assert_eq!(c.compaction.compact_keep_recent_messages, 4);
    }

    #[test]
    fn the_absolute_threshold_is_a_ratio_of_the_settled_window() {
        // CoPaw's default, against the default window.
        let c = load_with(None, &[("COPAW_MEMORY_COMPACT_THRESHOLD", "100000")]).unwrap();
        assert_eq!(c.compact_threshold_tokens(), 100_000);
        // The window is the file's, then the environment's, whatever the order of the variables.
        let c = load_with(
            Some(json!({"max_input_length": 32768})),
            &[
                ("COPAW_MEMORY_COMPACT_THRESHOLD", "20000"),
                ("SATCHEL_MAX_INPUT_LENGTH", "50000"),
            ],
        )
        .unwrap();
        assert_eq!(
            (c.compaction.compact_threshold_ratio, c.compact_threshold_tokens()),
            (0.4, 20_000)
        );
        // Less the room kept for the answer: the trigger is still at the tokens given.
        let c = load_with(
            Some(json!({"agents": {"running": {"max_input_length": 100000}}, "max_output_tokens": 3000})),
            &[("COPAW_MEMORY_COMPACT_THRESHOLD", "70001")],
        )
        .unwrap();
        assert_eq!(c.compact_threshold_tokens(), 70_001);
        // It overrides a ratio in the file (a later layer), and the whole window is a ratio of 1.
        let c = load_with(
            Some(json!({"memory_compact_ratio": 0.5})),
            &[("COPAW_MEMORY_COMPACT_THRESHOLD", "131072")],
        )
        .unwrap();
        assert_eq!(c.compaction.compact_threshold_ratio, 1.0);
    }

    #[test]
    fn every_threshold_gives_its_tokens_back() {
        for window in [1024u64, 4096, 100_000, 128_000, 131_072, 199_999, 1_000_000] {
            for tokens in (1..=window)
                .step_by((window / 997) as usize)
                .chain([window - 1, window])
            {
                let ratio = threshold_ratio(tokens, window).unwrap();
                assert!(ratio > 0.0 && ratio <= 1.0);
                assert_eq!((window as f64 * ratio) as u64, tokens, "{tokens} of {window}");
            }
            assert_eq!(threshold_ratio(0, window), None);
            assert_eq!(threshold_ratio(window + 1, window), None);
        }
    }

    #[test]
    fn an_absolute_threshold_outside_the_window_is_refused() {
        for bad in ["0", "200000", "-5", "0.5", "lots"] {
            let ConfigError {
                key: field,
                reason: why,
            } = load_with(None, &[("COPAW_MEMORY_COMPACT_THRESHOLD", bad)]).unwrap_err();
            assert_eq!(field, "COPAW_MEMORY_COMPACT_THRESHOLD", "{bad}: {why}");
        }
        let ConfigError { reason: why, .. } = load_with(
            Some(json!({"max_input_length": 32768})),
            &[("COPAW_MEMORY_COMPACT_THRESHOLD", "100000")],
        )
        .unwrap_err();
        assert!(why.contains("32768-token") && why.contains("(0, 1]"), "{why}");
        // At or below the reserve: the rule the ratio breaks names the reserve, as validation does.
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(None, &[("COPAW_MEMORY_COMPACT_THRESHOLD", "1000")]).unwrap_err();
        assert_eq!(field, "reserve_threshold_ratio", "{why}");
    }

    #[test]
    fn copaw_and_satchel_variables_that_disagree_are_a_conflict() {
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(
            None,
            &[
                ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
                ("SATCHEL_COMPACT_THRESHOLD_RATIO", "0.8"),
            ],
        )
        .unwrap_err();
        assert_eq!(field, "COPAW_MEMORY_COMPACT_RATIO");
        assert_eq!(
            why,
            "`SATCHEL_COMPACT_THRESHOLD_RATIO` (0.8) and `COPAW_MEMORY_COMPACT_RATIO` (0.7) both set compact_threshold_ratio"
        );
        let ConfigError { reason: why, .. } = load_with(
            None,
            &[
                ("COPAW_MEMORY_COMPACT_KEEP_RECENT", "3"),
                ("SATCHEL_COMPACT_KEEP_RECENT_MESSAGES", "5"),
            ],
        )
        .unwrap_err();
        assert!(why.ends_with("both set compact_keep_recent_messages"), "{why}");
        // The threshold against satchel's own ratio variable.
        let ConfigError {
            key: field,
            reason: why,
        } = load_with(
            None,
            &[
                ("COPAW_MEMORY_COMPACT_THRESHOLD", "100000"),
                ("SATCHEL_COMPACT_THRESHOLD_RATIO", "0.7"),
            ],
        )
        .unwrap_err();
        assert_eq!(field, "COPAW_MEMORY_COMPACT_THRESHOLD");
        assert!(
            why.starts_with(
                "`SATCHEL_COMPACT_THRESHOLD_RATIO` (0.7) and `COPAW_MEMORY_COMPACT_THRESHOLD` (100000) both set"
            ),
            "{why}"
        );
        // Agreeing values are fine.
        let c = load_with(
            None,
            &[
                ("COPAW_MEMORY_COMPACT_RATIO", "0.75"),
                ("SATCHEL_COMPACT_THRESHOLD_RATIO", "0.75"),
                ("COPAW_MEMORY_COMPACT_THRESHOLD", "98304"),
            ],
        )
        .unwrap();
        assert_eq!(c.compact_threshold_tokens(), 98_304);
    }

    /// CoPaw documents `COPAW_MEMORY_COMPACT_THRESHOLD` (100000) and `COPAW_MEMORY_COMPACT_RATIO`
    /// (0.7) side by side, so its users set both: each is honoured, compaction triggering at
    /// whichever is reached first, and the log says which.
    #[test]
    fn copaws_threshold_and_ratio_together_trigger_at_the_first_reached() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let loaded =
            |env: &[(&str, &str)]| load_layers(&layout, env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        // The defaults, on the default window (131072 tokens): 0.7 is 91750 tokens.
        let both = [
            ("COPAW_MEMORY_COMPACT_THRESHOLD", "100000"),
            ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
        ];
        let l = loaded(&both).unwrap();
        assert_eq!(l.config.compaction.compact_threshold_ratio, 0.7);
        assert_eq!(
            l.sources["compact_threshold_ratio"],
            Source::Env("COPAW_MEMORY_COMPACT_RATIO".into())
        );
        assert_eq!(l.notes.len(), 1, "{:?}", l.notes);
        assert!(
            l.notes[0].contains("whichever is reached first, here the ratio"),
            "{:?}",
            l.notes
        );
        assert!(l.warnings.is_empty());
        // A lower threshold is reached first.
        let l = loaded(&[
            ("COPAW_MEMORY_COMPACT_THRESHOLD", "61440"),
            ("COPAW_MEMORY_COMPACT_RATIO", "0.7"),
        ])
        .unwrap();
        assert_eq!(l.config.compact_threshold_tokens(), 61_440);
        assert_eq!(
            l.sources["compact_threshold_ratio"],
            Source::Env("COPAW_MEMORY_COMPACT_THRESHOLD".into())
        );
        assert!(l.notes[0].contains("here the threshold"), "{:?}", l.notes);
        // A bad ratio is still named.
        let ConfigError { key: field, .. } = loaded(&[
            ("COPAW_MEMORY_COMPACT_THRESHOLD", "100000"),
            ("COPAW_MEMORY_COMPACT_RATIO", "1.5"),
        ])
        .unwrap_err();
        assert_eq!(field, "COPAW_MEMORY_COMPACT_RATIO");
        // Agreeing values need no note.
        let l = loaded(&[
            ("COPAW_MEMORY_COMPACT_THRESHOLD", "98304"),
            ("COPAW_MEMORY_COMPACT_RATIO", "0.75"),
        ])
        .unwrap();
        assert!(l.notes.is_empty(), "{:?}", l.notes);
    }

    /// The user's file is optional: one that cannot be read is skipped with a warning (the
    /// daemon refused to start when `$HOME` could not be searched). The workspace's is not.
    #[test]
    fn a_user_file_that_cannot_be_read_is_skipped_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("ws"));
        std::fs::create_dir_all(layout.root()).unwrap();
        // A HOME that is a file: its `.config` cannot be searched, even by root.
        let home = dir.path().join("home-file");
        std::fs::write(&home, "not a directory").unwrap();
        std::fs::write(layout.config_file(), r#"{"pruning_recent_n": 5}"#).unwrap();
        let env = [("HOME".to_owned(), home.to_str().unwrap().to_owned())];
        let loaded = load_layers(&layout, env.clone().into_iter()).unwrap();
        assert_eq!(loaded.config.recent.pruning_recent_n, 5);
        let user = home.join(".config/satchel/config.json");
        assert_eq!(loaded.files, [(user.clone(), false), (layout.config_file(), true)]);
        assert_eq!(loaded.warnings.len(), 1);
        assert!(
            loaded.warnings[0].starts_with(&format!("skipping the user configuration {}", user.display())),
            "{:?}",
            loaded.warnings
        );
        // The workspace's own file that cannot be read stops the daemon.
        std::fs::remove_file(layout.config_file()).unwrap();
        std::fs::create_dir(layout.config_file()).unwrap();
        let ConfigError { key: field, .. } = load_layers(&layout, env.into_iter()).unwrap_err();
        assert_eq!(field, layout.config_file().display().to_string());
    }

    #[test]
    fn a_request_may_use_the_specs_names() {
        let base = Config::default();
        let c = apply_overrides(
            &base,
            json!({"memory_compact_ratio": 0.6, "tool_result_compact_keep_n": 4,
                   "running": {"light_context_config": {"context_compact_config": {"enabled": false}}}})
            .as_object()
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (
                c.compaction.compact_threshold_ratio,
                c.recent.pruning_recent_n,
                c.compaction.compact_enabled
            ),
            (0.6, 4, false)
        );
        let ConfigError {
            key: field,
            reason: why,
        } = apply_overrides(
            &base,
            json!({"memory_reserve_ratio": 0.1, "reserve_threshold_ratio": 0.2})
                .as_object()
                .unwrap(),
        )
        .unwrap_err();
        assert_eq!(field, "reserve_threshold_ratio");
        assert!(why.contains("`memory_reserve_ratio` (0.1)"), "{why}");
        // A bad value is named as written.
        let ConfigError {
            key: field,
            reason: why,
        } = apply_overrides(&base, json!({"memory_reserve_ratio": 0.95}).as_object().unwrap()).unwrap_err();
        assert_eq!(field, "memory_reserve_ratio");
        assert!(why.contains("sets reserve_threshold_ratio"), "{why}");
    }

    #[test]
    fn a_daemon_only_key_is_refused_through_an_alias() {
        let base = Config::default();
        for request in [
            json!({"light_context_config": {"dialog_path": "elsewhere"}}),
            json!({"running": {"light_context_config": {"dialog_path": "elsewhere"}}}),
            json!({"agents": {"running": {"light_context_config": {"dialog_path": base.daemon.sessions.dialog_path}}}}),
        ] {
            let ConfigError {
                key: field,
                reason: why,
            } = apply_overrides(&base, request.as_object().unwrap()).unwrap_err();
            assert!(field.ends_with("light_context_config.dialog_path"), "{field}");
            assert!(
                why.starts_with(&format!("`{field}` sets dialog_path, which can only be set"))
                    && why.contains("SATCHEL_DIALOG_PATH"),
                "{why}"
            );
        }
    }
}
