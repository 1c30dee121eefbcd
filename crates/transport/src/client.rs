//! Messages from a method handler back to the client that called it, over the same stream.
//!
//! Language servers ask their client things in the middle of a call
//! (`workspace/configuration`) and report progress on it (`$/progress`). jsonrpsee's method
//! table knows nothing of the stream, so [`serve`](crate::serve()) puts a [`ClientHandle`]
//! (in a [`CallScope`](crate::CallScope)) into every request's extensions. Its requests carry
//! string ids (`"satchel-1"`, …) from a counter of their own, so they never collide with the
//! client's ids; the read loop hands the client's responses to the waiting request here
//! instead of to the method table, which would answer a response with -32600.
//!
//! The daemon's handlers run on the blocking pool, so a waiter is a std channel with
//! `recv_timeout`, and sending never blocks (see [`queue`](crate::queue)): a blocked
//! handler can never hold up the writer or the read loop that delivers its answer. When the
//! stream ends nobody can answer any more, so every waiting request fails at once with
//! [`ClientRequestError::Disconnected`] instead of sitting out its timeout.
//!
//! A request satchel stops waiting for is abandoned the LSP way: the client gets a
//! `$/cancelRequest {id}` for it, whether the wait timed out, the call that needed the answer
//! was cancelled, or the stream ended (sent if the writer still runs).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc as std_mpsc};
use std::time::{Duration, Instant};

use jsonrpsee::types::Id;
use jsonrpsee::types::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Cancellation;
use crate::framing::{self, Framing};
use crate::queue::WeakWriteQueue;

/// Prefix of the ids of requests sent to the client.
const ID_PREFIX: &str = "satchel-";

/// The notification that abandons a request, in either direction.
const CANCEL_METHOD: &str = "$/cancelRequest";

/// How often a request waiting on behalf of a call looks whether the call was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Why a request to the client produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientRequestError {
    /// The client did not answer within the timeout.
    #[error("the client did not answer in time")]
    Timeout,
    /// The client answered with a JSON-RPC error.
    #[error("the client answered with error {code}: {message}")]
    Rejected {
        /// The error's `code`.
        code: i64,
        /// The error's `message`.
        message: String,
    },
    /// The client's answer was larger than the daemon reads (`--max-message-bytes`), so it
    /// was skipped unread.
    #[error("the client's answer was larger than --max-message-bytes ({limit} bytes)")]
    ResponseTooBig {
        /// The limit the answer exceeded.
        limit: u64,
    },
    /// The connection closed (or its writer failed) before the client answered.
    #[error("the client is disconnected")]
    Disconnected,
    /// The call the answer was for was cancelled first.
    #[error("the call was cancelled")]
    Cancelled,
}

/// What a waiting request gets.
type Reply = Result<Value, ClientRequestError>;

/// A way to talk to the client on the other end of the stream a request came in on.
///
/// [`serve`](crate::serve()) inserts one into the extensions of every request it hands to
/// the method table, so a method handler gets it with `extensions.get::<CallScope<T>>()`. Clones
/// talk to the same client. A handle kept after its connection ended does no harm:
/// notifications are dropped and requests fail with [`ClientRequestError::Disconnected`].
#[derive(Clone)]
pub struct ClientHandle {
    peer: Arc<Peer>,
}

impl std::fmt::Debug for ClientHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandle").finish_non_exhaustive()
    }
}

impl ClientHandle {
    /// A number unique to this connection in this process, for per-connection state such as
    /// the capabilities a client declared in `initialize`.
    pub fn connection_id(&self) -> u64 {
        self.peer.connection
    }

    /// False once the connection has closed: a subscriber list can then drop this handle.
    pub fn is_connected(&self) -> bool {
        lock(&self.peer.pending).open
    }

