//! The transport driven over in-memory pipes: framing, errors, ids, cancellation, limits.
//! The harness ([`Client`], [`start_with`], …) is shared with the modules' own tests.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};
use jsonrpsee::{Methods, RpcModule};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream};
use tokio::task::JoinHandle;

use crate::framing::{self, Frame, FrameReader, Framing, Incoming};
use crate::{CallScope, Cancellation, DirectHandler, Service, TransportLimits, serve};

/// The cancellation of the tests' calls: nothing commits, so a cancel always wins.
#[derive(Clone, Default)]
pub(crate) struct TestToken(Arc<AtomicBool>);

impl Cancellation for TestToken {
    fn cancel(&self) -> bool {
        self.0.store(true, Ordering::Release);
        true
    }

    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What a test method finds in its extensions.
pub(crate) type Scope = CallScope<TestToken>;

fn methods() -> Methods {
    let mut module = RpcModule::new(());
    module
        .register_method("echo", |params, _, _| params.parse::<Value>())
        .expect("fresh name");
    module
        .register_async_method("sleep", |params, _, _| async move {
            let ms: u64 = params.one()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ErrorObjectOwned>(ms)
        })
        .expect("fresh name");
    module
        .register_method("fail", |_, _, _| {
            Err::<(), _>(ErrorObject::owned(4242, "boom", None::<()>))
        })
        .expect("fresh name");
    module.into()
}

/// A peer talking to `serve` over in-memory pipes.
pub(crate) struct Client {
    input: DuplexStream,
    output: FrameReader<BufReader<DuplexStream>>,
    server: JoinHandle<io::Result<()>>,
}

fn start(limits: TransportLimits) -> Client {
    start_with(methods(), limits)
}

/// Serves `methods` to a new [`Client`].
pub(crate) fn start_with(methods: Methods, limits: TransportLimits) -> Client {
    start_service(methods.into(), limits)
}

/// Serves `service` to a new [`Client`].
fn start_service(service: Service<TestToken>, limits: TransportLimits) -> Client {
    let (input, server_in) = tokio::io::duplex(1 << 16);
    let (server_out, output) = tokio::io::duplex(1 << 16);
    Client {
        input,
        output: FrameReader::new(BufReader::new(output), usize::MAX),
        server: tokio::spawn(serve(server_in, server_out, service, limits)),
    }
}

pub(crate) fn call(id: Value, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

pub(crate) fn notify(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

impl Client {
    pub(crate) async fn send(&mut self, framing: Framing, body: &str) {
        self.send_raw(&framing::encode(framing, body.as_bytes())).await;
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.input.write_all(bytes).await.expect("pipe open");
    }

    pub(crate) async fn recv(&mut self) -> (Framing, Value) {
        let next = tokio::time::timeout(Duration::from_secs(5), self.output.next());
        let incoming = next.await.expect("reply in time").expect("pipe open");
        parse(incoming.expect("a reply, not EOF"))
    }

    /// Closes the input and returns every reply written until `serve` returned.
    pub(crate) async fn finish(mut self) -> Vec<(Framing, Value)> {
        drop(self.input);
        let mut replies = Vec::new();
        while let Some(incoming) = self.output.next().await.expect("pipe open") {
            replies.push(parse(incoming));
        }
        self.server.await.expect("no panic").expect("serve ok");
        replies
    }
}

fn parse(incoming: Incoming) -> (Framing, Value) {
    let Frame::Message(body) = incoming.frame else {
        panic!("bad frame {:?}", incoming.frame);
    };
    (incoming.framing, serde_json::from_slice(&body).expect("JSON reply"))
}

pub(crate) fn by_id(mut replies: Vec<(Framing, Value)>) -> Vec<(Framing, Value)> {
    replies.sort_by_key(|(_, reply)| reply["id"].to_string());
    replies
}

#[tokio::test]
async fn replies_in_the_framing_of_each_request() {
    let mut client = start(TransportLimits::default());
    client.send(Framing::Ndjson, &call(json!(1), "echo", json!([1]))).await;
    client.send_raw(b"\r\n\n").await;
    let second = call(json!(2), "echo", json!({"a": "b"}));
    client.send(Framing::ContentLength, &second).await;
    let third = call(json!(3), "echo", json!(["x\ny"]));
    client.send_raw(format!("{third}\r\n").as_bytes()).await;
    let replies = by_id(client.finish().await);
    assert_eq!(
        replies,
        vec![
            (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 1, "result": [1]})),
            (
                Framing::ContentLength,
                json!({"jsonrpc": "2.0", "id": 2, "result": {"a": "b"}})
            ),
            (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 3, "result": ["x\ny"]})),
        ]
    );
}

