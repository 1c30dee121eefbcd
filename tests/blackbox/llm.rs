//! Black-box tests of the model-backed summarisers. Each test spawns the real `satchel serve`
//! on a fresh temporary workspace and, for the `openai` backend, a real HTTP server on
//! loopback that speaks the chat-completions API: it records every request and answers from
//! a script (good summaries, slow ones, HTTP 500, bodies that are not JSON, empty text, text
//! without the `##` sections). For the `client` backend the test itself plays the client and
//! answers the daemon's `summarizer.complete` requests on stdin.
//!
//! What is checked is what a user relies on: the request the model gets (model, prompts,
//! budget, key, headers), that the model's summary is used and still carries the exact
//! identifiers, that staged and incremental summarisation pass summaries along, that every
//! failure falls back to the extractive summary and says so, that nothing is ever lost, and
//! that a compaction leaves a note in the day's memory log.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::builders::{AgentLoop, FIRST_COMMAND, FIRST_FILE, SYSTEM, agent_step, system, tool_output, user};
use crate::support::checks::{self, assert_log_has_no_pending_compaction, n, summary_text};
use crate::support::trajectories::Format;
use crate::support::{Daemon, actions, archived, files_under};

const API_KEY_ENV: &str = "LLM_TEST_API_KEY";
const API_KEY: &str = "sk-test-secret";
const MODEL: &str = "cheap-model";
/// The headings of a rendered summary (and of the output format the prompts ask for).
const SECTIONS: [&str; 9] = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
];
/// The keys of a `compact_summary` holding lists.
const SUMMARY_LISTS: [&str; 7] = [
    "goal",
    "constraints",
    "done",
    "in_progress",
    "blocked",
    "key_decisions",
    "next_steps",
];

/// The user's constraint, which the memory log must keep in the user's words.
const CONSTRAINT: &str = "Never push to main directly, and keep the MSRV at 1.70.";

/// A model reply that is a valid summary but names none of the span's paths or commands.
const MODEL_GOAL: &str = "Make the parser crate build again (model-goal-7f3)";
const MODEL_REPLY: &str = "## Goal
- Make the parser crate build again (model-goal-7f3)

## Constraints & Preferences
- (none)

## Progress
### Done
- [x] Looked at the build failures

### In Progress
- [ ] Fixing the type errors

### Blocked
- (none)

## Key Decisions
- **Keep the legacy lexer**: less churn

## Next Steps
1. Run the tests again

## Critical Context
- (none)
";

// ---------------------------------------------------------------------------------------------
// A chat-completions server on loopback
// ---------------------------------------------------------------------------------------------

/// How the fake model answers one request.
#[derive(Debug, Clone)]
enum Reply {
    /// 200 with this text as the completion.
    Ok(String),
    /// 200 with a valid summary naming the request's number, `goal written by request #N.`
    /// (1-based), so later requests can be matched with the reply they carry on.
    Numbered,
    /// Waits this many milliseconds, then answers like `Numbered`.
    Slow(u64),
    /// HTTP 500 with an OpenAI-style error body.
    Status500,
    /// 200 with a body that is not JSON.
    Malformed,
    /// 200 with an empty completion.
    Empty,
    /// 200 with prose that has no `##` section.
    NoSections,
}

/// One request the server received.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    /// Header names lower-cased.
    headers: BTreeMap<String, String>,
    /// The JSON body (a string when it was not JSON).
    body: Value,
}

impl Recorded {
    fn user_prompt(&self) -> &str {
        self.body["messages"][1]["content"].as_str().unwrap_or_default()
    }
}

/// The replies still to give; `cycle` puts each one back at the end once used.
struct Script {
    replies: VecDeque<Reply>,
    cycle: bool,
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
    stop: AtomicBool,
}

/// A real HTTP/1.1 server on `127.0.0.1`, one thread per connection, answering
/// `POST /v1/chat/completions` from its script (`Numbered` once the script is used up).
struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeLlm {
    fn start(replies: Vec<Reply>) -> FakeLlm {
        FakeLlm::with_script(replies, false)
    }

    /// A server going round `replies` forever.
    fn cycling(replies: Vec<Reply>) -> FakeLlm {
        FakeLlm::with_script(replies, true)
    }

    fn with_script(replies: Vec<Reply>, cycle: bool) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                replies: replies.into(),
                cycle,
            }),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let state = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if state.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let state = state.clone();
                // A slow reply must not hold up the retry that follows its timeout.
                std::thread::spawn(move || {
                    let _ = serve_connection(stream, &state);
                });
            }
        });
        FakeLlm { addr, shared }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(()); // The wake-up connection of `Drop`.
    }
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let path = words.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    let (number, reply) = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(Recorded {
            method,
            path,
            headers,
            body,
        });
        let mut script = shared.script.lock().unwrap();
        let reply = script.replies.pop_front();
        if script.cycle
            && let Some(reply) = &reply
        {
            script.replies.push_back(reply.clone());
        }
        (requests.len(), reply.unwrap_or(Reply::Numbered))
    };
    let (status, body) = match reply {
        Reply::Ok(text) => (200, completion(&text)),
        Reply::Numbered => (200, completion(&numbered_summary(number))),
        Reply::Slow(ms) => {
            std::thread::sleep(Duration::from_millis(ms));
            (200, completion(&numbered_summary(number)))
        }
        Reply::Status500 => (
            500,
            json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}})
                .to_string(),
        ),
        Reply::Malformed => (
            200,
            r###"{"choices": [{"message": {"role": "assistant", "content": "## Goal"###.to_owned(),
        ),
        Reply::Empty => (200, completion("")),
        Reply::NoSections => (
            200,
            completion("Sure! The user fixed the parser build and everything works now."),
        ),
    };
    let reason = if status == 200 { "OK" } else { "Internal Server Error" };
    let mut stream = reader.into_inner();
    // The client may have given up (timeout): a failed write is expected then.
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// A chat-completions response body carrying `text`.
fn completion(text: &str) -> String {
    json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })
    .to_string()
}

