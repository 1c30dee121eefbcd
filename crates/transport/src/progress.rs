//! LSP's `window/workDoneProgress/cancel {token}`: a client may cancel a call by the token
//! its progress runs under, when the progress `begin` said `cancellable: true`. It has the
//! same effect as `$/cancelRequest` for that call.
//!
//! A call's handler registers the token when it begins its progress ([`ProgressCancel::register`])
//! and the registration ends when it is dropped; the connection looks the token up here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use jsonrpsee::types::Id;
use serde_json::Value;

use crate::peek::IdKey;

/// The running calls of one connection by the progress token they report under (as an
/// [`IdKey`], so `7` and `7.0` are one token): the call's id in the in-flight map and its
/// sequence number (which tells it apart from a later call that reuses the id).
pub(crate) type ProgressCalls = Arc<Mutex<HashMap<IdKey, (Id<'static>, u64)>>>;

/// What lets one call be cancelled by its progress token.
#[derive(Clone)]
pub struct ProgressCancel {
    calls: ProgressCalls,
    /// The call's id and sequence number; `None` for a call that cannot be cancelled (a second
    /// running call under the same id, or one without an id).
    call: Option<(Id<'static>, u64)>,
}

impl ProgressCancel {
    pub(crate) fn new(calls: ProgressCalls, call: Option<(Id<'static>, u64)>) -> Self {
        ProgressCancel { calls, call }
    }

    /// From now until the returned registration is dropped, a `window/workDoneProgress/cancel`
    /// naming `token` cancels this call. `None` when the call cannot be cancelled or `token`
    /// is neither a string nor a number.
    pub fn register(&self, token: &Value) -> Option<ProgressRegistration> {
        let call = self.call.clone()?;
        let key = IdKey::of(&serde_json::to_string(token).ok()?)?;
        let seq = call.1;
        lock(&self.calls).insert(key.clone(), call);
        Some(ProgressRegistration {
            calls: Arc::clone(&self.calls),
            key,
            seq,
        })
    }
}

/// A token registered by [`ProgressCancel::register`]; unregistered when dropped.
pub struct ProgressRegistration {
    calls: ProgressCalls,
    key: IdKey,
    seq: u64,
}

impl Drop for ProgressRegistration {
    fn drop(&mut self) {
        let mut calls = lock(&self.calls);
        // A client may reuse a token for a later call: that registration stays.
        if calls.get(&self.key).is_some_and(|(_, seq)| *seq == self.seq) {
            calls.remove(&self.key);
        }
    }
}

/// The call reporting under the token named by a `window/workDoneProgress/cancel` message
/// `body`, if any.
pub(crate) fn call_of(calls: &ProgressCalls, body: &[u8]) -> Option<(Id<'static>, u64)> {
    #[derive(serde::Deserialize)]
    struct Cancel<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        token: &'a serde_json::value::RawValue,
    }
    let Some(key) = serde_json::from_slice::<Cancel>(body)
        .ok()
        .and_then(|c| IdKey::of(c.params.token.get()))
    else {
        tracing::warn!("window/workDoneProgress/cancel without a string or number params.token");
        return None;
    };
    let call = lock(calls).get(&key).cloned();
    if call.is_none() {
        tracing::debug!(?key, "window/workDoneProgress/cancel for no running progress");
    }
    call
}

fn lock(calls: &ProgressCalls) -> MutexGuard<'_, HashMap<IdKey, (Id<'static>, u64)>> {
    calls.lock().unwrap_or_else(PoisonError::into_inner)
}