    /// Sends a notification to this client (e.g. `$/progress`), without waiting.
    ///
    /// It is written before the reply of the handler that sends it. `params` of `null` are
    /// left out of the message. Dropped if the connection is gone.
    pub fn notify(&self, method: &str, params: Value) {
        if !self.peer.push(None, method, params) {
            tracing::debug!(method, "notification not sent: the connection is gone");
        }
    }

    /// Sends a request to this client and waits up to `timeout` for its response; for
    /// handlers on the blocking pool (`register_blocking_method`, a [`DirectHandler`](crate::DirectHandler)).
    ///
    /// Returns the response's `result`, or an error on timeout, on an error response, or
    /// when the connection is gone. Blocks the calling thread, so never call it from an
    /// async task: on a single-threaded runtime the answer could not even be read until the
    /// timeout. A `$/cancelRequest` for the calling method replies at once but cannot stop
    /// the thread: [`request_for_call`](Self::request_for_call) stops waiting then.
    ///
    /// On timeout the client gets a `$/cancelRequest` for the request.
    pub fn request_blocking(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, ClientRequestError> {
        self.request_waiting(method, params, timeout, None)
    }

    /// [`request_blocking`](Self::request_blocking) on behalf of a call: it stops waiting
    /// (it looks every `CANCEL_POLL`) with [`ClientRequestError::Cancelled`] once `token` is
    /// cancelled, and the client gets a `$/cancelRequest` for the request.
    pub fn request_for_call<T: Cancellation>(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        token: &T,
    ) -> Result<Value, ClientRequestError> {
        self.request_waiting(method, params, timeout, Some(&|| token.is_cancelled()))
    }

    /// Sends a request and waits for its answer, polling `cancelled` (when given) meanwhile.
    fn request_waiting(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancelled: Option<&dyn Fn() -> bool>,
    ) -> Result<Value, ClientRequestError> {
        let is_cancelled = || cancelled.is_some_and(|cancelled| cancelled());
        if is_cancelled() {
            return Err(ClientRequestError::Cancelled);
        }
        let (tx, rx) = std_mpsc::sync_channel(1);
        let id = self.peer.start(method, params, Waiter::Blocking(tx))?;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return self.abandon(&id, &rx, ClientRequestError::Timeout);
            }
            let wait = if cancelled.is_some() {
                left.min(CANCEL_POLL)
            } else {
                left
            };
            match rx.recv_timeout(wait) {
                Ok(reply) => return reply,
                // `close` took the waiter (and sent the cancel if it could).
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return Err(ClientRequestError::Disconnected),
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    if is_cancelled() {
                        return self.abandon(&id, &rx, ClientRequestError::Cancelled);
                    }
                }
            }
        }
    }

    /// Stops waiting for request `id` and tells the client so; returns `why`, or the answer
    /// if it was being delivered at that moment.
    fn abandon(
        &self,
        id: &str,
        rx: &std_mpsc::Receiver<Reply>,
        why: ClientRequestError,
    ) -> Result<Value, ClientRequestError> {
        if self.peer.abandon(id) {
            tracing::debug!(id, reason = %why, "request to the client abandoned");
            self.peer.cancel(id);
            return Err(why);
        }
        // The answer was being delivered as the wait ended; it comes at once.
        rx.recv().unwrap_or(Err(ClientRequestError::Disconnected))
    }
}

/// Source of connection ids.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// Where the answer to one request goes.
enum Waiter {
    /// A handler blocked in [`ClientHandle::request_blocking`].
    Blocking(std_mpsc::SyncSender<Reply>),
}

impl Waiter {
    fn send(self, reply: Reply) {
        // The waiter may have stopped waiting; then nobody wants the reply.
        match self {
            Self::Blocking(tx) => drop(tx.try_send(reply)),
        }
    }
}

/// How many abandoned requests are remembered, for their late answers. A client answers a
/// `$/cancelRequest` at once or not at all; a few dozen cover any burst of abandoned requests.
const ABANDONED_KEPT: usize = 64;

