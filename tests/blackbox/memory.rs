//! Long-term memory through the real binary: the memory files written by `memory.write` /
//! `memory.append` and by hand (the agent's own file tools), the watcher, the SQLite index
//! (deleted, corrupt), BM25 and hybrid search against a real embeddings endpoint on loopback
//! (and its failure), CJK text, concurrent writes and searches, the recall section of
//! `context.prepare`, and the daily merge.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::builders::user;
use crate::support::checks::error_code;
use crate::support::{Daemon, SocketClient, wait_for_path};

/// How long a test waits for the watcher or the start-up sync (generous: shared machines).
const SETTLE: Duration = Duration::from_secs(20);

/// `memory.search` of `query` (BM25 unless `mode` says) with a low score floor.
fn search(d: &mut Daemon, query: &str, mode: &str) -> Value {
    d.call("memory.search", json!({"query": query, "mode": mode, "min_score": 0.0}))
}

/// The (path, start_line) of each result.
fn places(result: &Value) -> Vec<(String, u64)> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| {
            (
                hit["path"].as_str().unwrap().to_owned(),
                hit["start_line"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Searches until `found` holds or [`SETTLE`] passes; returns the last result.
fn search_until(d: &mut Daemon, query: &str, found: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let result = search(d, query, "bm25");
        if found(&result) || Instant::now() > deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mentions(result: &Value, path: &str) -> bool {
    places(result).iter().any(|(p, _)| p == path)
}

#[test]
fn a_written_fact_is_searchable_on_return_and_read_back_by_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let written = d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# Facts\n\n- The project stores sessions in PostgreSQL 16.\n- Deploys go through `make ship`.\n"}),
    );
    assert_eq!(
        (written["path"].as_str(), written["lines"].as_u64()),
        (Some("MEMORY.md"), Some(4))
    );
    assert!(written["chunks_indexed"].as_u64().unwrap() >= 1, "{written}");
    let appended = d.call(
        "memory.append",
        json!({"path": "memory/2026-11-24.md", "text": "- Fixed the flaky login test by pinning the clock."}),
    );
    assert_eq!(appended["lines"], json!(1));

    let found = search(&mut d, "which database stores sessions?", "bm25");
    assert_eq!(found["mode"], "bm25");
    let top = &found["results"][0];
    assert_eq!(
        (top["path"].as_str(), top["start_line"].as_u64()),
        (Some("MEMORY.md"), Some(3)),
        "{found}"
    );
    assert_eq!(top["source"], "bm25");
    assert!(top["snippet"].as_str().unwrap().contains("PostgreSQL 16"));
    let score = top["score"].as_f64().unwrap();
    assert!(score > 0.0 && score <= 1.0, "{score}");
    // Stemming: "pinned clocks" finds "pinning the clock".
    assert!(mentions(
        &search(&mut d, "pinned clocks", "bm25"),
        "memory/2026-11-24.md"
    ));

    let lines = d.call(
        "memory.get",
        json!({"path": "MEMORY.md", "start_line": 3, "end_line": 3}),
    );
    assert_eq!(lines["text"], "- The project stores sessions in PostgreSQL 16.\n");
    assert_eq!(lines["total_lines"], 4);
    d.shutdown();
}

#[test]
fn only_memory_files_can_be_written_or_read_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    for path in [
        "../escape.md",
        "/etc/passwd",
        "src/main.md",
        "memory/notes.txt",
        "memory/../MEMORY.md",
    ] {
        let error = d.call_err("memory.write", json!({"path": path, "content": "x"}));
        assert!([-32602, -32002].contains(&error_code(&error)), "{path}: {error}");
        let error = d.call_err("memory.get", json!({"path": path}));
        assert!(
            [-32602, -32002, -32003].contains(&error_code(&error)),
            "{path}: {error}"
        );
    }
    assert!(!dir.path().join("../escape.md").exists());
    let error = d.call_err("memory.get", json!({"path": "MEMORY.md"}));
    assert_eq!(error_code(&error), -32003, "a memory file not written yet: {error}");
    let error = d.call_err("memory.search", json!({"query": "x", "mode": "vector"}));
    assert_eq!(error_code(&error), -32602, "no embedding backend: {error}");
    assert!(error["message"].as_str().unwrap().contains("mode"), "{error}");
    let error = d.call_err("memory.search", json!({"query": "x", "max_results": 0}));
    assert_eq!(error_code(&error), -32602, "{error}");
    d.call(
        "memory.write",
        json!({"path": "memory/topics/ok.md", "content": "fine"}),
    );
    d.shutdown();
}

#[test]
fn the_watcher_indexes_what_the_agents_own_file_tools_create_change_rename_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call("initialize", json!({}));
    let memory = dir.path().join("memory");
    std::fs::create_dir_all(&memory).unwrap();

    std::fs::write(memory.join("notes.md"), "- The staging server is called kestrel.\n").unwrap();
    let found = search_until(&mut d, "kestrel", |r| mentions(r, "memory/notes.md"));
    assert!(mentions(&found, "memory/notes.md"), "created: {found}");

    std::fs::write(memory.join("notes.md"), "- The staging server is called osprey now.\n").unwrap();
    let found = search_until(&mut d, "osprey", |r| mentions(r, "memory/notes.md"));
    assert!(mentions(&found, "memory/notes.md"), "modified: {found}");
    assert!(
        !mentions(&search(&mut d, "kestrel", "bm25"), "memory/notes.md"),
        "the old text is gone"
    );

    std::fs::rename(memory.join("notes.md"), memory.join("servers.md")).unwrap();
    let found = search_until(&mut d, "osprey", |r| {
        mentions(r, "memory/servers.md") && !mentions(r, "memory/notes.md")
    });
    assert_eq!(places(&found), vec![("memory/servers.md".to_owned(), 1)], "renamed");

    std::fs::remove_file(memory.join("servers.md")).unwrap();
    let found = search_until(&mut d, "osprey", |r| r["results"].as_array().unwrap().is_empty());
    assert_eq!(found["results"], json!([]), "deleted");

    // MEMORY.md created after start-up is watched too.
    std::fs::write(dir.path().join("MEMORY.md"), "- Prefers tabs over spaces.\n").unwrap();
    let found = search_until(&mut d, "tabs", |r| mentions(r, "MEMORY.md"));
    assert!(mentions(&found, "MEMORY.md"), "{found}");
    let status = d.call("memory.status", json!({}));
    assert_ne!(status["watcher"]["backend"], "off", "{status}");
    assert!(status["watcher"]["batches"].as_u64().unwrap() >= 1, "{status}");
    d.shutdown();
}

