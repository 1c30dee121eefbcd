// Params and results of satchel's methods, written from ../../protocol/openrpc.json.
// `SCHEMA_FIELDS`, `ACTION_FIELDS`, `SCHEMA_ENUMS` and `METHODS` below list the same names as
// data: the compiler ties each list to its type, and test/protocol.test.mjs ties it to
// openrpc.json, so a protocol change fails the tests until these types follow it.

/** A chat message or Responses input item (OpenAI Chat, Anthropic or OpenAI Responses format); satchel returns unmanaged fields untouched. */
export type Message = { [key: string]: any };

export type FormatHint = 'auto' | 'openai' | 'anthropic' | 'openai-responses';
export type MessageFormat = 'openai' | 'anthropic' | 'openai-responses';
export type Tokenizer = 'o200k_base' | 'cl100k_base' | 'estimate';
export type SummarizerKind = 'extractive' | 'openai' | 'client' | 'upstream';
export type SummaryLanguage = 'en' | 'zh';
export type Pressure = 'low' | 'medium' | 'high' | 'critical';
export type IdentifierList = 'constraints' | 'files_read' | 'files_modified' | 'commands' | 'errors' | 'notes';
/** What a pin keeps. */
export type PinKind = 'message' | 'text' | 'result';
/** What kind of identifier a compaction dropped from the summary. */
export type DroppedKind = 'request' | 'constraint' | 'error' | 'file_modified' | 'command' | 'file_read';
export type Phase = 'recent' | 'old';
export type RepairKind =
  | 'synthetic_result'
  | 'dropped_orphan_result'
  | 'merged_same_role'
  | 'moved_results_first'
  | 'inserted_leading_user'
  | 'dropped_empty_text';
export type EventKind = 'prepare' | 'compact' | 'compaction_started';
export type ActionKind =
  | 'offloaded'
  | 'compacted'
  | 'compaction_failed'
  | 'repaired'
  | 'truncated'
  | 'pruned'
  | 'prompt_over_budget';
/** How a request over its threshold is made smaller: compact at once, or AceClaw's prune-first pipeline. */
export type ContextMode = 'qwenpaw' | 'aceclaw';
/** The path a truncation notice gives the agent's `read_file`: absolute (default) or workspace-relative. */
export type OffloadNoticePath = 'absolute' | 'relative';
/** How `memory.search` ranks: `auto` is hybrid when BM25 and vectors are both on, else whichever is. */
export type SearchMode = 'auto' | 'bm25' | 'vector' | 'hybrid';
/** Which ranking found a `memory.search` result. */
export type HitSource = 'bm25' | 'vector' | 'hybrid';
/** What a learning candidate is. */
export type CandidateKind = 'lesson' | 'rule' | 'preference' | 'correction';
/**
 * Where a learning candidate is in its lifecycle: `shadow` (never injected), `promoted` and
 * `in_use` (injected into the system prompt), `archived`, `demoted` (cooling down).
 */
export type CandidateState = 'shadow' | 'promoted' | 'in_use' | 'archived' | 'demoted';
/** Whether following a candidate helped (`candidates.feedback`). */
export type FeedbackOutcome = 'success' | 'failure';

/** Configuration keys; in a request every key is an optional override. */
export interface Config {
  max_input_length?: number;
  /** Tokens kept for the answer: every limit applies to `max_input_length - max_output_tokens`. */
  max_output_tokens?: number;
  context_mode?: ContextMode;
  /** `aceclaw`: prune (then compact if needed) over this share of the effective window. */
  prune_trigger_ratio?: number;
  /** `aceclaw`: pruning stubs old tool results until the request is under this share. */
  prune_target_ratio?: number;
  /** `aceclaw`: newest user turns pruning never touches. */
  prune_protected_turns?: number;
  /** `aceclaw`: characters of a pruned tool result kept before its marker. */
  prune_stub_chars?: number;
  /** Largest system-prompt section, in characters. */
  prompt_max_section_chars?: number;
  /** Largest assembled system prompt, in characters. */
  prompt_max_total_chars?: number;
  compact_enabled?: boolean;
  compact_threshold_ratio?: number;
  reserve_threshold_ratio?: number;
  /** Newest messages a compaction always keeps, whatever their tokens (0: the reserve alone decides). */
  compact_keep_recent_messages?: number;
  /** Share of the window the summary may fill (its budget grows with the window). */
  summary_window_share?: number;
  /** A cap on the summary's budget; 0: none. */
  summary_max_tokens?: number;
  demonstration_prefixes?: string[];
  summarizer?: SummarizerKind;
  summary_language?: SummaryLanguage;
  llm_base_url?: string;
  llm_model?: string;
  /** `summarizer: "upstream"`: the model asked at a proxied Anthropic Messages request's own upstream. */
  summarizer_upstream_model_anthropic?: string;
  /** `summarizer: "upstream"`: the model asked at a proxied OpenAI Chat or Responses request's own upstream. */
  summarizer_upstream_model_openai?: string;
  llm_api_key_env?: string;
  llm_timeout_secs?: number;
  llm_max_output_tokens?: number;
  llm_temperature?: number;
  llm_extra_headers?: Record<string, string>;
  llm_input_budget_tokens?: number;
  memory_enabled?: boolean;
  token_count_estimate_divisor?: number;
  tokenizer?: Tokenizer;
  dialog_path?: string;
  pruning_enabled?: boolean;
  pruning_recent_n?: number;
  pruning_phase_batch?: number;
  pruning_old_msg_max_bytes?: number;
  pruning_recent_msg_max_bytes?: number;
  pruning_slack_bytes?: number;
  pruning_tail_ratio?: number;
  markdown_recent_msg_max_bytes?: number;
  markdown_old_msg_max_bytes?: number;
  markdown_tool_names?: string[];
  markdown_file_extensions?: string[];
  read_file_tool_names?: string[];
  offload_retention_days?: number;
  offload_notice_path?: OffloadNoticePath;
  /** Add the agent-visible budget section `satchel:budget` to the system prompt. */
  budget_section_enabled?: boolean;
  /** With sections, add the `task-focus` section (it changes at every user message; off keeps the system prompt byte-stable). */
  task_focus_section_enabled?: boolean;
  /** Daemon-wide (ignored per request): sessions kept in memory; the least recently used beyond it leave memory. */
  max_live_sessions?: number;
  /** Daemon-wide (ignored per request): a session idle this long leaves memory (reloaded from its log when used). */
  session_idle_secs?: number;
  // Long-term memory: daemon-wide (set on the daemon, not per request).
  /** Index `MEMORY.md` and the Markdown files under `memory/`, and serve `memory.search` (the files work either way). */
  memory_index_enabled?: boolean;
  /** BM25 full-text search over the memory files (SQLite FTS5). */
  fts_enabled?: boolean;
  memory_store_backend?: string;
  /** More files or directories of Markdown to index beside `MEMORY.md` and `memory/`. */
  memory_extra_paths?: string[];
  /** Watch the memory files and re-index what changes. */
  memory_watch_enabled?: boolean;
  memory_watch_debounce_ms?: number;
  memory_watch_poll_ms?: number;
  /** `memory.search`'s default number of results. */
  memory_max_results?: number;
  /** `memory.search`'s default minimum score. */
  memory_min_score?: number;
  /** Weight of the vector score in hybrid search (BM25 gets the rest). */
  memory_vector_weight?: number;
  memory_candidate_multiplier?: number;
  /** Fold the recent daily logs into `MEMORY.md` once a day. */
  memory_merge_enabled?: boolean;
  /** When the daily merge runs, `HH:MM` local time. */
  memory_merge_time?: string;
  /** How many days of daily logs a merge reads. */
  memory_merge_days?: number;
  /** `auto`, `openai`, `local` or `none`. */
  embedding_backend?: string;
  embedding_base_url?: string;
  embedding_api_key_env?: string;
  embedding_model_name?: string;
  embedding_dimensions?: number;
  embedding_cache_enabled?: boolean;
  embedding_max_cache_size?: number;
  embedding_max_input_length?: number;
  embedding_max_batch_size?: number;
  embedding_timeout_secs?: number;
  /** Directory of a local sentence-embedding model (needs the `local-embeddings` build). */
  embedding_model_path?: string;
  /** Where `satchel proxy` listens (`HOST:PORT`). */
  proxy_listen?: string;
  /** Where the proxy forwards Anthropic requests. */
  proxy_upstream_anthropic?: string;
  /** Where the proxy forwards OpenAI requests. */
  proxy_upstream_openai?: string;
  /** The proxy's own bearer token (`[redacted]` when set). */
  proxy_token?: string;
  /** Learning candidates (`candidates.*`): promoted ones are sections of the system prompt (source type `candidates`). */
  candidates_enabled?: boolean;
  /** A compaction's new lessons (a failure and what fixed it) are observed as candidates. */
  candidates_from_compaction?: boolean;
}

