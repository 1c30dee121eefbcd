//! Long-term memory under trouble and hostile input, through the real binary: an index that
//! another process holds locked, keyword scores that mean the same at any `max_results`,
//! symbolic links in `memory/`, paths too long for the disk, merges in the same second, and
//! an index that is not a file or is damaged while the daemon runs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Daemon;
use crate::support::checks::error_code;

/// How long a test waits for the background catch-up or the watcher (generous: shared machines).
const SETTLE: Duration = Duration::from_secs(30);

/// BM25 `memory.search` of `query` with `extra` params.
fn search(d: &mut Daemon, query: &str, extra: Value) -> Value {
    let mut params = json!({"query": query, "mode": "bm25"});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    d.call("memory.search", params)
}

/// The snippets of a search's results, best first.
fn snippets(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["snippet"].as_str().unwrap().to_owned())
        .collect()
}

/// Searches until `done` holds or [`SETTLE`] passes; returns the last result.
fn search_until(d: &mut Daemon, query: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let result = search(d, query, json!({"min_score": 0.0}));
        if done(&result) || Instant::now() > deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Issue 27 item 4: the index locked by another process (`BEGIN EXCLUSIVE` on a second SQLite
/// connection) cannot take an append. The text is in the file, so the call succeeds, once,
/// with a warning that the index is behind, and the index catches up when the lock goes.
#[test]
fn an_append_the_locked_index_cannot_take_succeeds_once_and_is_indexed_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# Facts\n\n- Deploys go through make ship.\n"}),
    );
    let locker = rusqlite::Connection::open(dir.path().join("index/memory.sqlite")).unwrap();
    locker.busy_timeout(Duration::from_secs(20)).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let log = dir.path().join("memory/2026-11-27.md");
    let first = d.call(
        "memory.append",
        json!({"path": "memory/2026-11-27.md", "text": "- The cache server is called zorblax.\n"}),
    );
    assert_eq!(first["lines"], 1, "{first}");
    let warnings = first["warnings"].to_string();
    assert!(
        warnings.contains("memory index") && warnings.contains("catches up"),
        "{first}"
    );
    assert!(!warnings.contains("memory index: memory index"), "{first}");
    let second = d.call(
        "memory.append",
        json!({"path": "memory/2026-11-27.md", "text": "- The queue is called quibbleflux.\n"}),
    );
    assert!(second["warnings"].to_string().contains("catches up"), "{second}");
    let written = d.call(
        "memory.write",
        json!({"path": "memory/topics/db.md", "content": "- The database is called gravlox.\n"}),
    );
    assert!(written["warnings"].to_string().contains("catches up"), "{written}");
    assert_eq!(
        read(&log),
        "- The cache server is called zorblax.\n- The queue is called quibbleflux.\n"
    );

    locker.execute_batch("COMMIT").unwrap();
    drop(locker);
    for (query, path) in [
        ("zorblax", "memory/2026-11-27.md"),
        ("quibbleflux", "memory/2026-11-27.md"),
        ("gravlox", "memory/topics/db.md"),
    ] {
        let found = search_until(&mut d, query, |r| {
            r["results"].as_array().is_some_and(|h| !h.is_empty())
        });
        assert_eq!(found["results"][0]["path"], path, "{query}: {found}");
    }
    // Caught up: a write is indexed on return again, without a warning.
    let third = d.call(
        "memory.append",
        json!({"path": "memory/2026-11-27.md", "text": "- The cron host is called plinketh.\n"}),
    );
    assert!(third.get("warnings").is_none(), "{third}");
    assert_eq!(
        snippets(&search(&mut d, "plinketh", json!({}))),
        ["- The cron host is called plinketh."]
    );
    assert_eq!(read(&log).matches("zorblax").count(), 1);
    d.shutdown();
}

/// The scores of each hit, best first.
fn scores(result: &Value) -> Vec<f64> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["score"].as_f64().unwrap())
        .collect()
}

