//! The sessions held in memory, and the order calls on one session run in.
//!
//! Each session has a `Slot`: a first-in, first-out queue of calls and the session itself.
//! A call takes a [`Ticket`] when it arrives (the transport takes them in arrival order) and
//! waits for its `Turn`: calls on one session run one at a time in ticket order, as a
//! language server applies document changes; calls on different sessions run in parallel.
//!
//! Memory stays bounded for a daemon that runs for weeks: past `max_live_sessions`, or after
//! `session_idle_secs` without a call, a session nobody is queued on is dropped. Its log holds
//! everything, and the next call reloads it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::session::Session;

/// One session's queue of calls and its state in memory.
#[derive(Default)]
pub(crate) struct Slot {
    queue: Mutex<Queue>,
    turn_changed: Condvar,
    /// `None` until loaded, or when the session does not exist (yet).
    session: Mutex<Option<Session>>,
    /// When the last turn on this session ended (clock milliseconds): eviction drops the
    /// least recently used first.
    last_used_ms: AtomicI64,
}

/// Ticket numbers: issued in arrival order, served in the same order.
#[derive(Default)]
struct Queue {
    /// The next number to hand out.
    issued: u64,
    /// The number whose turn it is (or will be, once it arrives).
    serving: u64,
    /// Numbers whose call gave up before its turn: skipped.
    abandoned: BTreeSet<u64>,
}

impl Queue {
    fn advance(&mut self) {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
    }
}

impl Slot {
    /// Whether no call holds or awaits a turn.
    fn is_idle(&self) -> bool {
        let queue = lock(&self.queue);
        queue.issued == queue.serving
    }

    /// The session, for `sessions`: only when no call is running on it (a listing never
    /// waits behind a compaction).
    pub(crate) fn peek(&self) -> Option<MutexGuard<'_, Option<Session>>> {
        match self.session.try_lock() {
            Ok(guard) => Some(guard),
            // A call that panicked left it poisoned, and its transaction dropped the session:
            // it is not busy.
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A place in a session's queue. Dropping it unused gives the place up.
pub struct Ticket {
    slot: Arc<Slot>,
    number: u64,
    session_id: String,
    waited: bool,
}

impl Ticket {
    /// The session this ticket queues on.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Blocks until every earlier ticket of the session has finished.
    pub(crate) fn wait(mut self) -> Turn {
        self.waited = true;
        let slot = Arc::clone(&self.slot);
        let mut queue = lock(&slot.queue);
        while queue.serving != self.number {
            queue = slot.turn_changed.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        drop(queue);
        Turn { slot }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.waited {
            return;
        }
        let mut queue = lock(&self.slot.queue);
        if queue.serving == self.number {
            queue.advance();
        } else {
            queue.abandoned.insert(self.number);
        }
        drop(queue);
        self.slot.turn_changed.notify_all();
    }
}

/// A call's exclusive use of a session; the next call's turn comes when it is dropped.
pub(crate) struct Turn {
    slot: Arc<Slot>,
}

impl Turn {
    /// The session (`None`: not loaded, or not existing).
    pub(crate) fn session(&self) -> MutexGuard<'_, Option<Session>> {
        lock(&self.slot.session)
    }

    /// Records that the session was used at `now_ms`.
    pub(crate) fn touch(&self, now_ms: i64) {
        self.slot.last_used_ms.store(now_ms, Ordering::Relaxed);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        lock(&self.slot.queue).advance();
        self.slot.turn_changed.notify_all();
    }
}

/// Every session slot, by id.
#[derive(Default)]
pub(crate) struct LiveSessions {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// Limits on the sessions held in memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveLimits {
    /// Slots kept at most.
    pub max_sessions: usize,
    /// Idle slots older than this are dropped.
    pub idle_ms: i64,
}

impl LiveSessions {
    /// A place in the queue of session `id`. Taken under the map's lock, so eviction never
    /// drops a slot between the lookup and the ticket.
    pub(crate) fn ticket(&self, id: &str) -> Ticket {
        let mut slots = lock(&self.slots);
        let slot = Arc::clone(slots.entry(id.to_owned()).or_default());
        let mut queue = lock(&slot.queue);
        let number = queue.issued;
        queue.issued += 1;
        drop(queue);
        Ticket {
            slot,
            number,
            session_id: id.to_owned(),
            waited: false,
        }
    }

    /// The slots, for a listing.
    pub(crate) fn snapshot(&self) -> HashMap<String, Arc<Slot>> {
        lock(&self.slots).clone()
    }

    /// How many sessions are held.
    pub(crate) fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    /// Drops idle sessions unused since `now_ms - limits.idle_ms`, then the least recently
    /// used idle ones until at most `limits.max_sessions` remain. Returns how many it dropped.
    pub(crate) fn evict(&self, now_ms: i64, limits: LiveLimits) -> usize {
        let mut slots = lock(&self.slots);
        let mut idle: Vec<(i64, String)> = slots
            .iter()
            .filter(|(_, slot)| slot.is_idle())
            .map(|(id, slot)| (slot.last_used_ms.load(Ordering::Relaxed), id.clone()))
            .collect();
        idle.sort_unstable();
        let over = slots.len().saturating_sub(limits.max_sessions);
        let before = slots.len();
        for (position, (last_used, id)) in idle.into_iter().enumerate() {
            if position >= over && now_ms - last_used < limits.idle_ms {
                break;
            }
            slots.remove(&id);
        }
        before - slots.len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its state consistent, panicking or not.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn turns_come_in_ticket_order_whatever_order_the_callers_wait_in() {
        let live = Arc::new(LiveSessions::default());
        let tickets: Vec<Ticket> = (0..8).map(|_| live.ticket("s")).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = tickets
            .into_iter()
            .enumerate()
            .rev()
            .map(|(n, ticket)| {
                let order = Arc::clone(&order);
                std::thread::spawn(move || {
                    let _turn = ticket.wait();
                    order.lock().unwrap().push(n);
                    std::thread::sleep(Duration::from_millis(2));
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn an_abandoned_ticket_is_skipped() {
        let live = LiveSessions::default();
        let first = live.ticket("s");
        let second = live.ticket("s");
        let third = live.ticket("s");
        drop(second);
        drop(first.wait());
        let _turn = third.wait(); // would block forever if the second were still awaited
    }

    #[test]
    fn eviction_drops_least_recently_used_idle_sessions_and_never_a_busy_one() {
        let live = LiveSessions::default();
        for (n, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let turn = live.ticket(id).wait();
            turn.touch(n as i64);
        }
        let busy = live.ticket("a");
        let limits = LiveLimits {
            max_sessions: 2,
            idle_ms: 1_000,
        };
        assert_eq!(live.evict(10, limits), 2);
        let mut left: Vec<String> = live.snapshot().into_keys().collect();
        left.sort();
        assert_eq!(left, ["a", "d"], "a is busy, d the most recent");
        drop(busy);
        assert_eq!(live.evict(2_000, limits), 2, "both idle past the idle limit");
        assert_eq!(live.len(), 0);
    }
}
