//! `OpenAiEmbedder` (and `CachedEmbedder` in front of it) against a real HTTP server on
//! 127.0.0.1: a minimal HTTP/1.1 responder on a std `TcpListener`, one request per connection,
//! scripted per test and recording every request it gets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use satchel_memory::embed::{CachedEmbedder, Embedder, EmbeddingCacheConfig, HttpEmbeddingConfig, OpenAiEmbedder};
use serde_json::{Value, json};

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn inputs(&self) -> Vec<String> {
        self.body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }
}

/// What the server answers.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Reply {
    fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        }
    }
}

type Handler = dyn Fn(usize, &Recorded) -> Reply + Send + Sync;

struct Server {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    /// Serves on a free port; `handler` gets the request's number (from 0) and the request.
    fn start(handler: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let handler: Box<Handler> = Box::new(handler);
        // The thread lives as long as the test binary; it only ever blocks in `accept`.
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                serve_one(stream, &*handler, &recorded);
            }
        });
        Self { base_url, requests }
    }

    /// The server answering every request with embeddings of `dimensions`.
    fn embeddings(dimensions: usize) -> Self {
        Self::start(move |_, request| Reply::status(200, &embeddings_body(request, dimensions)))
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    fn embedder(&self, configure: impl FnOnce(&mut HttpEmbeddingConfig)) -> OpenAiEmbedder {
        let mut config = HttpEmbeddingConfig {
            base_url: self.base_url.clone(),
            model: "test-model".into(),
            dimensions: 32,
            timeout: Duration::from_secs(5),
            ..HttpEmbeddingConfig::default()
        };
        configure(&mut config);
        OpenAiEmbedder::new(config)
    }
}

fn serve_one(stream: TcpStream, handler: &Handler, recorded: &Mutex<Vec<Recorded>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request = Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let number = {
        let mut recorded = recorded.lock().unwrap();
        recorded.push(request.clone());
        recorded.len() - 1
    };
    let reply = handler(number, &request);
    let mut response = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&reply.body);
    let mut stream = stream;
    // The client may have given up (a test of timeouts or errors); that is not the server's
    // problem.
    let _ = stream.write_all(response.as_bytes());
}

