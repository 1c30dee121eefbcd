//! The way to the upstream and back: the request's headers (credentials included) go to the
//! configured upstream only, redirects are never followed, and the response comes back as
//! the upstream sent it, its body relayed chunk by chunk as each arrives.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

use crate::Hook;
use crate::usage::UsageTap;

/// The body the proxy answers with.
pub type ProxyBody = BoxBody<Bytes, std::io::Error>;

/// How long connecting to the upstream may take. There is no limit on the whole exchange:
/// a model streams for minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers of one hop only (RFC 9110 §7.6.1), never passed on; `host` and `content-length`
/// are the outgoing request's own.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The upstream client: no redirects (a redirect would carry the client's credentials to
/// another host), no proxy from the environment, no decompression (bodies pass as sent).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .expect("a client with a fixed TLS configuration builds")
}

/// What is sent upstream.
pub struct Outgoing<'a> {
    /// The client's method.
    pub method: hyper::Method,
    /// The upstream base URL and the client's path and query.
    pub url: String,
    /// The client's headers.
    pub headers: &'a HeaderMap,
    /// The body to send.
    pub body: Bytes,
    /// Ask for an uncompressed response, so its usage can be read.
    pub identity: bool,
}

/// Sends `outgoing`; an error is the transport's (no response came), its text without the URL.
pub async fn send(client: &reqwest::Client, outgoing: Outgoing<'_>) -> Result<reqwest::Response, String> {
    let mut headers = HeaderMap::with_capacity(outgoing.headers.len());
    for (name, value) in outgoing.headers {
        let own = name.as_str().starts_with("x-satchel-");
        let dropped = HOP_BY_HOP.contains(&name.as_str())
            || own
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || (outgoing.identity && name == header::ACCEPT_ENCODING);
        if !dropped {
            headers.append(name.clone(), value.clone());
        }
    }
    client
        .request(outgoing.method, &outgoing.url)
        .headers(headers)
        .body(outgoing.body)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())
}

/// Where the response's usage goes, for a managed request.
pub struct UsageSink {
    /// The engine's calls.
    pub hook: Arc<dyn Hook>,
    /// The session the request was prepared on.
    pub session_id: String,
}

/// The upstream's response as the client gets it: its status and headers (less the
/// hop-by-hop ones) plus `extra`, its body relayed as it arrives. With `usage`, the body is
/// looked at on its way and its input tokens reported once it ends.
pub fn relay(
    upstream: reqwest::Response,
    extra: Vec<(HeaderName, HeaderValue)>,
    usage: Option<UsageSink>,
) -> Response<ProxyBody> {
    let status = upstream.status();
    let mut response = Response::builder().status(status);
    let headers = response.headers_mut().expect("a fresh builder");
    for (name, value) in upstream.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.extend(extra);
    let stream = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let tap = usage.map(|sink| Tapped {
        tap: Some(UsageTap::new(stream)),
        sink,
        remaining: upstream.content_length(),
    });
    let chunks = futures::stream::unfold((Some(upstream), tap), |(upstream, mut tap)| async move {
        let Some(mut upstream) = upstream else {
            // The body ended: its usage is in before the client sees the end.
            tap.as_mut()?.report().await;
            return None;
        };
        match upstream.chunk().await {
            Ok(Some(chunk)) => {
                if let Some(tapped) = tap.as_mut()
                    && tapped.feed(&chunk)
                {
                    // The chunk completes the declared length: the client is done once it
                    // has it, so the usage goes in first.
                    tapped.report().await;
                }
                Some((Ok(Frame::data(chunk)), (Some(upstream), tap)))
            }
            Ok(None) => {
                tap.as_mut()?.report().await;
                None
            }
            // The client's response is then cut short, as the upstream's was.
            Err(e) => Some((Err(std::io::Error::other(e.without_url())), (None, tap))),
        }
    });
    let body = BodyExt::boxed(StreamBody::new(chunks));
    response.body(body).expect("headers copied from a valid response")
}

/// A response body's usage tap and where its usage goes. The usage is reported before the
/// body's last byte reaches the client (the chunk that completes a declared length, or the
/// end of a chunked body), so an agent's next request, which it sends once it has the whole
/// response, is prepared after it: the usage is learnt for the request it answers. A body
/// cut short reports, when dropped, what its events said so far (the provider counted the
/// input all the same).
struct Tapped {
    tap: Option<UsageTap>,
    sink: UsageSink,
    /// Bytes of a declared `content-length` not yet relayed.
    remaining: Option<u64>,
}

impl Tapped {
    /// Looks at `chunk`; true when it completes the declared length.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        if let Some(tap) = &mut self.tap {
            tap.feed(chunk);
        }
        let Some(remaining) = &mut self.remaining else {
            return false;
        };
        *remaining = remaining.saturating_sub(chunk.len() as u64);
        *remaining == 0
    }

    /// Reports the usage (once), waiting until the engine has it.
    async fn report(&mut self) {
        let Some((hook, session_id, input_tokens)) = self.take_report() else {
            return;
        };
        // Off the async threads: the engine's calls block.
        let reported = tokio::task::spawn_blocking(move || {
            hook.report_usage(&session_id, input_tokens)
                .map_err(|e| (session_id, e))
        });
        if let Ok(Err((session_id, e))) = reported.await {
            tracing::debug!(session = %session_id, "usage not learnt from: {e}");
        }
    }

    fn take_report(&mut self) -> Option<(Arc<dyn Hook>, String, u64)> {
        let input_tokens = self.tap.take().and_then(UsageTap::finish)?;
        Some((
            self.sink.hook.clone(),
            std::mem::take(&mut self.sink.session_id),
            input_tokens,
        ))
    }
}

impl Drop for Tapped {
    fn drop(&mut self) {
        let Some((hook, session_id, input_tokens)) = self.take_report() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn_blocking(move || {
            if let Err(e) = hook.report_usage(&session_id, input_tokens) {
                tracing::debug!(session = %session_id, "usage not learnt from: {e}");
            }
        });
    }
}

/// A response of the proxy's own: `body` with `content-type: application/json`.
pub fn own_response(status: StatusCode, body: Bytes, extra: Vec<(HeaderName, HeaderValue)>) -> Response<ProxyBody> {
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.extend(extra);
    response
}
