//! Registers every protocol method on one jsonrpsee `RpcModule`, shared by all transports.
//!
//! Params are decoded here (not by jsonrpsee's `parse`) so an error names the field in its
//! message; handlers run on the blocking pool because they do file I/O and token counting.
//! Every handler runs inside [`guarded`]: one that panics is answered with -32603 under its
//! request's id, like any other failure, and the daemon keeps serving.

use std::collections::HashMap;
use std::sync::Arc;

use jsonrpsee::core::RegisterMethodError;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, RpcModule};
use satchel_protocol::{
    CandidatesEvaluate, CandidatesFeedback, CandidatesList, CandidatesObserve, CandidatesRemove, ContextCompact,
    ContextExpand, ContextInspect, ContextPin, ContextPrepare, ContextPurge, ContextRead, ContextSessions,
    ContextUnpin, ContextUsage, ContextWatch, Initialize, LockScope, MemoryAppend, MemoryGet, MemoryMerge,
    MemorySearch, MemoryStatus, MemoryWrite, Method, MethodKind, PrepareParams, SessionsParams,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::handlers::Daemon;
use crate::transport::{CallScope, DirectHandler, Service, TransportLimits, answer_call};

/// Everything the transports serve: every method through jsonrpsee's method table, and
/// `context.prepare` also directly (see [`DirectHandler`]).
pub fn service(daemon: Arc<Daemon>, limits: TransportLimits) -> Result<Service, RegisterMethodError> {
    let methods = module(daemon.clone())?.into();
    let prepare_daemon = daemon.clone();
    let prepare: DirectHandler = Arc::new(move |body, scope| {
        answer_call(body, limits, |params: PrepareParams<Box<RawValue>>| {
            guarded(ContextPrepare::NAME, || prepare_daemon.prepare(params, &scope))
        })
    });
    Ok(Service {
        methods,
        direct: Arc::new(HashMap::from([(ContextPrepare::NAME, prepare)])),
        on_close: Some(Arc::new(move |connection| daemon.connection_closed(connection))),
        // Session calls queue in arrival order; connection calls change what later ones see.
        ordered: Arc::new(
            MethodKind::ALL
                .into_iter()
                .filter(|m| m.lock_scope() != LockScope::Workspace)
                .map(MethodKind::name)
                .collect(),
        ),
    })
}

/// The module serving every method of [`satchel_protocol`]'s method table ([`MethodKind`]).
pub fn module(daemon: Arc<Daemon>) -> Result<RpcModule<Daemon>, RegisterMethodError> {
    let mut module = RpcModule::from_arc(daemon);
    for kind in MethodKind::ALL {
        // Exhaustive: a method added to the table without a handler here does not compile.
        // An arm registering another arm's method registers it twice, which jsonrpsee refuses.
        match kind {
            MethodKind::Initialize => register::<Initialize, _, _, _>(&mut module, |daemon, params, scope| {
                daemon.initialize(params, scope, method_names())
            }),
            // Messages stay JSON text on the way in and out: see `PrepareParams`.
            MethodKind::ContextPrepare => {
                register::<ContextPrepare, _, _, _>(&mut module, |daemon, params, scope| daemon.prepare(params, scope))
            }
            MethodKind::ContextRead => {
                register::<ContextRead, _, _, _>(&mut module, |daemon, params, _| daemon.read(params))
            }
            MethodKind::ContextCompact => {
                register::<ContextCompact, _, _, _>(&mut module, |daemon, params, scope| daemon.compact(params, scope))
            }
            MethodKind::ContextInspect => {
                register::<ContextInspect, _, _, _>(&mut module, |daemon, params, scope| daemon.inspect(params, scope))
            }
            MethodKind::ContextSessions => {
                register::<ContextSessions, _, _, _>(&mut module, |daemon, _: SessionsParams, _| daemon.sessions())
            }
            MethodKind::ContextWatch => {
                register::<ContextWatch, _, _, _>(&mut module, |daemon, params, scope| daemon.watch(params, scope))
            }
            MethodKind::ContextExpand => {
                register::<ContextExpand, _, _, _>(&mut module, |daemon, params, scope| daemon.expand(params, scope))
            }
            MethodKind::ContextPin => {
                register::<ContextPin, _, _, _>(&mut module, |daemon, params, scope| daemon.pin(params, scope))
            }
            MethodKind::ContextUnpin => {
                register::<ContextUnpin, _, _, _>(&mut module, |daemon, params, scope| daemon.unpin(params, scope))
            }
            MethodKind::ContextPurge => {
                register::<ContextPurge, _, _, _>(&mut module, |daemon, params, scope| daemon.purge(params, scope))
            }
            MethodKind::CandidatesObserve => {
                register::<CandidatesObserve, _, _, _>(&mut module, |daemon, params, _| {
                    daemon.candidates_observe(params)
                })
            }
            MethodKind::CandidatesFeedback => {
                register::<CandidatesFeedback, _, _, _>(&mut module, |daemon, params, _| {
                    daemon.candidates_feedback(params)
                })
            }
            MethodKind::CandidatesList => {
                register::<CandidatesList, _, _, _>(&mut module, |daemon, params, _| daemon.candidates_list(params))
            }
            MethodKind::CandidatesEvaluate => {
                register::<CandidatesEvaluate, _, _, _>(&mut module, |daemon, params, _| {
                    daemon.candidates_evaluate(params)
                })
            }
            MethodKind::CandidatesRemove => {
                register::<CandidatesRemove, _, _, _>(&mut module, |daemon, params, _| daemon.candidates_remove(params))
            }
            MethodKind::ContextUsage => {
                register::<ContextUsage, _, _, _>(&mut module, |daemon, params, scope| daemon.usage(params, scope))
            }
            MethodKind::MemoryWrite => register::<MemoryWrite, _, _, _>(&mut module, |daemon, params, scope| {
                daemon.memory_write(params, scope)
            }),
            MethodKind::MemoryAppend => register::<MemoryAppend, _, _, _>(&mut module, |daemon, params, scope| {
                daemon.memory_append(params, scope)
            }),
            MethodKind::MemoryGet => {
                register::<MemoryGet, _, _, _>(&mut module, |daemon, params, _| daemon.memory_get(params))
            }
            MethodKind::MemorySearch => {
                register_index::<MemorySearch, _, _, _>(&mut module, |daemon, params, _| daemon.memory_search(params))
            }
            MethodKind::MemoryMerge => register_index::<MemoryMerge, _, _, _>(&mut module, |daemon, params, scope| {
                daemon.memory_merge(params, scope)
            }),
            MethodKind::MemoryStatus => {
                register_index::<MemoryStatus, _, _, _>(&mut module, |daemon, params, _| daemon.memory_status(params))
            }
        }?;
    }
    Ok(module)
}

/// Wire names of the methods served, for `initialize`: the method table's, in its order.
fn method_names() -> Vec<String> {
    MethodKind::ALL.map(|kind| kind.name().to_owned()).to_vec()
}

/// Registers method `M`, whose params decode as `P` and whose result encodes from `R`: the
/// protocol's types, or for `context.prepare` the same shapes with messages kept as JSON text.
fn register<M, P, R, F>(module: &mut RpcModule<Daemon>, handler: F) -> Result<(), RegisterMethodError>
where
    M: Method,
    P: DeserializeOwned + Send,
    R: Serialize + Clone + Send + 'static,
    F: Fn(&Daemon, P, &CallScope) -> Result<R, RpcError> + Clone + Send + Sync + 'static,
{
    module.register_blocking_method(
        M::NAME,
        move |params: Params, daemon: Arc<Daemon>, extensions: Extensions| {
            guarded(M::NAME, || {
                let params = decode::<P>(&params)?;
                // The connection's handle lets a method talk back to its own client; the scope
                // also carries the call's cancellation and its place in the arrival order.
                let Some(scope) = extensions.get::<CallScope>().cloned() else {
                    return Err(ErrorObjectOwned::owned(
                        satchel_protocol::ErrorCode::InternalError.code(),
                        "a call arrived without its transport scope",
                        None::<()>,
                    ));
                };
                handler(&daemon, params, &scope).map_err(ErrorObjectOwned::from)
            })
        },
    )?;
    Ok(())
}

/// Registers `M`, a method that needs the memory index, as [`register`] does; a satchel built
/// without the index (the `memory` feature) refuses every call of it without reading its
/// params.
fn register_index<M, P, R, F>(module: &mut RpcModule<Daemon>, handler: F) -> Result<(), RegisterMethodError>
where
    M: Method,
    P: DeserializeOwned + Send,
    R: Serialize + Clone + Send + 'static,
    F: Fn(&Daemon, P, &CallScope) -> Result<R, RpcError> + Clone + Send + Sync + 'static,
{
    let Some(why) = crate::memory::NOT_BUILT_IN else {
        return register::<M, P, R, F>(module, handler);
    };
    module.register_method(M::NAME, move |_, _, _| {
        Err::<(), _>(ErrorObjectOwned::from(RpcError::MemoryUnavailable(why.into())))
    })?;
    Ok(())
}

/// Runs the handler of `method`; a panic becomes [`RpcError::Internal`] and an error in the log.
///
/// Without this, jsonrpsee answers a blocking method that panics with -32603 under id `null`
/// (it no longer knows the id), which answers no request: the client waits forever.
fn guarded<R, E: From<RpcError>>(method: &str, handler: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    let run = || {
        crate::panic_point::check(method);
        handler()
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        tracing::error!(method, "the handler panicked: {what}");
        Err(RpcError::Internal(method.to_owned()).into())
    })
}

/// Decodes by-name params straight from their text; absent params decode like `{}`, so a
/// missing field is named.
fn decode<T: DeserializeOwned>(params: &Params) -> Result<T, ErrorObjectOwned> {
    let raw = params.as_str().unwrap_or("{}");
    if !raw.trim_start().starts_with('{') {
        return Err(RpcError::invalid_params("params", "params must be an object (by-name)").into());
    }
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let field = e.path().to_string();
        let error = e.into_inner();
        // The field path says where; a line and column inside the params say nothing more.
        let position = format!(" at line {} column {}", error.line(), error.column());
        let message = error.to_string();
        let message = message.strip_suffix(&position).unwrap_or(&message);
        RpcError::invalid_params(if field == "." { "params" } else { &field }, message).into()
    })
}
