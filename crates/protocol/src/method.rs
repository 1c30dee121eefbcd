//! The [`Method`] trait: how the protocol declares a method, once, as a type.

/// A JSON-RPC method: its wire name and the types of its params and result.
///
/// Declaring each method once as a type (as rust-analyzer's `lsp/ext.rs` does) lets the daemon
/// register handlers and the schema generator describe them from the same declaration. The
/// method table, [`MethodKind`], lists every such type once, with its [`LockScope`]: the daemon
/// registers, `initialize` reports and `openrpc.json` describes exactly its methods.
///
/// [`MethodKind`]: crate::MethodKind
/// [`LockScope`]: crate::LockScope
pub trait Method {
    /// The wire name, e.g. `context.prepare`.
    const NAME: &'static str;
    /// One-line description, copied into the OpenRPC document.
    const SUMMARY: &'static str;
    /// The `params` object.
    type Params: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema;
    /// The `result` value.
    type Result: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema;
}
