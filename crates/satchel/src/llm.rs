//! The model backends of the LLM summariser: an OpenAI-compatible HTTP endpoint, the
//! client itself (`summarizer.complete`, for editor plugins that already hold the user's model
//! connection), and a proxied request's own upstream with its credentials (`upstream`). The prompts, staging, validation and fallback live in
//! `satchel_core::summary::llm`; this module only moves text to a model and back.
//!
//! An error's text becomes the summariser's fallback reason, which is stored in the session
//! log and returned to clients. So whatever is kept of it is first [`redact`]ed: the API key,
//! every extra header value, and anything that looks like a credential become `[redacted]`,
//! and at most [`KEPT_CHARS`] characters are kept. Every failed completion is logged as a
//! warning with that redacted reason.

use std::time::Duration;

use satchel_core::summary::llm::{ChatMessage, Completer, CompletionError};
use satchel_protocol::Config;
use satchel_protocol::config::REDACTED;
use satchel_proxy::{ModelCall, Provider, UpstreamModel};
use serde_json::{Value, json};

use crate::transport::{ClientHandle, ClientRequestError, EngineToken};

/// Method satchel calls on its client to run a model.
pub const CLIENT_COMPLETE_METHOD: &str = "summarizer.complete";

/// An OpenAI-compatible `/chat/completions` endpoint (OpenAI, vLLM, Ollama, DashScope, LiteLLM...).
pub struct OpenAiCompleter {
    url: String,
    model: String,
    api_key: Option<String>,
    temperature: f64,
    timeout: Duration,
    headers: Vec<(String, String)>,
    /// What must never appear in an error text: the key, the header values, credentials in
    /// the URL.
    secrets: Vec<String>,
}

impl OpenAiCompleter {
    /// Reads the endpoint from `config`; the API key comes from the environment variable the
    /// config names, so it is never in a config file or a log line.
    pub fn from_config(config: &Config) -> Self {
        let api_key = std::env::var(&config.daemon.llm.llm_api_key_env)
            .ok()
            .filter(|k| !k.is_empty());
        let headers: Vec<(String, String)> = config
            .daemon
            .llm
            .llm_extra_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut secrets: Vec<String> = api_key.iter().cloned().collect();
        secrets.extend(headers.iter().map(|(_, v)| v.clone()));
        secrets.extend(url_credentials(&config.daemon.llm.llm_base_url));
        OpenAiCompleter {
            url: format!(
                "{}/chat/completions",
                config.daemon.llm.llm_base_url.trim_end_matches('/')
            ),
            model: config.summary.llm_model.clone(),
            api_key,
            temperature: config.summary.llm_temperature,
            timeout: Duration::from_secs_f64(config.summary.llm_timeout_secs),
            headers,
            secrets,
        }
    }

    /// A failure whose text is `text` redacted of this endpoint's secrets.
    fn error(&self, text: &str) -> CompletionError {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        CompletionError(redact(text, &secrets))
    }
}

impl Completer for OpenAiCompleter {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        self.request(messages, max_tokens)
            .inspect_err(|e| warn_failed(&self.name(), e))
    }

    fn name(&self) -> String {
        format!("openai:{}", self.model)
    }
}

