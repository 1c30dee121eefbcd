//! `satchel demo`: the newcomer's first look. It spawns a real `satchel serve`, replays the
//! bundled example conversation through `context.prepare` one message at a time, and prints
//! what satchel did — the same JSON-RPC an editor plugin speaks, with nothing to install.
//!
//! Its report goes to stdout (it is for a human at a terminal, not the protocol channel),
//! through writes that return their errors: a reader that goes away (`satchel demo | head`)
//! ends the demo quietly. Unless `--workspace` is given it runs in a fresh temporary workspace,
//! removed afterwards, and its daemons read none of the user's configuration (no `SATCHEL_`
//! variable, no user config file), whatever `$SATCHEL_HOME` says.

use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::client::Client;

/// The example conversation (synthetic; regenerate with `examples/make_conversation.py`).
const CONVERSATION: &str = include_str!("../../../../examples/conversation.openai.json");

/// Where the demo runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A workspace the user named with `--workspace`: its daemons see the user's environment.
    Given,
    /// A fresh temporary workspace: its daemons see no `SATCHEL_` or CoPaw variable and no
    /// user configuration file.
    Fresh,
}

/// A fresh temporary directory, removed with everything in it when dropped.
struct TempWorkspace(PathBuf);

impl Drop for TempWorkspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the demo in a fresh temporary workspace, removed afterwards.
pub fn run_isolated() -> anyhow::Result<()> {
    let dir = TempWorkspace(std::env::temp_dir().join(format!("satchel-demo-{}", uuid::Uuid::new_v4().simple())));
    satchel_storage::perms::create_private_dir_all(&dir.0)
        .with_context(|| format!("creating the demo workspace {}", dir.0.display()))?;
    run(&dir.0, Isolation::Fresh)
}

/// A `satchel serve` the demo spawned, and the client speaking to it over the child's stdio.
/// Dropped before [`close`](Served::close) (the demo stopped early), it kills the child.
struct Served {
    child: Child,
    /// Taken by `close`: dropping it closes the child's stdin, which ends `serve`.
    client: Option<Client>,
    closed: bool,
}

impl Drop for Served {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The variables a fresh demo's daemons must not see: satchel's own and CoPaw's, which
/// would configure them.
fn configuring(var: &OsString) -> bool {
    let var = var.to_string_lossy();
    var.starts_with("SATCHEL_")
        || satchel_protocol::aliases::ENV_ALIASES
            .iter()
            .any(|alias| alias.var == var)
}

impl Served {
    fn spawn(workspace: &Path, isolation: Isolation) -> anyhow::Result<Self> {
        let mut command = Command::new(std::env::current_exe()?);
        command.args(["--workspace".as_ref(), workspace.as_os_str(), "serve".as_ref()]);
        if isolation == Isolation::Fresh {
            for (var, _) in std::env::vars_os().filter(|(var, _)| configuring(var)) {
                command.env_remove(var);
            }
            // No user configuration file: the XDG directory is one that does not exist.
            command.env("XDG_CONFIG_HOME", workspace.join("no-user-config"));
        }
        let mut child = command
            .env("SATCHEL_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawning satchel serve")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        Ok(Served {
            child,
            client: Some(Client::new(stdin, stdout)),
            closed: false,
        })
    }

    /// The client of the running `serve`.
    fn client(&mut self) -> anyhow::Result<&mut Client> {
        self.client.as_mut().context("satchel serve's stdin is closed")
    }

    fn close(mut self) -> anyhow::Result<()> {
        drop(self.client.take());
        let status = self.child.wait()?;
        self.closed = true;
        if !status.success() {
            bail!("satchel serve exited with {status}");
        }
        Ok(())
    }
}

/// Runs the demo against a workspace (a fresh temporary one unless `--workspace` was given).
pub fn run(workspace: &Path, isolation: Isolation) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let out = &mut out;
    let conversation: Value = serde_json::from_str(CONVERSATION)?;
    let messages = conversation["messages"]
        .as_array()
        .context("example has no messages")?
        .clone();
    let session = format!("demo-{}", uuid::Uuid::new_v4().simple());