/// Three memory files with distinct facts.
fn write_corpus(d: &mut Daemon) {
    d.call("memory.write", json!({"path": "MEMORY.md", "content": "# Decisions\n\n- Chose SQLite FTS5 over tantivy for build time.\n- JWT over server sessions.\n"}));
    d.call("memory.write", json!({"path": "memory/2026-11-23.md", "content": "## Lessons\n\n- cargo build failed on the missing bundled feature; enabling it fixed the build.\n"}));
    d.call(
        "memory.write",
        json!({"path": "memory/2026-11-24.md", "content": "- Build time matters to the user more than binary size.\n"}),
    );
}

#[test]
fn a_deleted_or_corrupt_index_is_rebuilt_from_the_files_with_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    write_corpus(&mut d);
    let before = places(&search(&mut d, "build time", "bm25"));
    assert!(before.len() >= 2, "{before:?}");
    d.shutdown();

    let index = dir.path().join("index/memory.sqlite");
    assert!(index.exists());
    for entry in std::fs::read_dir(dir.path().join("index")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let mut d = Daemon::start(dir.path(), &[]);
    let rebuilt = search_until(&mut d, "build time", |r| places(r).len() == before.len());
    assert_eq!(places(&rebuilt), before, "deleted index rebuilt");
    d.shutdown();

    for entry in std::fs::read_dir(dir.path().join("index")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    std::fs::write(
        &index,
        b"this is not a SQLite database, just garbage bytes \x00\x01\x02".repeat(100),
    )
    .unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let rebuilt = search_until(&mut d, "build time", |r| places(r).len() == before.len());
    assert_eq!(places(&rebuilt), before, "corrupt index rebuilt");
    let status = d.call("memory.status", json!({}));
    let warnings = status["index"]["open_warnings"].to_string();
    assert!(warnings.contains("corrupt"), "the rebuild is reported: {status}");
    d.shutdown();
}

#[test]
fn a_cjk_query_finds_cjk_text_without_spaces() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call("memory.write", json!({"path": "MEMORY.md", "content": "- 用户喜欢使用深色主题编辑器。\n- 项目的数据库是PostgreSQL。\n- ユーザーは毎朝コーヒーを飲む。\n"}));
    let found = search(&mut d, "深色主题", "bm25");
    assert_eq!(places(&found).first(), Some(&("MEMORY.md".to_owned(), 1)), "{found}");
    let found = search(&mut d, "コーヒー", "bm25");
    assert_eq!(places(&found).first(), Some(&("MEMORY.md".to_owned(), 3)), "{found}");
    d.shutdown();
}