export interface ClientCapabilities {
  /** The client answers `summarizer.complete` (see `SatchelClient.setSummarizer`). */
  summarizer_complete?: boolean;
  /** LSP's window capabilities: `workDoneProgress` asks for a compaction's `$/progress`. */
  window?: WindowCapabilities | null;
}

export interface WindowCapabilities {
  /** The client answers `window/workDoneProgress/create` and takes `$/progress`. */
  workDoneProgress?: boolean;
}

export interface InitializeParams {
  client_info?: unknown;
  capabilities?: ClientCapabilities;
}

export interface InitializeResult {
  server_name: string;
  server_version: string;
  protocol_version: string;
  workspace: string;
  /** The effective configuration: the daemon reports every key. */
  config: Required<Config>;
  methods: string[];
}

/**
 * One section of the system prompt, sent in `prepare`'s `sections`. Sections are assembled in
 * the order sent; over the budget the lowest `priority` (0–100) is cut first, `protected` ones
 * never. `source_type` (`memory`, `rules`, `git`, `journal`, `markdown-memory`, …) chooses the
 * focus boost; `paths` are the globs a `rules` section applies to.
 */
export interface PromptSection {
  key: string;
  content: string;
  priority: number;
  protected?: boolean;
  source_type?: string | null;
  /** `always-on` (default) or `task-local`. */
  scope?: string | null;
  reason?: string | null;
  paths?: string[];
}

/** The provider's real usage of a request, as read from the API response. */
export interface ProviderUsage {
  input_tokens: number;
}

/**
 * `prepare`'s `memory`: put the top `memory.search` hits for the newest user message into the
 * prompt as a section (key `memory:recall`, source type `memory`). `{}` takes the defaults.
 */
export interface MemoryRecall {
  /** At most this many hits (default 3). */
  max_results?: number | null;
  /** Hits scoring under this are left out (default 0.3). */
  min_score?: number | null;
  /** The section's priority, 0–100 (default 60). */
  priority?: number | null;
}

export interface PrepareParams {
  session_id: string;
  messages?: Message[] | null;
  append?: Message[] | null;
  /**
   * With `append`: the `reconciliation.session_messages` of the last reply. If the session holds
   * another count the call rejects with `StaleSession` and nothing is appended, so retrying an
   * `append` never adds the same messages twice.
   */
  expect_messages?: number | null;
  format?: FormatHint;
  system?: unknown;
  /** System-prompt sections, assembled after `system` under the budget into the result's `system`. */
  sections?: PromptSection[] | null;
  /** The provider's usage of the session's previous request: corrects satchel's counts. */
  usage?: ProviderUsage | null;
  /**
   * Recall long-term memory for the newest user message into the prompt (section `memory:recall`);
   * rejects with `MemoryUnavailable` when the daemon's memory search is off.
   */
  memory?: MemoryRecall | null;
  tools?: unknown[] | null;
  /** LSP's work-done token: a compaction's `$/progress` goes under it. */
  workDoneToken?: number | string;
  config?: Config | null;
}

export interface TokenUsage {
  system: number;
  tools: number;
  summary: number;
  /** A span `context.expand` brought back, carried by this request only. */
  expanded?: number;
  /** The pinned block after the summary (`context.pin`). */
  pinned?: number;
  compactable: number;
  reserved: number;
  messages: number;
  total: number;
  limit: number;
  threshold: number;
  tokenizer: Tokenizer;
}

export interface ArchiveRange {
  file: string;
  start_line: number;
  end_line: number;
  first_index: number;
  last_index: number;
  messages: number;
}

export interface CompactionReport {
  id: string;
  at: string;
  manual: boolean;
  messages: number;
  tokens_before: number;
  tokens_after: number;
  archive?: ArchiveRange | null;
  /** Further runs of lines, when a crash left the messages in more than one. */
  more_archive?: ArchiveRange[];
  /** `extractive`, `openai:<model>`, `client`, or `extractive (fallback: …)`. */
  summarizer: string;
  /** What the summary no longer names, most important first; `context.expand` brings it back. */
  dropped?: DroppedIdentifier[];
}

/** `context.pin`: exactly one of `message_index`, `text` and `result_id`. */
export interface PinParams {
  session_id: string;
  message_index?: number | null;
  text?: string | null;
  /** A tool result by the id its truncation notice shows (`r12`): kept whole. */
  result_id?: string | null;
  label?: string | null;
}

