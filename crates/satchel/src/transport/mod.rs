//! JSON-RPC 2.0 over a byte stream (stdio, a Unix socket), the way LSP servers speak it.
//!
//! jsonrpsee has no stream transport, so this module adds one: [`framing`] cuts the stream
//! into messages, [`shim`] hands each message to jsonrpsee in memory, and [`serve`] runs
//! every message in its own task so a slow call never blocks a fast one. Replies go out in
//! completion order through a single writer ([`queue`]), so frames never interleave. LSP-style
//! `$/cancelRequest` is handled here because jsonrpsee drops client notifications. Handlers
//! can talk back to their own client through a [`ClientHandle`] ([`client`]); the client's
//! responses to those requests are routed here, before jsonrpsee sees them.

mod client;
mod framing;
mod order;
mod peek;
mod progress;
mod queue;
mod shim;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use jsonrpsee::MethodResponse;
use jsonrpsee::Methods;
use jsonrpsee::types::error::{ErrorCode, reject_too_big_request};
use jsonrpsee::types::{ErrorObject, Id};
use std::borrow::Cow;

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::task::{AbortHandle, JoinHandle};

pub use client::ClientHandle;
pub use client::ClientRequestError;
use client::Peer;
use framing::{Frame, FrameReader, Framing, Incoming};
pub use order::CallScope;
use order::{AdmissionSlot, Arrivals};
use peek::{Cancel, IdKey, Peek, error_reply, give_id};
use progress::ProgressCalls;
pub use progress::{ProgressCancel, ProgressRegistration};
use queue::{WriteQueue, write_frames, write_frames_blocking};
use satchel_engine::CallToken;
use satchel_protocol::MethodKind;
use shim::Shim;

/// LSP's error code for a request the client cancelled.
const REQUEST_CANCELLED_CODE: i32 = -32800;

/// LSP's notification cancelling the call whose work-done progress runs under a token.
const PROGRESS_CANCEL_METHOD: &str = "window/workDoneProgress/cancel";

/// Replies waiting for the writer; a full queue makes request tasks wait (backpressure).
const WRITE_QUEUE: usize = 64;

/// Room kept in a reply for its envelope (`jsonrpc`, `id`) around the result.
const REPLY_ENVELOPE_BYTES: u32 = 1024;

/// Read buffer of a served stream.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// Size limits for one served stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// Largest request body accepted; larger ones are skipped and answered with -32007.
    pub max_request_bytes: u32,
    /// Largest reply body jsonrpsee will produce; larger ones become -32008 errors.
    pub max_response_bytes: u32,
}

impl Default for TransportLimits {
    /// 64 MiB each: agents send whole conversations in one request.
    fn default() -> Self {
        Self {
            max_request_bytes: 64 << 20,
            max_response_bytes: 64 << 20,
        }
    }
}

/// A method answered straight from the message text, on the blocking pool, instead of going
/// through jsonrpsee.
///
/// jsonrpsee reads a request's envelope (one pass over the text, a copy of the params) before
/// the method decodes its params (another pass). For a method whose requests carry a whole
/// conversation, megabytes on every call, those passes cost more than the method's own work.
/// The handler gets the message and the call's scope and returns the reply, or `None` to
/// let jsonrpsee answer instead (it must then have the method too, so that every error is
/// jsonrpsee's own); it must then leave the scope's admission untaken.
pub type DirectHandler = Arc<dyn Fn(&[u8], CallScope) -> Option<Vec<u8>> + Send + Sync>;

/// Told the id of a connection that has closed, to drop what was kept for it.
pub type CloseHandler = Arc<dyn Fn(u64) + Send + Sync>;

/// What a served stream answers: jsonrpsee's methods, and the methods answered directly.
#[derive(Clone)]
pub struct Service {
    /// Every method, for jsonrpsee.
    pub methods: Methods,
    /// Methods answered without jsonrpsee when the message is a plain, well-formed call.
    pub direct: Arc<HashMap<&'static str, DirectHandler>>,
    /// Runs when a connection closes.
    pub on_close: Option<CloseHandler>,
    /// Methods whose calls keep their connection's arrival order (see [`order`]).
    pub ordered: Arc<HashSet<&'static str>>,
}

impl From<Methods> for Service {
    fn from(methods: Methods) -> Self {
        Service {
            methods,
            direct: Arc::default(),
            on_close: None,
            ordered: Arc::default(),
        }
    }
}

