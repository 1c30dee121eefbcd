//! [`OpenAiEmbedder`]: an OpenAI-compatible `POST {base_url}/embeddings` endpoint (DashScope,
//! OpenAI, vLLM, Ollama, LM Studio...).
//!
//! Texts are cut to `max_input_length` characters and sent in batches of `max_batch_size`; a
//! transient failure (no connection, 429, 5xx) is retried twice, anything else fails at once.
//! The API key goes in the `Authorization` header only, and is scrubbed from every error message
//! in case the server echoes it back.

use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde::{Deserialize, Serialize};

use super::{EmbedError, Embedder, l2_normalize};

/// Pauses before the first and the second retry. Short: a search is waiting on the answer, and
/// a server that is still failing after half a second is better reported than waited for.
const RETRY_BACKOFF: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// The longest `Retry-After` honoured. A server asking for more is rate limiting in earnest;
/// the caller hears about it now rather than blocking an indexing thread for a minute.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(2);

/// How much of an error response body goes into the message: enough for the server's reason,
/// not a whole HTML error page.
const MAX_ERROR_BODY_CHARS: usize = 300;

/// Where and how to reach the endpoint. The defaults are DashScope's `text-embedding-v4` at 1024
/// dimensions, as in the configuration keys `embedding_*`.
#[derive(Debug, Clone)]
pub struct HttpEmbeddingConfig {
    /// The URL before `/embeddings`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set; local servers often need none.
    pub api_key: Option<String>,
    /// The `model` field of each request.
    pub model: String,
    /// Length of every vector; each returned vector is checked against it.
    pub dimensions: usize,
    /// Longest input, in characters; longer texts are cut on a character boundary, because the
    /// endpoint rejects the whole batch when one input is over its limit.
    pub max_input_length: usize,
    /// Texts per request, at most (DashScope accepts 10).
    pub max_batch_size: usize,
    /// How long one request may take, connection included.
    pub timeout: Duration,
    /// Whether to send the `dimensions` field; models with one fixed size reject it.
    pub send_dimensions: bool,
}

impl Default for HttpEmbeddingConfig {
    fn default() -> Self {
        Self {
            base_url: "https://dashscope.aliyuncs.com/compatible-mode/v1".into(),
            api_key: None,
            model: "text-embedding-v4".into(),
            dimensions: 1024,
            max_input_length: 8192,
            max_batch_size: 10,
            timeout: Duration::from_secs(30),
            send_dimensions: true,
        }
    }
}

/// An [`Embedder`] backed by an OpenAI-compatible embeddings endpoint.
pub struct OpenAiEmbedder {
    /// The configuration, as given (`max_batch_size` and `max_input_length` at least 1).
    config: HttpEmbeddingConfig,
    /// `{base_url}/embeddings`, built once.
    endpoint: String,
    /// `openai:{model}:{dimensions}`.
    model_id: String,
    /// Built on first use, not in [`OpenAiEmbedder::new`]: reqwest's blocking client panics when
    /// built inside an async runtime, and the daemon may construct this from async code while it
    /// only ever embeds from blocking threads.
    client: OnceLock<Client>,
}

impl OpenAiEmbedder {
    /// An embedder for `config`. No request is made until the first [`Embedder::embed`].
    pub fn new(mut config: HttpEmbeddingConfig) -> Self {
        // Zero would mean "no text fits" / "no batch holds anything": treat it as 1 rather than
        // looping forever or sending empty inputs.
        config.max_batch_size = config.max_batch_size.max(1);
        config.max_input_length = config.max_input_length.max(1);
        let endpoint = format!("{}/embeddings", config.base_url.trim_end_matches('/'));
        let model_id = format!("openai:{}:{}", config.model, config.dimensions);
        Self {
            config,
            endpoint,
            model_id,
            client: OnceLock::new(),
        }
    }