impl OpenAiCompleter {
    /// One `/chat/completions` request; its errors are redacted.
    fn request(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        let body = json!({
            "model": self.model,
            "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        });
        // No redirect is followed: reqwest would resend the extra headers (and, to the same
        // host, the key) to wherever the endpoint points, so a redirect is the endpoint's error.
        let client = reqwest::blocking::Client::builder()
            .timeout(self.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| self.error(&format!("HTTP client: {}", e.without_url())))?;
        let mut request = client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = request
            .send()
            .map_err(|e| self.error(&satchel_proxy::describe_transport_error(e)))?;
        let status = response.status();
        if status.is_redirection() {
            // Where it points is not said: a `Location` may carry credentials of its own.
            return Err(self.error(&format!(
                "HTTP {status}: the endpoint redirects, and redirects are not followed"
            )));
        }
        if !status.is_success() {
            // The body may echo the request (a proxy or debugging server): it is redacted
            // before anything of it is kept.
            let text = response.text().unwrap_or_default();
            return Err(self.error(&format!("HTTP {status}: {text}")));
        }
        let reply: Value = response
            .json()
            .map_err(|e| self.error(&format!("malformed response: {}", e.without_url())))?;
        reply["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CompletionError("response has no choices[0].message.content".into()))
    }
}

/// Why the `upstream` summariser has no model outside the proxy (stdio, the socket, the
/// scheduled memory merge): it borrows a proxied request's own upstream and credentials.
pub const NO_UPSTREAM: &str =
    "no proxied request in flight: the upstream summariser uses a request's own upstream, in satchel proxy only";

/// The model behind a proxied request's own upstream (`summarizer: "upstream"`), with the
/// request's credentials, which it borrows: it cannot outlive the prepare they are lent to.
pub struct UpstreamCompleter<'a> {
    upstream: &'a UpstreamModel,
    model: String,
    temperature: f64,
    timeout: Duration,
}

impl<'a> UpstreamCompleter<'a> {
    /// The configured model of `upstream`'s API (`summarizer_upstream_model_*`).
    pub fn new(upstream: &'a UpstreamModel, config: &Config) -> Self {
        let model = match upstream.provider() {
            Provider::Anthropic => &config.summary.summarizer_upstream_model_anthropic,
            Provider::OpenAiChat | Provider::OpenAiResponses => &config.summary.summarizer_upstream_model_openai,
        };
        UpstreamCompleter {
            upstream,
            model: model.clone(),
            temperature: config.summary.llm_temperature,
            timeout: Duration::from_secs_f64(config.summary.llm_timeout_secs),
        }
    }
}

impl Completer for UpstreamCompleter<'_> {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        let messages: Vec<(&str, &str)> = messages.iter().map(|m| (m.role, m.content.as_str())).collect();
        let call = ModelCall {
            model: &self.model,
            messages: &messages,
            max_tokens,
            temperature: self.temperature,
            timeout: self.timeout,
        };
        // The upstream has taken its own credentials out already; the rest is redacted too.
        self.upstream
            .complete(&call)
            .map_err(|e| CompletionError(redact(&e, &[])))
            .inspect_err(|e| warn_failed(&self.name(), e))
    }

    fn name(&self) -> String {
        format!("upstream:{}", self.model)
    }
}

/// Logs a failed completion; `error` is already redacted (see [`redact`]).
fn warn_failed(backend: &str, error: &CompletionError) {
    tracing::warn!(backend, reason = %error.0, "the summariser's model call failed");
}

/// The client runs the model: a `summarizer.complete {messages, max_tokens}` request over the
/// same connection, answered with `{text}`.
///
/// A request it stops waiting for (timeout, the call cancelled, the stream ended) is
/// cancelled with `$/cancelRequest`, so the client can stop its model.
pub struct ClientCompleter {
    handle: ClientHandle,
    timeout: Duration,
    /// The call the summary is for: once it is cancelled nobody needs the answer.
    token: EngineToken,
}

impl ClientCompleter {
    /// A completer that asks the client behind `handle` for the call holding `token`.
    pub fn new(handle: ClientHandle, timeout: Duration, token: EngineToken) -> Self {
        ClientCompleter { handle, timeout, token }
    }
}

impl Completer for ClientCompleter {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        let params = json!({
            "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
            "max_tokens": max_tokens,
        });
        let failed = |reason: String| {
            let error = CompletionError(redact(&reason, &[]));
            warn_failed("client", &error);
            error
        };
        let reply = match self
            .handle
            .request_for_call(CLIENT_COMPLETE_METHOD, params, self.timeout, &self.token)
        {
            Ok(reply) => reply,
            // Nobody needs the summary any more: not a failure of the model.
            Err(e @ ClientRequestError::Cancelled) => return Err(CompletionError(format!("client: {e}"))),
            Err(e) => return Err(failed(format!("client: {e}"))),
        };
        match reply["text"].as_str() {
            Some(text) => Ok(text.to_owned()),
            None => Err(failed("client reply has no `text`".into())),
        }
    }

    fn name(&self) -> String {
        "client".into()
    }
}

// ---------------------------------------------------------------------------------------------
// Redaction of error texts
// ---------------------------------------------------------------------------------------------