export interface UnpinParams {
  session_id: string;
  pin_id: string;
}

/** One pin: `in_block` once the request shows it after the summary; otherwise it is live, whole. */
export interface PinInfo {
  id: string;
  kind: PinKind;
  label?: string | null;
  message_index?: number | null;
  result_id?: string | null;
  in_block: boolean;
  chars: number;
}

export interface PinsResult {
  session_id: string;
  pin_id: string;
  pins: PinInfo[];
}

export interface PurgeParams {
  session_id: string;
  result_id: string;
}

export interface PurgeResult {
  session_id: string;
  result_id: string;
  file: string;
  total_bytes: number;
}

/** `context.expand`: exactly one of `compaction_id` and `archive`. */
export interface ExpandParams {
  session_id: string;
  compaction_id?: string | null;
  archive?: ExpandRange | null;
  /** Default a quarter of the window, never more than the room under the compaction threshold. */
  max_tokens?: number | null;
}

/** Lines of an archive file (`dialog/YYYY-MM-DD.jsonl`), 1-based, inclusive. */
export interface ExpandRange {
  file: string;
  start_line: number;
  end_line: number;
}

/** What the next `prepare` carries after the summary. */
export interface ExpandResult {
  session_id: string;
  archive: ArchiveRange;
  /** Further runs of lines, when a crash left the span's messages in more than one. */
  more_archive?: ArchiveRange[];
  messages: number;
  tokens: number;
  budget_tokens: number;
  /** Older messages of the span left out because they did not fit (whole turns). */
  left_out: number;
  truncated_results: number;
}

/** An identifier of a compacted span the summary no longer names. */
export interface DroppedIdentifier {
  kind: DroppedKind;
  text: string;
  index: number;
  mentions: number;
}

export interface ItemGroup {
  name: string;
  count: number;
}

export interface OmittedItems {
  list: IdentifierList;
  count: number;
  groups: ItemGroup[];
}

export interface CriticalContext {
  files_read: string[];
  files_modified: string[];
  commands: string[];
  errors: string[];
  notes: string[];
  /** Values found in a tool's output and used afterwards, each with where it was found. */
  findings?: string[];
  omitted?: OmittedItems[];
}

export interface ArchiveLine {
  file: string;
  line: number;
}

export interface UserRequest {
  text: string;
  chars: number;
  index: number;
  archived?: ArchiveLine | null;
  demonstration?: boolean;
}

export interface CompactSummary {
  goal: string[];
  constraints: string[];
  done: string[];
  in_progress: string[];
  blocked: string[];
  key_decisions: string[];
  next_steps: string[];
  critical_context: CriticalContext;
  archive: ArchiveRange[];
  instruction?: string | null;
  instruction_effect?: string | null;
  requests?: UserRequest[];
  /** Try-error lessons of the compacted spans: a failure and what fixed it (for the memory log). */
  lessons?: string[];
  /** The agent framework's template sentences found in the user's messages: not constraints; not rendered. */
  template?: string[];
}

export interface Reconciliation {
  session_messages: number;
  reused: number;
  appended: number;
  replaced: number;
}

export interface OffloadedAction {
  kind: 'offloaded';
  index: number;
  pointer: string;
  file: string;
  total_bytes: number;
  total_lines: number;
  newly_written: boolean;
}
export interface CompactedAction extends CompactionReport {
  kind: 'compacted';
}
export interface CompactionFailedAction {
  kind: 'compaction_failed';
  reason: string;
}
export interface RepairedAction {
  kind: 'repaired';
  index: number;
  repair: RepairKind;
  call_id?: string | null;
}
export interface TruncatedAction {
  kind: 'truncated';
  index: number;
  pointer: string;
  phase: Phase;
  file: string;
  kept_bytes: number;
  total_bytes: number;
}
/** What transient pruning (`context_mode: 'aceclaw'`) did to one request; the session keeps everything. */
export interface PruneReport {
  stubbed_results: number;
  removed_reasoning: number;
  tokens_before: number;
  tokens_after: number;
}
export interface PrunedAction extends PruneReport {
  kind: 'pruned';
}
/** The sections never cut (the client's system prompt, protected ones) alone exceed the prompt's budget: sent whole, every other section left out. */
export interface PromptOverBudgetAction {
  kind: 'prompt_over_budget';
  keys: string[];
  chars: number;
  max_total_chars: number;
}
export type Action =
  | OffloadedAction
  | CompactedAction
  | CompactionFailedAction
  | RepairedAction
  | TruncatedAction
  | PrunedAction
  | PromptOverBudgetAction;

// ---- request assembly: AceClaw's `context.inspect` shape, camelCase ----

/** What the newest user message is about. */
export interface RequestFocus {
  querySummary: string;
  activeFilePaths: string[];
  activeSymbols: string[];
  planSignals: string[];
}

/** The character budget of the system prompt. */
export interface PromptBudget {
  maxPerTierChars: number;
  maxTotalChars: number;
  budgetTokensEstimate: number;
}

/** One section of the assembled prompt. */
export interface SectionReport {
  key: string;
  sourceType: string;
  scopeType: string;
  inclusionReason: string;
  /** After the focus boost: the one truncation used. */
  priority: number;
  basePriority: number;
  protected: boolean;
  originalChars: number;
  finalChars: number;
  estimatedTokens: number;
  included: boolean;
  truncated: boolean;
  evidence: string[];
}

/** `inspect({ detail_key })`: a section's report with its text as assembled and as sent. */
export interface SectionDetail extends SectionReport {
  content: string;
  original_content: string;
}

/** How the system prompt of a request was assembled (`PrepareResult.prompt`). */
export interface PromptAssembly {
  sessionId: string;
  totalChars: number;
  estimatedTokens: number;
  contextWindowTokens: number;
  systemPromptSharePct: number;
  requestFocus: RequestFocus;
  budget: PromptBudget;
  truncatedSectionKeys: string[];
  sections: SectionReport[];
  /** Set when the protected sections alone exceed the budget (they are sent whole anyway). */
  overBudget?: string | null;
  /** Learned candidates (`candidates.*`) whose sections this prompt includes. */
  injectedCandidateIds?: string[];
}

export interface CalibrationSample {
  provider_tokens: number;
  counted_tokens: number;
}

/** How satchel's counts are corrected by the provider's reported usage (`context.usage`). */
export interface Calibration {
  /** Every count is multiplied by this (1 until a usage is reported; kept in [0.5, 2]). */
  factor: number;
  samples: number;
  last?: CalibrationSample | null;
}

