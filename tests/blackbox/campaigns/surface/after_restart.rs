//! What the kill -9 campaign checks of the calls beyond `context.prepare` after each restart:
//! the memory files on disk, the pins and purges `context.inspect` lists, the candidate store,
//! and the temp files of the writes a kill interrupted. A call whose reply the kill took may
//! have landed or not (what landed becomes acknowledged), never half.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::super::{Answer, Client, Conn, KillTally, clip, count};
use super::{append_rel, pin_keys, write_rel};

/// After a restart: the client's memory files, pins and purges against what it was told.
/// `inspect` is the session's `context.inspect` after the restart.
pub(in crate::campaigns) fn check_session(workspace: &Path, c: &mut Client, inspect: &Value, t: &mut KillTally) {
    check_appends(workspace, c, t);
    check_write(workspace, c, t);
    check_pins(c, inspect, t);
    check_purges(c, inspect, t);
    if let Some(rejected) = inspect["rejected_candidates"].as_array().filter(|r| !r.is_empty()) {
        t.problem(format!(
            "context.inspect of {} lists rejected candidates: {rejected:?}",
            c.session
        ));
    }
}

fn check_appends(workspace: &Path, c: &mut Client, t: &mut KillTally) {
    let rel = append_rel(c);
    let text = fs::read_to_string(workspace.join(&rel)).unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        t.problem(format!(
            "{rel} ends with a torn line: {}",
            clip(text.lines().last().unwrap_or_default(), 120)
        ));
    }
    let s = &mut c.surface;
    let lines: Vec<&str> = text.lines().collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &lines {
        *seen.entry(line).or_default() += 1;
    }
    for line in &lines {
        if !s.appended.iter().any(|a| a == line) && !s.appending.iter().any(|a| a == line) {
            t.problem(format!(
                "{rel} holds a line no append sent (torn?): {}",
                clip(line, 120)
            ));
        }
    }
    for (line, times) in &seen {
        if *times > 1 {
            t.duplicated += times - 1;
            t.problem(format!("{rel} holds a line {times} times: {}", clip(line, 120)));
        }
    }
    for line in &s.appended {
        if !seen.contains_key(line.as_str()) {
            t.lost += 1;
            t.problem(format!("{rel} lost an acknowledged append: {}", clip(line, 120)));
        }
    }
    let acked_order: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| s.appended.iter().any(|a| a == l))
        .collect();
    let appended: Vec<&str> = s.appended.iter().map(String::as_str).collect();
    if acked_order != appended && seen.values().all(|&n| n == 1) && appended.len() == acked_order.len() {
        t.problem(format!("{rel} holds the acknowledged appends out of order"));
    }
    t.shared.counts.landed_unacknowledged += lines.iter().filter(|l| s.appending.iter().any(|a| a == *l)).count();
    s.appended = lines.iter().map(|l| (*l).to_owned()).collect();
    s.appending.clear();
}

fn check_write(workspace: &Path, c: &mut Client, t: &mut KillTally) {
    let rel = write_rel(c);
    let on_disk = fs::read_to_string(workspace.join(&rel)).ok();
    let s = &mut c.surface;
    let landed = on_disk.as_ref().is_some_and(|d| s.writing.contains(d));
    if on_disk != s.written && !landed {
        t.problem(format!(
            "{rel} is neither the acknowledged write nor a later one: {:?} (acknowledged {:?})",
            on_disk.as_deref().map(|d| clip(d, 80)),
            s.written.as_deref().map(|d| clip(d, 80))
        ));
        if s.written.is_some() && on_disk.is_none() {
            t.lost += 1;
        }
    }
    if landed && on_disk != s.written {
        t.shared.counts.landed_unacknowledged += 1;
    }
    s.written = on_disk;
    s.writing.clear();
}

