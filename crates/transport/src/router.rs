//! One JSON-RPC message (a call, a notification or a batch) through jsonrpsee's method table,
//! answered as jsonrpsee's own server answers it, without the server.
//!
//! jsonrpsee 0.26 has no stream transport. Its servers (HTTP, WebSocket) read a message's
//! envelope, call the method's callback ([`MethodCallback`]) with the request's extensions
//! and a reply size limit, and write the reply; what a client sees of jsonrpsee is that
//! envelope handling: -32700 for what is not JSON, -32600 (under the request's id when it
//! can be read) for what is not a request, -32601 for an unknown method, a batch answered by
//! an array and an empty one by -32600, a notification by nothing, and -32008 for a reply
//! over the limit. This module is that step for one framed message, with the rules of
//! jsonrpsee's HTTP server (`jsonrpsee_server::transport::http`, which satchel once called
//! with each message wrapped in an in-memory HTTP request), so that no reply changed when
//! the HTTP server went. Subscriptions are not served.

use std::borrow::Cow;

use jsonrpsee::types::error::ErrorCode;
use jsonrpsee::types::{ErrorObject, Id, InvalidRequest, Notification, Params, Request};
use jsonrpsee::{BatchResponseBuilder, ConnectionId, Extensions, MethodCallback, MethodResponse, Methods};
use serde_json::value::RawValue;

use crate::{CallScope, Cancellation, TransportLimits};

/// How far into a message jsonrpsee's HTTP server looks for the `{` or `[` it begins with;
/// a message that begins later is not JSON-RPC to it (-32700).
const START_WITHIN: usize = 128;

/// The params of a notification, read only to know that it is one.
type NotificationParams<'a> = Option<Cow<'a, RawValue>>;

/// The method table, as one served stream calls it.
pub(crate) struct Router {
    methods: Methods,
    /// The stream, for methods that keep per-connection state in jsonrpsee (subscriptions).
    connection: ConnectionId,
    /// Replies longer than this become -32008 errors (-32011 for a batch).
    max_response_bytes: usize,
    /// The longest message jsonrpsee reads (see [`Router::answer`]).
    max_request_bytes: usize,
}

impl Router {
    /// Calls `methods` for connection `connection`, within `limits`.
    pub(crate) fn new(methods: Methods, connection: u64, limits: TransportLimits) -> Self {
        Router {
            methods,
            connection: ConnectionId(connection as usize),
            max_response_bytes: limits.max_response_bytes as usize,
            max_request_bytes: limits.max_request_bytes as usize,
        }
    }

    /// Whether the table has `method`.
    pub(crate) fn has_method(&self, method: &str) -> bool {
        self.methods.method(method).is_some()
    }

    /// Handles one message and returns the reply body, or `None` when there is nothing to
    /// send back (a notification, a batch of notifications).
    ///
    /// `scope` goes into the request's extensions, which the method gets.
    pub(crate) async fn call<T: Cancellation>(&self, body: Vec<u8>, scope: CallScope<T>) -> Option<Vec<u8>> {
        let mut extensions = Extensions::new();
        extensions.insert(scope);
        let reply = self.answer(&body, extensions).await;
        if reply.is_notification() {
            return None;
        }
        let json: Box<str> = reply.into_json().into();
        Some(json.into_boxed_bytes().into_vec())
    }

    /// The reply to `body`, a single message or a batch.
    async fn answer(&self, body: &[u8], extensions: Extensions) -> MethodResponse {
        if body.len() > self.max_request_bytes {
            // jsonrpsee's HTTP server stops reading a body at its limit and answers -32603.
            // The frame reader has skipped every message the client sent over the limit: only
            // one that the transport made longer (an id of its own put in) gets here.
            return MethodResponse::error(Id::Null, ErrorObject::from(ErrorCode::InternalError));
        }
        match body.iter().take(START_WITHIN).find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => self.single(body, extensions).await,
            Some(b'[') => self.batch(body, extensions).await,
            _ => MethodResponse::error(Id::Null, ErrorObject::from(ErrorCode::ParseError)),
        }
    }

    /// The reply to a single message.
    async fn single(&self, body: &[u8], extensions: Extensions) -> MethodResponse {
        if let Ok(mut request) = serde_json::from_slice::<Request<'_>>(body) {
            request.extensions = extensions;
            self.call_method(request).await
        } else if serde_json::from_slice::<Notification<'_, NotificationParams<'_>>>(body).is_ok() {
            MethodResponse::notification()
        } else {
            let (id, code) = jsonrpsee::helpers::prepare_error(body);
            MethodResponse::error(id, ErrorObject::from(code))
        }
    }

    /// The reply to a batch: its calls run one after another, and their replies make one
    /// array; a batch of notifications only gets no reply.
    async fn batch(&self, body: &[u8], extensions: Extensions) -> MethodResponse {
        let Ok(entries) = serde_json::from_slice::<Vec<&RawValue>>(body) else {
            return MethodResponse::error(Id::Null, ErrorObject::from(ErrorCode::ParseError));
        };
        let mut replies = BatchResponseBuilder::new_with_limit(self.max_response_bytes);
        let mut got_notification = false;
        for entry in entries {
            let reply = if let Ok(mut request) = serde_json::from_str::<Request<'_>>(entry.get()) {
                request.extensions = extensions.clone();
                self.call_method(request).await
            } else if serde_json::from_str::<Notification<'_, NotificationParams<'_>>>(entry.get()).is_ok() {
                got_notification = true;
                continue;
            } else {
                let id = serde_json::from_str::<InvalidRequest<'_>>(entry.get()).map_or(Id::Null, |invalid| invalid.id);
                MethodResponse::error(id, ErrorObject::from(ErrorCode::InvalidRequest))
            };
            // Over the reply limit: the batch is answered by that error alone.
            if let Err(too_big) = replies.append(reply) {
                return too_big;
            }
        }
        if replies.is_empty() && got_notification {
            MethodResponse::notification()
        } else {
            // An empty batch is answered -32600.
            MethodResponse::from_batch(replies.finish())
        }
    }

    /// Runs the method a request names.
    async fn call_method(&self, request: Request<'_>) -> MethodResponse {
        let Request {
            id,
            method,
            params,
            extensions,
            ..
        } = request;
        let params = Params::new(params.as_ref().map(|params| params.get()));
        let Some((_, callback)) = self.methods.method_with_name(&method) else {
            return MethodResponse::error(id, ErrorObject::from(ErrorCode::MethodNotFound));
        };
        match callback {
            MethodCallback::Sync(callback) => callback(id, params, self.max_response_bytes, extensions),
            MethodCallback::Async(callback) => {
                let reply = callback(
                    id.into_owned(),
                    params.into_owned(),
                    self.connection,
                    self.max_response_bytes,
                    extensions,
                );
                reply.await
            }
            MethodCallback::Subscription(_) | MethodCallback::Unsubscription(_) => {
                tracing::warn!(%method, "subscriptions are not served");
                MethodResponse::error(id, ErrorObject::from(ErrorCode::InternalError))
            }
        }
    }
}