    let mut served = Served::spawn(workspace, isolation)?;
    let client = served.client()?;
    let init = client.call("initialize", json!({}))?;
    writeln!(
        out,
        "satchel {} (protocol {}) — workspace {}",
        init["server_version"].as_str().unwrap_or("?"),
        init["protocol_version"].as_str().unwrap_or("?"),
        init["workspace"].as_str().unwrap_or("?")
    )?;
    let sent_bytes: usize = messages.iter().map(|m| m.to_string().len()).sum();
    writeln!(
        out,
        "\nReplaying the bundled conversation ({} messages, {} KB) through context.prepare, one message at a time:",
        messages.len(),
        sent_bytes / 1000
    )?;

    let mut last = Value::Null;
    for (i, message) in messages.iter().enumerate() {
        let params = if i == 0 {
            json!({"session_id": session, "messages": [message]})
        } else {
            json!({"session_id": session, "append": [message]})
        };
        last = client.call("context.prepare", params)?;
        for action in last["actions"].as_array().into_iter().flatten() {
            describe(out, action)?;
        }
    }

    let returned = last["messages"].as_array().context("no messages returned")?;
    let returned_bytes: usize = returned.iter().map(|m| m.to_string().len()).sum();
    writeln!(
        out,
        "\nRequest-ready: {} messages, {} KB (sent {} KB), {} tokens of {} ({}).",
        returned.len(),
        returned_bytes / 1000,
        sent_bytes / 1000,
        last["tokens"]["total"],
        last["tokens"]["limit"],
        last["tokens"]["tokenizer"].as_str().unwrap_or("?"),
    )?;

    show_read_back(out, client, &messages, returned)?;
    served.close()?;