#[test]
fn pipelined_writes_and_searches_all_succeed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(d.request(
            "memory.append",
            json!({"path": "memory/log.md", "text": format!("- entry number {i} about topic{i}\n")}),
        ));
        ids.push(d.request("memory.search", json!({"query": format!("topic{i}"), "min_score": 0.0})));
    }
    let mut replies = std::collections::HashMap::new();
    while replies.len() < ids.len() {
        let (_, frame) = d.next_frame();
        if let Some(id) = frame["id"].as_u64() {
            replies.insert(id, frame);
        }
    }
    for (i, pair) in ids.chunks(2).enumerate() {
        let appended = &replies[&pair[0]];
        assert_eq!(
            appended["result"]["lines"],
            json!(i + 1),
            "appends run in arrival order: {appended}"
        );
        assert!(replies[&pair[1]].get("result").is_some(), "{}", replies[&pair[1]]);
    }
    let text = std::fs::read_to_string(dir.path().join("memory/log.md")).unwrap();
    let expected: String = (0..40)
        .map(|i| format!("- entry number {i} about topic{i}\n"))
        .collect();
    assert_eq!(text, expected);
    let found = search(&mut d, "topic39", "bm25");
    assert_eq!(
        places(&found).first(),
        Some(&("memory/log.md".to_owned(), 40)),
        "{found}"
    );
    d.shutdown();
}

/// A word unique to `kind`, connection `conn` and `round`, made of letters only (`ownbravoac`),
/// so search matches it whole and no other round's word shares a part with it.
fn tag(kind: &str, conn: usize, round: usize) -> String {
    let letter = |n: usize| char::from(b'a' + u8::try_from(n % 26).unwrap());
    let connection = ["alfa", "bravo"][conn];
    format!("{kind}{connection}{}{}", letter(round / 26), letter(round))
}

