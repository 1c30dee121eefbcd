//! The CLI's one blocking JSON-RPC client: `satchel inspect` speaks through it to a running
//! daemon's Unix socket, `satchel demo` to the `satchel serve` it spawned, over the child's
//! stdio. One JSON message a line both ways, one call at a time.
//!
//! A notification that arrives while a call waits for its reply (a `context.event` of a watch
//! subscribed before the call) is kept, in order, for [`Client::next_event`].

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context as _, bail};
use satchel_protocol::ErrorCode;
use serde_json::{Value, json};

/// A blocking line-delimited JSON-RPC connection to a daemon.
pub struct Client {
    writer: Box<dyn Write>,
    reader: Box<dyn BufRead>,
    next_id: u64,
    /// Notifications that arrived while a call waited for its reply, in order.
    events: VecDeque<Value>,
}

/// An error reply of the daemon.
#[derive(Debug)]
pub struct RpcFailure {
    method: String,
    code: i64,
    message: String,
}

impl RpcFailure {
    /// Whether the daemon answered with `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == i64::from(code.code())
    }
}

impl std::fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.method, self.message)
    }
}

impl std::error::Error for RpcFailure {}

impl Client {
    /// A client writing its requests to `writer` and reading the daemon's messages from
    /// `reader`.
    pub fn new(writer: impl Write + 'static, reader: impl BufRead + 'static) -> Self {
        Client {
            writer: Box::new(writer),
            reader: Box::new(reader),
            next_id: 1,
            events: VecDeque::new(),
        }
    }

    /// Connects to the socket at `path`. `workspace` is the workspace whose `run/daemon.json`
    /// named it, if that is how it was found: a socket nobody listens on then means a daemon
    /// that died without cleaning up.
    pub fn connect(path: &Path, workspace: Option<&Path>) -> anyhow::Result<Self> {
        let stream = match UnixStream::connect(path) {
            Ok(stream) => stream,
            Err(e) => {
                let gone = matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                );
                return Err(match workspace {
                    Some(workspace) if gone => anyhow::anyhow!(
                        "no daemon running on {} (connecting to {}: {e}; its run/daemon.json is stale)",
                        workspace.display(),
                        path.display()
                    ),
                    _ if gone => {
                        anyhow::anyhow!("no daemon running on socket {} (connecting to it: {e})", path.display())
                    }
                    _ => anyhow::anyhow!("connecting to {}: {e}", path.display()),
                });
            }
        };
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Client::new(stream, reader))
    }

    /// Calls `method` and waits for its result; an error reply is an [`RpcFailure`].
    pub fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .and_then(|()| self.writer.flush())
            .with_context(|| format!("sending {method}"))?;
        loop {
            let mut message = self.next_message()?;
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    return Err(RpcFailure {
                        method: method.to_owned(),
                        code: error["code"].as_i64().unwrap_or(0),
                        message: error["message"].as_str().unwrap_or("error").to_owned(),
                    }
                    .into());
                }
                return Ok(message["result"].take());
            }
            if message.get("method").is_some() {
                self.events.push_back(message);
            }
        }
    }

    /// The next notification, those that arrived during a call first.
    pub fn next_event(&mut self) -> anyhow::Result<Value> {
        match self.events.pop_front() {
            Some(event) => Ok(event),
            None => self.next_message(),
        }
    }

    fn next_message(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            bail!("the daemon closed the connection");
        }
        Ok(serde_json::from_str(&line)?)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// What the daemon sends, one message a line; the requests are written to a buffer.
    fn client(replies: &[Value]) -> Client {
        let text: String = replies.iter().map(|r| format!("{r}\n")).collect();
        Client::new(Vec::new(), Cursor::new(text))
    }

    #[test]
    fn a_notification_before_the_reply_waits_for_next_event() {
        let event = json!({"jsonrpc": "2.0", "method": "context.event", "params": {"n": 1}});
        let mut client = client(&[
            event.clone(),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": true}}),
        ]);
        assert_eq!(client.call("context.watch", json!({})).unwrap(), json!({"ok": true}));
        assert_eq!(client.next_event().unwrap(), event);
        let closed = client.next_event().unwrap_err();
        assert_eq!(closed.to_string(), "the daemon closed the connection");
    }

    #[test]
    fn an_error_reply_names_the_method_and_keeps_its_code() {
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "unknown session x"}});
        let failure = client(&[error]).call("context.inspect", json!({})).unwrap_err();
        assert_eq!(failure.to_string(), "context.inspect: unknown session x");
        assert!(
            failure
                .downcast_ref::<RpcFailure>()
                .unwrap()
                .is(ErrorCode::UnknownSession)
        );
    }
}
