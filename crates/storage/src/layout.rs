//! Where everything lives inside a workspace: the one place that names its paths.

use std::path::{Path, PathBuf};

/// Directory of offloaded tool results.
const OFFLOAD_DIR: &str = "tool_result";
/// Directory of session logs.
const SESSIONS_DIR: &str = "sessions";
/// Extension of a session log and of a dialog archive file.
const JSONL: &str = "jsonl";
/// Directory of the dialog archive unless configured otherwise (`dialog_path`).
const DEFAULT_DIALOG_DIR: &str = "dialog";
/// Directory of the daily memory logs.
const MEMORY_DIR: &str = "memory";
/// Directory of the run-time files of the daemon that owns the workspace.
const RUN_DIR: &str = "run";
/// The derived indexes (rebuilt from the files when deleted).
const INDEX_DIR: &str = "index";
/// The memory search index.
const MEMORY_INDEX_FILE: &str = "memory.sqlite";
/// The lock a daemon holds for its lifetime.
const LOCK_FILE: &str = "satchel.lock";
/// The socket a daemon serves on unless told another path.
const SOCKET_FILE: &str = "satchel.sock";
/// The record that tells tools where the daemon's socket is.
const DAEMON_FILE: &str = "daemon.json";
/// The optional configuration file.
const CONFIG_FILE: &str = "config.json";
/// The signed store of learning candidates.
const CANDIDATES_FILE: &str = "candidates.jsonl";
/// Directory of the workspace's secret keys, which no client call may read.
const KEYS_DIR: &str = "keys";
/// The key that signs the candidates.
const CANDIDATES_KEY_FILE: &str = "candidates.key";

