//! One served stream, as its read loop sees it: what each message is (a call, a notification
//! to run, a cancel, a response from the client, something to answer with an error at once),
//! and the task that runs each call and queues its reply.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jsonrpsee::MethodResponse;
use jsonrpsee::types::error::{ErrorCode, reject_too_big_request};
use jsonrpsee::types::{ErrorObject, Id};
use serde_json::value::RawValue;

use crate::cancel::{InFlight, InFlightCalls};
use crate::client::Peer;
use crate::framing::{self, Frame, Framing};
use crate::ids::{IdAlias, give_id};
use crate::order::{AdmissionSlot, Arrivals};
use crate::peek::{Cancel, IdKey, Peek, error_reply};
use crate::progress::{self, ProgressCalls, ProgressCancel};
use crate::queue::WriteQueue;
use crate::router::Router;
use crate::{CallScope, Cancellation, DirectHandler, Service, TransportLimits};

/// LSP's error code for a request the client cancelled.
const REQUEST_CANCELLED_CODE: i32 = -32800;

/// LSP's notification cancelling a call by its id.
const CANCEL_METHOD: &str = "$/cancelRequest";

/// LSP's notification cancelling the call whose work-done progress runs under a token.
const PROGRESS_CANCEL_METHOD: &str = "window/workDoneProgress/cancel";

/// Room kept in a reply for its envelope (`jsonrpc`, `id`) around the result.
const REPLY_ENVELOPE_BYTES: u32 = 1024;

/// A message that asks for a call, as [`Connection::read_call`] leaves it to be run.
struct ReadCall {
    /// The message, with a stand-in or given id where it needs one.
    body: Vec<u8>,
    /// The id it runs under.
    id: Option<Id<'static>>,
    method: Option<String>,
    /// The client's own id, when the call runs under a stand-in.
    alias: Option<Arc<IdAlias>>,
    /// A notification of a served method, run under an id of the transport's own.
    notification: bool,
}

/// Valid JSON that is not a request: the method table would answer -32700 (it reads only
/// requests, and anything else it cannot read it takes for bad JSON), JSON-RPC wants -32600.
/// `first` is the first non-blank byte of `body`.
fn is_not_a_request(peek: Option<&Peek<'_>>, first: Option<u8>, body: &[u8]) -> bool {
    match peek {
        Some(p) => p.id.is_none() && !p.is_notification() && p.method.as_deref() != Some(CANCEL_METHOD),
        None => {
            first != Some(b'{') && first != Some(b'[') && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
        }
    }
}

/// State of one served stream, owned by the read loop.
pub(crate) struct Connection<T> {
    router: Arc<Router>,
    direct: Arc<HashMap<&'static str, DirectHandler<T>>>,
    queue: WriteQueue,
    /// The client, as seen by method handlers.
    peer: Arc<Peer>,
    in_flight: InFlightCalls<T>,
    /// Running calls by the progress token they report under (`window/workDoneProgress/cancel`).
    progress_calls: ProgressCalls,
    next_seq: u64,
    /// Admissions in arrival order.
    arrivals: Arrivals,
    /// Methods that take an admission.
    ordered: Arc<HashSet<&'static str>>,
    /// See [`CallScope::max_result_bytes`].
    max_result_bytes: usize,
    /// Messages longer than this were skipped unread by the frame reader.
    max_request_bytes: u32,
}

impl<T: Cancellation> Connection<T> {
    /// The state of a new stream whose replies go to `queue`.
    pub(crate) fn new(queue: WriteQueue, service: Service<T>, limits: TransportLimits) -> Self {
        let peer = Arc::new(Peer::new(queue.downgrade()));
        Connection {
            router: Arc::new(Router::new(service.methods, peer.handle().connection_id(), limits)),
            direct: service.direct,
            ordered: service.ordered,
            peer,
            queue,
            in_flight: InFlightCalls::default(),
            progress_calls: Arc::default(),
            next_seq: 0,
            arrivals: Arrivals::default(),
            max_result_bytes: limits.max_response_bytes.saturating_sub(REPLY_ENVELOPE_BYTES) as usize,
            max_request_bytes: limits.max_request_bytes,
        }
    }