/// Requests waiting for the client's answer.
struct Pending {
    /// False once the stream has ended: no answer can come any more.
    open: bool,
    waiters: HashMap<String, Waiter>,
    /// The newest requests satchel stopped waiting for (and cancelled), oldest first: their
    /// answer may still come (LSP's -32800 for a cancelled request, or the result), and is
    /// expected, not a stray.
    abandoned: VecDeque<String>,
}

/// The client side of one served stream, shared by the read loop and every [`ClientHandle`].
pub(crate) struct Peer {
    queue: WeakWriteQueue,
    /// Framing of the latest incoming message, used for messages to the client.
    content_length: AtomicBool,
    next_id: AtomicU64,
    /// Identifies the connection for per-connection state kept by the daemon.
    connection: u64,
    pending: Mutex<Pending>,
}

impl Peer {
    /// A peer writing through `queue`.
    pub fn new(queue: WeakWriteQueue) -> Self {
        Self {
            queue,
            content_length: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            connection: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::new(Pending {
                open: true,
                waiters: HashMap::new(),
                abandoned: VecDeque::new(),
            }),
        }
    }

    /// A handle for a request's extensions.
    pub fn handle(self: &Arc<Self>) -> ClientHandle {
        ClientHandle { peer: Arc::clone(self) }
    }

    /// Records the framing of a message just read; messages to the client follow it.
    pub fn saw(&self, framing: Framing) {
        let content_length = framing == Framing::ContentLength;
        self.content_length.store(content_length, Ordering::Relaxed);
    }

    /// Hands a response from the client to the request waiting for it, if any.
    pub fn resolve(&self, id: Option<&Id<'_>>, result: Option<&RawValue>, error: Option<&RawValue>) {
        let Some(waiter) = self.waiter(id) else {
            return;
        };
        tracing::debug!(?id, "response from the client");
        let reply = match (error, result) {
            (Some(error), _) => Err(rejected(error)),
            (None, Some(result)) => serde_json::from_str(result.get()).map_err(|e| ClientRequestError::Rejected {
                code: i64::from(ErrorCode::ParseError.code()),
                message: format!("unreadable result: {e}"),
            }),
            // Routed responses always have one of the two.
            (None, None) => Ok(Value::Null),
        };
        waiter.send(reply);
    }

    /// Fails the request that a response too large to read answered (`id` from the response's
    /// first bytes; without it the request waits for its timeout, as nothing says which it was).
    pub fn fail_too_big(&self, id: Option<&Id<'_>>, limit: u64) {
        if let Some(waiter) = self.waiter(id) {
            waiter.send(Err(ClientRequestError::ResponseTooBig { limit }));
        }
    }

    /// The request waiting for the response `id`, taken from the waiting list.
    fn waiter(&self, id: Option<&Id<'_>>) -> Option<Waiter> {
        let (waiter, late) = match id {
            Some(Id::Str(id)) => {
                let mut pending = lock(&self.pending);
                let waiter = pending.waiters.remove(id.as_ref());
                let late = waiter.is_none() && {
                    let at = pending.abandoned.iter().position(|a| a == id.as_ref());
                    at.and_then(|at| pending.abandoned.remove(at)).is_some()
                };
                (waiter, late)
            }
            _ => (None, false),
        };
        if late {
            tracing::debug!(?id, "the answer to a request satchel had abandoned came late");
        } else if waiter.is_none() {
            tracing::warn!(?id, "ignored a response that answers no waiting request");
        }
        waiter
    }

    /// Fails every waiting request, and every later one, with `Disconnected`.
    pub fn close(&self) {
        let waiters = {
            let mut pending = lock(&self.pending);
            pending.open = false;
            std::mem::take(&mut pending.waiters)
        };
        if !waiters.is_empty() {
            tracing::debug!(count = waiters.len(), "requests to the client failed: the stream ended");
        }
        for (id, waiter) in waiters {
            // The client may still read what the running calls write.
            self.cancel(&id);
            waiter.send(Err(ClientRequestError::Disconnected));
        }
    }

