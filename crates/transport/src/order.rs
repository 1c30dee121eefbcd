//! The order calls arrived in on one connection, kept for handlers that run in parallel.
//!
//! Only the methods a [`Service`](crate::Service) names as ordered take part (the daemon
//! names those that queue on a session, and those that change the connection's state, which
//! later calls must see). The others run as soon as they arrive.
//!
//! Every message runs in its own task, and a handler learns which queue (a session's) it
//! needs only once it has read its params. So each call gets an [`Admission`]: a place in the
//! connection's chain. A handler waits until every earlier call of the connection has been
//! admitted (taken its place in its queue, or said it needs none), takes its own
//! place, and lets the next call in. Params are still read in parallel; only the cheap step
//! of queueing is serialised. A call that ends without using its admission (an error, a
//! method with no session) releases it when dropped, so the chain never stalls.
//!
//! The task of a call waits for the earlier calls' admission asynchronously
//! ([`AdmissionSlot::previous_admitted`]) before its handler takes a thread of the blocking
//! pool: a burst of pipelined calls never fills the pool with threads that wait for a call
//! which has no thread yet.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Opens once, when the call holding it has been admitted.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// Wakes the tasks waiting asynchronously.
    opened_async: tokio::sync::Notify,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.opened.notify_all();
        self.opened_async.notify_waiters();
    }

    fn is_open(&self) -> bool {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn opened(&self) {
        loop {
            let notified = self.opened_async.notified();
            tokio::pin!(notified);
            // Registered before the check, so an `open` in between is not missed.
            notified.as_mut().enable();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Hands out admissions in arrival order; owned by the connection's read loop.
pub(crate) struct Arrivals {
    last: Arc<Gate>,
}

impl Default for Arrivals {
    fn default() -> Self {
        let first = Gate::default();
        first.open();
        Arrivals { last: Arc::new(first) }
    }
}

impl Arrivals {
    /// The admission of the call that just arrived.
    pub(crate) fn next(&mut self) -> AdmissionSlot {
        let mine = Arc::new(Gate::default());
        let previous = std::mem::replace(&mut self.last, Arc::clone(&mine));
        AdmissionSlot(Arc::new(Mutex::new(Some(Admission { previous, mine }))))
    }
}

/// A call's place in its connection's arrival order.
pub struct Admission {
    previous: Arc<Gate>,
    mine: Arc<Gate>,
}

impl Admission {
    /// Waits until every earlier call of the connection has been admitted, runs
    /// `take_place` (e.g. queueing on a session), then admits the next call. Blocks: call it
    /// from the blocking pool.
    pub fn admit<T>(self, take_place: impl FnOnce() -> T) -> T {
        self.previous.wait();
        take_place()
        // Dropping `self` opens the gate for the next call.
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.mine.open();
    }
}

/// Holds a call's [`Admission`] until its handler takes it; shared by the clones a request's
/// extensions are made of.
#[derive(Clone)]
pub struct AdmissionSlot(Arc<Mutex<Option<Admission>>>);

impl AdmissionSlot {
    /// Resolves once every earlier call of the connection has been admitted (at once when the
    /// admission was taken already).
    pub async fn previous_admitted(&self) {
        let previous = {
            let admission = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            admission.as_ref().map(|a| Arc::clone(&a.previous))
        };
        if let Some(previous) = previous {
            previous.opened().await;
        }
    }

    /// No place in the arrival order: for a call that neither queues on a session nor
    /// changes its connection's state.
    pub(crate) fn unordered() -> Self {
        AdmissionSlot(Arc::new(Mutex::new(None)))
    }

    /// The admission, the first time (a batch shares one; its later calls get `None`).
    pub fn take(&self) -> Option<Admission> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admissions_complete_in_arrival_order_even_when_later_calls_are_ready_first() {
        let mut arrivals = Arrivals::default();
        let slots: Vec<AdmissionSlot> = (0..6).map(|_| arrivals.next()).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = slots
            .into_iter()
            .enumerate()
            .rev()
            .map(|(n, slot)| {
                let order = Arc::clone(&order);
                std::thread::spawn(move || {
                    slot.take().expect("first take").admit(|| order.lock().unwrap().push(n));
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_task_waits_without_a_thread_until_the_earlier_calls_are_admitted() {
        let mut arrivals = Arrivals::default();
        let first = arrivals.next();
        let second = arrivals.next();
        let waiting = tokio::spawn(async move {
            second.previous_admitted().await;
            second
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the first call is not admitted yet");
        first.take().unwrap().admit(|| ());
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("admitted in time")
            .unwrap();
        second.take().unwrap().admit(|| ());
    }

    #[test]
    fn a_call_dropped_unadmitted_does_not_hold_up_the_next() {
        let mut arrivals = Arrivals::default();
        let first = arrivals.next();
        let second = arrivals.next();
        drop(first);
        second.take().unwrap().admit(|| ());
    }
}