fn numbered_goal(n: usize) -> String {
    format!("goal written by request #{n}.")
}

/// A valid summary naming request `n`.
fn numbered_summary(n: usize) -> String {
    format!(
        "## Goal\n- {}\n\n## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n- [x] work reported by request #{n}.\n\n### In Progress\n- (none)\n\n### Blocked\n- (none)\n\n## Key Decisions\n- (none)\n\n## Next Steps\n1. carry on after request #{n}.\n\n## Critical Context\n- (none)\n",
        numbered_goal(n)
    )
}

// ---------------------------------------------------------------------------------------------
// The conversation
// ---------------------------------------------------------------------------------------------

fn task() -> String {
    format!("Fix the failing build of the parser crate. {CONSTRAINT}")
}

/// The agent loop of these tests (OpenAI format): every third tool output 4.5 KB, which is
/// offloaded to a file.
const AGENT_LOOP: AgentLoop = AgentLoop {
    check_bytes: 1_600,
    test_bytes: 4_500,
    runs_tests: |s| s % 3 == 2,
    reply: |s| format!("Module {s} builds now. The parser still fails in module {}.", s + 1),
};

/// The small window every test uses, with the exact byte-based token estimate.
fn window() -> Value {
    json!({"max_input_length": 4096, "summary_max_tokens": 800, "tokenizer": "estimate"})
}

/// `window()` with the `openai` backend pointed at `server`, and `extra` on top.
fn openai_config(server: &FakeLlm, extra: Value) -> Value {
    let mut config = window();
    let backend = json!({
        "summarizer": "openai",
        "llm_base_url": server.base_url(),
        "llm_model": MODEL,
        "llm_api_key_env": API_KEY_ENV,
        "llm_timeout_secs": 10,
    });
    merge(&mut config, backend);
    merge(&mut config, extra);
    config
}

/// Keys a request may not set: they go in the workspace's `config.json`.
const DAEMON_ONLY: [&str; 3] = ["llm_base_url", "llm_api_key_env", "llm_extra_headers"];

/// Writes the [`DAEMON_ONLY`] keys of `config` to `<workspace>/config.json` and returns the
/// rest, the per-request overrides.
fn daemon_only_to_file(workspace: &Path, mut config: Value) -> Value {
    let request = config.as_object_mut().unwrap();
    let file: serde_json::Map<String, Value> = DAEMON_ONLY
        .iter()
        .filter_map(|key| request.remove(*key).map(|value| ((*key).to_owned(), value)))
        .collect();
    if !file.is_empty() {
        std::fs::write(workspace.join("config.json"), Value::Object(file).to_string()).unwrap();
    }
    config
}

fn merge(into: &mut Value, from: Value) {
    if let Value::Object(from) = from {
        into.as_object_mut().unwrap().extend(from);
    }
}

// ---------------------------------------------------------------------------------------------
// The agent
// ---------------------------------------------------------------------------------------------

/// Answers a frame the daemon sends during a call (its requests); `None` answers nothing.
type Answer = Box<dyn FnMut(&Value) -> Option<Value>>;

/// One session on its own daemon, fed one message at a time like an agent loop.
struct Chat {
    dir: tempfile::TempDir,
    daemon: Daemon,
    session: String,
    /// Per-request config overrides, if any.
    config: Option<Value>,
    /// Everything sent, by original index.
    sent: Vec<Value>,
    /// The last prepare result.
    last: Value,
    /// Every compaction: its report and the prepare result that carried it.
    compactions: Vec<(Value, Value)>,
    queue: VecDeque<Value>,
    next_step: usize,
    /// Every frame other than a reply, in order (notifications, the daemon's requests).
    frames: Vec<Value>,
    /// Plays the client's side of `summarizer.complete`.
    answer: Option<Answer>,
}

impl Chat {
    /// A daemon on a fresh workspace, with the API key in its environment.
    fn start(config: Option<Value>, env: &[(&str, &str)]) -> Chat {
        Chat::start_logging(config, env, None)
    }

