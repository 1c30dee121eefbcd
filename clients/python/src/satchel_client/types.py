"""Typed shapes of satchel's params and results, for editors and type checkers.

Hand-written rather than generated, so the package needs no build step and no code generator;
``tests/test_protocol_types.py`` compares every class here with ``protocol/openrpc.json``
(keys, which keys are required, and each value's type), so a change to the protocol that is
not mirrored here fails the tests. At run time these are plain dicts: nothing is validated or
converted, and keys a newer daemon adds simply appear.

A key that the protocol lets satchel leave out is in a ``total=False`` class (Python 3.9 has
no ``NotRequired``). Field meanings are documented in ``protocol/openrpc.json``.
"""

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

# --- enumerations ---------------------------------------------------------------------------

MessageFormat = Literal["openai", "anthropic", "openai-responses"]
FormatHint = Literal["auto", "openai", "anthropic", "openai-responses"]
Tokenizer = Literal["o200k_base", "cl100k_base", "estimate"]
SummarizerKind = Literal["extractive", "openai", "client", "upstream"]
SummaryLanguage = Literal["en", "zh"]
Pressure = Literal["low", "medium", "high", "critical"]
Phase = Literal["recent", "old"]
PinKind = Literal["message", "text", "result"]
IdentifierList = Literal["constraints", "files_read", "files_modified", "commands", "errors", "notes"]
#: What kind of identifier a compaction dropped from the summary.
DroppedKind = Literal["request", "constraint", "error", "file_modified", "command", "file_read"]
RepairKind = Literal[
    "synthetic_result",
    "dropped_orphan_result",
    "merged_same_role",
    "moved_results_first",
    "inserted_leading_user",
    "dropped_empty_text",
]
EventKind = Literal["prepare", "compact", "compaction_started"]
ActionKind = Literal[
    "offloaded", "compacted", "compaction_failed", "repaired", "truncated", "pruned", "prompt_over_budget"
]
ContextMode = Literal["qwenpaw", "aceclaw"]
OffloadNoticePath = Literal["absolute", "relative"]
#: How ``memory.search`` ranks: ``auto`` is hybrid when BM25 and vectors are both on, else
#: whichever is.
SearchMode = Literal["auto", "bm25", "vector", "hybrid"]
#: Which ranking found a ``memory.search`` result.
HitSource = Literal["bm25", "vector", "hybrid"]
#: What a learning candidate is.
CandidateKind = Literal["lesson", "rule", "preference", "correction"]
#: Where a learning candidate is in its lifecycle: ``shadow`` (never injected), ``promoted``
#: and ``in_use`` (injected into the system prompt), ``archived``, ``demoted`` (cooling down).
CandidateState = Literal["shadow", "promoted", "in_use", "archived", "demoted"]
#: Whether following a candidate helped (``candidates.feedback``).
FeedbackOutcome = Literal["success", "failure"]

# --- params (the keyword arguments of the client's methods) ----------------------------------


class WindowCapabilities(TypedDict, total=False):
    """LSP's window capabilities: ``workDoneProgress`` asks for a compaction's ``$/progress``."""

    workDoneProgress: bool


class ClientCapabilities(TypedDict, total=False):
    summarizer_complete: bool
    window: Optional[WindowCapabilities]


class InitializeParams(TypedDict, total=False):
    client_info: Any
    capabilities: ClientCapabilities


class _PromptSectionRequired(TypedDict):
    key: str
    content: str
    priority: int


class PromptSection(_PromptSectionRequired, total=False):
    """One section of the system prompt, sent in ``prepare(sections=[...])``.

    Assembled in the order sent; under budget pressure the lowest ``priority`` (0–100) is cut
    first and ``protected`` sections never. ``source_type`` (``memory``, ``rules``, ``git``,
    ``journal``, ``markdown-memory``, …) chooses the focus boost; ``paths`` are the globs a
    ``rules`` section applies to.
    """

    protected: bool
    source_type: Optional[str]
    scope: Optional[str]
    reason: Optional[str]
    paths: List[str]


class ProviderUsage(TypedDict):
    """The provider's real usage of a request: ``prepare(usage=...)``."""

    input_tokens: int


class MemoryRecall(TypedDict, total=False):
    """``prepare(memory={...})``: put the top ``memory.search`` hits for the newest user message
    into the prompt as a section (key ``memory:recall``, source type ``memory``).

    ``{}`` takes the defaults: at most 3 hits, scoring at least 0.3, at priority 60 (0–100).
    """

    max_results: Optional[int]
    min_score: Optional[float]
    priority: Optional[int]