/** Live numbers of a session, like AceClaw's `ContextMonitor`. */
export interface ContextMonitor {
  current_tokens: number;
  pressure_level: string;
  peak_tokens: number;
  compaction_count: number;
  pruned_only_count: number;
  phases_reached: string[];
  last_tokens_saved: number;
  total_tokens_saved: number;
}

export interface PrepareResult {
  session_id: string;
  format: MessageFormat;
  messages: Message[];
  tokens: TokenUsage;
  /** Tokens at the start of the request identical to the previous one's (tools, system, messages): what a prompt cache can reuse. */
  cache_stable_prefix_tokens: number;
  actions: Action[];
  reconciliation: Reconciliation;
  compact_summary?: CompactSummary | null;
  over_limit?: string | null;
  /** The system prompt to send, assembled from `system` and `sections` (a string when only sections were sent). */
  system?: unknown;
  /** How `system` was assembled; absent when the request had neither `system` nor `sections`. */
  prompt?: PromptAssembly | null;
}

export interface CompactParams {
  session_id: string;
  instruction?: string | null;
  workDoneToken?: number | string;
  config?: Config | null;
}

export interface CompactResult {
  session_id: string;
  compacted: number;
  compaction?: CompactionReport | null;
  summary?: CompactSummary | null;
  summary_text?: string | null;
}

export interface ReadParams {
  path: string;
  start_line?: number | null;
  byte_offset?: number | null;
  max_bytes?: number | null;
}

export interface ReadResult {
  path: string;
  content: string;
  byte_offset: number;
  start_line: number;
  end_line: number;
  next_line?: number | null;
  next_byte_offset?: number | null;
  eof: boolean;
  total_lines: number;
  total_bytes: number;
}

export interface InspectParams {
  session_id: string;
  /** Compute the request focus from this text instead of the session's newest user message. */
  query_hint?: string | null;
  /** Add the full text of this section as `detail`. */
  detail_key?: string | null;
}

export interface OffloadedResult {
  /** Stable id (`r12`) shown in the truncation notice: what `pin` and `purge` take. */
  id: string;
  index: number;
  pointer: string;
  file: string;
  total_bytes: number;
  total_lines: number;
  tool?: string | null;
  /** The phase it is rendered in now; absent while the session is not `loaded`. */
  phase?: Phase | null;
  /** Bytes really sent now (excerpt and notice); `total_bytes - sent_bytes` is the saving. */
  sent_bytes?: number | null;
  pinned?: boolean;
  purged?: boolean;
}

/** `tokens.messages` by role; the three add up to it. */
export interface MessageRoleTokens {
  user: number;
  assistant: number;
  tool_results: number;
}

export interface InspectResult {
  session_id: string;
  format?: MessageFormat | null;
  /** Prepared since the daemon loaded it; false: `tokens` are zeros until its next call. */
  loaded: boolean;
  tokens: TokenUsage;
  message_tokens: MessageRoleTokens;
  /** The `config` overrides of the session's last `context.prepare`. */
  config_overrides: Record<string, unknown>;
  pressure: Pressure;
  messages: number;
  archived_messages: number;
  summary?: CompactSummary | null;
  /** The token budget a compaction's summary is fitted to under the session's configuration. */
  summary_budget_tokens: number;
  offloaded: OffloadedResult[];
  pins?: PinInfo[];
  compactions: CompactionReport[];
  /** Largest request of this session since the daemon started. */
  peak_tokens: number;
  monitor: ContextMonitor;
  calibration: Calibration;
  // The PromptAssembly of the last request, flattened (AceClaw's shape); absent before a prepare.
  sessionId?: string;
  totalChars?: number;
  estimatedTokens?: number;
  contextWindowTokens?: number;
  systemPromptSharePct?: number;
  requestFocus?: RequestFocus;
  budget?: PromptBudget;
  truncatedSectionKeys?: string[];
  sections?: SectionReport[];
  overBudget?: string | null;
  injectedCandidateIds?: string[];
  /** The section named by `detail_key`. */
  detail?: SectionDetail | null;
  /** Lines of the workspace's candidate store that were skipped (bad signature, unparsable): never used. */
  rejected_candidates?: RejectedEntry[];
  /** How `satchel proxy` made the session; absent for a session of JSON-RPC clients. */
  origin?: SessionOrigin | null;
}

/** The provider API of a proxied session's agent and what named the session. */
export interface SessionOrigin {
  api: string;
  key_from: string;
  agent_compactions?: AgentCompaction[];
}

/** A compaction the agent asked its own model for, through the proxy. */
export interface AgentCompaction {
  at: string;
  messages: number;
}

/** `context.usage`: the provider's input tokens for the session's last `context.prepare`. */
export interface UsageParams {
  session_id: string;
  input_tokens: number;
}

/** `context.sessions` takes no params. */
export interface SessionsParams {}

export interface SessionSummary {
  session_id: string;
  /** Loaded in this daemon; only live sessions have the numbers below. */
  live: boolean;
  messages?: number | null;
  tokens?: number | null;
  pressure?: Pressure | null;
  compactions?: number | null;
}

export interface SessionsResult {
  sessions: SessionSummary[];
}

export interface WatchParams {
  session_id: string;
}

export interface WatchResult {
  watching: boolean;
}

/** The `context.event` notification a watcher receives after each prepare and compaction. */
export interface ContextEvent {
  session_id: string;
  /** The call that changed the session. */
  kind: EventKind;
  tokens: TokenUsage;
  pressure: Pressure;
  messages: number;
  compactions: number;
  /** Kinds of the actions the call took, in order. */
  actions: ActionKind[];
  /** The compaction this event starts (`compaction_started`) or reports (a call that compacted). */
  compaction?: CompactionEvent | null;
}

/** A compaction as `context.event` reports it: at its start, and when the call that ran it ends. */
export interface CompactionEvent {
  id?: string | null;
  manual: boolean;
  messages: number;
  tokens_before: number;
  tokens_after?: number | null;
  threshold: number;
  /** At most 5; the `compacted` action and inspect have them all. */
  dropped?: DroppedIdentifier[];
}

// ---- long-term memory: `memory.*` (paths are workspace-relative) ----

export interface MemoryWriteParams {
  /** `MEMORY.md`, or a `.md` file under `memory/` (e.g. `memory/2026-11-24.md`). */
  path: string;
  /** The whole new content. */
  content: string;
}

export interface MemoryAppendParams {
  /** `MEMORY.md`, or a `.md` file under `memory/`. */
  path: string;
  /** Appended as is; a newline goes first when the file does not end with one. */
  text: string;
}