/// Issue 27 item 14: with the default `min_score`, a keyword search returns every bullet that
/// matches part of the query, ranked, and a hit's score does not depend on `max_results`.
#[test]
fn keyword_search_returns_partial_matches_ranked_with_scores_independent_of_max_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "- The database connection timeout is 30 seconds.\n\
            - The database runs PostgreSQL 16.\n- Connection pooling goes through pgbouncer.\n\
            - Nightly backups of the database go to S3.\n"}),
    );
    let all = search(&mut d, "database connection timeout", json!({}));
    // The whole match, then the rarer of the two shared words, then the common one (in 3 of
    // the 4 bullets: FTS5's own IDF made these two score a millionth and be dropped).
    let found = snippets(&all);
    assert_eq!(
        found[..2],
        [
            "- The database connection timeout is 30 seconds.",
            "- Connection pooling goes through pgbouncer.",
        ],
        "{all}"
    );
    let mut rest = found[2..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        [
            "- Nightly backups of the database go to S3.",
            "- The database runs PostgreSQL 16.",
        ],
        "{all}"
    );
    let ranked = scores(&all);
    assert!(ranked.windows(2).all(|w| w[0] >= w[1]), "{ranked:?}");
    assert!(ranked[0] > 0.9 && ranked[3] >= 0.1, "{ranked:?}");

    let database = search(&mut d, "database", json!({}));
    assert_eq!(scores(&database).len(), 3, "{database}");
    assert!(snippets(&database).iter().all(|s| s.contains("database")));

    for query in ["database connection timeout", "database", "pgbouncer backups"] {
        let ten = search(&mut d, query, json!({"max_results": 10}));
        for max_results in [1, 2, 3] {
            let fewer = search(&mut d, query, json!({"max_results": max_results}));
            let expected: Vec<Value> = ten["results"]
                .as_array()
                .unwrap()
                .iter()
                .take(max_results)
                .cloned()
                .collect();
            assert_eq!(
                fewer["results"],
                Value::Array(expected),
                "{query}, max_results {max_results}"
            );
        }
    }
    d.shutdown();
}

/// Issue 27 item 7: `memory/` holding links out of the workspace (a directory, a file, a
/// symbolic `MEMORY.md`) and two cycle links. Search returns no outside text, at start-up or
/// from the watcher, and each file once.
#[test]
fn links_in_memory_lead_nowhere_outside_and_cycles_index_each_file_once() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "- The outside password is hunter2.\n").unwrap();
    std::fs::write(outside.path().join("MEMORY.md"), "- The outside vault code is 4242.\n").unwrap();
    let memory = dir.path().join("memory");
    std::fs::create_dir(&memory).unwrap();
    std::fs::write(
        memory.join("2026-11-27.md"),
        "- The deploy host is called glimmerfen.\n",
    )
    .unwrap();
    symlink(outside.path(), memory.join("out")).unwrap();
    symlink(".", memory.join("loop")).unwrap();
    symlink("..", memory.join("up")).unwrap();
    symlink(outside.path().join("MEMORY.md"), dir.path().join("MEMORY.md")).unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let found = search_until(&mut d, "glimmerfen", |r| !snippets(r).is_empty());
    assert_eq!(snippets(&found), ["- The deploy host is called glimmerfen."], "{found}");
    assert_eq!(found["results"][0]["path"], "memory/2026-11-27.md");
    for query in ["hunter2 password", "vault code 4242"] {
        assert_eq!(
            snippets(&search(&mut d, query, json!({"min_score": 0.0}))),
            Vec::<String>::new(),
            "{query}"
        );
    }
    assert_eq!(d.call("memory.status", json!({}))["index"]["files"], 1);

    // Links made while the daemon runs go through the watcher: a file written after them
    // is found, and still nothing from outside.
    symlink(outside.path().join("secret.md"), memory.join("secret.md")).unwrap();
    std::fs::write(
        outside.path().join("later.md"),
        "- Another outside secret: swordfish.\n",
    )
    .unwrap();
    std::fs::write(
        memory.join("2026-11-28.md"),
        "- The backup host is called brindlewick.\n",
    )
    .unwrap();
    search_until(&mut d, "brindlewick", |r| !snippets(r).is_empty());
    for query in ["hunter2 password", "swordfish", "vault code 4242"] {
        assert_eq!(
            snippets(&search(&mut d, query, json!({"min_score": 0.0}))),
            Vec::<String>::new(),
            "{query}"
        );
    }
    assert_eq!(snippets(&search(&mut d, "glimmerfen", json!({}))).len(), 1);
    assert_eq!(d.call("memory.status", json!({}))["index"]["files"], 2);
    d.shutdown();
}

/// The field an invalid-params error names.
fn error_field(error: &Value) -> &str {
    error["data"]["details"]["field"].as_str().unwrap_or_default()
}

