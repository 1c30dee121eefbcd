//! The daemon's state and its methods, independent of any transport.
//!
//! `context.prepare` runs the spec's pre-reasoning hook on every call, in order: tool-result
//! offload (new messages) → context check → compaction of the older part → archive of the
//! compacted raw messages. Methods are synchronous (file I/O, token counting) and run on
//! tokio's blocking pool. Each session has its own lock, so sessions proceed in parallel; a
//! workspace-wide read/write gate keeps the TTL sweep from deleting a file between the moment
//! a call decides to reuse it and the moment its reference is logged.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

use satchel_core::compact::plan_split;
use satchel_core::format;
use satchel_core::hash::MessageHash;
use satchel_core::offload;
use satchel_core::render::OffloadedText;
use satchel_core::repair::Repair;
use satchel_core::slice::{SliceRequest, slice_text};
use satchel_core::summary::extractive::ExtractiveSummarizer;
use satchel_core::summary::llm::{Completer, Language, LlmSummarizer};
use satchel_core::summary::memory::memory_note;
use satchel_core::summary::render::summary_message_text;
use satchel_core::summary::{Summarizer, SummaryInput};
use satchel_core::tokens::TokenCounter;
use satchel_core::truncate::TextStats;
use satchel_protocol::{
    Action, ArchiveRange, CompactParams, CompactResult, CompactSummary, CompactionReport, Config, ContextEvent,
    FormatHint, InitializeParams, InitializeResult, InspectParams, InspectResult, MessageFormat, OffloadedResult,
    Phase, PrepareParams, PrepareResult, ReadParams, ReadResult, Reconciliation, SessionSummary, SessionsResult,
    TokenUsage, WatchParams, WatchResult,
};
use satchel_storage::{
    CompactionBegun, CompactionInfo, DialogArchive, DialogLine, DialogOffload, EncodedLines, MemoryFiles, OffloadStore,
    PendingSync, SessionRecord, SessionStore, StorageError, StoredMessage, SweepReport, Workspace,
};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::apply_overrides;
use crate::error::RpcError;
use crate::llm::{ClientCompleter, OpenAiCompleter};
use crate::parallel::map_weighted;
use crate::session::{Alignment, Entry, IncomingHashes, Session, TruncatedMessage, format_or_default};
use crate::transport::ClientHandle;
use satchel_protocol::config::{SummarizerKind, SummaryLanguage};

/// Default `max_bytes` of `context.read`, the same as the first-phase limit.
const DEFAULT_READ_BYTES: usize = 50_000;

type SessionSlot = Arc<Mutex<Option<Session>>>;

/// Everything the methods share.
pub struct Daemon {
    workspace: Workspace,
    offloads: OffloadStore,
    sessions: SessionStore,
    archive: DialogArchive,
    memory: MemoryFiles,
    /// Connections whose client declared `summarizer_complete` in `initialize`.
    completing_clients: Mutex<HashSet<u64>>,
    /// Connections following a session (`context.watch`).
    watchers: Mutex<HashMap<String, Vec<ClientHandle>>>,
    config: Config,
    live: Mutex<HashMap<String, SessionSlot>>,
    /// Held shared by calls that write references, exclusively by the sweep.
    gate: RwLock<()>,
}

/// What the request-level parts of a call are, for counting the system and tools zones.
struct RequestExtras<'a> {
    system: Option<&'a Value>,
    tools: Option<&'a [Value]>,
}

/// A session locked for one call.
type Locked<'a> = MutexGuard<'a, Option<Session>>;

