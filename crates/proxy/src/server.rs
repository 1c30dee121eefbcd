//! [`serve`]: the accept loop, and one request's way through the proxy: authorise, route,
//! read the body, prepare the messages (managed routes), forward, relay.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use satchel_protocol::PrepareParams;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::net::TcpListener;

use crate::agent_compaction::asks_for_summary;
use crate::body::{Fields, field_as};
use crate::forward::{self, Outgoing, ProxyBody, UsageSink};
use crate::provider::{Family, Provider, Route};
use crate::session::{SESSION_HEADER, SessionKey, session_id};
use crate::{Hook, Prepared, RequestOrigin, Settings, UpstreamModel};

/// The longest `X-Satchel-Warning`: an engine error can be long, a header should not be.
const MAX_WARNING_CHARS: usize = 300;

/// The proxy's state, shared by its connections.
struct Proxy {
    hook: Arc<dyn Hook>,
    settings: Settings,
    client: reqwest::Client,
}

/// Serves the proxy on `listener` until the future is dropped; each connection runs in its
/// own task, each request on it in turn (HTTP/1.1).
pub async fn serve(listener: TcpListener, hook: Arc<dyn Hook>, settings: Settings) {
    let proxy = Arc::new(Proxy {
        hook,
        settings,
        client: forward::client(),
    });
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or the peer left before accept: others may still come.
                tracing::warn!("proxy: accepting a connection failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // A relayed event goes out when written: with Nagle's algorithm a stream's first event
        // waited for the client's delayed ACK of the headers, some 40 ms on Linux.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("proxy: TCP_NODELAY not set: {e}");
        }
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(request).await) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("proxy: connection ended: {e}");
            }
        });
    }
}

