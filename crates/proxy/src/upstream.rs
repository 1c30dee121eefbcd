//! [`UpstreamModel`]: a managed request's own upstream, lent to the `context.prepare` that
//! request runs ([`Hook::prepare`](crate::Hook::prepare)), so that a compaction it triggers
//! can summarise with the model behind it (`summarizer: "upstream"`) using the client's own
//! credentials, with no key configured in satchel.
//!
//! The credentials are lent, not kept: the value is made when the request is prepared, moved
//! into that one call and dropped when it returns. It is not `Clone`, its `Debug` names no
//! header value, its header values are marked sensitive, and its errors have every lent
//! value replaced by `[redacted]` before they leave it. The call goes to the configured
//! upstream of the request's API only (never a redirect), in that API's own shape,
//! without streaming.

use std::fmt;
use std::time::Duration;

use hyper::header::{self, HeaderMap, HeaderValue};
use satchel_protocol::config::REDACTED;
use serde_json::{Value, json};

use crate::provider::Provider;

/// The client's headers a summary call carries: its credentials, and the API version and
/// betas they are good for (a Claude Code OAuth token needs its `oauth-…` beta).
const LENT_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "api-key",
    "anthropic-version",
    "anthropic-beta",
    "openai-organization",
    "openai-project",
];

/// The [`LENT_HEADERS`] that hold a credential, redacted from every error text.
const CREDENTIALS: &[&str] = &["authorization", "x-api-key", "api-key"];

/// The largest reply read: a summary is a few kilobytes, and a reply is held in memory.
const MAX_REPLY_BYTES: usize = 4 << 20;

/// Characters of an error reply's body kept in a failure's text (whoever logs it cuts it
/// further).
const ERROR_BODY_CHARS: usize = 2_000;

/// Anthropic's highest `temperature` (OpenAI's is 2, as `llm_temperature`'s range).
const ANTHROPIC_MAX_TEMPERATURE: f64 = 1.0;

/// The model behind a managed request's upstream, with the request's credentials, for the
/// one `context.prepare` of that request (see the module doc).
pub struct UpstreamModel {
    /// The request's API, whose shape the call takes.
    provider: Provider,
    /// The configured upstream of that API (never anything the request named).
    base: String,
    /// The [`LENT_HEADERS`] the client sent, marked sensitive.
    headers: HeaderMap,
    /// The proxy's upstream client (no redirects, no proxy from the environment).
    client: reqwest::Client,
    /// The proxy's runtime, which runs the call for the prepare's blocking thread.
    runtime: tokio::runtime::Handle,
}

/// One model call.
#[derive(Debug, Clone, Copy)]
pub struct ModelCall<'a> {
    /// The model asked.
    pub model: &'a str,
    /// `(role, text)` in order; `system` ones are the API's system prompt.
    pub messages: &'a [(&'a str, &'a str)],
    /// The longest reply, in tokens.
    pub max_tokens: u64,
    /// Sampling temperature (capped at Anthropic's 1 for Anthropic).
    pub temperature: f64,
    /// How long the whole call may take.
    pub timeout: Duration,
}

impl UpstreamModel {
    /// Lends the credentials among `headers` of a request to `provider`'s API, for a call to
    /// `base` with the proxy's `client` on `runtime`.
    pub(crate) fn lend(
        provider: Provider,
        base: &str,
        headers: &HeaderMap,
        client: reqwest::Client,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let mut lent = HeaderMap::new();
        for name in LENT_HEADERS {
            for value in headers.get_all(*name) {
                let mut value = value.clone();
                value.set_sensitive(true);
                lent.append(*name, value);
            }
        }
        UpstreamModel {
            provider,
            base: base.to_owned(),
            headers: lent,
            client,
            runtime,
        }
    }

