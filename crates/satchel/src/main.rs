//! `satchel`: the context-window daemon for AI agents.
//!
//! This file is thin glue: parse the command line, set up logging (never on stdout, which is
//! the protocol channel), open the workspace, and hand stdin/stdout to the transport.
//!
//! A command that fails prints one line, `satchel: <what went wrong>`, on stderr and exits 1
//! (clap exits 2 on a usage error). Output cut short by a reader that went away (`satchel demo
//! | head -3`) is not an error: the command stops quietly and exits 0.

mod cli;
mod config;
mod daily_merge;
mod error;
mod handlers;
mod llm;
mod memory;
mod panic_point;
mod proxy;
mod rpc;
mod schedule;
mod socket;
mod transport;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
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
    /// Workspace directory holding all state (default: $SATCHEL_HOME, else the platform data
    /// dir; `demo` uses a fresh temporary one unless this is given).
    #[arg(long, global = true)]
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
        /// Also serve the provider-compatible proxy (see `satchel proxy`) on this address
        /// (`IP:PORT`; without a value, `proxy_listen`), sharing the engine.
        #[arg(long, num_args = 0..=1, value_name = "ADDR")]
        proxy: Option<Option<String>>,
    },
    /// Serve the provider-compatible proxy: Anthropic Messages (`POST /v1/messages`), OpenAI
    /// Chat Completions (`POST /v1/chat/completions`) and OpenAI Responses (`POST
    /// /v1/responses`) requests go through `context.prepare`
    /// on their session and on to `proxy_upstream_anthropic` / `proxy_upstream_openai`; every
    /// other request passes through. Also serves the socket (`<workspace>/run/satchel.sock`),
    /// so `satchel inspect` sees the proxied sessions. Until SIGINT/SIGTERM.
    Proxy {
        /// Address to listen on (`IP:PORT`, port 0 for a free one; default `proxy_listen`).
        /// The bound address is logged and written to `<workspace>/run/proxy.json`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Print the environment lines that point Claude Code or Codex/OpenAI SDKs at the
        /// proxy (the running one's address, else `--listen`, else `proxy_listen`), and exit.
        #[arg(long)]
        print_env: bool,
    },
    /// Attach to a running daemon and show a session's context, like `/context list`.
    Inspect(cli::inspect::InspectArgs),
    /// Run the bundled example conversation through a real `satchel serve` and show what it did
    /// (in a fresh temporary workspace, removed afterwards, unless --workspace is given).
    Demo,
    /// Show every configuration key: its value, default, source (default, file or env),
    /// `SATCHEL_` variable and meaning, as a daemon on the workspace would read them.
    Config(cli::config::ConfigArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`| head`): nothing is wrong, stop quietly.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // stderr may be gone too; there is nowhere else to say it.
            let _ = writeln!(std::io::stderr(), "satchel: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// An error as one line: its chain joined by `: ` (a cause whose text its parent already
/// ends with is not repeated), any line break inside made a space.
fn one_line(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.ends_with(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `error` comes from writing to a pipe whose reader has gone.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    init_logging(cli.log_file.as_deref())?;
    let default_serve = Command::Serve {
        max_message_bytes: transport::TransportLimits::default().max_request_bytes,
        socket: None,
        no_stdio: false,
        proxy: None,
    };
    match cli.command.unwrap_or(default_serve) {
        Command::Serve {
            max_message_bytes,
            socket,
            no_stdio,
            proxy,
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
            proxy,
        ),
        Command::Proxy { listen, print_env } => {
            let workspace = match cli.workspace {
                Some(dir) => dir,
                None => default_workspace()?,
            };
            if print_env {
                return proxy::print_env(&workspace, listen.as_deref());
            }
            let limits = transport::TransportLimits::default();
            serve(workspace, limits, Some(None), true, Some(listen))
        }
        Command::Inspect(args) => cli::inspect::run(&args, cli.workspace.as_deref()),
        // The demo must not touch a real workspace (not even $SATCHEL_HOME) unless asked to.
        Command::Demo => match cli.workspace {
            Some(dir) => cli::demo::run(&dir, cli::demo::Isolation::Given),
            None => cli::demo::run_isolated(),
        },
        Command::Config(args) => cli::config::run(
            &args,
            &match cli.workspace {
                Some(dir) => dir,
                None => default_workspace()?,
            },
        ),
    }
}

/// The workspace when `--workspace` is not given: `$SATCHEL_HOME` (when set and not empty),
/// else the platform's data directory.
pub(crate) fn default_workspace() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("SATCHEL_HOME").filter(|home| !home.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    directories::ProjectDirs::from("", "", "satchel")
        .map(|d| d.data_dir().to_path_buf())
        .context("no home directory: pass --workspace or set SATCHEL_HOME")
}

/// The filter of `SATCHEL_LOG` (default `info`), and a warning when its value was refused.
fn log_filter() -> (tracing_subscriber::EnvFilter, Option<String>) {
    let default = || tracing_subscriber::EnvFilter::new("info");
    let value = match std::env::var("SATCHEL_LOG") {
        Ok(value) if value.trim().is_empty() => return (default(), None),
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => return (default(), None),
        Err(std::env::VarError::NotUnicode(_)) => {
            return (
                default(),
                Some("ignoring SATCHEL_LOG: not UTF-8; logging at info".to_owned()),
            );
        }
    };
    match parse_log_filter(&value) {
        Ok(filter) => (filter, None),
        Err(why) => (
            default(),
            Some(format!("ignoring SATCHEL_LOG={value:?}: {why}; logging at info")),
        ),
    }
}

/// A `SATCHEL_LOG` value as a filter. Besides syntax errors, a bare word that is neither a
/// level nor plausibly a target (a module path, a name with `_`, or satchel's own crates) is
/// refused: `SATCHEL_LOG=verbose` would otherwise log nothing at all, silently.
fn parse_log_filter(value: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[', ':', '_']);
        if bare
            && !directive.starts_with("satchel")
            && directive.parse::<tracing_subscriber::filter::LevelFilter>().is_err()
        {
            return Err(format!(
                "`{directive}` is not a level (off, error, warn, info, debug, trace); write `TARGET=LEVEL` for a target"
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(value)
        .map_err(|e| e.to_string())
}

fn init_logging(log_file: Option<&std::path::Path>) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use std::os::unix::fs::OpenOptionsExt;
    // notify warns when it cannot drop the watch of a directory that was deleted, which is
    // how a watched directory normally goes away: the memory watcher reports the deletion.
    let quiet = "notify=error".parse().expect("a valid directive");
    let (filter, refused) = log_filter();
    let filter = filter.add_directive(quiet);
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
    if let Some(warning) = refused {
        tracing::warn!("{warning}");
    }
    Ok(())
}

/// The daemon of `workspace` (whose lock the caller holds): its configuration read and checked,
/// the token encoder warming up beside it, the engine and, with the feature, the memory index.
fn open_daemon(workspace: Workspace) -> anyhow::Result<handlers::Daemon> {
    let loaded =
        config::load_layers(workspace.layout(), std::env::vars()).map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    for note in &loaded.notes {
        tracing::info!("configuration: {note}");
    }
    let config = loaded.config;
    let variables: Vec<String> = std::env::vars_os()
        .filter_map(|(var, _)| var.into_string().ok())
        .collect();
    for warning in config::unknown_variables(variables.iter().map(String::as_str), &config) {
        tracing::warn!("{warning}");
    }
    panic_point::warn_if_armed();
    // Building an exact encoder takes a few hundred milliseconds: do it beside start-up, not
    // inside the first `context.prepare` (nor before the first `initialize` answer). At normal
    // priority: the first call that needs the encoder waits for this thread, so a thread at
    // the lowest priority made it wait for whatever else the machine ran (with two busy
    // processes on two cores, a first prepare right after `initialize` took 2.5 s at the
    // median and up to 14 s, against 0.6 s at normal priority).
    let counter = satchel_core::tokens::TokenCounter::of(&config.tokens);
    std::thread::spawn(move || counter.count_text("warm up"));
    let engine = satchel_engine::Engine::new(workspace, config)
        .context("opening the dialog archive")?
        .with_overrides(std::sync::Arc::new(config::apply_overrides));
    let memory = memory::Memory::open(engine.workspace(), engine.config(), |name| std::env::var(name).ok())?;
    Ok(handlers::Daemon::new(engine).with_memory(memory))
}

fn serve(
    workspace_dir: PathBuf,
    limits: transport::TransportLimits,
    socket_path: Option<Option<PathBuf>>,
    no_stdio: bool,
    proxy_listen: Option<Option<String>>,
) -> anyhow::Result<()> {
    let workspace =
        Workspace::open(&workspace_dir).with_context(|| format!("opening workspace {}", workspace_dir.display()))?;
    let lock = socket::lock_workspace(workspace.layout())?;
    // Holding the lock, before anything is written: no write is in flight, so every temp
    // file of an atomic write is one that a crash interrupted.
    let removed = satchel_storage::remove_stale_temps(workspace.layout());
    if removed > 0 {
        tracing::info!(removed, "removed the temp files of writes a crash interrupted");
    }
    let daemon = Arc::new(open_daemon(workspace)?);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let sweeper = tokio::spawn(sweep_periodically(daemon.clone()));
        let evicter = tokio::spawn(evict_periodically(daemon.clone()));
        let candidate_gates = tokio::spawn(schedule::evaluate_candidates_periodically(
            daemon.clone(),
            schedule::SystemClock,
        ));
        let merger = tokio::spawn(daily_merge::merge_daily(daemon.clone(), schedule::SystemClock));
        let service = rpc::service(daemon.clone(), limits)?;
        let bound = match socket_path {
            Some(path) => {
                let layout = daemon.engine().workspace().layout();
                let path = path.unwrap_or_else(|| layout.socket());
                Some(socket::bind(layout, &path, &lock)?)
            }
            None => None,
        };
        let mut proxy = match &proxy_listen {
            Some(listen) => Some(proxy::bind(&daemon, listen.as_deref()).await?),
            None => None,
        };
        let listening = async {
            let socket = async {
                match &bound {
                    Some(bound) => transport::accept_loop(&bound.listener, service.clone(), limits).await,
                    None => std::future::pending().await,
                }
            };
            let proxying = async {
                match proxy.as_mut() {
                    Some(proxy) => proxy::serve(proxy, daemon.clone()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = socket => {}
                () = proxying => {}
            }
        };
        tracing::info!(
            workspace = %daemon.engine().workspace().root().display(),
            stdio = !no_stdio,
            socket = bound.is_some(),
            proxy = proxy_listen.is_some(),
            "satchel serving"
        );
        if !no_stdio {
            widen_pipe("stdin", std::io::stdin());
            widen_pipe("stdout", std::io::stdout());
        }
        // SIGINT and SIGTERM stop the daemon cleanly in both modes: the socket and
        // `run/daemon.json` are removed (when `bound` drops) and the exit status is 0.
        let outcome = if no_stdio {
            tokio::select! {
                () = listening => Ok(()),
                () = shutdown_signal() => Ok(()),
            }
        } else {
            tokio::select! {
                () = listening => Ok(()),
                () = shutdown_signal() => Ok(()),
                served = transport::serve_with_blocking_writer(tokio::io::stdin(), std::io::stdout(), service.clone(), limits) => served.context("stdio transport"),
            }
        };
        sweeper.abort();
        evicter.abort();
        candidate_gates.abort();
        merger.abort();
        drop(proxy);
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
        // A task cancelled because the runtime is shutting down is no failure.
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.engine().evict_idle()).await
            && e.is_panic()
        {
            tracing::warn!("dropping idle sessions panicked: {e}");
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
            Err(e) if e.is_panic() => tracing::warn!("offload sweep panicked: {e}"),
            // Cancelled because the runtime is shutting down (the client closed stdin
            // mid-sweep): no failure, and the next start sweeps again.
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_filters_refuse_typos_and_accept_levels_and_targets() {
        for good in [
            "warn",
            "DEBUG",
            "info,satchel=debug",
            "satchel_memory=trace",
            "notify::x=off",
            "satchel",
        ] {
            assert!(parse_log_filter(good).is_ok(), "{good}");
        }
        for bad in ["verbose", "inf", "warn,loud", "satchel=loud"] {
            assert!(parse_log_filter(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_error_is_one_line_without_repeated_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone\nreally");
        let error = anyhow::Error::new(io).context("opening x");
        assert_eq!(one_line(&error), "opening x: gone really");
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&pipe));
        assert!(!is_broken_pipe(&error));
    }
}
