//! Long-term memory files (F17): `MEMORY.md` and the daily logs `memory/YYYY-MM-DD.md`.
//!
//! Compaction appends what it learned to the day's log; the memory issue builds search on these
//! files. Appends are fsync'd like every other write.

use crate::durable::{Steps, append_durable_at};
use crate::error::StorageError;
use crate::layout::Layout;
use crate::perms::create_private_dir_all;
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
        create_private_dir_all(&self.layout.memory_dir())?;
        append_durable_at(&self.layout.memory_daily(date), text.as_bytes(), Steps::MEMORY)?;
        Ok(Layout::memory_daily_rel(date))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_failed_memory_append_leaves_the_log_as_it_was() {
        use crate::failpoints::{Fault, Hits, Point, arm};
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let memory = MemoryFiles::new(&ws);
        memory.append_daily("2026-11-22", "a\n").unwrap();
        for point in [Point::MemoryWrite, Point::MemorySync] {
            let _armed = arm(point, Fault::Torn, Hits::nth(1), Some(ws.root()));
            memory.append_daily("2026-11-22", "a longer note\n").unwrap_err();
        }
        assert_eq!(
            fs::read_to_string(ws.root().join("memory/2026-11-22.md")).unwrap(),
            "a\n"
        );
    }

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
