//! Acceptance check of the foundation: replays every trajectory of the shared development data
//! (`../shared/data/trajectories/` in OpenAI format, `trajectories_anthropic/` in Anthropic
//! format, and the OpenAI ones converted to Responses items as Codex sends them) through
//! `context.prepare`, one message at a time, and checks after every call that
//!
//! * the returned list has one message per message sent, in the same order, with the same
//!   roles, tool-call ids and tool-result ids, and keeps every tool call with its result;
//! * every message is returned unchanged except for tool-result texts replaced by an excerpt
//!   carrying a truncation notice, and (Anthropic) for the blank text blocks the API rejects,
//!   dropped and reported by one `dropped_empty_text` repair each;
//! * every offloaded file holds the exact original bytes, and the excerpt's head followed by
//!   `context.read` from where it stops gives back the original text.
//!
//! Each folder is replayed under several passes: the default configuration; `aceclaw` mode,
//! where every tool result over 400 bytes must also be offloaded as it enters (so that a stub
//! can name its file; the default window is far from the prune trigger); and per-request
//! limits small enough that most tool results are cut (the data's outputs are mostly below
//! 50 KB), down to the smallest the config accepts.
//!
//! The data is not part of the repository; without it the test prints why and passes.
//! `SATCHEL_SHARED_DATA` points at another copy.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::checks::{blank_text_count, blank_texts_dropped};
use crate::support::trajectories::{
    Format, NOTICE_START, Trajectory, as_responses, call_ids, check_pairing, diff_strings, has_tool_call,
    load_shared_data, parse_notice, result_ids, result_text_pointers, role, str_field,
};
use crate::support::{CONTEXT_READ_PATH, Daemon, MARKER, number_after, quoted_after, read_from, reconstruct};

/// Separates the notice from the kept tail.
const TAIL_MARKER: &str = "<<<TAIL>>>";
/// At most this many failures are kept per replay job (the first ones matter).
const MAX_FAILURES: usize = 20;

/// One configuration the trajectories are replayed under.
struct Pass {
    label: &'static str,
    config: Option<Value>,
    /// Every tool-result text longer than this many bytes must be offloaded when it enters
    /// (`aceclaw` mode: `2 × prune_stub_chars`, so that a stub can always name a file).
    offload_over: Option<usize>,
}

