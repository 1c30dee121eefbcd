//! `satchel`: the context-window daemon for AI agents.
//!
//! This file is thin glue: parse the command line, set up logging (never on stdout, which is
//! the protocol channel), open the workspace, and hand stdin/stdout to the transport.

mod config;
mod demo;
mod error;
mod handlers;
mod inspect;
mod llm;
#[cfg(feature = "memory")]
mod memory;
mod rpc;
mod socket;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use satchel_storage::Workspace;

/// How often expired offload files are swept while the daemon runs.
const SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// How often sessions idle past `session_idle_secs` are dropped from memory when no call
/// comes to do it.
const EVICT_INTERVAL: Duration = Duration::from_secs(60);

/// Capacity asked for stdin and stdout when they are pipes: Linux's default maximum for an
/// unprivileged process.
const STDIO_PIPE_BYTES: usize = 1 << 20;

#[derive(Parser)]
#[command(
    name = "satchel",
    version,
    about = "Keeps an AI agent's context window within budget without losing anything."
)]
struct Cli {
    /// Workspace directory holding all state (default: $SATCHEL_HOME, else the platform data dir).
    #[arg(long, global = true, env = "SATCHEL_HOME")]
    workspace: Option<PathBuf>,
    /// Write logs to this file instead of stderr.
    #[arg(long, global = true)]
    log_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve JSON-RPC 2.0 on stdin/stdout (NDJSON or Content-Length framing). The default.
    Serve {
        /// Largest request (and reply) in bytes; larger requests get error -32007.
        #[arg(long, default_value_t = 64 << 20)]
        max_message_bytes: u32,
        /// Also serve on a Unix socket (user-only); without a value, `<workspace>/run/satchel.sock`.
        #[arg(long, num_args = 0..=1)]
        socket: Option<Option<PathBuf>>,
        /// Serve only the socket, until SIGINT/SIGTERM (for a daemon started outside an editor).
        #[arg(long, requires = "socket")]
        no_stdio: bool,
    },
    /// Attach to a running daemon and show a session's context, like `/context list`.
    Inspect(inspect::InspectArgs),
    /// Run the bundled example conversation through a real `satchel serve` and show what it did.
    Demo,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_file.as_deref())?;
    let default_serve = Command::Serve {
        max_message_bytes: transport::TransportLimits::default().max_request_bytes,
        socket: None,
        no_stdio: false,
    };
    match cli.command.unwrap_or(default_serve) {
        Command::Serve {
            max_message_bytes,
            socket,
            no_stdio,
        } => serve(
            match cli.workspace {
                Some(dir) => dir,
                None => default_workspace()?,
            },
            transport::TransportLimits {
                max_request_bytes: max_message_bytes,
                max_response_bytes: max_message_bytes,
            },
            socket,
            no_stdio,
        ),
        Command::Inspect(args) => inspect::run(&args, cli.workspace.as_deref()),
        // The demo must not touch a real workspace unless asked to.
        Command::Demo => demo::run(&match cli.workspace {
            Some(dir) => dir,
            None => std::env::temp_dir().join(format!("satchel-demo-{}", uuid::Uuid::new_v4().simple())),
        }),
    }
}

pub(crate) fn default_workspace() -> anyhow::Result<PathBuf> {
    directories::ProjectDirs::from("", "", "satchel")
        .map(|d| d.data_dir().to_path_buf())
        .context("no home directory: pass --workspace or set SATCHEL_HOME")
}

fn init_logging(log_file: Option<&std::path::Path>) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use std::os::unix::fs::OpenOptionsExt;
    // notify warns when it cannot drop the watch of a directory that was deleted, which is
    // how a watched directory normally goes away: the memory watcher reports the deletion.
    let quiet = "notify=error".parse().expect("a valid directive");
    let filter = tracing_subscriber::EnvFilter::try_from_env("SATCHEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .add_directive(quiet);
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match log_file {
        Some(path) => {
            // Logs name sessions and files: readable by the owner only, whatever the umask.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("opening log file {}", path.display()))?;
            builder.with_ansi(false).with_writer(Arc::new(file)).init();
        }
        None => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init(),
    }
    Ok(())
}