/// What `context.prepare` made of a managed request.
struct Managed {
    session_id: String,
    /// The body to send, or `None` to send the client's own.
    body: Option<Vec<u8>>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Proxy {
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let (parts, body) = request.into_parts();
        let route = Route::of(&parts.method, parts.uri.path(), &parts.headers);
        let family = route.family();
        if !self.authorised(&parts.headers) {
            let message = "satchel proxy: missing or wrong Proxy-Authorization bearer token";
            let status = StatusCode::PROXY_AUTHENTICATION_REQUIRED;
            let challenge = (
                hyper::header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"satchel\""),
            );
            return forward::own_response(status, family.error_body(status, message), vec![challenge]);
        }
        let body = match Limited::new(body, self.settings.max_body_bytes).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                let message = format!(
                    "satchel proxy: the request body is larger than {} bytes",
                    self.settings.max_body_bytes
                );
                return own_error(family, StatusCode::PAYLOAD_TOO_LARGE, &message);
            }
            Err(e) => {
                let message = format!("satchel proxy: reading the request body failed: {e}");
                return own_error(family, StatusCode::BAD_REQUEST, &message);
            }
        };
        let mut managed = match route {
            Route::Managed(provider) => match self.prepare(provider, &parts.headers, &body).await {
                Ok(managed) => managed,
                Err(message) => return own_error(family, StatusCode::BAD_REQUEST, &message),
            },
            Route::Passthrough(_, Some(reason)) => {
                tracing::info!(path = parts.uri.path(), "proxy: passed through unchanged: {reason}");
                None
            }
            Route::Passthrough(_, None) => None,
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let outgoing = Outgoing {
            method: parts.method.clone(),
            url: format!("{}{path}", family.base(&self.settings.upstreams).trim_end_matches('/')),
            headers: &parts.headers,
            body: managed.as_mut().and_then(|m| m.body.take()).map_or(body, Bytes::from),
            identity: managed.is_some(),
        };
        let upstream = match forward::send(&self.client, outgoing).await {
            Ok(upstream) => upstream,
            Err(e) => {
                tracing::warn!(path = parts.uri.path(), "proxy: the upstream could not be reached: {e}");
                let message = format!("satchel proxy: the upstream could not be reached: {e}");
                let extra = managed.map(|m| m.headers).unwrap_or_default();
                return forward::own_response(
                    StatusCode::BAD_GATEWAY,
                    family.error_body(StatusCode::BAD_GATEWAY, &message),
                    extra,
                );
            }
        };
        match managed {
            Some(managed) => {
                let sink = UsageSink {
                    hook: self.hook.clone(),
                    session_id: managed.session_id,
                };
                forward::relay(upstream, managed.headers, Some(sink))
            }
            None => forward::relay(upstream, Vec::new(), None),
        }
    }

    /// Whether the request carries the proxy's token, when it has one.
    fn authorised(&self, headers: &HeaderMap) -> bool {
        let Some(token) = self.settings.token.as_deref().filter(|t| !t.is_empty()) else {
            return true;
        };
        let given = headers
            .get(hyper::header::PROXY_AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Compared in time independent of where they differ.
        given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Runs `context.prepare` on a managed request's messages. An error is a malformed
    /// request, for a 400 in the provider's shape; an engine failure is not an error: the
    /// client's own body is sent, with a warning header. `None`: a request with no history
    /// of its own to manage, passed through as sent (the reason logged).
    async fn prepare(&self, provider: Provider, headers: &HeaderMap, body: &[u8]) -> Result<Option<Managed>, String> {
        let fields = Fields::parse(body)?;
        if let Some(reason) = unmanaged(provider, &fields) {
            tracing::info!("proxy: passed through unchanged: {reason}");
            return Ok(None);
        }
        let field = provider.messages_field();
        let messages: Vec<Box<RawValue>> = match fields.get(field).map(field_as) {
            Some(Ok(messages)) => messages,
            _ => return Err(format!("`{field}`: an array of messages is required")),
        };
        let SessionKey { id: session_id, from } = session_id(provider, headers, &fields);
        let agent_compaction = asks_for_summary(&messages).then_some(messages.len());
        let extras = extras(provider, &fields);
        let system = extras.as_ref().ok().and_then(|(system, _)| system.clone());
        let prepared = match extras {
            Ok((system, tools)) => {
                let params = PrepareParams {
                    session_id: session_id.clone(),
                    messages: Some(messages),
                    append: None,
                    expect_messages: None,
                    format: provider.format(),
                    system,
                    sections: None,
                    memory: None,
                    usage: None,
                    tools,
                    work_done_token: None,
                    config: None,
                };
                let hook = self.hook.clone();
                let api = provider.api();
                let base = Route::Managed(provider).family().base(&self.settings.upstreams);
                let runtime = tokio::runtime::Handle::current();
                let upstream = UpstreamModel::lend(provider, base, headers, self.client.clone(), runtime);
                tokio::task::spawn_blocking(move || {
                    let prepared = hook.prepare(params, upstream)?;
                    let origin = RequestOrigin {
                        api,
                        key_from: from,
                        agent_compaction,
                    };
                    // Inspect's record of the request; the request itself is prepared.
                    if let Err(e) = hook.note_origin(&prepared.session_id, origin) {
                        tracing::warn!(session = %prepared.session_id, "proxy: the request's origin was not recorded: {e}");
                    }
                    Ok(prepared)
                })
                    .await
                    // A panic's message may quote the request: the panic hook has logged it.
                    .unwrap_or_else(|_| {
                        Err("preparing the request failed unexpectedly (the daemon's log says why)".into())
                    })
            }
            Err(e) => Err(e),
        };
        let mut managed = Managed {
            session_id: session_id.clone(),
            body: None,
            headers: vec![header(SESSION_HEADER, &session_id)],
        };
        if agent_compaction.is_some() {
            tracing::info!(session = %session_id, "proxy: the agent asks its model for its own compaction");
            managed.headers.push(header("x-satchel-agent-compaction", "true"));
        }
        match prepared {
            Ok(prepared) => {
                managed.body = Some(rewrite(provider, &fields, &prepared, system.as_ref()));
                managed.headers.extend(outcome_headers(&prepared));
            }
            Err(e) => {
                tracing::warn!(session = %session_id, "proxy: forwarded unprepared: {e}");
                managed
                    .headers
                    .push(header("x-satchel-warning", &format!("not prepared: {e}")));
            }
        }
        Ok(Some(managed))
    }
}

/// Why a request to a managed route has no history satchel could manage, if so: a Responses
/// request continuing a stored response (`previous_response_id`: the provider holds the
/// history, the request only the new items) or whose `input` is one text.
fn unmanaged(provider: Provider, fields: &Fields) -> Option<&'static str> {
    if provider != Provider::OpenAiResponses {
        return None;
    }
    if fields
        .get("previous_response_id")
        .is_some_and(|raw| raw.get() != "null")
    {
        return Some("`previous_response_id`: the provider holds the history");
    }
    if fields.get("input").is_some_and(|raw| raw.get().starts_with('"')) {
        return Some("`input` is one text, no history");
    }
    None
}

/// The system prompt (Anthropic's `system`, Responses' `instructions`) and tool definitions
/// `context.prepare` counts.
/// A provider may take what satchel cannot read (nesting deeper than JSON parsers allow):
/// such a request is forwarded as sent, so this is no malformed request.
type Extras = (Option<Value>, Option<Vec<Value>>);

fn extras(provider: Provider, fields: &Fields) -> Result<Extras, String> {
    let system = match provider
        .system_field()
        .and_then(|field| Some((field, fields.get(field)?)))
    {
        Some((field, raw)) if raw.get() != "null" => {
            Some(field_as(raw).map_err(|e| format!("`{field}` unreadable: {e}"))?)
        }
        _ => None,
    };
    let tools = match fields.get("tools") {
        Some(raw) => Some(field_as(raw).map_err(|e| format!("`tools` unreadable: {e}"))?),
        None => None,
    };
    Ok((system, tools))
}

