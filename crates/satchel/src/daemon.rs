//! The daemon's state and its methods, independent of any transport.
//!
//! Methods are synchronous (they do file I/O and token counting) and run on tokio's blocking
//! pool. Each session has its own lock, so calls on different sessions run in parallel; a
//! workspace-wide read/write gate keeps the TTL sweep from deleting a file between the moment
//! a call decides to reuse it and the moment its reference is logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use satchel_core::format;
use satchel_core::offload;
use satchel_core::slice::{SliceRequest, slice_text};
use satchel_core::tokens::TokenCounter;
use satchel_core::truncate::TextStats;
use satchel_protocol::{
    Action, Config, FormatHint, InitializeResult, MessageFormat, Phase, PrepareParams, PrepareResult, ReadParams,
    ReadResult, Reconciliation, TokenUsage,
};
use satchel_storage::{OffloadStore, SessionRecord, SessionStore, StorageError, SweepReport, Workspace};
use serde_json::Value;

use crate::config::apply_overrides;
use crate::error::RpcError;
use satchel_core::render::OffloadedText;

use crate::session::{Entry, Session, TruncatedMessage, format_or_default, message_hash};

/// Default `max_bytes` of `context.read`, the same as the first-phase limit.
const DEFAULT_READ_BYTES: usize = 50_000;

type SessionSlot = Arc<Mutex<Option<Session>>>;

/// Everything the methods share.
pub struct Daemon {
    workspace: Workspace,
    offloads: OffloadStore,
    sessions: SessionStore,
    config: Config,
    live: Mutex<HashMap<String, SessionSlot>>,
    /// Held shared by calls that write references, exclusively by the sweep.
    gate: RwLock<()>,
}

