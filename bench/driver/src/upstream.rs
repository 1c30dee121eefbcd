//! The scripted model server of the `proxy` scenario: a real HTTP server (hyper 1) on
//! loopback, on a runtime of its own, that the driver calls directly and `satchel proxy`
//! forwards to. It reads each request whole and answers at once, in the shape of the API
//! the path names (Anthropic Messages, OpenAI Chat): a JSON reply with its usage, or, when
//! the request carries [`STREAM_HEADER`], an event stream whose headers and first event go
//! out at once, the rest [`EVENT_PAUSE`] apart, as a model streams. It notes when it hands
//! each stream's first event to its connection, so the driver can time the way from there to
//! the client, through the proxy or not, and the input tokens it reported last, so a twin
//! session over stdio can be told the same usage.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

/// The request header that asks for a streamed answer (the body is not parsed: the server
/// must cost the same whatever it is sent).
pub const STREAM_HEADER: &str = "x-bench-stream";

/// The pause between two events of a stream after the first.
const EVENT_PAUSE: Duration = Duration::from_millis(2);

/// Text deltas of a streamed answer.
const DELTAS: [&str; 4] = ["The build ", "is fixed: ", "the lexer ", "was stale."];

type Body = BoxBody<Bytes, Infallible>;

/// What the server notes of the requests it answers.
#[derive(Default)]
struct Notes {
    /// When the last stream's first event was handed to its connection.
    first_event: Mutex<Option<Instant>>,
    /// The input tokens of the last answer's usage.
    input_tokens: AtomicU64,
}

/// The running server.
pub struct Upstream {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// What it noted of the requests.
    notes: Arc<Notes>,
    /// Serves until dropped.
    _runtime: tokio::runtime::Runtime,
}

impl Upstream {
    /// Binds a loopback port and serves on one worker thread.
    pub fn start() -> anyhow::Result<Upstream> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-upstream")
            .enable_all()
            .build()
            .context("the upstream's runtime")?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let url = format!("http://{}", listener.local_addr()?);
        let notes = Arc::new(Notes::default());
        runtime.spawn(serve(listener, notes.clone()));
        Ok(Upstream {
            url,
            notes,
            _runtime: runtime,
        })
    }

    /// When the last stream's first event went out, and forgets it.
    pub fn take_first_event(&self) -> Option<Instant> {
        self.notes.first_event.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The input tokens the last answer reported.
    pub fn last_input_tokens(&self) -> u64 {
        self.notes.input_tokens.load(Ordering::SeqCst)
    }
}

async fn serve(listener: TcpListener, notes: Arc<Notes>) {
    while let Ok((stream, _)) = listener.accept().await {
        // As a provider's servers do: an event goes out when written, not when the previous
        // small write is acknowledged (Nagle's algorithm would hold it up to a delayed ACK).
        let _ = stream.set_nodelay(true);
        let notes = notes.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, notes.clone()));
            // A connection ends when its client goes; nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One answer: the request read whole, then a reply or a stream.
async fn answer(request: Request<Incoming>, notes: Arc<Notes>) -> Result<Response<Body>, hyper::Error> {
    let stream = request.headers().contains_key(STREAM_HEADER);
    let anthropic = request.uri().path().starts_with("/v1/messages");
    let body = request.into_body().collect().await?.to_bytes();
    // What a provider would count, roughly: the usage calibrates the proxied session.
    let input_tokens = body.len() / 4;
    notes.input_tokens.store(input_tokens as u64, Ordering::SeqCst);
    if !stream {
        let reply = if anthropic {
            json!({"id": "msg_bench", "type": "message", "role": "assistant", "content": [{"type": "text", "text": DELTAS.concat()}],
                   "stop_reason": "end_turn", "usage": {"input_tokens": input_tokens, "output_tokens": 12}})
        } else {
            json!({"id": "chatcmpl-bench", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": DELTAS.concat()}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": input_tokens, "completion_tokens": 12, "total_tokens": input_tokens + 12}})
        };
        let body = Full::new(Bytes::from(reply.to_string())).boxed();
        return Ok(with_type(Response::new(body), "application/json"));
    }
    let events = if anthropic {
        anthropic_events(input_tokens)
    } else {
        openai_events(input_tokens)
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(events.len());
    tokio::spawn(async move {
        for (i, event) in events.into_iter().enumerate() {
            if i == 0 {
                *notes.first_event.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            } else {
                tokio::time::sleep(EVENT_PAUSE).await;
            }
            if sender.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
    });
    let frames = futures::stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(event)), receiver))
    });
    Ok(with_type(
        Response::new(StreamBody::new(frames).boxed()),
        "text/event-stream",
    ))
}

fn with_type(mut response: Response<Body>, content_type: &'static str) -> Response<Body> {
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// Anthropic's events: `message_start` (with the input usage), the text deltas, the end.
fn anthropic_events(input_tokens: usize) -> Vec<String> {
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let mut events = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant", "content": [],
                   "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    events.extend(DELTAS.iter().map(|text| {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        )
    }));
    events.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}}),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    events
}

/// OpenAI Chat's chunks: the text deltas, the usage chunk, `[DONE]`.
fn openai_events(input_tokens: usize) -> Vec<String> {
    let chunk = |data: serde_json::Value| format!("data: {data}\n\n");
    let mut events: Vec<String> = DELTAS
        .iter()
        .map(|text| {
            chunk(
                json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}),
            )
        })
        .collect();
    events.push(chunk(
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": input_tokens, "completion_tokens": 12, "total_tokens": input_tokens + 12}}),
    ));
    events.push("data: [DONE]\n\n".to_owned());
    events
}
