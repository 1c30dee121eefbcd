//! Cancelling calls: the calls of a connection that are running ([`InFlightCalls`]), and the
//! token each carries ([`Cancellation`]), which decides whether a cancel still stops it.
//!
//! LSP's `$/cancelRequest {id}` names a call by its id (compared by value, see
//! [`IdKey`]); `window/workDoneProgress/cancel {token}` by its progress token (see
//! [`progress`](crate::progress)). Either replies -32800 for the call at once, unless the call
//! has passed its commit point: its result is then sent as usual (LSP allows that).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use jsonrpsee::types::Id;
use tokio::task::AbortHandle;

use crate::framing::Framing;
use crate::ids::IdAlias;
use crate::peek::IdKey;

/// A call's cancellation as the transport drives it; the caller chooses the type (the daemon
/// uses the engine's token, which a call commits before its first effect that cannot be
/// undone).
///
/// The transport makes a fresh one (`Default`) for every call and puts it in the call's
/// [`CallScope`](crate::CallScope). A `$/cancelRequest` for the call calls
/// [`cancel`](Self::cancel): when that returns true the call is answered -32800 at once and
/// its task stopped, else the call's own result is sent. A request to the client on behalf
/// of the call ([`ClientHandle::request_for_call`](crate::ClientHandle::request_for_call))
/// stops waiting once [`is_cancelled`](Self::is_cancelled).
pub trait Cancellation: Clone + Default + Send + Sync + 'static {
    /// Cancels the call unless it has committed. `true`: the call will have no effect.
    fn cancel(&self) -> bool;

    /// Whether the call was cancelled.
    fn is_cancelled(&self) -> bool;
}

/// A request that is running and can still be cancelled.
pub(crate) struct InFlight<T> {
    /// Tells this request apart from a later one that reuses its id.
    pub(crate) seq: u64,
    pub(crate) framing: Framing,
    pub(crate) abort: AbortHandle,
    /// Decides whether a cancel still stops the call.
    pub(crate) token: T,
    /// The client's own id, when the call runs under an alias.
    pub(crate) alias: Option<Arc<IdAlias>>,
    /// The client's id as a `$/cancelRequest` names it.
    pub(crate) key: Option<IdKey>,
    /// A notification run under an id of the transport's own: cancelled (by its progress
    /// token), it gets no reply either.
    pub(crate) notification: bool,
}

/// The requests of one connection that are running, by id. Whoever removes an entry (the
/// request's task when it finishes, or a cancel) is the one that replies, so a request gets
/// exactly one reply.
pub(crate) struct InFlightCalls<T>(Arc<Mutex<HashMap<Id<'static>, InFlight<T>>>>);

impl<T> Clone for InFlightCalls<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Default for InFlightCalls<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T: Cancellation> InFlightCalls<T> {
    /// The map, to look an id up and track a call while its task is being spawned.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<Id<'static>, InFlight<T>>> {
        // Nothing panics while holding the lock, and the map stays consistent if it did.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops tracking call `seq` under `id` as it finishes; false if a cancel took it first
    /// (and has replied).
    pub(crate) fn finish(&self, id: &Id<'static>, seq: u64) -> bool {
        let mut map = self.lock();
        if map.get(id).is_none_or(|entry| entry.seq != seq) {
            return false;
        }
        map.remove(id);
        true
    }

    /// Cancels the call a `$/cancelRequest` names by `key` and takes it; `None` when it has
    /// already been answered, never existed, or has committed (its result comes).
    pub(crate) fn cancel_named(&self, key: &IdKey) -> Option<(Id<'static>, InFlight<T>)> {
        let mut map = self.lock();
        // Several calls may run under one id when some of them are aliased: the oldest.
        let named = (map.iter())
            .filter(|(_, entry)| entry.key.as_ref() == Some(key))
            .min_by_key(|(_, entry)| entry.seq)
            .map(|(id, _)| id.clone());
        match named {
            Some(id) if map[&id].token.cancel() => map.remove(&id).map(|entry| (id, entry)),
            _ => None,
        }
    }

    /// Cancels call `seq` under `id` and takes it; `None` when it has already been answered
    /// or has committed (its result comes).
    pub(crate) fn cancel_call(&self, id: Id<'static>, seq: u64) -> Option<(Id<'static>, InFlight<T>)> {
        let mut map = self.lock();
        match map.get(&id) {
            Some(entry) if entry.seq == seq && entry.token.cancel() => map.remove(&id).map(|entry| (id, entry)),
            _ => None,
        }
    }
}