/// Serves JSON-RPC on one byte stream until `reader` hits EOF, then waits for the requests
/// still in flight, writes their replies and returns.
///
/// Each message may be NDJSON or `Content-Length` framed; its reply uses the same framing.
/// Every request carries a [`ClientHandle`] in its extensions; responses from the client to
/// the handle's requests are routed to them. At EOF those still waiting fail with
/// [`ClientRequestError::Disconnected`]. Returns early with the error if reading or writing
/// the stream fails.
pub async fn serve<R, W>(reader: R, writer: W, service: Service, limits: TransportLimits) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with(reader, |rx| tokio::spawn(write_frames(writer, rx)), service, limits).await
}

/// [`serve`], with the replies written by blocking writes on a thread of their own.
///
/// For stdout: tokio's stdout hands every write, and every flush, to the blocking pool and
/// waits for it, two thread hand-offs per reply on the path of every call.
pub async fn serve_with_blocking_writer<R, W>(
    reader: R,
    writer: W,
    service: Service,
    limits: TransportLimits,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: std::io::Write + Send + 'static,
{
    let write = |rx| tokio::task::spawn_blocking(move || write_frames_blocking(writer, rx));
    serve_with(reader, write, service, limits).await
}

/// [`serve`] with the writer started by `start_writer`, which gets the queue's receiving end.
async fn serve_with<R>(
    reader: R,
    start_writer: impl FnOnce(queue::Receiver) -> JoinHandle<io::Result<()>>,
    service: Service,
    limits: TransportLimits,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (queue, rx) = WriteQueue::new(WRITE_QUEUE);
    let mut writer_task = start_writer(rx);
    let mut conn = Connection {
        shim: Arc::new(Shim::new(service.methods, limits)),
        direct: service.direct,
        ordered: service.ordered,
        peer: Arc::new(Peer::new(queue.downgrade())),
        queue,
        in_flight: Arc::default(),
        progress_calls: Arc::default(),
        next_seq: 0,
        arrivals: Arrivals::default(),
        max_result_bytes: limits.max_response_bytes.saturating_sub(REPLY_ENVELOPE_BYTES) as usize,
    };
    let connection_id = conn.peer.handle().connection_id();
    // Large reads: tokio's stdin reads on a blocking thread, one hop per fill, and a resent
    // history is megabytes.
    let mut frames = FrameReader::new(
        BufReader::with_capacity(READ_BUFFER_BYTES, reader),
        limits.max_request_bytes as usize,
    );
    loop {
        let next = tokio::select! {
            next = frames.next() => next?,
            // The writer stops early only when writing failed: nobody reads the replies.
            written = &mut writer_task => return joined(written),
        };
        let Some(Incoming { framing, frame }) = next else {
            break;
        };
        conn.peer.saw(framing);
        match frame {
            Frame::Message(body) => conn.dispatch(framing, body).await,
            Frame::TooBig(prefix) if Peek::response_in_prefix(&prefix) => {
                // Not answered (a response never is); the request it answers fails now rather
                // than at its timeout, when its id is in the first bytes.
                tracing::warn!(limit = limits.max_request_bytes, "skipped an oversized response");
                let id = Peek::id_in_prefix(&prefix).and_then(|raw| serde_json::from_str::<Id<'_>>(raw.get()).ok());
                conn.peer.fail_too_big(id.as_ref(), u64::from(limits.max_request_bytes));
            }
            Frame::TooBig(prefix) => {
                tracing::warn!(limit = limits.max_request_bytes, "skipped an oversized message");
                let id = Peek::id_in_prefix(&prefix);
                let reply = error_reply(id, &reject_too_big_request(limits.max_request_bytes));
                conn.queue.send(framing::encode(framing, reply)).await;
            }
            Frame::BadHeader(why) => {
                tracing::warn!("{why}");
                let reply = MethodResponse::error(Id::Null, ErrorCode::ParseError);
                conn.send(framing, reply).await;
            }
        }
    }
    // Dropping the connection fails the requests waiting for the client. Each request task
    // holds a sender, so the writer drains and ends once all have finished.
    drop(conn);
    if let Some(on_close) = &service.on_close {
        on_close(connection_id);
    }
    joined(writer_task.await)
}

/// Turns a finished writer task into the result of [`serve`].
fn joined(result: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
    result.map_err(io::Error::other)?
}

/// A request that is running and can still be cancelled.
struct InFlight {
    /// Tells this request apart from a later one that reuses its id.
    seq: u64,
    framing: Framing,
    abort: AbortHandle,
    /// Decides whether a cancel still stops the call (see [`CallToken`]).
    token: CallToken,
    /// The client's own id, when the call runs under an alias.
    alias: Option<Arc<IdAlias>>,
    /// The client's id as a `$/cancelRequest` names it.
    key: Option<IdKey>,
    /// A notification run under an id of satchel's own: cancelled (by its progress token),
    /// it gets no reply either.
    notification: bool,
}

/// An id jsonrpsee cannot give back as sent (its ids are strings, written back unescaped, and
/// unsigned 64-bit integers), replaced in the message by a string of satchel's own, and put
/// back in the reply as the client wrote it.
struct IdAlias {
    /// The JSON text of the stand-in id, quotes included.
    stand_in: String,
    /// The JSON text of the client's id.
    original: String,
}

impl IdAlias {
    /// Replaces the id at `start` in `body` (JSON text `original`) by a stand-in unique to
    /// this connection's call `seq`.
    fn put(body: &mut Vec<u8>, start: usize, original: String, seq: u64) -> Self {
        let stand_in = format!("\"satchel-alias-{seq}\"");
        body.splice(start..start + original.len(), stand_in.bytes());
        IdAlias { stand_in, original }
    }

    /// The reply with the client's id back in place of the stand-in (the first string equal
    /// to it: the envelope's `id` comes before the result).
    fn restore(&self, reply: Vec<u8>) -> Vec<u8> {
        let Some(at) = memchr::memmem::find(&reply, self.stand_in.as_bytes()) else {
            return reply;
        };
        let mut restored = Vec::with_capacity(reply.len());
        restored.extend_from_slice(&reply[..at]);
        restored.extend_from_slice(self.original.as_bytes());
        restored.extend_from_slice(&reply[at + self.stand_in.len()..]);
        restored
    }
}

type InFlightMap = Arc<Mutex<HashMap<Id<'static>, InFlight>>>;

/// A message that asks for a call, as [`Connection::read_call`] leaves it to be run.
struct ReadCall {
    /// The message, with a stand-in or given id where it needs one.
    body: Vec<u8>,
    /// The id it runs under.
    id: Option<Id<'static>>,
    method: Option<String>,
    /// The client's own id, when the call runs under a stand-in.
    alias: Option<Arc<IdAlias>>,
    /// A notification of a protocol method, run under an id of satchel's own.
    notification: bool,
}

/// Valid JSON that is not a request: jsonrpsee answers -32700 (it reads only requests, and
/// anything else it cannot read it takes for bad JSON), JSON-RPC wants -32600. `first` is the
/// first non-blank byte of `body`.
fn is_not_a_request(peek: Option<&Peek<'_>>, first: Option<u8>, body: &[u8]) -> bool {
    match peek {
        Some(p) => p.id.is_none() && !p.is_notification() && p.method.as_deref() != Some("$/cancelRequest"),
        None => {
            first != Some(b'{') && first != Some(b'[') && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
        }
    }
}

/// State of one served stream, owned by the read loop.
struct Connection {
    shim: Arc<Shim>,
    direct: Arc<HashMap<&'static str, DirectHandler>>,
    queue: WriteQueue,
    /// The client, as seen by method handlers.
    peer: Arc<Peer>,
    /// Requests that are running, by id. Whoever removes an entry (the request's task when
    /// it finishes, or a cancel) is the one that replies, so a request gets exactly one reply.
    in_flight: InFlightMap,
    /// Running calls by the progress token they report under (`window/workDoneProgress/cancel`).
    progress_calls: ProgressCalls,
    next_seq: u64,
    /// Admissions in arrival order.
    arrivals: Arrivals,
    /// Methods that take an admission.
    ordered: Arc<HashSet<&'static str>>,
    /// See [`CallScope::max_result_bytes`].
    max_result_bytes: usize,
}

impl Connection {
    /// Starts processing one message in its own task, or handles it here if it is a cancel
    /// or a response from the client.
    async fn dispatch(&mut self, framing: Framing, body: Vec<u8>) {
        if let Some(call) = self.read_call(framing, body).await {
            self.spawn_call(framing, call);
        }
    }

    /// Reads what a message asks for: `None` when it was handled here (a response, a cancel,
    /// a message answered with an error at once), else the call to run.
    async fn read_call(&mut self, framing: Framing, mut body: Vec<u8>) -> Option<ReadCall> {
        let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
        if first == Some(b'[') {
            body = self.route_batch(body)?;
        }
        // A batch or malformed message does not peek; jsonrpsee answers it as a whole.
        let mut peek = Peek::of(&body);
        // JSON text is UTF-8. An object that is not, with its bad bytes where routing reads
        // (an id, a key), does not peek; jsonrpsee would skip the bad member unread, take the
        // message for a notification and answer nothing. Checked only when peeking failed: a
        // resent history is megabytes.
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
        if method.as_deref() == Some("$/cancelRequest") && id.is_none() {
            self.cancel(&body).await;
            return None;
        }
        if method.as_deref() == Some(PROGRESS_CANCEL_METHOD) && id.is_none() {
            self.cancel_progress(&body).await;
            return None;
        }
        // jsonrpsee drops client notifications; one of a protocol method (a `context.usage`
        // sent after the model call) runs as a call under an id of ours, its reply dropped.
        let notification = notification_shape && method.as_deref().is_some_and(|m| MethodKind::from_name(m).is_some());
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
        // Only a single call with an id: notifications and batches keep jsonrpsee's handling.
        let direct = method
            .as_deref()
            .filter(|_| id.is_some())
            .and_then(|m| self.direct.get(m))
            .cloned();

        let seq = self.next_seq;
        self.next_seq += 1;
        let shim = Arc::clone(&self.shim);
        let token = CallToken::new();
        let queue = self.queue.clone();
        let in_flight = Arc::clone(&self.in_flight);
        // Holding the lock while spawning means the task cannot finish and look for its
        // entry before the entry exists.
        let mut map = lock(&self.in_flight);
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
            let reply = answer(&shim, direct, scope, body, panic_id).await;
            if let Some(id) = key {
                let mut map = lock(&in_flight);
                if map.get(&id).is_none_or(|entry| entry.seq != seq) {
                    return; // cancelled, and the cancel has replied
                }
                map.remove(&id);
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
    /// that). A cancelled call's handler may still be running, undoing what it did; it holds
    /// its session until then, so whatever the client sends next on that session sees the
    /// session as it was before the cancelled call.
    async fn cancel(&self, body: &[u8]) {
        let Some(key) = serde_json::from_slice::<Cancel>(body)
            .ok()
            .and_then(|Cancel { params }| IdKey::of(params.id.get()))
        else {
            tracing::warn!("$/cancelRequest without a string or number params.id");
            return;
        };
        let cancelled = {
            let mut map = lock(&self.in_flight);
            // Several calls may run under one id when some of them are aliased: the oldest.
            let named = (map.iter())
                .filter(|(_, entry)| entry.key.as_ref() == Some(&key))
                .min_by_key(|(_, entry)| entry.seq)
                .map(|(id, _)| id.clone());
            match named {
                Some(id) if map[&id].token.cancel() => map.remove(&id).map(|entry| (id, entry)),
                _ => None, // already answered, never existed, or committed: the result comes
            }
        };
        if let Some((id, entry)) = cancelled {
            self.cancelled(id, entry).await;
        }
    }

    /// Cancels the call whose work-done progress runs under the token named by a
    /// `window/workDoneProgress/cancel`, as [`cancel`](Self::cancel) does for its id.
    async fn cancel_progress(&self, body: &[u8]) {
        let Some((id, seq)) = progress::call_of(&self.progress_calls, body) else {
            return;
        };
        let cancelled = {
            let mut map = lock(&self.in_flight);
            match map.get(&id) {
                Some(entry) if entry.seq == seq && entry.token.cancel() => map.remove(&id).map(|entry| (id, entry)),
                _ => None, // already answered, or committed: the result comes
            }
        };
        if let Some((id, entry)) = cancelled {
            self.cancelled(id, entry).await;
        }
    }

    /// Stops the cancelled call `entry` and replies -32800 for it.
    async fn cancelled(&self, id: Id<'static>, entry: InFlight) {
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

    /// Queues a reply produced here rather than by jsonrpsee.
    async fn send(&self, framing: Framing, reply: MethodResponse) {
        let body = reply.into_json();
        self.queue.send(framing::encode(framing, body.get().as_bytes())).await;
    }

    /// Routes the responses in a batch to their requests and returns the rest of the batch
    /// for jsonrpsee, or `None` if nothing is left to answer.
    ///
    /// Clients send a batch of responses when they answer several of our requests at once.
    fn route_batch(&self, body: Vec<u8>) -> Option<Vec<u8>> {
        let calls = {
            let Ok(items) = serde_json::from_slice::<Vec<&RawValue>>(&body) else {
                return Some(body); // jsonrpsee reports what is wrong with it
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
/// handler takes it), else through jsonrpsee. A direct handler that panics is answered with
/// -32603, as jsonrpsee answers a method that panics: a bug must not leave a call unanswered.
async fn answer(
    shim: &Shim,
    direct: Option<DirectHandler>,
    scope: CallScope,
    body: Vec<u8>,
    id: Id<'static>,
) -> Option<Vec<u8>> {
    let Some(handler) = direct else {
        return shim.call(body, scope).await;
    };
    let direct_scope = scope.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let reply = handler(&body, direct_scope);
        (body, reply)
    })
    .await;
    match answered {
        Ok((_, Some(reply))) => Some(reply),
        Ok((body, None)) => shim.call(body, scope).await,
        Err(e) => {
            tracing::error!("a direct method panicked: {e}");
            let error = ErrorObject::borrowed(ErrorCode::InternalError.code(), "Internal error", None);
            Some(MethodResponse::error(id, error).into_json().get().as_bytes().to_vec())
        }
    }
}

impl Drop for Connection {
    /// The stream has ended (or failed): no answer from the client can arrive any more.
    fn drop(&mut self) {
        self.peer.close();
    }
}

fn lock(map: &InFlightMap) -> std::sync::MutexGuard<'_, HashMap<Id<'static>, InFlight>> {
    // Nothing panics while holding the lock, and the map stays consistent if it did.
    map.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use jsonrpsee::RpcModule;
    use jsonrpsee::types::ErrorObjectOwned;
    use serde_json::{Value, json};
    use tokio::io::{AsyncWriteExt, DuplexStream};
    use tokio::task::JoinHandle;

    use super::*;

    fn methods() -> Methods {
        let mut module = RpcModule::new(());
        module
            .register_method("echo", |params, _, _| params.parse::<Value>())
            .expect("fresh name");
        module
            .register_async_method("sleep", |params, _, _| async move {
                let ms: u64 = params.one()?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, ErrorObjectOwned>(ms)
            })
            .expect("fresh name");
        module
            .register_method("fail", |_, _, _| {
                Err::<(), _>(ErrorObject::owned(4242, "boom", None::<()>))
            })
            .expect("fresh name");
        module.into()
    }

    /// A peer talking to `serve` over in-memory pipes.
    pub(super) struct Client {
        input: DuplexStream,
        output: FrameReader<BufReader<DuplexStream>>,
        server: JoinHandle<io::Result<()>>,
    }

    fn start(limits: TransportLimits) -> Client {
        start_with(methods(), limits)
    }

    /// Serves `methods` to a new [`Client`].
    pub(super) fn start_with(methods: Methods, limits: TransportLimits) -> Client {
        start_service(methods.into(), limits)
    }

    /// Serves `service` to a new [`Client`].
    fn start_service(service: Service, limits: TransportLimits) -> Client {
        let (input, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, output) = tokio::io::duplex(1 << 16);
        Client {
            input,
            output: FrameReader::new(BufReader::new(output), usize::MAX),
            server: tokio::spawn(serve(server_in, server_out, service, limits)),
        }
    }

    pub(super) fn call(id: Value, method: &str, params: Value) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    }

    pub(super) fn notify(method: &str, params: Value) -> String {
        json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
    }

    impl Client {
        pub(super) async fn send(&mut self, framing: Framing, body: &str) {
            self.send_raw(&framing::encode(framing, body.as_bytes())).await;
        }

        async fn send_raw(&mut self, bytes: &[u8]) {
            self.input.write_all(bytes).await.expect("pipe open");
        }

        pub(super) async fn recv(&mut self) -> (Framing, Value) {
            let next = tokio::time::timeout(Duration::from_secs(5), self.output.next());
            let incoming = next.await.expect("reply in time").expect("pipe open");
            parse(incoming.expect("a reply, not EOF"))
        }

        /// Closes the input and returns every reply written until `serve` returned.
        pub(super) async fn finish(mut self) -> Vec<(Framing, Value)> {
            drop(self.input);
            let mut replies = Vec::new();
            while let Some(incoming) = self.output.next().await.expect("pipe open") {
                replies.push(parse(incoming));
            }
            self.server.await.expect("no panic").expect("serve ok");
            replies
        }
    }

    fn parse(incoming: Incoming) -> (Framing, Value) {
        let Frame::Message(body) = incoming.frame else {
            panic!("bad frame {:?}", incoming.frame);
        };
        (incoming.framing, serde_json::from_slice(&body).expect("JSON reply"))
    }

    pub(super) fn by_id(mut replies: Vec<(Framing, Value)>) -> Vec<(Framing, Value)> {
        replies.sort_by_key(|(_, reply)| reply["id"].to_string());
        replies
    }

    #[tokio::test]
    async fn replies_in_the_framing_of_each_request() {
        let mut client = start(TransportLimits::default());
        client.send(Framing::Ndjson, &call(json!(1), "echo", json!([1]))).await;
        client.send_raw(b"\r\n\n").await;
        let second = call(json!(2), "echo", json!({"a": "b"}));
        client.send(Framing::ContentLength, &second).await;
        let third = call(json!(3), "echo", json!(["x\ny"]));
        client.send_raw(format!("{third}\r\n").as_bytes()).await;
        let replies = by_id(client.finish().await);
        assert_eq!(
            replies,
            vec![
                (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 1, "result": [1]})),
                (
                    Framing::ContentLength,
                    json!({"jsonrpc": "2.0", "id": 2, "result": {"a": "b"}})
                ),
                (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 3, "result": ["x\ny"]})),
            ]
        );
    }

    #[tokio::test]
    async fn batch_gets_an_array_and_notifications_get_nothing() {
        let mut client = start(TransportLimits::default());
        let batch = format!(
            "[{},{},{}]",
            call(json!(1), "echo", json!([1])),
            call(json!(2), "nope", json!([])),
            notify("echo", json!([3])),
        );
        client.send(Framing::ContentLength, &batch).await;
        for method in ["initialized", "$/setTrace", "exit", "echo"] {
            client.send(Framing::Ndjson, &notify(method, json!({}))).await;
        }
        client.send(Framing::Ndjson, &call(json!(4), "echo", json!([4]))).await;
        let replies = by_id(client.finish().await);
        assert_eq!(replies.len(), 2, "{replies:?}");
        let (framing, array) = &replies[1];
        assert_eq!(*framing, Framing::ContentLength);
        assert_eq!(array[0]["result"], json!([1]));
        assert_eq!(array[1]["error"]["code"], json!(-32601));
        assert_eq!(replies[0].1["id"], json!(4));
    }

    #[tokio::test]
    async fn invalid_messages_get_json_rpc_errors() {
        let mut client = start(TransportLimits::default());
        client.send(Framing::Ndjson, "{bad json").await;
        client.send(Framing::Ndjson, r#"{"foo":1,"id":6}"#).await;
        client.send(Framing::Ndjson, &call(json!(7), "nope", json!([]))).await;
        client.send(Framing::Ndjson, &call(json!(8), "fail", json!([]))).await;
        client
            .send(Framing::Ndjson, &call(json!(9), "sleep", json!(["x"])))
            .await;
        client.send_raw(b"Content-Length: abc\r\n\r\n").await;
        client
            .send(Framing::ContentLength, &call(json!(10), "echo", json!([])))
            .await;
        let replies = client.finish().await;
        let codes: Vec<(Value, Value)> = by_id(replies)
            .into_iter()
            .map(|(_, r)| (r["id"].clone(), r["error"]["code"].clone()))
            .collect();
        assert_eq!(
            codes,
            vec![
                (json!(10), Value::Null),
                (json!(6), json!(-32600)),
                (json!(7), json!(-32601)),
                (json!(8), json!(4242)),
                (json!(9), json!(-32602)),
                (Value::Null, json!(-32700)),
                (Value::Null, json!(-32700)),
            ]
        );
    }

    #[tokio::test]
    async fn a_message_that_is_not_utf8_gets_a_parse_error_wherever_the_bad_bytes_are() {
        let mut client = start(TransportLimits::default());
        let bodies: [&[u8]; 5] = [
            b"{\"jsonrpc\":\"2.0\",\"id\":\"fz-\xff1\",\"method\":\"echo\",\"params\":[1]}",
            b"{\"jsonrpc\":\"2.0\",\"id\":\"\xed\xa0\x80\",\"method\":\"echo\",\"params\":[1]}",
            b"{\"jsonrpc\":\"2.0\",\"x\xc3\":1,\"id\":5,\"method\":\"echo\",\"params\":[1]}",
            b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ech\xc0\xafo\",\"params\":[1]}",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"\xff\"],\"id\":\"a\xf4\x90\x80\x80\"}",
        ];
        for (framing, body) in [Framing::Ndjson, Framing::ContentLength]
            .into_iter()
            .flat_map(|f| bodies.map(|b| (f, b)))
        {
            client.send_raw(&framing::encode(framing, body)).await;
            let (got, reply) = client.recv().await;
            assert_eq!(got, framing);
            assert_eq!(
                (&reply["id"], &reply["error"]["code"]),
                (&Value::Null, &json!(-32700)),
                "{}: {reply}",
                String::from_utf8_lossy(body)
            );
        }
        // Bad bytes inside a call's params, past what routing reads: the call's id is known.
        let body = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"echo\",\"params\":[\"\xff\"]}";
        client.send_raw(&framing::encode(Framing::Ndjson, body)).await;
        let (_, reply) = client.recv().await;
        assert!(reply["error"]["code"].is_i64(), "{reply}");
        client.send(Framing::Ndjson, &call(json!(8), "echo", json!([8]))).await;
        assert_eq!(client.recv().await.1["result"], json!([8]));
    }

    #[tokio::test]
    async fn an_invalid_id_gets_invalid_request_and_any_number_is_echoed() {
        let mut client = start(TransportLimits::default());
        for id in [json!(true), json!([1]), json!({"n": 1})] {
            client.send(Framing::Ndjson, &call(id, "echo", json!([1]))).await;
            let (_, reply) = client.recv().await;
            assert_eq!(reply["id"], Value::Null, "{reply}");
            assert_eq!(reply["error"]["code"], json!(-32600), "{reply}");
        }
        // Any number is a valid id, even one jsonrpsee cannot hold: it comes back as sent.
        for id in ["-7", "1.5", "18446744073709551616"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[1]}}"#);
            client.send(Framing::Ndjson, &body).await;
            let (_, reply) = client.recv().await;
            assert_eq!(reply["result"], json!([1]), "{reply}");
        }
        let body = r#"{"jsonrpc":"2.0","id":-7,"method":"echo","params":["raw"]}"#;
        client.send(Framing::ContentLength, body).await;
        let (_, reply) = client.recv().await;
        assert_eq!(
            (&reply["id"], &reply["result"]),
            (&json!(-7), &json!(["raw"])),
            "{reply}"
        );
        client.send(Framing::Ndjson, &call(json!(2), "echo", json!([2]))).await;
        assert_eq!(client.recv().await.1["result"], json!([2]));
    }

    #[test]
    fn numbers_name_the_same_id_by_value() {
        let key = |raw: &str| IdKey::of(raw);
        for (a, b) in [
            ("1e3", "1000"),
            ("1000", "1.000e+3"),
            ("-0", "0.0"),
            ("-7", "-70e-1"),
            ("0.25", "25E-2"),
        ] {
            assert_eq!(key(a), key(b), "{a} {b}");
            assert!(key(a).is_some());
        }
        for (a, b) in [
            ("1", "-1"),
            ("18446744073709551616", "18446744073709551617"),
            ("1", r#""1""#),
        ] {
            assert_ne!(key(a), key(b), "{a} {b}");
        }
        assert_eq!(key(r#""q\u00e9""#), key(r#""qé""#));
        for invalid in ["true", "null", "{}", "1.", ".5", "1e", "--1", "1e99999999999999999999"] {
            assert_eq!(key(invalid), None, "{invalid}");
        }
    }

    #[test]
    fn an_oversized_message_s_id_is_read_from_its_prefix() {
        let id = |prefix: &str| Peek::id_in_prefix(prefix.as_bytes()).map(|raw| raw.get().to_owned());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":"xx"#).as_deref(),
            Some("7")
        );
        assert_eq!(id(r#" {"id":-1.5e3,"params":["#).as_deref(), Some("-1.5e3"));
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":"a\"b","#).as_deref(), Some(r#""a\"b""#));
        // Cut inside the id, after params, of a type JSON-RPC does not allow, or not an object.
        for prefix in [
            r#"{"id":12"#,
            r#"{"id":"ab"#,
            r#"{"params":{"id":1},"x":"#,
            r#"{"id":true,"#,
            "[1,",
            r#"{"id":1,"id":2,"#,
        ] {
            assert_eq!(id(prefix), None, "{prefix}");
        }
    }

    #[tokio::test]
    async fn valid_json_that_is_not_a_request_gets_invalid_request_and_bad_json_a_parse_error() {
        let mut client = start(TransportLimits::default());
        for body in [
            "{}",
            r#"{"foo":1}"#,
            r#""x""#,
            "42",
            "null",
            "true",
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"id":[1]}"#,
        ] {
            client.send(Framing::Ndjson, body).await;
            let (_, reply) = client.recv().await;
            assert_eq!(
                (&reply["id"], &reply["error"]["code"]),
                (&Value::Null, &json!(-32600)),
                "{body}: {reply}"
            );
        }
        client.send(Framing::Ndjson, "[1]").await;
        assert_eq!(client.recv().await.1[0]["error"]["code"], json!(-32600));
        for body in ["{bad", "nul", "42 43"] {
            client.send(Framing::Ndjson, body).await;
            let (_, reply) = client.recv().await;
            assert_eq!(
                (&reply["id"], &reply["error"]["code"]),
                (&Value::Null, &json!(-32700)),
                "{body}: {reply}"
            );
        }
        // A notification gets nothing; the next call is answered.
        client.send(Framing::Ndjson, &notify("echo", json!([1]))).await;
        client.send(Framing::Ndjson, &call(json!(1), "echo", json!([1]))).await;
        assert_eq!(client.recv().await.1["id"], json!(1));
    }

    #[tokio::test]
    async fn a_direct_method_that_panics_is_answered_with_an_internal_error() {
        let mut service = Service::from(methods());
        let boom: DirectHandler = Arc::new(|_, _| panic!("a bug"));
        service.direct = Arc::new(HashMap::from([("echo", boom)]));
        let mut client = start_service(service, TransportLimits::default());
        client.send(Framing::Ndjson, &call(json!(-3), "echo", json!([1]))).await;
        let (_, reply) = client.recv().await;
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&json!(-3), &json!(-32603)),
            "{reply}"
        );
        client.send(Framing::Ndjson, &call(json!(4), "sleep", json!([1]))).await;
        assert_eq!(client.recv().await.1["result"], json!(1), "the daemon keeps serving");
    }

    #[tokio::test]
    async fn fast_reply_overtakes_slow_one() {
        let mut client = start(TransportLimits::default());
        client
            .send(Framing::Ndjson, &call(json!(1), "sleep", json!([300])))
            .await;
        client
            .send(Framing::Ndjson, &call(json!(2), "sleep", json!([10])))
            .await;
        assert_eq!(client.recv().await.1["id"], json!(2));
        assert_eq!(client.recv().await.1["id"], json!(1));
    }

    #[tokio::test]
    async fn cancel_request_aborts_the_call() {
        let mut client = start(TransportLimits::default());
        client
            .send(Framing::ContentLength, &call(json!("a"), "sleep", json!([5000])))
            .await;
        client
            .send(Framing::Ndjson, &call(json!(7), "sleep", json!([5000])))
            .await;
        let started = Instant::now();
        for id in [json!(99), json!("a"), json!(7)] {
            let cancel = notify("$/cancelRequest", json!({"id": id}));
            client.send(Framing::Ndjson, &cancel).await;
        }
        let cancelled = by_id(vec![client.recv().await, client.recv().await]);
        let error = json!({"code": -32800, "message": "Request cancelled"});
        assert_eq!(
            cancelled,
            vec![
                (
                    Framing::ContentLength,
                    json!({"jsonrpc": "2.0", "id": "a", "error": error})
                ),
                (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 7, "error": error})),
            ]
        );
        client.send(Framing::Ndjson, &call(json!(8), "echo", json!([]))).await;
        let rest = client.finish().await;
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(rest[0].1["id"], json!(8));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn eof_waits_for_requests_in_flight() {
        let mut client = start(TransportLimits::default());
        client
            .send(Framing::Ndjson, &call(json!(1), "sleep", json!([200])))
            .await;
        let replies = client.finish().await;
        assert_eq!(
            replies,
            vec![(Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 1, "result": 200}))]
        );
    }

    #[tokio::test]
    async fn oversized_messages_are_skipped_in_both_framings() {
        let mut client = start(TransportLimits {
            max_request_bytes: 1024,
            max_response_bytes: 512,
        });
        let big = call(json!(1), "echo", json!(["x".repeat(2000)]));
        // Answered under the id the message's first bytes carry.
        let too_big = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32007, "message": "Request is too big", "data": "Exceeded max limit of 1024"},
        });
        for framing in [Framing::Ndjson, Framing::ContentLength] {
            client.send(framing, &big).await;
            assert_eq!(client.recv().await, (framing, too_big.clone()));
            client.send(framing, &call(json!(2), "echo", json!([2]))).await;
            assert_eq!(
                client.recv().await,
                (framing, json!({"jsonrpc": "2.0", "id": 2, "result": [2]}))
            );
        }
        let long_reply = call(json!(3), "echo", json!(["x".repeat(800)]));
        client.send(Framing::Ndjson, &long_reply).await;
        assert_eq!(client.recv().await.1["error"]["code"], json!(-32008));
    }
    #[tokio::test]
    async fn write_failure_ends_serve_with_the_error() {
        let Client {
            mut input,
            output,
            server,
        } = start(TransportLimits::default());
        drop(output);
        let request = call(json!(1), "echo", json!([]));
        let frame = framing::encode(Framing::Ndjson, request.as_bytes());
        input.write_all(&frame).await.expect("pipe open");
        let result = tokio::time::timeout(Duration::from_secs(5), server).await;
        let error = result.expect("serve returns").expect("no panic").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    }
}
