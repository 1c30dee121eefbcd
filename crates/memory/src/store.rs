//! The index file: one SQLite database (WAL) derived from the memory files.
//!
//! # Schema
//!
//! - `files`: each indexed file's size, mtime, content hash and when it was read, so a sync
//!   can skip an unchanged file without reading it.
//! - `chunks`: each chunk's path, line range, hash, text and context, and the analysed terms
//!   its `chunks_fts` row indexes (`terms`, with their count `terms_len`), from which a search
//!   scores its candidates (`index::keyword`). `id` is also the rowid of its `chunks_fts` row.
//! - `chunks_fts`: FTS5 over the *analysed* terms of text and context (`analyze::terms`
//!   joined by spaces). It is contentless (the text lives in `chunks`), and its `ascii`
//!   tokenizer, with `_` and `.` as token characters, splits at exactly the spaces between
//!   terms: every non-ASCII character is a token character to it, so a CJK bigram or a word
//!   with marks stays the term `analyze` made.
//! - `chunks_vocab`: FTS5's vocabulary of `chunks_fts` (`fts5vocab`, `row`): in how many chunks
//!   each term is, for the keyword score's IDF.
//! - `vectors`: embeddings by (model id, chunk hash). Keyed by hash rather than chunk, they
//!   outlive edits that move a chunk and restarts, and are never sent to the backend twice.
//!
//! Everything here can be rebuilt from the files, so a file that does not open as this schema
//! (corrupt, not SQLite, another version) is moved aside or dropped and made anew; only I/O
//! errors of the environment (permissions, a full disk) are errors.

mod read;
mod write;

use std::fs::{self, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode};

pub(crate) use read::{FileRecord, VectorRow, Which};
pub(crate) use write::{Applied, FileChange};

use crate::MemoryError;

/// Bumped whenever the schema or what is stored in it changes (the chunker or the analysis):
/// an index of another version is rebuilt from the files, except one of
/// [`MIGRATED_VERSION`], which is brought up to date in place (its vectors are kept).
const SCHEMA_VERSION: i64 = 3;

/// The version before `chunks.terms`: it is migrated by analysing its chunks again rather
/// than rebuilt, so no chunk is sent to the embedding backend twice.
const MIGRATED_VERSION: i64 = 2;

/// How long a connection waits for another one's lock (another daemon on the same workspace)
/// before an operation fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    content_hash INTEGER NOT NULL,
    read_at_ns INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    hash INTEGER NOT NULL,
    text TEXT NOT NULL,
    context TEXT NOT NULL,
    terms TEXT NOT NULL DEFAULT '',
    terms_len INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX chunks_by_path ON chunks(path, start_line);
CREATE INDEX chunks_by_hash ON chunks(hash);
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    terms, context, content='', contentless_delete=1, tokenize=\"ascii tokenchars '._'\"
);
CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
CREATE TABLE vectors (
    model_id TEXT NOT NULL,
    hash INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_id, hash)
) WITHOUT ROWID;
";

/// One connection to the index file.
pub(crate) struct Store {
    conn: Connection,
}

/// Why an existing index file cannot be used as it is.
enum Unusable {
    /// Not SQLite, or damaged: moved aside for a look, then rebuilt.
    Corrupt(String),
    /// Another schema version: rebuilt in place.
    Stale(i64),
}