impl Daemon {
    /// A daemon over `workspace` with the effective base `config`.
    pub fn new(workspace: Workspace, config: Config) -> Self {
        Daemon {
            offloads: OffloadStore::new(&workspace),
            sessions: SessionStore::new(&workspace),
            workspace,
            config,
            live: Mutex::new(HashMap::new()),
            gate: RwLock::new(()),
        }
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// `initialize`.
    pub fn initialize(&self, methods: Vec<String>) -> InitializeResult {
        InitializeResult {
            server_name: "satchel".into(),
            server_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: satchel_protocol::PROTOCOL_VERSION.into(),
            workspace: self.workspace.root().display().to_string(),
            config: self.config.clone(),
            methods,
        }
    }

    fn slot(&self, id: &str) -> SessionSlot {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.entry(id.to_owned()).or_default().clone()
    }

    /// `context.prepare`.
    pub fn prepare(&self, params: PrepareParams) -> Result<PrepareResult, RpcError> {
        SessionStore::validate_id(&params.session_id).map_err(|e| RpcError::invalid_params("session_id", e))?;
        let config = match &params.config {
            Some(overrides) => apply_overrides(&self.config, overrides)
                .map_err(|(field, why)| RpcError::invalid_params(&format!("config.{field}"), why))?,
            None => self.config.clone(),
        };
        let (incoming, is_full_list) = match (params.messages, params.append) {
            (Some(m), None) => (m, true),
            (None, Some(a)) => (a, false),
            (Some(_), Some(_)) => {
                return Err(RpcError::invalid_params(
                    "append",
                    "give either `messages` or `append`, not both",
                ));
            }
            (None, None) => {
                return Err(RpcError::invalid_params(
                    "messages",
                    "one of `messages` or `append` is required",
                ));
            }
        };
        if let Some(index) = incoming.iter().position(|m| !m.is_object()) {
            let field = if is_full_list { "messages" } else { "append" };
            return Err(RpcError::invalid_params(
                &format!("{field}[{index}]"),
                "each message must be a JSON object",
            ));
        }

        let slot = self.slot(&params.session_id);
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = self.load_session(&params.session_id)?;
        }
        if guard.is_none() && !is_full_list {
            return Err(RpcError::UnknownSession(params.session_id));
        }
        let session = guard.get_or_insert_with(Session::default);

        let declared = match params.format {
            FormatHint::Auto => None,
            FormatHint::Openai => Some(MessageFormat::Openai),
            FormatHint::Anthropic => Some(MessageFormat::Anthropic),
        };
        if let (Some(declared), Some(held)) = (declared, session.format)
            && declared != held
        {
            return Err(RpcError::invalid_params(
                "format",
                format!("session {} is in {held:?} format", params.session_id),
            ));
        }

        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let hashes: Vec<String> = incoming.iter().map(message_hash).collect();
        let (keep, new_messages, new_hashes) = if is_full_list {
            let keep = session.matching_prefix(&incoming, &hashes, &config);
            (keep, &incoming[keep..], &hashes[keep..])
        } else {
            (session.entries.len(), &incoming[..], &hashes[..])
        };
        let replaced = session.entries.len() - keep;
        let format = declared
            .or(session.format)
            .or_else(|| format::detect(new_messages))
            .or_else(|| format::detect(&incoming));

        // Build the new entries (offloading their large texts) before touching the session, so a
        // storage failure leaves it exactly as it was.
        let mut records = Vec::new();
        if format.is_some() && session.format.is_none() {
            records.push(SessionRecord::Format {
                format: format_or_default(format),
            });
        }
        if replaced > 0 {
            records.push(SessionRecord::Truncate { keep });
        }
        let processing_format = format_or_default(format);
        let mut new_entries = Vec::with_capacity(new_messages.len());
        let mut actions = Vec::new();
        for (position, (message, hash)) in new_messages.iter().zip(new_hashes).enumerate() {
            let index = keep + position;
            let earlier = || {
                new_messages[..position]
                    .iter()
                    .rev()
                    .chain(session.entries[..keep].iter().rev().map(|e| &e.message))
            };
            let mut offloaded = Vec::new();
            for text in format::result_texts(message, processing_format) {
                let Some(Value::String(full)) = message.pointer(&text.pointer) else {
                    continue;
                };
                let call = text
                    .call_id
                    .as_deref()
                    .and_then(|id| format::find_call(earlier(), id, processing_format));
                if !offload::must_offload(full.len(), offload::classify(call.as_ref(), &config), &config) {
                    continue;
                }
                let saved = self.offloads.save(full).map_err(RpcError::Storage)?;
                let stats = TextStats::of(full);
                actions.push(Action::Offloaded {
                    index,
                    pointer: text.pointer.clone(),
                    file: saved.rel_path.clone(),
                    total_bytes: stats.total_bytes,
                    total_lines: stats.total_lines,
                    newly_written: saved.newly_written,
                });
                offloaded.push(OffloadedText {
                    pointer: text.pointer,
                    file: saved.rel_path,
                    stats,
                    call,
                });
            }
            let entry = Entry::new(hash.clone(), message.clone(), offloaded);
            records.push(SessionRecord::Message(entry.to_stored()));
            new_entries.push(entry);
        }
        self.sessions
            .append(&params.session_id, &records)
            .map_err(RpcError::Storage)?;

        // Durable: now the session may change.
        let recent_start_before = {
            let held: Vec<&Value> = session.entries[..keep].iter().map(|e| &e.message).collect();
            offload::recent_start(&held, processing_format, config.pruning_recent_n)
        };
        session.entries.truncate(keep);
        session.entries.extend(new_entries);
        session.format = format;

        let (rendered, truncated) = session.render(&config);
        for TruncatedMessage { index, phase, texts } in truncated {
            let changed = index >= keep || (phase == Phase::Old && index >= recent_start_before);
            if !changed {
                continue;
            }
            for text in texts {
                if let Some(kept_bytes) = text.kept_bytes {
                    actions.push(Action::Truncated {
                        index,
                        pointer: text.pointer,
                        phase,
                        file: text.file,
                        kept_bytes,
                        total_bytes: text.total_bytes,
                    });
                }
            }
        }

        let counter = TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
        let per_message = session.count_tokens(&rendered, &counter, &config);
        let is_system = |m: &Value| m.get("role").and_then(Value::as_str) == Some("system");
        let system_messages: u64 = rendered
            .iter()
            .zip(&per_message)
            .filter(|(m, _)| is_system(m))
            .map(|(_, t)| t)
            .sum();
        let system = system_messages + params.system.as_ref().map_or(0, |s| counter.count_message(s));
        let tools = params
            .tools
            .as_ref()
            .map_or(0, |t| t.iter().map(|d| counter.count_message(d)).sum());
        let messages_tokens: u64 = per_message.iter().sum::<u64>() - system_messages;

        Ok(PrepareResult {
            session_id: params.session_id,
            format: processing_format,
            reconciliation: Reconciliation {
                session_messages: session.entries.len(),
                reused: keep.min(incoming.len()) * usize::from(is_full_list),
                appended: new_messages.len(),
                replaced,
            },
            messages: rendered,
            tokens: TokenUsage {
                system,
                tools,
                messages: messages_tokens,
                total: system + tools + messages_tokens,
                limit: config.max_input_length,
                threshold: config.compact_threshold_tokens(),
                tokenizer: config.tokenizer,
            },
            actions,
        })
    }