#[tokio::test]
async fn batch_gets_an_array_and_notifications_get_nothing() {
    let mut client = start(TransportLimits::default());
    let batch = format!(
        "[{},{},{}]",
        call(json!(1), "echo", json!([1])),
        call(json!(2), "nope", json!([])),
        notify("echo", json!([3])),
    );
    client.send(Framing::ContentLength, &batch).await;
    for method in ["initialized", "$/setTrace", "exit", "echo"] {
        client.send(Framing::Ndjson, &notify(method, json!({}))).await;
    }
    client.send(Framing::Ndjson, &call(json!(4), "echo", json!([4]))).await;
    let replies = by_id(client.finish().await);
    assert_eq!(replies.len(), 2, "{replies:?}");
    let (framing, array) = &replies[1];
    assert_eq!(*framing, Framing::ContentLength);
    assert_eq!(array[0]["result"], json!([1]));
    assert_eq!(array[1]["error"]["code"], json!(-32601));
    assert_eq!(replies[0].1["id"], json!(4));
}

#[tokio::test]
async fn batches_are_answered_by_jsonrpsee_s_rules() {
    let mut client = start(TransportLimits {
        max_request_bytes: 1 << 16,
        max_response_bytes: 512,
    });
    // An empty batch is not a request: one error, not an array.
    client.send(Framing::Ndjson, "[]").await;
    let (_, reply) = client.recv().await;
    assert_eq!((&reply["id"], &reply["error"]["code"]), (&Value::Null, &json!(-32600)));
    // Notifications only: no reply at all.
    let notifications = format!("[{},{}]", notify("echo", json!([1])), notify("nope", json!([])));
    client.send(Framing::Ndjson, &notifications).await;
    // Replies that fit one by one but not together: the batch gets that error alone.
    let long = || json!(["x".repeat(300)]);
    let batch = format!(
        "[{},{}]",
        call(json!(1), "echo", long()),
        call(json!(2), "echo", long())
    );
    client.send(Framing::ContentLength, &batch).await;
    let (framing, reply) = client.recv().await;
    assert_eq!(framing, Framing::ContentLength);
    assert_eq!(
        (&reply["id"], &reply["error"]["code"]),
        (&Value::Null, &json!(-32011)),
        "{reply}"
    );
    // A call in a batch with an entry that is not a request: both answered, in order.
    client
        .send(
            Framing::Ndjson,
            &format!(r#"[{},{{"id":5}}]"#, call(json!(4), "echo", json!([4]))),
        )
        .await;
    let (_, reply) = client.recv().await;
    assert_eq!(reply[0]["result"], json!([4]));
    assert_eq!(
        (&reply[1]["id"], &reply[1]["error"]["code"]),
        (&json!(5), &json!(-32600))
    );
}

#[tokio::test]
async fn invalid_messages_get_json_rpc_errors() {
    let mut client = start(TransportLimits::default());
    client.send(Framing::Ndjson, "{bad json").await;
    client.send(Framing::Ndjson, r#"{"foo":1,"id":6}"#).await;
    client.send(Framing::Ndjson, &call(json!(7), "nope", json!([]))).await;
    client.send(Framing::Ndjson, &call(json!(8), "fail", json!([]))).await;
    client
        .send(Framing::Ndjson, &call(json!(9), "sleep", json!(["x"])))
        .await;
    client.send_raw(b"Content-Length: abc\r\n\r\n").await;
    client
        .send(Framing::ContentLength, &call(json!(10), "echo", json!([])))
        .await;
    let replies = client.finish().await;
    let codes: Vec<(Value, Value)> = by_id(replies)
        .into_iter()
        .map(|(_, r)| (r["id"].clone(), r["error"]["code"].clone()))
        .collect();
    assert_eq!(
        codes,
        vec![
            (json!(10), Value::Null),
            (json!(6), json!(-32600)),
            (json!(7), json!(-32601)),
            (json!(8), json!(4242)),
            (json!(9), json!(-32602)),
            (Value::Null, json!(-32700)),
            (Value::Null, json!(-32700)),
        ]
    );
}

#[tokio::test]
async fn a_message_that_is_not_utf8_gets_a_parse_error_wherever_the_bad_bytes_are() {
    let mut client = start(TransportLimits::default());
    let bodies: [&[u8]; 5] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":\"fz-\xff1\",\"method\":\"echo\",\"params\":[1]}",
        b"{\"jsonrpc\":\"2.0\",\"id\":\"\xed\xa0\x80\",\"method\":\"echo\",\"params\":[1]}",
        b"{\"jsonrpc\":\"2.0\",\"x\xc3\":1,\"id\":5,\"method\":\"echo\",\"params\":[1]}",
        b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ech\xc0\xafo\",\"params\":[1]}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"\xff\"],\"id\":\"a\xf4\x90\x80\x80\"}",
    ];
    for (framing, body) in [Framing::Ndjson, Framing::ContentLength]
        .into_iter()
        .flat_map(|f| bodies.map(|b| (f, b)))
    {
        client.send_raw(&framing::encode(framing, body)).await;
        let (got, reply) = client.recv().await;
        assert_eq!(got, framing);
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&Value::Null, &json!(-32700)),
            "{}: {reply}",
            String::from_utf8_lossy(body)
        );
    }
    // Bad bytes inside a call's params, past what routing reads: the call's id is known.
    let body = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"echo\",\"params\":[\"\xff\"]}";
    client.send_raw(&framing::encode(Framing::Ndjson, body)).await;
    let (_, reply) = client.recv().await;
    assert!(reply["error"]["code"].is_i64(), "{reply}");
    client.send(Framing::Ndjson, &call(json!(8), "echo", json!([8]))).await;
    assert_eq!(client.recv().await.1["result"], json!([8]));
}

