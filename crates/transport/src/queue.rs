//! The queue in front of the stream's single writer.
//!
//! Replies wait for room in the queue, so a peer that stops reading slows the daemon down
//! instead of growing memory. Frames a method handler sends to its client
//! ([`ClientHandle`](crate::ClientHandle)) must not wait: the handler may run on a runtime
//! worker, where blocking is forbidden, and it may send while the writer is busy. They take a
//! free slot when there is one and go over the limit otherwise; there are only as many as
//! handlers send. One FIFO holds both kinds, so a handler's notification is always written
//! before that handler's reply.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// One frame for the writer, holding its queue slot until it has been written.
pub(crate) struct Outgoing {
    frame: Vec<u8>,
    _slot: Option<OwnedSemaphorePermit>,
}

/// The sending side of the write queue. The writer ends once every `WriteQueue` is dropped.
#[derive(Clone)]
pub(crate) struct WriteQueue {
    tx: mpsc::UnboundedSender<Outgoing>,
    slots: Arc<Semaphore>,
}

impl WriteQueue {
    /// A queue holding up to `slots` frames that wait for room.
    pub fn new(slots: usize) -> (Self, Receiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let slots = Arc::new(Semaphore::new(slots));
        (Self { tx, slots }, rx)
    }

    /// Queues `frame`, first waiting for a free slot.
    pub async fn send(&self, frame: Vec<u8>) {
        // The semaphore is never closed, so this always gets a slot.
        let slot = Arc::clone(&self.slots).acquire_owned().await.ok();
        // A closed queue means the writer failed; `serve` reports that.
        let _ = self.tx.send(Outgoing { frame, _slot: slot });
    }

    /// A sender that does not keep the writer running.
    pub fn downgrade(&self) -> WeakWriteQueue {
        WeakWriteQueue {
            tx: self.tx.downgrade(),
            slots: Arc::clone(&self.slots),
        }
    }
}

/// A [`WriteQueue`] that does not keep the writer alive, for [`ClientHandle`](crate::ClientHandle)s
/// that a handler may keep after the connection is gone.
pub(crate) struct WeakWriteQueue {
    tx: mpsc::WeakUnboundedSender<Outgoing>,
    slots: Arc<Semaphore>,
}

impl WeakWriteQueue {
    /// Queues `frame` without waiting, over the slot limit if need be; false if the writer
    /// has finished or failed.
    pub fn push(&self, frame: Vec<u8>) -> bool {
        let Some(tx) = self.tx.upgrade() else {
            return false;
        };
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        tx.send(Outgoing { frame, _slot: slot }).is_ok()
    }
}

/// The writer's end of the queue.
pub(crate) type Receiver = mpsc::UnboundedReceiver<Outgoing>;

/// Writes whole frames in the order they are queued, flushing each so the peer sees it now.
pub(crate) async fn write_frames<W: AsyncWrite + Unpin>(mut writer: W, mut rx: Receiver) -> io::Result<()> {
    while let Some(outgoing) = rx.recv().await {
        writer.write_all(&outgoing.frame).await?;
        writer.flush().await?;
    }
    Ok(())
}

/// [`write_frames`] with blocking writes, for a thread of its own.
pub(crate) fn write_frames_blocking<W: io::Write>(mut writer: W, mut rx: Receiver) -> io::Result<()> {
    while let Some(outgoing) = rx.blocking_recv() {
        io::Write::write_all(&mut writer, &outgoing.frame)?;
        io::Write::flush(&mut writer)?;
    }
    Ok(())
}
