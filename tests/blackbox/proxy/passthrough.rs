//! The proxy's ways around `context.prepare`: streams, the upstream's errors, other paths,
//! malformed and unpreparable bodies, and the proxy's own token.

use std::io::Read as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::Proxy;
use super::harness::{Received, Reply, SECRET_KEY, Upstream, assert_no_secret, calibrated, client, workspace};

/// A stream is relayed byte for byte and event by event: the client reads the first event
/// while the upstream is still writing the rest, and the stream's usage calibrates the session.
#[test]
fn an_anthropic_stream_is_relayed_byte_for_byte_as_it_arrives() {
    let events = [
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s\",\"usage\":{\"input_tokens\":777,\"output_tokens\":1}}}\n\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"h\\u00e9llo \u{2603}\"}}\r\n\r\n",
        ": keep-alive comment\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ];
    let body = json!({"model": "claude-test", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    check_stream("/v1/messages", &body, &events, 777);
}

/// The same for OpenAI Chat, whose usage comes in the last chunk before `[DONE]`.
#[test]
fn an_openai_chat_stream_is_relayed_byte_for_byte_as_it_arrives() {
    let events = [
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\u{e9}llo\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":555,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    ];
    let body = json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]});
    check_stream("/v1/chat/completions", &body, &events, 555);
}

/// Sends `body` to `path` and checks the upstream's `events`, written with pauses between
/// them, come back exactly and as they are written, and that `usage` calibrates the session.
fn check_stream(path: &str, body: &Value, events: &[&str], usage: u64) {
    const PAUSE: Duration = Duration::from_millis(400);
    let (_dir, ws) = workspace();
    let script: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    let upstream = Upstream::start(move |_| Reply::stream(&script, PAUSE));
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let started = Instant::now();
    let mut response = client()
        .post(proxy.url(path))
        .header("x-satchel-session", "stream-1")
        .header("x-api-key", SECRET_KEY)
        .json(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut first = [0u8; 16];
    let n = response.read(&mut first).unwrap();
    let first_at = started.elapsed();
    let mut all = first[..n].to_vec();
    response.read_to_end(&mut all).unwrap();
    let total = started.elapsed();
    assert_eq!(
        String::from_utf8(all).unwrap(),
        events.concat(),
        "the stream's exact bytes"
    );
    assert!(total >= PAUSE * 3, "the upstream paused between events");
    assert!(
        first_at + PAUSE * 2 < total,
        "the first event came at {first_at:?}, the whole stream at {total:?}"
    );
    assert_eq!(upstream.received()[0].json()["stream"], true);
    assert_eq!(calibrated(&ws, "stream-1"), usage);
}

/// The upstream's errors come back as it sent them: status, body and the headers a client
/// acts on; a redirect too, never followed (it would carry the client's key elsewhere).
#[test]
fn upstream_errors_pass_through_as_sent() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|request| {
        let status: u16 = request.json()["messages"][0]["content"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let mut reply = Reply::json(
            status,
            &json!({"type": "error", "error": {"type": "scripted_error", "message": format!("scripted {status}")}}),
        );
        reply.headers.push(("retry-after".into(), "7".into()));
        reply.headers.push(("request-id".into(), format!("req_{status}")));
        if status == 307 {
            reply
                .headers
                .push(("location".into(), "http://127.0.0.1:9/elsewhere".into()));
        }
        reply
    });
    let proxy = Proxy::start(&ws, &upstream, &[]);
    for status in [400u16, 429, 500, 307] {
        let body =
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": status.to_string()}]});
        let response = client()
            .post(proxy.url("/v1/messages"))
            .header("x-satchel-session", format!("err-{status}"))
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(response.headers()["retry-after"], "7");
        assert_eq!(response.headers()["request-id"], format!("req_{status}").as_str());
        let text = response.text().unwrap();
        let expected =
            json!({"type": "error", "error": {"type": "scripted_error", "message": format!("scripted {status}")}});
        assert_eq!(text, expected.to_string());
    }
    assert_eq!(upstream.received().len(), 4, "the redirect was not followed");
}

/// Every other path and method goes to the upstream untouched (exact path, query, body and
/// credentials), and its answer comes back untouched.
#[test]
fn other_paths_pass_through_untouched() {
    let (_dir, ws) = workspace();
    let echo = |request: &Received| Reply::json(200, &json!({"echo": request.target, "method": request.method}));
    let anthropic = Upstream::start(echo);
    let openai = Upstream::start(echo);
    let proxy = Proxy::start(&ws, &anthropic, &[("SATCHEL_PROXY_UPSTREAM_OPENAI", &openai.url)]);
    let http = client();
    let count = r#"{"model":"m", "messages":[{"role":"user","content":"count me"}],"n":1e2}"#;
    let responses =
        r#"{"model":"m","input":[{"type":"message","role":"user","content":"hi"}],"previous_response_id":"resp_1"}"#;
    // (method, path, body, sent with `anthropic-version`, so Anthropic's)
    let cases = [
        ("POST", "/v1/messages/count_tokens?beta=true", Some(count), false),
        ("HEAD", "/", None, false),
        ("GET", "/v1/models?limit=2", None, true),
        ("POST", "/v1/responses", Some(responses), false),
        ("GET", "/v1/models", None, false),
    ];
    for (method, path, body, versioned) in cases {
        let mut request = http
            .request(method.parse().unwrap(), proxy.url(path))
            .header("x-api-key", SECRET_KEY)
            .header("anthropic-beta", "tools-2024");
        if versioned {
            request = request.header("anthropic-version", "2023-06-01");
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let response = request.send().unwrap();
        assert_eq!(response.status(), 200, "{method} {path}");
        assert!(
            response.headers().get("x-satchel-session").is_none(),
            "{method} {path} was not managed"
        );
        if method != "HEAD" {
            assert_eq!(
                response.json::<Value>().unwrap(),
                json!({"echo": path, "method": method})
            );
        }
    }
    let (to_anthropic, to_openai) = (anthropic.received(), openai.received());
    assert_eq!(
        (to_anthropic.len(), to_openai.len()),
        (3, 2),
        "each went to its provider"
    );
    for ((method, path, body, _), got) in cases.iter().zip(to_anthropic.iter().chain(&to_openai)) {
        assert_eq!((got.method.as_str(), got.target.as_str()), (*method, *path));
        assert_eq!(
            got.body,
            body.unwrap_or_default().as_bytes(),
            "{method} {path}: the body as sent"
        );
        assert_eq!(got.header("x-api-key"), Some(SECRET_KEY));
        assert_eq!(got.header("anthropic-beta"), Some("tools-2024"));
    }
    assert!(
        proxy.log_text().contains("previous_response_id"),
        "the Responses pass-through is logged with its reason"
    );
    assert_no_secret(&ws, &proxy);
}

/// A body the proxy cannot read gets a 400 in the provider's own shape, and nothing reaches
/// the upstream; a request the engine refuses is forwarded as sent, with a warning.
#[test]
fn malformed_bodies_get_the_providers_error_and_unpreparable_ones_go_through_as_sent() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|_| Reply::json(200, &json!({"ok": true})));
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let http = client();
    let post = |path: &str, body: &str| {
        let response = http
            .post(proxy.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap();
        (
            response.status().as_u16(),
            response.headers().clone(),
            response.text().unwrap(),
        )
    };
    for body in ["not json", "[1,2]", r#"{"model":"m","messages":3}"#, r#"{"model":"m"}"#] {
        let (status, _, text) = post("/v1/messages", body);
        assert_eq!(status, 400, "{body}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (error["type"].clone(), error["error"]["type"].clone()),
            (json!("error"), json!("invalid_request_error")),
            "{text}"
        );
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        let (status, _, text) = post("/v1/chat/completions", body);
        assert_eq!(status, 400, "{body}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    assert!(
        upstream.received().is_empty(),
        "no malformed request reaches the upstream"
    );

    // Tools nested past what satchel takes (64 levels), then past what its JSON parser reads
    // (128): a provider may take either, so both go through as sent.
    for (i, depth) in [40, 80].into_iter().enumerate() {
        let mut deep = json!({"type": "object"});
        for _ in 0..depth {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": deep}}]);
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}).to_string();
        let (status, headers, _) = post("/v1/chat/completions", &body);
        assert_eq!(status, 200);
        let warning = headers["x-satchel-warning"].to_str().unwrap();
        assert!(warning.starts_with("not prepared: "), "{warning}");
        assert!(headers.contains_key("x-satchel-session"));
        assert_eq!(
            upstream.received()[i].body,
            body.as_bytes(),
            "forwarded exactly as sent"
        );
    }
    // A compressed body is not read: it goes through as sent.
    let compressed = b"\x1f\x8b\x08\x00 not read by satchel".to_vec();
    let response = http
        .post(proxy.url("/v1/messages"))
        .header("content-encoding", "gzip")
        .body(compressed.clone())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-satchel-session").is_none());
    let got = &upstream.received()[2];
    assert_eq!(
        (got.body.as_slice(), got.header("content-encoding")),
        (compressed.as_slice(), Some("gzip"))
    );
}

/// With a token of its own the proxy serves only requests that carry it (and never forwards
/// it); off loopback it does not start without one; `--print-env` says how to point agents at it.
#[test]
fn the_proxy_token_guards_it_and_print_env_points_agents_at_it() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|_| Reply::json(200, &json!({"ok": true})));
    let proxy = Proxy::start(&ws, &upstream, &[("SATCHEL_PROXY_TOKEN", "proxy-tok-1")]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let refused = client()
        .post(proxy.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(refused.status(), 407);
    assert_eq!(refused.headers()["proxy-authenticate"], "Bearer realm=\"satchel\"");
    assert_eq!(
        refused.json::<Value>().unwrap()["error"]["type"],
        "authentication_error"
    );
    let wrong = client()
        .post(proxy.url("/v1/messages"))
        .header("proxy-authorization", "Bearer nope")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 407);
    let served = client()
        .post(proxy.url("/v1/chat/completions"))
        .header("proxy-authorization", "Bearer proxy-tok-1")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(served.status(), 200);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].header("proxy-authorization"),
        None,
        "the proxy's token is its own"
    );

    let printed = std::process::Command::new(crate::support::satchel_bin())
        .arg("--workspace")
        .arg(&ws)
        .args(["proxy", "--print-env"])
        .output()
        .unwrap();
    let text = String::from_utf8(printed.stdout).unwrap();
    assert_eq!(
        text,
        format!(
            "export ANTHROPIC_BASE_URL=http://{0}\nexport OPENAI_BASE_URL=http://{0}/v1\n",
            proxy.addr
        )
    );
    drop(proxy);

    let (_dir, other) = workspace();
    let open = std::process::Command::new(crate::support::satchel_bin())
        .arg("--workspace")
        .arg(&other)
        .args(["proxy", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(open.status.code(), Some(1));
    let said = String::from_utf8(open.stderr).unwrap();
    assert!(
        said.contains("not a loopback address") && said.contains("proxy_token"),
        "{said}"
    );
}

/// The usage of a response is learnt before the client has the whole response, streamed or
/// not: an agent's next request, sent as soon as it has it, is prepared after the report, so
/// the usage calibrates the request it answers and never the next one.
#[test]
fn the_usage_is_learnt_before_the_response_ends() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|request: &Received| {
        let n = request.json()["messages"].as_array().map_or(0, Vec::len) as u64;
        if request.json()["stream"] == true {
            let events = [
                "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n".to_owned(),
                format!(
                    "data: {{\"id\":\"c\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":1}}}}\n\n",
                    1000 + n
                ),
                "data: [DONE]\n\n".to_owned(),
            ];
            return Reply::stream(&events, Duration::from_millis(20));
        }
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000 + n, "completion_tokens": 1}}),
        )
    });
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let mut messages = vec![json!({"role": "user", "content": "hello there"})];
    for (turn, stream) in [false, true, false, true].into_iter().enumerate() {
        let mut response = client()
            .post(proxy.url("/v1/chat/completions"))
            .header("x-satchel-session", "usage-order")
            .header("authorization", format!("Bearer {SECRET_KEY}"))
            .json(&json!({"model": "gpt-test", "stream": stream, "messages": messages}))
            .send()
            .unwrap();
        let mut body = String::new();
        response.read_to_string(&mut body).unwrap();
        // No waiting: the record is in the log by the time the response has ended.
        let records = crate::support::checks::session_records(&ws, "usage-order");
        let calibrations: Vec<&Value> = records.iter().filter(|r| r["record"] == "calibration").collect();
        assert_eq!(calibrations.len(), turn + 1, "turn {turn} (stream {stream}): {body}");
        let expected = 1000 + messages.len() as u64;
        assert_eq!(
            calibrations[turn]["last"]["provider_tokens"], expected,
            "the usage of this turn's request"
        );
        messages.push(json!({"role": "assistant", "content": "ok"}));
        messages.push(json!({"role": "user", "content": format!("and then {turn}?")}));
    }
    assert_no_secret(&ws, &proxy);
}
