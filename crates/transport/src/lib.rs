//! JSON-RPC 2.0 over a byte stream (stdio, a Unix socket), the way LSP servers speak it, for
//! the methods of a jsonrpsee [`RpcModule`](jsonrpsee::RpcModule).
//!
//! jsonrpsee has no stream transport, and its HTTP and WebSocket servers are not what an
//! editor or an agent speaks, so this crate is one: it cuts the stream into messages, runs
//! every message in its own task so a slow call never blocks a fast one, hands each to the
//! module's method table directly (no HTTP in between), and writes the replies in completion
//! order through a single writer, so frames never interleave. It also does what jsonrpsee's
//! servers leave out: LSP's `$/cancelRequest` and `window/workDoneProgress/cancel`, a
//! notification of a served method run as a call, the connection's arrival order for the
//! methods that need it, and requests from a handler back to its own client, whose responses
//! are routed here before the method table sees them.
//!
//! It knows frames, ids, concurrency and cancellation, and nothing of the daemon's methods:
//! which methods keep their arrival order, which are answered straight from the message text,
//! and what a call's cancellation token is (the engine's, which a call commits) are given by
//! the caller in a [`Service`].
//!
//! # Layout
//!
//! - [`serve`](serve()), [`serve_with_blocking_writer`], [`accept_loop`] (`serve.rs`): the
//!   entry points, one stream each (stdio, a socket connection) or a listener's connections.
//! - `connection`: one stream's read loop state: what each message is, and the task that
//!   runs each call.
//! - `router`: one message through jsonrpsee's method table, as jsonrpsee's own server
//!   would answer it; `direct`: [`answer_call`], a call answered from its text in one pass.
//! - `cancel`: the calls in flight, `$/cancelRequest`, and the [`Cancellation`] a call
//!   carries; `progress`: cancelling a call by its work-done progress token.
//! - `order`: [`Admission`], a call's place in its connection's arrival order.
//! - `client`: [`ClientHandle`], requests and notifications from a handler to its client.
//! - `framing` (NDJSON lines and `Content-Length` frames), `peek` (what a frame is, read in
//!   one borrowing pass; ids compared by value), `ids` (ids the transport puts in a message),
//!   `queue` (the single writer and its backpressure).

mod cancel;
mod client;
mod connection;
mod direct;
mod framing;
mod ids;
mod order;
mod peek;
mod progress;
mod queue;
mod router;
mod serve;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jsonrpsee::Methods;

pub use cancel::Cancellation;
pub use client::{ClientHandle, ClientRequestError};
pub use direct::answer_call;
pub use order::{Admission, AdmissionSlot};
pub use progress::{ProgressCancel, ProgressRegistration};
pub use serve::{accept_loop, serve, serve_with_blocking_writer};

/// Size limits for one served stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// Largest request body accepted; larger ones are skipped and answered with -32007.
    pub max_request_bytes: u32,
    /// Largest reply body a method may produce; larger ones become -32008 errors.
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

/// What the transport gives each request's handler besides the params: jsonrpsee passes it
/// in the request's extensions (`extensions.get::<CallScope<T>>()`).
#[derive(Clone)]
pub struct CallScope<T> {
    /// The client that sent it.
    pub client: ClientHandle,
    /// Its cancellation: `$/cancelRequest` cancels it unless the call has committed.
    pub token: T,
    /// Its place in the connection's arrival order.
    pub admission: AdmissionSlot,
    /// The largest `result` a reply on this connection may carry, in bytes of JSON: the
    /// transport's reply limit less room for the envelope. A handler must fail a call whose
    /// result would be larger before the call takes effect.
    pub max_result_bytes: usize,
    /// Lets `window/workDoneProgress/cancel` cancel the call by its progress token, like
    /// `$/cancelRequest` by its id.
    pub progress: ProgressCancel,
}

/// A method answered straight from the message text, on the blocking pool, instead of going
/// through jsonrpsee's method table.
///
/// jsonrpsee reads a request's envelope (one pass over the text, a copy of the params) before
/// the method decodes its params (another pass). For a method whose requests carry a whole
/// conversation, megabytes on every call, those passes cost more than the method's own work.
/// The handler gets the message and the call's scope and returns the reply ([`answer_call`]
/// writes one), or `None` to let the method table answer instead (it must then have the
/// method too, so that every error is jsonrpsee's own); it must then leave the scope's
/// admission untaken.
pub type DirectHandler<T> = Arc<dyn Fn(&[u8], CallScope<T>) -> Option<Vec<u8>> + Send + Sync>;

/// Told the id of a connection that has closed, to drop what was kept for it.
pub type CloseHandler = Arc<dyn Fn(u64) + Send + Sync>;

/// What a served stream answers, and what the transport must know of its methods; `T` is the
/// cancellation token each call carries.
///
/// A notification (a message without an id) of a method in `methods` runs as a call under
/// an id of the transport's own, its reply dropped: jsonrpsee's method table answers only
/// calls.
#[derive(Clone)]
pub struct Service<T> {
    /// Every method.
    pub methods: Methods,
    /// Methods answered without the method table when the message is a plain, well-formed
    /// call.
    pub direct: Arc<HashMap<&'static str, DirectHandler<T>>>,
    /// Runs when a connection closes.
    pub on_close: Option<CloseHandler>,
    /// Methods whose calls keep their connection's arrival order (see [`Admission`]).
    pub ordered: Arc<HashSet<&'static str>>,
}

impl<T> From<Methods> for Service<T> {
    fn from(methods: Methods) -> Self {
        Service {
            methods,
            direct: Arc::default(),
            on_close: None,
            ordered: Arc::default(),
        }
    }
}
