//! What differs between the providers the proxy manages: which request goes where, the
//! message format satchel is told, and the provider's own error shape.

use bytes::Bytes;
use hyper::{HeaderMap, Method, StatusCode};
use satchel_protocol::FormatHint;

use crate::Upstreams;

/// A provider API whose requests satchel manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`POST /v1/responses`): its `input` items are the messages and its
    /// `instructions` the system prompt.
    OpenAiResponses,
}

/// Why a compressed request body passes through.
const COMPRESSED: &str = "the request body is compressed";

/// What the proxy does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Its messages go through `context.prepare`.
    Managed(Provider),
    /// Forwarded untouched to the upstream of this provider's family, with a reason to log
    /// when the request is one satchel would manage but cannot yet.
    Passthrough(Family, Option<&'static str>),
}

/// Which upstream a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `proxy_upstream_anthropic`.
    Anthropic,
    /// `proxy_upstream_openai`.
    OpenAi,
}

impl Route {
    /// The route of `method path` (`path` without its query) with `headers`. Any other
    /// request is Anthropic's when its path is only Anthropic's (`/v1/messages…`,
    /// `/v1/complete`, or `/`: Claude Code's `HEAD /` pre-warm) or it carries the
    /// `anthropic-version` header every Anthropic client sends (`GET /v1/models` is both
    /// APIs'); else OpenAI's.
    ///
    /// A managed request whose body is compressed (`content-encoding`) passes through as
    /// sent: satchel reads only plain JSON, and nothing the client sent may be lost.
    pub fn of(method: &Method, path: &str, headers: &HeaderMap) -> Route {
        let post = method == Method::POST;
        let compressed = headers
            .get(hyper::header::CONTENT_ENCODING)
            .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
        match path.trim_end_matches('/') {
            "/v1/messages" if post && compressed => Route::Passthrough(Family::Anthropic, Some(COMPRESSED)),
            "/v1/chat/completions" | "/v1/responses" if post && compressed => {
                Route::Passthrough(Family::OpenAi, Some(COMPRESSED))
            }
            "/v1/messages" if post => Route::Managed(Provider::Anthropic),
            "/v1/chat/completions" if post => Route::Managed(Provider::OpenAiChat),
            "/v1/responses" if post => Route::Managed(Provider::OpenAiResponses),
            p if p.starts_with("/v1/messages")
                || p == "/v1/complete"
                || p.is_empty()
                || headers.contains_key("anthropic-version") =>
            {
                Route::Passthrough(Family::Anthropic, None)
            }
            _ => Route::Passthrough(Family::OpenAi, None),
        }
    }

    /// The family of its upstream.
    pub fn family(self) -> Family {
        match self {
            Route::Managed(Provider::Anthropic) => Family::Anthropic,
            Route::Managed(Provider::OpenAiChat | Provider::OpenAiResponses) => Family::OpenAi,
            Route::Passthrough(family, _) => family,
        }
    }
}

impl Family {
    /// Its base URL.
    pub fn base(self, upstreams: &Upstreams) -> &str {
        match self {
            Family::Anthropic => &upstreams.anthropic,
            Family::OpenAi => &upstreams.openai,
        }
    }

    /// An error body in this family's shape.
    pub fn error_body(self, status: StatusCode, message: &str) -> Bytes {
        let body = match self {
            Family::Anthropic => serde_json::json!({
                "type": "error",
                "error": {"type": anthropic_error_type(status), "message": message},
            }),
            Family::OpenAi => serde_json::json!({
                "error": {
                    "message": message,
                    "type": openai_error_type(status),
                    "param": null,
                    "code": null,
                },
            }),
        };
        Bytes::from(body.to_string())
    }
}

impl Provider {
    /// The format `context.prepare` is told.
    pub fn format(self) -> FormatHint {
        match self {
            Provider::Anthropic => FormatHint::Anthropic,
            Provider::OpenAiChat => FormatHint::Openai,
            Provider::OpenAiResponses => FormatHint::OpenaiResponses,
        }
    }

    /// The API's name, as inspect shows it (`origin.api`).
    pub fn api(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic-messages",
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
        }
    }

    /// The body field that holds the conversation.
    pub fn messages_field(self) -> &'static str {
        match self {
            Provider::Anthropic | Provider::OpenAiChat => "messages",
            Provider::OpenAiResponses => "input",
        }
    }

    /// The body field that holds the system prompt beside the messages, if the API has one
    /// (OpenAI Chat's is a message).
    pub fn system_field(self) -> Option<&'static str> {
        match self {
            Provider::Anthropic => Some("system"),
            Provider::OpenAiChat => None,
            Provider::OpenAiResponses => Some("instructions"),
        }
    }
}

/// Anthropic's `error.type` for a status, as its API names them.
fn anthropic_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "invalid_request_error",
        401 | 407 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        _ => "api_error",
    }
}

/// OpenAI's `error.type` for a status.
fn openai_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "invalid_request_error",
        401 | 407 => "authentication_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let none = HeaderMap::new();
        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let of = |method: &Method, path| Route::of(method, path, &none);
        let post = Method::POST;
        assert_eq!(of(&post, "/v1/messages"), Route::Managed(Provider::Anthropic));
        assert_eq!(of(&post, "/v1/chat/completions"), Route::Managed(Provider::OpenAiChat));
        assert_eq!(
            of(&post, "/v1/messages/count_tokens"),
            Route::Passthrough(Family::Anthropic, None)
        );
        assert_eq!(of(&Method::HEAD, "/"), Route::Passthrough(Family::Anthropic, None));
        assert_eq!(
            of(&Method::GET, "/v1/messages"),
            Route::Passthrough(Family::Anthropic, None)
        );
        assert_eq!(of(&Method::GET, "/v1/models"), Route::Passthrough(Family::OpenAi, None));
        assert_eq!(
            Route::of(&Method::GET, "/v1/models", &anthropic),
            Route::Passthrough(Family::Anthropic, None)
        );
        let mut gzip = HeaderMap::new();
        gzip.insert("content-encoding", "gzip".parse().unwrap());
        assert_eq!(
            Route::of(&post, "/v1/messages", &gzip),
            Route::Passthrough(Family::Anthropic, Some(COMPRESSED))
        );
        assert_eq!(of(&post, "/v1/responses"), Route::Managed(Provider::OpenAiResponses));
        assert_eq!(
            Route::of(&post, "/v1/responses", &gzip),
            Route::Passthrough(Family::OpenAi, Some(COMPRESSED))
        );
        assert_eq!(
            of(&Method::GET, "/v1/responses/resp_1"),
            Route::Passthrough(Family::OpenAi, None)
        );
    }

    #[test]
    fn errors_have_the_providers_shape() {
        let anthropic: serde_json::Value =
            serde_json::from_slice(&Family::Anthropic.error_body(StatusCode::BAD_REQUEST, "bad")).unwrap();
        assert_eq!(
            anthropic,
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})
        );
        let openai: serde_json::Value =
            serde_json::from_slice(&Family::OpenAi.error_body(StatusCode::BAD_REQUEST, "bad")).unwrap();
        assert_eq!(openai["error"]["type"], "invalid_request_error");
        assert_eq!(openai["error"]["message"], "bad");
    }
}