class _PrepareParamsRequired(TypedDict):
    session_id: str


class PrepareParams(_PrepareParamsRequired, total=False):
    messages: Optional[List[Any]]
    append: Optional[List[Any]]
    #: With ``append``: the ``reconciliation.session_messages`` of the last reply; another
    #: count held by the session makes the call fail with ``StaleSession`` (nothing appended).
    expect_messages: Optional[int]
    format: FormatHint
    system: Any
    #: System-prompt sections, assembled after ``system`` under the prompt budget; the
    #: result's ``system`` is the assembled prompt and ``prompt`` says how it was built.
    sections: Optional[List[PromptSection]]
    #: The provider's usage of the session's previous request: corrects satchel's counts.
    usage: Optional[ProviderUsage]
    #: Recall long-term memory for the newest user message into the prompt (section
    #: ``memory:recall``); raises ``MemoryUnavailable`` when memory search is off.
    memory: Optional[MemoryRecall]
    tools: Optional[List[Any]]
    #: LSP's work-done token: a compaction's ``$/progress`` goes under it.
    workDoneToken: Optional[Union[int, str]]
    config: Optional[Dict[str, Any]]


class _CompactParamsRequired(TypedDict):
    session_id: str


class CompactParams(_CompactParamsRequired, total=False):
    instruction: Optional[str]
    workDoneToken: Optional[Union[int, str]]
    config: Optional[Dict[str, Any]]


class _ReadParamsRequired(TypedDict):
    path: str


class ReadParams(_ReadParamsRequired, total=False):
    start_line: Optional[int]
    byte_offset: Optional[int]
    max_bytes: Optional[int]


class _InspectParamsRequired(TypedDict):
    session_id: str


class InspectParams(_InspectParamsRequired, total=False):
    #: A user message to compute the request focus from, instead of the session's newest.
    query_hint: Optional[str]
    #: A section whose full text (``detail``) the result should carry.
    detail_key: Optional[str]


class UsageParams(TypedDict):
    session_id: str
    input_tokens: int


class SessionsParams(TypedDict):
    pass


class WatchParams(TypedDict):
    session_id: str


class MemoryWriteParams(TypedDict):
    #: ``MEMORY.md``, or a ``.md`` file under ``memory/`` (workspace-relative).
    path: str
    content: str


class MemoryAppendParams(TypedDict):
    path: str
    #: Appended as is; a newline goes first when the file does not end with one.
    text: str


class _MemoryGetParamsRequired(TypedDict):
    path: str


class MemoryGetParams(_MemoryGetParamsRequired, total=False):
    #: 1-based, inclusive; default the whole file.
    start_line: Optional[int]
    end_line: Optional[int]


class _MemorySearchParamsRequired(TypedDict):
    query: str


class MemorySearchParams(_MemorySearchParamsRequired, total=False):
    #: 1–100 (default ``memory_max_results``, 5).
    max_results: Optional[int]
    #: 0–1 (default ``memory_min_score``, 0.1).
    min_score: Optional[float]
    mode: Optional[SearchMode]


class MemoryMergeParams(TypedDict, total=False):
    #: Merge the daily logs up to and including this day, ``YYYY-MM-DD`` (default today).
    through: Optional[str]


class MemoryStatusParams(TypedDict):
    pass


# --- results ---------------------------------------------------------------------------------