impl Daemon {
    /// A daemon over `workspace` with the effective base `config`.
    pub fn new(workspace: Workspace, config: Config) -> Result<Self, StorageError> {
        Ok(Daemon {
            offloads: OffloadStore::new(&workspace),
            sessions: SessionStore::new(&workspace),
            archive: DialogArchive::new(&workspace, &config.dialog_path)?,
            memory: MemoryFiles::new(&workspace),
            completing_clients: Mutex::default(),
            watchers: Mutex::new(HashMap::new()),
            workspace,
            config,
            live: Mutex::new(HashMap::new()),
            gate: RwLock::new(()),
        })
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// `initialize`.
    pub fn initialize(
        &self,
        params: InitializeParams,
        client: Option<ClientHandle>,
        methods: Vec<String>,
    ) -> InitializeResult {
        if let Some(client) = client {
            let mut completing = self.completing_clients.lock().unwrap_or_else(|p| p.into_inner());
            if params.capabilities.summarizer_complete {
                completing.insert(client.connection_id());
            } else {
                completing.remove(&client.connection_id());
            }
        }
        if let Some(info) = &params.client_info {
            tracing::info!(client = %info, "initialize");
        }
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

    fn effective_config(&self, overrides: Option<&serde_json::Map<String, Value>>) -> Result<Config, RpcError> {
        match overrides {
            Some(overrides) => apply_overrides(&self.config, overrides)
                .map_err(|(field, why)| RpcError::invalid_params(&format!("config.{field}"), why)),
            None => Ok(self.config.clone()),
        }
    }

    /// Locks a session, loading it from its log on first use. `None` inside means no such session.
    fn lock<'a>(&self, slot: &'a SessionSlot, id: &str) -> Result<Locked<'a>, RpcError> {
        SessionStore::validate_id(id).map_err(|e| RpcError::invalid_params("session_id", e))?;
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = self.load_session(id)?;
        }
        Ok(guard)
    }

    /// `context.prepare`: the whole pre-reasoning hook.
    pub fn prepare(
        &self,
        params: PrepareParams<Box<RawValue>>,
        client: Option<ClientHandle>,
    ) -> Result<PrepareResult<Vec<Arc<RawValue>>>, RpcError> {
        let config = self.effective_config(params.config.as_ref())?;
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
        if let Some(index) = incoming.iter().position(|m| !m.get().starts_with('{')) {
            let field = if is_full_list { "messages" } else { "append" };
            return Err(RpcError::invalid_params(
                &format!("{field}[{index}]"),
                "each message must be a JSON object",
            ));
        }
        let id = params.session_id;
        let slot = self.slot(&id);
        let mut guard = self.lock(&slot, &id)?;
        if guard.is_none() && !is_full_list {
            return Err(RpcError::UnknownSession(id));
        }
        let session = guard.get_or_insert_with(|| Session::new(None, self.offloads.clone()));
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
                format!("session {id} is in {held:?} format"),
            ));
        }

        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let mut actions = Vec::new();
        let started = Instant::now();
        let mut reconciliation = self.ingest(&id, session, incoming, is_full_list, declared, &config, &mut actions)?;
        let mut pending_writes = reconciliation.durable.take();
        let ingested = started.elapsed();

        let extras = RequestExtras {
            system: params.system.as_ref(),
            tools: params.tools.as_deref(),
        };
        let counter = TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
        let mut usage = self.usage(session, &config, &counter, &extras, false);
        let counted = started.elapsed();
        let mut over_limit_reason: Option<String> = None;
        let retry_futile = session
            .futile_compaction_at
            .is_none_or(|at| usage.compactable >= at + config.summary_budget_tokens());
        if config.compact_enabled && usage.total >= config.compact_threshold_tokens() && !retry_futile {
            over_limit_reason = Some(
                "an earlier compaction of this session could not make the request smaller; it is tried again once a summary's worth of new messages has accrued".into(),
            );
        }
        if config.compact_enabled && usage.total >= config.compact_threshold_tokens() && retry_futile {
            let how = CompactionRequest {
                instruction: None,
                manual: false,
                client: client.as_ref(),
                pending_writes: Some(&mut pending_writes),
            };
            match self.compact(&id, session, &config, &counter, &extras, how) {
                Ok(Some(report)) => actions.push(Action::Compacted(report)),
                Ok(None) => {
                    over_limit_reason = Some(
                        "nothing before the newest turn can be compacted without separating a tool call from its result or an assistant reply from its user message".into(),
                    )
                }
                Err(CompactError::Summarize(reason)) => actions.push(Action::CompactionFailed { reason }),
                Err(CompactError::Futile(reason)) => {
                    let session = guard.as_mut().expect("session present");
                    session.futile_compaction_at = Some(usage.compactable);
                    actions.push(Action::CompactionFailed { reason: reason.clone() });
                    over_limit_reason = Some(reason);
                }
                Err(CompactError::Rpc(e)) => {
                    self.forget(&mut guard);
                    return Err(e);
                }
            }
            usage = self.usage(
                guard.as_mut().expect("session present"),
                &config,
                &counter,
                &extras,
                false,
            );
        }
        let session = guard.as_mut().expect("session present");
        // Last resort before giving up on the limit: recent tool results get the old-phase limit too.
        let squeeze = usage.total > config.max_input_length;
        if squeeze {
            usage = self.usage(session, &config, &counter, &extras, true);
        }
        let compacted = started.elapsed();
        let rendered = session.render(&config, squeeze);
        let (messages, output_hashes) = rendered.to_json();
        let recent_before = reconciliation.recent_start_before;
        for TruncatedMessage {
            position,
            index: entry_index,
            phase,
            texts,
        } in &rendered.truncated
        {
            let entry_index = *entry_index;
            let changed =
                entry_index >= reconciliation.first_new_index || (*phase == Phase::Old && *position >= recent_before);
            if !changed {
                continue;
            }
            for text in texts {
                if let Some(kept_bytes) = text.kept_bytes {
                    actions.push(Action::Truncated {
                        index: entry_index,
                        pointer: text.pointer.clone(),
                        phase: *phase,
                        file: text.file.clone(),
                        kept_bytes,
                        total_bytes: text.total_bytes,
                    });
                }
            }
        }
        actions.extend(rendered.repairs.iter().map(repair_action));
        drop(rendered);

        let over_limit = (usage.total > config.max_input_length).then(|| {
            format!(
                "the request is {} tokens, over max_input_length {}: system {}, tools {}, summary {}, messages {} ({}). Tool results are already cut to their limits.",
                usage.total,
                config.max_input_length,
                usage.system,
                usage.tools,
                usage.summary,
                usage.messages,
                over_limit_reason.as_deref().unwrap_or(
                    "the kept messages are the smallest tail that keeps tool calls with their results and the newest user message"
                ),
            )
        });
        if let Some(pending) = pending_writes
            && let Err(e) = pending.wait()
        {
            // Memory holds what the disk may not: start again from the log.
            self.forget(&mut guard);
            return Err(RpcError::Storage(e));
        }
        let session = guard.as_mut().expect("session present");
        session.forget_fresh_texts();
        session.peak_tokens = session.peak_tokens.max(usage.total);
        session.last_output = output_hashes;
        session.last_system = params.system.clone();
        session.last_tools = params.tools.clone();
        session.last_usage = Some(usage.clone());
        // After `last_usage`: the event carries this call's numbers, not the previous call's.
        self.publish(&id, session, "prepare", &actions);
        tracing::debug!(
            session = %id,
            ingest_ms = ms(ingested),
            count_ms = ms(counted - ingested),
            compact_ms = ms(compacted - counted),
            render_ms = ms(started.elapsed() - compacted),
            "prepared"
        );
        Ok(PrepareResult {
            session_id: id,
            format: format_or_default(session.format),
            messages,
            tokens: usage,
            actions,
            reconciliation: reconciliation.report,
            compact_summary: session.summary().cloned(),
            over_limit,
        })
    }

    /// Reconciles the received messages with the session, offloads the large texts of new
    /// ones, and logs them durably before the in-memory session changes.
    #[allow(clippy::too_many_arguments)]
    fn ingest(
        &self,
        id: &str,
        session: &mut Session,
        incoming: Vec<Box<RawValue>>,
        is_full_list: bool,
        declared: Option<MessageFormat>,
        config: &Config,
        actions: &mut Vec<Action>,
    ) -> Result<Ingested, RpcError> {
        let mut hashes = IncomingHashes::new(&incoming);
        let alignment = if is_full_list {
            session.align(&mut hashes, config)
        } else {
            Alignment::Extends { consumed: 0 }
        };
        let mut records = Vec::new();
        let (consumed, replaced) = match alignment {
            Alignment::Extends { consumed } => (consumed, 0),
            Alignment::DivergesAt { at } => {
                records.push(SessionRecord::Truncate { keep: at });
                (at, session.entries.iter().filter(|e| e.index >= at).count())
            }
            Alignment::Reset => {
                records.push(SessionRecord::Reset);
                (0, session.original_hashes.len())
            }
        };
        let new_text_hashes: Vec<Option<u128>> =
            (consumed..incoming.len()).map(|j| Some(hashes.text_hash(j))).collect();
        drop(hashes);
        let mut new_raws: Vec<Box<RawValue>> = incoming.into_iter().skip(consumed).collect();
        let parsed = map_weighted(
            &mut new_raws,
            |_, raw| raw.get().len(),
            |_, raw| serde_json::from_str::<Value>(raw.get()),
        )
        .into_iter()
        .collect::<Result<Vec<Value>, _>>()
        .map_err(|e| RpcError::invalid_params("messages", e))?;
        // Hashed from the parsed values: cheaper than from text, which must be unescaped.
        let new_hashes: Vec<MessageHash> = parsed.iter().map(MessageHash::of_value).collect();
        let new_messages = &parsed[..];
        let appended = new_messages.len();
        let format = declared.or(session.format).or_else(|| format::detect(new_messages));
        if format.is_some() && session.format.is_none() {
            records.insert(
                0,
                SessionRecord::Format {
                    format: format_or_default(format),
                },
            );
        }
        let processing_format = format_or_default(format);

        // What the session keeps of its live messages after a truncation or reset.
        let kept_live: &[Entry] = match alignment {
            Alignment::Extends { .. } => &session.entries,
            Alignment::DivergesAt { at } => {
                let n = session.entries.iter().take_while(|e| e.index < at).count();
                &session.entries[..n]
            }
            Alignment::Reset => &[],
        };
        let first_new_index = match alignment {
            Alignment::Extends { .. } => session.original_hashes.len(),
            Alignment::DivergesAt { at } => at,
            Alignment::Reset => 0,
        };
        // Which texts of the new messages must be offloaded, then all of them saved at once.
        let mut to_offload = Vec::new();
        for (position, message) in new_messages.iter().enumerate() {
            let earlier = || {
                new_messages[..position]
                    .iter()
                    .rev()
                    .chain(kept_live.iter().rev().map(|e| &e.message))
            };
            for text in format::result_texts(message, processing_format) {
                let Some(Value::String(full)) = message.pointer(&text.pointer) else {
                    continue;
                };
                let call = text
                    .call_id
                    .as_deref()
                    .and_then(|cid| format::find_call(earlier(), cid, processing_format));
                if offload::must_offload(full.len(), offload::classify(call.as_ref(), config), config) {
                    to_offload.push((position, text.pointer, full.as_str(), call));
                }
            }
        }
        let texts: Vec<&str> = to_offload.iter().map(|(_, _, full, _)| *full).collect();
        let plan = self.offloads.plan(&texts);
        let mut new_offloads: Vec<Vec<OffloadedText>> = vec![Vec::new(); new_messages.len()];
        for ((position, pointer, full, call), saved) in to_offload.into_iter().zip(&plan.saved) {
            let stats = TextStats::of(full);
            actions.push(Action::Offloaded {
                index: first_new_index + position,
                pointer: pointer.clone(),
                file: saved.rel_path.clone(),
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                newly_written: saved.newly_written,
            });
            new_offloads[position].push(OffloadedText {
                pointer,
                file: saved.rel_path.clone(),
                stats,
                call,
            });
        }
        // The texts leave their messages (moved, not copied): the files will hold them, and
        // until the call ends the entries keep them for rendering and compaction.
        let mut parsed = parsed;
        let mut offloaded_texts: Vec<Arc<String>> = Vec::with_capacity(plan.saved.len());
        let mut new_fresh: Vec<Vec<Arc<String>>> = vec![Vec::new(); parsed.len()];
        for (position, offloaded) in new_offloads.iter().enumerate() {
            for text in offloaded {
                let slot = parsed[position]
                    .pointer_mut(&text.pointer)
                    .expect("an offloaded text was found at its pointer");
                let Value::String(full) = std::mem::replace(slot, Value::String(String::new())) else {
                    unreachable!("only string texts are offloaded");
                };
                let full = Arc::new(full);
                offloaded_texts.push(full.clone());
                new_fresh[position].push(full);
            }
        }
        let mut new_entries = Vec::with_capacity(parsed.len());
        for (position, ((((message, hash), raw), offloaded), fresh)) in parsed
            .into_iter()
            .zip(new_hashes.iter().copied())
            .zip(new_raws)
            .zip(new_offloads)
            .zip(new_fresh)
            .enumerate()
        {
            let entry =
                Entry::new(first_new_index + position, hash, message, offloaded, Some(raw)).with_fresh_texts(fresh);
            records.push(SessionRecord::Message(entry.to_stored()));
            new_entries.push(entry);
        }
        // New offloaded texts are written, then the records that refer to them, on the
        // bulk-write thread: rendering and compaction meanwhile read the texts from memory,
        // and `prepare` waits for both before answering (and before a compaction logs
        // anything after these records). Without new files, only the fsync runs there.
        let durable = if plan.writes_nothing() {
            self.sessions.append_then_sync(id, &records)
        } else {
            let offloads = self.offloads.clone();
            let write_texts = move || {
                let texts: Vec<&str> = offloaded_texts.iter().map(|t| t.as_str()).collect();
                offloads.write(&plan, &texts)
            };
            self.sessions.append_in_background(id, records, write_texts).map(Some)
        }
        .map_err(RpcError::Storage)?;

        let recent_start_before = {
            let held: Vec<&Value> = kept_live.iter().map(|e| &e.message).collect();
            offload::recent_start(&held, processing_format, config.pruning_recent_n)
        };
        match alignment {
            Alignment::Extends { .. } => {}
            Alignment::DivergesAt { at } => {
                session.original_hashes.truncate(at);
                session.text_hashes.truncate(at);
                session.entries.retain(|e| e.index < at);
            }
            Alignment::Reset => {
                *session = Session::new(session.format, self.offloads.clone());
            }
        }
        session.original_hashes.extend_from_slice(&new_hashes);
        session.text_hashes.extend(new_text_hashes);
        session.entries.extend(new_entries);
        session.format = format;
        Ok(Ingested {
            durable,
            first_new_index,
            recent_start_before,
            report: Reconciliation {
                session_messages: session.original_hashes.len(),
                reused: consumed,
                appended,
                replaced,
            },
        })
    }

    /// Token usage per zone of the request the session would send now.
    fn usage(
        &self,
        session: &mut Session,
        config: &Config,
        counter: &TokenCounter,
        extras: &RequestExtras<'_>,
        squeeze: bool,
    ) -> TokenUsage {
        let per_message = session.count_tokens(counter, config, squeeze);
        let is_system = |m: &Value| m.get("role").and_then(Value::as_str) == Some("system");
        let (system_param, tools) = session.extras_tokens(extras.system, extras.tools, counter, config);
        let mut system = system_param;
        let mut conversation = Vec::with_capacity(per_message.len());
        for (entry, tokens) in session.entries.iter().zip(&per_message) {
            if is_system(&entry.message) {
                system += tokens;
            } else {
                conversation.push(*tokens);
            }
        }
        let summary = session.summary_tokens(counter, config);
        let messages: u64 = conversation.iter().sum();
        let reserve = config.reserve_tokens();
        let mut reserved = 0;
        for tokens in conversation.iter().rev() {
            if reserved + tokens > reserve {
                break;
            }
            reserved += tokens;
        }
        let total = system + tools + summary + messages;
        TokenUsage {
            system,
            tools,
            summary,
            compactable: messages - reserved,
            reserved,
            messages,
            total,
            limit: config.max_input_length,
            threshold: config.compact_threshold_tokens(),
            tokenizer: config.tokenizer,
        }
    }

    /// Compacts the older part of a session: summarise, log the start, archive the raw
    /// messages, log the end, then drop them from memory. `Ok(None)`: nothing to compact.
    fn compact(
        &self,
        id: &str,
        session: &mut Session,
        config: &Config,
        counter: &TokenCounter,
        extras: &RequestExtras<'_>,
        how: CompactionRequest<'_>,
    ) -> Result<Option<CompactionReport>, CompactError> {
        let before = self.usage(session, config, counter, extras, false);
        let tokens = session.count_tokens(counter, config, false);
        let format = format_or_default(session.format);
        let Some(plan) = plan_split(
            &session.rendered_entries(config, false),
            &tokens,
            format,
            config.reserve_tokens(),
        ) else {
            return Ok(None);
        };
        let span: Vec<Value> = plan
            .compact
            .iter()
            .map(|&p| session.entries[p].full_message(&self.offloads))
            .collect();
        let indices: Vec<usize> = plan.compact.iter().map(|&p| session.entries[p].index).collect();
        let input = SummaryInput {
            previous: session.summary(),
            messages: &span,
            indices: &indices,
            format,
            instruction: how.instruction,
            demonstration_prefixes: Some(&config.demonstration_prefixes),
            max_tokens: config.summary_budget_tokens(),
            counter,
        };
        let compaction_id = uuid::Uuid::new_v4().simple().to_string();
        let at = chrono::Utc::now();
        let archived_at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let archive_file = self.archive.file_for(&at.format("%Y-%m-%d").to_string());
        let removed: Vec<&Entry> = plan.compact.iter().map(|&p| &session.entries[p]).collect();
        let started = Instant::now();
        // The archive lines are encoded on another core while the summariser runs: for a
        // first pass over a long history each takes tens of milliseconds.
        let (summarized, encoded) = std::thread::scope(|scope| {
            let encoding = scope.spawn(|| {
                let lines = dialog_lines(id, &compaction_id, &archived_at, &removed, &span, &HashSet::new());
                self.archive.encode(&archive_file, &lines)
            });
            let summarized = self.summarize(id, config, &input, how.client);
            let encoded = encoding.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (summarized, encoded)
        });
        let (mut summary, summarizer) = summarized?;
        let encoded = encoded.map_err(storage)?;
        let summarize_ms = ms(started.elapsed());
        summary.archive = session.summary().map(|s| s.archive.clone()).unwrap_or_default();
        let compacted_tokens: u64 = plan.compact.iter().map(|&p| tokens[p]).sum();
        let summary_tokens = counter.count_text(&summary_message_text(&summary)) + 4;
        // A summary that is not smaller than what it replaces would only be run again on the
        // next call (a small window thrashing): an automatic compaction then changes nothing.
        // A manual one was asked for, and runs.
        if !how.manual && summary_tokens >= compacted_tokens + before.summary {
            return Err(CompactError::Futile(format!(
                "compaction skipped: the summary ({summary_tokens} tokens) would not be smaller than the {} tokens it replaces",
                compacted_tokens + before.summary
            )));
        }
        let begun = CompactionBegun {
            id: compaction_id,
            indices: plan.compact.iter().map(|&p| session.entries[p].index).collect(),
            summary,
            archive_file,
            at: archived_at,
            tokens_before: before.total,
            tokens_after: (before.total + summary_tokens).saturating_sub(compacted_tokens + before.summary),
            manual: how.manual,
            summarizer,
        };
        if let Some(pending) = how.pending_writes.and_then(Option::take) {
            pending.wait().map_err(storage)?;
        }
        self.sessions
            .append(id, &[SessionRecord::CompactionBegun(Box::new(begun.clone()))])
            .map_err(storage)?;
        let range = self.archive_compaction(&begun, encoded, &[]).map_err(storage)?;
        tracing::debug!(
            session = id,
            messages = begun.indices.len(),
            summarize_and_encode_ms = summarize_ms,
            archive_ms = ms(started.elapsed()) - summarize_ms,
            "compacted"
        );

        // Archived: the messages may leave memory. The log says so only with the done record
        // below; if that write fails the caller drops this session and the reload finishes it.
        let compacted: HashSet<usize> = begun.indices.iter().copied().collect();
        session.entries.retain(|e| !compacted.contains(&e.index));
        let previous = session.summary().cloned();
        let mut summary = begun.summary.clone();
        summary.add_archive_range(range.clone(), &begun.indices);
        session.set_summary(Some(summary));
        let mut begun = begun;
        // The size of the request returned next: with recent results cut to the old-phase
        // limit too when it is still over the window, as `prepare` will do.
        let mut after = self.usage(session, config, counter, extras, false);
        if after.total > config.max_input_length {
            after = self.usage(session, config, counter, extras, true);
        }
        begun.tokens_after = after.total;
        session.futile_compaction_at = None;
        let done = SessionRecord::CompactionDone {
            id: begun.id.clone(),
            range: range.clone(),
            tokens_after: Some(begun.tokens_after),
        };
        self.sessions.append(id, &[done]).map_err(storage)?;

        let report = report_of(&begun, Some(&range));
        if config.memory_enabled {
            self.remember(id, &begun, previous.as_ref(), session.summary());
        }
        session.compactions.push(CompactionInfo {
            begun,
            range: Some(range),
        });
        Ok(Some(report))
    }

    /// Runs the configured summariser. Model-backed ones never fail: they retry once and fall
    /// back to the extractive summary, saying so in the returned backend name.
    fn summarize(
        &self,
        session_id: &str,
        config: &Config,
        input: &SummaryInput<'_>,
        client: Option<&ClientHandle>,
    ) -> Result<(CompactSummary, String), CompactError> {
        let language = match config.summary_language {
            SummaryLanguage::En => Language::En,
            SummaryLanguage::Zh => Language::Zh,
        };
        let progress = {
            let client = client.cloned();
            let token = format!("compaction:{session_id}");
            move |stage: usize, stages: usize| {
                if let Some(client) = &client {
                    client.notify(
                        "$/progress",
                        serde_json::json!({"token": token, "value": {
                            "kind": "report",
                            "message": format!("summarising stage {stage} of {stages}"),
                            "percentage": (100 * stage.saturating_sub(1)) / stages.max(1),
                        }}),
                    );
                }
            }
        };
        let staged = |completer: Box<dyn Completer>| {
            LlmSummarizer::new(completer)
                .with_language(language)
                .with_input_budget(config.llm_input_budget_tokens)
                .with_max_output(config.llm_max_output_tokens)
                .with_progress(progress.clone())
                .summarize_reporting(input)
        };
        let extractive = |backend: &str| {
            ExtractiveSummarizer
                .summarize(input)
                .map(|s| (s, backend.to_owned()))
                .map_err(|e| CompactError::Summarize(e.to_string()))
        };
        match config.summarizer {
            SummarizerKind::Extractive => extractive("extractive"),
            SummarizerKind::Openai => Ok(staged(Box::new(OpenAiCompleter::from_config(config)))),
            SummarizerKind::Client => match client {
                Some(handle)
                    if self
                        .completing_clients
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(&handle.connection_id()) =>
                {
                    let timeout = Duration::from_secs_f64(config.llm_timeout_secs);
                    Ok(staged(Box::new(ClientCompleter::new(handle.clone(), timeout))))
                }
                _ => extractive("extractive (fallback: the client did not declare summarizer_complete)"),
            },
        }
    }

    /// Appends what a compaction learned since the previous one to the day's memory log. Derived data: a failure is
    /// logged, never fatal (the archive already holds everything).
    fn remember(
        &self,
        session_id: &str,
        begun: &CompactionBegun,
        previous: Option<&CompactSummary>,
        summary: Option<&CompactSummary>,
    ) {
        let Some(note) = summary.and_then(|s| memory_note(previous, s, session_id, &begun.at)) else {
            return;
        };
        let date = begun.at.get(..10).unwrap_or("unknown-date");
        if let Err(e) = self.memory.append_daily(date, &note) {
            tracing::warn!(session = session_id, "could not append to the memory log: {e}");
        }
    }

    /// Appends a compaction's `encoded` archive lines to the dialog archive and returns where
    /// its messages are, counting the lines an interrupted first attempt left `present`
    /// (line, index).
    fn archive_compaction(
        &self,
        begun: &CompactionBegun,
        encoded: EncodedLines,
        present: &[(usize, usize)],
    ) -> Result<ArchiveRange, StorageError> {
        let mut first_line = present.iter().map(|(line, _)| *line).min();
        let mut last_line = present.iter().map(|(line, _)| *line).max();
        if !encoded.is_empty() {
            let appended = self.archive.append_encoded(&begun.archive_file, encoded)?;
            first_line = Some(first_line.map_or(appended.start_line, |l| l.min(appended.start_line)));
            last_line = Some(last_line.map_or(appended.end_line, |l| l.max(appended.end_line)));
        }
        Ok(ArchiveRange {
            file: begun.archive_file.clone(),
            start_line: first_line.unwrap_or(0),
            end_line: last_line.unwrap_or(0),
            first_index: begun.indices.first().copied().unwrap_or(0),
            last_index: begun.indices.last().copied().unwrap_or(0),
            messages: begun.indices.len(),
        })
    }

    /// Drops a session from memory so the next call reloads it from its log (after a failed
    /// write, memory and disk may disagree; the log is the truth).
    fn forget(&self, guard: &mut Locked<'_>) {
        **guard = None;
    }

    /// `context.compact`: compact now, everything but the reserve.
    pub fn compact_now(&self, params: CompactParams, client: Option<ClientHandle>) -> Result<CompactResult, RpcError> {
        let config = self.effective_config(params.config.as_ref())?;
        let slot = self.slot(&params.session_id);
        let mut guard = self.lock(&slot, &params.session_id)?;
        let Some(session) = guard.as_mut() else {
            return Err(RpcError::UnknownSession(params.session_id));
        };
        let counter = TokenCounter::new(config.tokenizer, config.token_count_estimate_divisor);
        // A manual compaction counts the request as the last `context.prepare` sent it.
        let (system, tools) = (session.last_system.clone(), session.last_tools.clone());
        let extras = RequestExtras {
            system: system.as_ref(),
            tools: tools.as_deref(),
        };
        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        let how = CompactionRequest {
            instruction: params.instruction.as_deref(),
            manual: true,
            client: client.as_ref(),
            pending_writes: None,
        };
        let outcome = self.compact(&params.session_id, session, &config, &counter, &extras, how);
        let compaction = match outcome {
            Ok(report) => report,
            Err(CompactError::Summarize(reason) | CompactError::Futile(reason)) => {
                return Err(RpcError::SummarizeFailed(reason));
            }
            Err(CompactError::Rpc(e)) => {
                self.forget(&mut guard);
                return Err(e);
            }
        };
        let session = guard.as_mut().expect("session present");
        if let Some(report) = &compaction {
            session.last_usage = Some(self.usage(session, &config, &counter, &extras, false));
            self.publish(
                &params.session_id,
                session,
                "compact",
                &[Action::Compacted(report.clone())],
            );
        }
        Ok(CompactResult {
            session_id: params.session_id,
            compacted: compaction.as_ref().map_or(0, |c| c.messages),
            compaction,
            summary: session.summary().cloned(),
            summary_text: session.summary_text().map(str::to_owned),
        })
    }

    /// `context.sessions`.
    pub fn sessions(&self) -> Result<SessionsResult, RpcError> {
        let stored = self.sessions.list().map_err(RpcError::Storage)?;
        let live: HashMap<String, SessionSlot> = self.live.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let sessions = stored
            .into_iter()
            .map(|session_id| {
                let slot = live.get(&session_id).cloned();
                let guard = slot.as_ref().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()));
                match guard.as_ref().and_then(|g| g.as_ref()) {
                    Some(session) => SessionSummary {
                        live: true,
                        messages: Some(session.entries.len()),
                        tokens: session.last_usage.as_ref().map(|u| u.total),
                        pressure: session.last_usage.as_ref().map(TokenUsage::pressure),
                        compactions: Some(session.compactions.len()),
                        session_id: session_id.clone(),
                    },
                    None => SessionSummary {
                        session_id: session_id.clone(),
                        live: false,
                        messages: None,
                        tokens: None,
                        pressure: None,
                        compactions: None,
                    },
                }
            })
            .collect();
        Ok(SessionsResult { sessions })
    }

    /// `context.watch`: events of the session go to this connection from now on.
    pub fn watch(&self, params: WatchParams, client: Option<ClientHandle>) -> Result<WatchResult, RpcError> {
        SessionStore::validate_id(&params.session_id).map_err(|e| RpcError::invalid_params("session_id", e))?;
        let Some(client) = client else {
            return Err(RpcError::invalid_params(
                "session_id",
                "this transport cannot push events",
            ));
        };
        let mut watchers = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        let list = watchers.entry(params.session_id).or_default();
        list.retain(ClientHandle::is_connected);
        list.push(client);
        Ok(WatchResult { watching: true })
    }

    /// Tells the session's watchers what a call just did.
    fn publish(&self, id: &str, session: &Session, kind: &str, actions: &[Action]) {
        let watchers = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(list) = watchers.get(id).filter(|l| !l.is_empty()) else {
            return;
        };
        let tokens = session.last_usage.clone().unwrap_or_default();
        let event = ContextEvent {
            session_id: id.to_owned(),
            kind: kind.to_owned(),
            pressure: tokens.pressure(),
            tokens,
            messages: session.entries.len(),
            compactions: session.compactions.len(),
            actions: actions.iter().map(action_kind).collect(),
        };
        let params = serde_json::to_value(&event).unwrap_or_default();
        for client in list {
            client.notify("context.event", params.clone());
        }
    }

    /// `context.inspect`.
    pub fn inspect(&self, params: InspectParams) -> Result<InspectResult, RpcError> {
        let slot = self.slot(&params.session_id);
        let guard = self.lock(&slot, &params.session_id)?;
        let Some(session) = guard.as_ref() else {
            return Err(RpcError::UnknownSession(params.session_id));
        };
        let tokens = session.last_usage.clone().unwrap_or_else(|| TokenUsage {
            limit: self.config.max_input_length,
            threshold: self.config.compact_threshold_tokens(),
            tokenizer: self.config.tokenizer,
            ..TokenUsage::default()
        });
        Ok(InspectResult {
            session_id: params.session_id,
            format: session.format,
            pressure: tokens.pressure(),
            tokens,
            messages: session.entries.len(),
            archived_messages: session.archived_count(),
            summary: session.summary().cloned(),
            offloaded: session
                .entries
                .iter()
                .flat_map(|e| {
                    e.offloaded.iter().map(|o| OffloadedResult {
                        index: e.index,
                        pointer: o.pointer.clone(),
                        file: o.file.clone(),
                        total_bytes: o.stats.total_bytes,
                        total_lines: o.stats.total_lines,
                    })
                })
                .collect(),
            compactions: session
                .compactions
                .iter()
                .map(|c| report_of(&c.begun, c.range.as_ref()))
                .collect(),
            peak_tokens: session.peak_tokens,
        })
    }

    /// Restores a stored message: the message as logged (offloaded texts empty, see
    /// [`Entry::message`]) and what is known of its offloaded texts.
    fn restore(stored: StoredMessage, format: MessageFormat, earlier: &[Entry]) -> (Value, Vec<OffloadedText>) {
        let message = stored.message;
        let mut offloaded = Vec::with_capacity(stored.offloads.len());
        for o in stored.offloads {
            let call_id = format::result_texts(&message, format)
                .into_iter()
                .find(|t| t.pointer == o.pointer)
                .and_then(|t| t.call_id);
            let call =
                call_id.and_then(|cid| format::find_call(earlier.iter().rev().map(|e| &e.message), &cid, format));
            offloaded.push(OffloadedText {
                pointer: o.pointer,
                file: o.file,
                stats: TextStats {
                    total_bytes: o.total_bytes,
                    total_lines: o.total_lines,
                },
                call,
            });
        }
        (message, offloaded)
    }

    /// Loads a session from its log, restoring offloaded texts and finishing a compaction a
    /// crash interrupted.
    fn load_session(&self, id: &str) -> Result<Option<Session>, RpcError> {
        let Some(log) = self.sessions.load(id).map_err(RpcError::Storage)? else {
            return Ok(None);
        };
        let format = format_or_default(log.format);
        let mut session = Session::new(log.format, self.offloads.clone());
        session.original_hashes = log.original_hashes.iter().map(|h| stored_hash(h)).collect();
        session.text_hashes = vec![None; session.original_hashes.len()];
        for (index, stored) in log.messages {
            let logged_hash = stored.hash.parse::<MessageHash>().ok();
            let (message, offloaded) = Self::restore(stored, format, &session.entries);
            let mut entry = Entry::new(index, session.original_hashes[index], message, offloaded, None);
            // A log written by an older satchel holds another kind of hash: hash the message again.
            if logged_hash.is_none() {
                entry.hash = MessageHash::of_value(&entry.full_message(&self.offloads));
                session.original_hashes[index] = entry.hash;
            }
            session.entries.push(entry);
        }
        let mut summary = log.summary;
        session.compactions = log.compactions;
        if let Some((begun, removed)) = log.pending {
            let removed: Vec<Entry> = removed
                .into_iter()
                .map(|(index, stored)| {
                    let hash = stored_hash(&stored.hash);
                    let (message, offloaded) = Self::restore(stored, format, &[]);
                    Entry::new(index, hash, message, offloaded, None)
                })
                .collect();
            let full: Vec<Value> = removed.iter().map(|e| e.full_message(&self.offloads)).collect();
            // The first attempt may have written some lines: find them by compaction id.
            let present = self
                .archive
                .lines_of(&begun.archive_file, id, &begun.id)
                .map_err(RpcError::Storage)?;
            let done: HashSet<usize> = present.iter().map(|(_, index)| *index).collect();
            let removed: Vec<&Entry> = removed.iter().collect();
            let lines = dialog_lines(id, &begun.id, &begun.at, &removed, &full, &done);
            let encoded = self
                .archive
                .encode(&begun.archive_file, &lines)
                .map_err(RpcError::Storage)?;
            let range = self
                .archive_compaction(&begun, encoded, &present)
                .map_err(RpcError::Storage)?;
            self.sessions
                .append(
                    id,
                    &[SessionRecord::CompactionDone {
                        id: begun.id.clone(),
                        range: range.clone(),
                        tokens_after: None,
                    }],
                )
                .map_err(RpcError::Storage)?;
            if let Some(summary) = &mut summary {
                summary.add_archive_range(range.clone(), &begun.indices);
            }
            tracing::warn!(session = id, compaction = %begun.id, "finished a compaction interrupted by a crash");
            session.compactions.push(CompactionInfo {
                begun,
                range: Some(range),
            });
        }
        session.set_summary(summary);
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

    /// Removes offload files older than the retention that no live message refers to.
    pub fn sweep(&self, now: SystemTime) -> Result<SweepReport, StorageError> {
        let _gate = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let referenced = self.sessions.referenced_files()?;
        let retention = Duration::from_secs_f64(self.config.offload_retention_days * 86_400.0);
        self.offloads.sweep(now, retention, &referenced)
    }
}