/** `memory.write` and `memory.append`: the file after the call; it is searchable on return. */
export interface MemoryFileChange {
  path: string;
  bytes: number;
  lines: number;
  /** Chunks of the file (re)indexed by this call. */
  chunks_indexed: number;
  /** What went wrong without failing the call (e.g. the embedding endpoint is down: BM25 only for now). */
  warnings?: string[];
}

export interface MemoryGetParams {
  /** A memory file, or a file of a configured `memory_extra_paths` entry (as `memory.search` names it). */
  path: string;
  /** First line, 1-based (default 1). */
  start_line?: number | null;
  /** Last line, inclusive (default the last line). */
  end_line?: number | null;
}

export interface MemoryGetResult {
  path: string;
  start_line: number;
  /** Less than `start_line` when no line was returned. */
  end_line: number;
  total_lines: number;
  /** The lines, each with its newline. */
  text: string;
}

export interface MemorySearchParams {
  query: string;
  /** 1–100 (default `memory_max_results`, 5). */
  max_results?: number | null;
  /** 0–1 (default `memory_min_score`, 0.1). */
  min_score?: number | null;
  /** Default `auto`. */
  mode?: SearchMode | null;
}

/** One `memory.search` result: a chunk of a memory file (`memory.get` reads its lines). */
export interface MemoryHit {
  path: string;
  start_line: number;
  end_line: number;
  /** 0–1, higher is better. */
  score: number;
  /** The chunk's text (its head, when long). */
  snippet: string;
  source: HitSource;
}

export interface MemorySearchResult {
  /** Best first. */
  results: MemoryHit[];
  /** The ranking used (`auto` resolved; `bm25` when the embedding backend failed). */
  mode: SearchMode;
  warnings?: string[];
}

export interface MemoryMergeParams {
  /** Merge the daily logs up to and including this day, `YYYY-MM-DD` (default today, local time). */
  through?: string | null;
}

export interface MemoryMergeResult {
  /** Daily logs read. */
  merged: string[];
  /** Entries added to `MEMORY.md`. */
  added: number;
  /** Entries skipped because `MEMORY.md` already had them. */
  duplicates: number;
  /** The copy of the previous `MEMORY.md`, when it existed and changed. */
  backup?: string | null;
  /** Why the merge fell back to the extractive summariser (a model call that failed). */
  warnings?: string[];
  /** `extractive`, `openai` or `client`. */
  summarizer: string;
}

/** `memory.status` takes no params. */
export interface MemoryStatusParams {}

export interface MemoryStatusResult {
  /** The index file, e.g. `index/memory.sqlite`. */
  index_path: string;
  /** The search modes that are on: `bm25`, `vector`. */
  modes: SearchMode[];
  /** Files, chunks, vectors, bytes, when last indexed. */
  index: unknown;
  /** The file watcher: backend, roots, events seen, last error. */
  watcher: unknown;
  /** The embedding backend and its cache; `null` when there is none. */
  embedding: unknown;
  /** When the next daily merge runs (RFC 3339, local); absent or `null` when it is off. */
  next_merge?: string | null;
}

// ---- learning candidates: `candidates.*` (the workspace's signed store of lessons and rules) ----

/** The evidence of an observation: a `failure` and its `fix` add to the score (no single observation is promoted). */
export interface ObserveEvidence {
  failure?: string | null;
  fix?: string | null;
  note?: string | null;
}

export interface ObserveParams {
  /** The lesson or rule, short and imperative. */
  text: string;
  kind: CandidateKind;
  tags?: string[];
  /** Files it applies to (request focus boosts it when one is active). */
  files?: string[];
  /** Symbols it applies to (request focus boosts it when one is active). */
  symbols?: string[];
  evidence?: ObserveEvidence | null;
  /** The session it was observed in. */
  session_id?: string | null;
}

/** One observation's evidence. */
export interface CandidateEvidence {
  /** RFC 3339. */
  at: string;
  session_id?: string | null;
  failure?: string | null;
  fix?: string | null;
  note?: string | null;
}

/** A learning candidate; promoted ones are sections of the system prompt (key `candidate:<id>`). */
export interface Candidate {
  /** Stable id (`c1`), taken by `candidates.feedback` and `candidates.remove`. */
  id: string;
  text: string;
  kind: CandidateKind;
  tags?: string[];
  files?: string[];
  symbols?: string[];
  /** The session of its first observation. */
  source_session?: string | null;
  /** Oldest first (the most recent ones are kept). */
  evidence?: CandidateEvidence[];
  state: CandidateState;
  /** Effective score as of the last observe, feedback or evaluate. */
  score: number;
  observations: number;
  successes: number;
  failures: number;
  created_at: string;
  last_seen_at: string;
  state_since: string;
  /** End of the cooldown of a `demoted` candidate (RFC 3339). */
  cooldown_until?: string | null;
}

export interface ObserveResult {
  candidate: Candidate;
  /** True when the observation was merged into a similar recent candidate of the same kind. */
  merged: boolean;
}

export interface FeedbackParams {
  id: string;
  outcome: FeedbackOutcome;
}

export interface FeedbackResult {
  candidate: Candidate;
}

export interface ListParams {
  /** Only the candidates in this state; all when absent. */
  state?: CandidateState | null;
}

/** A line of the candidate store that was not loaded (bad signature, unparsable). */
export interface RejectedEntry {
  /** 1-based. */
  line: number;
  reason: string;
}

export interface ListResult {
  /** In store order. */
  candidates: Candidate[];
  rejected: RejectedEntry[];
}

/** `candidates.evaluate` takes no params. */
export interface EvaluateParams {}

/** One lifecycle transition. */
export interface StateChange {
  id: string;
  from: CandidateState;
  to: CandidateState;
  /** Why, with the numbers, e.g. `2 observations, score 2.00 >= 2.00`. */
  reason: string;
}

export interface EvaluateResult {
  /** In store order. */
  changes: StateChange[];
  /** Ids of the candidates removed after the idle days. */
  removed: string[];
}

export interface RemoveParams {
  id: string;
}

export interface RemoveResult {
  /** False when no candidate had that id. */
  removed: boolean;
}