#[test]
fn two_connections_writing_and_searching_at_once_lose_nothing_and_find_their_own_writes() {
    const ROUNDS: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_args(dir.path(), &[], &["--socket"]);
    let socket = dir.path().join("run/satchel.sock");
    wait_for_path(&socket);

    // Each connection appends to a file both share and rewrites one of its own, searching
    // after every write for what it just wrote.
    let connections: Vec<_> = (0..2)
        .map(|conn| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut client = SocketClient::connect(&socket);
                let own = format!("memory/conn{conn}.md");
                let mut shared_lines = Vec::new();
                for round in 0..ROUNDS {
                    let appended = client.call(
                        "memory.append",
                        json!({"path": "memory/shared.md", "text": format!("- conn{conn} entry about {}", tag("shared", conn, round))}),
                    );
                    shared_lines.push(appended["lines"].as_u64().unwrap());
                    let found = client.call(
                        "memory.search",
                        json!({"query": tag("shared", conn, round), "mode": "bm25", "min_score": 0.0}),
                    );
                    assert_eq!(
                        places(&found).first().map(|(path, _)| path.as_str()),
                        Some("memory/shared.md"),
                        "conn{conn} round {round}: {found}"
                    );

                    client.call(
                        "memory.write",
                        json!({"path": own, "content": format!("# Latest\n\n- version {}\n", tag("own", conn, round))}),
                    );
                    let found = client.call(
                        "memory.search",
                        json!({"query": tag("own", conn, round), "mode": "bm25", "min_score": 0.0}),
                    );
                    assert_eq!(
                        places(&found).first(),
                        Some(&(own.clone(), 3)),
                        "conn{conn} round {round}: {found}"
                    );
                }
                shared_lines
            })
        })
        .collect();
    let mut line_counts: Vec<u64> = connections
        .into_iter()
        .flat_map(|connection| connection.join().unwrap())
        .collect();

    // The appends ran one at a time: each saw a different length, and every line is there once.
    line_counts.sort_unstable();
    assert_eq!(line_counts, (1..=2 * ROUNDS as u64).collect::<Vec<_>>());
    let shared = std::fs::read_to_string(dir.path().join("memory/shared.md")).unwrap();
    let mut lines: Vec<&str> = shared.lines().collect();
    lines.sort_unstable();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|conn| {
            (0..ROUNDS).map(move |round| format!("- conn{conn} entry about {}", tag("shared", conn, round)))
        })
        .collect();
    expected.sort_unstable();
    assert_eq!(lines, expected);
    // Each own file holds its last version only, and the index agrees.
    for conn in 0..2 {
        let stale = search(&mut d, &tag("own", conn, ROUNDS - 2), "bm25");
        assert!(places(&stale).is_empty(), "{stale}");
    }
    d.shutdown();
}

/// A real OpenAI-compatible `/embeddings` endpoint on loopback: hashed bags of words (so
/// texts sharing words are close), or HTTP 500 while `failing`.
struct Embeddings {
    port: u16,
    failing: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

impl Embeddings {
    const DIMENSIONS: usize = 64;

    fn start() -> Embeddings {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let failing = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (fail, count) = (failing.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let failing = fail.load(Ordering::SeqCst);
                std::thread::spawn(move || serve_embeddings(stream, failing));
            }
        });
        Embeddings {
            port,
            failing,
            requests,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SATCHEL_EMBEDDING_BACKEND", "openai".into()),
            (
                "SATCHEL_EMBEDDING_BASE_URL",
                format!("http://127.0.0.1:{}/v1", self.port),
            ),
            ("EMBEDDING_DIMENSIONS", Self::DIMENSIONS.to_string()),
            ("EMBEDDING_MODEL_NAME", "hashed-words".into()),
            ("SATCHEL_EMBEDDING_TIMEOUT_SECS", "5".into()),
            ("EMBEDDING_API_KEY", EMBEDDING_KEY.into()),
        ]
    }
}

/// The embeddings API key of the daemon's environment: it must never come back.
const EMBEDDING_KEY: &str = "sk-embed-secret-5f3a9c";

