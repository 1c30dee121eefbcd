//! Which satchel session a proxied request belongs to, in order:
//!
//! 1. the `X-Satchel-Session` header, set by whoever starts the agent;
//! 2. the agent's own session identity: Claude Code's `X-Claude-Code-Session-Id` header or
//!    the `session_id` inside Anthropic's `metadata.user_id`; OpenAI's `prompt_cache_key`
//!    (Codex sends its thread id there), else `user`;
//! 3. else a stable hash of the system prompt and the first user message, which stay the
//!    same from one request of a conversation to the next.
//!
//! A key that is a valid session id (1–128 of `[A-Za-z0-9._-]`, a UUID) is the session id
//! itself, so `satchel inspect` shows the agent's own id; any other key is hashed to one.
//! Inspect shows what named a session (`origin.key_from`).
//!
//! Claude Code sends side requests under its session's identity (a title for the session,
//! with no tools and a system prompt of its own): their one-message history would replace
//! the session's, so a tool-less Anthropic request keyed by Claude Code's identity goes to
//! the session `<id>.side` instead.

use hyper::HeaderMap;
use sha2::{Digest, Sha256};

use crate::body::{Fields, field_as};
use crate::provider::Provider;

/// The header that names the session explicitly.
pub const SESSION_HEADER: &str = "x-satchel-session";

/// Claude Code's session header (equal to the `session_id` in its `metadata.user_id`).
const CLAUDE_CODE_SESSION_HEADER: &str = "x-claude-code-session-id";

/// The first text of Claude Code's first system block, whose suffix changes with the first
/// user message and after a compaction: left out of the hash, which must not change.
const BILLING_BLOCK_PREFIX: &str = "x-anthropic-billing-header:";

/// The session a request belongs to, and what named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey {
    /// The session id.
    pub id: String,
    /// What named it, as inspect shows it.
    pub from: &'static str,
}

/// The session of a request to `provider` with `headers` and body `fields`.
pub fn session_id(provider: Provider, headers: &HeaderMap, fields: &Fields) -> SessionKey {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let agent = || match provider {
        Provider::Anthropic => {
            let claude_code = header(CLAUDE_CODE_SESSION_HEADER)
                .map(|key| (key, "x-claude-code-session-id header"))
                .or_else(|| metadata_session(fields).map(|key| (key, "metadata.user_id")));
            claude_code.map(|(key, from)| {
                if has_tools(fields) {
                    (key, from)
                } else {
                    (format!("{key}.side"), from)
                }
            })
        }
        Provider::OpenAiChat | Provider::OpenAiResponses => string_field(fields, "prompt_cache_key")
            .map(|key| (key, "prompt_cache_key"))
            .or_else(|| string_field(fields, "user").map(|key| (key, "user"))),
    };
    let key = header(SESSION_HEADER)
        .map(|key| (key, "x-satchel-session header"))
        .or_else(agent);
    let (id, from) = match key {
        Some((key, from)) if is_session_id(&key) => (key, from),
        Some((key, from)) => (format!("k-{}", hex_digest(&[key.as_bytes()])), from),
        None => (
            format!("h-{}", conversation_hash(provider, fields)),
            "hash of the system prompt and first user message",
        ),
    };
    SessionKey { id, from }
}

/// Whether the request offers the model tools (a non-empty `tools`).
fn has_tools(fields: &Fields) -> bool {
    fields
        .get("tools")
        .and_then(|raw| field_as::<Vec<&serde_json::value::RawValue>>(raw).ok())
        .is_some_and(|tools| !tools.is_empty())
}

/// Whether `id` is a session id as `context.prepare` takes it.
pub fn is_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A top-level string field.
fn string_field(fields: &Fields, key: &str) -> Option<String> {
    let raw = fields.get(key)?;
    field_as::<String>(raw).ok().filter(|s| !s.is_empty())
}

/// The session inside Anthropic's `metadata.user_id`: Claude Code sends a JSON string
/// `{"device_id":…,"account_uuid":…,"session_id":…}`; older versions
/// `user_<hash>_account_<uuid>_session_<uuid>`.
fn metadata_session(fields: &Fields) -> Option<String> {
    let metadata: serde_json::Value = field_as(fields.get("metadata")?).ok()?;
    let user_id = metadata.get("user_id")?.as_str()?;
    if let Ok(serde_json::Value::Object(inner)) = serde_json::from_str(user_id) {
        return inner
            .get("session_id")
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
    }
    user_id
        .rsplit_once("_session_")
        .map(|(_, session)| session.to_owned())
        .filter(|s| !s.is_empty())
}

/// A hash of what opens the conversation: the system prompt (Anthropic's `system` without
/// Claude Code's billing block; Responses' `instructions`; OpenAI's leading system and
/// developer messages) and the first user message, each as the exact text sent.
fn conversation_hash(provider: Provider, fields: &Fields) -> String {
    let messages: Vec<&serde_json::value::RawValue> = fields
        .get(provider.messages_field())
        .and_then(|raw| field_as(raw).ok())
        .unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    if let Some(system) = provider.system_field().and_then(|field| fields.get(field)) {
        parts.push(stable_system(system));
    }
    for message in messages {
        parts.push(message.get().to_owned());
        let role = field_as::<RoleOnly>(message).map(|r| r.role).unwrap_or_default();
        if role == "user" {
            break;
        }
    }
    hex_digest(&parts.iter().map(|p| p.as_bytes()).collect::<Vec<_>>())
}

/// Just a message's role.
#[derive(serde::Deserialize)]
struct RoleOnly {
    #[serde(default)]
    role: String,
}

