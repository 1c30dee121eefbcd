//! The fuzz corpus's calls beyond the context pipeline: `memory.*`, `candidates.*` and
//! `context.pin`/`unpin`/`purge`/`expand`, with params that are valid, hostile (huge strings,
//! deep nesting, wrong types, ids that name nothing) or that try to leave the workspace (a
//! memory path with `..`, an absolute one, one through a symbolic link out of the workspace),
//! which must be refused. Their frames go through the same mutations and byte breakage as the
//! others (so their ids carry invalid UTF-8 too).

use serde_json::{Value, json};

use super::{BAD_SESSIONS, Corpus, UNICODE};

/// The methods these frames call.
pub(super) const SURFACE_METHODS: [&str; 15] = [
    "memory.write",
    "memory.append",
    "memory.get",
    "memory.search",
    "memory.merge",
    "memory.status",
    "candidates.observe",
    "candidates.feedback",
    "candidates.list",
    "candidates.evaluate",
    "candidates.remove",
    "context.pin",
    "context.unpin",
    "context.purge",
    "context.expand",
];

/// Where the fuzzed workspace's `memory/escape` link points: outside the workspace, so
/// nothing may ever be written there.
pub(super) const MEMORY_ESCAPE_LINK: &str = "memory/escape";

/// Memory paths a client may name.
const MEMORY_PATHS: [&str; 6] = [
    "MEMORY.md",
    "memory/fz.md",
    "memory/2026-11-27.md",
    "memory/projects/fz/notes.md",
    "memory/ünï/名前.md",
    "memory/a b.md",
];

/// Memory paths that leave the workspace (or its memory files): the call must fail.
const ESCAPING_MEMORY_PATHS: [&str; 12] = [
    "../MEMORY.md",
    "/etc/passwd",
    "/tmp/fz.md",
    "memory/../../fz.md",
    "memory/../sessions/fz-0.jsonl",
    "memory/escape/fz.md",
    "memory/escape/deeper/fz.md",
    "memory/./../fz.md",
    "memory/.backups/x.md",
    "memory/fz.md\u{0}.txt",
    "memory\\..\\..\\fz.md",
    "config.json",
];

/// Queries for `memory.search`, FTS5 syntax included.
const QUERIES: [&str; 10] = [
    "parser build",
    "\"unterminated",
    "a OR b AND NOT c",
    "NEAR(a b, 5)",
    "col:term",
    "*",
    "-",
    "^start",
    "(((",
    "データベース 接続",
];

impl Corpus {
    /// A memory path: a valid one, an odd one or (when `escaping`) one out of bounds.
    fn memory_path(&mut self, escaping: bool) -> String {
        if escaping {
            return self.rng.pick(&ESCAPING_MEMORY_PATHS).to_string();
        }
        match self.rng.below(10) {
            0 => format!("memory/{}.md", "n".repeat(*self.rng.pick(&[200, 260, 5_000]))),
            1 => format!("memory/{}x.md", "d/".repeat(*self.rng.pick(&[10, 40, 2_000]))),
            2 => self
                .rng
                .pick(&["", "memory/", "memory/x.txt", "MEMORY.MD", "memory/.hidden.md"])
                .to_string(),
            _ => self.rng.pick(&MEMORY_PATHS).to_string(),
        }
    }

    /// An id that names nothing, or something odd.
    fn odd_ref(&mut self, prefix: &str) -> Value {
        match self.rng.below(6) {
            0 => json!(format!("{prefix}{}", self.rng.below(5))),
            1 => json!(format!("{prefix}99999999")),
            2 => json!(self.rng.pick(&UNICODE)),
            3 => json!("../".repeat(50)),
            4 => json!("z".repeat(*self.rng.pick(&[129, 10_000]))),
            _ => self.wild(),
        }
    }

