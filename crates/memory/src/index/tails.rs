//! Appends chunked from where they start: a memory file that only grew (a daily log, an
//! `memory.append`) is chunked again from its last block, not from its first line, and only
//! the stored chunks from there are compared and replaced. So an append costs its own size;
//! the whole file is still read and hashed once, to prove the old content is its prefix.
//!
//! Where each file's chunking can resume is kept in memory for the files synced lately: the
//! first change of a file after a start is chunked whole.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64;

use super::lock;
use crate::chunk::{Chunk, Resume, chunk_appended, chunk_resumable};
use crate::store::FileRecord;

/// Files whose resume point is kept; past this the map starts over (a sync of more files
/// than this at once is a start-up or a rebuild, which chunks everything anyway).
const MAX_TAILS: usize = 256;

/// The resume points of the files synced lately.
#[derive(Default)]
pub(super) struct Tails {
    known: Mutex<HashMap<String, Tail>>,
    /// Lines read by the chunker since the index was opened, for `stats`.
    lines_chunked: AtomicU64,
}

/// Where chunking the content of a file with this size and hash can resume after an append.
struct Tail {
    size: u64,
    content_hash: u64,
    resume: Resume,
}

/// A file's new chunks, from line `from_line` on.
pub(super) struct Chunked {
    pub chunks: Vec<Chunk>,
    pub from_line: u32,
}

impl Tails {
    /// The chunks of `bytes`, the new content of `rel` (its xxh3 `content_hash`), whose index
    /// record is `record`: from the recorded content's last block when `bytes` is that content
    /// with text appended and its resume point is known, else all of them.
    pub fn chunk(&self, rel: &str, record: Option<&FileRecord>, bytes: &[u8], content_hash: u64) -> Chunked {
        let Ok(text) = std::str::from_utf8(bytes) else {
            // Not UTF-8: chunked as replaced text, whose offsets are not the file's.
            lock(&self.known).remove(rel);
            let chunks = crate::chunk::chunk_markdown(rel, &String::from_utf8_lossy(bytes));
            self.count_lines(bytes);
            return Chunked { chunks, from_line: 1 };
        };
        let appended_to = |tail: &Tail| {
            record.is_some_and(|r| r.size == tail.size && r.content_hash == tail.content_hash)
                && bytes.len() as u64 > tail.size
                && xxh3_64(&bytes[..tail.size as usize]) == tail.content_hash
        };
        let resume = lock(&self.known)
            .remove(rel)
            .filter(|tail| appended_to(tail))
            .map(|tail| tail.resume);
        let (chunks, next, from) = match resume {
            Some(resume) => {
                let (chunks, next) = chunk_appended(rel, text, &resume);
                (chunks, next, resume)
            }
            None => {
                let (chunks, next) = chunk_resumable(rel, text);
                (chunks, next, Resume::default())
            }
        };
        self.count_lines(&bytes[from.tail_start()..]);
        let mut known = lock(&self.known);
        if known.len() >= MAX_TAILS {
            known.clear();
        }
        known.insert(
            rel.to_owned(),
            Tail {
                size: bytes.len() as u64,
                content_hash,
                resume: next,
            },
        );
        Chunked {
            chunks,
            from_line: from.first_line(),
        }
    }

    /// Lines read by the chunker since the index was opened.
    pub fn lines_chunked(&self) -> u64 {
        self.lines_chunked.load(Ordering::Relaxed)
    }

    fn count_lines(&self, chunked: &[u8]) {
        let lines = chunked.split(|&b| b == b'\n').filter(|line| !line.is_empty()).count();
        self.lines_chunked.fetch_add(lines as u64, Ordering::Relaxed);
    }
}