    /// Loads a session from its log, restoring offloaded texts from their files.
    fn load_session(&self, id: &str) -> Result<Option<Session>, RpcError> {
        let Some(log) = self.sessions.load(id).map_err(RpcError::Storage)? else {
            return Ok(None);
        };
        let format = format_or_default(log.format);
        let mut session = Session::default();
        session.format = log.format;
        for stored in log.messages {
            let mut message = stored.message;
            let mut offloaded = Vec::with_capacity(stored.offloads.len());
            for o in stored.offloads {
                let full = self.offloads.load(&o.file).unwrap_or_else(|e| {
                    tracing::error!(session = id, file = %o.file, "offloaded text is missing: {e}");
                    format!(
                        "[satchel: the full text of this tool result ({} bytes) was in {} and is missing]",
                        o.total_bytes, o.file
                    )
                });
                let stats = TextStats::of(&full);
                if let Some(slot) = message.pointer_mut(&o.pointer) {
                    *slot = Value::String(full);
                }
                let call_id = format::result_texts(&message, format)
                    .into_iter()
                    .find(|t| t.pointer == o.pointer)
                    .and_then(|t| t.call_id);
                let call = call_id
                    .and_then(|cid| format::find_call(session.entries.iter().rev().map(|e| &e.message), &cid, format));
                offloaded.push(OffloadedText {
                    pointer: o.pointer,
                    file: o.file,
                    stats,
                    call,
                });
            }
            session.entries.push(Entry::new(stored.hash, message, offloaded));
        }
        tracing::info!(
            session = id,
            messages = session.entries.len(),
            "session restored from its log"
        );
        Ok(Some(session))
    }

    /// `context.read`.
    pub fn read(&self, params: ReadParams) -> Result<ReadResult, RpcError> {
        let text = self.workspace.read_text(&params.path).map_err(RpcError::Storage)?;
        let request = SliceRequest {
            start_line: params.start_line,
            byte_offset: params.byte_offset,
            max_bytes: params.max_bytes.unwrap_or(DEFAULT_READ_BYTES),
        };
        let slice = slice_text(&text, &request).map_err(|e| RpcError::invalid_params(slice_field(&params), e))?;
        Ok(ReadResult {
            path: params.path.clone(),
            content: slice.content.to_owned(),
            byte_offset: slice.byte_offset,
            start_line: slice.start_line,
            end_line: slice.end_line,
            next_line: slice.next_line,
            next_byte_offset: slice.next_byte_offset,
            eof: slice.eof,
            total_lines: slice.total_lines,
            total_bytes: slice.total_bytes,
        })
    }

    /// Removes offload files older than the retention that no session refers to.
    pub fn sweep(&self, now: SystemTime) -> Result<SweepReport, StorageError> {
        let _gate = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let referenced = self.sessions.referenced_files()?;
        let retention = Duration::from_secs_f64(self.config.offload_retention_days * 86_400.0);
        self.offloads.sweep(now, retention, &referenced)
    }
}

/// Which `context.read` param a slicing error is about.
fn slice_field(params: &ReadParams) -> &'static str {
    if params.byte_offset.is_some() {
        "byte_offset"
    } else if params.max_bytes == Some(0) {
        "max_bytes"
    } else {
        "start_line"
    }
}
