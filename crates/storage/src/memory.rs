//! Long-term memory files (F17): `MEMORY.md` and the daily logs `memory/YYYY-MM-DD.md`.
//!
//! Compaction appends what it learned to the day's log; the memory issue builds search on these
//! files. Appends are fsync'd like every other write.

use std::fs;

use crate::durable::append_durable;
use crate::error::{StorageError, io};
use crate::layout::Layout;
use crate::workspace::Workspace;

/// The memory files of a workspace.
#[derive(Debug, Clone)]
pub struct MemoryFiles {
    layout: Layout,
}

impl MemoryFiles {
    /// The memory files of `workspace`.
    pub fn new(workspace: &Workspace) -> Self {
        MemoryFiles {
            layout: workspace.layout().clone(),
        }
    }

    /// Appends `text` to the daily log of `date` (`YYYY-MM-DD`); returns its workspace-relative path.
    pub fn append_daily(&self, date: &str, text: &str) -> Result<String, StorageError> {
        let dir = self.layout.memory_dir();
        fs::create_dir_all(&dir).map_err(io("create dir", &dir))?;
        append_durable(&self.layout.memory_daily(date), text.as_bytes())?;
        Ok(Layout::memory_daily_rel(date))
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