    /// Tells the client that nobody waits for the answer to request `id` any more.
    fn cancel(&self, id: &str) {
        if !self.push(None, CANCEL_METHOD, serde_json::json!({ "id": id })) {
            tracing::debug!(id, "$/cancelRequest not sent: the connection is gone");
        }
    }

    /// Registers `waiter` under a fresh id and sends the request; returns the id.
    fn start(&self, method: &str, params: Value, waiter: Waiter) -> Result<String, ClientRequestError> {
        let id = format!("{ID_PREFIX}{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        {
            let mut pending = lock(&self.pending);
            if !pending.open {
                return Err(ClientRequestError::Disconnected);
            }
            // Registered before sending, so even the quickest answer finds its waiter.
            pending.waiters.insert(id.clone(), waiter);
        }
        if !self.push(Some(&id), method, params) {
            self.forget(&id);
            return Err(ClientRequestError::Disconnected);
        }
        tracing::debug!(id, method, "request to the client");
        Ok(id)
    }

    /// Stops waiting for `id`; false if its answer had already been taken for delivery.
    fn forget(&self, id: &str) -> bool {
        lock(&self.pending).waiters.remove(id).is_some()
    }

    /// [`forget`](Self::forget)s `id` and remembers it as abandoned, so that its answer, if
    /// the client still sends one, is not taken for a stray.
    fn abandon(&self, id: &str) -> bool {
        let mut pending = lock(&self.pending);
        if pending.waiters.remove(id).is_none() {
            return false;
        }
        if pending.abandoned.len() == ABANDONED_KEPT {
            pending.abandoned.pop_front();
        }
        pending.abandoned.push_back(id.to_owned());
        true
    }

    /// Queues a request (with `id`) or notification; false if the writer is gone.
    fn push(&self, id: Option<&str>, method: &str, params: Value) -> bool {
        let message = Message {
            jsonrpc: "2.0",
            id,
            method,
            params,
        };
        let body = serde_json::to_vec(&message).expect("a JSON value always serialises");
        let framing = if self.content_length.load(Ordering::Relaxed) {
            Framing::ContentLength
        } else {
            Framing::Ndjson
        };
        self.queue.push(framing::encode(framing, body))
    }
}

fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    // Nothing panics while holding the lock, and the map stays consistent if it did.
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request or notification to the client.
#[derive(Serialize)]
struct Message<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    method: &'a str,
    #[serde(skip_serializing_if = "Value::is_null")]
    params: Value,
}

/// The error object of a response, read leniently: the client's mistakes should not hide
/// that it said no.
#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

