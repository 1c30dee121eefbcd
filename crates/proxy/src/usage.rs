//! The provider's input tokens for a request, read from its response as the response passes
//! through: from the JSON body, or from the stream's events (Anthropic's `message_start` and
//! `message_delta`, OpenAI's final chunk with `stream_options.include_usage`). The bytes are
//! only looked at, never changed or held back.

use serde_json::Value;

/// The most of a non-streaming body kept to read its usage: a reply larger than this is
/// relayed all the same, and its usage is not learnt from.
const MAX_JSON_BODY: usize = 8 << 20;

/// The longest line of a stream looked at; a longer event is skipped.
const MAX_EVENT_LINE: usize = 1 << 20;

/// Reads the usage out of a response body, chunk by chunk.
#[derive(Debug)]
pub struct UsageTap {
    stream: bool,
    /// The JSON body so far, or the stream's unfinished line.
    pending: Vec<u8>,
    /// The body outgrew [`MAX_JSON_BODY`].
    overflowed: bool,
    /// The input tokens of the latest event that reported them.
    input_tokens: Option<u64>,
}

impl UsageTap {
    /// A tap for a body that is a server-sent event stream (`stream`) or one JSON document.
    pub fn new(stream: bool) -> Self {
        UsageTap {
            stream,
            pending: Vec::new(),
            overflowed: false,
            input_tokens: None,
        }
    }

    /// Looks at the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.stream {
            if self.pending.len() + chunk.len() > MAX_JSON_BODY {
                self.overflowed = true;
                self.pending = Vec::new();
            }
            if !self.overflowed {
                self.pending.extend_from_slice(chunk);
            }
            return;
        }
        let mut rest = chunk;
        while let Some(end) = memchr_newline(rest) {
            self.pending.extend_from_slice(&rest[..end]);
            let line = std::mem::take(&mut self.pending);
            self.event_line(&line);
            rest = &rest[end + 1..];
        }
        if self.pending.len() + rest.len() <= MAX_EVENT_LINE {
            self.pending.extend_from_slice(rest);
        } else {
            self.pending.clear();
        }
    }

    /// The input tokens reported, once the body has ended.
    pub fn finish(mut self) -> Option<u64> {
        if self.stream {
            let line = std::mem::take(&mut self.pending);
            self.event_line(&line);
        } else if !self.overflowed {
            self.input_tokens = serde_json::from_slice::<Value>(&self.pending)
                .ok()
                .and_then(|body| input_tokens(&body));
        }
        self.input_tokens
    }

    /// One line of the stream: a `data:` line's JSON may carry usage.
    fn event_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        if let Ok(event) = serde_json::from_slice::<Value>(data)
            && let Some(tokens) = input_tokens(&event)
        {
            self.input_tokens = Some(tokens);
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The input tokens a response body or stream event reports: OpenAI Chat's `prompt_tokens`,
/// OpenAI Responses' `input_tokens` (its cached tokens are part of them; a stream reports
/// them in `response.completed`'s `response`), or Anthropic's `input_tokens` plus its cache
/// reads and writes (all of them were sent).
fn input_tokens(value: &Value) -> Option<u64> {
    let usage = value
        .get("usage")
        .or_else(|| value.get("message").and_then(|m| m.get("usage")))
        .or_else(|| value.get("response").and_then(|r| r.get("usage")))
        .filter(|u| u.is_object())?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let tokens = match count("prompt_tokens") {
        Some(prompt) => prompt,
        None => {
            count("input_tokens")?
                + count("cache_creation_input_tokens").unwrap_or(0)
                + count("cache_read_input_tokens").unwrap_or(0)
        }
    };
    (tokens > 0).then_some(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(stream: bool, chunks: &[&str]) -> Option<u64> {
        let mut tap = UsageTap::new(stream);
        for chunk in chunks {
            tap.feed(chunk.as_bytes());
        }
        tap.finish()
    }

    #[test]
    fn a_json_body_reports_its_usage() {
        let anthropic =
            r#"{"type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":5}}"#;
        let (head, tail) = anthropic.split_at(20);
        assert_eq!(tap(false, &[head, tail]), Some(100));
        assert_eq!(
            tap(false, &[r#"{"usage":{"prompt_tokens":42,"completion_tokens":1}}"#]),
            Some(42)
        );
        assert_eq!(tap(false, &[r#"{"error":{"message":"x"}}"#]), None);
        assert_eq!(tap(false, &["not json"]), None);
    }

    #[test]
    fn a_stream_reports_the_usage_of_its_events_split_anywhere() {
        let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"cache_creation_input_tokens\":3,\"output_tokens\":1}}}\n\n\
            event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\r\n\r\n";
        for cut in [1, 30, 100, anthropic.len() - 1] {
            let (a, b) = anthropic.split_at(cut);
            assert_eq!(tap(true, &[a, b]), Some(10), "cut at {cut}");
        }
        let openai = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":55}}\n\ndata: [DONE]";
        assert_eq!(tap(true, &[openai]), Some(55));
        assert_eq!(tap(true, &["data: {\"choices\":[]}\n\n"]), None);
        let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
            event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":321,\"input_tokens_details\":{\"cached_tokens\":300},\"output_tokens\":4}}}\n\n";
        assert_eq!(tap(true, &[responses]), Some(321));
        assert_eq!(
            tap(
                false,
                &[r#"{"object":"response","usage":{"input_tokens":77,"output_tokens":2}}"#]
            ),
            Some(77)
        );
    }
}