/// Issue 27 item 18: a path the disk cannot hold is refused as the caller's error about
/// `path` (-32602, not a "retry" -32004) before anything is created, and a name at the limit
/// can be written as well as appended (its temp name fits).
#[test]
fn over_long_memory_paths_are_refused_before_the_disk_and_the_longest_name_can_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let nested = format!("memory/{}x.md", "a/".repeat(2027));
    let long_name = format!("memory/{}.md", "n".repeat(253));
    let long_path = format!("memory/{}x.md", format!("{}/", "d".repeat(200)).repeat(6));
    let deep = format!("memory/{}x.md", "d/".repeat(17));
    for path in [&nested, &long_name, &long_path, &deep] {
        for (method, params) in [
            ("memory.write", json!({"path": path, "content": "- x\n"})),
            ("memory.append", json!({"path": path, "text": "- x\n"})),
            ("memory.get", json!({"path": path})),
        ] {
            let error = d.call_err(method, params);
            assert_eq!(
                (error_code(&error), error_field(&error)),
                (-32602, "path"),
                "{method}: {error}"
            );
        }
    }
    assert!(!dir.path().join("memory").exists(), "nothing was created");

    let longest = format!("memory/{}.md", "n".repeat(252));
    let written = d.call(
        "memory.write",
        json!({"path": longest, "content": "- The longest name holds zanthoxyl.\n"}),
    );
    assert_eq!(written["lines"], 1);
    d.call("memory.append", json!({"path": longest, "text": "- And quillwort.\n"}));
    d.call(
        "memory.write",
        json!({"path": format!("memory/{}x.md", "d/".repeat(16)), "content": "- deep\n"}),
    );
    assert_eq!(
        read(&dir.path().join(&longest)),
        "- The longest name holds zanthoxyl.\n- And quillwort.\n"
    );
    assert_eq!(snippets(&search(&mut d, "zanthoxyl", json!({}))).len(), 1);
    d.shutdown();
}

/// Issue 27 item 17: two merges in the same second each keep their own backup of `MEMORY.md`.
#[test]
fn two_merges_in_one_second_keep_both_backups() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# MEMORY\n\n- Chose SQLite.\n"}),
    );
    d.call(
        "memory.write",
        json!({"path": "memory/2026-11-23.md", "content": "### Decisions\n\n- Vectors stay brute force.\n"}),
    );
    let first = d.call("memory.merge", json!({"through": "2026-11-23"}));
    d.call(
        "memory.write",
        json!({"path": "memory/2026-11-24.md", "content": "### Decisions\n\n- Answers in British English.\n"}),
    );
    let second = d.call("memory.merge", json!({"through": "2026-11-24"}));
    let (first, second) = (first["backup"].as_str().unwrap(), second["backup"].as_str().unwrap());
    assert_ne!(first, second);
    assert_eq!(read(&dir.path().join(first)), "# MEMORY\n\n- Chose SQLite.\n");
    let kept = read(&dir.path().join(second));
    assert!(
        kept.contains("Vectors stay brute force") && !kept.contains("British"),
        "{kept}"
    );
    d.shutdown();
}

/// Issue 27 item 11 (the range): a `through` whose merge window starts before year 1 is the
/// caller's error (it panicked the handler, which never answered); the daemon keeps serving.
#[test]
fn a_merge_through_a_date_out_of_range_is_refused_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    for through in ["-262143-01-01", "0001-01-03", "+262142-12-31", "10000-01-01"] {
        let error = d.call_err("memory.merge", json!({"through": through}));
        assert_eq!(
            (error_code(&error), error_field(&error)),
            (-32602, "through"),
            "{through}: {error}"
        );
    }
    let merged = d.call("memory.merge", json!({"through": "0001-01-07"}));
    assert_eq!(merged["merged"], json!([]));
    assert!(d.call("memory.status", json!({}))["index"].is_object());
    d.shutdown();
}

/// Issue 27 item 20: the index path taken by a directory does not stop start-up (the index is
/// derived: whatever is there is moved aside and the index made anew).
#[test]
fn an_index_path_that_is_a_directory_is_moved_aside_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index/memory.sqlite");
    std::fs::create_dir_all(&index).unwrap();
    std::fs::write(index.join("stray.txt"), "not an index").unwrap();
    std::fs::create_dir_all(dir.path().join("memory")).unwrap();
    std::fs::write(
        dir.path().join("memory/2026-11-27.md"),
        "- The build agent is called tessellan.\n",
    )
    .unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let found = search_until(&mut d, "tessellan", |r| !snippets(r).is_empty());
    assert_eq!(snippets(&found), ["- The build agent is called tessellan."]);
    assert!(index.is_file());
    let status = d.call("memory.status", json!({}));
    assert!(
        status["index"]["open_warnings"]
            .to_string()
            .contains("not a regular file"),
        "{status}"
    );
    d.shutdown();
}