fn serve_embeddings(stream: TcpStream, failing: bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    let mut authorization = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
        if line.to_ascii_lowercase().starts_with("authorization:") {
            authorization = line["authorization:".len()..].trim().to_owned();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let (status, reply) = if failing {
        // A careless server that echoes the credentials it was sent.
        let message = format!("embedding backend down (you sent {authorization})");
        ("500 Internal Server Error", json!({"error": {"message": message}}))
    } else {
        let request: Value = serde_json::from_slice(&body).unwrap();
        let data: Vec<Value> = request["input"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(index, text)| json!({"index": index, "embedding": hashed_words(text.as_str().unwrap())}))
            .collect();
        ("200 OK", json!({"data": data, "model": "hashed-words"}))
    };
    let reply = reply.to_string();
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

fn hashed_words(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; Embeddings::DIMENSIONS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 2) {
        let hash = word
            .to_lowercase()
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        vector[(hash % Embeddings::DIMENSIONS as u64) as usize] += 1.0;
    }
    vector
}

#[test]
fn hybrid_search_uses_the_embeddings_endpoint_and_falls_back_to_bm25_when_it_fails() {
    let embeddings = Embeddings::start();
    let dir = tempfile::tempdir().unwrap();
    let env = embeddings.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut d = Daemon::start(dir.path(), &env);
    write_corpus(&mut d);
    assert!(
        embeddings.requests.load(Ordering::SeqCst) >= 1,
        "the chunks were embedded"
    );

    let found = search(&mut d, "build time", "auto");
    assert_eq!(found["mode"], "hybrid", "{found}");
    assert!(found.get("warnings").is_none(), "{found}");
    let sources: Vec<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["source"].as_str().unwrap())
        .collect();
    assert!(sources.contains(&"hybrid"), "{found}");
    let status = d.call("memory.status", json!({}));
    assert_eq!(status["embedding"]["backend"], "openai", "{status}");
    assert!(
        status["modes"].as_array().unwrap().contains(&json!("vector")),
        "{status}"
    );

    embeddings.failing.store(true, Ordering::SeqCst);
    let fallback = search(&mut d, "binary size", "auto");
    assert_eq!(fallback["mode"], "bm25", "{fallback}");
    assert!(!fallback["warnings"].as_array().unwrap().is_empty(), "{fallback}");
    assert!(mentions(&fallback, "memory/2026-11-24.md"), "{fallback}");
    let warning = fallback["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("backend down (you sent"),
        "the endpoint's words: {warning}"
    );
    assert!(
        !fallback.to_string().contains(EMBEDDING_KEY),
        "the key is redacted: {fallback}"
    );
    let status = d.call("memory.status", json!({}));
    assert!(!status.to_string().contains(EMBEDDING_KEY), "{status}");
    let config = d.call("initialize", json!({}));
    assert!(!config.to_string().contains(EMBEDDING_KEY), "{config}");

    // The next search tries the endpoint again: vectors are not off for good.
    embeddings.failing.store(false, Ordering::SeqCst);
    let again = search(&mut d, "server sessions", "auto");
    assert_eq!(again["mode"], "hybrid", "{again}");
    d.shutdown();
}

#[test]
fn prepare_recalls_memory_for_the_newest_user_message_as_a_section_with_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_TOKENIZER", "estimate")]);
    write_corpus(&mut d);
    let prepared = d.call(
        "context.prepare",
        json!({"session_id": "s1", "messages": [user("Why did we pick SQLite FTS5 for search?")], "memory": {}}),
    );
    let system = prepared["system"].as_str().unwrap_or_default();
    assert!(system.contains("Chose SQLite FTS5 over tantivy"), "{prepared}");
    let report = prepared["prompt"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "memory:recall")
        .cloned()
        .unwrap_or_else(|| panic!("no recall section: {prepared}"));
    assert_eq!(report["sourceType"], "memory");
    assert!(
        report["inclusionReason"].as_str().unwrap().contains("MEMORY.md:3"),
        "{report}"
    );

    // A later call of the same request brings only a tool result: the recall stays.
    let later = d.call(
        "context.prepare",
        json!({"session_id": "s1", "append": [{"role": "assistant", "content": "Let me check."}], "memory": {}}),
    );
    assert!(
        later["system"]
            .as_str()
            .unwrap_or_default()
            .contains("Chose SQLite FTS5"),
        "{later}"
    );
    d.shutdown();
}

