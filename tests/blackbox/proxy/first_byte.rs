//! A stream's first event reaches the client as soon as the upstream sends it. The proxy
//! writes a response's headers and its first event apart, as they come; with Nagle's
//! algorithm on its socket, the event waited for the client's delayed acknowledgement of the
//! headers (some 40 ms on Linux) on every streamed answer of a kept-alive connection.
//! (`scripts/bench`'s `proxy` scenario measures the same to the microsecond.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use super::harness::{Proxy, Upstream, client, workspace};
use crate::support::builders::user;

/// The upstream's pause between its headers and its first event, as a model's before its
/// first token.
const THINKING: Duration = Duration::from_millis(5);
/// The upstream's pause between the first event and the rest: the first must not wait for it.
const PAUSE: Duration = Duration::from_millis(150);
/// Streamed requests on one kept-alive connection to the proxy.
const REQUESTS: usize = 5;

#[test]
fn a_streams_first_event_is_not_held_back() {
    let (_dir, ws) = workspace();
    let eager = eager_stream_server();
    let unused = Upstream::start(|_| unreachable!("the proxy calls the eager server"));
    let proxy = Proxy::start(&ws, &unused, &[("SATCHEL_PROXY_UPSTREAM_OPENAI", eager.as_str())]);
    let http = client();
    let mut gaps = Vec::new();
    for i in 0..REQUESTS {
        let body = json!({"model": "m", "stream": true, "messages": [user(&format!("question {i}"))]});
        let mut response = http
            .post(proxy.url("/v1/chat/completions"))
            .header("x-satchel-session", "first-byte")
            .json(&body)
            .send()
            .unwrap();
        let headers_at = Instant::now();
        assert_eq!(response.status(), 200);
        let mut first = [0u8; 64];
        let n = response.read(&mut first).unwrap();
        assert!(String::from_utf8_lossy(&first[..n]).starts_with("data: {\"first\""));
        gaps.push(headers_at.elapsed());
        let mut rest = Vec::new();
        response.read_to_end(&mut rest).unwrap();
    }
    // The median: a fresh connection acknowledges at once, a kept-alive one late.
    gaps.sort();
    let median = gaps[REQUESTS / 2];
    assert!(
        median < THINKING + Duration::from_millis(20),
        "the first event came {median:?} after the headers (median of {gaps:?}); the upstream sent it {THINKING:?} after them"
    );
}

/// A model server on loopback that answers every request with an event stream: its headers,
/// its first event [`THINKING`] later, the rest [`PAUSE`] after that; returns its URL.
fn eager_stream_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || answer(stream));
        }
    });
    url
}

fn answer(mut stream: TcpStream) {
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let chunk = |event: &str| format!("{:x}\r\n{event}\r\n", event.len());
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    std::thread::sleep(THINKING);
    if stream
        .write_all(chunk("data: {\"first\":true}\n\n").as_bytes())
        .is_err()
    {
        return;
    }
    std::thread::sleep(PAUSE);
    let _ = stream.write_all(format!("{}0\r\n\r\n", chunk("data: [DONE]\n\n")).as_bytes());
}