/// Issue 27 item 20: an index damaged while the daemon runs (its file, write-ahead log and
/// shared-memory index overwritten) is rebuilt by the first search that meets the damage; searches keep working.
#[test]
fn an_index_damaged_while_the_daemon_runs_is_rebuilt_and_searches_recover() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "- The staging cluster is called vermillia.\n"}),
    );
    assert_eq!(snippets(&search(&mut d, "vermillia", json!({}))).len(), 1);
    let index = dir.path().join("index/memory.sqlite");
    let garbage = b"this is not a SQLite database, just garbage bytes \x00\x01\x02".repeat(200);
    for file in [
        index.clone(),
        dir.path().join("index/memory.sqlite-wal"),
        dir.path().join("index/memory.sqlite-shm"),
    ] {
        // The same inode the daemon has open, as a disk error or a stray writer would leave it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &garbage))
            .unwrap();
    }
    let first = search(&mut d, "vermillia", json!({}));
    assert!(first["warnings"].to_string().contains("rebuilt"), "{first}");
    let found = search_until(&mut d, "vermillia", |r| !snippets(r).is_empty());
    assert_eq!(snippets(&found), ["- The staging cluster is called vermillia."]);
    assert!(dir.path().join("index/memory.sqlite.corrupt").exists());
    // Writes are indexed on return again.
    d.call(
        "memory.append",
        json!({"path": "MEMORY.md", "text": "- The canary host is called oxbrindle.\n"}),
    );
    assert_eq!(snippets(&search(&mut d, "oxbrindle", json!({}))).len(), 1);
    d.shutdown();
}

/// Issue 27 item 26: `memory.append` to a long daily log chunks the appended tail, not the
/// whole file again (`memory.status` counts the lines the chunker read).
#[test]
fn an_append_to_a_long_log_chunks_only_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    // Without the watcher, which could index an append before the call does (and count it).
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_MEMORY_WATCH_ENABLED", "false")]);
    let log: String = (0..3000).map(|i| format!("- Note {i} about topic{i}.\n")).collect();
    d.call("memory.write", json!({"path": "memory/2026-11-27.md", "content": log}));
    let lines_chunked = |d: &mut Daemon| {
        d.call("memory.status", json!({}))["index"]["lines_chunked"]
            .as_u64()
            .unwrap()
    };
    for round in 0..5 {
        let before = lines_chunked(&mut d);
        let appended = d.call(
            "memory.append",
            json!({"path": "memory/2026-11-27.md", "text": format!("- Appended note {round} names fernwhistle{round}.\n")}),
        );
        assert_eq!(appended["chunks_indexed"], 1, "{appended}");
        let read = lines_chunked(&mut d) - before;
        assert!(
            read <= 2,
            "round {round}: the chunker read {read} lines for a one-line append"
        );
        assert_eq!(
            snippets(&search(&mut d, &format!("fernwhistle{round}"), json!({}))).len(),
            1
        );
    }
    d.shutdown();
}

/// Issue 27 item 4 on a real full disk (a 4 MiB tmpfs): every `memory.append` either fails and
/// leaves the file as it was, or succeeds and its text is in the file once; none does both.
/// Once space is freed, the index catches up with every acknowledged append.
#[test]
fn appends_on_a_full_disk_fail_whole_or_succeed_once_and_the_index_catches_up() {
    use crate::hardening_storage::{fill, small_disk};
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = small_disk(dir.path(), "appends_on_a_full_disk_fail_whole_or_succeed_once") else {
        return;
    };
    let ws = disk.dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut d = Daemon::start(&ws, &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# Facts\n\n- Deploys go through make ship.\n"}),
    );
    let log = ws.join("MEMORY.md");
    let filler = disk.dir.join("filler");
    fill(&filler);
    let mut acknowledged = Vec::new();
    for i in 0..30 {
        let before = read(&log);
        let text = format!("- Full-disk note {i} names kestrelwort{i}.\n");
        let reply = d.call_raw("memory.append", json!({"path": "MEMORY.md", "text": text}));
        match reply.get("error").cloned().ok_or(()) {
            Err(()) => {
                assert_eq!(read(&log), format!("{before}{text}"), "append {i}");
                acknowledged.push(i);
            }
            Ok(error) => {
                assert_eq!(read(&log), before, "append {i} failed ({error}) but changed the file");
                assert_eq!(error_code(&error), -32004, "{error}");
            }
        }
    }
    std::fs::remove_file(&filler).unwrap();
    for i in &acknowledged {
        let query = format!("kestrelwort{i}");
        let found = search_until(&mut d, &query, |r| !snippets(r).is_empty());
        assert_eq!(snippets(&found).len(), 1, "{query}: {found}");
    }
    for i in 0..30 {
        assert!(read(&log).matches(&format!("kestrelwort{i}.")).count() <= 1);
    }
    d.shutdown();
}

