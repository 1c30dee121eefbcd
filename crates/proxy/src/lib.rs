//! A provider-compatible HTTP proxy: an agent that takes a base URL for its model provider
//! (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`) points it here, and each request it sends, the
//! whole history every time, goes through satchel's context hook before it reaches the
//! provider.
//!
//! `POST /v1/messages` (Anthropic Messages), `POST /v1/chat/completions` (OpenAI Chat
//! Completions) and `POST /v1/responses` (OpenAI Responses: its `input` items, its
//! `instructions` the system prompt) are managed: the request's messages become one
//! `context.prepare` on the session the request belongs to ([`session`]), the prepared
//! messages replace them, and every other field of the body is forwarded byte for byte
//! ([`body`]). What satchel adds to the system prompt (learned lessons) replaces `system` or
//! `instructions`, or, where the system prompt is the leading message (OpenAI Chat), comes
//! as a message of its role right after it. A Responses request with no history of its own (`previous_response_id`, where
//! the provider holds it, or one text as `input`) is passed through as sent, the reason
//! logged, and so is every other path and method. Responses come back as the provider sent them: status, headers
//! and body, a stream relayed chunk by chunk as it arrives, plus `X-Satchel-*` headers saying
//! what satchel did; the provider's reported usage trains the session's calibration.
//!
//! The proxy knows no JSON-RPC and no engine: the binary gives it a [`Hook`] that runs the
//! engine's calls. Client credentials (`x-api-key`, `authorization`, …) go to the configured
//! upstream only (redirects are never followed), and are never logged or stored. The one
//! other use of them: a compaction that a request's prepare runs may ask the same upstream
//! for its summary (`summarizer: "upstream"`), through an [`UpstreamModel`] lent to that
//! prepare alone.
//!
//! # Layout
//!
//! - [`Hook`], [`Settings`], [`Upstreams`] (here): what the binary gives the proxy.
//! - `server`: [`serve`], the accept loop and one request's way through the proxy.
//! - `forward`: the upstream client, which headers go where, the relayed response body.
//! - [`body`]: the request body as its top-level fields' raw JSON texts, and the rewrite.
//! - [`session`]: which session a request belongs to.
//! - `provider`: what differs between Anthropic and OpenAI: routes, error shapes, usage.
//! - `usage`: the provider's reported input tokens, read from a body or a stream as it passes.
//! - `agent_compaction`: recognising the agent's own compaction requests.
//! - `upstream`: [`UpstreamModel`], the request's upstream and credentials lent to its
//!   prepare for a model summary (`summarizer: "upstream"`).

mod agent_compaction;
pub mod body;
mod forward;
mod provider;
mod server;
pub mod session;
mod upstream;
mod usage;

use std::net::SocketAddr;
use std::sync::Arc;

use satchel_protocol::{PrepareParams, PrepareResult};
use serde_json::value::RawValue;

pub use provider::Provider;
pub use server::serve;
pub use upstream::{ModelCall, UpstreamModel, describe_transport_error};

/// What the engine's `context.prepare` returns: the messages as shared JSON texts.
pub type Prepared = PrepareResult<Vec<Arc<RawValue>>, Arc<RawValue>, Arc<RawValue>>;

/// The engine's calls the proxy needs, run by the binary. Each blocks (they run on tokio's
/// blocking pool); an error is a sentence for the `X-Satchel-Warning` header and the log, so
/// it must not contain what the client sent.
pub trait Hook: Send + Sync + 'static {
    /// `context.prepare` with `params`, on the daemon's own configuration. `upstream` is the
    /// request's own upstream with its credentials, for a compaction's summary: it must be
    /// dropped when the call returns, kept nowhere.
    fn prepare(&self, params: PrepareParams<Box<RawValue>>, upstream: UpstreamModel) -> Result<Prepared, String>;

    /// `context.usage`: the provider's input tokens for the session's last prepared request.
    fn report_usage(&self, session_id: &str, input_tokens: u64) -> Result<(), String>;

    /// Records where a request `prepare` just took came from, for inspect.
    fn note_origin(&self, session_id: &str, origin: RequestOrigin<'_>) -> Result<(), String>;
}

/// What the proxy knows of a request that inspect shows: the API, what named the session,
/// and whether the agent asked for its own compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestOrigin<'a> {
    /// `anthropic-messages`, `openai-chat` or `openai-responses`.
    pub api: &'a str,
    /// What named the session.
    pub key_from: &'a str,
    /// The agent's own compaction: the messages of the history it sent.
    pub agent_compaction: Option<usize>,
}

/// Where each provider's requests go: base URLs without the `/v1/...` path, which the
/// request's own path is appended to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstreams {
    /// Anthropic's API (`https://api.anthropic.com`).
    pub anthropic: String,
    /// OpenAI's API (`https://api.openai.com`).
    pub openai: String,
}

/// The proxy's configuration, from the daemon's own (never from a request).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where requests are forwarded.
    pub upstreams: Upstreams,
    /// The proxy's own bearer token: when set, every request must carry
    /// `Proxy-Authorization: Bearer <token>` (never forwarded). Required off loopback.
    pub token: Option<String>,
    /// The largest request body read, in bytes; a larger one gets 413.
    pub max_body_bytes: usize,
}

/// Default [`Settings::max_body_bytes`]: the daemon's own default message limit, so a
/// history that `context.prepare` would take over stdio is taken here too.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 << 20;

impl Settings {
    /// Refuses to listen on `addr` when it is reachable from other machines and no token
    /// is set: the proxy spends its clients' credentials, and its sessions hold their
    /// conversations.
    pub fn check_listen(&self, addr: SocketAddr) -> Result<(), String> {
        if addr.ip().is_loopback() || self.token.as_deref().is_some_and(|t| !t.is_empty()) {
            return Ok(());
        }
        Err(format!(
            "refusing to listen on {addr}, which is not a loopback address, without `proxy_token`: set it in the workspace's config.json or SATCHEL_PROXY_TOKEN"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(token: Option<&str>) -> Settings {
        Settings {
            upstreams: Upstreams {
                anthropic: "http://127.0.0.1:1".into(),
                openai: "http://127.0.0.1:1".into(),
            },
            token: token.map(str::to_owned),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    #[test]
    fn only_loopback_listens_without_a_token() {
        let open: SocketAddr = "0.0.0.0:8788".parse().unwrap();
        for local in ["127.0.0.1:8788", "[::1]:0"] {
            assert!(settings(None).check_listen(local.parse().unwrap()).is_ok());
        }
        assert!(settings(None).check_listen(open).is_err());
        assert!(settings(Some("")).check_listen(open).is_err());
        assert!(settings(Some("secret")).check_listen(open).is_ok());
    }
}