    /// Like `start`, with the daemon's stderr written to `stderr`.
    fn start_logging(config: Option<Value>, env: &[(&str, &str)], stderr: Option<&Path>) -> Chat {
        let dir = tempfile::tempdir().unwrap();
        let config = config.map(|config| daemon_only_to_file(dir.path(), config));
        let mut env = env.to_vec();
        env.push((API_KEY_ENV, API_KEY));
        let daemon = match stderr {
            Some(path) => Daemon::start_logging_to(dir.path(), &env, path),
            None => Daemon::start(dir.path(), &env),
        };
        Chat {
            dir,
            daemon,
            session: "llm-session".into(),
            config,
            sent: Vec::new(),
            last: Value::Null,
            compactions: Vec::new(),
            queue: VecDeque::new(),
            next_step: 0,
            frames: Vec::new(),
            answer: None,
        }
    }

    /// Calls a method that must succeed, keeping every other frame and answering the daemon's
    /// requests.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let frames = &mut self.frames;
        let answer = &mut self.answer;
        self.daemon.call_answering(method, params, |frame| {
            frames.push(frame.clone());
            answer.as_mut().and_then(|answer| answer(frame))
        })
    }

    /// Sends the system prompt and the task.
    fn open(&mut self) -> Value {
        let initial = vec![system(SYSTEM), user(&task())];
        self.sent = initial.clone();
        self.prepare("messages", &initial)
    }

    fn prepare(&mut self, key: &str, messages: &[Value]) -> Value {
        let mut params = json!({"session_id": self.session, key: messages});
        if let Some(config) = &self.config {
            params["config"] = config.clone();
        }
        let result = self.call("context.prepare", params);
        assert_eq!(
            result["reconciliation"]["session_messages"].as_u64(),
            Some(self.sent.len() as u64)
        );
        for report in actions(&result, "compacted") {
            self.compactions.push((report.clone(), result.clone()));
        }
        let failed = actions(&result, "compaction_failed");
        assert!(failed.is_empty(), "a compaction failed: {failed:?}");
        self.last = result.clone();
        result
    }

    fn push(&mut self, message: Value) -> Value {
        self.sent.push(message.clone());
        self.prepare("append", &[message])
    }

    fn push_next(&mut self) -> Value {
        if self.queue.is_empty() {
            self.queue
                .extend(agent_step(Format::Openai, &AGENT_LOOP, self.next_step));
            self.next_step += 1;
        }
        let message = self.queue.pop_front().unwrap();
        self.push(message)
    }

    /// Pushes messages until `count` compactions happened (stopping right after the last).
    fn until_compactions(&mut self, count: usize) {
        for _ in 0..300 {
            if self.compactions.len() >= count {
                return;
            }
            self.push_next();
        }
        panic!("only {} compactions after 300 messages", self.compactions.len());
    }

    /// Pushes the rest of the current step, so the history ends on a whole turn.
    fn finish_step(&mut self) {
        while let Some(message) = self.queue.pop_front() {
            self.push(message);
        }
    }

    fn inspect(&mut self) -> Value {
        let session = self.session.clone();
        self.call("context.inspect", json!({"session_id": session}))
    }

    /// The report of compaction `i` and the `compact_summary` right after it.
    fn compaction(&self, i: usize) -> (&Value, &Value) {
        let (report, result) = &self.compactions[i];
        (report, &result["compact_summary"])
    }

    /// Frames the daemon sent with `method`.
    fn frames_of(&self, method: &str) -> Vec<&Value> {
        self.frames.iter().filter(|f| f["method"] == method).collect()
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// A summary without its path guide, which names archive lines that differ between sessions.
fn without_archive(summary: &Value) -> Value {
    let mut summary = summary.clone();
    summary.as_object_mut().unwrap().remove("archive");
    summary
}

/// The `compact_summary` the extractive summariser writes at the first compaction of the
/// same conversation (same window), for comparison with a fallback.
fn extractive_reference() -> Value {
    let mut chat = Chat::start(Some(window()), &[]);
    chat.open();
    chat.until_compactions(1);
    let (report, summary) = chat.compaction(0);
    assert_eq!(report["summarizer"], "extractive");
    without_archive(summary)
}

/// `summary` has every list and its rendering every section.
fn assert_valid_summary(summary: &Value, text: &str) {
    for key in SUMMARY_LISTS {
        assert!(summary[key].is_array(), "compact_summary.{key} missing: {summary}");
    }
    for key in ["files_read", "files_modified", "commands", "errors", "notes"] {
        assert!(
            summary["critical_context"][key].is_array(),
            "compact_summary.critical_context.{key} missing: {summary}"
        );
    }
    assert!(
        !strings(&summary["goal"]).is_empty() || !summary["requests"].as_array().is_none_or(Vec::is_empty),
        "a summary without a goal: {summary}"
    );
    for section in SECTIONS {
        assert!(
            text.lines().any(|l| l == section),
            "the summary message lacks {section}:\n{text}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Workspace files
// ---------------------------------------------------------------------------------------------

/// Every message sent is recoverable byte for byte (see [`checks::assert_nothing_lost`]),
/// each compaction archived exactly its messages, and none is left pending in the session log.
fn assert_nothing_lost(chat: &mut Chat) {
    let ws = chat.dir.path().to_path_buf();
    let archived = checks::assert_nothing_lost(
        &mut chat.daemon,
        &ws,
        &chat.session,
        Format::Openai,
        &chat.sent,
        &chat.last,
    );
    for (report, _) in &chat.compactions {
        let lines = archived.values().filter(|l| l["compaction_id"] == report["id"]).count();
        assert_eq!(
            lines as u64,
            n(&report["messages"]),
            "archive lines of compaction {report}"
        );
    }
    assert_log_has_no_pending_compaction(&ws, &chat.session);
}

// ---------------------------------------------------------------------------------------------
// 1. The request the model gets
// ---------------------------------------------------------------------------------------------

/// The whole configuration through `SATCHEL_` variables, the log at its most verbose level
/// (trace, which includes debug) into a file.
#[test]
fn the_request_has_the_model_prompts_budget_key_and_headers_and_the_key_is_never_logged() {
    let server = FakeLlm::start(vec![]);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let url = server.base_url();
    let env = [
        ("SATCHEL_LOG", "trace"),
        ("SATCHEL_SUMMARIZER", "openai"),
        ("SATCHEL_LLM_BASE_URL", url.as_str()),
        ("SATCHEL_LLM_MODEL", MODEL),
        ("SATCHEL_LLM_API_KEY_ENV", API_KEY_ENV),
        ("SATCHEL_LLM_MAX_OUTPUT_TOKENS", "777"),
        ("SATCHEL_LLM_TEMPERATURE", "0.3"),
        ("SATCHEL_LLM_TIMEOUT_SECS", "10"),
        ("SATCHEL_LLM_EXTRA_HEADERS", r#"{"X-Test-Org": "org-42"}"#),
        ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
        ("SATCHEL_SUMMARY_MAX_TOKENS", "800"),
        ("SATCHEL_TOKENIZER", "estimate"),
    ];
    let mut chat = Chat::start_logging(None, &env, Some(&log));
    let init = chat.call("initialize", json!({"client_info": {"name": "llm-test"}}));
    assert_eq!(init["config"]["summarizer"], "openai");
    assert_eq!(init["config"]["llm_api_key_env"], API_KEY_ENV);
    assert!(!init.to_string().contains(API_KEY), "initialize shows the key: {init}");
    chat.open();
    chat.until_compactions(1);
    let (report, _) = chat.compaction(0);
    assert_eq!(report["summarizer"], format!("openai:{MODEL}"));

    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one request for one small compaction");
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test-secret")
    );
    assert_eq!(request.headers.get("x-test-org").map(String::as_str), Some("org-42"));
    assert!(
        request.headers["content-type"].starts_with("application/json"),
        "{:?}",
        request.headers
    );
    let body = &request.body;
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["max_tokens"], 777, "max_tokens is llm_max_output_tokens");
    assert!((body["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-9, "{body}");
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user"]);
    assert!(
        messages[0]["content"].as_str().unwrap().contains("compaction"),
        "{}",
        messages[0]
    );
    let prompt = request.user_prompt();
    assert!(prompt.starts_with("# conversation\n"), "{prompt}");
    for section in SECTIONS {
        assert!(
            prompt.lines().any(|l| l == section),
            "the prompt lacks {section}:\n{prompt}"
        );
    }
    assert!(
        !prompt.contains("# previous-summary"),
        "a first compaction has no previous summary"
    );
    assert!(!prompt.contains("# extra-instruction"));
    assert!(prompt.contains("800"), "the prompt states the summary budget");
    // The compacted span is in the conversation, each block cut short: no whole tool output.
    assert!(prompt.contains(FIRST_COMMAND), "{prompt}");
    assert!(prompt.contains("[tool_result] bash:"), "{prompt}");
    assert!(prompt.contains("chars omitted]"), "long outputs are cut: {prompt}");
    assert!(!prompt.contains(&tool_output(0, AGENT_LOOP.check_bytes, FIRST_FILE).replace('\n', " ")));

    let frames = serde_json::to_string(&chat.frames).unwrap();
    assert!(!chat.last.to_string().contains(API_KEY) && !frames.contains(API_KEY));
    let workspace = chat.dir.path().to_path_buf();
    chat.daemon.shutdown();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("DEBUG") && log.contains("TRACE"),
        "the log was captured at trace level:\n{log}"
    );
    assert!(!log.contains(API_KEY), "the API key is in the log:\n{log}");
    for file in files_under(&workspace) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes.windows(API_KEY.len()).any(|w| w == API_KEY.as_bytes()),
            "the API key is in {}",
            file.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The model's summary
// ---------------------------------------------------------------------------------------------

#[test]
fn the_model_summary_is_used_and_code_keeps_the_exact_identifiers() {
    let reference = extractive_reference();
    let exact = &reference["critical_context"];
    assert!(
        strings(&exact["commands"]).iter().any(|c| c == FIRST_COMMAND) && !strings(&exact["errors"]).is_empty(),
        "the extractive pass finds the span's identifiers: {exact}"
    );
    let server = FakeLlm::start(vec![Reply::Ok(MODEL_REPLY.into())]);
    let mut chat = Chat::start(Some(openai_config(&server, json!({}))), &[]);
    chat.open();
    chat.until_compactions(1);
    assert_eq!(server.count(), 1);
    let (report, summary) = chat.compaction(0);
    let (report, summary) = (report.clone(), summary.clone());
    assert_eq!(report["summarizer"], "openai:cheap-model");
    assert_eq!(strings(&summary["goal"]), [MODEL_GOAL]);
    assert_eq!(strings(&summary["in_progress"]), ["Fixing the type errors"]);
    // The reply names no path nor command; every one the extractive pass found is there.
    let ctx = &summary["critical_context"];
    assert!(strings(&ctx["commands"]).iter().any(|c| c == FIRST_COMMAND), "{ctx}");
    for key in ["files_read", "files_modified", "commands", "errors"] {
        let got = strings(&ctx[key]);
        for item in strings(&reference["critical_context"][key]) {
            assert!(got.contains(&item), "critical_context.{key} lost {item:?}: {ctx}");
        }
    }
    let text = summary_text(&chat.last).expect("a summary message");
    assert!(text.contains(MODEL_GOAL) && text.contains(FIRST_COMMAND), "{text}");
    assert_valid_summary(&summary, &text);
    let inspect = chat.inspect();
    assert_eq!(inspect["compactions"][0]["summarizer"], "openai:cheap-model");
    assert_eq!(inspect["summary"]["goal"][0], MODEL_GOAL);

    // The memory hook runs after model summaries too.
    let date = &report["at"].as_str().unwrap()[..10];
    let memory = std::fs::read_to_string(chat.dir.path().join(format!("memory/{date}.md"))).unwrap();
    assert!(
        memory.contains(MODEL_GOAL) && memory.contains("`llm-session`"),
        "{memory}"
    );
}

#[test]
fn the_second_compaction_sends_the_first_summary_to_update() {
    let server = FakeLlm::start(vec![]);
    let mut chat = Chat::start(Some(openai_config(&server, json!({}))), &[]);
    chat.open();
    chat.until_compactions(2);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one request per compaction");
    let (first, second) = (requests[0].user_prompt(), requests[1].user_prompt());
    assert!(!first.contains("# previous-summary") && first.contains("Create a structured summary"));
    assert!(
        second.contains("PRESERVE all existing information"),
        "the update task: {second}"
    );
    let previous = second
        .split("# previous-summary\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n# Task\n").next())
        .unwrap_or_else(|| panic!("no # previous-summary before the task:\n{second}"));
    let (_, first_summary) = chat.compaction(0);
    assert_eq!(strings(&first_summary["goal"]), [numbered_goal(1)]);
    for key in ["goal", "done", "next_steps"] {
        for item in strings(&first_summary[key]) {
            assert!(previous.contains(&item), "previous summary lacks {item:?}:\n{previous}");
        }
    }
    // What code added to the first summary is passed on as well.
    assert!(previous.contains(FIRST_COMMAND), "{previous}");
    assert!(
        !previous.contains("Archive"),
        "the path guide is satchel's business:\n{previous}"
    );

    let (report, summary) = chat.compaction(1);
    assert_eq!(report["summarizer"], "openai:cheap-model");
    assert_eq!(strings(&summary["goal"]), [numbered_goal(2)]);
    assert_eq!(summary["archive"].as_array().unwrap().len(), 2);
}

#[test]
fn context_compact_sends_its_instruction_to_the_model() {
    const INSTRUCTION: &str = "Keep only the decisions about the lexer.";
    let server = FakeLlm::start(vec![]);
    let mut chat = Chat::start(Some(openai_config(&server, json!({}))), &[]);
    chat.open();
    for _ in 0..4 {
        chat.push_next();
    }
    assert!(chat.compactions.is_empty() && server.count() == 0);
    let config = chat.config.clone();
    let result = chat.call(
        "context.compact",
        json!({"session_id": chat.session, "instruction": INSTRUCTION, "config": config}),
    );
    assert!(n(&result["compacted"]) > 0, "{result}");
    assert_eq!(result["compaction"]["summarizer"], "openai:cheap-model");
    assert_eq!(result["compaction"]["manual"], true);
    assert_eq!(result["summary"]["instruction"], INSTRUCTION);
    assert_eq!(strings(&result["summary"]["goal"]), [numbered_goal(1)]);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let prompt = requests[0].user_prompt();
    assert!(
        prompt.ends_with(&format!("\n\n# extra-instruction\n{INSTRUCTION}")),
        "{prompt}"
    );
}

#[test]
fn chinese_prompts_keep_the_english_headings() {
    let server = FakeLlm::start(vec![]);
    let config = openai_config(&server, json!({"summary_language": "zh"}));
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    for _ in 0..4 {
        chat.push_next();
    }
    let config = chat.config.clone();
    let result = chat.call("context.compact", json!({"session_id": chat.session, "config": config}));
    assert_eq!(result["compaction"]["summarizer"], "openai:cheap-model");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("上下文压缩助手"), "{system}");
    let prompt = requests[0].user_prompt();
    assert!(
        prompt.starts_with("# conversation\n") && prompt.contains("# 任务"),
        "{prompt}"
    );
    for section in SECTIONS {
        assert!(
            prompt.lines().any(|l| l == section),
            "the prompt lacks {section}:\n{prompt}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Staged summarisation
// ---------------------------------------------------------------------------------------------

#[test]
fn a_span_over_the_input_budget_is_summarised_in_stages_with_progress() {
    let server = FakeLlm::start(vec![]);
    let budget = 1_000;
    let config = openai_config(
        &server,
        json!({"llm_input_budget_tokens": budget, "llm_max_output_tokens": 100}),
    );
    let mut chat = Chat::start(Some(config), &[]);
    // An LSP client taking work-done progress, accepting the token it is asked to create.
    chat.answer = Some(Box::new(|frame| {
        (frame["method"] == "window/workDoneProgress/create")
            .then(|| json!({"jsonrpc": "2.0", "id": frame["id"], "result": null}))
    }));
    chat.call(
        "initialize",
        json!({"capabilities": {"window": {"workDoneProgress": true}}}),
    );
    chat.open();
    chat.until_compactions(1);
    let requests = server.requests();
    let stages = requests.len();
    assert!(stages >= 3, "only {stages} requests for a span of several budgets");
    for (i, request) in requests.iter().enumerate() {
        let prompt = request.user_prompt();
        assert_eq!(request.body["max_tokens"], 100);
        // The estimate counts a token per 4 bytes: each input stays within the budget.
        let system = request.body["messages"][0]["content"].as_str().unwrap();
        let tokens = (system.len() + prompt.len()) / 4;
        assert!(
            tokens <= budget,
            "request {} is {tokens} tokens, budget {budget}",
            i + 1
        );
        if i == 0 {
            assert!(!prompt.contains("# previous-summary"), "{prompt}");
        } else {
            let carried = format!("# previous-summary\n## Goal\n\n- {}", numbered_goal(i));
            assert!(
                prompt.contains(&carried),
                "stage {} lacks stage {i}'s summary:\n{prompt}",
                i + 1
            );
        }
    }
    // Every message of the span was sent in some stage, each exactly once.
    let (report, summary) = chat.compaction(0);
    let span: BTreeMap<usize, Value> = archived(chat.dir.path(), &chat.session)
        .into_iter()
        .filter(|(_, line)| line["compaction_id"] == report["id"])
        .map(|(index, line)| (index, line["message"].clone()))
        .collect();
    assert_eq!(span.len() as u64, n(&report["messages"]));
    for (index, message) in &span {
        // Texts short enough to be sent whole (the tool outputs are cut, by design).
        let Some(text) = message["content"]
            .as_str()
            .filter(|c| c.len() < 100 && message["role"] != "tool")
        else {
            continue;
        };
        let sent_in = requests
            .iter()
            .filter(|r| {
                let prompt = r.user_prompt();
                let conversation = prompt.split("\n\n# previous-summary\n").next().unwrap();
                conversation.lines().any(|l| l == text)
            })
            .count();
        assert_eq!(sent_in, 1, "message {index} ({text:?}) is in {sent_in} stages");
    }
    assert_eq!(report["summarizer"], "openai:cheap-model");
    assert_eq!(
        strings(&summary["goal"]),
        [numbered_goal(stages)],
        "the last stage wins"
    );

    let created = chat.frames_of("window/workDoneProgress/create");
    assert_eq!(created.len(), 1, "one token for the compaction: {created:?}");
    let token = &created[0]["params"]["token"];
    let progress = chat.frames_of("$/progress");
    // begin, a report per stage, the last report at 100 %, end.
    assert_eq!(progress.len(), stages + 3, "{progress:?}");
    for frame in &progress {
        assert!(frame.get("id").is_none(), "a notification: {frame}");
        assert_eq!(&frame["params"]["token"], token);
    }
    assert_eq!(progress[0]["params"]["value"]["kind"], "begin");
    assert_eq!(progress[0]["params"]["value"]["title"], "Compacting llm-session");
    for (i, frame) in progress[1..=stages].iter().enumerate() {
        let value = &frame["params"]["value"];
        assert_eq!(value["kind"], "report");
        assert_eq!(value["message"], format!("summarising stage {} of {stages}", i + 1));
        assert_eq!(n(&value["percentage"]) as usize, 100 * i / stages);
    }
    assert_eq!(progress[stages + 1]["params"]["value"]["percentage"], 100);
    assert_eq!(progress[stages + 2]["params"]["value"]["kind"], "end");
}

// ---------------------------------------------------------------------------------------------
// 4. Failures
// ---------------------------------------------------------------------------------------------

/// Scripted `first` then `second` (then a good summary that must not be asked for): the
/// compaction happens with the extractive summary, after exactly one retry, and says why.
fn falls_back(first: Reply, second: Reply, timeout_secs: f64, reason: &str) {
    let reference = extractive_reference();
    let server = FakeLlm::start(vec![first, second, Reply::Numbered]);
    let config = openai_config(&server, json!({"llm_timeout_secs": timeout_secs}));
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    chat.until_compactions(1);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one attempt and one retry");
    assert_eq!(requests[0].body, requests[1].body, "the retry sends the same request");
    let (report, summary) = chat.compaction(0);
    let backend = report["summarizer"].as_str().unwrap().to_owned();
    assert!(
        backend.starts_with("extractive (fallback: ") && backend.contains(reason),
        "summarizer {backend:?}, expected the reason {reason:?}"
    );
    assert!(!backend.contains(API_KEY));
    assert_eq!(without_archive(summary), reference, "the summary is the extractive one");
    let text = summary_text(&chat.last).expect("a summary message");
    assert_valid_summary(summary, &text);
    let inspect = chat.inspect();
    assert_eq!(inspect["compactions"][0]["summarizer"], backend.as_str());
    assert_nothing_lost(&mut chat);
}

#[test]
fn two_timeouts_fall_back_to_the_extractive_summary() {
    let started = Instant::now();
    falls_back(Reply::Slow(10_000), Reply::Slow(10_000), 0.5, "timed out");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the 10 s replies were waited for: the timeout is not honoured"
    );
}

#[test]
fn two_http_500s_fall_back_to_the_extractive_summary() {
    falls_back(Reply::Status500, Reply::Status500, 10.0, "HTTP 500");
}

#[test]
fn two_malformed_bodies_fall_back_to_the_extractive_summary() {
    falls_back(Reply::Malformed, Reply::Malformed, 10.0, "malformed response");
}

#[test]
fn two_empty_replies_fall_back_to_the_extractive_summary() {
    falls_back(Reply::Empty, Reply::Empty, 10.0, "empty reply");
}

#[test]
fn two_replies_without_sections_fall_back_to_the_extractive_summary() {
    falls_back(Reply::NoSections, Reply::NoSections, 10.0, "no ## heading");
}

#[test]
fn an_unreachable_endpoint_falls_back_to_the_extractive_summary() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = window();
    merge(
        &mut config,
        json!({"summarizer": "openai", "llm_base_url": format!("http://127.0.0.1:{port}/v1"), "llm_timeout_secs": 5}),
    );
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    chat.until_compactions(1);
    let (report, _) = chat.compaction(0);
    assert_eq!(
        report["summarizer"],
        "extractive (fallback: completion failed: could not connect)"
    );
}

/// One failure, then a good reply: the model's summary, after exactly two requests.
fn retried(failure: Reply, timeout_secs: f64) {
    let server = FakeLlm::start(vec![failure]);
    let config = openai_config(&server, json!({"llm_timeout_secs": timeout_secs}));
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    chat.until_compactions(1);
    assert_eq!(server.count(), 2);
    let (report, summary) = chat.compaction(0);
    assert_eq!(report["summarizer"], "openai:cheap-model");
    assert_eq!(strings(&summary["goal"]), [numbered_goal(2)]);
}

#[test]
fn one_http_500_is_retried_and_the_model_summary_used() {
    retried(Reply::Status500, 10.0);
}

#[test]
fn one_timeout_is_retried_and_the_model_summary_used() {
    retried(Reply::Slow(5_000), 1.0);
}

#[test]
fn one_reply_without_sections_is_retried_and_the_model_summary_used() {
    retried(Reply::NoSections, 10.0);
}

/// The acceptance: a model failing every way in turn (slow, 500, not JSON, empty, no
/// sections, then once a good summary) across several compactions loses nothing, and every
/// compaction ends with a valid summary that names the backend that wrote it.
#[test]
fn a_model_failing_every_way_in_turn_never_loses_a_message() {
    let server = FakeLlm::cycling(vec![
        Reply::Slow(3_000),
        Reply::Status500,
        Reply::Malformed,
        Reply::Empty,
        Reply::NoSections,
        Reply::Numbered,
    ]);
    let config = openai_config(&server, json!({"llm_timeout_secs": 1.0}));
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    chat.until_compactions(6);
    chat.finish_step();
    assert!(
        server.count() >= 6,
        "the script went round: {} requests",
        server.count()
    );

    let mut backends = BTreeSet::new();
    let archived = archived(chat.dir.path(), &chat.session);
    let history = chat.inspect()["compactions"].clone();
    assert_eq!(history.as_array().unwrap().len(), chat.compactions.len());
    for (i, (report, result)) in chat.compactions.iter().enumerate() {
        let backend = report["summarizer"].as_str().unwrap();
        assert!(
            backend == "openai:cheap-model" || backend.starts_with("extractive (fallback: "),
            "compaction {i}: {backend}"
        );
        assert_eq!(history[i]["summarizer"], backend, "context.inspect agrees");
        backends.insert(backend.split(':').next().unwrap().to_owned());
        let summary = &result["compact_summary"];
        let text = summary_text(result).unwrap_or_else(|| panic!("compaction {i} left no summary message"));
        assert_valid_summary(summary, &text);
        assert_eq!(
            summary["archive"].as_array().unwrap().len(),
            i + 1,
            "the path guide grows"
        );
        // Whatever wrote the summary, the shell commands of the span it replaced are in it verbatim.
        let commands = strings(&summary["critical_context"]["commands"]);
        let span = archived.values().filter(|l| l["compaction_id"] == report["id"]);
        for call in span.flat_map(|l| l["message"]["tool_calls"].as_array().cloned().unwrap_or_default()) {
            let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            if let Some(command) = args["command"].as_str() {
                assert!(
                    commands.iter().any(|c| c == command),
                    "compaction {i} ({backend}) lost {command:?}: {summary}"
                );
            }
        }
    }
    assert_eq!(
        backends,
        BTreeSet::from(["extractive (fallback".to_owned(), "openai".to_owned()]),
        "both fallbacks and model summaries happened"
    );
    assert_nothing_lost(&mut chat);
}

// ---------------------------------------------------------------------------------------------
// 5. The memory hook
// ---------------------------------------------------------------------------------------------

#[test]
fn a_compaction_appends_to_the_days_memory_log_unless_disabled() {
    let mut chat = Chat::start(Some(window()), &[]);
    chat.open();
    chat.until_compactions(1);
    let (report, summary) = chat.compaction(0);
    assert!(
        strings(&summary["constraints"]).iter().any(|c| c.contains(CONSTRAINT)),
        "{summary}"
    );
    let date = &report["at"].as_str().unwrap()[..10];
    let path = chat.dir.path().join(format!("memory/{date}.md"));
    let memory = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(memory.contains("`llm-session`"), "{memory}");
    assert!(
        memory.contains(CONSTRAINT),
        "the user's constraint in their words:\n{memory}"
    );

    let mut config = window();
    merge(&mut config, json!({"memory_enabled": false}));
    let mut chat = Chat::start(Some(config), &[]);
    chat.open();
    chat.until_compactions(1);
    let memory = chat.dir.path().join("memory");
    assert!(
        !memory.exists() || files_under(&memory).is_empty(),
        "memory written while disabled"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. The client backend
// ---------------------------------------------------------------------------------------------

const CLIENT_GOAL: &str = "Get the parser building (written by the client's model)";

fn client_config() -> Value {
    let mut config = window();
    merge(
        &mut config,
        json!({"summarizer": "client", "llm_max_output_tokens": 555, "llm_timeout_secs": 10}),
    );
    config
}

/// A chat whose client declared (or not) that it runs models, answering `summarizer.complete`
/// with `answer(params)`: `Ok(text)` or `Err((code, message))`.
fn client_chat(declare: bool, answer: fn(&Value) -> Result<String, (i64, &'static str)>) -> Chat {
    let mut chat = Chat::start(Some(client_config()), &[]);
    chat.answer = Some(Box::new(move |frame| {
        if frame["method"] != "summarizer.complete" {
            return None;
        }
        let id = frame["id"].clone();
        Some(match answer(&frame["params"]) {
            Ok(text) => json!({"jsonrpc": "2.0", "id": id, "result": {"text": text}}),
            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        })
    }));
    let capabilities = if declare {
        json!({"summarizer_complete": true})
    } else {
        json!({})
    };
    chat.call("initialize", json!({"capabilities": capabilities}));
    chat.open();
    chat
}

#[test]
fn the_client_runs_the_model_when_it_declared_it_can() {
    let mut chat = client_chat(true, |_| {
        Ok(format!(
            "## Goal\n- {CLIENT_GOAL}\n## Progress\n### Done\n- [x] Read the build log"
        ))
    });
    chat.until_compactions(1);
    let requests = chat.frames_of("summarizer.complete");
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = requests[0];
    assert!(
        request["id"].as_str().is_some_and(|id| id.starts_with("satchel-")),
        "{request}"
    );
    let params = &request["params"];
    assert_eq!(params["max_tokens"], 555, "max_tokens is llm_max_output_tokens");
    let messages = params["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user"]);
    let prompt = messages[1]["content"].as_str().unwrap();
    assert!(
        prompt.starts_with("# conversation\n") && prompt.contains(FIRST_COMMAND),
        "{prompt}"
    );
    for section in SECTIONS {
        assert!(prompt.lines().any(|l| l == section), "the prompt lacks {section}");
    }

    let (report, summary) = chat.compaction(0);
    assert_eq!(report["summarizer"], "client");
    assert_eq!(strings(&summary["goal"]), [CLIENT_GOAL]);
    assert_eq!(strings(&summary["done"]), ["Read the build log"]);
    assert!(
        strings(&summary["critical_context"]["commands"])
            .iter()
            .any(|c| c == FIRST_COMMAND)
    );
    assert_eq!(chat.inspect()["compactions"][0]["summarizer"], "client");
    assert!(
        chat.frames_of("$/progress").is_empty(),
        "no progress for a client that did not declare window.workDoneProgress"
    );
}

#[test]
fn a_client_error_is_retried_once_then_falls_back() {
    let reference = extractive_reference();
    let mut chat = client_chat(true, |_| Err((-32001, "model unavailable")));
    chat.until_compactions(1);
    assert_eq!(
        chat.frames_of("summarizer.complete").len(),
        2,
        "one attempt and one retry"
    );
    let (report, summary) = chat.compaction(0);
    let backend = report["summarizer"].as_str().unwrap().to_owned();
    assert!(
        backend.starts_with("extractive (fallback: ") && backend.contains("model unavailable"),
        "{backend}"
    );
    assert_eq!(without_archive(summary), reference);
    assert_eq!(chat.inspect()["compactions"][0]["summarizer"], backend.as_str());
}

#[test]
fn a_client_that_did_not_declare_the_capability_is_never_asked() {
    let reference = extractive_reference();
    let mut chat = client_chat(false, |_| panic!("summarizer.complete sent to a client that cannot"));
    chat.until_compactions(1);
    assert!(chat.frames_of("summarizer.complete").is_empty());
    let (report, summary) = chat.compaction(0);
    assert_eq!(
        report["summarizer"],
        "extractive (fallback: the client did not declare summarizer_complete)"
    );
    assert_eq!(without_archive(summary), reference);
}