/** Method name → [params, result]. */
export interface Methods {
  initialize: [InitializeParams, InitializeResult];
  'context.prepare': [PrepareParams, PrepareResult];
  'context.compact': [CompactParams, CompactResult];
  'context.read': [ReadParams, ReadResult];
  'context.inspect': [InspectParams, InspectResult];
  'context.sessions': [SessionsParams, SessionsResult];
  'context.watch': [WatchParams, WatchResult];
  'context.usage': [UsageParams, Calibration];
  'context.expand': [ExpandParams, ExpandResult];
  'context.pin': [PinParams, PinsResult];
  'context.unpin': [UnpinParams, PinsResult];
  'context.purge': [PurgeParams, PurgeResult];
  'memory.write': [MemoryWriteParams, MemoryFileChange];
  'memory.append': [MemoryAppendParams, MemoryFileChange];
  'memory.get': [MemoryGetParams, MemoryGetResult];
  'memory.search': [MemorySearchParams, MemorySearchResult];
  'memory.merge': [MemoryMergeParams, MemoryMergeResult];
  'memory.status': [MemoryStatusParams, MemoryStatusResult];
  'candidates.observe': [ObserveParams, ObserveResult];
  'candidates.feedback': [FeedbackParams, FeedbackResult];
  'candidates.list': [ListParams, ListResult];
  'candidates.evaluate': [EvaluateParams, EvaluateResult];
  'candidates.remove': [RemoveParams, RemoveResult];
}

/** `summarizer.complete`, a request satchel sends to the client (not in openrpc.json). */
export interface ChatMessage {
  role: string;
  content: string;
}
export interface SummarizerCompleteParams {
  messages: ChatMessage[];
  max_tokens: number;
}
export interface SummarizerCompleteResult {
  text: string;
}

// ---- the same names as data, checked by the compiler against the types above ----

/** `name` for a required field, `name?` for an optional one. */
type FieldSpec<T> = { [K in keyof T & string]-?: {} extends Pick<T, K> ? `${K}?` : K }[keyof T & string];
type Exactly<U, L extends readonly string[]> = [U] extends [L[number]] ? ([L[number]] extends [U] ? true : false) : false;
/** `exact<U>()([...])` compiles only when the list holds every member of U and nothing else. */
const exact =
  <U extends string>() =>
  <const L extends readonly string[]>(list: L, ..._exact: Exactly<U, L> extends true ? [] : [never]): readonly string[] =>
    list;
const fields = <T>() => exact<FieldSpec<T>>();

export const METHODS = exact<keyof Methods>()([
  'initialize', 'context.prepare', 'context.compact', 'context.read', 'context.inspect',
  'context.sessions', 'context.watch', 'context.usage', 'context.expand', 'context.pin',
  'context.unpin', 'context.purge', 'memory.write', 'memory.append', 'memory.get',
  'memory.search', 'memory.merge', 'memory.status', 'candidates.observe', 'candidates.feedback', 'candidates.list',
  'candidates.evaluate', 'candidates.remove',
]);