/// Characters of an error text kept (after redaction) in a fallback reason.
pub const KEPT_CHARS: usize = 200;
/// Characters of an error text looked at; the rest is dropped unread.
const SCANNED_CHARS: usize = 8_192;
/// Names whose value is a credential wherever they appear followed by `:` or `=` (echoed
/// headers, JSON fields, query parameters). Compared case-insensitively, at a word start.
const CREDENTIAL_NAMES: &[&str] = &[
    "authorization",
    "api-key",
    "api_key",
    "apikey",
    "cookie",
    "password",
    "secret",
    "token",
];
/// A run of these characters at least [`TOKEN_MIN_CHARS`] long with a digit and a letter
/// looks like a key or token (base64, hex, JWT).
const TOKEN_MIN_CHARS: usize = 32;

/// `text` fit to keep: every one of `secrets` (verbatim or JSON-escaped), the value after a
/// credential name (`Authorization: …`, `"api_key": "…"`, `token=…`), the token after
/// `Bearer`, `sk-…` keys and long token-like runs replaced by `[redacted]`; whitespace folded
/// to single spaces; at most [`KEPT_CHARS`] characters.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut text: String = match text.char_indices().nth(SCANNED_CHARS) {
        Some((end, _)) => without_cut_secret(&text[..end], secrets),
        None => text.to_owned(),
    };
    text = replace_secrets(&text, secrets);
    text = replace_credentials(&text);
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(KEPT_CHARS - 1) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

/// The userinfo and query string of `url`, where credentials may hide.
fn url_credentials(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let (url, query) = url.split_once('?').unwrap_or((url, ""));
    if !query.is_empty() {
        found.push(query.to_owned());
        found.extend(
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(_, v)| v.to_owned()),
        );
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = &rest[..rest.find(['/', '#']).unwrap_or(rest.len())];
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        found.push(userinfo.to_owned());
        found.extend(userinfo.split_once(':').map(|(_, password)| password.to_owned()));
    }
    found.retain(|s| !s.is_empty());
    found
}

/// `text` cut short: a trailing token-like run (too short now to be recognised) and a
/// trailing beginning of a secret are dropped.
fn without_cut_secret(text: &str, secrets: &[&str]) -> String {
    let mut text = text.to_owned();
    loop {
        let before = text.len();
        while text.bytes().last().is_some_and(is_token_byte) {
            text.pop();
        }
        for secret in secrets {
            let cut = (1..secret.len())
                .rev()
                .filter(|&n| secret.is_char_boundary(n))
                .find(|&n| text.ends_with(&secret[..n]));
            if let Some(n) = cut {
                text.truncate(text.len() - n);
            }
        }
        if text.len() == before {
            return text;
        }
    }
}

/// Every occurrence of a secret, verbatim or as a JSON string shows it, replaced in one pass
/// (longest first, so one secret containing another goes whole).
fn replace_secrets(text: &str, secrets: &[&str]) -> String {
    let mut known: Vec<String> = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        known.push((*secret).to_owned());
        let escaped = serde_json::to_string(secret).unwrap_or_default();
        if let Some(inner) = escaped.strip_prefix('"').and_then(|e| e.strip_suffix('"')) {
            known.push(inner.to_owned());
        }
    }
    known.retain(|s| !s.is_empty());
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    known.dedup();
    if known.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(secret) = known.iter().find(|s| rest.starts_with(s.as_str())) {
            out.push_str(REDACTED);
            rest = &rest[secret.len()..];
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Whether `b` may be part of a key or token.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/' | b'=' | b'.')
}

/// Whether a whole token-like run is a key: `sk-…`/`sk_…`, or a long mix of digits and letters.
fn looks_like_key(run: &[u8]) -> bool {
    let prefixed = (run.starts_with(b"sk-") || run.starts_with(b"sk_")) && run.len() >= 8;
    let long =
        run.len() >= TOKEN_MIN_CHARS && run.iter().any(u8::is_ascii_digit) && run.iter().any(u8::is_ascii_alphabetic);
    prefixed || long
}

