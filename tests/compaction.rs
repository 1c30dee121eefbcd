//! Compaction black-box tests: being written.
