//! The `proxy` scenario: what `satchel proxy` adds to an agent's request, against a direct
//! call to the same model server ([`crate::upstream`], in this process) and against
//! `context.prepare`'s own cost over stdio.
//!
//! Each step is the `steady_full` step of the conversation (the whole history resent, as an
//! agent does), sent three ways, one after the other: straight to the upstream (`direct`),
//! as `context.prepare` with the full list to a `satchel serve` over stdio (`prepare`), and
//! to the upstream through a `satchel proxy` (`proxy`), each daemon in a workspace of its
//! own, both configured like the other scenarios. `added` = proxy − direct − prepare, per
//! step: the proxy's cost beyond the hook it runs (reading and rewriting the body, the second
//! HTTP hop, the headers). The same request then goes as a stream, direct and through the
//! proxy: `first_byte` is the time from the upstream handing its first event to its
//! connection to the client reading it, so `first_byte_added` is what the proxy adds to a
//! stream's time to first byte once the model starts answering. Targets (issue 29): `added`
//! p50 ≤ 3 ms on a 130K-token request, `first_byte_added` p50 ≤ 1 ms.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::conversation::{Conversation, Format};
use crate::daemon::{Daemon, Timed};
use crate::stats;
use crate::upstream::{STREAM_HEADER, Upstream};

/// The session of every request, through the proxy (`X-Satchel-Session`) and over stdio.
const SESSION: &str = "bench-proxy";

/// The target of `added` p50, in ms.
const TARGET_ADDED_MS: f64 = 3.0;
/// The target of `first_byte_added` p50, in ms.
const TARGET_FIRST_BYTE_MS: f64 = 1.0;

/// Left after each proxied request, untimed, for the usage report the proxy sends its
/// engine once the response is out, as an agent's next request comes much later.
const SETTLE: Duration = Duration::from_millis(10);

/// How long the proxy may take to write `run/proxy.json`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What the scenario runs on, from the bench's settings.
pub struct Setup<'a> {
    /// The `satchel` binary.
    pub satchel: &'a Path,
    /// The conversation.
    pub conversation: &'a Conversation,
    /// `config` of every `context.prepare`, and the proxy's own configuration.
    pub config: &'a Value,
    /// The daemons' tokenizer (`SATCHEL_TOKENIZER`).
    pub tokenizer: &'a str,
    /// The first message sent step by step, as in `steady_full`.
    pub first: usize,
}

/// `context.prepare` params with the full list, borrowing the conversation.
#[derive(Serialize)]
struct PrepareParams<'a> {
    session_id: &'static str,
    messages: &'a [Value],
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a Value>,
    config: &'a Value,
}

impl Setup<'_> {
    /// `context.prepare` params for `messages`.
    fn params<'a>(&'a self, messages: &'a [Value]) -> PrepareParams<'a> {
        PrepareParams {
            session_id: SESSION,
            messages,
            format: self.conversation.format.wire_name(),
            system: self.conversation.system.as_ref(),
            config: self.config,
        }
    }
}

/// The `context.prepare` result fields the scenario reads.
#[derive(Deserialize)]
struct Prepared {
    actions: Vec<Action>,
}

#[derive(Deserialize)]
struct Action {
    kind: String,
}

/// One HTTP exchange as the client saw it.
struct Exchange {
    /// Request written to the whole response read.
    total: Duration,
    /// When the first byte of the body arrived.
    first_byte: Instant,
    /// Request written to the first byte of the body.
    to_first_byte: Duration,
    /// `X-Satchel-Compacted: true`.
    compacted: bool,
}