/// `text` with credential-looking fragments replaced (see [`redact`]).
fn replace_credentials(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        let found = if word_start {
            credential_value(b, i).or_else(|| bearer_token(b, i))
        } else {
            None
        };
        let found = found.or_else(|| {
            let run_start = is_token_byte(b[i]) && (i == 0 || !is_token_byte(b[i - 1]));
            let end = i + b[i..].iter().take_while(|&&c| is_token_byte(c)).count();
            (run_start && looks_like_key(&b[i..end])).then_some((i, end))
        });
        match found {
            // Every boundary is next to an ASCII byte, so the slices are on char boundaries.
            Some((start, end)) => {
                out.push_str(&text[copied..start]);
                out.push_str(REDACTED);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The value after a credential name at `i` (`name: value`, `"name": "value"`, `name=value`,
/// also inside an escaped JSON string), as a byte range.
fn credential_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let name = CREDENTIAL_NAMES
        .iter()
        .find(|name| b.len() >= i + name.len() && b[i..i + name.len()].eq_ignore_ascii_case(name.as_bytes()))?;
    let mut j = i + name.len();
    let skip = |j: &mut usize, set: &[u8]| {
        while *j < b.len() && set.contains(&b[*j]) {
            *j += 1;
        }
    };
    skip(&mut j, b"\\\"'");
    skip(&mut j, b" \t");
    if j >= b.len() || !matches!(b[j], b':' | b'=') {
        return None;
    }
    j += 1;
    skip(&mut j, b" \t");
    let start;
    let mut end;
    if b.get(j) == Some(&b'\\') && matches!(b.get(j + 1), Some(b'"' | b'\'')) {
        // Inside an escaped JSON string: the value ends at the next backslash.
        start = j + 2;
        end = start;
        while end < b.len() && !matches!(b[end], b'\\' | b'\r' | b'\n') {
            end += 1;
        }
    } else if let Some(&quote @ (b'"' | b'\'')) = b.get(j) {
        start = j + 1;
        end = start;
        while end < b.len() && !matches!(b[end], b'\r' | b'\n') && b[end] != quote {
            end += if b[end] == b'\\' { 2 } else { 1 };
        }
        end = end.min(b.len());
    } else {
        start = j;
        end = start;
        while end < b.len() && !b"\r\n,;&}]\"'\\<".contains(&b[end]) {
            // A secret already replaced is part of the value, brackets and all.
            end += if b[end..].starts_with(REDACTED.as_bytes()) {
                REDACTED.len()
            } else {
                1
            };
        }
    }
    (end > start).then_some((start, end))
}

/// The token after `Bearer ` at `i`, as a byte range.
fn bearer_token(b: &[u8], i: usize) -> Option<(usize, usize)> {
    const BEARER: &[u8] = b"bearer";
    if b.len() < i + BEARER.len() || !b[i..i + BEARER.len()].eq_ignore_ascii_case(BEARER) {
        return None;
    }
    let mut start = i + BEARER.len();
    let spaces = b[start..].iter().take_while(|&&c| c == b' ' || c == b'\t').count();
    if spaces == 0 {
        return None;
    }
    start += spaces;
    let len = b[start..]
        .iter()
        .take_while(|&&c| !c.is_ascii_whitespace() && !b"\"'\\,;<".contains(&c))
        .count();
    (len > 0).then_some((start, start + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-0123456789abcdefABCDEF";

    fn assert_clean(text: &str, secrets: &[&str]) {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret:?} kept in {text:?}");
        }
    }

    #[test]
    fn the_key_and_header_values_are_redacted_wherever_they_are() {
        let body = format!(
            r#"{{"error": "bad request", "echo": {{"headers": {{"X-Org": "org-7731", "X-Key-Copy": "{KEY}"}}}}, "note": "your org org-7731"}}"#
        );
        let kept = redact(&body, &[KEY, "org-7731"]);
        assert_clean(&kept, &[KEY, "org-7731"]);
        assert!(kept.contains("bad request") && kept.contains(REDACTED), "{kept}");
    }

    #[test]
    fn secrets_escaped_in_json_are_redacted() {
        let secret = r#"we"ird\value"#;
        let body = serde_json::json!({"echo": secret}).to_string();
        let kept = redact(&body, &[secret]);
        assert!(!kept.contains(r#"we\"ird\\value"#), "{kept}");
        assert!(kept.contains(REDACTED));
    }

    #[test]
    fn authorization_and_bearer_fragments_are_redacted_without_knowing_the_key() {
        let cases = [
            "Authorization: Bearer abc.def-ghi\nHost: x",
            r#"{"authorization": "Basic dXNlcjpwYXNz"}"#,
            r#"{"headers": "{\"Authorization\": \"Bearer zzz\"}"}"#,
            "upstream said: bearer zzz-top (denied)",
            "GET /v1?api_key=hunter2&x=1",
            "x-api-key: hunter2",
            r#"{"access_token": "hunter2", "password":"hunter2"}"#,
        ];
        for case in cases {
            let kept = redact(case, &[]);
            assert_clean(&kept, &["abc.def-ghi", "dXNlcjpwYXNz", "zzz", "hunter2"]);
            assert!(kept.contains(REDACTED), "{case:?} → {kept:?}");
        }
        assert_eq!(
            redact("Authorization: Bearer t0k3n\r\nHost: example", &[]),
            "Authorization: [redacted] Host: example"
        );
        assert_eq!(
            redact("Authorization: Bearer t0k3n\r\nHost: example", &["t0k3n"]),
            "Authorization: [redacted] Host: example",
            "a known secret inside a credential value"
        );
    }

    #[test]
    fn token_like_runs_are_redacted_and_prose_is_kept() {
        let hex = "0123456789abcdef0123456789abcdef";
        let base64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123456789+/==";
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl";
        for token in [KEY, "sk-abc12345", hex, base64, jwt] {
            let kept = redact(&format!("invalid credential {token} given"), &[]);
            assert_eq!(kept, "invalid credential [redacted] given", "{token}");
        }
        let prose = "The server had an error while processing your request. max_tokens 2000 exceeds the limit";
        assert_eq!(redact(prose, &[]), prose);
        assert_eq!(redact("could not connect", &[]), "could not connect");
    }

    #[test]
    fn the_kept_text_is_one_capped_line() {
        let long = "error ".repeat(200);
        let kept = redact(&long, &[]);
        assert_eq!(kept.chars().count(), KEPT_CHARS);
        assert!(kept.ends_with('…'));
        assert_eq!(redact("a\n\n  b\tc  ", &[]), "a b c");
    }

    #[test]
    fn a_secret_cut_at_the_scan_limit_leaves_no_prefix() {
        // The scan limit falls inside `cut`, and the long secrets before it shrink to a few
        // `[redacted]`, which brings what remains of `cut` into the kept part.
        let long = "Q!".repeat(500);
        let cut = "Zq9!Zq9!Zq9!Zq9!";
        let head = long.repeat(8);
        let body = format!("{head}{}{cut}", " ".repeat(SCANNED_CHARS - head.len() - 5));
        let kept = redact(&body, &[&long, cut]);
        assert!(kept.starts_with("[redacted][redacted]"), "{kept}");
        assert!(!kept.contains("Zq9") && !kept.contains('Q'), "{kept}");
        assert_eq!(without_cut_secret("abc Zq9!Z", &[cut]), "abc ");
    }

    #[test]
    fn url_credentials_are_secrets() {
        let found = url_credentials("https://user:pa55word@llm.example.com/v1?key=k3y&x=1");
        for expected in ["user:pa55word", "pa55word", "key=k3y&x=1", "k3y"] {
            assert!(found.iter().any(|f| f == expected), "{expected} not in {found:?}");
        }
        assert!(url_credentials("http://127.0.0.1:8080/v1").is_empty());
    }

    #[test]
    fn the_completer_redacts_its_errors() {
        let mut config = Config::default();
        config.daemon.llm.llm_api_key_env = "SATCHEL_UNIT_TEST_NO_SUCH_VARIABLE".into();
        config.daemon.llm.llm_extra_headers = [("X-Org".to_owned(), "org-secret-55".to_owned())].into();
        let completer = OpenAiCompleter::from_config(&config);
        let error = completer.error("HTTP 500: echo X-Org: org-secret-55; Authorization: Bearer whatever");
        assert_eq!(error.0, "HTTP 500: echo X-Org: [redacted]; Authorization: [redacted]");
    }
}