    fn client(&self) -> Result<&Client, EmbedError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        // No redirect is followed: reqwest would send the key on to wherever the endpoint
        // points (to the same host, or through a second hop), so a redirect is the endpoint's
        // error.
        let built = Client::builder()
            .timeout(self.config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| EmbedError::new(format!("embeddings client: {}", self.redact(&error_chain(&e)))))?;
        // Two threads may race to build; the loser's client is dropped, which is harmless.
        Ok(self.client.get_or_init(|| built))
    }

    /// One request for `batch` (already within the batch size), with retries.
    fn embed_batch(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let input: Vec<&str> = batch
            .iter()
            .map(|t| truncate_chars(t, self.config.max_input_length))
            .collect();
        let body = EmbeddingRequest {
            model: &self.config.model,
            input,
            dimensions: self.config.send_dimensions.then_some(self.config.dimensions),
            encoding_format: "float",
        };
        let client = self.client()?;
        let mut attempt = 0;
        loop {
            let failure = match self.send_once(client, &body) {
                Ok(response) => return self.parse(response, batch.len()),
                Err(failure) => failure,
            };
            let wait = match (failure.retry, RETRY_BACKOFF.get(attempt)) {
                (Retry::No, _) | (_, None) => None,
                (Retry::After(Some(asked)), _) if asked > MAX_RETRY_AFTER => None,
                (Retry::After(Some(asked)), Some(&backoff)) => Some(asked.max(backoff)),
                (Retry::After(None), Some(&backoff)) => Some(backoff),
            };
            let Some(wait) = wait else {
                let tries = if attempt == 0 {
                    String::new()
                } else {
                    format!(" (after {} attempts)", attempt + 1)
                };
                return Err(EmbedError::new(format!(
                    "embedding request to {} failed{tries}: {}",
                    self.endpoint, failure.message
                )));
            };
            tracing::debug!(attempt, ?wait, message = %failure.message, "retrying embedding request");
            thread::sleep(wait);
            attempt += 1;
        }
    }

    /// One attempt: the response on a 2xx status, else why not and whether to try again.
    fn send_once(&self, client: &Client, body: &EmbeddingRequest<'_>) -> Result<Response, Failure> {
        let mut request = client.post(&self.endpoint).json(body);
        // An empty key (an empty environment variable) means none, not `Bearer ` with nothing.
        if let Some(key) = self.config.api_key.as_deref().filter(|key| !key.is_empty()) {
            request = request.bearer_auth(key);
        }
        let response = request.send().map_err(|e| Failure {
            // A connection that could not be made (refused, DNS) is worth another try; a timeout
            // already cost the caller `timeout`, and two more would triple it.
            retry: if e.is_connect() { Retry::After(None) } else { Retry::No },
            // The URL is already in the message this ends up in.
            message: self.redact(&error_chain(&e.without_url())),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status.is_redirection() {
            // Where it points is not said: a `Location` may carry credentials of its own.
            return Err(Failure {
                retry: Retry::No,
                message: format!("HTTP {status}: the endpoint redirects, and redirects are not followed"),
            });
        }
        let retry = if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Retry::After(retry_after(&response))
        } else {
            Retry::No
        };
        // Redacted before it is cut, so a cut cannot leave half a key behind.
        let text = self.redact(response.text().unwrap_or_default().trim());
        let mut message = format!("HTTP {status}");
        if !text.is_empty() {
            let snippet = truncate_chars(&text, MAX_ERROR_BODY_CHARS);
            let ellipsis = if snippet.len() < text.len() { "…" } else { "" };
            message = format!("{message}: {snippet}{ellipsis}");
        }
        Err(Failure { retry, message })
    }

    /// The vectors of a 2xx response, in input order, checked and normalised.
    fn parse(&self, response: Response, expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let fail = |what: String| EmbedError::new(format!("embedding response from {}: {what}", self.endpoint));
        let text = response
            .text()
            .map_err(|e| fail(self.redact(&error_chain(&e.without_url()))))?;
        let parsed: EmbeddingResponse = serde_json::from_str(&text).map_err(|e| {
            fail(self.redact(&format!(
                "not an embeddings response ({e}): {}",
                truncate_chars(&self.redact(&text), MAX_ERROR_BODY_CHARS)
            )))
        })?;
        if parsed.data.len() != expected {
            return Err(fail(format!("{} vectors for {expected} inputs", parsed.data.len())));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for (position, item) in parsed.data.into_iter().enumerate() {
            // Servers return `index`, and may reorder; without one, the order is the answer.
            let index = item.index.unwrap_or(position);
            let slot = slots
                .get_mut(index)
                .ok_or_else(|| fail(format!("index {index} out of range 0..{expected}")))?;
            if slot.is_some() {
                return Err(fail(format!("index {index} returned twice")));
            }
            // Checked whether or not `dimensions` was sent: the model id promises this length, and
            // the index cannot compare vectors of different lengths.
            if item.embedding.len() != self.config.dimensions {
                return Err(fail(format!(
                    "vector of {} dimensions, expected {} (set embedding_dimensions to the model's size)",
                    item.embedding.len(),
                    self.config.dimensions
                )));
            }
            if item.embedding.iter().any(|x| !x.is_finite()) {
                return Err(fail(format!("vector {index} holds a non-finite value")));
            }
            let mut vector = item.embedding;
            l2_normalize(&mut vector);
            *slot = Some(vector);
        }
        // Every slot is filled: `expected` distinct in-range indices were seen.
        Ok(slots.into_iter().flatten().collect())
    }

    /// `message` with the API key replaced, so no log or search warning ever shows it.
    fn redact(&self, message: &str) -> String {
        match self.config.api_key.as_deref() {
            Some(key) if !key.is_empty() => message.replace(key, "[redacted]"),
            _ => message.to_owned(),
        }
    }
}

impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.max_batch_size) {
            vectors.extend(self.embed_batch(batch)?);
        }
        Ok(vectors)
    }
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

