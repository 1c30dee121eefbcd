//! Builds the OpenRPC document of `protocol/openrpc.json` from the Rust types.
//!
//! No maintained crate builds OpenRPC from jsonrpsee modules, so the few lines that assemble it
//! live here; schemars does the real work. A test in this crate regenerates the document and
//! fails on drift from the committed file.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Value, json};

use crate::{ContextEvent, ErrorCode, LockScope, MethodKind, PROTOCOL_VERSION};

/// The JSON Schema (draft 2020-12) of `T`.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or(Value::Null)
}

/// A method's entry, from its row of the method table; `x-lock-scope` is its [`LockScope`].
fn method(kind: MethodKind) -> Value {
    let spec = kind.spec();
    json!({
        "name": spec.name,
        "summary": spec.summary,
        "paramStructure": "by-name",
        "params": [{ "name": "params", "required": true, "schema": (spec.params_schema)() }],
        "result": { "name": "result", "schema": (spec.result_schema)() },
        "x-lock-scope": spec.lock_scope.name(),
    })
}

/// The whole OpenRPC document: every method of the method table, what their lock scopes
/// mean, and the error-code table.
pub fn document() -> Value {
    let errors: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| json!({ "code": c.code(), "name": c.name(), "message": c.meaning() }))
        .collect();
    let methods: Vec<Value> = MethodKind::ALL.into_iter().map(method).collect();
    let lock_scopes: Vec<Value> = LockScope::ALL
        .iter()
        .map(|s| json!({ "name": s.name(), "meaning": s.meaning() }))
        .collect();
    json!({
        "openrpc": "1.3.2",
        "info": {
            "title": "satchel",
            "version": PROTOCOL_VERSION,
            "description": "Context-window daemon for AI agents. JSON-RPC 2.0 over stdio (NDJSON or Content-Length framing).",
        },
        "methods": methods,
        "x-satchel-lock-scopes": lock_scopes,
        "x-satchel-errors": errors,
        "x-satchel-notifications": [
            { "name": "$/cancelRequest", "direction": "client→server", "params": { "id": "id of the request to cancel" } },
            { "name": "$/progress", "direction": "server→client", "params": { "token": "the request's workDoneToken, or satchel-progress-<n> created by window/workDoneProgress/create", "value": { "kind": "begin | report | end", "title": "string (begin)", "cancellable": "boolean (begin)", "message": "string", "percentage": "integer, reaching 100" } } },
            { "name": "$/cancelRequest", "direction": "server→client", "params": { "id": "id of a summarizer.complete satchel stopped waiting for" } },
            { "name": "context.event", "direction": "server→client", "params": schema_of::<ContextEvent>() }
        ],
        "x-satchel-server-requests": [
            {
                "name": "summarizer.complete",
                "summary": "Sent to a client that declared capabilities.summarizer_complete when the `client` summariser is configured.",
                "params": { "messages": [{ "role": "system | user", "content": "string" }], "max_tokens": "integer" },
                "result": { "text": "string: the summary in Markdown with the ## sections" }
            }
        ],
    })
}

/// The error-code table as Markdown, for `protocol/errors.md`.
pub fn errors_markdown() -> String {
    let mut out = String::from(
        "# satchel error codes\n\nGenerated from `crates/protocol/src/errors.rs`; do not edit by hand.\n\n| code | name | meaning |\n|---|---|---|\n",
    );
    for c in ErrorCode::ALL {
        out.push_str(&format!("| {} | {} | {} |\n", c.code(), c.name(), c.meaning()));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::{LockScope, MethodKind};

    /// The document lists exactly the table's methods, in its order, each with its lock scope.
    #[test]
    fn document_lists_exactly_the_method_table() {
        let document = super::document();
        let listed: Vec<(&str, &str)> = document["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["name"].as_str().unwrap(), m["x-lock-scope"].as_str().unwrap()))
            .collect();
        let table: Vec<(&str, &str)> = MethodKind::ALL
            .iter()
            .map(|kind| (kind.name(), kind.lock_scope().name()))
            .collect();
        assert_eq!(listed, table);
        let scopes: Vec<&str> = document["x-satchel-lock-scopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(scopes, LockScope::ALL.map(LockScope::name));
    }

    /// Regenerates `protocol/` and fails when the committed files differ.
    /// Run with `UPDATE_PROTOCOL=1` to rewrite them after changing a type.
    #[test]
    fn committed_protocol_matches_the_types() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../protocol");
        let files = [
            (
                "openrpc.json",
                serde_json::to_string_pretty(&super::document()).unwrap() + "\n",
            ),
            ("errors.md", super::errors_markdown()),
        ];
        for (name, fresh) in files {
            let path = dir.join(name);
            if std::env::var_os("UPDATE_PROTOCOL").is_some() {
                std::fs::write(&path, &fresh).unwrap();
                continue;
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == fresh,
                "protocol/{name} is out of date: run `UPDATE_PROTOCOL=1 cargo test -p satchel-protocol`"
            );
        }
    }
}
