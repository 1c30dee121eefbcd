//! The provider-compatible proxy (`satchel-proxy`) glued to the daemon: `satchel proxy` and
//! `serve --proxy` listen for Anthropic and OpenAI requests, and each managed request is one
//! `context.prepare` on the daemon's engine ([`EngineHook`]), so a proxied session is an
//! ordinary session (`satchel inspect`, `context.sessions`, `context.watch` see it).
//!
//! The bound address is logged and recorded in `run/proxy.json` (0600), so a proxy started
//! on port 0 can be found, and `satchel proxy --print-env` prints the lines that point an
//! agent at it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use satchel_protocol::{Config, PrepareParams, UsageParams};
use satchel_proxy::{Hook, Prepared, RequestOrigin, Settings, UpstreamModel, Upstreams};
use satchel_storage::Layout;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::net::TcpListener;

use crate::handlers::Daemon;

/// The file under `run/` recording where the running proxy listens.
const PROXY_FILE: &str = "proxy.json";

/// The engine's calls for the proxy, on the daemon (so watchers are told, as for any call).
pub struct EngineHook(pub Arc<Daemon>);

impl Hook for EngineHook {
    fn prepare(&self, params: PrepareParams<Box<RawValue>>, upstream: UpstreamModel) -> Result<Prepared, String> {
        self.0.prepare_detached(params, upstream).map_err(|e| e.to_string())
    }

    fn report_usage(&self, session_id: &str, input_tokens: u64) -> Result<(), String> {
        let params = UsageParams {
            session_id: session_id.to_owned(),
            input_tokens,
        };
        self.0.usage_detached(params).map(|_| ()).map_err(|e| e.to_string())
    }

    fn note_origin(&self, session_id: &str, origin: RequestOrigin<'_>) -> Result<(), String> {
        let engine = self.0.engine();
        let ticket = engine.ticket(session_id).map_err(|e| e.to_string())?;
        let origin = satchel_engine::RequestOrigin {
            api: origin.api,
            key_from: origin.key_from,
            agent_compaction: origin.agent_compaction,
        };
        engine
            .note_origin(ticket, origin, &satchel_engine::CallToken::new())
            .map_err(|e| e.to_string())
    }
}

/// What `run/proxy.json` records.
#[derive(Debug, Serialize, Deserialize)]
struct ProxyInfo {
    /// Process id.
    pid: u32,
    /// The address bound, `HOST:PORT`.
    listen: SocketAddr,
}

/// A bound proxy: its listener, and `run/proxy.json`, removed when this drops.
pub struct BoundProxy {
    /// The listener, for [`serve`].
    pub listener: Option<TcpListener>,
    info_file: PathBuf,
}

impl Drop for BoundProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.info_file);
    }
}

/// The proxy's settings from the daemon's configuration.
fn settings(config: &Config) -> Settings {
    let proxy = &config.daemon.proxy;
    Settings {
        upstreams: Upstreams {
            anthropic: proxy.proxy_upstream_anthropic.clone(),
            openai: proxy.proxy_upstream_openai.clone(),
        },
        token: Some(proxy.proxy_token.clone()).filter(|t| !t.is_empty()),
        max_body_bytes: satchel_proxy::DEFAULT_MAX_BODY_BYTES,
    }
}

/// Binds `listen` (else `proxy_listen`), refusing an address off loopback without
/// `proxy_token`, and records the bound address. The caller holds the workspace lock.
pub async fn bind(daemon: &Daemon, listen: Option<&str>) -> anyhow::Result<BoundProxy> {
    let config = daemon.engine().config();
    let listen = listen.unwrap_or(&config.daemon.proxy.proxy_listen);
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("proxy address {listen:?}: expected IP:PORT, e.g. 127.0.0.1:8788"))?;
    settings(config).check_listen(addr).map_err(anyhow::Error::msg)?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the proxy to {addr}"))?;
    let bound = listener.local_addr()?;
    let info_file = daemon.engine().workspace().layout().run_dir().join(PROXY_FILE);
    let info = ProxyInfo {
        pid: std::process::id(),
        listen: bound,
    };
    satchel_storage::write_atomic(&info_file, serde_json::to_string_pretty(&info)?.as_bytes())?;
    tracing::info!(listen = %bound, "proxy listening on http://{bound}");
    Ok(BoundProxy {
        listener: Some(listener),
        info_file,
    })
}

/// Serves the proxy on `bound`'s listener until dropped.
pub async fn serve(bound: &mut BoundProxy, daemon: Arc<Daemon>) {
    let Some(listener) = bound.listener.take() else {
        return std::future::pending().await;
    };
    let settings = settings(daemon.engine().config());
    satchel_proxy::serve(listener, Arc::new(EngineHook(daemon)), settings).await;
}

/// `satchel proxy --print-env`: the lines that point Claude Code (and Anthropic's SDKs) and
/// Codex (and OpenAI's SDKs) at the proxy: the running one's address when the workspace has
/// one, else `listen`, else `proxy_listen`.
pub fn print_env(workspace: &Path, listen: Option<&str>) -> anyhow::Result<()> {
    let layout = Layout::new(workspace);
    let running = std::fs::read_to_string(layout.run_dir().join(PROXY_FILE))
        .ok()
        .and_then(|text| serde_json::from_str::<ProxyInfo>(&text).ok())
        .map(|info| info.listen.to_string());
    let configured = || -> anyhow::Result<String> {
        let loaded =
            crate::config::load_layers(&layout, std::env::vars()).map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
        Ok(loaded.config.daemon.proxy.proxy_listen)
    };
    let addr = match (listen, running) {
        (Some(listen), _) => listen.to_owned(),
        (None, Some(running)) => running,
        (None, None) => configured()?,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "export ANTHROPIC_BASE_URL=http://{addr}")?;
    writeln!(out, "export OPENAI_BASE_URL=http://{addr}/v1")?;
    Ok(())
}
