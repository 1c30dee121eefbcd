//! A full disk or an I/O error under the calls beyond `context.prepare`: memory files
//! (`memory.write`, `memory.append`), the candidate store (`candidates.observe`, `feedback`,
//! `remove`, `evaluate`) and the session-log records of `context.pin`, `unpin`, `purge` and
//! `expand`. An error reply means the call changed nothing: every file of the workspace the
//! same bytes (no temp file left, the store and the logs as they were), `context.inspect`,
//! `candidates.list` and `memory.get` the same, and the next request the same as a control
//! workspace's that never saw the call. The one success a failure may turn into is the
//! issue's: `memory.append` with a warning that the index is behind, its text in the file
//! once. Retried once the disk works, each call succeeds, once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::{FAST, SESSION, SMALL_WINDOW, STORAGE_FAILURE, compactions, fill, small_disk, start, turn};
use crate::support::checks::error_code;
use crate::support::{Daemon, files_under};

const NOTES: &str = "memory/notes.md";
/// A small window, so the session compacts, and no log: the failures are the expected outcome.
const ENV: [(&str, &str); 4] = [SMALL_WINDOW[0], SMALL_WINDOW[1], FAST, ("SATCHEL_LOG", "off")];
const LOG: &str = "memory/log.md";

/// Every file of the workspace but the derived index and the daemon's run files, with its
/// bytes: what a failed call must leave as it found it.
fn disk(ws: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files_under(ws)
        .into_iter()
        .filter(|p| {
            let rel = p.strip_prefix(ws).unwrap();
            !rel.starts_with("index") && !rel.starts_with("run")
        })
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.strip_prefix(ws).unwrap().to_owned(), bytes)
        })
        .collect()
}

/// What the daemon shows of the session, the candidates and the memory files (each call's
/// result, or its error).
fn view(d: &mut Daemon) -> Value {
    let mut outcome = |method: &str, params: Value| {
        let reply = d.call_raw(method, params);
        reply.get("result").or(reply.get("error")).cloned().unwrap_or(reply)
    };
    json!({
        "inspect": outcome("context.inspect", json!({"session_id": SESSION})),
        "candidates": outcome("candidates.list", json!({})),
        "notes": outcome("memory.get", json!({"path": NOTES})),
        "log": outcome("memory.get", json!({"path": LOG})),
    })
}

/// The first difference between two snapshots of the disk, for the failure message.
fn first_difference(before: &BTreeMap<PathBuf, Vec<u8>>, after: &BTreeMap<PathBuf, Vec<u8>>) -> String {
    for (path, bytes) in after {
        match before.get(path) {
            None => return format!("{} appeared ({} bytes)", path.display(), bytes.len()),
            Some(old) if old != bytes => {
                return format!(
                    "{} changed: {} bytes, was {}; now ends {:?}",
                    path.display(),
                    bytes.len(),
                    old.len(),
                    String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(80)..])
                );
            }
            Some(_) => {}
        }
    }
    match before.keys().find(|p| !after.contains_key(*p)) {
        Some(path) => format!("{} disappeared", path.display()),
        None => "none".into(),
    }
}

/// A workspace with something for every call to change: a session that compacted (its
/// compaction to expand), with an offloaded result of a live message (to purge) and a pin (to
/// unpin); a memory file written and one appended to; a candidate. Returns the session's
/// messages, the compaction and the result.
fn base(ws: &Path) -> (Vec<Value>, String, String) {
    let mut d = start(ws, "", &ENV);
    let mut messages: Vec<Value> = Vec::new();
    let mut compacted = 0;
    let mut i = 0;
    let result_id = loop {
        assert!(i < 80, "no compaction with a live offloaded result");
        messages.extend(turn(i, true));
        i += 1;
        let result = d.call("context.prepare", json!({"session_id": SESSION, "messages": messages}));
        compacted += compactions(&result);
        let inspect = d.call("context.inspect", json!({"session_id": SESSION}));
        let offloaded = inspect["offloaded"].as_array().cloned().unwrap_or_default();
        // Stop one turn after a compaction, with a result to purge and room before the next.
        if compacted > 0 && compactions(&result) == 0 && !offloaded.is_empty() {
            break offloaded[0]["id"].as_str().unwrap().to_owned();
        }
    };
    let inspect = d.call("context.inspect", json!({"session_id": SESSION}));
    let compaction = inspect["compactions"][0]["id"].as_str().unwrap().to_owned();
    d.call(
        "context.pin",
        json!({"session_id": SESSION, "text": "Never push to main."}),
    );
    d.call(
        "memory.write",
        json!({"path": NOTES, "content": "# Notes\n\n- the first note\n"}),
    );
    d.call(
        "memory.append",
        json!({"path": LOG, "text": "- logged before the faults\n"}),
    );
    d.call(
        "candidates.observe",
        json!({"text": "Run cargo fmt before clippy", "kind": "rule", "session_id": SESSION}),
    );
    d.shutdown();
    (messages, compaction, result_id)
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(status.success(), "cp -a {} {}", from.display(), to.display());
}