/// Why and how a compaction runs.
struct CompactionRequest<'a> {
    /// Steers the summary (`context.compact`).
    instruction: Option<&'a str>,
    /// Requested by `context.compact`.
    manual: bool,
    /// The calling connection, for the `client` summariser and `$/progress`.
    client: Option<&'a ClientHandle>,
    /// The call's own writes, still running: they must be done before the compaction logs
    /// anything after them.
    pending_writes: Option<&'a mut Option<PendingSync>>,
}

/// What ingesting a call's messages did.
struct Ingested {
    /// The call's writes (its offloaded texts, then its session log records), running on the
    /// background threads; the call is answered after them.
    durable: Option<PendingSync>,
    /// Original index of the first message new in this call.
    first_new_index: usize,
    /// Start of the recent window among the live messages before this call.
    recent_start_before: usize,
    /// The counts for the client.
    report: Reconciliation,
}

/// Why a compaction did not happen.
enum CompactError {
    /// The summariser failed: nothing changed.
    Summarize(String),
    /// The summary would not be smaller than what it replaces: nothing changed.
    Futile(String),
    /// Storage failed.
    Rpc(RpcError),
}

/// Milliseconds, for logs.
/// The dialog archive lines of compacted messages: `full[i]` is the full message of
/// `removed[i]`; messages whose index is in `skip` are already archived.
fn dialog_lines<'a>(
    session_id: &str,
    compaction_id: &str,
    archived_at: &str,
    removed: &[&Entry],
    full: &'a [Value],
    skip: &HashSet<usize>,
) -> Vec<DialogLine<&'a Value>> {
    removed
        .iter()
        .zip(full)
        .filter(|(e, _)| !skip.contains(&e.index))
        .map(|(e, message)| DialogLine {
            session_id: session_id.to_owned(),
            index: e.index,
            compaction_id: compaction_id.to_owned(),
            archived_at: archived_at.to_owned(),
            message,
            offloads: e
                .offloaded
                .iter()
                .map(|o| DialogOffload {
                    pointer: o.pointer.clone(),
                    file: o.file.clone(),
                })
                .collect(),
        })
        .collect()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// A hash read from a session log. One in an older form cannot be compared with today's