#[test]
fn the_merge_folds_daily_logs_into_memory_md_once_and_keeps_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# MEMORY\n\n## Key decisions\n\n- Chose SQLite.\n"}),
    );
    d.call("memory.write", json!({"path": "memory/2026-11-23.md", "content": "### Preferences and constraints\n\n- Answers in British English.\n\n### Done\n\n- shipped v2\n"}));
    d.call("memory.write", json!({"path": "memory/2026-11-24.md", "content": "### Decisions\n\n- chose sqlite\n- Vectors stay brute force below 100k chunks.\n"}));

    let merged = d.call("memory.merge", json!({"through": "2026-11-24"}));
    assert_eq!(
        merged["merged"],
        json!(["memory/2026-11-23.md", "memory/2026-11-24.md"])
    );
    assert_eq!(
        (merged["added"].as_u64(), merged["duplicates"].as_u64()),
        (Some(2), Some(1)),
        "{merged}"
    );
    let backup = merged["backup"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(backup)).unwrap(),
        "# MEMORY\n\n## Key decisions\n\n- Chose SQLite.\n"
    );
    let memory = std::fs::read_to_string(dir.path().join("MEMORY.md")).unwrap();
    assert!(
        memory.contains("- Vectors stay brute force below 100k chunks. (from memory/2026-11-24.md)"),
        "{memory}"
    );
    assert!(
        memory.contains("## Preferences and constraints\n\n- Answers in British English."),
        "{memory}"
    );
    assert!(
        !memory.contains("shipped v2"),
        "the day's work stays in its log: {memory}"
    );
    // Searchable at once, and a second merge adds nothing.
    assert!(mentions(&search(&mut d, "British English", "bm25"), "MEMORY.md"));
    let again = d.call("memory.merge", json!({"through": "2026-11-24"}));
    assert_eq!(again["added"], 0);
    assert!(
        again.get("backup").is_none(),
        "nothing changed, nothing backed up: {again}"
    );
    let status = d.call("memory.status", json!({}));
    assert!(status["next_merge"].is_string(), "{status}");
    assert!(file_mode(&dir.path().join("MEMORY.md")) & 0o077 == 0);
    d.shutdown();
}

fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode()
}

#[test]
fn memory_search_is_unavailable_when_the_index_is_off_but_the_files_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[("SATCHEL_MEMORY_INDEX_ENABLED", "false")]);
    d.call("memory.write", json!({"path": "MEMORY.md", "content": "- a fact\n"}));
    let error = d.call_err("memory.search", json!({"query": "fact"}));
    assert_eq!(error_code(&error), -32010, "{error}");
    assert!(!dir.path().join("index/memory.sqlite").exists());
    d.shutdown();
}

#[test]
fn chroma_is_refused_at_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(crate::support::satchel_bin())
        .args(["--workspace", dir.path().to_str().unwrap(), "serve"])
        .env("MEMORY_STORE_BACKEND", "chroma")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chroma is not supported"), "{stderr}");
    assert!(output.stdout.is_empty(), "stdout carries only protocol frames");
}

#[test]
fn satchel_inspect_memory_shows_the_index_the_watcher_and_the_embeddings() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with_args(dir.path(), &[], &["--socket"]);
    write_corpus(&mut d);
    let output = std::process::Command::new(crate::support::satchel_bin())
        .arg("--workspace")
        .arg(dir.path())
        .args(["inspect", "--memory"])
        .env("SATCHEL_LOG", "warn")
        .env_remove("SATCHEL_HOME")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("memory index  index/memory.sqlite\n  3 files, "),
        "{text}"
    );
    assert!(text.contains("search modes: bm25\n"), "{text}");
    assert!(text.contains("embeddings    none (BM25 only)"), "{text}");
    assert!(text.contains("daily merge   next at "), "{text}");
    d.shutdown();
}

/// A chat-completions endpoint on loopback answering every request with `status` and, for a
/// 200, a completion carrying `reply`; it keeps each request's header lines and JSON body.
struct FakeChat {
    port: u16,
    requests: Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl FakeChat {
    fn start(status: u16, reply: &str) -> FakeChat {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (kept, reply) = (requests.clone(), reply.to_owned());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (kept, reply) = (kept.clone(), reply.clone());
                std::thread::spawn(move || serve_chat(stream, status, &reply, &kept));
            }
        });
        FakeChat { port, requests }
    }

    fn requests(&self) -> Vec<(String, Value)> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve_chat(stream: TcpStream, status: u16, reply: &str, kept: &std::sync::Mutex<Vec<(String, Value)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    kept.lock()
        .unwrap()
        .push((head, serde_json::from_slice(&body).unwrap_or(Value::Null)));
    let (status_line, body) = if status == 200 {
        let completion = json!({
            "id": "chatcmpl-merge",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        });
        ("200 OK".to_owned(), completion.to_string())
    } else {
        (
            format!("{status} Internal Server Error"),
            json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}).to_string(),
        )
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