/// One call under faults, and where they are injected.
struct Case {
    method: &'static str,
    params: Value,
    points: [&'static str; 2],
}

fn cases(compaction: &str, result_id: &str, candidate: &str) -> Vec<Case> {
    let memory = ["atomic", "atomic-sync"];
    let log = ["append", "append-sync"];
    vec![
        Case {
            method: "memory.write",
            params: json!({"path": NOTES, "content": "# Notes\n\n- rewritten under a fault\n"}),
            points: memory,
        },
        Case {
            method: "memory.append",
            params: json!({"path": LOG, "text": "- appended under a fault\n"}),
            points: ["memory", "memory-sync"],
        },
        Case {
            method: "candidates.observe",
            params: json!({"text": "Prefer rg over grep in scripts", "kind": "preference"}),
            points: memory,
        },
        Case {
            method: "candidates.feedback",
            params: json!({"id": candidate, "outcome": "success"}),
            points: memory,
        },
        Case {
            method: "candidates.remove",
            params: json!({"id": candidate}),
            points: memory,
        },
        Case {
            method: "context.pin",
            params: json!({"session_id": SESSION, "text": "Keep the MSRV at 1.70."}),
            points: log,
        },
        Case {
            method: "context.unpin",
            params: json!({"session_id": SESSION, "pin_id": "p1"}),
            points: log,
        },
        Case {
            method: "context.purge",
            params: json!({"session_id": SESSION, "result_id": result_id}),
            points: log,
        },
        Case {
            method: "context.expand",
            params: json!({"session_id": SESSION, "compaction_id": compaction, "max_tokens": 600}),
            points: log,
        },
    ]
}

/// The parts of a `context.prepare` result a refused call must not change.
fn request_of(result: &Value) -> Value {
    json!({"messages": result["messages"], "system": result["system"], "tokens": result["tokens"]})
}

/// Each call, with a full disk or an I/O error at each of its durable steps (ENOSPC, EIO and a
/// torn write at the write, EIO at the sync): the error changes nothing, on disk or in what
/// the daemon shows, the next request is the control's, and the retry succeeds once.
#[test]
fn a_failed_write_of_memory_candidates_pins_or_expand_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base_ws = dir.path().join("base");
    let (messages, compaction, result_id) = base(&base_ws);
    let env = ENV;
    let prepare = json!({"session_id": SESSION, "messages": messages});
    // What the next request is when nothing happened in between.
    let control_ws = dir.path().join("control");
    copy_dir(&base_ws, &control_ws);
    let mut d = start(&control_ws, "", &env);
    let candidate = d.call("candidates.list", json!({}))["candidates"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let control = request_of(&d.call("context.prepare", prepare.clone()));
    d.shutdown();

    let mut failed = 0;
    for (n, case) in cases(&compaction, &result_id, &candidate).into_iter().enumerate() {
        let faults = [
            format!("{}:enospc", case.points[0]),
            format!("{}:eio", case.points[0]),
            format!("{}:torn", case.points[0]),
            format!("{}:eio", case.points[1]),
        ];
        for (k, fault) in faults.iter().enumerate() {
            let what = format!("{} under {fault}", case.method);
            let ws = dir.path().join(format!("case-{n}-{k}"));
            copy_dir(&base_ws, &ws);
            let mut d = start(&ws, fault, &env);
            let (view_before, disk_before) = (view(&mut d), disk(&ws));
            let reply = d.call_raw(case.method, case.params.clone());
            let warned = reply["result"]["warnings"].as_array().is_some_and(|w| !w.is_empty());
            match reply.get("error") {
                Some(error) => {
                    failed += 1;
                    assert_eq!(error_code(error), STORAGE_FAILURE, "{what}: {reply}");
                    let message = error["message"].as_str().unwrap_or_default();
                    assert!(
                        !message.contains("memory index: memory index"),
                        "{what}: the message repeats its prefix: {message}"
                    );
                    let disk_after = disk(&ws);
                    assert!(
                        disk_after == disk_before,
                        "{what} failed ({message}) but changed the disk: {}",
                        first_difference(&disk_before, &disk_after)
                    );
                    assert_eq!(
                        view(&mut d),
                        view_before,
                        "{what} failed but changed what the daemon shows"
                    );
                }
                None if case.method == "memory.append" && warned => {}
                None => panic!("{what} succeeded although its write failed: {reply}"),
            }
            d.shutdown();

            // The disk works again: the next request is the control's, and the retry lands once.
            let mut d = start(&ws, "", &env);
            if reply.get("error").is_some() {
                let next = request_of(&d.call("context.prepare", prepare.clone()));
                assert!(next == control, "{what}: the next request differs from the control's");
                d.call(case.method, case.params.clone());
            }
            if case.method == "memory.append" {
                let log = d.call("memory.get", json!({"path": LOG}))["text"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert_eq!(log.matches("- appended under a fault\n").count(), 1, "{what}: {log:?}");
            }
            d.shutdown();
            std::fs::remove_dir_all(&ws).unwrap();
        }
    }
    assert!(failed > 0);
}

/// The same calls on a real full disk (a 4 MiB tmpfs filled up): each either fails and
/// changes nothing, or succeeds (an append may fit in the last page of its file; then its
/// text is there once, with a warning when the index could not take it); with space again the
/// failed ones succeed once.
#[test]
fn memory_candidates_and_pins_on_a_full_tmpfs_fail_whole_or_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk_mount) = small_disk(
        dir.path(),
        "memory_candidates_and_pins_on_a_full_tmpfs_fail_whole_or_land_once",
    ) else {
        return;
    };
    let ws = disk_mount.dir.join("ws");
    let filler = disk_mount.dir.join("filler");
    let (messages, compaction, result_id) = base(&ws);
    let mut d = start(&ws, "", &ENV);
    let candidate = d.call("candidates.list", json!({}))["candidates"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    d.call("context.prepare", json!({"session_id": SESSION, "messages": messages}));
    fill(&filler);
    let mut failed = Vec::new();
    // Not the removal: the empty store it writes fits on a full disk, and the retry of a
    // feedback on the candidate would then fail for want of it.
    let cases = cases(&compaction, &result_id, &candidate);
    for case in cases.into_iter().filter(|c| c.method != "candidates.remove") {
        let (view_before, disk_before) = (view(&mut d), disk(&ws));
        let reply = d.call_raw(case.method, case.params.clone());
        match reply.get("error") {
            Some(error) => {
                assert_eq!(error_code(error), STORAGE_FAILURE, "{}: {reply}", case.method);
                let disk_after = disk(&ws);
                assert!(
                    disk_after == disk_before,
                    "{} failed on the full disk but changed it: {}",
                    case.method,
                    first_difference(&disk_before, &disk_after)
                );
                let view_after = view(&mut d);
                // A failed write drops the session from memory, to be reloaded from its log:
                // what it shows of its durable state is the same.
                let durable = |v: &Value| {
                    let i = &v["inspect"];
                    json!([
                        i["messages"],
                        i["archived_messages"],
                        i["pins"],
                        i["compactions"],
                        i["summary"],
                        v["candidates"],
                        v["notes"],
                        v["log"],
                        i["offloaded"].as_array().map(|o| o
                            .iter()
                            .map(|r| json!([r["id"], r["purged"], r["pinned"]]))
                            .collect::<Vec<_>>())
                    ])
                };
                assert_eq!(
                    durable(&view_after),
                    durable(&view_before),
                    "{} failed on the full disk but changed what the daemon shows",
                    case.method
                );
                failed.push(case);
            }
            None => {
                if case.method == "memory.append" {
                    let log = d.call("memory.get", json!({"path": LOG}))["text"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    assert_eq!(log.matches("- appended under a fault\n").count(), 1, "{log:?}");
                }
            }
        }
    }
    assert!(
        failed.iter().any(|c| c.method == "memory.write") && failed.iter().any(|c| c.method == "candidates.observe"),
        "atomic writes fit on the full disk?"
    );
    std::fs::remove_file(&filler).unwrap();
    for case in &failed {
        d.call(case.method, case.params.clone());
    }
    let log = d.call("memory.get", json!({"path": LOG}))["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(log.matches("- appended under a fault\n").count(), 1, "{log:?}");
    d.shutdown();
    drop(disk_mount);
}
