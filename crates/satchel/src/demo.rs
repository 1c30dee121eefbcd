//! `satchel demo`: the newcomer's first look. It spawns a real `satchel serve`, replays the
//! bundled example conversation through `context.prepare` one message at a time, and prints
//! what satchel did — the same JSON-RPC an editor plugin speaks, with nothing to install.
#![allow(
    clippy::print_stdout,
    reason = "the demo's report is for a human at a terminal, not the protocol channel"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// The example conversation (synthetic; regenerate with `examples/make_conversation.py`).
const CONVERSATION: &str = include_str!("../../../examples/conversation.openai.json");

/// A minimal line-delimited JSON-RPC client over a child's stdio.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Client {
    fn spawn(workspace: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--workspace".as_ref(), workspace.as_os_str(), "serve".as_ref()])
            .env("SATCHEL_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawning satchel serve")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        Ok(Client {
            child,
            stdin,
            stdout,
            next_id: 1,
        })
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{request}")?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("satchel exited before answering {method}");
        }
        let mut reply: Value = serde_json::from_str(&line)?;
        if let Some(error) = reply.get("error") {
            bail!("{method} failed: {error}");
        }
        Ok(reply["result"].take())
    }

    fn close(mut self) -> anyhow::Result<()> {
        drop(self.stdin);
        let status = self.child.wait()?;
        if !status.success() {
            bail!("satchel serve exited with {status}");
        }
        Ok(())
    }
}

/// Runs the demo against a workspace (a fresh temporary one unless `--workspace` was given).
pub fn run(workspace: &Path) -> anyhow::Result<()> {
    let conversation: Value = serde_json::from_str(CONVERSATION)?;
    let messages = conversation["messages"]
        .as_array()
        .context("example has no messages")?
        .clone();
    let session = format!("demo-{}", uuid::Uuid::new_v4().simple());

    let mut client = Client::spawn(workspace)?;
    let init = client.call("initialize", json!({}))?;
    println!(
        "satchel {} (protocol {}) — workspace {}",
        init["server_version"].as_str().unwrap_or("?"),
        init["protocol_version"].as_str().unwrap_or("?"),
        init["workspace"].as_str().unwrap_or("?")
    );
    let sent_bytes: usize = messages.iter().map(|m| m.to_string().len()).sum();
    println!(
        "\nReplaying the bundled conversation ({} messages, {} KB) through context.prepare, one message at a time:",
        messages.len(),
        sent_bytes / 1000
    );

    let mut last = Value::Null;
    for (i, message) in messages.iter().enumerate() {
        let params = if i == 0 {
            json!({"session_id": session, "messages": [message]})
        } else {
            json!({"session_id": session, "append": [message]})
        };
        last = client.call("context.prepare", params)?;
        for action in last["actions"].as_array().into_iter().flatten() {
            describe(action);
        }
    }

    let returned = last["messages"].as_array().context("no messages returned")?;
    let returned_bytes: usize = returned.iter().map(|m| m.to_string().len()).sum();
    println!(
        "\nRequest-ready: {} messages, {} KB (sent {} KB), {} tokens of {} ({}).",
        returned.len(),
        returned_bytes / 1000,
        sent_bytes / 1000,
        last["tokens"]["total"],
        last["tokens"]["limit"],
        last["tokens"]["tokenizer"].as_str().unwrap_or("?"),
    );

    show_read_back(&mut client, &messages, returned)?;
    client.close()?;

    // A restart loses nothing: a new daemon recognises the whole conversation.
    let mut client = Client::spawn(workspace)?;
    let again = client.call("context.prepare", json!({"session_id": session, "messages": messages}))?;
    println!(
        "\nRestarted satchel and resent all {} messages: {} recognised, {} processed again, identical output: {}.",
        messages.len(),
        again["reconciliation"]["reused"],
        again["reconciliation"]["appended"],
        if again["messages"] == last["messages"] {
            "yes"
        } else {
            "NO"
        }
    );
    show_compaction(&mut client, &messages)?;
    client.close()?;
    Ok(())
}