fn serve(
    workspace_dir: PathBuf,
    limits: transport::TransportLimits,
    socket_path: Option<Option<PathBuf>>,
    no_stdio: bool,
) -> anyhow::Result<()> {
    let workspace =
        Workspace::open(&workspace_dir).with_context(|| format!("opening workspace {}", workspace_dir.display()))?;
    let lock = socket::lock_workspace(workspace.layout())?;
    let config = config::load(workspace.layout(), std::env::vars())
        .map_err(|(key, why)| anyhow::anyhow!("configuration: {key}: {why}"))?;
    // Building an exact encoder takes a few hundred milliseconds: do it beside start-up, not
    // inside the first `context.prepare` (nor before the first `initialize` answer). At the
    // lowest priority, so that it takes a core only when requests leave one idle: a request
    // that needs the encoder sleeps until it is built, and one that does not never waits.
    let counter = satchel_core::tokens::TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
    std::thread::spawn(move || {
        #[cfg(target_os = "linux")]
        if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
            tracing::debug!("could not lower the encoder warm-up's priority: {e}");
        }
        counter.count_text("warm up")
    });
    #[cfg(feature = "memory")]
    let (workspace_copy, config_copy) = (workspace.clone(), config.clone());
    let engine = satchel_engine::Engine::new(workspace, config).context("opening the dialog archive")?;
    let daemon = handlers::Daemon::new(engine);
    #[cfg(feature = "memory")]
    let daemon = {
        let memory = if config_copy.memory_index_enabled {
            Some(memory::MemoryService::open(&workspace_copy, &config_copy, |name| {
                std::env::var(name).ok()
            })?)
        } else {
            None
        };
        daemon.with_memory(memory)
    };
    let daemon = Arc::new(daemon);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let sweeper = tokio::spawn(sweep_periodically(daemon.clone()));
        let evicter = tokio::spawn(evict_periodically(daemon.clone()));
        #[cfg(feature = "memory")]
        let merger = tokio::spawn(merge_daily(daemon.clone()));
        let service = rpc::service(daemon.clone(), limits)?;
        let bound = match socket_path {
            Some(path) => {
                let layout = daemon.engine().workspace().layout();
                let path = path.unwrap_or_else(|| layout.socket());
                Some(socket::bind(layout, &path, &lock)?)
            }
            None => None,
        };
        let listening = async {
            match &bound {
                Some(bound) => socket::accept_loop(&bound.listener, service.clone(), limits).await,
                None => std::future::pending().await,
            }
        };
        tracing::info!(
            workspace = %daemon.engine().workspace().root().display(),
            stdio = !no_stdio,
            socket = bound.is_some(),
            "satchel serving"
        );
        if !no_stdio {
            widen_pipe("stdin", std::io::stdin());
            widen_pipe("stdout", std::io::stdout());
        }
        let outcome = if no_stdio {
            tokio::select! {
                () = listening => Ok(()),
                () = shutdown_signal() => Ok(()),
            }
        } else {
            tokio::select! {
                () = listening => Ok(()),
                served = transport::serve_with_blocking_writer(tokio::io::stdin(), std::io::stdout(), service.clone(), limits) => served.context("stdio transport"),
            }
        };
        sweeper.abort();
        evicter.abort();
        #[cfg(feature = "memory")]
        merger.abort();
        drop(bound);
        outcome
    })?;
    // tokio's stdin reader may sit in a blocking read; don't wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    tracing::info!("satchel exits");
    drop(lock);
    Ok(())
}

/// Makes a pipe hold [`STDIO_PIPE_BYTES`], if `stream` is one.
///
/// Requests carrying a whole history and the replies to every call are hundreds of kilobytes
/// to megabytes. Through the default 64 KiB pipe each is cut into many writes, each of which
/// wakes the other side and waits for it.
fn widen_pipe(name: &str, stream: impl std::os::fd::AsFd) {
    match rustix::pipe::fcntl_setpipe_size(stream, STDIO_PIPE_BYTES) {
        Ok(bytes) => tracing::debug!(bytes, "{name} pipe widened"),
        Err(e) => tracing::debug!("{name} pipe kept as it is: {e}"),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Drops idle sessions from memory every [`EVICT_INTERVAL`] (calls do it too, as they end).
async fn evict_periodically(daemon: Arc<handlers::Daemon>) {
    let mut ticks = tokio::time::interval(EVICT_INTERVAL);
    loop {
        ticks.tick().await;
        let daemon = daemon.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.engine().evict_idle()).await {
            tracing::warn!("dropping idle sessions panicked: {e}");
        }
    }
}

/// Runs the daily memory merge at `memory_merge_time` (local), until the daemon stops.
#[cfg(feature = "memory")]
async fn merge_daily(daemon: Arc<handlers::Daemon>) {
    loop {
        let now = chrono::Local::now();
        let Some(at) = handlers::next_merge(daemon.engine().config(), now) else {
            return;
        };
        let wait = (at - now).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
        let daemon = daemon.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.scheduled_merge(chrono::Local::now())).await {
            tracing::warn!("the daily memory merge panicked: {e}");
        }
    }
}

/// Sweeps expired offload files at start-up and then every [`SWEEP_INTERVAL`].
async fn sweep_periodically(daemon: Arc<handlers::Daemon>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let daemon = daemon.clone();
        match tokio::task::spawn_blocking(move || daemon.engine().sweep(SystemTime::now())).await {
            Ok(Ok(report)) => tracing::info!(
                removed = report.removed,
                kept_referenced = report.kept_referenced,
                "offload sweep"
            ),
            Ok(Err(e)) => tracing::warn!("offload sweep failed: {e}"),
            Err(e) => tracing::warn!("offload sweep panicked: {e}"),
        }
    }
}