/** Fields of every object schema in openrpc.json (params, results and `$defs`), `?` = optional. */
export const SCHEMA_FIELDS: Record<string, readonly string[]> = {
  InitializeParams: fields<InitializeParams>()(['client_info?', 'capabilities?']),
  ClientCapabilities: fields<ClientCapabilities>()(['summarizer_complete?', 'window?']),
  WindowCapabilities: fields<WindowCapabilities>()(['workDoneProgress?']),
  InitializeResult: fields<InitializeResult>()(['server_name', 'server_version', 'protocol_version', 'workspace', 'config', 'methods']),
  Config: fields<Config>()([
    'max_input_length?', 'max_output_tokens?', 'context_mode?', 'prune_trigger_ratio?', 'prune_target_ratio?',
    'prune_protected_turns?', 'prune_stub_chars?', 'prompt_max_section_chars?', 'prompt_max_total_chars?',
    'compact_enabled?', 'compact_threshold_ratio?', 'reserve_threshold_ratio?', 'compact_keep_recent_messages?',
    'summary_window_share?', 'summary_max_tokens?', 'demonstration_prefixes?', 'summarizer?', 'summary_language?',
    'llm_base_url?', 'llm_model?', 'summarizer_upstream_model_anthropic?', 'summarizer_upstream_model_openai?',
    'llm_api_key_env?', 'llm_timeout_secs?',
    'llm_max_output_tokens?', 'llm_temperature?', 'llm_extra_headers?', 'llm_input_budget_tokens?', 'memory_enabled?',
    'token_count_estimate_divisor?', 'tokenizer?', 'dialog_path?', 'pruning_enabled?', 'pruning_recent_n?',
    'pruning_phase_batch?',
    'pruning_old_msg_max_bytes?', 'pruning_recent_msg_max_bytes?', 'pruning_slack_bytes?', 'pruning_tail_ratio?',
    'markdown_recent_msg_max_bytes?', 'markdown_old_msg_max_bytes?', 'markdown_tool_names?', 'markdown_file_extensions?',
    'read_file_tool_names?', 'offload_retention_days?', 'offload_notice_path?', 'budget_section_enabled?',
    'task_focus_section_enabled?',
    'max_live_sessions?',
    'session_idle_secs?',
    'memory_index_enabled?', 'fts_enabled?', 'memory_store_backend?', 'memory_extra_paths?', 'memory_watch_enabled?',
    'memory_watch_debounce_ms?', 'memory_watch_poll_ms?', 'memory_max_results?', 'memory_min_score?',
    'memory_vector_weight?', 'memory_candidate_multiplier?', 'memory_merge_enabled?', 'memory_merge_time?',
    'memory_merge_days?', 'embedding_backend?', 'embedding_base_url?', 'embedding_api_key_env?',
    'embedding_model_name?', 'embedding_dimensions?', 'embedding_cache_enabled?', 'embedding_max_cache_size?',
    'embedding_max_input_length?', 'embedding_max_batch_size?', 'embedding_timeout_secs?', 'embedding_model_path?',
    'proxy_listen?', 'proxy_upstream_anthropic?', 'proxy_upstream_openai?', 'proxy_token?',
    'candidates_enabled?', 'candidates_from_compaction?',
  ]),
  PrepareParams: fields<PrepareParams>()([
    'session_id', 'messages?', 'append?', 'expect_messages?', 'format?', 'system?', 'sections?', 'usage?', 'memory?',
    'tools?', 'workDoneToken?', 'config?',
  ]),
  MemoryRecall: fields<MemoryRecall>()(['max_results?', 'min_score?', 'priority?']),
  PromptSection: fields<PromptSection>()([
    'key', 'content', 'priority', 'protected?', 'source_type?', 'scope?', 'reason?', 'paths?',
  ]),
  ProviderUsage: fields<ProviderUsage>()(['input_tokens']),
  PrepareResult: fields<PrepareResult>()([
    'session_id', 'format', 'messages', 'tokens', 'cache_stable_prefix_tokens', 'actions', 'reconciliation',
    'compact_summary?', 'over_limit?',
    'system?', 'prompt?',
  ]),
  PromptAssembly: fields<PromptAssembly>()([
    'sessionId', 'totalChars', 'estimatedTokens', 'contextWindowTokens', 'systemPromptSharePct', 'requestFocus', 'budget',
    'truncatedSectionKeys', 'sections', 'overBudget?', 'injectedCandidateIds?',
  ]),
  RequestFocus: fields<RequestFocus>()(['querySummary', 'activeFilePaths', 'activeSymbols', 'planSignals']),
  PromptBudget: fields<PromptBudget>()(['maxPerTierChars', 'maxTotalChars', 'budgetTokensEstimate']),
  SectionReport: fields<SectionReport>()([
    'key', 'sourceType', 'scopeType', 'inclusionReason', 'priority', 'basePriority', 'protected', 'originalChars',
    'finalChars', 'estimatedTokens', 'included', 'truncated', 'evidence',
  ]),
  SectionDetail: fields<SectionDetail>()([
    'key', 'sourceType', 'scopeType', 'inclusionReason', 'priority', 'basePriority', 'protected', 'originalChars',
    'finalChars', 'estimatedTokens', 'included', 'truncated', 'evidence', 'content', 'original_content',
  ]),
  PruneReport: fields<PruneReport>()(['stubbed_results', 'removed_reasoning', 'tokens_before', 'tokens_after']),
  Calibration: fields<Calibration>()(['factor', 'samples', 'last?']),
  CalibrationSample: fields<CalibrationSample>()(['provider_tokens', 'counted_tokens']),
  ContextMonitor: fields<ContextMonitor>()([
    'current_tokens', 'pressure_level', 'peak_tokens', 'compaction_count', 'pruned_only_count', 'phases_reached',
    'last_tokens_saved', 'total_tokens_saved',
  ]),
  UsageParams: fields<UsageParams>()(['session_id', 'input_tokens']),
  TokenUsage: fields<TokenUsage>()([
    'system', 'tools', 'summary', 'expanded?', 'pinned?', 'compactable', 'reserved', 'messages', 'total', 'limit', 'threshold', 'tokenizer',
  ]),
  ArchiveRange: fields<ArchiveRange>()(['file', 'start_line', 'end_line', 'first_index', 'last_index', 'messages']),
  CompactionReport: fields<CompactionReport>()([
    'id', 'at', 'manual', 'messages', 'tokens_before', 'tokens_after', 'archive?', 'more_archive?', 'summarizer',
    'dropped?',
  ]),
  DroppedIdentifier: fields<DroppedIdentifier>()(['kind', 'text', 'index', 'mentions']),
  ExpandParams: fields<ExpandParams>()(['session_id', 'compaction_id?', 'archive?', 'max_tokens?']),
  ExpandRange: fields<ExpandRange>()(['file', 'start_line', 'end_line']),
  ExpandResult: fields<ExpandResult>()([
    'session_id', 'archive', 'more_archive?', 'messages', 'tokens', 'budget_tokens', 'left_out', 'truncated_results',
  ]),
  Reconciliation: fields<Reconciliation>()(['session_messages', 'reused', 'appended', 'replaced']),
  CompactSummary: fields<CompactSummary>()([
    'goal', 'constraints', 'done', 'in_progress', 'blocked', 'key_decisions', 'next_steps', 'critical_context', 'archive',
    'instruction?', 'instruction_effect?', 'requests?', 'lessons?', 'template?',
  ]),
  CriticalContext: fields<CriticalContext>()(['files_read', 'files_modified', 'commands', 'errors', 'notes', 'findings?', 'omitted?']),
  OmittedItems: fields<OmittedItems>()(['list', 'count', 'groups']),
  ItemGroup: fields<ItemGroup>()(['name', 'count']),
  UserRequest: fields<UserRequest>()(['text', 'chars', 'index', 'archived?', 'demonstration?']),
  ArchiveLine: fields<ArchiveLine>()(['file', 'line']),
  CompactParams: fields<CompactParams>()(['session_id', 'instruction?', 'workDoneToken?', 'config?']),
  CompactResult: fields<CompactResult>()(['session_id', 'compacted', 'compaction?', 'summary?', 'summary_text?']),
  ReadParams: fields<ReadParams>()(['path', 'start_line?', 'byte_offset?', 'max_bytes?']),
  ReadResult: fields<ReadResult>()([
    'path', 'content', 'byte_offset', 'start_line', 'end_line', 'next_line?', 'next_byte_offset?', 'eof', 'total_lines',
    'total_bytes',
  ]),
  InspectParams: fields<InspectParams>()(['session_id', 'query_hint?', 'detail_key?']),
  InspectResult: fields<InspectResult>()([
    'session_id', 'format?', 'loaded', 'tokens', 'message_tokens', 'config_overrides', 'pressure', 'messages',
    'archived_messages', 'summary?', 'summary_budget_tokens', 'offloaded', 'pins?', 'compactions', 'peak_tokens', 'monitor', 'calibration', 'sessionId?',
    'totalChars?', 'estimatedTokens?', 'contextWindowTokens?', 'systemPromptSharePct?', 'requestFocus?', 'budget?',
    'truncatedSectionKeys?', 'sections?', 'overBudget?', 'injectedCandidateIds?', 'detail?', 'rejected_candidates?',
    'origin?',
  ]),
  SessionOrigin: fields<SessionOrigin>()(['api', 'key_from', 'agent_compactions?']),
  AgentCompaction: fields<AgentCompaction>()(['at', 'messages']),
  MessageRoleTokens: fields<MessageRoleTokens>()(['user', 'assistant', 'tool_results']),
  OffloadedResult: fields<OffloadedResult>()([
    'id', 'index', 'pointer', 'file', 'total_bytes', 'total_lines', 'tool?', 'phase?', 'sent_bytes?', 'pinned?',
    'purged?',
  ]),
  PinParams: fields<PinParams>()(['session_id', 'message_index?', 'text?', 'result_id?', 'label?']),
  UnpinParams: fields<UnpinParams>()(['session_id', 'pin_id']),
  PinsResult: fields<PinsResult>()(['session_id', 'pin_id', 'pins']),
  PinInfo: fields<PinInfo>()(['id', 'kind', 'label?', 'message_index?', 'result_id?', 'in_block', 'chars']),
  PurgeParams: fields<PurgeParams>()(['session_id', 'result_id']),
  PurgeResult: fields<PurgeResult>()(['session_id', 'result_id', 'file', 'total_bytes']),
  SessionsParams: fields<SessionsParams>()([]),
  SessionsResult: fields<SessionsResult>()(['sessions']),
  SessionSummary: fields<SessionSummary>()(['session_id', 'live', 'messages?', 'tokens?', 'pressure?', 'compactions?']),
  WatchParams: fields<WatchParams>()(['session_id']),
  WatchResult: fields<WatchResult>()(['watching']),
  ContextEvent: fields<ContextEvent>()([
    'session_id', 'kind', 'tokens', 'pressure', 'messages', 'compactions', 'actions', 'compaction?',
  ]),
  CompactionEvent: fields<CompactionEvent>()([
    'id?', 'manual', 'messages', 'tokens_before', 'tokens_after?', 'threshold', 'dropped?',
  ]),
  MemoryWriteParams: fields<MemoryWriteParams>()(['path', 'content']),
  MemoryAppendParams: fields<MemoryAppendParams>()(['path', 'text']),
  MemoryFileChange: fields<MemoryFileChange>()(['path', 'bytes', 'lines', 'chunks_indexed', 'warnings?']),
  MemoryGetParams: fields<MemoryGetParams>()(['path', 'start_line?', 'end_line?']),
  MemoryGetResult: fields<MemoryGetResult>()(['path', 'start_line', 'end_line', 'total_lines', 'text']),
  MemorySearchParams: fields<MemorySearchParams>()(['query', 'max_results?', 'min_score?', 'mode?']),
  MemorySearchResult: fields<MemorySearchResult>()(['results', 'mode', 'warnings?']),
  MemoryHit: fields<MemoryHit>()(['path', 'start_line', 'end_line', 'score', 'snippet', 'source']),
  MemoryMergeParams: fields<MemoryMergeParams>()(['through?']),
  MemoryMergeResult: fields<MemoryMergeResult>()(['merged', 'added', 'duplicates', 'backup?', 'summarizer', 'warnings?']),
  MemoryStatusParams: fields<MemoryStatusParams>()([]),
  MemoryStatusResult: fields<MemoryStatusResult>()(['index_path', 'modes', 'index', 'watcher', 'embedding', 'next_merge?']),
  ObserveParams: fields<ObserveParams>()(['text', 'kind', 'tags?', 'files?', 'symbols?', 'evidence?', 'session_id?']),
  ObserveEvidence: fields<ObserveEvidence>()(['failure?', 'fix?', 'note?']),
  ObserveResult: fields<ObserveResult>()(['candidate', 'merged']),
  Candidate: fields<Candidate>()([
    'id', 'text', 'kind', 'tags?', 'files?', 'symbols?', 'source_session?', 'evidence?', 'state', 'score', 'observations',
    'successes', 'failures', 'created_at', 'last_seen_at', 'state_since', 'cooldown_until?',
  ]),
  CandidateEvidence: fields<CandidateEvidence>()(['at', 'session_id?', 'failure?', 'fix?', 'note?']),
  FeedbackParams: fields<FeedbackParams>()(['id', 'outcome']),
  FeedbackResult: fields<FeedbackResult>()(['candidate']),
  ListParams: fields<ListParams>()(['state?']),
  ListResult: fields<ListResult>()(['candidates', 'rejected']),
  RejectedEntry: fields<RejectedEntry>()(['line', 'reason']),
  EvaluateParams: fields<EvaluateParams>()([]),
  EvaluateResult: fields<EvaluateResult>()(['changes', 'removed']),
  StateChange: fields<StateChange>()(['id', 'from', 'to', 'reason']),
  RemoveParams: fields<RemoveParams>()(['id']),
  RemoveResult: fields<RemoveResult>()(['removed']),
};

