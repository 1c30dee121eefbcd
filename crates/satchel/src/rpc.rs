//! Registers every protocol method on one jsonrpsee `RpcModule`, shared by all transports.
//!
//! Params are decoded here (not by jsonrpsee's `parse`) so an error names the field in its
//! message; handlers run on the blocking pool because they do file I/O and token counting.

use std::sync::Arc;

use jsonrpsee::core::RegisterMethodError;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, RpcModule};
use satchel_protocol::{
    ContextCompact, ContextInspect, ContextPrepare, ContextRead, ContextSessions, ContextWatch, ErrorCode, Initialize,
    Method,
};
use serde::de::DeserializeOwned;

use crate::daemon::Daemon;
use crate::error::RpcError;
use crate::transport::ClientHandle;

/// The module serving every method of [`satchel_protocol`].
pub fn module(daemon: Arc<Daemon>) -> Result<RpcModule<Daemon>, RegisterMethodError> {
    let mut module = RpcModule::from_arc(daemon);
    register::<Initialize, _>(&mut module, |daemon, params, client| {
        Ok(daemon.initialize(params, client, method_names()))
    })?;
    register::<ContextPrepare, _>(&mut module, |daemon, params, client| daemon.prepare(params, client))?;
    register::<ContextCompact, _>(&mut module, |daemon, params, client| daemon.compact_now(params, client))?;
    register::<ContextRead, _>(&mut module, |daemon, params, _| daemon.read(params))?;
    register::<ContextInspect, _>(&mut module, |daemon, params, _| daemon.inspect(params))?;
    register::<ContextSessions, _>(&mut module, |daemon, _, _| daemon.sessions())?;
    register::<ContextWatch, _>(&mut module, |daemon, params, client| daemon.watch(params, client))?;
    Ok(module)
}

/// Wire names of the methods served, for `initialize`.
fn method_names() -> Vec<String> {
    [
        Initialize::NAME,
        ContextPrepare::NAME,
        ContextRead::NAME,
        ContextCompact::NAME,
        ContextInspect::NAME,
        ContextSessions::NAME,
        ContextWatch::NAME,
    ]
    .map(str::to_owned)
    .to_vec()
}

fn register<M, F>(module: &mut RpcModule<Daemon>, handler: F) -> Result<(), RegisterMethodError>
where
    M: Method,
    M::Params: Send,
    F: Fn(&Daemon, M::Params, Option<ClientHandle>) -> Result<M::Result, RpcError> + Clone + Send + Sync + 'static,
{
    module.register_blocking_method(
        M::NAME,
        move |params: Params, daemon: Arc<Daemon>, extensions: Extensions| {
            let params = decode::<M::Params>(&params)?;
            // The connection's handle lets a method talk back to its own client.
            let client = extensions.get::<ClientHandle>().cloned();
            let result = handler(&daemon, params, client).map_err(ErrorObjectOwned::from)?;
            serde_json::to_value(result)
                .map_err(|e| ErrorObjectOwned::owned(ErrorCode::InternalError.code(), e.to_string(), None::<()>))
        },
    )?;
    Ok(())
}

/// Decodes by-name params; absent params decode like `{}`, so a missing field is named.
fn decode<T: DeserializeOwned>(params: &Params) -> Result<T, ErrorObjectOwned> {
    let value: serde_json::Value = match params.as_str() {
        Some(raw) => serde_json::from_str(raw).map_err(|e| RpcError::invalid_params("params", e))?,
        None => serde_json::Value::Object(Default::default()),
    };
    if !value.is_object() {
        return Err(RpcError::invalid_params("params", "params must be an object (by-name)").into());
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        RpcError::invalid_params(if field == "." { "params" } else { &field }, e.into_inner()).into()
    })
}
