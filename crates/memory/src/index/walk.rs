//! The walk that finds the memory files, and what it does with symbolic links.
//!
//! A link is followed only to a target inside the workspace (or inside the extra path it was
//! found in, for an extra path outside the workspace): a link in `memory/` to `/etc` or to a
//! home directory must not put an outside file's text into search results. A link to a
//! directory that holds it (`loop -> .`, `up -> ..`) is a cycle and is not followed, each
//! directory is walked once, by its canonical path, and each file is indexed once: under its
//! own name when it has one without a link, since the plain tree is walked before any link is
//! followed.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::paths::{Roots, Target, is_hidden, is_markdown};

/// A directory tree deeper than this under a memory root is not walked further: a deep tree
/// of notes is a mistake, and the walk's cost stays bounded.
pub(super) const MAX_DEPTH: usize = 16;

/// Every memory file under `roots` that exists now, sorted by name, each once, none through a
/// symbolic link out of the workspace. Directories that cannot be read and links that lead
/// out add a warning.
pub(super) fn discover(roots: &Roots, warnings: &mut Vec<String>) -> Vec<Target> {
    let mut walk = Walk::new(roots, warnings);
    walk.file(&roots.root().join("MEMORY.md"));
    walk.tree(&roots.root().join("memory"));
    for extra in roots.extra() {
        if fs::symlink_metadata(extra).is_ok_and(|m| m.is_file()) {
            walk.file(extra);
        } else {
            walk.tree(extra);
        }
    }
    walk.follow_links();
    walk.found.into_iter().map(|(rel, abs)| Target { rel, abs }).collect()
}

/// One walk over the memory roots.
pub(super) struct Walk<'a> {
    roots: &'a Roots,
    /// The workspace root, canonical.
    root: PathBuf,
    /// Canonical directories walked already.
    visited: HashSet<PathBuf>,
    /// Canonical files found already.
    seen: HashSet<PathBuf>,
    /// Links met and not followed yet: (path, depth, the canonical tree they must stay in).
    links: VecDeque<(PathBuf, usize, PathBuf)>,
    /// Index name → path of every file found.
    pub found: BTreeMap<String, PathBuf>,
    pub warnings: &'a mut Vec<String>,
}

impl<'a> Walk<'a> {
    pub fn new(roots: &'a Roots, warnings: &'a mut Vec<String>) -> Walk<'a> {
        Walk {
            roots,
            root: fs::canonicalize(roots.root()).unwrap_or_else(|_| roots.root().to_owned()),
            visited: HashSet::new(),
            seen: HashSet::new(),
            links: VecDeque::new(),
            found: BTreeMap::new(),
            warnings,
        }
    }

    /// The tree a link found under `root_path` (a memory root) must stay in: the workspace,
    /// or for an extra path outside it, that path's own tree.
    fn boundary(&self, root_path: &Path) -> PathBuf {
        if root_path.starts_with(self.roots.root()) {
            self.root.clone()
        } else {
            fs::canonicalize(root_path).unwrap_or_else(|_| root_path.to_owned())
        }
    }

    /// A memory file named by itself (`MEMORY.md`, an extra file).
    pub fn file(&mut self, path: &Path) {
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let boundary = self.boundary(path);
                self.links.push_back((path.to_owned(), 0, boundary));
            }
            Ok(meta) if meta.is_file() => {
                let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
                self.add(path, real);
            }
            _ => {}
        }
    }

    /// The `.md` files under the memory root directory `dir`.
    pub fn tree(&mut self, dir: &Path) {
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let boundary = self.boundary(dir);
                self.links.push_back((dir.to_owned(), 0, boundary));
            }
            Ok(meta) if meta.is_dir() => {
                let boundary = self.boundary(dir);
                let real = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
                self.dir(dir, &real, 0, &boundary);
            }
            _ => {}
        }
    }

    /// Follows the links met so far (and those met behind them), once the plain trees are
    /// walked.
    pub fn follow_links(&mut self) {
        while let Some((path, depth, boundary)) = self.links.pop_front() {
            // A dangling link is no file.
            let Ok(real) = fs::canonicalize(&path) else { continue };
            if !real.starts_with(&boundary) {
                self.warnings.push(format!(
                    "{}: a symbolic link out of the workspace; not followed",
                    path.display()
                ));
                continue;
            }
            match fs::metadata(&real) {
                // A link to a directory it is in (`loop -> .`, `up -> ..`) is a cycle: walking
                // it would find nothing new in the memory tree, and from `..` the rest of the
                // workspace, which is not memory.
                Ok(meta) if meta.is_dir() && self.encloses(&real, &path) => {}
                Ok(meta) if meta.is_dir() => self.dir(&path, &real, depth, &boundary),
                Ok(meta) if meta.is_file() && is_markdown(&path) && is_markdown(&real) => self.add(&path, real),
                _ => {}
            }
        }
    }

    /// Whether the directory `real` holds the link at `link`.
    fn encloses(&self, real: &Path, link: &Path) -> bool {
        link.parent()
            .and_then(|parent| fs::canonicalize(parent).ok())
            .is_some_and(|parent| parent.starts_with(real))
    }

    /// Walks `dir` (its canonical path `real`) unless it was walked already; links inside are
    /// queued for [`Walk::follow_links`].
    fn dir(&mut self, dir: &Path, real: &Path, depth: usize, boundary: &Path) {
        if depth > MAX_DEPTH || !self.visited.insert(real.to_owned()) {
            return;
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => return,
            Err(e) => {
                self.warnings.push(format!(
                    "memory directory {}: {e}; its files are not indexed",
                    dir.display()
                ));
                return;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if is_hidden(&name) {
                continue;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_symlink() => self.links.push_back((path, depth + 1, boundary.to_owned())),
                Ok(kind) if kind.is_dir() => self.dir(&path, &real.join(&name), depth + 1, boundary),
                Ok(kind) if kind.is_file() && is_markdown(&path) => self.add(&path, real.join(&name)),
                _ => {}
            }
        }
    }

    /// Records the file at `path` (canonical `real`) unless it was found already.
    fn add(&mut self, path: &Path, real: PathBuf) {
        if self.seen.insert(real) {
            self.found.insert(self.roots.rel(path), path.to_owned());
        }
    }
}