class Config(TypedDict, total=False):
    max_input_length: int
    max_output_tokens: int
    context_mode: ContextMode
    prune_trigger_ratio: float
    prune_target_ratio: float
    prune_protected_turns: int
    prune_stub_chars: int
    prompt_max_section_chars: int
    prompt_max_total_chars: int
    compact_enabled: bool
    compact_threshold_ratio: float
    reserve_threshold_ratio: float
    compact_keep_recent_messages: int
    summary_window_share: float
    summary_max_tokens: int
    demonstration_prefixes: List[str]
    summarizer: SummarizerKind
    summary_language: SummaryLanguage
    llm_base_url: str
    llm_model: str
    summarizer_upstream_model_anthropic: str
    summarizer_upstream_model_openai: str
    llm_api_key_env: str
    llm_timeout_secs: float
    llm_max_output_tokens: int
    llm_temperature: float
    llm_extra_headers: Dict[str, str]
    llm_input_budget_tokens: int
    memory_enabled: bool
    token_count_estimate_divisor: float
    tokenizer: Tokenizer
    dialog_path: str
    pruning_enabled: bool
    pruning_recent_n: int
    pruning_phase_batch: int
    pruning_old_msg_max_bytes: int
    pruning_recent_msg_max_bytes: int
    pruning_slack_bytes: int
    pruning_tail_ratio: float
    markdown_recent_msg_max_bytes: int
    markdown_old_msg_max_bytes: int
    markdown_tool_names: List[str]
    markdown_file_extensions: List[str]
    read_file_tool_names: List[str]
    offload_retention_days: float
    offload_notice_path: OffloadNoticePath
    budget_section_enabled: bool
    task_focus_section_enabled: bool
    max_live_sessions: int
    session_idle_secs: float
    # Long-term memory (daemon-wide: set on the daemon, not per request).
    memory_index_enabled: bool
    fts_enabled: bool
    memory_store_backend: str
    memory_extra_paths: List[str]
    memory_watch_enabled: bool
    memory_watch_debounce_ms: int
    memory_watch_poll_ms: int
    memory_max_results: int
    memory_min_score: float
    memory_vector_weight: float
    memory_candidate_multiplier: float
    memory_merge_enabled: bool
    memory_merge_time: str
    memory_merge_days: int
    embedding_backend: str
    embedding_base_url: str
    embedding_api_key_env: str
    embedding_model_name: str
    embedding_dimensions: int
    embedding_cache_enabled: bool
    embedding_max_cache_size: int
    embedding_max_input_length: int
    embedding_max_batch_size: int
    embedding_timeout_secs: float
    embedding_model_path: str
    proxy_listen: str
    proxy_upstream_anthropic: str
    proxy_upstream_openai: str
    proxy_token: str
    # Learning candidates (`candidates.*`).
    candidates_enabled: bool
    candidates_from_compaction: bool


class InitializeResult(TypedDict):
    server_name: str
    server_version: str
    protocol_version: str
    workspace: str
    config: Config
    methods: List[str]


class _TokenUsageRequired(TypedDict):
    system: int
    tools: int
    summary: int
    compactable: int
    reserved: int
    messages: int
    total: int
    limit: int
    threshold: int
    tokenizer: Tokenizer


class TokenUsage(_TokenUsageRequired, total=False):
    #: A span ``context.expand`` brought back, carried by this request only.
    expanded: int
    #: The pinned block after the summary (``pin``).
    pinned: int


class Reconciliation(TypedDict):
    session_messages: int
    reused: int
    appended: int
    replaced: int


class ArchiveRange(TypedDict):
    file: str
    start_line: int
    end_line: int
    first_index: int
    last_index: int
    messages: int


class _CompactionReportRequired(TypedDict):
    id: str
    at: str
    manual: bool
    messages: int
    tokens_before: int
    tokens_after: int
    summarizer: str


class DroppedIdentifier(TypedDict):
    """An identifier of a compacted span the summary no longer names."""

    kind: DroppedKind
    text: str
    index: int
    mentions: int


class CompactionReport(_CompactionReportRequired, total=False):
    archive: Optional[ArchiveRange]
    #: Further runs of lines, when a crash left the messages in more than one.
    more_archive: List[ArchiveRange]
    #: What the summary no longer names, most important first; ``expand`` brings it back.
    dropped: List[DroppedIdentifier]


class ItemGroup(TypedDict):
    name: str
    count: int


class OmittedItems(TypedDict):
    list: IdentifierList
    count: int
    groups: List[ItemGroup]


class _CriticalContextRequired(TypedDict):
    files_read: List[str]
    files_modified: List[str]
    commands: List[str]
    errors: List[str]
    notes: List[str]


class CriticalContext(_CriticalContextRequired, total=False):
    #: Values found in a tool's output and used afterwards, each with where it was found.
    findings: List[str]
    omitted: List[OmittedItems]


class ArchiveLine(TypedDict):
    file: str
    line: int


class _UserRequestRequired(TypedDict):
    text: str
    chars: int
    index: int


class UserRequest(_UserRequestRequired, total=False):
    archived: Optional[ArchiveLine]
    demonstration: bool