    /// The id of this connection (see [`ClientHandle::connection_id`](crate::ClientHandle::connection_id)).
    pub(crate) fn id(&self) -> u64 {
        self.peer.handle().connection_id()
    }

    /// Handles one frame read from the stream: a message starts processing in its own task
    /// (or is handled here if it is a cancel or a response from the client); a frame that
    /// could not be read is answered here.
    pub(crate) async fn receive(&mut self, framing: Framing, frame: Frame) {
        self.peer.saw(framing);
        let limit = self.max_request_bytes;
        match frame {
            Frame::Message(body) => {
                if let Some(call) = self.read_call(framing, body).await {
                    self.spawn_call(framing, call);
                }
            }
            Frame::TooBig(prefix) if Peek::response_in_prefix(&prefix) => {
                // Not answered (a response never is); the request it answers fails now rather
                // than at its timeout, when its id is in the first bytes.
                tracing::warn!(limit, "skipped an oversized response");
                let id = Peek::id_in_prefix(&prefix).and_then(|raw| serde_json::from_str::<Id<'_>>(raw.get()).ok());
                self.peer.fail_too_big(id.as_ref(), u64::from(limit));
            }
            Frame::TooBig(prefix) => {
                tracing::warn!(limit, "skipped an oversized message");
                let id = Peek::id_in_prefix(&prefix);
                let reply = error_reply(id, &reject_too_big_request(limit));
                self.queue.send(framing::encode(framing, reply)).await;
            }
            Frame::BadHeader(why) => {
                tracing::warn!("{why}");
                let reply = MethodResponse::error(Id::Null, ErrorCode::ParseError);
                self.send(framing, reply).await;
            }
        }
    }

    /// Reads what a message asks for: `None` when it was handled here (a response, a cancel,
    /// a message answered with an error at once), else the call to run.
    async fn read_call(&mut self, framing: Framing, mut body: Vec<u8>) -> Option<ReadCall> {
        let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
        if first == Some(b'[') {
            body = self.route_batch(body)?;
        }
        // A batch or malformed message does not peek; the method table answers it as a whole.
        let mut peek = Peek::of(&body);
        // JSON text is UTF-8. An object that is not, with its bad bytes where routing reads
        // (an id, a key), does not peek; the method table would skip the bad member unread,
        // take the message for a notification and answer nothing. Checked only when peeking
        // failed: a resent history is megabytes.
        if peek.is_none() && first == Some(b'{') && std::str::from_utf8(&body).is_err() {
            tracing::debug!("a message that is not UTF-8");
            let reply = MethodResponse::error(Id::Null, ErrorCode::ParseError);
            self.send(framing, reply).await;
            return None;
        }
        if let Some(peek) = &peek
            && peek.is_response()
        {
            self.peer.resolve(peek.id.as_ref(), peek.result, peek.error);
            return None;
        }
        if peek.as_ref().is_some_and(|p| p.bad_id) {
            tracing::debug!("a message with an invalid id");
            let reply = MethodResponse::error(Id::Null, ErrorCode::InvalidRequest);
            self.send(framing, reply).await;
            return None;
        }
        let odd_id = peek.as_ref().and_then(|p| p.aliased_id).map(|raw| {
            let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
            (start, raw.get().to_owned())
        });
        let alias = match odd_id {
            Some((start, original)) => {
                let alias = IdAlias::put(&mut body, start, original, self.next_seq);
                peek = Peek::of(&body);
                Some(Arc::new(alias))
            }
            None => None,
        };
        let notification_shape = peek.as_ref().is_some_and(|p| !p.saw_id && p.version_2);
        if is_not_a_request(peek.as_ref(), first, &body) {
            tracing::debug!("valid JSON, not a request");
            let reply = MethodResponse::error(Id::Null, ErrorCode::InvalidRequest);
            self.send(framing, reply).await;
            return None;
        }
        let (id, method) = peek.map_or((None, None), |p| (p.id, p.method));
        tracing::debug!(?method, ?id, ?framing, "message");
        if method.as_deref() == Some(CANCEL_METHOD) && id.is_none() {
            self.cancel(&body).await;
            return None;
        }
        if method.as_deref() == Some(PROGRESS_CANCEL_METHOD) && id.is_none() {
            self.cancel_progress(&body).await;
            return None;
        }
        // The method table answers only calls; a notification of one of its methods (a
        // `context.usage` sent after the model call) runs as a call under an id of ours, its
        // reply dropped.
        let notification = notification_shape && method.as_deref().is_some_and(|m| self.router.has_method(m));
        let id = id.map(Id::into_owned);
        let method = method.map(Cow::into_owned);
        let id = match id {
            None if notification => Some(give_id(&mut body, self.next_seq)),
            id => id,
        };
        Some(ReadCall {
            body,
            id,
            method,
            alias,
            notification,
        })
    }

    /// Runs `call` in its own task, tracked in `in_flight` (when it has an id) until it replies.
    fn spawn_call(&mut self, framing: Framing, call: ReadCall) {
        let ReadCall {
            body,
            id,
            method,
            alias,
            notification,
        } = call;
        // Only a single call with an id: notifications and batches keep the method table's
        // handling.
        let direct = method
            .as_deref()
            .filter(|_| id.is_some())
            .and_then(|m| self.direct.get(m))
            .cloned();

        let seq = self.next_seq;
        self.next_seq += 1;
        let router = Arc::clone(&self.router);
        let token = T::default();
        let queue = self.queue.clone();
        let in_flight = self.in_flight.clone();
        // Holding the lock while spawning means the task cannot finish and look for its
        // entry before the entry exists.
        let mut map = self.in_flight.lock();
        // Only the first of several running requests with the same id can be cancelled.
        let panic_id = id.clone().unwrap_or(Id::Null);
        let tracked = id.filter(|id| !map.contains_key(id));
        let scope = CallScope {
            client: self.peer.handle(),
            token: token.clone(),
            admission: match method.as_deref() {
                Some(name) if self.ordered.contains(name) => self.arrivals.next(),
                _ => AdmissionSlot::unordered(),
            },
            max_result_bytes: self.max_result_bytes,
            progress: ProgressCancel::new(Arc::clone(&self.progress_calls), tracked.clone().map(|id| (id, seq))),
        };
        let key = tracked.clone();
        let reply_alias = alias.clone();
        let task = tokio::spawn(async move {
            scope.admission.previous_admitted().await;
            let reply = answer(&router, direct, scope, body, panic_id).await;
            if let Some(id) = key
                && !in_flight.finish(&id, seq)
            {
                return; // cancelled, and the cancel has replied
            }
            if notification {
                if let Some(reply) = reply.filter(|r| memchr::memmem::find(r, br#""error""#).is_some()) {
                    tracing::warn!(reply = %String::from_utf8_lossy(&reply), "a notification failed");
                }
                return;
            }
            if let Some(reply) = reply {
                let reply = match &reply_alias {
                    Some(alias) => alias.restore(reply),
                    None => reply,
                };
                queue.send(framing::encode(framing, reply)).await;
            }
        });
        if let Some(id) = tracked {
            let abort = task.abort_handle();
            let key = match &alias {
                Some(alias) => IdKey::of(&alias.original),
                None => serde_json::to_string(&id).ok().and_then(|text| IdKey::of(&text)),
            };
            map.insert(
                id,
                InFlight {
                    seq,
                    framing,
                    abort,
                    token,
                    alias,
                    key,
                    notification,
                },
            );
        }
    }

    /// Cancels the request named by a `$/cancelRequest` and replies -32800 for it, unless
    /// the request has passed its commit point: its result is then sent as usual (LSP allows
    /// that). A cancelled call's handler may still be running, undoing what it did (the
    /// daemon's handlers hold their session until then, so whatever the client sends next on
    /// that session sees the session as it was before the cancelled call).
    async fn cancel(&self, body: &[u8]) {
        let Some(key) = serde_json::from_slice::<Cancel>(body)
            .ok()
            .and_then(|Cancel { params }| IdKey::of(params.id.get()))
        else {
            tracing::warn!("$/cancelRequest without a string or number params.id");
            return;
        };
        if let Some((id, entry)) = self.in_flight.cancel_named(&key) {
            self.cancelled(id, entry).await;
        }
    }

    /// Cancels the call whose work-done progress runs under the token named by a
    /// `window/workDoneProgress/cancel`, as [`cancel`](Self::cancel) does for its id.
    async fn cancel_progress(&self, body: &[u8]) {
        let Some((id, seq)) = progress::call_of(&self.progress_calls, body) else {
            return;
        };
        if let Some((id, entry)) = self.in_flight.cancel_call(id, seq) {
            self.cancelled(id, entry).await;
        }
    }

    /// Stops the cancelled call `entry` and replies -32800 for it.
    async fn cancelled(&self, id: Id<'static>, entry: InFlight<T>) {
        entry.abort.abort();
        if entry.notification {
            return;
        }
        let error = ErrorObject::borrowed(REQUEST_CANCELLED_CODE, "Request cancelled", None);
        let reply = MethodResponse::error(id, error).into_json().get().as_bytes().to_vec();
        let reply = match &entry.alias {
            Some(alias) => alias.restore(reply),
            None => reply,
        };
        self.queue.send(framing::encode(entry.framing, reply)).await;
    }

    /// Queues a reply produced here rather than by a method.
    async fn send(&self, framing: Framing, reply: MethodResponse) {
        let body = reply.into_json();
        self.queue.send(framing::encode(framing, body.get().as_bytes())).await;
    }

    /// Routes the responses in a batch to their requests and returns the rest of the batch
    /// for the method table, or `None` if nothing is left to answer.
    ///
    /// Clients send a batch of responses when they answer several of our requests at once.
    fn route_batch(&self, body: Vec<u8>) -> Option<Vec<u8>> {
        let calls = {
            let Ok(items) = serde_json::from_slice::<Vec<&RawValue>>(&body) else {
                return Some(body); // the method table reports what is wrong with it
            };
            let mut calls = Vec::new();
            for item in &items {
                match Peek::of(item.get().as_bytes()) {
                    Some(peek) if peek.is_response() => self.peer.resolve(peek.id.as_ref(), peek.result, peek.error),
                    _ => calls.push(item.get()),
                }
            }
            if calls.len() == items.len() {
                None // no responses: pass the batch on untouched
            } else if calls.is_empty() {
                return None;
            } else {
                Some(format!("[{}]", calls.join(",")).into_bytes())
            }
        };
        Some(calls.unwrap_or(body))
    }
}

/// Runs one call and returns its reply: through its direct handler when it has one (and the
/// handler takes it), else through the method table. A direct handler that panics is
/// answered with -32603, as jsonrpsee answers a method that panics: a bug must not leave a
/// call unanswered.
async fn answer<T: Cancellation>(
    router: &Router,
    direct: Option<DirectHandler<T>>,
    scope: CallScope<T>,
    body: Vec<u8>,
    id: Id<'static>,
) -> Option<Vec<u8>> {
    let Some(handler) = direct else {
        return router.call(body, scope).await;
    };
    let direct_scope = scope.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let reply = handler(&body, direct_scope);
        (body, reply)
    })
    .await;
    match answered {
        Ok((_, Some(reply))) => Some(reply),
        Ok((body, None)) => router.call(body, scope).await,
        Err(e) => {
            tracing::error!("a direct method panicked: {e}");
            let error = ErrorObject::borrowed(ErrorCode::InternalError.code(), "Internal error", None);
            Some(MethodResponse::error(id, error).into_json().get().as_bytes().to_vec())
        }
    }
}

impl<T> Drop for Connection<T> {
    /// The stream has ended (or failed): no answer from the client can arrive any more.
    fn drop(&mut self) {
        self.peer.close();
    }
}