/// Anthropic's `system` as text for the hash, without the billing block.
fn stable_system(system: &serde_json::value::RawValue) -> String {
    let Ok(serde_json::Value::Array(blocks)) = field_as(system) else {
        return system.get().to_owned();
    };
    let kept: Vec<String> = blocks
        .iter()
        .filter(|b| {
            !b.get("text")
                .and_then(|t| t.as_str())
                .is_some_and(|t| t.starts_with(BILLING_BLOCK_PREFIX))
        })
        .map(|b| b.to_string())
        .collect();
    kept.join("\n")
}

/// The first 128 bits of the SHA-256 of `parts` (each length-prefixed), in hex.
fn hex_digest(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(provider: Provider, headers: &[(&'static str, &'static str)], body: &str) -> String {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        session_id(provider, &map, &Fields::parse(body.as_bytes()).unwrap()).id
    }

    const CLAUDE_BODY: &str = r#"{"metadata":{"user_id":"{\"device_id\":\"d\",\"account_uuid\":\"\",\"session_id\":\"92fda710-39dc\"}"},"tools":[{"name":"Bash"}],"messages":[]}"#;

    #[test]
    fn the_explicit_header_wins_then_the_agents_own_identity() {
        let anthropic = Provider::Anthropic;
        assert_eq!(id(anthropic, &[("x-satchel-session", "mine")], CLAUDE_BODY), "mine");
        assert_eq!(
            id(anthropic, &[("x-claude-code-session-id", "cc-1")], CLAUDE_BODY),
            "cc-1"
        );
        assert_eq!(id(anthropic, &[], CLAUDE_BODY), "92fda710-39dc");
        let old = r#"{"metadata":{"user_id":"user_ab_account_cd_session_ef-01"},"tools":[{"name":"Bash"}]}"#;
        assert_eq!(id(anthropic, &[], old), "ef-01");
        let openai = Provider::OpenAiChat;
        assert_eq!(
            id(openai, &[], r#"{"prompt_cache_key":"thread-9","user":"u"}"#),
            "thread-9"
        );
        assert_eq!(id(openai, &[], r#"{"user":"u"}"#), "u");
    }

    #[test]
    fn claude_code_s_tool_less_side_requests_have_a_session_of_their_own() {
        let title = CLAUDE_BODY.replace(r#""tools":[{"name":"Bash"}],"#, "");
        let header = [("x-claude-code-session-id", "cc-1")];
        assert_eq!(id(Provider::Anthropic, &header, &title), "cc-1.side");
        assert_eq!(
            id(Provider::Anthropic, &[], &title.replace("[]", "[{}]")),
            "92fda710-39dc.side"
        );
        let empty = CLAUDE_BODY.replace(r#"[{"name":"Bash"}]"#, "[]");
        assert_eq!(id(Provider::Anthropic, &header, &empty), "cc-1.side");
        // An explicit session is the client's choice, with or without tools.
        assert_eq!(
            id(Provider::Anthropic, &[("x-satchel-session", "mine")], &title),
            "mine"
        );
    }

    #[test]
    fn what_named_the_session_is_told() {
        let from = |provider, headers: &[(&'static str, &'static str)], body: &str| {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.insert(*name, value.parse().unwrap());
            }
            session_id(provider, &map, &Fields::parse(body.as_bytes()).unwrap()).from
        };
        let anthropic = Provider::Anthropic;
        assert_eq!(
            from(anthropic, &[("x-satchel-session", "m")], CLAUDE_BODY),
            "x-satchel-session header"
        );
        assert_eq!(
            from(anthropic, &[("x-claude-code-session-id", "c")], CLAUDE_BODY),
            "x-claude-code-session-id header"
        );
        assert_eq!(from(anthropic, &[], CLAUDE_BODY), "metadata.user_id");
        let responses = Provider::OpenAiResponses;
        assert_eq!(from(responses, &[], r#"{"prompt_cache_key":"t"}"#), "prompt_cache_key");
        assert_eq!(from(Provider::OpenAiChat, &[], r#"{"user":"u"}"#), "user");
        assert_eq!(
            from(responses, &[], r#"{"input":[]}"#),
            "hash of the system prompt and first user message"
        );
    }

    #[test]
    fn a_key_that_is_no_session_id_is_hashed_to_one() {
        let key = id(Provider::OpenAiChat, &[("x-satchel-session", "a b/c")], "{}");
        assert!(key.starts_with("k-") && is_session_id(&key), "{key}");
        assert_eq!(key, id(Provider::OpenAiChat, &[("x-satchel-session", "a b/c")], "{}"));
    }

    #[test]
    fn without_identity_the_opening_of_the_conversation_keys_it() {
        let first = r#"{"system":[{"type":"text","text":"x-anthropic-billing-header: cc=1.8a5;"},{"type":"text","text":"You help."}],
            "messages":[{"role":"user","content":"list files"}]}"#;
        let later = r#"{"system":[{"type":"text","text":"x-anthropic-billing-header: cc=1.f9d;"},{"type":"text","text":"You help."}],
            "messages":[{"role":"user","content":"list files"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}"#;
        let other = r#"{"system":"You help.","messages":[{"role":"user","content":"something else"}]}"#;
        let key = id(Provider::Anthropic, &[], first);
        assert!(key.starts_with("h-") && is_session_id(&key));
        assert_eq!(key, id(Provider::Anthropic, &[], later));
        assert_ne!(key, id(Provider::Anthropic, &[], other));
        let chat = |rest: &str| {
            id(
                Provider::OpenAiChat,
                &[],
                &format!(r#"{{"messages":[{{"role":"system","content":"S"}},{{"role":"user","content":"q"}}{rest}]}}"#),
            )
        };
        assert_eq!(chat(""), chat(r#",{"role":"assistant","content":"a"}"#));
    }
}
