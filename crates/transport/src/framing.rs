//! Message framing on a byte stream: NDJSON lines and LSP-style `Content-Length` frames.
//!
//! Editors disagree on framing (LSP clients send `Content-Length` headers, scripts and
//! agents prefer one JSON document per line), so the framing is detected per message and
//! the reply is written in the framing its request came in. Sizes are checked before a
//! body is buffered, so an oversized message costs no memory: it is read and discarded.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Longest header line accepted; real headers are a few dozen bytes.
const MAX_HEADER_LINE: usize = 8 * 1024;

/// How much of an oversized body is kept, to read its request's id from (the envelope comes
/// first in the messages clients write: `{"jsonrpc":"2.0","id":7,"method":...`).
pub(crate) const KEPT_PREFIX: usize = 4 * 1024;

/// How a message is delimited on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One JSON document per line.
    Ndjson,
    /// `Content-Length: N` headers, a blank line, then N bytes of body.
    ContentLength,
}

/// What was read for one message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A complete message body.
    Message(Vec<u8>),
    /// The body was over the size limit and has been skipped; its first bytes (at most
    /// [`KEPT_PREFIX`]) are kept.
    TooBig(Vec<u8>),
    /// The headers could not be understood; the text says why.
    BadHeader(String),
}

/// One message read from the stream, with the framing it came in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Incoming {
    /// Framing to use for the reply.
    pub framing: Framing,
    /// The message, or why there is none.
    pub frame: Frame,
}

/// A line read with a length cap.
enum Line {
    /// The line without its `\n` or `\r\n`.
    Complete(Vec<u8>),
    /// The line was longer than the cap; its bytes were discarded but for the first
    /// [`KEPT_PREFIX`].
    TooLong(Vec<u8>),
}

/// Reads framed messages from a buffered byte stream.
pub(crate) struct FrameReader<R> {
    reader: R,
    max_body: usize,
}

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    /// Wraps `reader`; bodies longer than `max_body` bytes are skipped.
    pub fn new(reader: R, max_body: usize) -> Self {
        Self { reader, max_body }
    }

    /// Reads the next message; `None` at end of stream.
    ///
    /// A last line without `\n` still counts; a `Content-Length` frame cut short is dropped.
    pub async fn next(&mut self) -> io::Result<Option<Incoming>> {
        let too_big = |prefix| Ok(Some(incoming(Framing::Ndjson, Frame::TooBig(prefix))));
        loop {
            // Room for a header line even when the body limit is tiny.
            let line = match self.read_line(self.max_body.max(MAX_HEADER_LINE)).await? {
                None => return Ok(None),
                Some(Line::TooLong(prefix)) => return too_big(prefix),
                Some(Line::Complete(line)) => line,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some(value) = header_value(&line, b"content-length") {
                let length = parse_length(value);
                return self.read_content_length_frame(length).await;
            }
            if line.len() > self.max_body {
                let mut prefix = line;
                prefix.truncate(KEPT_PREFIX);
                return too_big(prefix);
            }
            return Ok(Some(incoming(Framing::Ndjson, Frame::Message(line))));
        }
    }

    /// Reads the rest of a `Content-Length` frame whose first header gave `length`.
    async fn read_content_length_frame(&mut self, mut length: Result<usize, String>) -> io::Result<Option<Incoming>> {
        loop {
            match self.read_line(MAX_HEADER_LINE).await? {
                None => {
                    tracing::warn!("end of stream inside Content-Length headers");
                    return Ok(None);
                }
                Some(Line::TooLong(_)) => length = Err("header line too long".to_owned()),
                Some(Line::Complete(line)) if line.is_empty() => break,
                // Other headers (Content-Type) carry nothing we need.
                Some(Line::Complete(_)) => {}
            }
        }
        let length = match length {
            Ok(length) => length,
            Err(why) => {
                return Ok(Some(incoming(Framing::ContentLength, Frame::BadHeader(why))));
            }
        };
        if length > self.max_body {
            let mut prefix = Vec::new();
            let mut body = (&mut self.reader).take(length as u64);
            let kept = (&mut body).take(KEPT_PREFIX as u64).read_to_end(&mut prefix).await?;
            let skipped = kept as u64 + tokio::io::copy(&mut body, &mut tokio::io::sink()).await?;
            if skipped < length as u64 {
                tracing::warn!("end of stream inside an oversized Content-Length body");
                return Ok(None);
            }
            return Ok(Some(incoming(Framing::ContentLength, Frame::TooBig(prefix))));
        }
        let mut body = vec![0; length];
        match self.reader.read_exact(&mut body).await {
            Ok(_) => Ok(Some(incoming(Framing::ContentLength, Frame::Message(body)))),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                tracing::warn!("end of stream inside a Content-Length body");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads one line, ending in `\n` or `\r\n` or at EOF, keeping at most `max` bytes of it.
    ///
    /// A longer line is consumed but only its first [`KEPT_PREFIX`] bytes are kept, so a huge line
    /// never sits in memory.
    async fn read_line(&mut self, max: usize) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut too_long = false;
        let mut read_any = false;
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                break;
            }
            read_any = true;
            let newline = memchr::memchr(b'\n', buf);
            let chunk = &buf[..newline.unwrap_or(buf.len())];
            // One extra byte for the `\r` of a `\r\n` ending, which is stripped below.
            if !too_long && line.len() + chunk.len() > max.saturating_add(1) {
                too_long = true;
                line.truncate(KEPT_PREFIX);
            }
            let keep = if too_long {
                KEPT_PREFIX.saturating_sub(line.len()).min(chunk.len())
            } else {
                chunk.len()
            };
            line.extend_from_slice(&chunk[..keep]);
            let used = newline.map_or(buf.len(), |i| i + 1);
            self.reader.consume(used);
            if newline.is_some() {
                break;
            }
        }
        if !read_any {
            return Ok(None);
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if too_long || line.len() > max {
            line.truncate(KEPT_PREFIX);
            return Ok(Some(Line::TooLong(line)));
        }
        Ok(Some(Line::Complete(line)))
    }
}

