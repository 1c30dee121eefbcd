//! The spec's other names for satchel's configuration keys, and their resolution to the flat
//! [`Config`](crate::Config) keys.
//!
//! CoPaw keeps its context settings flat under `agents.running` (`memory_compact_ratio`, …);
//! QwenPaw nests them under `running.light_context_config` (`context_compact_config.enabled`,
//! …); CoPaw's daemon also reads `COPAW_MEMORY_COMPACT_*` and its memory variables (`FTS_ENABLED`, `EMBEDDING_*`, …). A
//! configuration written for either is accepted as it is: [`resolve`] turns one layer (the
//! workspace `config.json`, or a request's `config`) into flat keys, and [`ENV_ALIASES`] lists
//! the variables, which the daemon reads (this crate does no I/O).
//!
//! One table, [`FILE_ALIASES`], is both what [`resolve`] follows and what the README lists
//! ([`markdown`] renders it; a test keeps the README's copy in step), so the documented names
//! are exactly the accepted ones.
//!
//! Rules, each with its reason:
//! - The spec's fields are accepted at the top level, under `running` or under
//!   `agents.running`: CoPaw documents `agents.running`, QwenPaw's tables say `running`, and a
//!   flat file is what satchel documents.
//! - Inside `agents`, `running` and the `light_context_config` tree only the spec's fields are
//!   accepted; anything else is an error naming where it is. satchel rejects unknown flat keys
//!   so that a typo is an error, and a nested typo deserves the same.
//! - Two names that set one key with different values (an alias and the flat key, or two
//!   aliases) are an error naming both: which one was meant cannot be guessed. The same value
//!   twice is fine (a file that spells a setting both ways agrees with itself).
//! - A field that selects something satchel does not implement is an error that says so, never
//!   silently ignored: `context_manager_backend` is satchel's `context_mode` (only `light`, which
//!   is satchel's `qwenpaw` mode), and `memory_manager_backend` is accepted only as the
//!   `remelight` satchel implements.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

/// What a spec field sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The flat key of that name, with the value as given.
    Key(&'static str),
    /// A backend choice: only `accepts` is valid, and it sets `key` to `value`.
    Choice {
        /// The only value satchel implements.
        accepts: &'static str,
        /// The flat key it sets.
        key: &'static str,
        /// The value it sets that key to.
        value: &'static str,
        /// Why another value is refused.
        otherwise: &'static str,
    },
    /// A description of what satchel is: accepted when it says `accepts`, setting nothing.
    Describes {
        /// The only value that describes satchel.
        accepts: &'static str,
        /// Why another value is refused.
        otherwise: &'static str,
    },
}

impl Target {
    /// The flat key set, if any.
    pub fn key(&self) -> Option<&'static str> {
        match *self {
            Target::Key(key) | Target::Choice { key, .. } => Some(key),
            Target::Describes { .. } => None,
        }
    }
}

/// A spec field of the configuration file: where it is and what it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAlias {
    /// Dotted path from a `running` object (which may also be the top level of the file).
    pub path: &'static str,
    /// What it sets.
    pub target: Target,
    /// Which system names it so, and anything that differs from satchel's key.
    pub origin: &'static str,
}

