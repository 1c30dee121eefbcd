//! Long-term memory files (F17): `MEMORY.md` and the daily logs `memory/YYYY-MM-DD.md`.
//!
//! Compaction appends what it learned to the day's log; the memory issue builds search on these
//! files. Appends are fsync'd like every other write.

use std::fs;
use std::path::PathBuf;

use crate::durable::append_durable;
use crate::error::{StorageError, io};
use crate::workspace::Workspace;

/// Directory of the daily logs, relative to the workspace.
pub const MEMORY_DIR: &str = "memory";

/// The memory files of a workspace.
#[derive(Debug, Clone)]
pub struct MemoryFiles {
    dir: PathBuf,
}

impl MemoryFiles {
    /// The memory files of `workspace`.
    pub fn new(workspace: &Workspace) -> Self {
        MemoryFiles {
            dir: workspace.root().join(MEMORY_DIR),
        }
    }

    /// Appends `text` to the daily log of `date` (`YYYY-MM-DD`); returns its workspace-relative path.
    pub fn append_daily(&self, date: &str, text: &str) -> Result<String, StorageError> {
        fs::create_dir_all(&self.dir).map_err(io("create dir", &self.dir))?;
        let name = format!("{date}.md");
        append_durable(&self.dir.join(&name), text.as_bytes())?;
        Ok(format!("{MEMORY_DIR}/{name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daily_log_accumulates() {
        let dir = tempfile::tempdir().unwrap();
        let memory = MemoryFiles::new(&Workspace::open(dir.path()).unwrap());
        assert_eq!(
            memory.append_daily("2026-11-22", "a\n").unwrap(),
            "memory/2026-11-22.md"
        );
        memory.append_daily("2026-11-22", "b\n").unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("memory/2026-11-22.md")).unwrap(),
            "a\nb\n"
        );
    }
}
