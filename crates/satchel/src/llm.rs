//! The model backends of the LLM summariser: an OpenAI-compatible HTTP endpoint, and the
//! client itself (`summarizer.complete`, for editor plugins that already hold the user's model
//! connection). The prompts, staging, validation and fallback live in
//! `satchel_core::summary::llm`; this module only moves text to a model and back.

use std::time::Duration;

use satchel_core::summary::llm::{ChatMessage, Completer, CompletionError};
use satchel_protocol::Config;
use serde_json::{Value, json};

use crate::transport::ClientHandle;

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
}

impl OpenAiCompleter {
    /// Reads the endpoint from `config`; the API key comes from the environment variable the
    /// config names, so it is never in a config file or a log line.
    pub fn from_config(config: &Config) -> Self {
        OpenAiCompleter {
            url: format!("{}/chat/completions", config.llm_base_url.trim_end_matches('/')),
            model: config.llm_model.clone(),
            api_key: std::env::var(&config.llm_api_key_env).ok().filter(|k| !k.is_empty()),
            temperature: config.llm_temperature,
            timeout: Duration::from_secs_f64(config.llm_timeout_secs),
            headers: config
                .llm_extra_headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

impl Completer for OpenAiCompleter {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        let body = json!({
            "model": self.model,
            "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        });
        let client = reqwest::blocking::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| CompletionError(format!("HTTP client: {e}")))?;
        let mut request = client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = request.send().map_err(|e| CompletionError(describe(e)))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().unwrap_or_default();
            return Err(CompletionError(format!(
                "HTTP {status}: {}",
                text.chars().take(300).collect::<String>()
            )));
        }
        let reply: Value = response
            .json()
            .map_err(|e| CompletionError(format!("malformed response: {e}")))?;
        reply["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CompletionError("response has no choices[0].message.content".into()))
    }

    fn name(&self) -> String {
        format!("openai:{}", self.model)
    }
}

/// A reqwest error without the URL or any header (no secret can leak into a log).
fn describe(error: reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out".into()
    } else if error.is_connect() {
        "could not connect".into()
    } else {
        format!("request failed: {}", error.without_url())
    }
}

/// The client runs the model: a `summarizer.complete {messages, max_tokens}` request over the
/// same connection, answered with `{text}`.
pub struct ClientCompleter {
    handle: ClientHandle,
    timeout: Duration,
}

impl ClientCompleter {
    /// A completer that asks the client behind `handle`.
    pub fn new(handle: ClientHandle, timeout: Duration) -> Self {
        ClientCompleter { handle, timeout }
    }
}

impl Completer for ClientCompleter {
    fn complete(&self, messages: &[ChatMessage], max_tokens: u64) -> Result<String, CompletionError> {
        let params = json!({
            "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
            "max_tokens": max_tokens,
        });
        let reply = self
            .handle
            .request_blocking(CLIENT_COMPLETE_METHOD, params, self.timeout)
            .map_err(|e| CompletionError(format!("client: {e}")))?;
        reply["text"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CompletionError("client reply has no `text`".into()))
    }

    fn name(&self) -> String {
        "client".into()
    }
}