    /// The request's API.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The model's reply text to `call`, or why there is none, its text free of the lent
    /// credentials. Blocks: it must be called from a thread that runs no async task (the
    /// hook's own).
    pub fn complete(&self, call: &ModelCall<'_>) -> Result<String, String> {
        let (path, body) = request_body(self.provider, call);
        let request = self
            .client
            .post(format!("{}{path}", self.base.trim_end_matches('/')))
            .headers(self.headers.clone())
            .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .timeout(call.timeout)
            .body(body.to_string());
        let exchange = self.runtime.block_on(async {
            let response = request.send().await.map_err(describe_transport_error)?;
            let status = response.status();
            Ok::<_, String>((status, read_capped(response).await?))
        });
        let (status, body) = exchange.map_err(|e| self.redacted(&e))?;
        if status.is_redirection() {
            // Where it points is not said: a `Location` may carry credentials of its own.
            return Err(format!(
                "HTTP {status}: the upstream redirects, and redirects are not followed"
            ));
        }
        if !status.is_success() {
            // The body may echo the request, credentials and all: redacted whole, then cut,
            // so no cut leaves the start of a key behind.
            let text = self.redacted(&String::from_utf8_lossy(&body));
            let text: String = text.chars().take(ERROR_BODY_CHARS).collect();
            return Err(format!("HTTP {status}: {text}"));
        }
        reply_text(self.provider, &body).map_err(|e| self.redacted(&e))
    }

    /// `text` with every lent credential (and the token of a `Bearer` one) replaced.
    fn redacted(&self, text: &str) -> String {
        let mut secrets: Vec<&str> = Vec::new();
        let credentials = CREDENTIALS.iter().flat_map(|name| self.headers.get_all(*name));
        for value in credentials {
            let Ok(value) = value.to_str() else { continue };
            secrets.push(value);
            if let Some((_, token)) = value.split_once(' ') {
                secrets.push(token.trim());
            }
        }
        // A value of a few characters is no key, and replacing it everywhere would garble
        // the text.
        secrets.retain(|s| s.len() >= 4);
        // Longest first: a token inside its own header value goes with the value.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
            .iter()
            .fold(text.to_owned(), |text, secret| text.replace(secret, REDACTED))
    }
}

impl fmt::Debug for UpstreamModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamModel")
            .field("provider", &self.provider)
            .field("base", &self.base)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The path and body of `call` in `provider`'s API.
fn request_body(provider: Provider, call: &ModelCall<'_>) -> (&'static str, Value) {
    let system: Vec<&str> = call
        .messages
        .iter()
        .filter(|(role, _)| *role == "system")
        .map(|(_, text)| *text)
        .collect();
    let turns = |all: bool| -> Vec<Value> {
        call.messages
            .iter()
            .filter(|(role, _)| all || *role != "system")
            .map(|(role, text)| json!({"role": role, "content": text}))
            .collect()
    };
    match provider {
        Provider::Anthropic => {
            let mut body = json!({
                "model": call.model,
                "max_tokens": call.max_tokens,
                "temperature": call.temperature.min(ANTHROPIC_MAX_TEMPERATURE),
                "messages": turns(false),
            });
            if !system.is_empty() {
                body["system"] = json!(system.join("\n\n"));
            }
            ("/v1/messages", body)
        }
        Provider::OpenAiChat => (
            "/v1/chat/completions",
            json!({
                "model": call.model,
                "messages": turns(true),
                "max_tokens": call.max_tokens,
                "temperature": call.temperature,
            }),
        ),
        Provider::OpenAiResponses => {
            // `store: false`: the provider keeps no copy of the conversation summarised.
            let mut body = json!({
                "model": call.model,
                "input": turns(false),
                "max_output_tokens": call.max_tokens,
                "temperature": call.temperature,
                "store": false,
            });
            if !system.is_empty() {
                body["instructions"] = json!(system.join("\n\n"));
            }
            ("/v1/responses", body)
        }
    }
}

/// The text of a successful reply in `provider`'s API: Anthropic's `text` blocks, Chat's
/// `choices[0].message.content`, the `output_text` parts of Responses' `message` items.
fn reply_text(provider: Provider, body: &[u8]) -> Result<String, String> {
    let reply: Value = serde_json::from_slice(body).map_err(|e| format!("malformed reply: {e}"))?;
    let parts = |items: &Value, kind: &str| -> Vec<String> {
        items
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == kind)
            .filter_map(|item| item["text"].as_str().map(str::to_owned))
            .collect()
    };
    let (texts, expected) = match provider {
        Provider::Anthropic => (parts(&reply["content"], "text"), "a `text` content block"),
        Provider::OpenAiChat => (
            reply["choices"][0]["message"]["content"]
                .as_str()
                .map(str::to_owned)
                .into_iter()
                .collect(),
            "choices[0].message.content",
        ),
        Provider::OpenAiResponses => (
            reply["output"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|item| item["type"] == "message")
                .flat_map(|item| parts(&item["content"], "output_text"))
                .collect(),
            "an `output_text` part of a `message` item",
        ),
    };
    if texts.is_empty() {
        return Err(format!("the reply has no {expected}"));
    }
    Ok(texts.concat())
}