/// Shows an aged tool result (message 3) and gets its omitted part back with `context.read`.
fn show_read_back(client: &mut Client, messages: &[Value], returned: &[Value]) -> anyhow::Result<()> {
    // Show an aged tool result, and get its omitted part back with context.read.
    let original = messages[3]["content"].as_str().context("message 3 is a tool result")?;
    let excerpt = returned[3]["content"].as_str().context("returned message 3")?;
    let notice_at = excerpt.find("<<<TRUNCATED>>>").context("message 3 was not truncated")?;
    println!(
        "\nMessage 3 (a {} KB test log, now old) is returned as an excerpt; its notice reads:",
        original.len() / 1000
    );
    for line in excerpt[notice_at..].lines().take_while(|l| *l != "<<<TAIL>>>") {
        println!("    {line}");
    }
    let tail_at = excerpt.find("<<<TAIL>>>\n").map(|i| i + "<<<TAIL>>>\n".len());
    if let Some(tail) = tail_at.map(|i| &excerpt[i..]) {
        println!("  and it keeps the end of the log, where the error is:");
        for line in tail.lines().filter(|l| l.contains("panicked") || l.contains("FAILED.")) {
            println!("    {line}");
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
    println!(
        "\ncontext.read {path} from where the excerpt stops gives back the rest: reconstructed {} bytes, identical to the original: {}",
        rebuilt.len(),
        if rebuilt == original { "yes" } else { "NO" }
    );
    Ok(())
}

fn describe(action: &Value) {
    let index = &action["index"];
    match action["kind"].as_str() {
        Some("offloaded") => println!(
            "  message {index}: {} bytes / {} lines saved to {}{}",
            action["total_bytes"],
            action["total_lines"],
            action["file"].as_str().unwrap_or("?"),
            if action["newly_written"] == true {
                ""
            } else {
                " (already stored)"
            }
        ),
        Some("truncated") => println!(
            "  message {index}: {} phase, keeps {} of {} bytes",
            action["phase"].as_str().unwrap_or("?"),
            action["kept_bytes"],
            action["total_bytes"]
        ),
        _ => {}
    }
}

/// The number that follows `prefix` in a notice.
fn number_after(text: &str, prefix: &str) -> Option<usize> {
    let start = text.find(prefix)? + prefix.len();
    text[start..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The offload file a notice names (`file_path="..."`).
fn offload_path(excerpt: &str) -> Option<String> {
    let start = excerpt.find("file_path=\"")? + "file_path=\"".len();
    let end = excerpt[start..].find('"')?;
    Some(excerpt[start..start + end].to_owned())
}

/// Replays the conversation in a small window so the context check compacts older turns.
fn show_compaction(client: &mut Client, messages: &[Value]) -> anyhow::Result<()> {
    let session = format!("demo-small-{}", uuid::Uuid::new_v4().simple());
    let config = json!({"max_input_length": 4096, "summary_max_tokens": 800});
    println!("\nThe same conversation in a 4,096-token window (compaction at 80 %, keeping 10 % of recent turns):");
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
            println!(
                "  after message {i}: compacted {} messages, {} -> {} tokens, archived to {} lines {}-{}",
                action["messages"],
                action["tokens_before"],
                action["tokens_after"],
                action["archive"]["file"].as_str().unwrap_or("?"),
                action["archive"]["start_line"],
                action["archive"]["end_line"],
            );
        }
    }
    println!(
        "Final request: {} messages, {} tokens of {} (summary {}).",
        last["messages"].as_array().map_or(0, Vec::len),
        last["tokens"]["total"],
        last["tokens"]["limit"],
        last["tokens"]["summary"],
    );
    let summary = last["messages"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .find_map(|m| m["content"].as_str().filter(|c| c.starts_with("# Summary")))
        })
        .context("no summary message")?;
    println!("Its first message is the summary; an excerpt:");
    for line in summary.lines().filter(|l| !l.is_empty()).take(24) {
        println!("    {line}");
    }
    Ok(())
}