class _CompactSummaryRequired(TypedDict):
    goal: List[str]
    constraints: List[str]
    done: List[str]
    in_progress: List[str]
    blocked: List[str]
    key_decisions: List[str]
    next_steps: List[str]
    critical_context: CriticalContext
    archive: List[ArchiveRange]


class CompactSummary(_CompactSummaryRequired, total=False):
    instruction: Optional[str]
    instruction_effect: Optional[str]
    requests: List[UserRequest]
    lessons: List[str]
    #: The agent framework's template sentences found in the user's messages: not constraints.
    template: List[str]


class OffloadedAction(TypedDict):
    kind: Literal["offloaded"]
    index: int
    pointer: str
    file: str
    total_bytes: int
    total_lines: int
    newly_written: bool


class CompactedAction(CompactionReport):
    kind: Literal["compacted"]


class CompactionFailedAction(TypedDict):
    kind: Literal["compaction_failed"]
    reason: str


class _RepairedActionRequired(TypedDict):
    kind: Literal["repaired"]
    index: int
    repair: RepairKind


class RepairedAction(_RepairedActionRequired, total=False):
    call_id: Optional[str]


class TruncatedAction(TypedDict):
    kind: Literal["truncated"]
    index: int
    pointer: str
    phase: Phase
    file: str
    kept_bytes: int
    total_bytes: int


class PruneReport(TypedDict):
    """What transient pruning (``context_mode: aceclaw``) did to one request; the session keeps everything."""

    stubbed_results: int
    removed_reasoning: int
    tokens_before: int
    tokens_after: int


class PrunedAction(PruneReport):
    kind: Literal["pruned"]


class PromptOverBudgetAction(TypedDict):
    """The sections never cut (the client's system prompt, protected ones) alone exceed the
    prompt's budget: they are sent whole, every other section is left out."""

    kind: Literal["prompt_over_budget"]
    keys: List[str]
    chars: int
    max_total_chars: int


#: One thing ``context.prepare`` did; tell them apart by ``action["kind"]``.
Action = Union[
    OffloadedAction,
    CompactedAction,
    CompactionFailedAction,
    RepairedAction,
    TruncatedAction,
    PrunedAction,
    PromptOverBudgetAction,
]

# --- request assembly (AceClaw's shape: camelCase keys) --------------------------------------


class RequestFocus(TypedDict):
    """What the newest user message is about."""

    querySummary: str
    activeFilePaths: List[str]
    activeSymbols: List[str]
    planSignals: List[str]


class PromptBudget(TypedDict):
    """The character budget the sections were cut to."""

    maxPerTierChars: int
    maxTotalChars: int
    budgetTokensEstimate: int


class SectionReport(TypedDict):
    """One section of the assembled prompt."""

    key: str
    sourceType: str
    scopeType: str
    inclusionReason: str
    priority: int
    basePriority: int
    protected: bool
    originalChars: int
    finalChars: int
    estimatedTokens: int
    included: bool
    truncated: bool
    evidence: List[str]


class SectionDetail(SectionReport):
    """``inspect(detail_key=...)``: a section's report with its text as sent and as assembled."""

    content: str
    original_content: str


class _PromptAssemblyRequired(TypedDict):
    sessionId: str
    totalChars: int
    estimatedTokens: int
    contextWindowTokens: int
    systemPromptSharePct: float
    requestFocus: RequestFocus
    budget: PromptBudget
    truncatedSectionKeys: List[str]
    sections: List[SectionReport]


class PromptAssembly(_PromptAssemblyRequired, total=False):
    """How the system prompt of a request was assembled (``PrepareResult["prompt"]``)."""

    overBudget: Optional[str]
    #: Learned candidates (``candidates.*``) whose sections this prompt includes.
    injectedCandidateIds: List[str]


class CalibrationSample(TypedDict):
    provider_tokens: int
    counted_tokens: int


class _CalibrationRequired(TypedDict):
    factor: float
    samples: int


class Calibration(_CalibrationRequired, total=False):
    """How satchel's counts are corrected by the provider's reported usage (``context.usage``)."""

    last: Optional[CalibrationSample]


class ContextMonitor(TypedDict):
    """Live numbers of a session, like AceClaw's ``ContextMonitor``."""

    current_tokens: int
    pressure_level: str
    peak_tokens: int
    compaction_count: int
    pruned_only_count: int
    phases_reached: List[str]
    last_tokens_saved: int
    total_tokens_saved: int