const MERGE_KEY_ENV: &str = "SATCHEL_MERGE_TEST_KEY";
const MERGE_KEY: &str = "sk-merge-test-secret";

/// A daemon whose summariser is the model behind `chat`, on a workspace holding a `MEMORY.md`
/// and two daily logs: new are a preference (`N1`, the 23rd) and a decision (`N2`, the 24th);
/// `MEMORY.md` holds `Chose SQLite.` (`M1`), which the 24th repeats.
fn merge_workspace(chat: &FakeChat) -> (tempfile::TempDir, Daemon) {
    let url = format!("http://127.0.0.1:{}/v1", chat.port);
    merge_workspace_with(&[
        ("SATCHEL_SUMMARIZER", "openai"),
        ("SATCHEL_LLM_BASE_URL", url.as_str()),
        ("SATCHEL_LLM_MODEL", "merge-model"),
        ("SATCHEL_LLM_API_KEY_ENV", MERGE_KEY_ENV),
        ("SATCHEL_LLM_TIMEOUT_SECS", "10"),
        (MERGE_KEY_ENV, MERGE_KEY),
    ])
}

/// The workspace of [`merge_workspace`], the daemon started with `env`.
fn merge_workspace_with(env: &[(&str, &str)]) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), env);
    d.call(
        "memory.write",
        json!({"path": "MEMORY.md", "content": "# MEMORY\n\n## Key decisions\n\n- Chose SQLite.\n"}),
    );
    d.call("memory.write", json!({"path": "memory/2026-11-23.md", "content": "### Preferences and constraints\n\n- Answers in British English.\n\n### Done\n\n- shipped v2\n"}));
    d.call("memory.write", json!({"path": "memory/2026-11-24.md", "content": "### Decisions\n\n- chose sqlite\n- Vectors stay brute force below 100k chunks.\n"}));
    (dir, d)
}

#[test]
fn with_summarizer_openai_the_model_consolidates_the_merge_and_only_its_endpoint_gets_the_key() {
    let chat = FakeChat::start(
        200,
        "## Key decisions\n- Chose SQLite; vector search stays brute force below 100k chunks [M1, N2]\n\n## Preferences and constraints\n- Replies in British English [N1]\n",
    );
    let (dir, mut d) = merge_workspace(&chat);
    let merged = d.call("memory.merge", json!({"through": "2026-11-24"}));
    assert_eq!(merged["summarizer"], "openai", "{merged}");
    assert!(merged.get("warnings").is_none(), "{merged}");
    assert_eq!(
        (merged["added"].as_u64(), merged["duplicates"].as_u64()),
        (Some(2), Some(1)),
        "{merged}"
    );
    assert!(merged["backup"].is_string(), "{merged}");
    // The model's bullets, with the provenance of what they stand for: each log with the
    // fingerprints of its entries (`Chose SQLite.`, which the 24th repeats, included).
    assert_eq!(
        std::fs::read_to_string(dir.path().join("MEMORY.md")).unwrap(),
        "# MEMORY\n\n## Key decisions\n\n- Chose SQLite; vector search stays brute force below 100k chunks (from memory/2026-11-24.md#10105c69#78d852df)\n\n## Preferences and constraints\n\n- Replies in British English (from memory/2026-11-23.md#3c6c8772)\n"
    );

    let requests = chat.requests();
    assert_eq!(requests.len(), 1);
    let (head, body) = &requests[0];
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {MERGE_KEY}"))),
        "{head}"
    );
    assert_eq!(body["model"], "merge-model");
    assert_eq!(body["messages"][0]["role"], "system");
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert_eq!(
        prompt,
        "# Existing entries of MEMORY.md\n\n## Key decisions\n- [M1] Chose SQLite.\n\n# New entries\n\n## Preferences and constraints\n- [N1] Answers in British English. (from memory/2026-11-23.md)\n\n## Key decisions\n- [N2] Vectors stay brute force below 100k chunks. (from memory/2026-11-24.md)\n"
    );

    // Searchable at once; a second merge knows the rewritten entries, has nothing new and
    // does not ask the model.
    assert!(mentions(&search(&mut d, "British English", "bm25"), "MEMORY.md"));
    let again = d.call("memory.merge", json!({"through": "2026-11-24"}));
    assert_eq!(
        (
            again["added"].as_u64(),
            again["duplicates"].as_u64(),
            again["summarizer"].as_str()
        ),
        (Some(0), Some(3), Some("extractive")),
        "{again}"
    );
    assert!(again.get("backup").is_none(), "{again}");
    assert_eq!(chat.requests().len(), 1);
    d.shutdown();
}