/// hashes: it becomes a hash no message has, so that message counts as changed if resent.
fn stored_hash(stored: &str) -> MessageHash {
    stored
        .parse()
        .unwrap_or_else(|_| MessageHash::of_value(&Value::String(format!("unrecognised stored hash {stored}"))))
}

fn storage(e: StorageError) -> CompactError {
    CompactError::Rpc(RpcError::Storage(e))
}

fn report_of(begun: &CompactionBegun, range: Option<&ArchiveRange>) -> CompactionReport {
    CompactionReport {
        id: begun.id.clone(),
        at: begun.at.clone(),
        manual: begun.manual,
        messages: begun.indices.len(),
        tokens_before: begun.tokens_before,
        tokens_after: begun.tokens_after,
        archive: range.cloned(),
        summarizer: begun.summarizer.clone(),
    }
}

/// The wire name of an action's kind.
fn action_kind(action: &Action) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

fn repair_action(repair: &Repair) -> Action {
    let (index, kind, call_id) = match repair {
        Repair::SyntheticResult { index, call_id } => (*index, "synthetic_result", Some(call_id.clone())),
        Repair::DroppedOrphanResult { index, call_id } => (*index, "dropped_orphan_result", Some(call_id.clone())),
        Repair::MergedSameRole { index } => (*index, "merged_same_role", None),
        Repair::MovedResultsFirst { index } => (*index, "moved_results_first", None),
        Repair::InsertedLeadingUser => (0, "inserted_leading_user", None),
    };
    Action::Repaired {
        index,
        repair: kind.to_owned(),
        call_id,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use satchel_core::format::check_pairs;
    use serde_json::json;

    /// Random agent conversations in both formats: user turns, tool loops with parallel calls
    /// and outputs from tiny to huge, unanswered calls, and very large single user messages.
    fn conversation() -> impl Strategy<Value = (Vec<Value>, MessageFormat)> {
        let step = (0u8..5, 1usize..4, 0usize..40_000, any::<bool>());
        (prop::collection::vec(step, 1..25), any::<bool>()).prop_map(|(steps, anthropic)| {
            let format = if anthropic { MessageFormat::Anthropic } else { MessageFormat::Openai };
            let mut m = vec![json!({"role": "user", "content": "fix the build in src/main.rs"})];
            let mut id = 0;
            for (kind, calls, size, answer) in steps {
                let last_is_user_text =
                    m.last().is_some_and(|l| l["role"] == "user" && !format::has_tool_result(l, format));
                if kind == 0 && !last_is_user_text {
                    if m.last().is_some_and(|l| format::has_tool_result(l, format)) {
                        m.push(json!({"role": "assistant", "content": "done"}));
                    }
                    m.push(json!({"role": "user", "content": "x".repeat(size / 4 + 1)}));
                    continue;
                }
                let ids: Vec<String> = (0..calls).map(|_| { id += 1; format!("call_{id}") }).collect();
                let output = "line of output é\n".repeat(size / 17 + 1);
                match format {
                    MessageFormat::Openai => {
                        let tc: Vec<Value> = ids.iter().map(|i| json!({"id": i, "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}})).collect();
                        m.push(json!({"role": "assistant", "content": null, "tool_calls": tc}));
                        for i in ids.iter().filter(|_| answer) {
                            m.push(json!({"role": "tool", "tool_call_id": i, "content": output}));
                        }
                    }
                    MessageFormat::Anthropic => {
                        let tu: Vec<Value> = ids.iter().map(|i| json!({"type": "tool_use", "id": i, "name": "bash", "input": {"command": "make"}})).collect();
                        m.push(json!({"role": "assistant", "content": tu}));
                        let results: Vec<Value> = ids.iter().map(|i| json!({"type": "tool_result", "tool_use_id": i, "content": output})).collect();
                        m.push(json!({"role": "user", "content": if answer { json!(results) } else { json!("go on") }}));
                    }
                }
            }
            (m, format)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn prepare_fits_or_says_why_keeps_pairs_and_is_idempotent((messages, format) in conversation()) {
            let raw = |m: &Value| serde_json::value::to_raw_value(m).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let daemon = Daemon::new(Workspace::open(dir.path()).unwrap(), Config::default()).unwrap();
            let config = json!({"max_input_length": 4096, "summary_max_tokens": 500, "tokenizer": "estimate"});
            let mut last = None;
            for (i, message) in messages.iter().enumerate() {
                let params = PrepareParams {
                    session_id: "p".into(),
                    messages: (i == 0).then(|| vec![raw(message)]),
                    append: (i > 0).then(|| vec![raw(message)]),
                    format: FormatHint::Auto,
                    system: None,
                    tools: None,
                    config: config.as_object().cloned(),
                };
                let result = daemon.prepare(params, None).unwrap();
                let returned: Vec<Value> = serde_json::from_str(&serde_json::to_string(&result.messages).unwrap()).unwrap();
                prop_assert!(
                    result.tokens.total <= result.tokens.limit || result.over_limit.is_some(),
                    "over the limit without saying why: {:?}", result.tokens
                );
                prop_assert_eq!(check_pairs(&returned, format), Ok(()));
                let newest_user = messages[..=i].iter().rev().find(|m| satchel_core::compact::is_user_turn(m, format));
                if let Some(user) = newest_user {
                    let text = user["content"].as_str().unwrap_or_default();
                    prop_assert!(returned.iter().any(|m| m.to_string().contains(&serde_json::to_string(text).unwrap()[1..text.len().min(60) + 1])), "newest user message kept");
                }
                last = Some(result);
            }
            // Sending the same full history again changes nothing.
            let again = daemon.prepare(PrepareParams {
                session_id: "p".into(),
                messages: Some(messages.iter().map(raw).collect()),
                append: None,
                format: FormatHint::Auto,
                system: None,
                tools: None,
                config: config.as_object().cloned(),
            }, None).unwrap();
            let last = last.unwrap();
            prop_assert_eq!(again.reconciliation.appended, 0);
            prop_assert_eq!(serde_json::to_string(&again.messages).unwrap(), serde_json::to_string(&last.messages).unwrap());
            prop_assert!(!again.actions.iter().any(|a| matches!(a, Action::Compacted(_))));
        }
    }
}