class _PrepareResultRequired(TypedDict):
    session_id: str
    format: MessageFormat
    messages: List[Any]
    tokens: TokenUsage
    #: Tokens at the start of the request identical to the previous one's (tools, system,
    #: messages): what a provider's prompt cache can reuse.
    cache_stable_prefix_tokens: int
    actions: List[Action]
    reconciliation: Reconciliation


class PrepareResult(_PrepareResultRequired, total=False):
    compact_summary: Optional[CompactSummary]
    over_limit: Optional[str]
    #: The assembled system prompt to send (a string when only sections were sent); absent
    #: when the request had neither ``system`` nor ``sections``.
    system: Any
    prompt: Optional[PromptAssembly]


class _CompactResultRequired(TypedDict):
    session_id: str
    compacted: int


class CompactResult(_CompactResultRequired, total=False):
    compaction: Optional[CompactionReport]
    summary: Optional[CompactSummary]
    summary_text: Optional[str]


class _ReadResultRequired(TypedDict):
    path: str
    content: str
    byte_offset: int
    start_line: int
    end_line: int
    eof: bool
    total_lines: int
    total_bytes: int


class ReadResult(_ReadResultRequired, total=False):
    next_line: Optional[int]
    next_byte_offset: Optional[int]


class _OffloadedResultRequired(TypedDict):
    #: Stable id (``r12``) shown in the truncation notice: what ``pin`` and ``purge`` take.
    id: str
    index: int
    pointer: str
    file: str
    total_bytes: int
    total_lines: int


class OffloadedResult(_OffloadedResultRequired, total=False):
    """``sent_bytes`` (what is really sent now, in ``phase``) is absent while the session is
    not ``loaded``; ``total_bytes - sent_bytes`` is the saving."""

    tool: Optional[str]
    phase: Optional[Phase]
    sent_bytes: Optional[int]
    pinned: bool
    purged: bool


class MessageRoleTokens(TypedDict):
    """``tokens.messages`` by role; the three add up to it."""

    user: int
    assistant: int
    tool_results: int


class _InspectResultRequired(TypedDict):
    session_id: str
    loaded: bool
    tokens: TokenUsage
    message_tokens: MessageRoleTokens
    config_overrides: Dict[str, Any]
    pressure: Pressure
    messages: int
    archived_messages: int
    summary_budget_tokens: int
    offloaded: List[OffloadedResult]
    compactions: List[CompactionReport]
    peak_tokens: int
    monitor: ContextMonitor
    calibration: Calibration


class InspectResult(_InspectResultRequired, total=False):
    """``context.inspect``; after a ``prepare``, also the :class:`PromptAssembly` of its last
    request, flattened in AceClaw's shape (``sessionId``, ``totalChars``, ``sections``, …)."""

    format: Optional[MessageFormat]
    summary: Optional[CompactSummary]
    pins: List["PinInfo"]
    sessionId: str
    totalChars: int
    estimatedTokens: int
    contextWindowTokens: int
    systemPromptSharePct: float
    requestFocus: RequestFocus
    budget: PromptBudget
    truncatedSectionKeys: List[str]
    sections: List[SectionReport]
    overBudget: Optional[str]
    injectedCandidateIds: List[str]
    detail: Optional[SectionDetail]
    #: Lines of the workspace's candidate store that were skipped (bad signature, unparsable):
    #: never used.
    rejected_candidates: List["RejectedEntry"]
    #: How ``satchel proxy`` made the session; absent for a session of JSON-RPC clients.
    origin: Optional["SessionOrigin"]


class AgentCompaction(TypedDict):
    """A compaction the agent asked its own model for, through the proxy."""

    at: str
    messages: int


class _SessionOriginRequired(TypedDict):
    api: str
    key_from: str


class SessionOrigin(_SessionOriginRequired, total=False):
    """The provider API of a proxied session's agent and what named the session."""

    agent_compactions: List[AgentCompaction]


class _SessionSummaryRequired(TypedDict):
    session_id: str
    live: bool


class SessionSummary(_SessionSummaryRequired, total=False):
    messages: Optional[int]
    tokens: Optional[int]
    pressure: Optional[Pressure]
    compactions: Optional[int]


class SessionsResult(TypedDict):
    sessions: List[SessionSummary]


class WatchResult(TypedDict):
    watching: bool


# --- long-term memory (memory.*) ---------------------------------------------------------------


class _MemoryFileChangeRequired(TypedDict):
    path: str
    bytes: int
    lines: int
    chunks_indexed: int


