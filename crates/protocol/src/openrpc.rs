//! Builds the OpenRPC document of `protocol/openrpc.json` from the Rust types.
//!
//! No maintained crate builds OpenRPC from jsonrpsee modules, so the few lines that assemble it
//! live here; schemars does the real work. A test in this crate regenerates the document and
//! fails on drift from the committed file.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Value, json};

use crate::{
    ContextCompact, ContextEvent, ContextInspect, ContextPrepare, ContextRead, ContextSessions, ContextWatch,
    ErrorCode, Initialize, Method, PROTOCOL_VERSION,
};

fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or(Value::Null)
}

fn method<M: Method>() -> Value {
    json!({
        "name": M::NAME,
        "summary": M::SUMMARY,
        "paramStructure": "by-name",
        "params": [{ "name": "params", "required": true, "schema": schema_of::<M::Params>() }],
        "result": { "name": "result", "schema": schema_of::<M::Result>() },
    })
}

/// The whole OpenRPC document: every method and the error-code table.
pub fn document() -> Value {
    let errors: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| json!({ "code": c.code(), "name": c.name(), "message": c.meaning() }))
        .collect();
    json!({
        "openrpc": "1.3.2",
        "info": {
            "title": "satchel",
            "version": PROTOCOL_VERSION,
            "description": "Context-window daemon for AI agents. JSON-RPC 2.0 over stdio (NDJSON or Content-Length framing).",
        },
        "methods": [
            method::<Initialize>(),
            method::<ContextPrepare>(),
            method::<ContextCompact>(),
            method::<ContextRead>(),
            method::<ContextInspect>(),
            method::<ContextSessions>(),
            method::<ContextWatch>(),
        ],
        "x-satchel-errors": errors,
        "x-satchel-notifications": [
            { "name": "$/cancelRequest", "direction": "client→server", "params": { "id": "id of the request to cancel" } },
            { "name": "$/progress", "direction": "server→client", "params": { "token": "compaction:<session>", "value": { "kind": "report", "message": "string", "percentage": "integer" } } },
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