fn check_pins(c: &mut Client, inspect: &Value, t: &mut KillTally) {
    let listed = inspect["pins"].as_array().cloned().unwrap_or_default();
    let s = &mut c.surface;
    let (now, known) = (pin_keys(&listed), pin_keys(&s.pins));
    if s.pins_unsure {
        // A pin or unpin in flight may have landed: every other acknowledged pin stays.
        let removed = known.iter().filter(|k| !now.contains(k)).count();
        let added = now.iter().filter(|k| !known.contains(k)).count();
        if removed + added > 1 {
            t.problem(format!(
                "{}: pins {now:?} after one unacknowledged pin call, {known:?} acknowledged",
                c.session
            ));
        }
        t.shared.counts.landed_unacknowledged += removed + added;
    } else if now != known {
        t.lost += known.iter().filter(|k| !now.contains(k)).count();
        t.problem(format!(
            "{}: context.inspect lists pins {now:?}, the acknowledged calls left {known:?}",
            c.session
        ));
    }
    s.pins = listed;
    s.pins_unsure = false;
}

fn check_purges(c: &mut Client, inspect: &Value, t: &mut KillTally) {
    let s = &mut c.surface;
    for offloaded in inspect["offloaded"].as_array().map_or(&[][..], Vec::as_slice) {
        let id = offloaded["id"].as_str().unwrap_or_default();
        let purged = offloaded["purged"] == true;
        if s.purged.contains(id) && !purged {
            t.lost += 1;
            t.problem(format!("{}: the acknowledged purge of {id} is gone", c.session));
        }
        if purged && !s.purged.contains(id) {
            if s.purging.contains(id) {
                t.shared.counts.landed_unacknowledged += 1;
                s.purged.insert(id.to_owned());
            } else {
                t.problem(format!("{}: {id} is purged, and no purge of it was sent", c.session));
            }
        }
    }
    s.purging.clear();
}

/// After a restart: the candidate store holds every acknowledged observation and loads with
/// no rejected line.
pub(in crate::campaigns) fn check_candidates(conn: &mut Conn, t: &mut KillTally) {
    let listed = match conn.call("candidates.list", json!({}), t) {
        Answer::Done(listed) => listed,
        Answer::Failed(error) => return t.problem(format!("candidates.list failed: {error}")),
        Answer::Missing => return,
    };
    if let Some(rejected) = listed["rejected"].as_array().filter(|r| !r.is_empty()) {
        t.problem(format!("the candidate store has rejected lines: {rejected:?}"));
    }
    let stored: BTreeMap<String, u64> = listed["candidates"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_owned(),
                count(&c["observations"]) as u64,
            )
        })
        .collect();
    let shared = &mut t.shared;
    let mut lost = Vec::new();
    for (id, &acked) in &shared.observed {
        match stored.get(id) {
            Some(&n) if n >= acked => {}
            other => lost.push(format!("{id}: {acked} observations acknowledged, {other:?} stored")),
        }
    }
    let acked: u64 = shared.observed.values().sum();
    let held: u64 = stored.values().sum();
    let phantom = held > acked + shared.observing;
    shared.counts.landed_unacknowledged += held.saturating_sub(acked) as usize;
    let observing = shared.observing;
    shared.observed = stored;
    shared.observing = 0;
    t.lost += lost.len();
    for what in lost {
        t.problem(format!("candidates.list lost an acknowledged observation: {what}"));
    }
    if phantom {
        t.problem(format!(
            "candidates.list holds {held} observations, {acked} acknowledged and {observing} unknown"
        ));
    }
}

/// Temp files of satchel's atomic writes (`.<name>.<32 hex>.tmp`) under `dir`, following no link.
pub(in crate::campaigns) fn atomic_temps(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if kind.is_dir() {
            found.extend(atomic_temps(&entry.path()));
        } else if kind.is_file() && is_atomic_temp(&name) {
            found.push(entry.path());
        }
    }
    found
}

fn is_atomic_temp(name: &str) -> bool {
    let Some(stem) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    stem.rsplit_once('.')
        .is_some_and(|(_, hex)| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// After a kill: the temp files it left, to be gone once the next daemon has started.
pub(in crate::campaigns) fn note_temps_after_kill(workspace: &Path, t: &mut KillTally) {
    let temps = atomic_temps(workspace);
    t.shared.counts.temps_after_kills += temps.len();
    t.shared.temps_left = temps;
}

/// After a restart (and its first replies): the temp files the kill left are gone.
pub(in crate::campaigns) fn check_temps_removed(t: &mut KillTally) {
    let left: Vec<PathBuf> = std::mem::take(&mut t.shared.temps_left)
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    if !left.is_empty() {
        t.problem(format!("start-up left the temp files of interrupted writes: {left:?}"));
    }
}
