//! `satchel config`: every configuration key with its current value, its default, where the
//! value came from (default, a file or the environment), its `SATCHEL_` variable and what it
//! means (the doc comment of the key, through the JSON schema of [`Config`]). `--json` prints
//! the same as one JSON document.
//!
//! It reads the layers the daemon would read for the workspace ([`config::load_layers`]) and
//! starts nothing. Values are shown as `initialize` shows them ([`Config::for_clients`]): header
//! values redacted, credentials taken out of URLs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use satchel_protocol::{Config, DaemonConfig};
use satchel_storage::Layout;
use serde_json::{Map, Value, json};

use crate::config::{self, Source};

/// Arguments of `satchel config`.
#[derive(clap::Args)]
pub struct ConfigArgs {
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

/// The widest a value or default column grows; longer values overflow their row.
const MAX_VALUE_COLUMN: usize = 24;

/// One key as shown.
struct Row {
    key: String,
    value: Value,
    default: Value,
    source: Source,
    variable: String,
    description: String,
}

/// Runs `satchel config` for `workspace`, warning about unknown `SATCHEL_` variables.
pub fn run(args: &ConfigArgs, workspace: &Path) -> anyhow::Result<()> {
    let layout = Layout::new(workspace);
    let loaded = config::load_layers(&layout, std::env::vars()).map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    for note in &loaded.notes {
        tracing::info!("configuration: {note}");
    }
    for warning in config::unknown_variables(
        std::env::vars()
            .map(|(var, _)| var)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
        &loaded.config,
    ) {
        tracing::warn!("{warning}");
    }
    let rows = rows(&loaded);
    let mut out = std::io::stdout().lock();
    if args.json {
        let document = json!({
            "workspace": workspace,
            "files": loaded.files.iter().map(|(path, found)| json!({"path": path, "found": found})).collect::<Vec<_>>(),
            "keys": rows.iter().map(row_json).collect::<Vec<_>>(),
            "derived": derived(&loaded.config).iter().map(|(name, tokens, rule)| json!({"name": name, "tokens": tokens, "rule": rule})).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        write_table(&mut out, workspace, &loaded.files, &rows)?;
        writeln!(out, "\nderived, in tokens, at this configuration:")?;
        for (name, tokens, rule) in derived(&loaded.config) {
            writeln!(out, "  {name:<18} {tokens:>8}  {rule}")?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The token numbers the keys decide together: what a request must fit, when it is made
/// smaller, and what a compaction keeps and writes.
fn derived(config: &Config) -> [(&'static str, u64, &'static str); 4] {
    [
        (
            "window",
            config.effective_window(),
            "max_input_length less max_output_tokens",
        ),
        (
            "compaction at",
            config.compact_threshold_tokens(),
            "the window times compact_threshold_ratio (prune_trigger_ratio in aceclaw mode)",
        ),
        (
            "recent reserve",
            config.reserve_tokens(),
            "the window times reserve_threshold_ratio",
        ),
        (
            "summary budget",
            config.summary_budget_tokens(),
            "the window times summary_window_share, at least 2500, at most a quarter of the window and summary_max_tokens (when not 0)",
        ),
    ]
}

/// The rows of every key, in the declaration order of [`Config`].
fn rows(loaded: &config::Loaded) -> Vec<Row> {
    let current = as_map(&loaded.config.for_clients());
    let defaults = as_map(&Config::default().for_clients());
    let descriptions = descriptions();
    current
        .into_iter()
        .map(|(key, value)| Row {
            default: defaults.get(&key).cloned().unwrap_or(Value::Null),
            source: loaded.sources.get(&key).cloned().unwrap_or(Source::Default),
            variable: config::env_var_of(&key),
            description: descriptions.get(&key).cloned().unwrap_or_default(),
            value,
            key,
        })
        .collect()
}

fn as_map(config: &Config) -> Map<String, Value> {
    match serde_json::to_value(config) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// Key → its description in the JSON schema of [`Config`], on one line.
fn descriptions() -> BTreeMap<String, String> {
    let schema = schemars::schema_for!(Config);
    let Some(properties) = schema.as_value().get("properties").and_then(Value::as_object) else {
        return BTreeMap::new();
    };
    properties
        .iter()
        .filter_map(|(key, property)| {
            let text = property.get("description")?.as_str()?;
            Some((key.clone(), text.split_whitespace().collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

impl Row {
    fn source_label(&self) -> &'static str {
        match self.source {
            Source::Default => "default",
            Source::File(_) => "file",
            Source::Env(_) => "env",
        }
    }
}

fn row_json(row: &Row) -> Value {
    let mut object = json!({
        "key": row.key,
        "value": row.value,
        "default": row.default,
        "source": row.source_label(),
        "variable": row.variable,
        "daemon_only": DaemonConfig::has_key(&row.key),
        "description": row.description,
    });
    match &row.source {
        Source::File(path) => object["file"] = json!(path),
        Source::Env(var) if *var != row.variable => object["set_by"] = json!(var),
        _ => {}
    }
    object
}

/// A value as the table shows it: text as it is (`""` when empty), anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) if text.is_empty() => "\"\"".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The table: one aligned row per key, its description on the next line.
fn write_table(
    out: &mut impl Write,
    workspace: &Path,
    files: &[(std::path::PathBuf, bool)],
    rows: &[Row],
) -> std::io::Result<()> {
    writeln!(out, "satchel configuration for workspace {}", workspace.display())?;
    writeln!(out, "layers, later wins: defaults")?;
    for (path, found) in files {
        writeln!(
            out,
            "  then {}{}",
            path.display(),
            if *found { "" } else { " (not found)" }
        )?;
    }
    writeln!(
        out,
        "  then SATCHEL_<KEY> variables, then a request's `config` (not the daemon-only keys)"
    )?;
    writeln!(out)?;
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            let source = match &row.source {
                Source::Env(var) if *var != row.variable => format!("env {var}"),
                _ => row.source_label().to_owned(),
            };
            [
                row.key.clone(),
                shown(&row.value),
                shown(&row.default),
                source,
                row.variable.clone(),
            ]
        })
        .collect();
    let header = ["KEY", "VALUE", "DEFAULT", "SOURCE", "VARIABLE"].map(str::to_owned);
    let mut widths = header.each_ref().map(String::len);
    for row in &cells {
        for (column, cell) in row.iter().enumerate() {
            let cap = if matches!(column, 1 | 2) {
                MAX_VALUE_COLUMN
            } else {
                usize::MAX
            };
            widths[column] = widths[column].max(cell.chars().count().min(cap));
        }
    }
    let line = |out: &mut dyn Write, cells: &[String; 5]| -> std::io::Result<()> {
        let mut text = String::new();
        for (column, cell) in cells.iter().enumerate() {
            if column + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let pad = widths[column].saturating_sub(cell.chars().count());
                text.push_str(cell);
                text.push_str(&" ".repeat(pad + 2));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, &header)?;
    for (row, cells) in rows.iter().zip(&cells) {
        line(out, cells)?;
        if !row.description.is_empty() {
            writeln!(out, "    {}", row.description)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_description_and_rows_follow_the_declaration_order() {
        let dir = std::env::temp_dir().join(format!("satchel-config-test-{}", uuid::Uuid::new_v4().simple()));
        let loaded = config::load_layers(&Layout::new(&dir), std::iter::empty()).unwrap();
        let rows = rows(&loaded);
        assert_eq!(rows.len(), as_map(&Config::default()).len());
        assert_eq!(rows[0].key, "max_input_length");
        for row in &rows {
            assert!(!row.description.is_empty(), "{} has no description", row.key);
            assert!(!row.description.contains('\n'), "{}", row.key);
            assert_eq!(row.source, Source::Default);
        }
        let mut text = Vec::new();
        write_table(&mut text, &dir, &loaded.files, &rows).unwrap();
        let text = String::from_utf8(text).unwrap();
        let row = text.lines().find(|l| l.starts_with("max_input_length ")).unwrap();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            [
                "max_input_length",
                "131072",
                "131072",
                "default",
                "SATCHEL_MAX_INPUT_LENGTH"
            ]
        );
        // Columns are aligned: every row's VARIABLE starts where the header's does.
        let at = text
            .lines()
            .find(|l| l.starts_with("KEY"))
            .unwrap()
            .find("VARIABLE")
            .unwrap();
        assert_eq!(row.find("SATCHEL_"), Some(at));
    }

    #[test]
    fn the_derived_numbers_follow_the_window() {
        let at = |max_input_length: u64| {
            let mut config = Config::default();
            config.window.max_input_length = max_input_length;
            derived(&config).map(|(_, tokens, _)| tokens)
        };
        // window, compaction at (0.8), reserve (0.1), summary budget (0.08, floor 2500).
        assert_eq!(at(131_072), [131_072, 104_857, 13_107, 10_485]);
        assert_eq!(at(16_384), [16_384, 13_107, 1_638, 2_500]);
    }
}