fn incoming(framing: Framing, frame: Frame) -> Incoming {
    Incoming { framing, frame }
}

/// The value of header line `line` if its name is `name` (ASCII case-insensitive).
fn header_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let (head, rest) = line.split_at_checked(name.len())?;
    let rest = rest.strip_prefix(b":")?;
    head.eq_ignore_ascii_case(name).then_some(rest)
}

/// Parses a `Content-Length` header value into a byte count.
fn parse_length(value: &[u8]) -> Result<usize, String> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("bad Content-Length: {:?}", String::from_utf8_lossy(value)))
}

/// Frames a reply `body` for the wire; an NDJSON frame reuses an owned body's buffer.
pub(crate) fn encode(framing: Framing, body: impl Into<Vec<u8>>) -> Vec<u8> {
    let mut body = body.into();
    match framing {
        Framing::Ndjson => {
            // A raw line break can only be insignificant whitespace in valid JSON (inside
            // strings it must be escaped), so replacing it keeps the document and the framing.
            let mut from = 0;
            while let Some(at) = memchr::memchr2(b'\n', b'\r', &body[from..]) {
                body[from + at] = b' ';
                from += at + 1;
            }
            body.push(b'\n');
            body
        }
        Framing::ContentLength => {
            let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            frame.append(&mut body);
            frame
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(input: &[u8], max_body: usize) -> Vec<Incoming> {
        futures::executor::block_on(async {
            let mut reader = FrameReader::new(input, max_body);
            let mut out = Vec::new();
            while let Some(msg) = reader.next().await.expect("in-memory reads cannot fail") {
                out.push(msg);
            }
            out
        })
    }

    fn message(framing: Framing, body: &str) -> Incoming {
        incoming(framing, Frame::Message(body.as_bytes().to_vec()))
    }

    #[test]
    fn detects_framing_per_message() {
        let input = b"\n{\"a\":1}\r\n  \ncontent-LENGTH: 7\nContent-Type: x\n\n{\"b\":2}Content-Length:2\r\n\r\n{}[1]";
        assert_eq!(
            read_all(input, 100),
            vec![
                message(Framing::Ndjson, "{\"a\":1}"),
                message(Framing::ContentLength, "{\"b\":2}"),
                message(Framing::ContentLength, "{}"),
                message(Framing::Ndjson, "[1]"),
            ]
        );
    }

    #[test]
    fn skips_oversized_bodies_in_both_framings() {
        let input = b"0123456789\nok\nContent-Length: 11\r\n\r\n01234567890ok\n";
        assert_eq!(
            read_all(input, 5),
            vec![
                incoming(Framing::Ndjson, Frame::TooBig(b"0123456789".to_vec())),
                message(Framing::Ndjson, "ok"),
                incoming(Framing::ContentLength, Frame::TooBig(b"01234567890".to_vec())),
                message(Framing::Ndjson, "ok"),
            ]
        );
    }

    #[test]
    fn an_oversized_body_keeps_only_its_prefix() {
        let long = "y".repeat(3 * KEPT_PREFIX);
        let input = format!("{long}\nContent-Length: {}\r\n\r\n{long}ok\n", long.len());
        let out = read_all(input.as_bytes(), 100);
        let prefix = long.as_bytes()[..KEPT_PREFIX].to_vec();
        assert_eq!(
            out,
            vec![
                incoming(Framing::Ndjson, Frame::TooBig(prefix.clone())),
                incoming(Framing::ContentLength, Frame::TooBig(prefix)),
                message(Framing::Ndjson, "ok"),
            ]
        );
    }

    #[test]
    fn bad_header_is_reported_and_reading_continues() {
        let out = read_all(b"Content-Length: abc\r\n\r\n{}\n", 100);
        assert!(matches!(out[0].frame, Frame::BadHeader(_)));
        assert_eq!(out[1..], [message(Framing::Ndjson, "{}")]);
    }

    #[test]
    fn truncated_body_at_eof_is_dropped() {
        assert_eq!(read_all(b"Content-Length: 10\r\n\r\n{}", 100), vec![]);
        assert_eq!(read_all(b"Content-Length: 10\r\n", 100), vec![]);
    }

    #[test]
    fn ndjson_encoding_never_splits_a_document() {
        assert_eq!(encode(Framing::Ndjson, b"{\n\"a\":1\r\n}"), b"{ \"a\":1  }\n");
    }

    proptest! {
        #[test]
        fn round_trips_json_strings(s in any::<String>(), t in any::<String>()) {
            let bodies = [serde_json::to_vec(&s)?, serde_json::to_vec(&t)?];
            for framing in [Framing::Ndjson, Framing::ContentLength] {
                let wire: Vec<u8> = bodies.iter().flat_map(|b| encode(framing, b.as_slice())).collect();
                let expected: Vec<Incoming> = bodies
                    .iter()
                    .map(|b| incoming(framing, Frame::Message(b.clone())))
                    .collect();
                prop_assert_eq!(read_all(&wire, usize::MAX), expected);
            }
        }
    }
}
