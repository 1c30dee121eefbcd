//! The entry points: one byte stream served until it ends, and a Unix listener's
//! connections, each served as one stream.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;

use crate::connection::Connection;
use crate::framing::{FrameReader, Incoming};
use crate::queue::{self, WriteQueue, write_frames, write_frames_blocking};
use crate::{Cancellation, Service, TransportLimits};

/// Replies waiting for the writer; a full queue makes request tasks wait (backpressure).
const WRITE_QUEUE: usize = 64;

/// Read buffer of a served stream.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// How long the accept loop waits after a failed accept (out of file descriptors, say)
/// before it tries again, so that it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Serves JSON-RPC on one byte stream until `reader` hits EOF, then waits for the requests
/// still in flight, writes their replies and returns.
///
/// Each message may be NDJSON or `Content-Length` framed; its reply uses the same framing.
/// Every request carries a [`CallScope`](crate::CallScope) (with a
/// [`ClientHandle`](crate::ClientHandle)) in its extensions; responses from the client to the
/// handle's requests are routed to them. At EOF those still waiting fail with
/// [`ClientRequestError::Disconnected`](crate::ClientRequestError::Disconnected). Returns
/// early with the error if reading or writing the stream fails.
pub async fn serve<R, W, T>(reader: R, writer: W, service: Service<T>, limits: TransportLimits) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    T: Cancellation,
{
    serve_with(reader, |rx| tokio::spawn(write_frames(writer, rx)), service, limits).await
}

/// [`serve`], with the replies written by blocking writes on a thread of their own.
///
/// For stdout: tokio's stdout hands every write, and every flush, to the blocking pool and
/// waits for it, two thread hand-offs per reply on the path of every call.
pub async fn serve_with_blocking_writer<R, W, T>(
    reader: R,
    writer: W,
    service: Service<T>,
    limits: TransportLimits,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: std::io::Write + Send + 'static,
    T: Cancellation,
{
    let write = |rx| tokio::task::spawn_blocking(move || write_frames_blocking(writer, rx));
    serve_with(reader, write, service, limits).await
}

/// Serves every connection accepted on `listener` with the same service, as [`serve`] does a
/// stream; each connection gets its own client handle. Runs until the task is dropped.
pub async fn accept_loop<T: Cancellation>(listener: &UnixListener, service: Service<T>, limits: TransportLimits) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let service = service.clone();
                tokio::spawn(async move {
                    let (reader, writer) = stream.into_split();
                    if let Err(e) = serve(reader, writer, service, limits).await {
                        tracing::debug!("socket connection ended: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("accepting a socket connection failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// [`serve`] with the writer started by `start_writer`, which gets the queue's receiving end.
async fn serve_with<R, T>(
    reader: R,
    start_writer: impl FnOnce(queue::Receiver) -> JoinHandle<io::Result<()>>,
    service: Service<T>,
    limits: TransportLimits,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    T: Cancellation,
{
    let (queue, rx) = WriteQueue::new(WRITE_QUEUE);
    let mut writer_task = start_writer(rx);
    let on_close = service.on_close.clone();
    let mut conn = Connection::new(queue, service, limits);
    let connection_id = conn.id();
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
        conn.receive(framing, frame).await;
    }
    // Dropping the connection fails the requests waiting for the client. Each request task
    // holds a sender, so the writer drains and ends once all have finished.
    drop(conn);
    if let Some(on_close) = &on_close {
        on_close(connection_id);
    }
    joined(writer_task.await)
}

/// Turns a finished writer task into the result of [`serve`].
fn joined(result: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
    result.map_err(io::Error::other)?
}