#[derive(Default)]
struct Stats {
    files: usize,
    messages: usize,
    prepares: usize,
    /// Excerpts verified (file bytes, notice numbers, head, tail, reconstruction).
    excerpt_checks: usize,
    /// Distinct tool-result texts seen truncated.
    truncated_results: usize,
    /// Of those, checked in the final list.
    final_checks: usize,
    /// Offloaded actions whose file was compared with the original.
    offload_actions: usize,
    /// Distinct offload files in the workspace.
    offload_files: usize,
    /// Truncated actions cross-checked against the returned list.
    truncated_actions: usize,
    /// Excerpts whose kept head itself contains notice-like text (parsed the robust way).
    notice_like_originals: usize,
    /// Sent prefixes that already broke the pairing (a property of the data, not of satchel).
    unpaired_inputs: usize,
    prepare_time: Duration,
    elapsed: Duration,
    failures: Vec<String>,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.files += other.files;
        self.messages += other.messages;
        self.prepares += other.prepares;
        self.excerpt_checks += other.excerpt_checks;
        self.truncated_results += other.truncated_results;
        self.final_checks += other.final_checks;
        self.offload_actions += other.offload_actions;
        self.offload_files += other.offload_files;
        self.truncated_actions += other.truncated_actions;
        self.notice_like_originals += other.notice_like_originals;
        self.unpaired_inputs += other.unpaired_inputs;
        self.prepare_time += other.prepare_time;
        self.failures.extend(other.failures.iter().cloned());
    }

    fn summary(&self) -> String {
        format!(
            "{} files, {} messages, {} prepare calls ({:.1?} waiting on prepare), {} truncated results \
             ({} excerpts verified and reconstructed, {} of them in final lists), {} offload files \
             ({} offloaded actions checked), {} truncated actions checked, {} notice-like originals, \
             {} unpaired input prefixes",
            self.files,
            self.messages,
            self.prepares,
            self.prepare_time,
            self.truncated_results,
            self.excerpt_checks,
            self.final_checks,
            self.offload_files,
            self.offload_actions,
            self.truncated_actions,
            self.notice_like_originals,
            self.unpaired_inputs,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Format knowledge, written independently of satchel's crates.

type Shape = (String, Vec<String>, Vec<String>);

fn shape(message: &Value, format: Format) -> Shape {
    (
        role(message).to_owned(),
        call_ids(message, format),
        result_ids(message, format),
    )
}

// ---------------------------------------------------------------------------------------------
// Comparing a returned message with the one sent.

/// A tool-result text returned as an excerpt.
struct Cut<'a> {
    index: usize,
    pointer: String,
    original: &'a str,
    excerpt: &'a str,
}

/// Checks (a), (b) and (c) of the acceptance criterion on one returned list and returns its
/// excerpts.
fn check_list<'a>(sent: &'a [Value], returned: &'a [Value], format: Format) -> Result<Vec<Cut<'a>>, String> {
    if returned.len() != sent.len() {
        return Err(format!(
            "returned {} messages, {} were sent",
            returned.len(),
            sent.len()
        ));
    }
    let sent_shapes: Vec<Shape> = sent.iter().map(|m| shape(m, format)).collect();
    for (index, m) in returned.iter().enumerate() {
        let got = shape(m, format);
        if got != sent_shapes[index] {
            return Err(format!(
                "message {index}: (role, calls, results) is {got:?}, {:?} was sent",
                sent_shapes[index]
            ));
        }
    }
    if let Err(why) = check_pairing(returned, format) {
        // The shapes are identical, so a list the client sent unpaired comes back unpaired.
        if check_pairing(sent, format).is_ok() {
            return Err(format!("pairing broken in the returned list: {why}"));
        }
    }

    let mut cuts = Vec::new();
    for (index, (s, r)) in sent.iter().zip(returned).enumerate() {
        if s == r {
            continue;
        }
        let mut diffs = Vec::new();
        diff_strings(s, r, &mut String::new(), &mut diffs).map_err(|e| format!("message {index}: {e}"))?;
        let allowed = result_text_pointers(s, format);
        for (pointer, original, excerpt) in diffs {
            if !allowed.contains(&pointer) {
                return Err(format!(
                    "message {index}: {pointer} is not a tool-result text but was changed"
                ));
            }
            if !excerpt.contains(MARKER) {
                return Err(format!(
                    "message {index}: {pointer} was changed without a truncation notice"
                ));
            }
            cuts.push(Cut {
                index,
                pointer,
                original,
                excerpt,
            });
        }
    }
    Ok(cuts)
}

// ---------------------------------------------------------------------------------------------
// Checking one excerpt against the original, the file and `context.read`.

fn line_count(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count() + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

fn verify_excerpt(daemon: &mut Daemon, workspace: &Path, cut: &Cut<'_>, stats: &mut Stats) -> Result<(), String> {
    let (original, excerpt) = (cut.original, cut.excerpt);
    let notice = parse_notice(excerpt, original).ok_or("no notice that follows a head of the original")?;
    if notice.total_bytes != original.len() || notice.total_lines != line_count(original) {
        return Err(format!(
            "notice says {} lines / {} bytes, the original has {} / {}",
            notice.total_lines,
            notice.total_bytes,
            line_count(original),
            original.len()
        ));
    }
    if notice.head_bytes >= original.len() {
        return Err(format!(
            "keeps a head of {} of {} bytes",
            notice.head_bytes,
            original.len()
        ));
    }

    // The continuation the notice offers points right after the head.
    let text = &excerpt[notice.start..];
    let head = &original[..notice.head_bytes];
    let newlines = head.bytes().filter(|&b| b == b'\n').count();
    if head.ends_with('\n') {
        let (end, next) = (
            number_after(text, "bytes (lines 1-"),
            number_after(text, "\"start_line\": "),
        );
        if end != Some(newlines) || next != Some(newlines + 1) {
            return Err(format!(
                "head of {newlines} lines, notice says lines 1-{end:?} then {next:?}"
            ));
        }
    } else if number_after(text, "\"byte_offset\": ") != Some(notice.head_bytes) {
        return Err(format!(
            "head ends mid-line at {} but the notice continues elsewhere",
            notice.head_bytes
        ));
    }

    // The tail, when there is one, is the end of the original.
    let tail_intro = text.find(&format!(", after {TAIL_MARKER}, so the end"));
    match tail_intro {
        Some(at) => {
            let tail_bytes = number_after(&text[..at], "The last ").ok_or("tail without its size")?;
            let tail = original
                .get(original.len() - tail_bytes..)
                .ok_or("tail not on a char boundary")?;
            if !excerpt.ends_with(&format!("\n{TAIL_MARKER}\n{tail}")) {
                return Err(format!(
                    "the excerpt does not end with the last {tail_bytes} bytes of the original"
                ));
            }
            if original.len() - tail_bytes <= notice.head_bytes {
                return Err("head and tail overlap".into());
            }
        }
        None if text.contains(TAIL_MARKER) => return Err("tail marker without its introduction".into()),
        None => {}
    }

    // The file holds the exact original bytes.
    let on_disk = std::fs::read(workspace.join(&notice.path)).map_err(|e| format!("read {}: {e}", notice.path))?;
    if on_disk != original.as_bytes() {
        return Err(format!(
            "{} holds {} bytes that differ from the {}-byte original",
            notice.path,
            on_disk.len(),
            original.len()
        ));
    }

    // Head + context.read gives the original back; through the shared harness when its simple
    // parse (first occurrence of each phrase) finds the same notice.
    let simple = number_after(excerpt, "covers the next ") == Some(notice.head_bytes)
        && quoted_after(excerpt, CONTEXT_READ_PATH).as_deref() == Some(notice.path.as_str());
    let rebuilt = if simple {
        reconstruct(daemon, excerpt)
    } else {
        stats.notice_like_originals += 1;
        read_from(daemon, head, &notice.path)
    };
    if rebuilt != original {
        return Err(format!(
            "head + context.read gives {} bytes that differ from the {}-byte original",
            rebuilt.len(),
            original.len()
        ));
    }
    stats.excerpt_checks += 1;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Replay.

/// Checks what `actions` claims: offloaded files hold the original, truncated texts are cut.
fn check_actions(
    actions: &[Value],
    sent: &[Value],
    returned: &[Value],
    workspace: &Path,
    files: &mut HashSet<String>,
    offloaded: &mut HashSet<(usize, String)>,
    stats: &mut Stats,
) -> Result<HashSet<(usize, String)>, String> {
    let mut truncated = HashSet::new();
    for action in actions {
        if action["kind"] == "repaired" {
            // Checked by `check_repairs`.
            continue;
        }
        let index = action["index"]
            .as_u64()
            .ok_or_else(|| format!("action without index: {action}"))? as usize;
        let pointer = str_field(action, "pointer");
        let file = str_field(action, "file");
        let original = sent
            .get(index)
            .and_then(|m| m.pointer(&pointer))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("action names no sent text: {action}"))?;
        if action["total_bytes"].as_u64() != Some(original.len() as u64) {
            return Err(format!(
                "action states another size than the original's {}: {action}",
                original.len()
            ));
        }
        match action["kind"].as_str() {
            Some("offloaded") => {
                let on_disk = std::fs::read(workspace.join(&file)).map_err(|e| format!("read {file}: {e}"))?;
                if on_disk != original.as_bytes() {
                    return Err(format!("offloaded file {file} differs from the original ({action})"));
                }
                if action["total_lines"].as_u64() != Some(line_count(original) as u64) {
                    return Err(format!("offloaded action states the wrong line count: {action}"));
                }
                files.insert(file);
                offloaded.insert((index, pointer));
                stats.offload_actions += 1;
            }
            Some("truncated") => {
                let shown = returned[index].pointer(&pointer).and_then(Value::as_str).unwrap_or("");
                let names_file = shown.contains(&format!("{CONTEXT_READ_PATH}{}", Value::from(file.as_str())));
                if shown == original || !names_file {
                    return Err(format!(
                        "truncated action for a text not cut into an excerpt of {file}: {action}"
                    ));
                }
                truncated.insert((index, pointer));
                stats.truncated_actions += 1;
            }
            other => return Err(format!("unknown action kind {other:?}: {action}")),
        }
    }
    Ok(truncated)
}

/// Checks the `repaired` actions: the only repair the data needs is dropping the blank text
/// blocks Anthropic rejects, one action per block at its message's index.
fn check_repairs(actions: &[Value], sent: &[Value], format: Format) -> Result<(), String> {
    let mut reported: HashMap<usize, usize> = HashMap::new();
    for action in actions.iter().filter(|a| a["kind"] == "repaired") {
        if action["repair"] != "dropped_empty_text" {
            return Err(format!("unexpected repair of a valid list: {action}"));
        }
        let index = action["index"]
            .as_u64()
            .ok_or_else(|| format!("repair without index: {action}"))? as usize;
        *reported.entry(index).or_default() += 1;
    }
    let blank: HashMap<usize, usize> = sent
        .iter()
        .enumerate()
        .map(|(index, m)| (index, blank_text_count(m, format)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if reported != blank {
        return Err(format!(
            "dropped_empty_text actions per message {reported:?}, blank text blocks sent {blank:?}"
        ));
    }
    Ok(())
}

fn replay(
    daemon: &mut Daemon,
    workspace: &Path,
    t: &Trajectory,
    pass: &Pass,
    files: &mut HashSet<String>,
    stats: &mut Stats,
) -> Result<(), String> {
    let mut previous: Vec<Value> = Vec::new();
    // Excerpts already verified, per (message index, pointer).
    let mut verified: HashMap<(usize, String), String> = HashMap::new();
    // Texts an offloaded action announced, per (message index, pointer).
    let mut offloaded: HashSet<(usize, String)> = HashSet::new();
    let mut saw_call = false;
    // The messages as a request carries them: without the blank text blocks Anthropic rejects.
    let expected: Vec<Value> = t
        .messages
        .iter()
        .map(|m| blank_texts_dropped(m, t.format).unwrap_or_else(|| m.clone()))
        .collect();
    for i in 0..t.messages.len() {
        let sent = &t.messages[..=i];
        let mut params = json!({"session_id": t.session_id});
        params[if i == 0 { "messages" } else { "append" }] = json!([t.messages[i]]);
        if let Some(system) = &t.system {
            params["system"] = system.clone();
        }
        if let Some(config) = &pass.config {
            params["config"] = config.clone();
        }
        let started = Instant::now();
        let reply = daemon.call_raw("context.prepare", params);
        stats.prepare_time += started.elapsed();
        stats.prepares += 1;
        let at = |why: String| format!("after message {i}: {why}");
        if let Some(error) = reply.get("error") {
            return Err(at(format!("context.prepare failed: {error}")));
        }
        let result = reply["result"].clone();
        let returned = result["messages"]
            .as_array()
            .ok_or_else(|| at("no `messages` list".into()))?;

        // (a) one returned message per message sent.
        let reconciliation = &result["reconciliation"];
        if reconciliation["session_messages"] != json!(i + 1) || reconciliation["appended"] != json!(1) {
            return Err(at(format!(
                "reconciliation {reconciliation} after sending {} messages",
                i + 1
            )));
        }
        saw_call |= has_tool_call(&t.messages[i]);
        if saw_call && result["format"] != json!(t.format.wire_name()) {
            return Err(at(format!(
                "format {} for a {:?} trajectory",
                result["format"], t.format
            )));
        }
        if check_pairing(sent, t.format).is_err() {
            stats.unpaired_inputs += 1;
        }

        // (b) and (c).
        let cuts = check_list(&expected[..=i], returned, t.format).map_err(at)?;
        let actions = result["actions"]
            .as_array()
            .ok_or_else(|| at("no `actions` list".into()))?;
        check_repairs(actions, sent, t.format).map_err(at)?;
        let announced = check_actions(actions, sent, returned, workspace, files, &mut offloaded, stats).map_err(at)?;

        // Every excerpt the first time it is returned, and again whenever it changes (it leaves
        // the recent window); a changed excerpt must be announced by a `truncated` action.
        for cut in &cuts {
            let key = (cut.index, cut.pointer.clone());
            if verified.get(&key).is_some_and(|e| e == cut.excerpt) {
                continue;
            }
            let changed = previous
                .get(cut.index)
                .and_then(|m| m.pointer(&cut.pointer))
                .and_then(Value::as_str)
                != Some(cut.excerpt);
            if changed && !announced.contains(&key) {
                return Err(at(format!(
                    "message {} {} became an excerpt without a truncated action",
                    key.0, key.1
                )));
            }
            if !verified.contains_key(&key) {
                stats.truncated_results += 1;
            }
            verify_excerpt(daemon, workspace, cut, stats)
                .map_err(|e| at(format!("message {} {}: {e}", cut.index, cut.pointer)))?;
            verified.insert(key, cut.excerpt.to_owned());
        }
        previous = returned.clone();
    }

    // Every text the pass requires offloaded was, when it entered.
    if let Some(limit) = pass.offload_over {
        for (index, message) in t.messages.iter().enumerate() {
            for pointer in result_text_pointers(message, t.format) {
                let bytes = message.pointer(&pointer).and_then(Value::as_str).map_or(0, str::len);
                if bytes > limit && !offloaded.contains(&(index, pointer.clone())) {
                    return Err(format!(
                        "message {index} {pointer}: a {bytes}-byte tool result was not offloaded (over {limit})"
                    ));
                }
            }
        }
    }

    // The final list, where most results are old: every excerpt once more.
    let cuts = check_list(&expected, &previous, t.format).map_err(|e| format!("final list: {e}"))?;
    for cut in &cuts {
        verify_excerpt(daemon, workspace, cut, stats)
            .map_err(|e| format!("final list, message {} {}: {e}", cut.index, cut.pointer))?;
        stats.final_checks += 1;
    }
    stats.files += 1;
    stats.messages += t.messages.len();
    Ok(())
}

/// Replays one folder under one pass, on a daemon of its own.
fn replay_job(trajectories: &[Trajectory], pass: &Pass) -> Stats {
    let started = Instant::now();
    let workspace = tempfile::tempdir().expect("temp workspace");
    let mut daemon = Daemon::start(workspace.path(), &[]);
    let mut stats = Stats::default();
    let mut files = HashSet::new();
    for t in trajectories {
        if let Err(why) = replay(&mut daemon, workspace.path(), t, pass, &mut files, &mut stats)
            && stats.failures.len() < MAX_FAILURES
        {
            stats
                .failures
                .push(format!("[{} pass] {} ({}): {why}", pass.label, t.name, t.session_id));
        }
    }
    daemon.shutdown();

    // Every file in the offload directory was announced, so none escapes the checks above.
    let dir = workspace.path().join("tool_result");
    let on_disk: HashSet<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| format!("tool_result/{}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    let unannounced: Vec<_> = on_disk.difference(&files).filter(|f| !f.contains(".tmp")).collect();
    if !unannounced.is_empty() {
        stats.failures.push(format!(
            "[{} pass] files never announced by an offloaded action: {unannounced:?}",
            pass.label
        ));
    }
    stats.offload_files = files.len();
    stats.elapsed = started.elapsed();
    stats
}

#[test]
fn replaying_the_shared_trajectories_keeps_pairs_and_loses_no_byte() {
    let started = Instant::now();
    let Some((dir, folders)) = load_shared_data() else {
        return;
    };
    let responses: Vec<Trajectory> = folders[0].1.iter().map(as_responses).collect();
    let folders: Vec<(&str, &[Trajectory])> = folders
        .iter()
        .map(|(name, trajectories)| (*name, &trajectories[..]))
        .chain([("trajectories as Responses items", &responses[..])])
        .collect();

    let passes = [
        Pass {
            label: "default",
            config: None,
            offload_over: None,
        },
        // AceClaw's mode: every result over 2 × prune_stub_chars (400 bytes) is offloaded as it
        // enters; the default window is far from the prune trigger, so nothing else changes.
        Pass {
            label: "aceclaw",
            config: Some(json!({"context_mode": "aceclaw"})),
            offload_over: Some(400),
        },
        Pass {
            label: "forced-offload",
            config: Some(json!({
                "pruning_recent_msg_max_bytes": 2000,
                "pruning_old_msg_max_bytes": 500,
                "markdown_recent_msg_max_bytes": 4000,
                "markdown_old_msg_max_bytes": 1000,
            })),
            offload_over: None,
        },
        // The smallest limits the config accepts, no slack and the largest tail: nearly every
        // result is cut, mostly mid-line, with tails inside CRLF and non-ASCII text.
        Pass {
            label: "minimal",
            config: Some(json!({
                "pruning_recent_msg_max_bytes": 100,
                "pruning_old_msg_max_bytes": 100,
                "markdown_recent_msg_max_bytes": 100,
                "markdown_old_msg_max_bytes": 100,
                "pruning_slack_bytes": 0,
                "pruning_tail_ratio": 0.5,
            })),
            offload_over: None,
        },
    ];

    // One daemon per (folder, pass), all in parallel.
    let results: Vec<(String, Stats)> = std::thread::scope(|scope| {
        let handles: Vec<_> = folders
            .iter()
            .filter(|(_, trajectories)| !trajectories.is_empty())
            .flat_map(|(folder, trajectories)| {
                passes.iter().map(move |pass| {
                    let label = format!("{folder} / {}", pass.label);
                    (label, scope.spawn(move || replay_job(trajectories, pass)))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|(label, h)| (label, h.join().expect("replay job panicked")))
            .collect()
    });

    let mut total = Stats::default();
    for (label, stats) in &results {
        eprintln!("replay [{label}] {:.1?}: {}", stats.elapsed, stats.summary());
        total.add(stats);
    }
    eprintln!(
        "replay total in {:.1?} (jobs in parallel; data at {}): {}",
        started.elapsed(),
        dir.display(),
        total.summary()
    );
    if !total.failures.is_empty() {
        panic!(
            "{} replay failures:\n{}",
            total.failures.len(),
            total.failures.join("\n")
        );
    }
    assert!(
        total.truncated_results > 0,
        "the replay checked no truncated result at all"
    );
    assert!(total.final_checks > 0, "no truncated result in any final list");
}

/// The checkers themselves, on synthetic lists, so a lenient checker cannot pass silently.
#[test]
fn the_checkers_reject_what_they_must() {
    let openai = vec![
        json!({"role": "user", "content": "list files"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "a\nb"}),
        json!({"role": "tool", "tool_call_id": "c2", "content": "c"}),
        json!({"role": "user", "content": "thanks"}),
    ];
    assert_eq!(check_pairing(&openai, Format::Openai), Ok(()));
    assert_eq!(
        check_pairing(&openai[..3], Format::Openai),
        Ok(()),
        "calls may still be open at the end"
    );
    let mut swapped = openai.clone();
    swapped.swap(1, 2);
    assert!(check_pairing(&swapped, Format::Openai).is_err());
    let mut between = openai.clone();
    between.insert(3, json!({"role": "user", "content": "hm"}));
    assert!(check_pairing(&between, Format::Openai).is_err());
    let mut unanswered = openai.clone();
    unanswered.remove(3);
    assert!(check_pairing(&unanswered, Format::Openai).is_err());

    let anthropic = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "go"}]}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]}),
    ];
    assert_eq!(check_pairing(&anthropic, Format::Anthropic), Ok(()));
    let mut late = anthropic.clone();
    late.insert(
        2,
        json!({"role": "user", "content": [{"type": "text", "text": "wait"}]}),
    );
    assert!(check_pairing(&late, Format::Anthropic).is_err());

    // check_list: reordering, a changed non-result field, a result changed without a notice.
    assert_eq!(check_list(&openai, &openai, Format::Openai).map(|c| c.len()), Ok(0));
    assert!(check_list(&openai, &swapped, Format::Openai).is_err());
    assert!(check_list(&openai, &openai[..4], Format::Openai).is_err());
    let mut renamed = openai.clone();
    renamed[1]["tool_calls"][0]["function"]["name"] = json!("sh");
    assert!(check_list(&openai, &renamed, Format::Openai).is_err());
    let mut extra = openai.clone();
    extra[2]["name"] = json!("bash");
    assert!(check_list(&openai, &extra, Format::Openai).is_err());
    let mut silent = openai.clone();
    silent[2]["content"] = json!("a");
    assert!(check_list(&openai, &silent, Format::Openai).is_err());
    let mut cut = openai.clone();
    cut[2]["content"] = json!(format!("a\n{MARKER}\n..."));
    let cuts = check_list(&openai, &cut, Format::Openai).unwrap();
    assert_eq!(
        (cuts.len(), cuts[0].index, cuts[0].pointer.as_str(), cuts[0].original),
        (1, 2, "/content", "a\nb")
    );

    // check_repairs: one dropped_empty_text per blank text block, and no other repair.
    let mut blank = anthropic.clone();
    blank[1]["content"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"type": "text", "text": "\n"}));
    let dropped = json!({"kind": "repaired", "repair": "dropped_empty_text", "index": 1});
    assert_eq!(
        check_repairs(std::slice::from_ref(&dropped), &blank, Format::Anthropic),
        Ok(())
    );
    assert!(check_repairs(&[], &blank, Format::Anthropic).is_err());
    assert!(check_repairs(&[dropped.clone(), dropped.clone()], &blank, Format::Anthropic).is_err());
    assert!(check_repairs(&[dropped], &anthropic, Format::Anthropic).is_err());
    let merged = json!({"kind": "repaired", "repair": "merged_same_role", "index": 1});
    assert!(check_repairs(&[merged], &anthropic, Format::Anthropic).is_err());
    assert!(
        check_list(&anthropic, &blank, Format::Anthropic).is_err(),
        "a blank text block returned where none is expected is a change"
    );

    // parse_notice finds the real notice after an original that quotes one.
    let quoted =
        format!("{NOTICE_START}9 lines in total (9 bytes).\nThis excerpt starts at line 1 and covers the next 3");
    let original = format!("{quoted}\n{}", "x\n".repeat(500));
    let head = &original[..quoted.len() + 1];
    let excerpt = format!(
        "{head}{NOTICE_START}{} lines in total ({} bytes).\nThis excerpt starts at line 1 and covers the next {} \
         bytes (lines 1-3).\nIf the current content is not enough, call `read_file` with \
         file_path=\"/ws/tool_result/f.txt\" start_line=4 to read more, or satchel's `context.read` \
         with {{\"path\": \"tool_result/f.txt\", \"start_line\": 4}}.",
        line_count(&original),
        original.len(),
        head.len()
    );
    let notice = parse_notice(&excerpt, &original).expect("the real notice");
    assert_eq!(
        (notice.head_bytes, notice.start, notice.path.as_str()),
        (head.len(), head.len(), "tool_result/f.txt")
    );
    assert_ne!(
        number_after(&excerpt, "covers the next "),
        Some(head.len()),
        "the harness's simple parse is fooled"
    );
}