#[tokio::test]
async fn an_invalid_id_gets_invalid_request_and_any_number_is_echoed() {
    let mut client = start(TransportLimits::default());
    for id in [json!(true), json!([1]), json!({"n": 1})] {
        client.send(Framing::Ndjson, &call(id, "echo", json!([1]))).await;
        let (_, reply) = client.recv().await;
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(reply["error"]["code"], json!(-32600), "{reply}");
    }
    // Any number is a valid id, even one jsonrpsee cannot hold: it comes back as sent.
    for id in ["-7", "1.5", "18446744073709551616"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[1]}}"#);
        client.send(Framing::Ndjson, &body).await;
        let (_, reply) = client.recv().await;
        assert_eq!(reply["result"], json!([1]), "{reply}");
    }
    let body = r#"{"jsonrpc":"2.0","id":-7,"method":"echo","params":["raw"]}"#;
    client.send(Framing::ContentLength, body).await;
    let (_, reply) = client.recv().await;
    assert_eq!(
        (&reply["id"], &reply["result"]),
        (&json!(-7), &json!(["raw"])),
        "{reply}"
    );
    client.send(Framing::Ndjson, &call(json!(2), "echo", json!([2]))).await;
    assert_eq!(client.recv().await.1["result"], json!([2]));
}

#[tokio::test]
async fn valid_json_that_is_not_a_request_gets_invalid_request_and_bad_json_a_parse_error() {
    let mut client = start(TransportLimits::default());
    for body in [
        "{}",
        r#"{"foo":1}"#,
        r#""x""#,
        "42",
        "null",
        "true",
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"id":[1]}"#,
    ] {
        client.send(Framing::Ndjson, body).await;
        let (_, reply) = client.recv().await;
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&Value::Null, &json!(-32600)),
            "{body}: {reply}"
        );
    }
    client.send(Framing::Ndjson, "[1]").await;
    assert_eq!(client.recv().await.1[0]["error"]["code"], json!(-32600));
    for body in ["{bad", "nul", "42 43"] {
        client.send(Framing::Ndjson, body).await;
        let (_, reply) = client.recv().await;
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&Value::Null, &json!(-32700)),
            "{body}: {reply}"
        );
    }
    // A notification gets nothing; the next call is answered.
    client.send(Framing::Ndjson, &notify("echo", json!([1]))).await;
    client.send(Framing::Ndjson, &call(json!(1), "echo", json!([1]))).await;
    assert_eq!(client.recv().await.1["id"], json!(1));
}