/// The exit status of a daemon a `crash` failpoint stopped.
const CRASH_EXIT_STATUS: i32 = 86;

/// Issue 27: a crash in the middle of `memory.append` (half the bytes written, then the
/// process gone) leaves the file as it was before that append: the restarted daemon's next
/// append is not glued to a fragment, and neither `memory.get` nor `memory.search` ever serve
/// the half line.
#[test]
fn a_crash_in_the_middle_of_a_memory_append_leaves_no_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory/a.md");
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_FAILPOINTS", "memory:crash@2")]);
    d.call(
        "memory.append",
        json!({"path": "memory/a.md", "text": "- first line of text here\n"}),
    );
    d.request(
        "memory.append",
        json!({"path": "memory/a.md", "text": "- second line names wombatine here\n"}),
    );
    let status = d.wait_exit(SETTLE);
    assert_eq!(status.code(), Some(CRASH_EXIT_STATUS), "the failpoint did not fire");
    assert_eq!(read(&file), "- first line of text here\n", "the crash left a fragment");

    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.append",
        json!({"path": "memory/a.md", "text": "- third line\n"}),
    );
    let whole = d.call("memory.get", json!({"path": "memory/a.md"}));
    assert_eq!(whole["text"], "- first line of text here\n- third line\n", "{whole}");
    let found = search_until(&mut d, "third", |r| !snippets(r).is_empty());
    assert!(!snippets(&found).is_empty(), "{found}");
    let fragment = search(&mut d, "second", json!({"min_score": 0.0}));
    assert!(snippets(&fragment).is_empty(), "the fragment is indexed: {fragment}");
    let names: Vec<_> = std::fs::read_dir(dir.path().join("memory"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["a.md"], "nothing but the file is left in memory/");
    d.shutdown();
}

/// Issue 27: a `memory.append` that fails half-written while undoing it fails too answers
/// -32004, and the file is as it was for every use that follows: `memory.get`, the index and
/// the next append (no fragment, no stray blank line).
#[test]
fn a_failed_memory_append_whose_undo_fails_is_never_seen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory/a.md");
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_FAILPOINTS", "memory:torn@1,undo:eio@1")]);
    d.call(
        "memory.write",
        json!({"path": "memory/a.md", "content": "- kept line\n"}),
    );
    let error = d.call_err(
        "memory.append",
        json!({"path": "memory/a.md", "text": "- quokkaberry quokkaberry quokkaberry and words after the tear\n"}),
    );
    assert_eq!(error_code(&error), -32004, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("append ")
            && message.contains("memory/a.md: ")
            && message.ends_with("the file is unchanged"),
        "{error}"
    );
    let got = d.call("memory.get", json!({"path": "memory/a.md"}));
    assert_eq!(got["text"], "- kept line\n", "{got}");
    assert_eq!(read(&file), "- kept line\n");

    d.call("memory.append", json!({"path": "memory/a.md", "text": "- next line\n"}));
    let got = d.call("memory.get", json!({"path": "memory/a.md"}));
    assert_eq!(got["text"], "- kept line\n- next line\n", "{got}");
    let found = search_until(&mut d, "next", |r| !snippets(r).is_empty());
    assert!(!snippets(&found).is_empty(), "{found}");
    let torn = search(&mut d, "quokkaberry", json!({"min_score": 0.0}));
    assert!(snippets(&torn).is_empty(), "the torn half line is indexed: {torn}");
    d.shutdown();
}