/// Every field of the spec's configuration tables (CoPaw `agents.running`, QwenPaw `running`
/// and its `light_context_config` tree), with what it sets in satchel.
pub const FILE_ALIASES: &[FileAlias] = &[
    FileAlias {
        path: "max_input_length",
        target: Target::Key("max_input_length"),
        origin: "CoPaw, QwenPaw",
    },
    FileAlias {
        path: "memory_compact_ratio",
        target: Target::Key("compact_threshold_ratio"),
        origin: "CoPaw",
    },
    FileAlias {
        path: "memory_reserve_ratio",
        target: Target::Key("reserve_threshold_ratio"),
        origin: "CoPaw",
    },
    FileAlias {
        path: "enable_tool_result_compact",
        target: Target::Key("pruning_enabled"),
        origin: "CoPaw (its default is false, satchel's true)",
    },
    FileAlias {
        path: "tool_result_compact_keep_n",
        target: Target::Key("pruning_recent_n"),
        origin: "CoPaw (it counts tool results; satchel counts the newest messages, widened to a trailing run of tool results)",
    },
    FileAlias {
        path: "context_manager_backend",
        target: Target::Choice {
            accepts: "light",
            key: "context_mode",
            value: "qwenpaw",
            otherwise: "satchel implements only the `light` context manager (its `qwenpaw` context_mode); \
                        for AceClaw's pipeline set `context_mode` to `aceclaw`",
        },
        origin: "QwenPaw: `light` is satchel's `context_mode` `qwenpaw`",
    },
    FileAlias {
        path: "memory_manager_backend",
        target: Target::Describes {
            accepts: "remelight",
            otherwise: "satchel's memory is ReMe-Light's (MEMORY.md and memory/YYYY-MM-DD.md, indexed and searched, \
                        `memory_enabled`); it has no other memory manager",
        },
        origin: "QwenPaw: descriptive, only `remelight` (what satchel implements) is accepted",
    },
    FileAlias {
        path: "light_context_config.dialog_path",
        target: Target::Key("dialog_path"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.token_count_estimate_divisor",
        target: Target::Key("token_count_estimate_divisor"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.context_compact_config.enabled",
        target: Target::Key("compact_enabled"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.context_compact_config.compact_threshold_ratio",
        target: Target::Key("compact_threshold_ratio"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.context_compact_config.reserve_threshold_ratio",
        target: Target::Key("reserve_threshold_ratio"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.tool_result_pruning_config.enabled",
        target: Target::Key("pruning_enabled"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.tool_result_pruning_config.pruning_recent_n",
        target: Target::Key("pruning_recent_n"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.tool_result_pruning_config.pruning_old_msg_max_bytes",
        target: Target::Key("pruning_old_msg_max_bytes"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.tool_result_pruning_config.pruning_recent_msg_max_bytes",
        target: Target::Key("pruning_recent_msg_max_bytes"),
        origin: "QwenPaw",
    },
    FileAlias {
        path: "light_context_config.tool_result_pruning_config.offload_retention_days",
        target: Target::Key("offload_retention_days"),
        origin: "QwenPaw",
    },
];

/// How an environment variable's value becomes its key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvUnit {
    /// The value as it is (parsed like a `SATCHEL_<KEY>` value).
    Same,
    /// A whole number of tokens, which becomes a ratio of the effective window once the other
    /// layers have set the window.
    TokensOfWindow,
}

/// A CoPaw environment variable: what it sets and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvAlias {
    /// The variable's name.
    pub var: &'static str,
    /// The flat key it sets.
    pub key: &'static str,
    /// How its value becomes the key's.
    pub unit: EnvUnit,
    /// What it means.
    pub note: &'static str,
}

/// CoPaw's compaction and memory variables (`05-copaw-memory-and-compaction`; the API key,
/// `EMBEDDING_API_KEY`, is read where `embedding_api_key_env` says and is never a key of the
/// configuration). They are a layer with the
/// `SATCHEL_<KEY>` variables: over the file, under a request; a `COPAW_` and a `SATCHEL_`
/// variable that set one key differently are an error.
pub const ENV_ALIASES: &[EnvAlias] = &[
    EnvAlias {
        var: "COPAW_MEMORY_COMPACT_THRESHOLD",
        key: "compact_threshold_ratio",
        unit: EnvUnit::TokensOfWindow,
        note: "tokens; becomes the ratio of the effective window (`max_input_length` less `max_output_tokens`) \
               after the file and the other variables, and must give one in (0, 1]; with \
               `COPAW_MEMORY_COMPACT_RATIO` also set (CoPaw documents both), compaction triggers at whichever \
               is reached first",
    },
    EnvAlias {
        var: "COPAW_MEMORY_COMPACT_RATIO",
        key: "compact_threshold_ratio",
        unit: EnvUnit::Same,
        note: "the ratio itself",
    },
    EnvAlias {
        var: "COPAW_MEMORY_COMPACT_KEEP_RECENT",
        key: "compact_keep_recent_messages",
        unit: EnvUnit::Same,
        note: "newest messages a compaction always keeps",
    },
    EnvAlias {
        var: "FTS_ENABLED",
        key: "fts_enabled",
        unit: EnvUnit::Same,
        note: "BM25 full-text search of the memory files (`true`/`false`)",
    },
    EnvAlias {
        var: "MEMORY_STORE_BACKEND",
        key: "memory_store_backend",
        unit: EnvUnit::Same,
        note: "`auto`, `sqlite` or `local` (all the one SQLite index); `chroma` is refused",
    },
    EnvAlias {
        var: "EMBEDDING_BASE_URL",
        key: "embedding_base_url",
        unit: EnvUnit::Same,
        note: "OpenAI-compatible embeddings endpoint",
    },
    EnvAlias {
        var: "EMBEDDING_MODEL_NAME",
        key: "embedding_model_name",
        unit: EnvUnit::Same,
        note: "embedding model name",
    },
    EnvAlias {
        var: "EMBEDDING_DIMENSIONS",
        key: "embedding_dimensions",
        unit: EnvUnit::Same,
        note: "vector dimensions",
    },
    EnvAlias {
        var: "EMBEDDING_CACHE_ENABLED",
        key: "embedding_cache_enabled",
        unit: EnvUnit::Same,
        note: "cache embeddings of texts already seen",
    },
    EnvAlias {
        var: "EMBEDDING_MAX_CACHE_SIZE",
        key: "embedding_max_cache_size",
        unit: EnvUnit::Same,
        note: "texts the embedding cache holds",
    },
    EnvAlias {
        var: "EMBEDDING_MAX_INPUT_LENGTH",
        key: "embedding_max_input_length",
        unit: EnvUnit::Same,
        note: "characters of one text sent to the endpoint",
    },
    EnvAlias {
        var: "EMBEDDING_MAX_BATCH_SIZE",
        key: "embedding_max_batch_size",
        unit: EnvUnit::Same,
        note: "texts per embeddings request",
    },
];

/// The flat keys a layer sets, and which of them were written as an alias.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// Flat key → value, in the order first met. Keys that are neither aliases nor fields of
    /// the nested objects pass through unchanged (the `Config` rejects unknown ones, naming them).
    pub values: Map<String, Value>,
    /// Flat key → the alias it was written as (its full path), for the keys set only through an
    /// alias; errors about the value name what the user wrote.
    pub written_as: BTreeMap<String, String>,
}

/// Why a layer could not be resolved. `Display` is the reason; [`AliasError::name`] the field.
#[derive(Debug, Clone, PartialEq)]
pub enum AliasError {
    /// Two names set one key to different values.
    Conflict {
        /// The flat key.
        key: String,
        /// The first name met and its value (as JSON text).
        first: (String, String),
        /// The second name and its value (as JSON text).
        second: (String, String),
    },
    /// A field where the spec has an object is not one.
    NotAnObject {
        /// Its full path.
        name: String,
    },
    /// A field inside `agents`, `running` or the `light_context_config` tree the spec does not list.
    Unknown {
        /// Its full path.
        name: String,
        /// The fields the spec lists at that place.
        expected: Vec<&'static str>,
    },
    /// A backend field naming something satchel does not implement.
    Unsupported {
        /// Its full path.
        name: String,
        /// The value given (as JSON text).
        value: String,
        /// Why it is refused.
        why: &'static str,
    },
}

impl AliasError {
    /// The field the error is about: the alias as written (for a conflict, the second name).
    pub fn name(&self) -> &str {
        match self {
            AliasError::Conflict { second, .. } => &second.0,
            AliasError::NotAnObject { name }
            | AliasError::Unknown { name, .. }
            | AliasError::Unsupported { name, .. } => name,
        }
    }
}

impl fmt::Display for AliasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AliasError::Conflict { key, first, second } => write!(
                f,
                "`{}` ({}) and `{}` ({}) both set {key}",
                first.0, first.1, second.0, second.1
            ),
            AliasError::NotAnObject { name } => write!(f, "`{name}` must be an object, as in the spec"),
            AliasError::Unknown { name, expected } => write!(
                f,
                "`{name}` is not a configuration field satchel knows; the spec's fields there are: {}",
                expected.join(", ")
            ),
            AliasError::Unsupported { name, value, why } => write!(f, "`{name}` is {value}: {why}"),
        }
    }
}

impl std::error::Error for AliasError {}

/// Whether two values given for one key agree (`5` and `5.0` do).
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

/// Resolves one layer (the workspace `config.json`, or a request's `config`) to flat keys.
///
/// The top level may hold flat keys, the spec's fields (as in a `running` object), `running`
/// and `agents.running`. Errors on a conflict, a field the spec does not list inside the nested
/// objects, and a backend satchel does not implement.
pub fn resolve(layer: &Map<String, Value>) -> Result<Resolved, AliasError> {
    let mut out = Layer::default();
    for (name, value) in layer {
        match name.as_str() {
            "agents" => {
                let agents = object(value, name)?;
                for (field, value) in agents {
                    let path = format!("agents.{field}");
                    match field.as_str() {
                        "running" => walk(object(value, &path)?, "", &path, &mut out)?,
                        "language" => out.set(LANGUAGE_KEY, &path, agents_language(value, &path)?, value)?,
                        _ => {
                            return Err(AliasError::Unknown {
                                name: path,
                                expected: vec!["running", "language"],
                            });
                        }
                    }
                }
            }
            "running" => walk(object(value, name)?, "", name, &mut out)?,
            _ if is_field_or_object(name) => walk_one(name, value, name, &mut out)?,
            // A flat key (or a typo the `Config` will name).
            _ => out.set(name, name, value.clone(), value)?,
        }
    }
    Ok(out.resolved)
}

/// The key CoPaw's `agents.language` sets: the language of its memory and compaction prompts.
const LANGUAGE_KEY: &str = "summary_language";

/// The `summary_language` of CoPaw's `agents.language` at `name`: `zh` for Chinese (`zh`,
/// `zh-CN`, …), `en` for any other language, as CoPaw reads it ("zh = Chinese, otherwise
/// English").
fn agents_language(value: &Value, name: &str) -> Result<Value, AliasError> {
    let code = value.as_str().ok_or_else(|| AliasError::Unsupported {
        name: name.to_owned(),
        value: value.to_string(),
        why: "the agents' language is a language code, such as \"zh\" or \"en\"",
    })?;
    let code = code.trim().to_ascii_lowercase();
    let chinese = code == "zh" || code.starts_with("zh-") || code.starts_with("zh_");
    Ok(Value::String(if chinese { "zh" } else { "en" }.to_owned()))
}

/// The accumulating result of [`resolve`]: every value with the name that set it.
#[derive(Default)]
struct Layer {
    resolved: Resolved,
    /// Flat key → the first name that set it and its value as written, for conflict messages.
    first: BTreeMap<String, (String, String)>,
}

impl Layer {
    /// Sets `key` to `value`, from `name` written as `written` (the value itself, but for a
    /// backend choice).
    fn set(&mut self, key: &str, name: &str, value: Value, written: &Value) -> Result<(), AliasError> {
        let Some(earlier) = self.resolved.values.get(key) else {
            self.resolved.values.insert(key.to_owned(), value);
            self.first
                .insert(key.to_owned(), (name.to_owned(), written.to_string()));
            if name != key {
                self.resolved.written_as.insert(key.to_owned(), name.to_owned());
            }
            return Ok(());
        };
        if !same_value(earlier, &value) {
            return Err(AliasError::Conflict {
                key: key.to_owned(),
                first: self.first[key].clone(),
                second: (name.to_owned(), written.to_string()),
            });
        }
        if name == key {
            // Also written as the flat key: errors about the value name the key itself.
            self.resolved.written_as.remove(key);
        }
        Ok(())
    }
}

/// `value` as an object, or an error naming `name`.
fn object<'v>(value: &'v Value, name: &str) -> Result<&'v Map<String, Value>, AliasError> {
    value
        .as_object()
        .ok_or_else(|| AliasError::NotAnObject { name: name.to_owned() })
}