impl Store {
    /// Opens the index at `path` for writing, creating it (mode 0600, in a 0700 directory if
    /// that is missing) or rebuilding it when it is corrupt or of another schema version.
    /// Returns the warnings for the user (a corrupt file).
    pub fn open(path: &Path) -> Result<(Store, Vec<String>), MemoryError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| file_error(dir, source))?;
        }
        // A directory, a link or a device where the index should be is no index: SQLite
        // could not open it, and start-up must not stop for derived data.
        if fs::symlink_metadata(path).is_ok_and(|meta| !meta.is_file()) {
            return Store::rebuild(path, "not a regular file");
        }
        let unusable = match Store::try_open(path)? {
            Ok(store) => return Ok((store, Vec::new())),
            Err(unusable) => unusable,
        };
        let warnings = replace(path, unusable)?;
        Store::reopen(path, warnings)
    }

    /// Moves the index at `path` aside as damaged (`reason`) and makes a new one; returns it
    /// and the user's warning. For an index found damaged after it was opened: close every
    /// connection to it first (see [`Store::close`]).
    pub fn rebuild(path: &Path, reason: &str) -> Result<(Store, Vec<String>), MemoryError> {
        let warnings = replace(path, Unusable::Corrupt(reason.to_owned()))?;
        Store::reopen(path, warnings)
    }

    /// Closes the connection (a sync's last writes are in the file or its WAL, as after any
    /// commit): the file can then be moved aside without a connection still writing its WAL
    /// under a path that a new index will use. The store answers nothing useful until it is
    /// replaced.
    pub fn close(&mut self) -> Result<(), MemoryError> {
        let closed = std::mem::replace(&mut self.conn, Connection::open_in_memory()?);
        closed.close().map_err(|(_, e)| MemoryError::Index(e))
    }

    /// Whether the file passes SQLite's `quick_check` and has this schema: a damaged index
    /// found sound again was rebuilt by someone else meanwhile.
    pub fn is_sound(&self) -> bool {
        check(&self.conn).is_ok_and(|version| version == SCHEMA_VERSION)
    }

    /// Opens the index just made at `path`, with the `warnings` of its making.
    fn reopen(path: &Path, warnings: Vec<String>) -> Result<(Store, Vec<String>), MemoryError> {
        match Store::try_open(path)? {
            Ok(store) => Ok((store, warnings)),
            Err(_) => Err(file_error(
                path,
                io::Error::other("a newly created index does not open"),
            )),
        }
    }

    /// A second connection to the index `open` made, for searches: in WAL mode it reads the
    /// last committed state while a sync writes.
    pub fn open_reader(path: &Path) -> Result<Store, MemoryError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(Store { conn })
    }

    /// Opens `path` (creating an empty private file first), checks it and creates the schema in
    /// an empty database. The outer error is the environment's; the inner says the file must
    /// be replaced.
    fn try_open(path: &Path) -> Result<Result<Store, Unusable>, MemoryError> {
        create_private(path).map_err(|source| file_error(path, source))?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        match check(&conn) {
            Ok(0) => {
                conn.execute_batch(&format!(
                    "BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                ))?;
                Ok(Ok(Store { conn }))
            }
            Ok(SCHEMA_VERSION) => Ok(Ok(Store { conn })),
            Ok(MIGRATED_VERSION) => match write::add_terms(&conn) {
                Ok(()) => Ok(Ok(Store { conn })),
                Err(e) if is_environment(&e) => Err(e.into()),
                Err(e) => Ok(Err(Unusable::Corrupt(e.to_string()))),
            },
            Ok(version) => Ok(Err(Unusable::Stale(version))),
            Err(e) if is_environment(&e) => Err(e.into()),
            Err(e) => Ok(Err(Unusable::Corrupt(e.to_string()))),
        }
    }
}

/// Sets the connection up and checks the file: its schema version, 0 for an empty database.
/// Any SQLite error here means the file is damaged, unless [`is_environment`] says otherwise.
fn check(conn: &Connection) -> rusqlite::Result<i64> {
    // Durable enough for a derived index: a power loss may lose the last sync, which the next
    // one redoes; in exchange a commit does not wait for the disk.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(%mode, "the memory index could not switch to WAL; searches may wait for syncs");
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let verdict: String = conn.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
    if verdict != "ok" {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!("quick_check: {verdict}")),
        ));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    match version {
        // Tables without a version: some other database, not an empty one.
        0 if tables > 0 => Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
            Some("a database that is not a memory index".into()),
        )),
        // The first real query: a file whose pages are damaged fails here.
        SCHEMA_VERSION | MIGRATED_VERSION => conn.query_row("SELECT count(*) FROM chunks_fts", [], |_| Ok(version)),
        _ => Ok(version),
    }
}

/// Errors that say nothing about the file's content: a lock held elsewhere, permissions, a
/// full disk. Moving the file aside would not help.
fn is_environment(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::DiskFull
                | ErrorCode::OutOfMemory
        )
    )
}

/// Gets an unusable index file out of the way: a corrupt one is moved aside (kept for a
/// look, replacing an older one), another version is deleted. Returns the user's warnings.
fn replace(path: &Path, unusable: Unusable) -> Result<Vec<String>, MemoryError> {
    let mut warnings = Vec::new();
    match unusable {
        Unusable::Corrupt(reason) => {
            let aside = sibling(path, ".corrupt");
            tracing::warn!(path = %path.display(), %reason, "the memory index is corrupt; rebuilding it");
            remove_any(&aside)?;
            match fs::rename(path, &aside) {
                // Gone already (deleted by hand while the daemon ran): nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                moved => moved.map_err(|source| file_error(path, source))?,
            }
            warnings.push(format!(
                "the memory index {} was corrupt ({reason}); it was moved to {} and is rebuilt from the memory files",
                path.display(),
                aside.display()
            ));
        }
        Unusable::Stale(version) => {
            tracing::info!(path = %path.display(), version, "the memory index has another schema version; rebuilding it");
            fs::remove_file(path).map_err(|source| file_error(path, source))?;
        }
    }
    remove_journal(path)?;
    Ok(warnings)
}

/// Creates `path` empty with mode 0600 if it does not exist (SQLite would create it with the
/// umask's mode, and gives its `-wal` and `-shm` files the main file's mode), and makes an
/// existing one 0600: memory notes are private.
fn create_private(path: &Path) -> io::Result<()> {
    OpenOptions::new().append(true).create(true).mode(0o600).open(path)?;
    fs::set_permissions(path, Permissions::from_mode(0o600))
}

/// Removes the `-wal` and `-shm` files of a database that is being replaced: a new file must
/// not meet the old one's journal.
fn remove_journal(path: &Path) -> Result<(), MemoryError> {
    for suffix in ["-wal", "-shm"] {
        remove_any(&sibling(path, suffix))?;
    }
    Ok(())
}

/// Removes whatever is at `path` (a file, or a directory with its content: only the index's own
/// names are given here), if anything is.
fn remove_any(path: &Path) -> Result<(), MemoryError> {
    let removed = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(file_error(path, e)),
        _ => Ok(()),
    }
}

/// `path` with `suffix` appended to its file name (`index.sqlite` → `index.sqlite-wal`).
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn file_error(path: &Path, source: io::Error) -> MemoryError {
    MemoryError::IndexFile {
        path: path.to_owned(),
        source,
    }
}

/// Chunk and content hashes are `u64`; SQLite integers are `i64`. The bits are kept as they are.
fn to_sql_hash(hash: u64) -> i64 {
    i64::from_ne_bytes(hash.to_ne_bytes())
}

fn from_sql_hash(hash: i64) -> u64 {
    u64::from_ne_bytes(hash.to_ne_bytes())
}