/// The reply's body, refused past [`MAX_REPLY_BYTES`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(describe_transport_error)? {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(format!("the reply is larger than {MAX_REPLY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A transport error without the URL (nor any header: no secret can reach a log), for the
/// summary call here and the binary's model backend alike.
pub fn describe_transport_error(error: reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out".into()
    } else if error.is_connect() {
        "could not connect".into()
    } else {
        format!("request failed: {}", error.without_url())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: ModelCall<'static> = ModelCall {
        model: "cheap",
        messages: &[("system", "You summarise."), ("user", "The history.")],
        max_tokens: 500,
        temperature: 1.5,
        timeout: Duration::from_secs(1),
    };

    #[test]
    fn each_api_gets_the_call_in_its_own_shape() {
        assert_eq!(
            request_body(Provider::Anthropic, &CALL),
            (
                "/v1/messages",
                json!({"model": "cheap", "max_tokens": 500, "temperature": 1.0, "system": "You summarise.",
                    "messages": [{"role": "user", "content": "The history."}]})
            )
        );
        assert_eq!(
            request_body(Provider::OpenAiChat, &CALL),
            (
                "/v1/chat/completions",
                json!({"model": "cheap", "max_tokens": 500, "temperature": 1.5, "messages": [
                    {"role": "system", "content": "You summarise."}, {"role": "user", "content": "The history."}]})
            )
        );
        assert_eq!(
            request_body(Provider::OpenAiResponses, &CALL),
            (
                "/v1/responses",
                json!({"model": "cheap", "max_output_tokens": 500, "temperature": 1.5, "store": false,
                    "instructions": "You summarise.", "input": [{"role": "user", "content": "The history."}]})
            )
        );
    }

    #[test]
    fn the_text_is_read_from_each_apis_reply() {
        let cases = [
            (
                Provider::Anthropic,
                json!({"content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "## Goal"}, {"type": "text", "text": "\n- x"}]}),
            ),
            (
                Provider::OpenAiChat,
                json!({"choices": [{"message": {"role": "assistant", "content": "## Goal\n- x"}}]}),
            ),
            (
                Provider::OpenAiResponses,
                json!({"output": [{"type": "reasoning", "summary": []}, {"type": "message", "content": [
                    {"type": "output_text", "text": "## Goal\n- x"}]}]}),
            ),
        ];
        for (provider, reply) in cases {
            assert_eq!(
                reply_text(provider, reply.to_string().as_bytes()),
                Ok("## Goal\n- x".to_owned()),
                "{provider:?}"
            );
            let empty = reply_text(provider, b"{}").unwrap_err();
            assert!(empty.starts_with("the reply has no "), "{empty}");
        }
        let garbage = reply_text(Provider::OpenAiChat, b"<html>busy</html>").unwrap_err();
        assert!(garbage.starts_with("malformed reply: "), "{garbage}");
    }

    #[test]
    fn only_the_credentials_are_lent_and_nothing_shows_them() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer sk-oat-lent-1".parse().unwrap());
        headers.insert("x-api-key", "sk-lent-2".parse().unwrap());
        headers.insert("anthropic-beta", "oauth-2025-04-20".parse().unwrap());
        headers.insert("cookie", "session=private".parse().unwrap());
        headers.insert("x-claude-code-session-id", "s1".parse().unwrap());
        let client = reqwest::Client::new();
        let model = UpstreamModel::lend(
            Provider::Anthropic,
            "http://127.0.0.1:1",
            &headers,
            client,
            runtime.handle().clone(),
        );
        let lent: Vec<&str> = model.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(lent, ["authorization", "x-api-key", "anthropic-beta"]);
        assert!(model.headers.values().all(HeaderValue::is_sensitive));
        let shown = format!("{model:?}");
        assert!(!shown.contains("lent"), "{shown}");
        assert_eq!(
            model.redacted(
                "echo: Authorization: Bearer sk-oat-lent-1, token sk-oat-lent-1, key sk-lent-2, beta oauth-2025-04-20"
            ),
            "echo: Authorization: [redacted], token [redacted], key [redacted], beta oauth-2025-04-20"
        );
    }
}
