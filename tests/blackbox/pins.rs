//! Black-box tests of pins and purges: what a user keeps verbatim survives ten compactions and
//! a restart, a pinned result is never cut, a purged result is a stub in later requests while
//! `context.read` still returns its bytes, and result ids stay the same across restarts.

use serde_json::{Value, json};

use crate::support::builders::{AgentLoop, SYSTEM, agent_step, system, tool_output, user};
use crate::support::checks::error_code;
use crate::support::trajectories::{Format, check_request_shape};
use crate::support::{CONTEXT_READ_PATH, Daemon, actions, quoted_after, reconstruct};

const SESSION: &str = "pins";
const SMALL_WINDOW: [(&str, &str); 2] = [
    ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
    ("SATCHEL_SUMMARY_MAX_TOKENS", "400"),
];
const AGENT_LOOP: AgentLoop = AgentLoop {
    check_bytes: 1_200,
    test_bytes: 2_000,
    runs_tests: |s| s % 4 == 2,
    reply: |s| format!("Module {s} builds now."),
};
const TASK: &str = "Fix the failing build of the parser crate. Keep the MSRV at 1.70.";
const RULE: &str = "Never push to main: open a pull request, and run `cargo deny check` before it.";

fn prepare(daemon: &mut Daemon, messages: &[Value]) -> Value {
    daemon.call(
        "context.prepare",
        json!({"session_id": SESSION, "messages": messages, "system": SYSTEM}),
    )
}

fn request_text(result: &Value) -> String {
    serde_json::to_string(&result["messages"]).unwrap()
}

fn check_pins_survive(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
    let mut messages = vec![system(SYSTEM), user(TASK)];
    if format == Format::Anthropic {
        messages.remove(0);
    }
    let task_index = messages.len() - 1;
    prepare(&mut daemon, &messages);
    let pinned = daemon.call(
        "context.pin",
        json!({"session_id": SESSION, "text": RULE, "label": "release rule"}),
    );
    assert_eq!(pinned["pin_id"], "p1");
    let pinned = daemon.call(
        "context.pin",
        json!({"session_id": SESSION, "message_index": task_index}),
    );
    assert_eq!(pinned["pin_id"], "p2");
    assert_eq!(pinned["pins"][1]["in_block"], false, "the task is still live: {pinned}");

    let rule = serde_json::to_string(RULE).unwrap();
    let task = serde_json::to_string(TASK).unwrap();
    let (rule, task) = (rule.trim_matches('"'), task.trim_matches('"'));
    let mut compactions = 0;
    let mut step = 0;
    while compactions < 10 {
        assert!(step < 400, "only {compactions} compactions in {step} steps");
        messages.extend(agent_step(format, &AGENT_LOOP, step));
        step += 1;
        if step == 40 {
            // A restart in the middle: the pins come back from the log and the archive.
            daemon.shutdown();
            daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
        }
        let result = prepare(&mut daemon, &messages);
        compactions += actions(&result, "compacted").len();
        let text = request_text(&result);
        assert!(text.contains(rule), "step {step}: the pinned text is gone");
        assert!(text.contains(task), "step {step}: the pinned message is gone");
        if compactions > 0 {
            // Verbatim in the pinned block, not only quoted by the summary's goal.
            let block = serde_json::to_string(&format!("### p2: message {task_index} (user)\n\n{TASK}\n")).unwrap();
            assert!(
                text.contains(block.trim_matches('"')),
                "step {step}: the task is not in the pinned block"
            );
        }
        assert!(result["tokens"]["pinned"].as_u64().unwrap() > 0, "{}", result["tokens"]);
        let sent = result["messages"].as_array().unwrap();
        check_request_shape(sent, format).unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert!(
            result["tokens"]["total"].as_u64().unwrap() <= 4096,
            "{}",
            result["tokens"]
        );
    }
    let inspected = daemon.call("context.inspect", json!({"session_id": SESSION}));
    let pins = inspected["pins"].as_array().unwrap();
    assert_eq!(pins.len(), 2, "{inspected}");
    assert_eq!(pins[0]["kind"], "text");
    assert_eq!(pins[1]["kind"], "message");
    assert_eq!(
        pins[1]["in_block"], true,
        "compacted by now: re-emitted from the archive"
    );

    // Unpinned, the text leaves the requests.
    daemon.call("context.unpin", json!({"session_id": SESSION, "pin_id": "p1"}));
    let result = prepare(&mut daemon, &messages);
    assert!(!request_text(&result).contains(rule));
    assert!(request_text(&result).contains(task));
    let reply = daemon.call_raw("context.unpin", json!({"session_id": SESSION, "pin_id": "p1"}));
    assert_eq!(error_code(&reply["error"]), -32602, "{reply}");
    daemon.shutdown();
}