/// A failed attempt.
struct Failure {
    retry: Retry,
    /// Already redacted.
    message: String,
}

enum Retry {
    /// Permanent (4xx other than 429, a timeout, a bad request body).
    No,
    /// Transient; the server may have said how long to wait.
    After(Option<Duration>),
}

/// A `Retry-After` given in seconds (the HTTP-date form is rare on APIs and not worth a parser).
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The first `max_chars` characters of `text`.
fn truncate_chars(text: &str, max_chars: usize) -> &str {
    text.char_indices().nth(max_chars).map_or(text, |(end, _)| &text[..end])
}

/// An error with its causes: reqwest's own `Display` says only "error sending request", the
/// reason (connection refused, TLS, timeout) is in the source chain.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("héllo", 5), "héllo");
        assert_eq!(truncate_chars("héllo", 50), "héllo");
        assert_eq!(truncate_chars("", 3), "");
    }

    #[test]
    fn model_id_and_endpoint() {
        let embedder = OpenAiEmbedder::new(HttpEmbeddingConfig {
            base_url: "http://h/v1/".into(),
            ..HttpEmbeddingConfig::default()
        });
        assert_eq!(embedder.model_id(), "openai:text-embedding-v4:1024");
        assert_eq!(embedder.endpoint, "http://h/v1/embeddings");
    }

    #[test]
    fn redacts_the_key() {
        let embedder = OpenAiEmbedder::new(HttpEmbeddingConfig {
            api_key: Some("sk-123".into()),
            ..HttpEmbeddingConfig::default()
        });
        assert_eq!(embedder.redact("bad key sk-123!"), "bad key [redacted]!");
    }

    #[test]
    fn empty_input_makes_no_request() {
        // Port 9 (discard) on a documentation address: any request would fail.
        let embedder = OpenAiEmbedder::new(HttpEmbeddingConfig {
            base_url: "http://192.0.2.1:9".into(),
            ..HttpEmbeddingConfig::default()
        });
        assert_eq!(embedder.embed(&[]), Ok(vec![]));
    }
}
