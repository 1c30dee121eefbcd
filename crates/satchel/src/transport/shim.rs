//! Runs one JSON-RPC message through jsonrpsee's HTTP request handler, in memory.
//!
//! jsonrpsee 0.26 has no stdio transport, but its HTTP entry point
//! (`jsonrpsee::server::http::call_with_service_builder`) is public and needs no socket.
//! Wrapping each framed message in an in-memory `http::Request` keeps all of jsonrpsee's
//! semantics (batches, -32700/-32600/-32601/-32602, size limits, RPC middleware) instead of
//! re-implementing them on top of `RpcModule::raw_json_request`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use http_body_util::BodyExt;
use jsonrpsee::Methods;
use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
use jsonrpsee::server::{ConnectionState, HttpBody, HttpRequest, ServerConfig, ServerHandle, stop_channel};
use tokio::sync::Semaphore;

use super::{CallScope, TransportLimits};

/// Connection ids handed to jsonrpsee, unique per served stream within the process.
static NEXT_CONN_ID: AtomicU32 = AtomicU32::new(0);

/// jsonrpsee's per-connection state for one served stream.
pub(super) struct Shim {
    methods: Methods,
    config: ServerConfig,
    conn: ConnectionState,
    /// Kept so the connection's stop handle never reports a shutdown.
    _server: ServerHandle,
}

impl Shim {
    /// Prepares to call `methods` with jsonrpsee's size limits set from `limits`.
    pub fn new(methods: Methods, limits: TransportLimits) -> Self {
        let config = ServerConfig::builder()
            .max_request_body_size(limits.max_request_bytes)
            .max_response_body_size(limits.max_response_bytes)
            .build();
        let (stop, server) = stop_channel();
        // jsonrpsee wants a connection-limit permit; a stream is one connection, so it
        // gets a semaphore of its own.
        let permit = Arc::new(Semaphore::new(1))
            .try_acquire_owned()
            .expect("a new semaphore with one permit has a free permit");
        let conn_id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
        Self {
            methods,
            config,
            conn: ConnectionState::new(stop, conn_id, permit),
            _server: server,
        }
    }

    /// Handles one message (a call, notification or batch) and returns the reply body,
    /// or `None` when there is nothing to send back.
    ///
    /// `scope` goes into the request's extensions, which jsonrpsee passes to the method.
    pub async fn call(&self, body: Vec<u8>, scope: CallScope) -> Option<Vec<u8>> {
        let mut request = HttpRequest::new(HttpBody::from(body));
        request.extensions_mut().insert(scope);
        *request.method_mut() = http::Method::POST;
        request.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        let response = jsonrpsee::server::http::call_with_service_builder(
            request,
            self.config.clone(),
            self.conn.clone(),
            self.methods.clone(),
            RpcServiceBuilder::new(),
        )
        .await;
        let bytes = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                tracing::warn!("reading jsonrpsee's reply failed: {e}");
                return None;
            }
        };
        // Over HTTP jsonrpsee acknowledges notifications with a body of `null`.
        (!bytes.is_empty() && &bytes[..] != b"null").then(|| bytes.to_vec())
    }
}