class MemoryFileChange(_MemoryFileChangeRequired, total=False):
    """``memory.write`` and ``memory.append``: the file after the call, and the chunks indexed
    (it is searchable when the call returns)."""

    #: What went wrong without failing the call (e.g. the embedding endpoint is down: the
    #: file is searchable by BM25 until its vectors are made).
    warnings: List[str]


class MemoryGetResult(TypedDict):
    """``memory.get``: the lines ``start_line..=end_line`` (``end_line < start_line`` when none)."""

    path: str
    start_line: int
    end_line: int
    total_lines: int
    #: The lines, each with its newline.
    text: str


class MemoryHit(TypedDict):
    """One ``memory.search`` result: a chunk of a memory file (``memory.get`` reads it)."""

    path: str
    start_line: int
    end_line: int
    #: 0–1, higher is better.
    score: float
    snippet: str
    source: HitSource


class _MemorySearchResultRequired(TypedDict):
    results: List[MemoryHit]
    mode: SearchMode


class MemorySearchResult(_MemorySearchResultRequired, total=False):
    """``memory.search``: hits best first, and the ranking used (``auto`` resolved)."""

    #: Why the search was less than asked for (e.g. the embedding endpoint failed: BM25 ran).
    warnings: List[str]


class _MemoryMergeResultRequired(TypedDict):
    merged: List[str]
    added: int
    duplicates: int
    summarizer: str


class MemoryMergeResult(_MemoryMergeResultRequired, total=False):
    """``memory.merge``: the daily logs read, entries added to ``MEMORY.md`` and skipped as
    duplicates, and the backup of the previous ``MEMORY.md`` when it changed; ``warnings``
    says why a model merge fell back to the extractive one."""

    backup: Optional[str]
    warnings: List[str]


class _MemoryStatusResultRequired(TypedDict):
    index_path: str
    modes: List[SearchMode]
    #: Files, chunks, vectors, bytes, when last indexed.
    index: Any
    #: The file watcher: backend, roots, events seen, last error.
    watcher: Any
    #: The embedding backend and its cache; ``None`` when there is none.
    embedding: Any


class MemoryStatusResult(_MemoryStatusResultRequired, total=False):
    """``memory.status``: the index (``index_path`` is workspace-relative), the search modes that
    are on, the watcher and the embedding backend."""

    #: When the next daily merge runs (RFC 3339, local); absent or ``None`` when it is off.
    next_merge: Optional[str]


# --- notifications from the daemon -------------------------------------------------------


class _CompactionEventRequired(TypedDict):
    manual: bool
    messages: int
    tokens_before: int
    threshold: int


class CompactionEvent(_CompactionEventRequired, total=False):
    """A compaction as ``context.event`` reports it: at its start (``compaction_started``)
    and in the event of the call that ran it (``id``, ``tokens_after``, ``dropped``)."""

    id: Optional[str]
    tokens_after: Optional[int]
    dropped: List[DroppedIdentifier]


class _ContextEventRequired(TypedDict):
    session_id: str
    kind: EventKind
    tokens: TokenUsage
    pressure: Pressure
    messages: int
    compactions: int
    actions: List[ActionKind]


class ContextEvent(_ContextEventRequired, total=False):
    """Params of ``context.event``, sent to connections that called ``watch``."""

    compaction: Optional[CompactionEvent]


# --- server -> client requests ---------------------------------------------------------------
# Described informally in openrpc.json's x-satchel-server-requests (no JSON Schema to check).


class ChatMessage(TypedDict):
    role: str
    content: str


class SummarizerCompleteParams(TypedDict):
    messages: List[ChatMessage]
    max_tokens: int


class SummarizerCompleteResult(TypedDict):
    text: str


class ExpandRange(TypedDict):
    """Lines of an archive file (``dialog/YYYY-MM-DD.jsonl``), 1-based, inclusive."""

    file: str
    start_line: int
    end_line: int


class _ExpandParamsRequired(TypedDict):
    session_id: str


class ExpandParams(_ExpandParamsRequired, total=False):
    compaction_id: Optional[str]
    archive: Optional[ExpandRange]
    max_tokens: Optional[int]


class _ExpandResultRequired(TypedDict):
    session_id: str
    archive: ArchiveRange
    messages: int
    tokens: int
    budget_tokens: int
    left_out: int
    truncated_results: int