/// The paths of a workspace, absolute (under [`Layout::root`]) or, for the names shown to
/// clients, workspace-relative (`*_rel`, always with `/`).
///
/// ```text
/// <root>/
/// ├── config.json              optional configuration
/// ├── tool_result/<hash>.txt   full texts of offloaded tool results
/// ├── sessions/<id>.jsonl      one append-only log per session
/// ├── dialog/<date>.jsonl      archive of compacted messages (`dialog_path` moves it)
/// ├── MEMORY.md                long-lived memory (decisions, preferences, facts)
/// ├── memory/<date>.md         daily memory logs (and any other memory/**/*.md)
/// ├── index/memory.sqlite      the memory search index, derived from the memory files
/// ├── candidates.jsonl         learning candidates, each line HMAC-signed
/// ├── keys/                    secret keys: never readable through a client call
/// │   └── candidates.key       the workspace's key that signs candidates.jsonl
/// └── run/                     the running daemon's files
///     ├── satchel.lock         held by the daemon that owns the workspace
///     ├── satchel.sock         its socket, unless `--socket PATH`
///     └── daemon.json          where its socket is, for discovery
/// ```
///
/// `<date>` is `YYYY-MM-DD`. Building a layout touches nothing: [`crate::Workspace::open`]
/// creates what must exist, the stores create the rest on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of the workspace at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.json`: the optional configuration file.
    pub fn config_file(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// `tool_result/`: offloaded tool results.
    pub fn offload_dir(&self) -> PathBuf {
        self.root.join(OFFLOAD_DIR)
    }

    /// `tool_result/<name>`: workspace-relative path of the offload file `name`.
    pub fn offload_rel(name: &str) -> String {
        format!("{OFFLOAD_DIR}/{name}")
    }

    /// The file name in a workspace-relative offload path (`tool_result/<name>`), if it is one.
    pub fn offload_name(rel: &str) -> Option<&str> {
        rel.strip_prefix(OFFLOAD_DIR)?.strip_prefix('/')
    }

    /// `sessions/`: session logs.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join(SESSIONS_DIR)
    }

    /// `sessions/<id>.jsonl`: the log of session `id` (the caller validates `id`).
    pub fn session_log(&self, id: &str) -> PathBuf {
        self.sessions_dir().join(format!("{id}.{JSONL}"))
    }

    /// The session whose log is the file `name` of [`Layout::sessions_dir`], if it is one.
    pub fn session_id_of(name: &str) -> Option<&str> {
        name.strip_suffix(JSONL)?.strip_suffix('.')
    }

    /// `dialog/`: the dialog archive, or `dialog_path` (workspace-relative) when configured.
    pub fn dialog_dir(&self, dialog_path: &str) -> PathBuf {
        self.root.join(dialog_path)
    }

    /// The default of `dialog_path`.
    pub fn default_dialog_path() -> &'static str {
        DEFAULT_DIALOG_DIR
    }

    /// The name of the archive file of `date` inside [`Layout::dialog_dir`].
    pub fn dialog_file_name(date: &str) -> String {
        format!("{date}.{JSONL}")
    }

    /// `dialog/<date>.jsonl`: workspace-relative path of the archive file of `date`.
    pub fn dialog_file_rel(dialog_path: &str, date: &str) -> String {
        format!("{}/{}", dialog_path.trim_end_matches('/'), Self::dialog_file_name(date))
    }

    /// `memory/`: the daily memory logs.
    pub fn memory_dir(&self) -> PathBuf {
        self.root.join(MEMORY_DIR)
    }

    /// `memory/<date>.md`: the memory log of `date`.
    pub fn memory_daily(&self, date: &str) -> PathBuf {
        self.root.join(Self::memory_daily_rel(date))
    }

    /// `memory/<date>.md`, workspace-relative.
    pub fn memory_daily_rel(date: &str) -> String {
        format!("{MEMORY_DIR}/{date}.md")
    }

    /// `index/`: indexes derived from the files, which rebuild them when deleted.
    pub fn index_dir(&self) -> PathBuf {
        self.root.join(INDEX_DIR)
    }

    /// `index/memory.sqlite`: the memory search index.
    pub fn memory_index(&self) -> PathBuf {
        self.index_dir().join(MEMORY_INDEX_FILE)
    }

    /// `index/memory.sqlite`, workspace-relative.
    pub fn memory_index_rel() -> String {
        format!("{INDEX_DIR}/{MEMORY_INDEX_FILE}")
    }

    /// `candidates.jsonl`: the learning candidates, one signed entry a line.
    pub fn candidates_file(&self) -> PathBuf {
        self.root.join(CANDIDATES_FILE)
    }

    /// `keys/`: the workspace's secret keys, which `context.read` and `memory.get` refuse
    /// (see [`crate::Workspace::resolve_existing`]).
    pub fn keys_dir(&self) -> PathBuf {
        self.root.join(KEYS_DIR)
    }

    /// `keys/candidates.key`: the key that signs [`Layout::candidates_file`].
    pub fn candidates_key(&self) -> PathBuf {
        self.keys_dir().join(CANDIDATES_KEY_FILE)
    }

    /// `run/`: the running daemon's files.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join(RUN_DIR)
    }

    /// `run/satchel.lock`: held by the daemon that owns the workspace.
    pub fn lock_file(&self) -> PathBuf {
        self.run_dir().join(LOCK_FILE)
    }

    /// `run/satchel.sock`: the daemon's socket unless another path is given.
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join(SOCKET_FILE)
    }

    /// `run/daemon.json`: where the running daemon's socket is.
    pub fn daemon_file(&self) -> PathBuf {
        self.run_dir().join(DAEMON_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path of a workspace, relative to its root: a change to the layout changes this.
    #[test]
    fn pins_the_workspace_tree() {
        let layout = Layout::new("/ws");
        let dialog = Layout::default_dialog_path();
        let paths = [
            ("config", layout.config_file()),
            ("offload dir", layout.offload_dir()),
            ("sessions dir", layout.sessions_dir()),
            ("session log", layout.session_log("s1")),
            ("dialog dir", layout.dialog_dir(dialog)),
            (
                "dialog file",
                layout.dialog_dir(dialog).join(Layout::dialog_file_name("2026-11-22")),
            ),
            ("memory dir", layout.memory_dir()),
            ("memory daily", layout.memory_daily("2026-11-22")),
            ("index dir", layout.index_dir()),
            ("memory index", layout.memory_index()),
            ("candidates", layout.candidates_file()),
            ("keys dir", layout.keys_dir()),
            ("candidates key", layout.candidates_key()),
            ("run dir", layout.run_dir()),
            ("lock", layout.lock_file()),
            ("socket", layout.socket()),
            ("daemon info", layout.daemon_file()),
        ];
        let tree: Vec<(&str, String)> = paths
            .iter()
            .map(|(what, path)| (*what, path.strip_prefix("/ws").unwrap().display().to_string()))
            .collect();
        let expected = [
            ("config", "config.json"),
            ("offload dir", "tool_result"),
            ("sessions dir", "sessions"),
            ("session log", "sessions/s1.jsonl"),
            ("dialog dir", "dialog"),
            ("dialog file", "dialog/2026-11-22.jsonl"),
            ("memory dir", "memory"),
            ("memory daily", "memory/2026-11-22.md"),
            ("index dir", "index"),
            ("memory index", "index/memory.sqlite"),
            ("candidates", "candidates.jsonl"),
            ("keys dir", "keys"),
            ("candidates key", "keys/candidates.key"),
            ("run dir", "run"),
            ("lock", "run/satchel.lock"),
            ("socket", "run/satchel.sock"),
            ("daemon info", "run/daemon.json"),
        ];
        assert_eq!(
            tree,
            expected.map(|(what, rel)| (what, rel.to_owned())),
            "the workspace layout changed"
        );
    }

    #[test]
    fn relative_names_match_the_paths() {
        let layout = Layout::new("/ws");
        assert_eq!(Layout::offload_rel("a.txt"), "tool_result/a.txt");
        assert_eq!(
            layout.root().join(Layout::offload_rel("a.txt")),
            layout.offload_dir().join("a.txt")
        );
        assert_eq!(Layout::offload_name("tool_result/a.txt"), Some("a.txt"));
        assert_eq!(Layout::offload_name("tool_results/a.txt"), None);
        assert_eq!(Layout::offload_name("a.txt"), None);
        assert_eq!(Layout::session_id_of("s1.jsonl"), Some("s1"));
        assert_eq!(Layout::session_id_of("s1jsonl"), None);
        assert_eq!(Layout::session_id_of("s1.jsonl.tmp"), None);
        assert_eq!(
            Layout::dialog_file_rel("dialog/", "2026-11-22"),
            "dialog/2026-11-22.jsonl"
        );
        assert_eq!(
            Layout::dialog_file_rel("archive/dialog", "2026-11-22"),
            "archive/dialog/2026-11-22.jsonl"
        );
        assert_eq!(Layout::memory_daily_rel("2026-11-22"), "memory/2026-11-22.md");
        assert_eq!(
            layout.root().join(Layout::memory_daily_rel("2026-11-22")),
            layout.memory_daily("2026-11-22")
        );
    }

    #[test]
    fn the_default_dialog_dir_is_the_configured_default() {
        assert_eq!(
            satchel_protocol::Config::default().daemon.sessions.dialog_path,
            Layout::default_dialog_path()
        );
    }
}
