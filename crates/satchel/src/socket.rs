//! The local socket: the same protocol as stdio, for tools that attach to a running daemon
//! (`satchel inspect`, Python agents, live views); `satchel-transport`'s `accept_loop` serves
//! its connections.
//!
//! One daemon owns a workspace: it holds `run/satchel.lock` for its lifetime, so a second one
//! is refused instead of interleaving writes to the same session logs. The socket is created
//! user-only (0600) under a temporary name and renamed into place, so it is never reachable
//! with wider permissions; `run/daemon.json` says where it is, for discovery. Like every
//! workspace file, `run/` is 0700 and the lock and `run/daemon.json` 0600 whatever the umask.

use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use satchel_storage::Layout;
use satchel_storage::perms::{FILE_MODE, create_private_dir_all};
use serde::{Deserialize, Serialize};
use tokio::net::UnixListener;

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// What `run/daemon.json` records.
#[derive(Debug, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// Process id.
    pub pid: u32,
    /// Absolute socket path.
    pub socket: PathBuf,
    /// Daemon version.
    pub version: String,
    /// Start time (RFC 3339).
    pub started_at: String,
}

/// Exclusive ownership of a workspace for this process: released when dropped or when the
/// process dies (the OS drops the lock even on `kill -9`).
pub struct WorkspaceLock {
    _file: File,
}

/// Takes the workspace lock, or explains who holds it.
pub fn lock_workspace(workspace: &Layout) -> anyhow::Result<WorkspaceLock> {
    let run = workspace.run_dir();
    create_private_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
    let path = workspace.lock_file();
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(FILE_MODE)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .with_context(|| format!("making {} user-only", path.display()))?;
    match file.try_lock() {
        Ok(()) => {
            // Holding the lock proves no daemon runs here: a leftover record is from a crash.
            let _ = fs::remove_file(workspace.daemon_file());
            Ok(WorkspaceLock { _file: file })
        }
        Err(fs::TryLockError::WouldBlock) => {
            let holder = read_daemon_info(workspace)
                .map(|i| format!(" (pid {}, socket {})", i.pid, i.socket.display()))
                .unwrap_or_default();
            bail!(
                "another satchel is serving workspace {}{holder}: attach to its socket, or use another --workspace",
                workspace.root().display()
            )
        }
        Err(fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Reads `run/daemon.json` of a workspace.
pub fn read_daemon_info(workspace: &Layout) -> anyhow::Result<DaemonInfo> {
    let path = workspace.daemon_file();
    let text = fs::read_to_string(&path).with_context(|| format!("no running daemon found ({})", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

/// A bound socket; removes the socket file and `run/daemon.json` when dropped.
pub struct BoundSocket {
    /// The listener.
    pub listener: UnixListener,
    path: PathBuf,
    info_file: PathBuf,
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_file(&self.info_file);
    }
}

/// Binds the socket at `path` (user-only), replacing a stale one, and records it in
/// `run/daemon.json`. The caller must hold the workspace lock, which is what makes an
/// existing socket file stale.
pub fn bind(workspace: &Layout, path: &Path, _lock: &WorkspaceLock) -> anyhow::Result<BoundSocket> {
    let path = std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))?;
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        bail!("socket path {} is longer than {MAX_SOCKET_PATH} bytes", path.display());
    }
    let dir = path.parent().context("socket path has no directory")?;
    create_private_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_socket() => {
            fs::remove_file(&path).with_context(|| format!("removing stale socket {}", path.display()))?
        }
        Ok(_) => bail!("{} exists and is not a socket", path.display()),
        Err(_) => {}
    }
    // No longer than the final name (within reason), so a path that fits `sun_path` also fits
    // while staging.
    let final_len = path.file_name().map_or(0, |n| n.len());
    let hex = format!("{:08x}", rand_u32());
    let staging = dir.join(format!(".{}", &hex[..final_len.saturating_sub(1).clamp(2, 8)]));
    let listener = UnixListener::bind(&staging).with_context(|| format!("binding {}", staging.display()))?;
    let placed =
        fs::set_permissions(&staging, fs::Permissions::from_mode(FILE_MODE)).and_then(|()| fs::rename(&staging, &path));
    if let Err(e) = placed {
        let _ = fs::remove_file(&staging);
        return Err(e).with_context(|| format!("placing socket at {}", path.display()));
    }
    let info = DaemonInfo {
        pid: std::process::id(),
        socket: path.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at: chrono::Utc::now().to_rfc3339(),
    };
    let info_file = workspace.daemon_file();
    satchel_storage::write_atomic(&info_file, serde_json::to_string_pretty(&info)?.as_bytes())?;
    Ok(BoundSocket {
        listener,
        path,
        info_file,
    })
}

/// A random number for the staging name (no extra dependency: a v4 uuid's bits).
fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}