/// Runs the scenario.
pub fn run(setup: &Setup<'_>) -> anyhow::Result<Map<String, Value>> {
    let conversation = setup.conversation;
    let messages = &conversation.messages;
    let upstream = Upstream::start()?;
    let proxy = ProxyProcess::start(setup, &upstream)?;
    let mut daemon = Daemon::spawn(setup.satchel, setup.tokenizer)?;
    daemon.initialize()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let path = match conversation.format {
        Format::Anthropic => "/v1/messages",
        Format::OpenAi => "/v1/chat/completions",
    };
    let (direct_url, proxy_url) = (
        format!("{}{path}", upstream.url),
        format!("http://{}{path}", proxy.addr),
    );
    let send = |url: &str, body: &Bytes, stream: bool| {
        runtime.block_on(exchange(&http, conversation.format, url, body.clone(), stream))
    };

    // Both sessions begin with the history before the timed steps (untimed), and every
    // connection is open.
    let first = setup.first;
    let body = request_body(conversation, &messages[..first], false)?;
    send(&direct_url, &body, false)?;
    send(&proxy_url, &body, false)?;
    daemon.call::<_, serde::de::IgnoredAny>("context.prepare", &setup.params(&messages[..first]))?;

    let (mut direct, mut prepare, mut proxied, mut added) = (vec![], vec![], vec![], vec![]);
    let (mut ttfb_direct, mut ttfb_proxy, mut first_byte_direct, mut first_byte_proxy, mut first_byte_added) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut compactions, mut proxy_compactions, mut request_bytes) = (0, 0, 0);
    for i in first..messages.len() {
        // Every request is serialised before any is timed.
        let body = request_body(conversation, &messages[..=i], false)?;
        let stream_body = request_body(conversation, &messages[..=i], true)?;
        let request = daemon.request("context.prepare", &setup.params(&messages[..=i]))?;
        request_bytes = body.len();

        let straight = send(&direct_url, &body, false)?;
        let prepared: Timed<Prepared> = daemon.send(&request)?;
        let through = send(&proxy_url, &body, false)?;
        std::thread::sleep(SETTLE);
        // The stdio session is told the usage the proxied one is, so both count alike.
        report_usage(&mut daemon, upstream.last_input_tokens())?;

        let straight_stream = send(&direct_url, &stream_body, true)?;
        let direct_event = upstream.take_first_event().context("the direct stream sent no event")?;
        let through_stream = send(&proxy_url, &stream_body, true)?;
        let proxy_event = upstream
            .take_first_event()
            .context("the proxied stream sent no event")?;
        std::thread::sleep(SETTLE);
        // And it prepares what the proxied one prepared for the stream (untimed).
        daemon.call::<_, serde::de::IgnoredAny>("context.prepare", &setup.params(&messages[..=i]))?;
        report_usage(&mut daemon, upstream.last_input_tokens())?;

        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        direct.push(ms(straight.total));
        prepare.push(ms(prepared.latency));
        proxied.push(ms(through.total));
        added.push(ms(through.total) - ms(straight.total) - ms(prepared.latency));
        ttfb_direct.push(ms(straight_stream.to_first_byte));
        ttfb_proxy.push(ms(through_stream.to_first_byte));
        let relay = |exchange: &Exchange, event: Instant| ms(exchange.first_byte.saturating_duration_since(event));
        let (relay_direct, relay_proxy) = (
            relay(&straight_stream, direct_event),
            relay(&through_stream, proxy_event),
        );
        first_byte_direct.push(relay_direct);
        first_byte_proxy.push(relay_proxy);
        first_byte_added.push(relay_proxy - relay_direct);
        compactions += prepared.result.actions.iter().filter(|a| a.kind == "compacted").count();
        proxy_compactions += usize::from(through.compacted);
    }
    daemon.close()?;
    drop(proxy);

    let at = |samples: &[f64], q: f64| stats::quantile(samples, q).map(stats::round3);
    let mut out = Map::new();
    out.insert("first_messages".into(), json!(first));
    out.insert("count".into(), json!(direct.len()));
    out.insert("request_bytes_last".into(), json!(request_bytes));
    for (name, samples) in [
        ("direct", &direct),
        ("prepare", &prepare),
        ("proxy", &proxied),
        ("added", &added),
        ("ttfb_direct", &ttfb_direct),
        ("ttfb_proxy", &ttfb_proxy),
        ("first_byte_direct", &first_byte_direct),
        ("first_byte_proxy", &first_byte_proxy),
        ("first_byte_added", &first_byte_added),
    ] {
        out.insert(format!("{name}_p50_ms"), json!(at(samples, 0.5)));
        out.insert(format!("{name}_p95_ms"), json!(at(samples, 0.95)));
    }
    let added_p50 = at(&added, 0.5);
    out.insert(
        "added_p50_ratio_to_prepare".into(),
        json!(
            added_p50
                .zip(at(&prepare, 0.5))
                .filter(|&(_, p)| p > 0.0)
                .map(|(a, p)| stats::round3(a / p))
        ),
    );
    out.insert("target_added_p50_ms".into(), json!(TARGET_ADDED_MS));
    out.insert(
        "added_within_target".into(),
        json!(added_p50.map(|a| a <= TARGET_ADDED_MS)),
    );
    out.insert("target_first_byte_added_p50_ms".into(), json!(TARGET_FIRST_BYTE_MS));
    out.insert(
        "first_byte_within_target".into(),
        json!(at(&first_byte_added, 0.5).map(|a| a <= TARGET_FIRST_BYTE_MS)),
    );
    out.insert("compactions_prepare".into(), json!(compactions));
    out.insert("compactions_proxy".into(), json!(proxy_compactions));
    Ok(out)
}

