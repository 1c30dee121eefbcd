//! Fault injection at every durable step, to prove that a failing disk loses nothing that was
//! acknowledged and leaves every session loadable.
//!
//! Always compiled in, inert unless armed: a disarmed check is one atomic load. Tests arm
//! points with [`arm`] (scoped to a directory, so that tests running in parallel do not see
//! each other's faults); the real binary arms them from the environment variable
//! `SATCHEL_FAILPOINTS`, read once when the first workspace is opened, for black-box tests.
//! Never set it in production: the daemon logs a warning when it is set.
//!
//! # `SATCHEL_FAILPOINTS`
//!
//! A comma-separated list of `POINT:KIND[@WHEN]`, e.g. `append:enospc@3,archive:torn@1`.
//!
//! `POINT` is a durable step:
//!
//! | point | step |
//! |---|---|
//! | `append` / `append-sync` | a session-log append: its write / its fsync |
//! | `archive` / `archive-sync` | a dialog-archive append: its write / its fsync |
//! | `memory` / `memory-sync` | a memory-log append: its write / its fsync |
//! | `offload` / `offload-sync` | writing one offloaded text / making the batch durable (fsync or syncfs) |
//! | `atomic` / `atomic-sync` | an atomic replace (e.g. `run/daemon.json`): its write / its fsync |
//! | `undo` | cutting a failed append back to its previous length |
//!
//! `KIND` is what happens there:
//!
//! | kind | effect |
//! |---|---|
//! | `enospc` | the step fails with "no space left on device", nothing written |
//! | `eio` | the step fails with an I/O error, nothing written |
//! | `torn` | half the bytes are written, then the step fails with ENOSPC (at a sync step: like `eio`) |
//! | `crash` | half the bytes are written, then the process exits at once with status 86, as if killed |
//!
//! `WHEN` counts the step's hits from 1: `@3` fires on the third hit only, `@3-5` on the third
//! to the fifth, `@3-` on every hit from the third on; without it the point fires on every hit.
//! Each entry counts its own hits, so `append:eio@2,append:torn@5` fails the second and the
//! fifth session-log writes.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// The environment variable the binary arms failpoints from.
pub const ENV_VAR: &str = "SATCHEL_FAILPOINTS";

/// The exit status of a process a `crash` failpoint stopped.
pub const CRASH_EXIT_STATUS: i32 = 86;

/// A durable step a fault can be injected at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// A session-log append's write.
    SessionWrite,
    /// A session-log append's fsync.
    SessionSync,
    /// A dialog-archive append's write.
    ArchiveWrite,
    /// A dialog-archive append's fsync.
    ArchiveSync,
    /// A memory-log append's write.
    MemoryWrite,
    /// A memory-log append's fsync.
    MemorySync,
    /// Writing one offloaded text.
    OffloadWrite,
    /// Making a batch of offloaded texts durable.
    OffloadSync,
    /// An atomic replace's write.
    AtomicWrite,
    /// An atomic replace's fsync.
    AtomicSync,
    /// Cutting a failed append back to its previous length.
    Undo,
}

impl Point {
    /// Every point, with its name in `SATCHEL_FAILPOINTS`.
    pub const ALL: [(Point, &'static str); 11] = [
        (Point::SessionWrite, "append"),
        (Point::SessionSync, "append-sync"),
        (Point::ArchiveWrite, "archive"),
        (Point::ArchiveSync, "archive-sync"),
        (Point::MemoryWrite, "memory"),
        (Point::MemorySync, "memory-sync"),
        (Point::OffloadWrite, "offload"),
        (Point::OffloadSync, "offload-sync"),
        (Point::AtomicWrite, "atomic"),
        (Point::AtomicSync, "atomic-sync"),
        (Point::Undo, "undo"),
    ];

    /// Its name in `SATCHEL_FAILPOINTS`.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(p, _)| *p == self).map_or("?", |(_, n)| n)
    }
}

/// What an armed point does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Fails with ENOSPC, writing nothing.
    Enospc,
    /// Fails with EIO, writing nothing.
    Eio,
    /// Writes half the bytes, then fails with ENOSPC.
    Torn,
    /// Writes half the bytes, then exits the process at once ([`CRASH_EXIT_STATUS`]).
    Crash,
}