/// Whether `path` (relative to a `running` object) is a spec field or an object holding some.
fn is_field_or_object(path: &str) -> bool {
    FILE_ALIASES
        .iter()
        .any(|a| a.path == path || a.path.strip_prefix(path).is_some_and(|rest| rest.starts_with('.')))
}

/// Walks the fields of the object at `prefix` (relative to `running`; `""` for `running`
/// itself), written at `written` (its full path in the layer).
fn walk(object: &Map<String, Value>, prefix: &str, written: &str, out: &mut Layer) -> Result<(), AliasError> {
    for (field, value) in object {
        let path = if prefix.is_empty() {
            field.clone()
        } else {
            format!("{prefix}.{field}")
        };
        let name = format!("{written}.{field}");
        if !is_field_or_object(&path) {
            return Err(AliasError::Unknown {
                name,
                expected: fields_under(prefix),
            });
        }
        walk_one(&path, value, &name, out)?;
    }
    Ok(())
}

/// One spec field or nested object at `path` (relative to `running`), written as `name`.
fn walk_one(path: &str, value: &Value, name: &str, out: &mut Layer) -> Result<(), AliasError> {
    let Some(alias) = FILE_ALIASES.iter().find(|a| a.path == path) else {
        return walk(object(value, name)?, path, name, out);
    };
    match alias.target {
        Target::Key(key) => out.set(key, name, value.clone(), value),
        Target::Choice {
            accepts,
            key,
            value: set,
            otherwise,
        } => {
            if value.as_str() != Some(accepts) {
                return Err(AliasError::Unsupported {
                    name: name.to_owned(),
                    value: value.to_string(),
                    why: otherwise,
                });
            }
            out.set(key, name, Value::String(set.to_owned()), value)
        }
        Target::Describes { accepts, otherwise } => {
            if value.as_str() != Some(accepts) {
                return Err(AliasError::Unsupported {
                    name: name.to_owned(),
                    value: value.to_string(),
                    why: otherwise,
                });
            }
            Ok(())
        }
    }
}