fn rejected(error: &RawValue) -> ClientRequestError {
    match serde_json::from_str::<WireError>(error.get()) {
        Ok(WireError { code, message }) => ClientRequestError::Rejected { code, message },
        Err(_) => ClientRequestError::Rejected {
            code: 0,
            message: error.get().to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Params};
    use jsonrpsee::{Extensions, Methods, RpcModule};
    use serde_json::json;

    use super::*;
    use crate::TransportLimits;
    use crate::tests::{Client, Scope, by_id, call, notify, start_with};

    /// How a test method reports a failed request to the client: its own error code.
    fn failure(error: ClientRequestError) -> ErrorObjectOwned {
        let code = match error {
            ClientRequestError::Timeout => 1,
            ClientRequestError::Rejected { .. } => 2,
            ClientRequestError::Disconnected => 3,
            ClientRequestError::Cancelled => 4,
            ClientRequestError::ResponseTooBig { .. } => 5,
        };
        ErrorObject::owned(code, error.to_string(), None::<()>)
    }

    /// The handle `serve` put into the request, and the test method's `[params, timeout_ms]`.
    fn ask_args(params: &Params, ext: &Extensions) -> Result<(ClientHandle, Value, Duration), ErrorObjectOwned> {
        let (forwarded, ms): (Value, u64) = params.parse()?;
        let client = ext.get::<Scope>().expect("serve inserts a CallScope").client.clone();
        Ok((client, forwarded, Duration::from_millis(ms)))
    }

    /// `ask` forwards its params to the client's `client.echo` and returns
    /// its answer; `progress` and `progress_async` notify twice, then return.
    fn methods() -> Methods {
        let mut module = RpcModule::new(());
        module
            .register_blocking_method("ask", |params, _, ext| {
                let (client, forwarded, timeout) = ask_args(&params, &ext)?;
                client
                    .request_blocking("client.echo", forwarded, timeout)
                    .map_err(failure)
            })
            .expect("fresh name");
        module
            .register_blocking_method("ask_for_call", |params, _, ext| {
                let (client, forwarded, timeout) = ask_args(&params, &ext)?;
                let token = &ext.get::<Scope>().expect("serve inserts a CallScope").token;
                client
                    .request_for_call("client.echo", forwarded, timeout, token)
                    .map_err(failure)
            })
            .expect("fresh name");
        module
            .register_blocking_method("progress", |_, _, ext| {
                let client = &ext.get::<Scope>().expect("serve inserts a CallScope").client;
                client.notify("$/progress", json!({"n": 1}));
                client.notify("$/progress", json!({"n": 2}));
                "done"
            })
            .expect("fresh name");
        module
            .register_async_method("progress_async", |_, _, ext| async move {
                let client = &ext.get::<Scope>().expect("serve inserts a CallScope").client;
                client.notify("$/progress", json!({"n": 1}));
                client.notify("$/progress", Value::Null);
                "done"
            })
            .expect("fresh name");
        module
            .register_method("echo", |params, _, _| params.parse::<Value>())
            .expect("fresh name");
        module.into()
    }

    fn start() -> Client {
        start_with(methods(), TransportLimits::default())
    }

    fn result(id: &Value, result: Value) -> String {
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
    }

    /// Reads the server's next frame, which must be a `client.echo` request; returns its id
    /// and params.
    async fn next_request(client: &mut Client, framing: Framing) -> (Value, Value) {
        let (got, request) = client.recv().await;
        assert_eq!(got, framing, "{request}");
        assert_eq!(request["method"], json!("client.echo"), "{request}");
        let id = request["id"].as_str().expect("a string id");
        assert!(id.starts_with(ID_PREFIX), "{request}");
        (request["id"].clone(), request["params"].clone())
    }

    #[tokio::test]
    async fn a_blocking_method_gets_the_clients_answer_in_both_framings() {
        let mut client = start();
        for (n, framing) in [(1, Framing::Ndjson), (2, Framing::ContentLength)] {
            let ask = call(json!(n), "ask", json!([{"q": n}, 5000]));
            client.send(framing, &ask).await;
            let (got, request) = client.recv().await;
            let expected = json!({
                "jsonrpc": "2.0",
                "id": format!("satchel-{n}"),
                "method": "client.echo",
                "params": {"q": n},
            });
            assert_eq!((got, request), (framing, expected));
            client
                .send(framing, &result(&json!(format!("satchel-{n}")), json!({"a": n})))
                .await;
            let reply = json!({"jsonrpc": "2.0", "id": n, "result": {"a": n}});
            assert_eq!(client.recv().await, (framing, reply));
        }
        assert_eq!(client.finish().await, vec![]);
    }

    #[tokio::test]
    async fn an_error_answer_is_rejected_with_its_code_and_message() {
        let mut client = start();
        for method in ["ask"] {
            client
                .send(Framing::Ndjson, &call(json!(1), method, json!([[], 5000])))
                .await;
            let (id, params) = next_request(&mut client, Framing::Ndjson).await;
            assert_eq!(params, json!([]));
            let error = json!({"code": -32601, "message": "no such method", "data": [1]});
            let answer = json!({"jsonrpc": "2.0", "id": id, "error": error});
            client.send(Framing::Ndjson, &answer.to_string()).await;
            let (_, reply) = client.recv().await;
            let message = "the client answered with error -32601: no such method";
            assert_eq!(reply["error"], json!({"code": 2, "message": message}), "{method}");
        }
    }

    #[tokio::test]
    async fn an_unanswered_request_times_out_and_a_late_answer_is_ignored() {
        let mut client = start();
        for method in ["ask"] {
            let started = Instant::now();
            client
                .send(Framing::Ndjson, &call(json!(1), method, json!([null, 100])))
                .await;
            let (id, params) = next_request(&mut client, Framing::Ndjson).await;
            assert_eq!(params, Value::Null, "null params are left out");
            let (_, abandoned) = client.recv().await;
            let cancel = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}});
            assert_eq!(abandoned, cancel, "the client is told the request is abandoned");
            let (_, reply) = client.recv().await;
            assert_eq!(reply["error"]["code"], json!(1), "{reply}");
            assert!(started.elapsed() >= Duration::from_millis(100));
            client.send(Framing::Ndjson, &result(&id, json!("late"))).await;
        }
        client.send(Framing::Ndjson, &call(json!(2), "echo", json!([2]))).await;
        let rest = client.finish().await;
        assert_eq!(
            rest,
            vec![(Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 2, "result": [2]}))]
        );
    }

    #[tokio::test]
    async fn a_cancelled_call_abandons_its_request_to_the_client() {
        let mut client = start();
        client
            .send(
                Framing::Ndjson,
                &call(json!(1), "ask_for_call", json!([{"q": 1}, 10_000])),
            )
            .await;
        let (id, _) = next_request(&mut client, Framing::Ndjson).await;
        let started = Instant::now();
        client
            .send(Framing::Ndjson, &notify("$/cancelRequest", json!({"id": 1})))
            .await;
        let (_, reply) = client.recv().await;
        assert_eq!(reply["error"]["code"], json!(-32800), "{reply}");
        let (_, abandoned) = client.recv().await;
        let cancel = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}});
        assert_eq!(abandoned, cancel);
        assert!(started.elapsed() < Duration::from_secs(2), "not after the timeout");
        // The late answer finds nobody waiting.
        client.send(Framing::Ndjson, &result(&id, json!("late"))).await;
        client.send(Framing::Ndjson, &call(json!(2), "echo", json!([2]))).await;
        let rest = client.finish().await;
        assert_eq!(
            rest,
            vec![(Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 2, "result": [2]}))]
        );
    }

    #[tokio::test]
    async fn eof_fails_waiting_requests_at_once() {
        let mut client = start();
        client
            .send(Framing::Ndjson, &call(json!(1), "ask", json!([1, 10_000])))
            .await;
        client
            .send(Framing::Ndjson, &call(json!(2), "ask", json!([2, 10_000])))
            .await;
        let (first, _) = next_request(&mut client, Framing::Ndjson).await;
        let (second, _) = next_request(&mut client, Framing::Ndjson).await;
        let started = Instant::now();
        let (cancels, replies): (Vec<_>, Vec<_>) = client
            .finish()
            .await
            .into_iter()
            .partition(|(_, frame)| frame["method"] == "$/cancelRequest");
        let replies = by_id(replies);
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut cancelled: Vec<Value> = cancels.iter().map(|(_, c)| c["params"]["id"].clone()).collect();
        cancelled.sort_by_key(Value::to_string);
        assert_eq!(cancelled, vec![first, second], "the requests are abandoned");
        let error = json!({"code": 3, "message": "the client is disconnected"});
        assert_eq!(
            replies,
            vec![
                (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 1, "error": error})),
                (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 2, "error": error})),
            ]
        );
    }

    #[tokio::test]
    async fn notifications_come_before_the_methods_reply() {
        let mut client = start();
        let framing = Framing::ContentLength;
        let second = [
            json!({"jsonrpc": "2.0", "method": "$/progress", "params": {"n": 2}}),
            json!({"jsonrpc": "2.0", "method": "$/progress"}),
        ];
        for (id, method, second) in [(1, "progress", &second[0]), (2, "progress_async", &second[1])] {
            client.send(framing, &call(json!(id), method, json!([]))).await;
            let frames = [client.recv().await, client.recv().await, client.recv().await];
            let expected = [
                (
                    framing,
                    json!({"jsonrpc": "2.0", "method": "$/progress", "params": {"n": 1}}),
                ),
                (framing, second.clone()),
                (framing, json!({"jsonrpc": "2.0", "id": id, "result": "done"})),
            ];
            assert_eq!(frames, expected, "{method}");
        }
    }

    #[tokio::test]
    async fn stray_responses_are_ignored_and_serving_continues() {
        let mut client = start();
        let error = json!({"code": 1, "message": "x"});
        let strays = [
            result(&json!("satchel-999"), json!(1)),
            result(&json!("a"), Value::Null),
            json!({"jsonrpc": "2.0", "id": 7, "error": error}).to_string(),
            json!({"jsonrpc": "2.0", "id": null, "error": error}).to_string(),
            json!({"jsonrpc": "2.0", "error": error}).to_string(),
            format!(
                "[{},{}]",
                result(&json!("satchel-5"), json!(1)),
                result(&json!(8), json!(2))
            ),
        ];
        for (n, stray) in strays.iter().enumerate() {
            let framing = if n % 2 == 0 {
                Framing::Ndjson
            } else {
                Framing::ContentLength
            };
            client.send(framing, stray).await;
        }
        // A response is not a request in flight: there is nothing to cancel.
        client
            .send(Framing::Ndjson, &notify("$/cancelRequest", json!({"id": 7})))
            .await;
        client.send(Framing::Ndjson, &call(json!(2), "echo", json!([2]))).await;
        let rest = client.finish().await;
        assert_eq!(
            rest,
            vec![(Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 2, "result": [2]}))]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_each_get_their_own_answer() {
        const CALLS: u64 = 8;
        let mut client = start();
        for n in 0..CALLS {
            let method = "ask";
            client
                .send(Framing::Ndjson, &call(json!(n), method, json!([{"n": n}, 5000])))
                .await;
        }
        let mut requests = Vec::new();
        for _ in 0..CALLS {
            requests.push(next_request(&mut client, Framing::Ndjson).await);
        }
        // Answer in reverse order: half one by one, half in one batch with a call of its own.
        requests.reverse();
        let answer = |(id, params): &(Value, Value)| result(id, json!({"echo": params}));
        let (single, batched) = requests.split_at(requests.len() / 2);
        for request in single {
            client.send(Framing::Ndjson, &answer(request)).await;
        }
        let mut batch: Vec<String> = batched.iter().map(answer).collect();
        batch.insert(1, call(json!("b"), "echo", json!(["b"])));
        client.send(Framing::Ndjson, &format!("[{}]", batch.join(","))).await;

        let mut replies = Vec::new();
        for _ in 0..=CALLS {
            replies.push(client.recv().await.1);
        }
        let (batch_reply, replies): (Vec<Value>, Vec<Value>) = replies.into_iter().partition(Value::is_array);
        assert_eq!(
            batch_reply,
            vec![json!([{"jsonrpc": "2.0", "id": "b", "result": ["b"]}])]
        );
        let mut replies: Vec<(u64, Value)> = replies
            .into_iter()
            .map(|reply| (reply["id"].as_u64().expect("our ids"), reply["result"].clone()))
            .collect();
        replies.sort_by_key(|(id, _)| *id);
        let expected: Vec<(u64, Value)> = (0..CALLS).map(|n| (n, json!({"echo": {"n": n}}))).collect();
        assert_eq!(replies, expected);
    }
}
