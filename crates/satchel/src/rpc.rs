//! Registers every protocol method on one jsonrpsee `RpcModule`, shared by all transports.
//!
//! Params are decoded here (not by jsonrpsee's `parse`) so an error names the field in its
//! message; handlers run on the blocking pool because they do file I/O and token counting.
//! Every handler runs inside [`guarded`]: one that panics is answered with -32603 under its
//! request's id, like any other failure, and the daemon keeps serving.

use std::sync::Arc;

use jsonrpsee::core::RegisterMethodError;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, RpcModule};
use satchel_protocol::{
    CandidatesEvaluate, CandidatesFeedback, CandidatesList, CandidatesObserve, CandidatesRemove, ContextCompact,
    ContextExpand, ContextInspect, ContextPin, ContextPrepare, ContextPurge, ContextRead, ContextSessions,
    ContextUnpin, ContextUsage, ContextWatch, Initialize, LockScope, MemoryAppend, MemoryGet, MemoryMerge,
    MemorySearch, MemoryStatus, MemoryWrite, Method, MethodKind, SessionsParams,
};
use std::borrow::Cow;
use std::collections::HashMap;

use jsonrpsee::types::Id;
use jsonrpsee::{MethodResponse, ResponsePayload};
use satchel_protocol::PrepareParams;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::handlers::Daemon;
use crate::transport::{CallScope, DirectHandler, Service, TransportLimits};

/// Everything the transports serve: every method through jsonrpsee, and `context.prepare`
/// also directly (see [`DirectHandler`]).
pub fn service(daemon: Arc<Daemon>, limits: TransportLimits) -> Result<Service, RegisterMethodError> {
    let methods = module(daemon.clone())?.into();
    let prepare_daemon = daemon.clone();
    let prepare: DirectHandler = Arc::new(move |body, scope| {
        direct_call(body, limits, |params: PrepareParams<Box<RawValue>>| {
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

/// A JSON-RPC call, read in one pass with its params.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a, P> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    id: Id<'a>,
    // Routing already chose the method; it is read only because a call carries it.
    #[serde(borrow, rename = "method")]
    _method: Cow<'a, str>,
    params: Option<ByName<P>>,
}

/// Params given by name. serde would also read a struct from an array, field by field, which
/// the protocol does not allow: an array fails here and jsonrpsee answers it.
struct ByName<P>(P);

impl<'de, P: Deserialize<'de>> Deserialize<'de> for ByName<P> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<P>(std::marker::PhantomData<P>);
        impl<'de, P: Deserialize<'de>> serde::de::Visitor<'de> for Fields<P> {
            type Value = ByName<P>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("params by name (an object)")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                P::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(ByName)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// Answers one call directly: decodes it with its params in a single pass, runs `handler`
/// and encodes the reply as jsonrpsee would. Anything unusual about the message (bad params
/// included) returns `None`, so that jsonrpsee answers it with the error it always gives.
fn direct_call<P, R>(
    body: &[u8],
    limits: TransportLimits,
    handler: impl FnOnce(P) -> Result<R, RpcError>,
) -> Option<Vec<u8>>
where
    P: DeserializeOwned,
    R: Serialize + Clone,
{
    let text = std::str::from_utf8(body).ok()?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let call: Call<'_, P> = Call::deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let ByName(params) = call.params.filter(|_| call.jsonrpc == "2.0")?;
    let id = call.id.into_owned();
    let max_bytes = limits.max_response_bytes as usize;
    let reply = match handler(params) {
        Ok(result) => match success_reply(&id, &result, max_bytes) {
            Some(reply) => return Some(reply),
            // jsonrpsee's own answer to a result it cannot write: -32008 when too large.
            None => MethodResponse::response(id, ResponsePayload::success(result), max_bytes),
        },
        Err(e) => MethodResponse::error(id, ErrorObjectOwned::from(e)),
    };
    let json: Box<str> = reply.into_json().into();
    Some(json.into_boxed_bytes().into_vec())
}

/// The reply jsonrpsee would write for `result`, written straight into one buffer; `None` if
/// it is over `max_bytes` or cannot be written.
///
/// jsonrpsee's `MethodResponse::response` grows its buffer from 128 bytes and then parses the
/// whole reply again to check it: for a reply of megabytes, more work than the call itself.
fn success_reply<R: Serialize>(id: &Id, result: &R, max_bytes: usize) -> Option<Vec<u8>> {
    let mut reply = Vec::with_capacity(64 << 10);
    reply.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut reply, id).ok()?;
    reply.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut reply, result).ok()?;
    reply.push(b'}');
    (reply.len() <= max_bytes).then_some(reply)
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