#[test]
fn pins_survive_ten_compactions_and_a_restart_openai() {
    check_pins_survive(Format::Openai);
}

#[test]
fn pins_survive_ten_compactions_and_a_restart_anthropic() {
    check_pins_survive(Format::Anthropic);
}

/// A conversation with one 60 KB build log at index 3, offloaded and cut in its notice.
fn with_big_log() -> (Vec<Value>, String) {
    let log = tool_output(7, 60_000, "crates/parser/src/lib.rs");
    let messages = vec![
        system(SYSTEM),
        user(TASK),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\": \"cargo build\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": log}),
        json!({"role": "assistant", "content": "The build fails in lib.rs."}),
        user("Go on."),
    ];
    (messages, log)
}

#[test]
fn a_purged_result_is_a_stub_and_its_id_is_stable_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[]);
    let (messages, log) = with_big_log();
    let first = prepare(&mut daemon, &messages);
    let excerpt = first["messages"][3]["content"].as_str().unwrap().to_owned();
    assert!(
        excerpt.contains("This result's id is r3: `context.pin` keeps it whole"),
        "{excerpt}"
    );
    let file = quoted_after(&excerpt, CONTEXT_READ_PATH).unwrap();

    // The same id after a restart.
    daemon.shutdown();
    let mut daemon = Daemon::start(dir.path(), &[]);
    let inspected = daemon.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(inspected["offloaded"][0]["id"], "r3", "{inspected}");

    let purged = daemon.call("context.purge", json!({"session_id": SESSION, "result_id": "r3"}));
    assert_eq!(purged["file"], file.as_str());
    assert_eq!(purged["total_bytes"], log.len());
    let next = prepare(&mut daemon, &messages);
    let stub = next["messages"][3]["content"].as_str().unwrap();
    assert!(
        stub.starts_with("[satchel: result r3 (") && stub.contains("purged"),
        "{stub}"
    );
    assert!(stub.len() < 300, "one line: {stub}");
    assert!(next["tokens"]["total"].as_u64() < first["tokens"]["total"].as_u64());
    // Still readable in full, and still purged after a restart.
    assert_eq!(reconstruct(&mut daemon, &excerpt), log);
    daemon.shutdown();
    let mut daemon = Daemon::start(dir.path(), &[]);
    let again = prepare(&mut daemon, &messages);
    assert_eq!(again["messages"][3]["content"].as_str().unwrap(), stub);
    let inspected = daemon.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(inspected["offloaded"][0]["purged"], true, "{inspected}");

    // Bad ids are refused by name and the daemon keeps serving.
    for bad in ["r99", "x3", "r3.0"] {
        let reply = daemon.call_raw("context.purge", json!({"session_id": SESSION, "result_id": bad}));
        assert_eq!(error_code(&reply["error"]), -32602, "{bad}: {reply}");
        assert!(
            reply["error"]["message"].as_str().unwrap().contains("result_id"),
            "{reply}"
        );
    }
    daemon.shutdown();
}

