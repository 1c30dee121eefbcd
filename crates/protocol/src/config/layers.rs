//! Layering of the configuration, as pure functions over the layers' JSON and variables:
//! defaults → `$XDG_CONFIG_HOME/satchel/config.json` (the user's file;
//! `~/.config/satchel/config.json` when `XDG_CONFIG_HOME` is unset) → `<workspace>/config.json`
//! → `SATCHEL_<KEY>` environment variables → per-request overrides.
//!
//! Layers are merged as JSON objects and deserialised once, so every layer gets the same
//! validation and errors name the offending key. [`load_layers`] (given a function that reads
//! a file) also says where each key's value came from (`satchel config` shows it). The user's
//! file is optional: one that cannot be read is skipped with a warning.
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
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{Config, ConfigError, DaemonConfig};
use crate::aliases::{self, ENV_ALIASES, EnvUnit, same_value};

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
///
/// `workspace_file` is `<workspace>/config.json`; `read` reads a file (the daemon passes
/// `std::fs::read_to_string`: this crate does no I/O of its own).
pub fn load_layers(
    workspace_file: PathBuf,
    env: impl Iterator<Item = (String, String)>,
    read: impl Fn(&Path) -> io::Result<String>,
) -> Result<Loaded, ConfigError> {
    let env: HashMap<String, String> = env.collect();
    let mut merged = to_map(&Config::default());
    let mut sources: BTreeMap<String, Source> = merged.keys().map(|key| (key.clone(), Source::Default)).collect();
    let mut written_as = WrittenAs::new();
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let user_file = user_config_file(&env).map(|path| (path, true));
    for (path, optional) in user_file.into_iter().chain([(workspace_file, false)]) {
        let found = match read_file_layer(&path, &read, &mut merged, &mut written_as, &mut sources) {
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
    read: impl Fn(&Path) -> io::Result<String>,
    merged: &mut Map<String, Value>,
    written_as: &mut WrittenAs,
    sources: &mut BTreeMap<String, Source>,
) -> Result<bool, FileError> {
    let text = match read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
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

/// A warning for each `SATCHEL_` variable of `env` that satchel does not read: not a key's
/// variable, not one of the `other` variables the daemon and its tools read, and not the variable `config` names for an
/// API key (`llm_api_key_env`, `embedding_api_key_env`). Each names the closest key, if one is
/// close. Sorted by variable.
pub fn unknown_variables<'a>(env: impl Iterator<Item = &'a str>, config: &Config, other: &[&str]) -> Vec<String> {
    let keys: Vec<String> = to_map(&Config::default()).keys().cloned().collect();
    let mut unknown: Vec<&str> = env
        .filter(|var| var.starts_with("SATCHEL_"))
        .filter(|var| !other.contains(var))
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
}