    // A restart loses nothing: a new daemon recognises the whole conversation.
    let mut served = Served::spawn(workspace, isolation)?;
    let client = served.client()?;
    let again = client.call("context.prepare", json!({"session_id": session, "messages": messages}))?;
    writeln!(
        out,
        "\nRestarted satchel and resent all {} messages: {} recognised, {} processed again, identical output: {}.",
        messages.len(),
        again["reconciliation"]["reused"],
        again["reconciliation"]["appended"],
        if again["messages"] == last["messages"] {
            "yes"
        } else {
            "NO"
        }
    )?;
    show_compaction(out, client, &messages)?;
    served.close()?;
    if isolation == Isolation::Fresh {
        writeln!(
            out,
            "\n(The demo ran in a temporary workspace, now removed; pass --workspace DIR to keep one.)"
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Shows an aged tool result (message 3) and gets its omitted part back with `context.read`.
fn show_read_back(
    out: &mut impl Write,
    client: &mut Client,
    messages: &[Value],
    returned: &[Value],
) -> anyhow::Result<()> {
    // Show an aged tool result, and get its omitted part back with context.read.
    let original = messages[3]["content"].as_str().context("message 3 is a tool result")?;
    let excerpt = returned[3]["content"].as_str().context("returned message 3")?;
    let notice_at = excerpt.find("<<<TRUNCATED>>>").context("message 3 was not truncated")?;
    writeln!(
        out,
        "\nMessage 3 (a {} KB test log, now old) is returned as an excerpt; its notice reads:",
        original.len() / 1000
    )?;
    for line in excerpt[notice_at..].lines().take_while(|l| *l != "<<<TAIL>>>") {
        writeln!(out, "    {line}")?;
    }
    let tail_at = excerpt.find("<<<TAIL>>>\n").map(|i| i + "<<<TAIL>>>\n".len());
    if let Some(tail) = tail_at.map(|i| &excerpt[i..]) {
        writeln!(out, "  and it keeps the end of the log, where the error is:")?;
        for line in tail.lines().filter(|l| l.contains("panicked") || l.contains("FAILED.")) {
            writeln!(out, "    {line}")?;
        }
    }
    let head_bytes: usize = number_after(excerpt, "covers the next ").context("notice states no byte count")?;
    let path = offload_path(excerpt).context("notice names no file")?;
    let mut rebuilt = excerpt[..head_bytes].to_owned();
    let mut next = json!({"path": path, "byte_offset": rebuilt.len()});
    loop {
        let slice = client.call("context.read", next.clone())?;
        rebuilt.push_str(slice["content"].as_str().unwrap_or(""));
        match slice["next_byte_offset"].as_u64() {
            Some(offset) if !slice["eof"].as_bool().unwrap_or(true) => {
                next = json!({"path": path, "byte_offset": offset})
            }
            _ => break,
        }
    }
    writeln!(
        out,
        "\ncontext.read {path} from where the excerpt stops gives back the rest: reconstructed {} bytes, identical to the original: {}",
        rebuilt.len(),
        if rebuilt == original { "yes" } else { "NO" }
    )?;
    Ok(())
}

fn describe(out: &mut impl Write, action: &Value) -> std::io::Result<()> {
    let index = &action["index"];
    match action["kind"].as_str() {
        Some("offloaded") => writeln!(
            out,
            "  message {index}: {} bytes / {} lines saved to {}{}",
            action["total_bytes"],
            action["total_lines"],
            action["file"].as_str().unwrap_or("?"),
            if action["newly_written"] == true {
                ""
            } else {
                " (already stored)"
            }
        )?,
        Some("truncated") => writeln!(
            out,
            "  message {index}: {} phase, keeps {} of {} bytes",
            action["phase"].as_str().unwrap_or("?"),
            action["kept_bytes"],
            action["total_bytes"]
        )?,
        _ => {}
    }
    Ok(())
}

/// The number that follows `prefix` in a notice.
fn number_after(text: &str, prefix: &str) -> Option<usize> {
    let start = text.find(prefix)? + prefix.len();
    text[start..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The workspace-relative offload file a notice gives `context.read` (`{"path": "..."}`); the
/// `read_file` form (`file_path="..."`) may be absolute.
fn offload_path(excerpt: &str) -> Option<String> {
    let start = excerpt.find("{\"path\": \"")? + "{\"path\": \"".len();
    let end = excerpt[start..].find('"')?;
    Some(excerpt[start..start + end].to_owned())
}

/// Replays the conversation in a small window so the context check compacts older turns.
fn show_compaction(out: &mut impl Write, client: &mut Client, messages: &[Value]) -> anyhow::Result<()> {
    let session = format!("demo-small-{}", uuid::Uuid::new_v4().simple());
    let config = json!({"max_input_length": 4096, "summary_max_tokens": 800});
    writeln!(
        out,
        "\nThe same conversation in a 4,096-token window (compaction at 80 %, keeping 10 % of recent turns):"
    )?;
    let mut last = Value::Null;
    for (i, message) in messages.iter().enumerate() {
        let key = if i == 0 { "messages" } else { "append" };
        last = client.call(
            "context.prepare",
            json!({"session_id": session, key: [message], "config": config}),
        )?;
        for action in last["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "compacted")
        {
            writeln!(
                out,
                "  after message {i}: compacted {} messages, {} -> {} tokens, archived to {} lines {}-{}",
                action["messages"],
                action["tokens_before"],
                action["tokens_after"],
                action["archive"]["file"].as_str().unwrap_or("?"),
                action["archive"]["start_line"],
                action["archive"]["end_line"],
            )?;
        }
    }
    writeln!(
        out,
        "Final request: {} messages, {} tokens of {} (summary {}).",
        last["messages"].as_array().map_or(0, Vec::len),
        last["tokens"]["total"],
        last["tokens"]["limit"],
        last["tokens"]["summary"],
    )?;
    let summary = last["messages"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .find_map(|m| m["content"].as_str().filter(|c| c.starts_with("# Summary")))
        })
        .context("no summary message")?;
    writeln!(out, "Its first message is the summary; an excerpt:")?;
    for line in summary.lines().filter(|l| !l.is_empty()).take(24) {
        writeln!(out, "    {line}")?;
    }
    Ok(())
}