#[test]
fn a_result_pinned_by_id_is_never_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[]);
    let (messages, log) = with_big_log();
    let first = prepare(&mut daemon, &messages);
    assert_ne!(first["messages"][3]["content"].as_str().unwrap(), log);
    daemon.call("context.pin", json!({"session_id": SESSION, "result_id": "r3"}));
    let next = prepare(&mut daemon, &messages);
    assert_eq!(next["messages"][3]["content"].as_str().unwrap(), log, "whole");
    let inspected = daemon.call("context.inspect", json!({"session_id": SESSION}));
    assert_eq!(inspected["offloaded"][0]["pinned"], true, "{inspected}");
    assert_eq!(inspected["pins"][0]["result_id"], "r3");

    // After a compaction it is re-emitted whole after the summary.
    let compacted = daemon.call("context.compact", json!({"session_id": SESSION}));
    assert!(compacted["compacted"].as_u64().unwrap() >= 4, "{compacted}");
    let after = prepare(&mut daemon, &messages);
    let preamble = after["messages"][1]["content"].as_str().unwrap();
    assert!(
        preamble.contains("## Pinned (kept verbatim across compactions)"),
        "{preamble}"
    );
    assert!(preamble.contains(&log), "the whole log is in the pinned block");
    daemon.shutdown();
}

/// A result cannot be both pinned (sent whole) and purged (sent as a stub): the second call
/// is refused with what to do instead, and the first one's effect stays.
#[test]
fn pinning_and_purging_the_same_result_is_refused_not_silent() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &[]);
    let (messages, log) = with_big_log();
    prepare(&mut daemon, &messages);
    let pinned = daemon.call("context.pin", json!({"session_id": SESSION, "result_id": "r3"}));
    let pin_id = pinned["pin_id"].as_str().unwrap().to_owned();
    let refused = daemon.call_err("context.purge", json!({"session_id": SESSION, "result_id": "r3"}));
    assert_eq!(error_code(&refused), -32602, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("pinned") && message.contains(&pin_id), "{message}");
    let next = prepare(&mut daemon, &messages);
    assert_eq!(next["messages"][3]["content"].as_str().unwrap(), log, "still whole");

    // The other way round: a purged result cannot be pinned.
    daemon.call("context.unpin", json!({"session_id": SESSION, "pin_id": pin_id}));
    daemon.call("context.purge", json!({"session_id": SESSION, "result_id": "r3"}));
    let refused = daemon.call_err("context.pin", json!({"session_id": SESSION, "result_id": "r3"}));
    assert!(refused["message"].as_str().unwrap().contains("purged"), "{refused}");
    // Nor its message, which would be sent whole but for the stub.
    let refused = daemon.call_err("context.pin", json!({"session_id": SESSION, "message_index": 3}));
    assert!(
        refused["message"].as_str().unwrap().contains("r3 was purged"),
        "{refused}"
    );
    let inspected = daemon.call("context.inspect", json!({"session_id": SESSION}));
    let pins = inspected["pins"].as_array().map_or(0, Vec::len);
    assert_eq!(pins, 0, "no pin listed for a stub: {inspected}");
    daemon.shutdown();
}

/// A pin that cannot fit the window is refused: every later request would be over the limit.
#[test]
fn a_pin_larger_than_the_window_can_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
    let (messages, _) = with_big_log();
    prepare(&mut daemon, &messages);
    let huge = "a finding worth keeping. ".repeat(2_000);
    let refused = daemon.call_err("context.pin", json!({"session_id": SESSION, "text": huge}));
    assert_eq!(error_code(&refused), -32602, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("text"), "{refused}");
    // A whole result the 4,096-token window cannot hold.
    let refused = daemon.call_err("context.pin", json!({"session_id": SESSION, "result_id": "r3"}));
    assert!(
        refused["message"].as_str().unwrap().contains("quarter of its"),
        "{refused}"
    );
    // A text over the protocol's limit is refused whatever the window.
    let big_dir = tempfile::tempdir().unwrap();
    let mut big = Daemon::start(big_dir.path(), &[]);
    prepare(&mut big, &messages);
    let over = "x".repeat(satchel_protocol::MAX_PIN_TEXT_CHARS + 1);
    let refused = big.call_err("context.pin", json!({"session_id": SESSION, "text": over}));
    assert!(
        refused["message"].as_str().unwrap().contains("at most 20000"),
        "{refused}"
    );
    // What fits is pinned, and the requests still fit.
    daemon.call("context.pin", json!({"session_id": SESSION, "text": RULE}));
    let next = prepare(&mut daemon, &messages);
    assert!(next["over_limit"].is_null(), "{}", next["over_limit"]);
    big.shutdown();
    daemon.shutdown();
}