class ExpandResult(_ExpandResultRequired, total=False):
    """What the next ``prepare`` carries after the summary (``context.expand``)."""

    #: Further runs of lines, when a crash left the span's messages in more than one.
    more_archive: List[ArchiveRange]


class _PinParamsRequired(TypedDict):
    session_id: str


class PinParams(_PinParamsRequired, total=False):
    """Exactly one of ``message_index``, ``text`` and ``result_id``."""

    message_index: Optional[int]
    text: Optional[str]
    result_id: Optional[str]
    label: Optional[str]


class UnpinParams(TypedDict):
    session_id: str
    pin_id: str


class _PinInfoRequired(TypedDict):
    id: str
    kind: PinKind
    in_block: bool
    chars: int


class PinInfo(_PinInfoRequired, total=False):
    """One pin: ``in_block`` once the request shows it after the summary (its message was
    compacted, or it is a text); otherwise it is in the live messages, whole."""

    label: Optional[str]
    message_index: Optional[int]
    result_id: Optional[str]


class PinsResult(TypedDict):
    session_id: str
    pin_id: str
    pins: List[PinInfo]


class PurgeParams(TypedDict):
    session_id: str
    result_id: str


class PurgeResult(TypedDict):
    session_id: str
    result_id: str
    file: str
    total_bytes: int


# --- learning candidates (candidates.*) ------------------------------------------------------


class ObserveEvidence(TypedDict, total=False):
    """The evidence of an observation: a ``failure`` and its ``fix`` add to the score (no single
    observation is promoted)."""

    failure: Optional[str]
    fix: Optional[str]
    note: Optional[str]


class _ObserveParamsRequired(TypedDict):
    #: The lesson or rule, short and imperative.
    text: str
    kind: CandidateKind


class ObserveParams(_ObserveParamsRequired, total=False):
    tags: List[str]
    #: Files and symbols it applies to (request focus boosts it when one is active).
    files: List[str]
    symbols: List[str]
    evidence: Optional[ObserveEvidence]
    session_id: Optional[str]


class FeedbackParams(TypedDict):
    id: str
    outcome: FeedbackOutcome


class ListParams(TypedDict, total=False):
    #: Only the candidates in this state; all when absent.
    state: Optional[CandidateState]


class EvaluateParams(TypedDict):
    pass


class RemoveParams(TypedDict):
    id: str


class _CandidateEvidenceRequired(TypedDict):
    at: str


class CandidateEvidence(_CandidateEvidenceRequired, total=False):
    """One observation's evidence (``at`` is RFC 3339)."""

    session_id: Optional[str]
    failure: Optional[str]
    fix: Optional[str]
    note: Optional[str]


class _CandidateRequired(TypedDict):
    #: Stable id (``c1``), taken by ``candidates_feedback`` and ``candidates_remove``.
    id: str
    text: str
    kind: CandidateKind
    state: CandidateState
    score: float
    observations: int
    successes: int
    failures: int
    created_at: str
    last_seen_at: str
    state_since: str


class Candidate(_CandidateRequired, total=False):
    """A learning candidate: a short lesson or rule with its evidence, counts and lifecycle
    state. Promoted ones are sections of the system prompt (key ``candidate:<id>``)."""

    tags: List[str]
    files: List[str]
    symbols: List[str]
    source_session: Optional[str]
    evidence: List[CandidateEvidence]
    #: End of the cooldown of a ``demoted`` candidate (RFC 3339).
    cooldown_until: Optional[str]


class ObserveResult(TypedDict):
    """``candidates.observe``: the candidate after the observation; ``merged`` when it was merged
    into a similar recent one of the same kind."""

    candidate: Candidate
    merged: bool


class FeedbackResult(TypedDict):
    candidate: Candidate


class RejectedEntry(TypedDict):
    """A line of the candidate store that was not loaded (bad signature, unparsable)."""

    line: int
    reason: str


class ListResult(TypedDict):
    candidates: List[Candidate]
    rejected: List[RejectedEntry]


#: One lifecycle transition (``from`` is a Python keyword, hence this form).
StateChange = TypedDict("StateChange", {"id": str, "from": CandidateState, "to": CandidateState, "reason": str})


class EvaluateResult(TypedDict):
    """``candidates.evaluate``: the transitions, and the ids removed after the idle days."""

    changes: List[StateChange]
    removed: List[str]


class RemoveResult(TypedDict):
    #: False when no candidate had that id.
    removed: bool