#[tokio::test]
async fn a_direct_method_that_panics_is_answered_with_an_internal_error() {
    let mut service = Service::from(methods());
    let boom: DirectHandler<TestToken> = Arc::new(|_, _| panic!("a bug"));
    service.direct = Arc::new(HashMap::from([("echo", boom)]));
    let mut client = start_service(service, TransportLimits::default());
    client.send(Framing::Ndjson, &call(json!(-3), "echo", json!([1]))).await;
    let (_, reply) = client.recv().await;
    assert_eq!(
        (&reply["id"], &reply["error"]["code"]),
        (&json!(-3), &json!(-32603)),
        "{reply}"
    );
    client.send(Framing::Ndjson, &call(json!(4), "sleep", json!([1]))).await;
    assert_eq!(client.recv().await.1["result"], json!(1), "the daemon keeps serving");
}

#[tokio::test]
async fn fast_reply_overtakes_slow_one() {
    let mut client = start(TransportLimits::default());
    client
        .send(Framing::Ndjson, &call(json!(1), "sleep", json!([300])))
        .await;
    client
        .send(Framing::Ndjson, &call(json!(2), "sleep", json!([10])))
        .await;
    assert_eq!(client.recv().await.1["id"], json!(2));
    assert_eq!(client.recv().await.1["id"], json!(1));
}

#[tokio::test]
async fn cancel_request_aborts_the_call() {
    let mut client = start(TransportLimits::default());
    client
        .send(Framing::ContentLength, &call(json!("a"), "sleep", json!([5000])))
        .await;
    client
        .send(Framing::Ndjson, &call(json!(7), "sleep", json!([5000])))
        .await;
    let started = Instant::now();
    for id in [json!(99), json!("a"), json!(7)] {
        let cancel = notify("$/cancelRequest", json!({"id": id}));
        client.send(Framing::Ndjson, &cancel).await;
    }
    let cancelled = by_id(vec![client.recv().await, client.recv().await]);
    let error = json!({"code": -32800, "message": "Request cancelled"});
    assert_eq!(
        cancelled,
        vec![
            (
                Framing::ContentLength,
                json!({"jsonrpc": "2.0", "id": "a", "error": error})
            ),
            (Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 7, "error": error})),
        ]
    );
    client.send(Framing::Ndjson, &call(json!(8), "echo", json!([]))).await;
    let rest = client.finish().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].1["id"], json!(8));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn eof_waits_for_requests_in_flight() {
    let mut client = start(TransportLimits::default());
    client
        .send(Framing::Ndjson, &call(json!(1), "sleep", json!([200])))
        .await;
    let replies = client.finish().await;
    assert_eq!(
        replies,
        vec![(Framing::Ndjson, json!({"jsonrpc": "2.0", "id": 1, "result": 200}))]
    );
}

#[tokio::test]
async fn oversized_messages_are_skipped_in_both_framings() {
    let mut client = start(TransportLimits {
        max_request_bytes: 1024,
        max_response_bytes: 512,
    });
    let big = call(json!(1), "echo", json!(["x".repeat(2000)]));
    // Answered under the id the message's first bytes carry.
    let too_big = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32007, "message": "Request is too big", "data": "Exceeded max limit of 1024"},
    });
    for framing in [Framing::Ndjson, Framing::ContentLength] {
        client.send(framing, &big).await;
        assert_eq!(client.recv().await, (framing, too_big.clone()));
        client.send(framing, &call(json!(2), "echo", json!([2]))).await;
        assert_eq!(
            client.recv().await,
            (framing, json!({"jsonrpc": "2.0", "id": 2, "result": [2]}))
        );
    }
    let long_reply = call(json!(3), "echo", json!(["x".repeat(800)]));
    client.send(Framing::Ndjson, &long_reply).await;
    assert_eq!(client.recv().await.1["error"]["code"], json!(-32008));
}
#[tokio::test]
async fn write_failure_ends_serve_with_the_error() {
    let Client {
        mut input,
        output,
        server,
    } = start(TransportLimits::default());
    drop(output);
    let request = call(json!(1), "echo", json!([]));
    let frame = framing::encode(Framing::Ndjson, request.as_bytes());
    input.write_all(&frame).await.expect("pipe open");
    let result = tokio::time::timeout(Duration::from_secs(5), server).await;
    let error = result.expect("serve returns").expect("no panic").unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
}