    /// Valid-looking params of a surface `method`, and whether the call must fail (a memory
    /// path out of bounds).
    pub(super) fn surface_params(&mut self, method: &str) -> (Value, bool) {
        match method {
            "memory.write" | "memory.append" | "memory.get" => {
                let escaping = self.rng.chance(35);
                let path = self.memory_path(escaping);
                let text = self.text();
                let mut p = match method {
                    "memory.write" => json!({"path": path, "content": text}),
                    "memory.append" => json!({"path": path, "text": text}),
                    _ => json!({"path": path}),
                };
                if method == "memory.get" && self.rng.chance(40) {
                    p["start_line"] = json!(self.rng.pick(&[0u64, 1, 3, u64::from(u32::MAX)]));
                    p["end_line"] = json!(self.rng.pick(&[0u64, 2, u64::from(u32::MAX)]));
                }
                (p, escaping)
            }
            "memory.search" => {
                let query = if self.rng.chance(60) {
                    self.rng.pick(&QUERIES).to_string()
                } else {
                    self.text()
                };
                let mut p = json!({"query": query});
                if self.rng.chance(40) {
                    p["max_results"] = json!(self.rng.pick(&[0u64, 1, 100, 101, u64::MAX]));
                }
                if self.rng.chance(30) {
                    p["min_score"] = json!(self.rng.pick(&[-1.0, 0.0, 0.5, 1.0, 2.0, 1e300]));
                }
                if self.rng.chance(30) {
                    p["mode"] = json!(self.rng.pick(&["auto", "bm25", "vector", "hybrid", "nope"]));
                }
                (p, false)
            }
            "memory.merge" => {
                let through = *self.rng.pick(&[
                    "2026-11-27",
                    "-262143-01-01",
                    "+262142-12-31",
                    "0000-01-01",
                    "9999-12-31",
                    "2026-02-30",
                    "yesterday",
                    "",
                ]);
                if self.rng.chance(30) {
                    (json!({}), false)
                } else {
                    (json!({"through": through}), false)
                }
            }
            "memory.status" | "candidates.evaluate" => (json!({}), false),
            "candidates.observe" => {
                let mut p = json!({"text": self.text(),
                                   "kind": self.rng.pick(&["lesson", "rule", "preference", "correction", "nope"])});
                if self.rng.chance(30) {
                    let n = *self.rng.pick(&[1, 64, 65, 100_000]);
                    p["tags"] = json!(vec!["t"; n]);
                }
                if self.rng.chance(20) {
                    p["files"] = json!([self.rng.pick(&ESCAPING_MEMORY_PATHS), "x".repeat(513)]);
                }
                if self.rng.chance(40) {
                    p["evidence"] = json!({"failure": self.text(), "fix": self.text()});
                }
                if self.rng.chance(30) {
                    p["session_id"] = self.session();
                }
                (p, false)
            }
            "candidates.feedback" => (
                json!({"id": self.odd_ref("c"), "outcome": self.rng.pick(&["success", "failure", "maybe"])}),
                false,
            ),
            "candidates.list" => match self.rng.below(3) {
                0 => (json!({}), false),
                1 => (
                    json!({"state": self.rng.pick(&["shadow", "promoted", "in_use", "nope"])}),
                    false,
                ),
                _ => (json!({"state": self.wild()}), false),
            },
            "candidates.remove" => (json!({"id": self.odd_ref("c")}), false),
            "context.pin" => {
                let mut p = json!({"session_id": self.session()});
                match self.rng.below(4) {
                    0 => p["text"] = json!(self.text()),
                    1 => p["message_index"] = json!(self.rng.pick(&[0u64, 1, 7, 999, u64::MAX])),
                    2 => p["result_id"] = self.odd_ref("r"),
                    _ => {
                        // More than one target: refused.
                        p["text"] = json!("rule");
                        p["message_index"] = json!(0);
                    }
                }
                if self.rng.chance(30) {
                    p["label"] = json!(self.text());
                }
                (p, false)
            }
            "context.unpin" => (
                json!({"session_id": self.session(), "pin_id": self.odd_ref("p")}),
                false,
            ),
            "context.purge" => (
                json!({"session_id": self.session(), "result_id": self.odd_ref("r")}),
                false,
            ),
            "context.expand" => {
                let mut p = json!({"session_id": self.session()});
                if self.rng.chance(60) {
                    p["compaction_id"] = self.odd_ref("");
                } else {
                    let file = if self.rng.chance(50) {
                        "dialog/2026-11-27.jsonl".to_owned()
                    } else {
                        self.rng.pick(&ESCAPING_MEMORY_PATHS).to_string()
                    };
                    p["archive"] = json!({"file": file,
                                          "start_line": self.rng.pick(&[0u64, 1, 5, u64::MAX]),
                                          "end_line": self.rng.pick(&[0u64, 1, 10, u64::MAX])});
                }
                if self.rng.chance(40) {
                    p["max_tokens"] = json!(self.rng.pick(&[0u64, 1, 500, u64::MAX]));
                }
                (p, false)
            }
            _ => (json!({"session_id": self.rng.pick(&BAD_SESSIONS)}), false),
        }
    }
}