/** Fields of each variant of `Action`, by `kind`. */
export const ACTION_FIELDS: Record<Action['kind'], readonly string[]> = {
  offloaded: fields<OffloadedAction>()(['kind', 'index', 'pointer', 'file', 'total_bytes', 'total_lines', 'newly_written']),
  compacted: fields<CompactedAction>()([
    'kind', 'id', 'at', 'manual', 'messages', 'tokens_before', 'tokens_after', 'archive?', 'more_archive?', 'summarizer',
    'dropped?',
  ]),
  compaction_failed: fields<CompactionFailedAction>()(['kind', 'reason']),
  repaired: fields<RepairedAction>()(['kind', 'index', 'repair', 'call_id?']),
  truncated: fields<TruncatedAction>()(['kind', 'index', 'pointer', 'phase', 'file', 'kept_bytes', 'total_bytes']),
  pruned: fields<PrunedAction>()(['kind', 'stubbed_results', 'removed_reasoning', 'tokens_before', 'tokens_after']),
  prompt_over_budget: fields<PromptOverBudgetAction>()(['kind', 'keys', 'chars', 'max_total_chars']),
};

/** Values of every string enum in openrpc.json. */
export const SCHEMA_ENUMS: Record<string, readonly string[]> = {
  FormatHint: exact<FormatHint>()(['auto', 'openai', 'anthropic', 'openai-responses']),
  MessageFormat: exact<MessageFormat>()(['openai', 'anthropic', 'openai-responses']),
  Tokenizer: exact<Tokenizer>()(['o200k_base', 'cl100k_base', 'estimate']),
  SummarizerKind: exact<SummarizerKind>()(['extractive', 'openai', 'client', 'upstream']),
  SummaryLanguage: exact<SummaryLanguage>()(['en', 'zh']),
  Pressure: exact<Pressure>()(['low', 'medium', 'high', 'critical']),
  Phase: exact<Phase>()(['recent', 'old']),
  IdentifierList: exact<IdentifierList>()(['constraints', 'files_read', 'files_modified', 'commands', 'errors', 'notes']),
  PinKind: exact<PinKind>()(['message', 'text', 'result']),
  DroppedKind: exact<DroppedKind>()(['request', 'constraint', 'error', 'file_modified', 'command', 'file_read']),
  RepairKind: exact<RepairKind>()([
    'synthetic_result', 'dropped_orphan_result', 'merged_same_role', 'moved_results_first', 'inserted_leading_user',
    'dropped_empty_text',
  ]),
  EventKind: exact<EventKind>()(['prepare', 'compact', 'compaction_started']),
  ActionKind: exact<ActionKind>()([
    'offloaded',
    'compacted',
    'compaction_failed',
    'repaired',
    'truncated',
    'pruned',
    'prompt_over_budget',
  ]),
  ContextMode: exact<ContextMode>()(['qwenpaw', 'aceclaw']),
  OffloadNoticePath: exact<OffloadNoticePath>()(['absolute', 'relative']),
  SearchMode: exact<SearchMode>()(['auto', 'bm25', 'vector', 'hybrid']),
  HitSource: exact<HitSource>()(['bm25', 'vector', 'hybrid']),
  CandidateKind: exact<CandidateKind>()(['lesson', 'rule', 'preference', 'correction']),
  CandidateState: exact<CandidateState>()(['shadow', 'promoted', 'in_use', 'archived', 'demoted']),
  FeedbackOutcome: exact<FeedbackOutcome>()(['success', 'failure']),
};