/// `context.usage` of the stdio session.
fn report_usage(daemon: &mut Daemon, input_tokens: u64) -> anyhow::Result<()> {
    let usage = json!({"session_id": SESSION, "input_tokens": input_tokens});
    daemon.call::<_, serde::de::IgnoredAny>("context.usage", &usage)?;
    Ok(())
}

/// The body an agent sends with `messages`.
fn request_body(conversation: &Conversation, messages: &[Value], stream: bool) -> anyhow::Result<Bytes> {
    #[derive(Serialize)]
    struct Body<'a> {
        model: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        system: Option<&'a Value>,
        messages: &'a [Value],
        stream: bool,
    }
    let anthropic = conversation.format == Format::Anthropic;
    let body = Body {
        model: "bench-model",
        max_tokens: anthropic.then_some(4096),
        system: conversation.system.as_ref().filter(|_| anthropic),
        messages,
        stream,
    };
    Ok(Bytes::from(serde_json::to_vec(&body)?))
}

/// Sends `body` to `url` as an agent of `format` does, and reads the whole response.
async fn exchange(
    http: &reqwest::Client,
    format: Format,
    url: &str,
    body: Bytes,
    stream: bool,
) -> anyhow::Result<Exchange> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("x-satchel-session", SESSION);
    request = match format {
        Format::Anthropic => request
            .header("x-api-key", "sk-bench")
            .header("anthropic-version", "2023-06-01"),
        Format::OpenAi => request.bearer_auth("sk-bench"),
    };
    if stream {
        request = request.header(STREAM_HEADER, "1");
    }
    let start = Instant::now();
    let mut response = request.body(body).send().await?;
    let status = response.status();
    if !status.is_success() {
        bail!("{url} answered {status}: {}", response.text().await.unwrap_or_default());
    }
    if let Some(warning) = response.headers().get("x-satchel-warning") {
        bail!("the proxy did not prepare the request: {warning:?}");
    }
    let compacted = response
        .headers()
        .get("x-satchel-compacted")
        .is_some_and(|v| v == "true");
    response.chunk().await?.context("an empty response")?;
    let first_byte = Instant::now();
    while response.chunk().await?.is_some() {}
    Ok(Exchange {
        total: start.elapsed(),
        first_byte,
        to_first_byte: first_byte - start,
        compacted,
    })
}

/// A running `satchel proxy` in a fresh workspace, forwarding to the upstream.
struct ProxyProcess {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    /// Holds the workspace and the log; deleted after the process is gone.
    _dir: tempfile::TempDir,
}

impl ProxyProcess {
    /// Starts the proxy with the scenario's configuration as the daemon's own (the
    /// `SATCHEL_` variable of each key): a proxied request carries no `config`.
    fn start(setup: &Setup<'_>, upstream: &Upstream) -> anyhow::Result<ProxyProcess> {
        let dir = tempfile::Builder::new().prefix("satchel-bench-proxy-").tempdir()?;
        let ws: PathBuf = dir.path().join("ws");
        let log = std::fs::File::create(dir.path().join("proxy.log"))?;
        let mut command = Command::new(setup.satchel);
        command
            .arg("--workspace")
            .arg(&ws)
            .args(["proxy", "--listen", "127.0.0.1:0"])
            .env(
                "SATCHEL_LOG",
                std::env::var("SATCHEL_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("SATCHEL_PROXY_UPSTREAM_ANTHROPIC", &upstream.url)
            .env("SATCHEL_PROXY_UPSTREAM_OPENAI", &upstream.url);
        for (key, value) in setup.config.as_object().into_iter().flatten() {
            let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            command.env(format!("SATCHEL_{}", key.to_uppercase()), value);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {} proxy", setup.satchel.display()))?;
        let mut proxy = ProxyProcess {
            child,
            addr: String::new(),
            _dir: dir,
        };
        let info = ws.join("run").join("proxy.json");
        let deadline = Instant::now() + START_TIMEOUT;
        proxy.addr = loop {
            let listen = std::fs::read_to_string(&info)
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .and_then(|info| info["listen"].as_str().map(str::to_owned));
            if let Some(listen) = listen {
                break listen;
            }
            if let Some(status) = proxy.child.try_wait()? {
                bail!("satchel proxy exited with {status} before listening");
            }
            if Instant::now() > deadline {
                bail!("satchel proxy did not listen within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(proxy)
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