/// The spec's field names directly inside the object at `prefix` (`""`: `running`).
fn fields_under(prefix: &str) -> Vec<&'static str> {
    let mut fields: Vec<&'static str> = Vec::new();
    for alias in FILE_ALIASES {
        let rest = match prefix {
            "" => Some(alias.path),
            _ => alias.path.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('.')),
        };
        if let Some(field) = rest.and_then(|rest| rest.split('.').next())
            && !fields.contains(&field)
        {
            fields.push(field);
        }
    }
    fields
}

/// The README's table of the spec's names: every [`FILE_ALIASES`] and [`ENV_ALIASES`] entry.
pub fn markdown() -> String {
    let mut md = String::from(
        "Each file name below is accepted at the top level of `config.json`, under `running` or under\n\
         `agents.running` (where CoPaw and QwenPaw put them), and in a request's `config`.\n\n\
         | spec name | satchel key | from |\n|---|---|---|\n",
    );
    for alias in FILE_ALIASES {
        let key = match alias.target {
            Target::Key(key) => format!("`{key}`"),
            Target::Choice {
                accepts, key, value, ..
            } => format!("`{key}` = `{value}` (only `{accepts}`)"),
            Target::Describes { accepts, .. } => format!("none (only `{accepts}`)"),
        };
        md.push_str(&format!("| `{}` | {key} | {} |\n", alias.path, alias.origin));
    }
    md.push_str(&format!(
        "\nCoPaw's `agents.language` (only there) sets `{LANGUAGE_KEY}`: `zh` for Chinese (`zh`, `zh-CN`, …), \
         `en` for any other language, as CoPaw reads it.\n"
    ));
    md.push_str("\n| environment variable | satchel key | meaning |\n|---|---|---|\n");
    for alias in ENV_ALIASES {
        md.push_str(&format!("| `{}` | `{}` | {} |\n", alias.var, alias.key, alias.note));
    }
    md
}

#[cfg(test)]
mod tests;