/// One vector per input: one-hot at (the input's length in characters) mod `dimensions`, so a
/// test can tell which text a vector belongs to. The items come back in reverse order, as a
/// server is allowed to: the client must sort them by `index`.
fn embeddings_body(request: &Recorded, dimensions: usize) -> String {
    let data: Vec<Value> = request
        .inputs()
        .iter()
        .enumerate()
        .rev()
        .map(|(index, text)| {
            let mut embedding = vec![0.0_f32; dimensions];
            embedding[text.chars().count() % dimensions] = 2.0;
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": "test-model"}).to_string()
}

fn texts(count: usize) -> Vec<String> {
    (1..=count).map(|n| "x".repeat(n)).collect()
}

fn hot_position(vector: &[f32]) -> usize {
    vector.iter().position(|&x| x != 0.0).unwrap()
}

#[test]
fn batches_of_max_batch_size_in_order() {
    let server = Server::embeddings(32);
    let embedder = server.embedder(|c| c.max_batch_size = 10);
    let vectors = embedder.embed(&texts(25)).unwrap();

    assert_eq!(vectors.len(), 25);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(hot_position(vector), i + 1, "vector {i} belongs to another text");
        // The server sent 2.0: normalised to unit length.
        assert_eq!(vector[i + 1], 1.0);
    }
    let requests = server.requests();
    let sizes: Vec<usize> = requests.iter().map(|r| r.inputs().len()).collect();
    assert_eq!(sizes, [10, 10, 5]);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/embeddings");
    assert_eq!(first.body["model"], "test-model");
    assert_eq!(first.body["dimensions"], 32);
    assert_eq!(first.body["encoding_format"], "float");
    assert_eq!(embedder.model_id(), "openai:test-model:32");
}

#[test]
fn bearer_auth_only_with_a_key() {
    let server = Server::embeddings(32);
    server
        .embedder(|c| c.api_key = Some("sk-test".into()))
        .embed(&texts(1))
        .unwrap();
    server.embedder(|c| c.api_key = None).embed(&texts(1)).unwrap();
    let requests = server.requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(requests[1].header("authorization"), None);
}

#[test]
fn dimensions_field_only_when_asked() {
    let server = Server::embeddings(32);
    server.embedder(|c| c.send_dimensions = false).embed(&texts(1)).unwrap();
    assert!(server.requests()[0].body.get("dimensions").is_none());
}

#[test]
fn wrong_dimensions_is_an_error_naming_both() {
    let server = Server::embeddings(31);
    let error = server.embedder(|_| {}).embed(&texts(2)).unwrap_err();
    assert!(error.message.contains("31") && error.message.contains("32"), "{error}");
}

#[test]
fn server_error_is_retried() {
    let server = Server::start(|number, request| {
        if number == 0 {
            Reply::status(500, "busy")
        } else {
            Reply::status(200, &embeddings_body(request, 32))
        }
    });
    let vectors = server.embedder(|_| {}).embed(&texts(3)).unwrap();
    assert_eq!(vectors.len(), 3);
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn persistent_server_error_gives_up_after_two_retries() {
    let server = Server::start(|_, _| Reply::status(503, "{\"error\":\"overloaded\"}"));
    let error = server.embedder(|_| {}).embed(&texts(1)).unwrap_err();
    assert_eq!(server.requests().len(), 3);
    assert!(
        error.message.contains("503") && error.message.contains("overloaded"),
        "{error}"
    );
}

#[test]
fn rate_limit_honours_a_short_retry_after_and_not_a_long_one() {
    let short = Server::start(|number, request| {
        if number == 0 {
            Reply {
                status: 429,
                headers: vec![("Retry-After", "0".into())],
                body: "slow down".into(),
            }
        } else {
            Reply::status(200, &embeddings_body(request, 32))
        }
    });
    short.embedder(|_| {}).embed(&texts(1)).unwrap();
    assert_eq!(short.requests().len(), 2);

    let long = Server::start(|_, _| Reply {
        status: 429,
        headers: vec![("Retry-After", "60".into())],
        body: "quota".into(),
    });
    let error = long.embedder(|_| {}).embed(&texts(1)).unwrap_err();
    assert_eq!(
        long.requests().len(),
        1,
        "a one-minute Retry-After is reported, not waited for"
    );
    assert!(error.message.contains("429"), "{error}");
}

#[test]
fn unauthorized_is_not_retried_and_never_shows_the_key() {
    let key = "sk-very-secret-0123456789";
    let server = Server::start(move |_, request| {
        // Some servers echo the key they refused.
        let echoed = request.header("authorization").unwrap_or_default().to_owned();
        Reply::status(401, &format!("{{\"error\":\"invalid api key: {echoed}\"}}"))
    });
    let error = server
        .embedder(|c| c.api_key = Some(key.into()))
        .embed(&texts(1))
        .unwrap_err();
    assert_eq!(server.requests().len(), 1);
    assert!(error.message.contains("401"), "{error}");
    assert!(error.message.contains("invalid api key"), "{error}");
    assert!(!error.message.contains(key), "the key leaked: {error}");
    assert!(!error.message.contains("0123456789"), "part of the key leaked: {error}");
}

#[test]
fn server_down_is_an_error() {
    // A port that was just free: nothing listens there now.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let embedder = OpenAiEmbedder::new(HttpEmbeddingConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        timeout: Duration::from_secs(5),
        ..HttpEmbeddingConfig::default()
    });
    let error = embedder.embed(&texts(1)).unwrap_err();
    assert!(error.message.contains(&format!("127.0.0.1:{port}")), "{error}");
    assert!(
        error.message.contains("3 attempts"),
        "connection errors are retried: {error}"
    );
}

#[test]
fn long_inputs_are_cut_on_a_char_boundary() {
    let server = Server::embeddings(32);
    let long = "é".repeat(40);
    server
        .embedder(|c| c.max_input_length = 16)
        .embed(&[long, "short".into()])
        .unwrap();
    assert_eq!(server.requests()[0].inputs(), ["é".repeat(16), "short".into()]);
}

#[test]
fn cache_spares_the_second_request() {
    let server = Server::embeddings(32);
    let cached = CachedEmbedder::new(server.embedder(|_| {}), EmbeddingCacheConfig::default());
    let first = cached.embed(&texts(3)).unwrap();
    let second = cached.embed(&texts(3)).unwrap();
    assert_eq!(first, second);
    assert_eq!(server.requests().len(), 1);
    let stats = cached.stats();
    assert_eq!((stats.hits, stats.misses, stats.failures), (3, 3, 0));
    // Only the new text is sent.
    cached.embed(&texts(4)).unwrap();
    assert_eq!(server.requests()[1].inputs(), ["xxxx"]);
}