impl Fault {
    /// Every kind, with its name in `SATCHEL_FAILPOINTS`.
    pub const ALL: [(Fault, &'static str); 4] = [
        (Fault::Enospc, "enospc"),
        (Fault::Eio, "eio"),
        (Fault::Torn, "torn"),
        (Fault::Crash, "crash"),
    ];

    /// Fails a write of `bytes` to `file` as this fault does (a torn write really writes the
    /// first half). Returns the error the write reports.
    pub(crate) fn fail_write(self, file: &mut File, bytes: &[u8]) -> std::io::Error {
        match self {
            Fault::Enospc => enospc(),
            Fault::Eio => eio(),
            Fault::Torn => {
                let _ = file.write_all(&bytes[..bytes.len() / 2]);
                enospc()
            }
            Fault::Crash => {
                let _ = file.write_all(&bytes[..bytes.len() / 2]);
                crash()
            }
        }
    }

    /// Fails a sync (or another step that writes no bytes of its own) as this fault does.
    pub(crate) fn fail_sync(self) -> std::io::Error {
        match self {
            Fault::Enospc => enospc(),
            Fault::Eio | Fault::Torn => eio(),
            Fault::Crash => crash(),
        }
    }
}

fn enospc() -> std::io::Error {
    std::io::Error::from(rustix::io::Errno::NOSPC)
}

fn eio() -> std::io::Error {
    std::io::Error::from(rustix::io::Errno::IO)
}

fn crash() -> ! {
    tracing::error!("failpoint: crashing on purpose");
    std::process::exit(CRASH_EXIT_STATUS)
}

/// Which hits of a point fire (1-based, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hits {
    /// First hit that fires.
    pub from: u64,
    /// Last hit that fires.
    pub to: u64,
}

impl Hits {
    /// Every hit.
    pub const ALWAYS: Hits = Hits { from: 1, to: u64::MAX };

    /// Only hit `n`.
    pub fn nth(n: u64) -> Hits {
        Hits { from: n, to: n }
    }

    /// Hits `from` to `to`.
    pub fn range(from: u64, to: u64) -> Hits {
        Hits { from, to }
    }
}

struct Entry {
    id: u64,
    point: Point,
    fault: Fault,
    hits: Hits,
    /// Only paths under this directory hit the entry; `None`: every path.
    under: Option<PathBuf>,
    seen: u64,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static ENTRIES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn entries() -> MutexGuard<'static, Vec<Entry>> {
    ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// An armed failpoint; disarmed when dropped.
#[must_use = "the failpoint is disarmed when this is dropped"]
#[derive(Debug)]
pub struct Armed {
    id: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut entries = entries();
        entries.retain(|e| e.id != self.id);
        ARMED.store(!entries.is_empty(), Ordering::Release);
    }
}

/// Arms `point` to fail with `fault` on the hits `hits` of paths under `under` (every path
/// when `None`: only for a process that runs nothing else, such as the binary).
pub fn arm(point: Point, fault: Fault, hits: Hits, under: Option<&Path>) -> Armed {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut entries = entries();
    entries.push(Entry {
        id,
        point,
        fault,
        hits,
        under: under.map(Path::to_path_buf),
        seen: 0,
    });
    ARMED.store(true, Ordering::Release);
    Armed { id }
}

/// How many times `point` was reached by paths under `under` since the entries that count
/// them were armed: the hits of the first live entry of `point` scoped exactly to `under`.
pub fn hits(point: Point, under: Option<&Path>) -> u64 {
    entries()
        .iter()
        .find(|e| e.point == point && e.under.as_deref() == under)
        .map_or(0, |e| e.seen)
}

/// The fault to inject at `point` for a step on `path`, if any. One atomic load when nothing
/// is armed.
#[inline]
pub(crate) fn check(point: Point, path: &Path) -> Option<Fault> {
    if !ARMED.load(Ordering::Acquire) {
        return None;
    }
    check_armed(point, path)
}

#[cold]
fn check_armed(point: Point, path: &Path) -> Option<Fault> {
    let mut fired = None;
    for entry in entries().iter_mut() {
        if entry.point != point || entry.under.as_deref().is_some_and(|dir| !path.starts_with(dir)) {
            continue;
        }
        entry.seen += 1;
        if fired.is_none() && (entry.hits.from..=entry.hits.to).contains(&entry.seen) {
            fired = Some(entry.fault);
        }
    }
    if let Some(fault) = fired {
        // What was asked for (the start-up warning says faults will be injected), not news:
        // the failure it causes is logged at its own level.
        tracing::info!(point = point.name(), ?fault, path = %path.display(), "failpoint fired");
    }
    fired
}