/// The client's body with the prepared messages, and the prepared system prompt when it
/// differs from the client's (satchel added to it or cut it); the client's own bytes
/// otherwise. A request whose system prompt is its leading message (OpenAI Chat, Responses
/// without `instructions`) gets what satchel adds to it as a message of the same role right
/// after it, as `context.prepare` returns it: beside the messages.
fn rewrite(provider: Provider, fields: &Fields, prepared: &Prepared, system: Option<&Value>) -> Vec<u8> {
    let field = provider.system_field().filter(|_| system.is_some());
    let beside = prepared.system.as_ref().filter(|_| field.is_none());
    let messages = join_messages(&prepared.messages, beside.map(|s| &**s));
    let mut replaced = vec![(provider.messages_field(), messages.as_str())];
    let prepared_system = prepared
        .system
        .as_ref()
        .filter(|s| system.is_some_and(|mine| serde_json::from_str::<Value>(s.get()).ok().as_ref() != Some(mine)));
    if let (Some(prepared_system), Some(field)) = (prepared_system, field) {
        replaced.push((field, prepared_system.get()));
    }
    fields.with_replaced(&replaced)
}

/// The messages as one JSON array, from their texts, with `beside` (a system prompt's text)
/// as a message after the leading system or developer message, in its role (else first, as
/// `system`).
fn join_messages(messages: &[Arc<RawValue>], beside: Option<&RawValue>) -> String {
    let leading_role = messages.first().and_then(|m| leading_role(m));
    let beside = beside.map(|text| {
        let role = leading_role.unwrap_or("system");
        format!(r#"{{"role":"{role}","content":{}}}"#, text.get())
    });
    let mut parts: Vec<&str> = messages.iter().map(|m| m.get()).collect();
    if let Some(beside) = &beside {
        parts.insert(usize::from(leading_role.is_some()), beside);
    }
    let mut out = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    out.push('[');
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(part);
    }
    out.push(']');
    out
}

/// `system` or `developer`, when `message` has that role.
fn leading_role(message: &RawValue) -> Option<&'static str> {
    #[derive(serde::Deserialize)]
    struct Role {
        role: Option<String>,
    }
    let role = serde_json::from_str::<Role>(message.get()).ok()?.role?;
    match role.as_str() {
        "system" => Some("system"),
        "developer" => Some("developer"),
        _ => None,
    }
}

/// `X-Satchel-Tokens: before->after` (before is the count before this call's compaction,
/// the same as after when none ran) and `X-Satchel-Compacted`.
fn outcome_headers(prepared: &Prepared) -> Vec<(HeaderName, HeaderValue)> {
    let compaction = prepared.actions.iter().find_map(|a| match a {
        satchel_protocol::Action::Compacted(report) => Some(report),
        _ => None,
    });
    let after = prepared.tokens.total;
    let before = compaction.map_or(after, |c| c.tokens_before.max(after));
    vec![
        header("x-satchel-tokens", &format!("{before}->{after}")),
        header(
            "x-satchel-compacted",
            if compaction.is_some() { "true" } else { "false" },
        ),
    ]
}

/// A header whose value is `text` made safe: visible ASCII, one line, not too long.
fn header(name: &'static str, text: &str) -> (HeaderName, HeaderValue) {
    let safe: String = text
        .chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .take(MAX_WARNING_CHARS)
        .collect();
    let value = HeaderValue::from_str(&safe).unwrap_or_else(|_| HeaderValue::from_static("?"));
    (HeaderName::from_static(name), value)
}

/// An error of the proxy's own, in the shape of the provider the request was for.
fn own_error(family: Family, status: StatusCode, message: &str) -> Response<ProxyBody> {
    forward::own_response(status, family.error_body(status, message), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Arc<RawValue> {
        Arc::from(RawValue::from_string(text.to_owned()).unwrap())
    }

    #[test]
    fn what_satchel_adds_to_a_leading_system_message_goes_right_after_it_in_its_role() {
        let added = RawValue::from_string(r#""Learned: keep the API""#.to_owned()).unwrap();
        let system = raw(r#"{"role":"system","content":"You fix builds."}"#);
        let developer = raw(r#"{"role":"developer","content":"sandboxed"}"#);
        let user = raw(r#"{"role":"user","content":"hi"}"#);
        for (messages, beside, expected) in [
            (
                vec![system.clone(), user.clone()],
                None,
                r#"[{"role":"system","content":"You fix builds."},{"role":"user","content":"hi"}]"#,
            ),
            (
                vec![system, user.clone()],
                Some(&*added),
                r#"[{"role":"system","content":"You fix builds."},{"role":"system","content":"Learned: keep the API"},{"role":"user","content":"hi"}]"#,
            ),
            (
                vec![developer],
                Some(&*added),
                r#"[{"role":"developer","content":"sandboxed"},{"role":"developer","content":"Learned: keep the API"}]"#,
            ),
            (
                vec![user],
                Some(&*added),
                r#"[{"role":"system","content":"Learned: keep the API"},{"role":"user","content":"hi"}]"#,
            ),
            (
                vec![],
                Some(&*added),
                r#"[{"role":"system","content":"Learned: keep the API"}]"#,
            ),
            (vec![], None, "[]"),
        ] {
            let joined = join_messages(&messages, beside);
            assert_eq!(joined, expected);
            serde_json::from_str::<Value>(&joined).unwrap();
        }
    }
}