#[test]
fn a_failing_or_unusable_model_leaves_the_merge_extractive_with_a_warning() {
    for (status, reply, reason) in [
        (500, "", "HTTP 500"),
        (200, "Sure! I merged everything you gave me.", "unusable reply"),
        (
            200,
            "## Key decisions\n- Vectors stay brute force [N2]\n",
            "leaves out N1",
        ),
    ] {
        let chat = FakeChat::start(status, reply);
        let (dir, mut d) = merge_workspace(&chat);
        let merged = d.call("memory.merge", json!({"through": "2026-11-24"}));
        assert_eq!(merged["summarizer"], "extractive", "{merged}");
        let warnings = merged["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{merged}");
        let warning = warnings[0].as_str().unwrap();
        assert!(warning.contains(reason), "{warning}");
        assert!(!merged.to_string().contains(MERGE_KEY), "{merged}");
        assert_eq!(
            (merged["added"].as_u64(), merged["duplicates"].as_u64()),
            (Some(2), Some(1)),
            "{merged}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("MEMORY.md")).unwrap(),
            "# MEMORY\n\n## Key decisions\n\n- Chose SQLite.\n- Vectors stay brute force below 100k chunks. (from memory/2026-11-24.md)\n\n## Preferences and constraints\n\n- Answers in British English. (from memory/2026-11-23.md)\n",
            "{reason}"
        );
        assert_eq!(chat.requests().len(), 1, "one request, no retry");
        d.shutdown();
    }
}

#[test]
fn with_summarizer_client_the_calling_client_consolidates_the_merge_if_it_declared_it_can() {
    for declare in [true, false] {
        let (dir, mut d) = merge_workspace_with(&[("SATCHEL_SUMMARIZER", "client")]);
        d.call("initialize", json!({"capabilities": {"summarizer_complete": declare}}));
        let mut asked = Vec::new();
        let merged = d.call_answering("memory.merge", json!({"through": "2026-11-24"}), |frame| {
            if frame["method"] != "summarizer.complete" {
                return None;
            }
            asked.push(frame["params"].clone());
            let text = "## Preferences and constraints\n- Replies in British English [N1]\n\n## Key decisions\n- Vectors stay brute force below 100k chunks [N2]\n";
            Some(json!({"jsonrpc": "2.0", "id": frame["id"], "result": {"text": text}}))
        });
        let memory = std::fs::read_to_string(dir.path().join("MEMORY.md")).unwrap();
        if declare {
            assert_eq!(merged["summarizer"], "client", "{merged}");
            assert_eq!(asked.len(), 1);
            assert_eq!(asked[0]["messages"][0]["role"], "system");
            assert!(
                memory.contains("- Replies in British English (from memory/2026-11-23.md#"),
                "{memory}"
            );
        } else {
            assert!(asked.is_empty(), "a client that did not declare it is never asked");
            assert_eq!(merged["summarizer"], "extractive", "{merged}");
            let warning = merged["warnings"][0].as_str().unwrap();
            assert!(warning.contains("did not declare summarizer_complete"), "{warning}");
            assert!(
                memory.contains("- Answers in British English. (from memory/2026-11-23.md)"),
                "{memory}"
            );
        }
        d.shutdown();
    }
}