/// Parses a `SATCHEL_FAILPOINTS` value (see the module documentation).
pub fn parse(spec: &str) -> Result<Vec<(Point, Fault, Hits)>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (point, rest) = item
                .split_once(':')
                .ok_or_else(|| format!("{item:?}: expected POINT:KIND[@WHEN]"))?;
            let (kind, when) = rest.split_once('@').map_or((rest, None), |(k, w)| (k, Some(w)));
            let point = Point::ALL
                .iter()
                .find(|(_, name)| *name == point)
                .map(|(p, _)| *p)
                .ok_or_else(|| {
                    let names: Vec<&str> = Point::ALL.iter().map(|(_, n)| *n).collect();
                    format!("{item:?}: unknown point {point:?} (one of {})", names.join(", "))
                })?;
            let fault = Fault::ALL
                .iter()
                .find(|(_, name)| *name == kind)
                .map(|(f, _)| *f)
                .ok_or_else(|| format!("{item:?}: unknown kind {kind:?} (enospc, eio, torn or crash)"))?;
            let number = |s: &str| {
                s.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{item:?}: {s:?} is not a hit number (1, 2, ...)"))
            };
            let hits = match when {
                None => Hits::ALWAYS,
                Some(w) => match w.split_once('-') {
                    None => Hits::nth(number(w)?),
                    Some((from, "")) => Hits::range(number(from)?, u64::MAX),
                    Some((from, to)) => Hits::range(number(from)?, number(to)?),
                },
            };
            Ok((point, fault, hits))
        })
        .collect()
}

/// Arms the failpoints `SATCHEL_FAILPOINTS` names, once per process (later calls do nothing
/// and report the first outcome). They stay armed for the life of the process.
pub fn arm_from_env() -> Result<(), String> {
    static ONCE: Once = Once::new();
    static OUTCOME: Mutex<Result<(), String>> = Mutex::new(Ok(()));
    ONCE.call_once(|| {
        let Some(spec) = std::env::var_os(ENV_VAR) else {
            return;
        };
        let outcome = spec
            .to_str()
            .ok_or_else(|| "not UTF-8".to_owned())
            .and_then(parse)
            .map(|points| {
                tracing::warn!("{ENV_VAR} is set: storage faults will be injected ({spec:?})");
                for (point, fault, hits) in points {
                    std::mem::forget(arm(point, fault, hits, None));
                }
            })
            .map_err(|e| format!("{ENV_VAR}: {e}"));
        *OUTCOME.lock().unwrap_or_else(|p| p.into_inner()) = outcome;
    });
    OUTCOME.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_syntax() {
        assert_eq!(
            parse("append:enospc@3, archive:torn@1,offload-sync:eio@2-4,undo:eio@5-,atomic:crash").unwrap(),
            vec![
                (Point::SessionWrite, Fault::Enospc, Hits::nth(3)),
                (Point::ArchiveWrite, Fault::Torn, Hits::nth(1)),
                (Point::OffloadSync, Fault::Eio, Hits::range(2, 4)),
                (Point::Undo, Fault::Eio, Hits::range(5, u64::MAX)),
                (Point::AtomicWrite, Fault::Crash, Hits::ALWAYS),
            ]
        );
        assert_eq!(parse("").unwrap(), vec![]);
        for bad in [
            "append",
            "nowhere:eio",
            "append:melt",
            "append:eio@0",
            "append:eio@x",
            "append:eio@2-y",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_armed_point_fires_on_its_hits_under_its_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("f");
        let armed = arm(Point::MemorySync, Fault::Eio, Hits::range(2, 3), Some(dir.path()));
        assert_eq!(check(Point::MemorySync, Path::new("/elsewhere/f")), None);
        assert_eq!(check(Point::MemoryWrite, &inside), None);
        let fired: Vec<Option<Fault>> = (0..4).map(|_| check(Point::MemorySync, &inside)).collect();
        assert_eq!(fired, [None, Some(Fault::Eio), Some(Fault::Eio), None]);
        assert_eq!(hits(Point::MemorySync, Some(dir.path())), 4);
        drop(armed);
        assert_eq!(check(Point::MemorySync, &inside), None);
        assert_eq!(hits(Point::MemorySync, Some(dir.path())), 0);
    }
}
