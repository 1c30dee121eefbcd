// The transport: NDJSON (one JSON-RPC 2.0 message per line) over a child's stdio or a Unix
// socket. Replies are matched by id (they may come out of order); satchel's own requests
// (`summarizer.complete`) go to the handlers registered with onRequest and are answered
// on the same stream.

import { spawn as spawnProcess, type ChildProcess, type StdioOptions } from 'node:child_process';
import { createConnection } from 'node:net';
import type { Readable, Writable } from 'node:stream';

import { ConnectionClosed, OutcomeUnknown, RequestCancelled, SatchelError, SpawnFailed, errorFromResponse } from './errors.js';
import type {
  Calibration,
  ChatMessage,
  EvaluateParams,
  EvaluateResult,
  FeedbackParams,
  FeedbackResult,
  ListParams,
  ListResult,
  ObserveParams,
  ObserveResult,
  RemoveParams,
  RemoveResult,
  CompactParams,
  ExpandParams,
  ExpandResult,
  PinParams,
  PinsResult,
  PurgeParams,
  PurgeResult,
  CompactResult,
  InitializeParams,
  InitializeResult,
  InspectParams,
  InspectResult,
  MemoryAppendParams,
  MemoryFileChange,
  MemoryGetParams,
  MemoryGetResult,
  MemoryMergeParams,
  MemoryMergeResult,
  MemorySearchParams,
  MemorySearchResult,
  MemoryStatusParams,
  MemoryStatusResult,
  MemoryWriteParams,
  Methods,
  PrepareParams,
  PrepareResult,
  ReadParams,
  ReadResult,
  SessionsParams,
  SessionsResult,
  SummarizerCompleteParams,
  SummarizerCompleteResult,
  UnpinParams,
  UsageParams,
  WatchParams,
  WatchResult,
} from './types.js';

export interface SpawnOptions {
  /** The satchel executable (default: `$SATCHEL_BIN`, else `satchel` on the PATH). */
  satchel?: string;
  /** Workspace directory (`--workspace`); default: satchel's own ($SATCHEL_HOME or the data dir). */
  workspace?: string;
  /** Extra arguments after `serve`, e.g. `['--max-message-bytes', '1048576']`. */
  args?: string[];
  /**
   * Environment variables added to this process's environment. satchel logs warnings and errors
   * only (`SATCHEL_LOG=warn`) unless this or the environment sets `SATCHEL_LOG` (e.g. `info`, `debug`).
   */
  env?: Record<string, string | undefined>;
  /** What to do with satchel's log on stderr (default `inherit`). */
  stderr?: 'inherit' | 'ignore';
}

/** Per-call options, the last argument of `call` and of every method. */
export interface CallOptions {
  /**
   * Milliseconds to wait for the reply. Then the client sends `$/cancelRequest` and waits up to
   * `CANCEL_GRACE_MS` for satchel's answer to it: `RequestCancelled` (-32800) means the call had no
   * effect; a call past its commit point resolves (or rejects) as usual; no answer rejects with
   * `OutcomeUnknown`.
   */
  timeoutMs?: number;
  /** Cancels the call when it aborts, with the same outcomes as `timeoutMs`. */
  signal?: AbortSignal;
}

/**
 * How long a call that timed out or was aborted waits for satchel's answer to its
 * `$/cancelRequest` (satchel answers at once; the same 5 s as the Python client's `CANCEL_GRACE_SECS`).
 */
export const CANCEL_GRACE_MS = 5_000;

/** satchel's log level when neither `SpawnOptions.env` nor the environment sets `SATCHEL_LOG`. */
export const DEFAULT_SATCHEL_LOG = 'warn';

const VERSION = '0.1.0';
const CLIENT_INFO = { name: 'satchel-client (typescript)', version: VERSION };

export type NotificationHandler = (params: unknown) => void;
/** Answers a request from satchel: the (resolved) value is the result, a throw the error. */
export type RequestHandler = (params: unknown) => unknown;
export type Summarizer = (messages: ChatMessage[], maxTokens: number) => string | Promise<string>;

interface Pending {
  resolve: (result: unknown) => void;
  reject: (error: Error) => void;
  /** Bytes of the request line, to find the one a PayloadTooLarge with id null is about. */
  bytes: number;
}

type JsonRpcMessage = {
  id?: string | number | null;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
};

/** The LSP request satchel sends before it reports a compaction's progress. */
const WORK_DONE_PROGRESS_CREATE = 'window/workDoneProgress/create';

export class SatchelClient {
  readonly #output: Writable;
  readonly #shutdown: () => void;
  readonly #exited: Promise<number | null>;
  readonly #kill: () => void;
  readonly #pending = new Map<number, Pending>();
  readonly #notificationHandlers = new Map<string, Set<NotificationHandler>>();
  // A work-done progress token satchel creates is accepted as it is.
  readonly #requestHandlers = new Map<string, RequestHandler>([[WORK_DONE_PROGRESS_CREATE, () => null]]);
  #nextId = 1;
  #closed: Error | null = null;
  #summarizer = false;

  private constructor(input: Readable, output: Writable, shutdown: () => void, exited: Promise<number | null>, kill: () => void) {
    this.#output = output;
    this.#shutdown = shutdown;
    this.#exited = exited;
    this.#kill = kill;
    input.setEncoding('utf8');
    let partial: string[] = [];
    input.on('data', (chunk: string) => {
      let start = 0;
      for (let nl = chunk.indexOf('\n'); nl !== -1; nl = chunk.indexOf('\n', start)) {
        partial.push(chunk.slice(start, nl));
        const line = partial.join('');
        partial = [];
        start = nl + 1;
        if (line.trim()) this.#receive(line);
      }
      if (start < chunk.length) partial.push(chunk.slice(start));
    });
    input.on('end', () => this.#fail(new ConnectionClosed('satchel closed the connection')));
    input.on('error', (e) => this.#fail(e));
    output.on('error', (e) => this.#fail(e));
  }

  /**
   * Starts `satchel [--workspace DIR] serve [args…]` and talks to it over its stdin/stdout. If the
   * executable cannot be run (missing, not executable), calls reject with `SpawnFailed`, which
   * names the path tried and how to set it.
   */
  static spawn(options: SpawnOptions = {}): SatchelClient {
    const bin = options.satchel ?? process.env.SATCHEL_BIN ?? 'satchel';
    const args = [...(options.workspace ? ['--workspace', options.workspace] : []), 'serve', ...(options.args ?? [])];
    const stdio: StdioOptions = ['pipe', 'pipe', options.stderr ?? 'inherit'];
    const env = { ...process.env, ...options.env };
    env.SATCHEL_LOG ??= DEFAULT_SATCHEL_LOG;
    const source = options.satchel !== undefined ? 'option' : process.env.SATCHEL_BIN !== undefined ? 'env' : 'path';
    const child: ChildProcess = spawnProcess(bin, args, { stdio, env });
    const exited = new Promise<number | null>((resolve) => {
      child.once('close', (code) => resolve(code));
      child.once('error', (e) => {
        // e.g. ENOENT: no such executable (emitted after the constructor ran)
        client.#fail(new SpawnFailed(bin, source, e));
        resolve(null);
      });
    });
    const client: SatchelClient = new SatchelClient(
      child.stdout!,
      child.stdin!,
      () => child.stdin!.end(),
      exited,
      () => child.kill('SIGKILL'),
    );
    return client;
  }

  /** Connects to a daemon serving on a Unix socket (`satchel serve --socket PATH`). */
  static connect(socketPath: string): Promise<SatchelClient> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(socketPath);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        const closed = new Promise<null>((done) => socket.once('close', () => done(null)));
        resolve(new SatchelClient(socket, socket, () => socket.end(), closed, () => socket.destroy()));
      });
    });
  }

  /**
   * Sends `initialize` (with a default `client_info`); declares `summarizer_complete` when a
   * summariser is set (`setSummarizer`), since satchel asks only the clients that declared it,
   * and LSP work-done progress (`window.workDoneProgress`) always: the client answers
   * `window/workDoneProgress/create`, so `$/progress` handlers see a compaction's begin,
   * reports and end.
   */
  initialize(params: InitializeParams = {}, options?: CallOptions): Promise<InitializeResult> {
    const capabilities = {
      ...(this.#summarizer ? { summarizer_complete: true } : {}),
      window: { workDoneProgress: true },
      ...params.capabilities,
    };
    return this.call('initialize', { client_info: CLIENT_INFO, ...params, capabilities }, options);
  }

  /**
   * `context.prepare` with `messages` (the full list, idempotent to resend) or `append` (only the
   * new ones; pass `expect_messages`, the last `reconciliation.session_messages`, to make a retry
   * safe: a stale count rejects with `StaleSession` and appends nothing). With `sections`, the
   * result's `system` is the prompt assembled from them under the budget and `prompt` says how;
   * `usage` reports the provider's input tokens of the session's previous request. With `memory`
   * (`{}` for the defaults) the top `memory.search` hits for the newest user message join the
   * prompt as the section `memory:recall`.
   */
  prepare(params: PrepareParams, options?: CallOptions): Promise<PrepareResult> {
    return this.call('context.prepare', params, options);
  }

  compact(params: CompactParams, options?: CallOptions): Promise<CompactResult> {
    return this.call('context.compact', params, options);
  }

  read(params: ReadParams, options?: CallOptions): Promise<ReadResult> {
    return this.call('context.read', params, options);
  }

  /**
   * `context.inspect`: tokens, pressure, summary, offloads, the monitor and calibration, and how
   * the last request's system prompt was assembled (`query_hint` recomputes the focus from that
   * text; `detail_key` adds one section's full text as `detail`).
   */
  inspect(params: InspectParams, options?: CallOptions): Promise<InspectResult> {
    return this.call('context.inspect', params, options);
  }

  /**
   * Reports the provider's input tokens for the session's last `prepare` as a `context.usage`
   * notification (no reply), as clients do right after the model call; satchel corrects its
   * counts from the next call on.
   */
  reportUsage(sessionId: string, inputTokens: number): void {
    this.notify('context.usage', { session_id: sessionId, input_tokens: inputTokens } satisfies UsageParams);
  }

  /**
   * `context.expand`: brings a compacted span (`compaction_id`, or an `archive` range of the
   * session) back into the next `prepare` only, within `max_tokens`; resolves with what it carries.
   */
  expand(params: ExpandParams, options?: CallOptions): Promise<ExpandResult> {
    return this.call('context.expand', params, options);
  }

  /** `context.pin`: keeps a message, a text or a tool result (`r12`) verbatim across compactions and restarts. */
  pin(params: PinParams, options?: CallOptions): Promise<PinsResult> {
    return this.call('context.pin', params, options);
  }

  /** `context.unpin`: removes a pin (`p1`). */
  unpin(params: UnpinParams, options?: CallOptions): Promise<PinsResult> {
    return this.call('context.unpin', params, options);
  }

  /** `context.purge`: later requests show the result (`r12`) as a one-line stub; its file keeps it. */
  purge(params: PurgeParams, options?: CallOptions): Promise<PurgeResult> {
    return this.call('context.purge', params, options);
  }

  /** `context.usage` as a request: reports the provider's input tokens and resolves with the calibration. */
  usage(params: UsageParams, options?: CallOptions): Promise<Calibration> {
    return this.call('context.usage', params, options);
  }

  /** Lists the workspace's sessions, with live numbers for those this daemon drives. */
  sessions(params: SessionsParams = {}, options?: CallOptions): Promise<SessionsResult> {
    return this.call('context.sessions', params, options);
  }

  /** Subscribes this connection to `context.event` notifications of a session (see `onNotification`). */
  watch(params: WatchParams, options?: CallOptions): Promise<WatchResult> {
    return this.call('context.watch', params, options);
  }

  // ---- long-term memory: `MEMORY.md` and `memory/**/*.md` of the workspace, and their index ----

  /**
   * `memory.write`: replaces the memory file `path` (`MEMORY.md` or a `.md` file under `memory/`)
   * with `content`, atomically, and indexes it: searchable when this resolves. Any other path
   * rejects with `InvalidParams`.
   */
  memoryWrite(params: MemoryWriteParams, options?: CallOptions): Promise<MemoryFileChange> {
    return this.call('memory.write', params, options);
  }

  /** `memory.append`: appends `text` to a memory file (created if missing), durably, and indexes it. */
  memoryAppend(params: MemoryAppendParams, options?: CallOptions): Promise<MemoryFileChange> {
    return this.call('memory.append', params, options);
  }

  /** `memory.get`: a memory file, or its lines `start_line..=end_line` (1-based), e.g. a search hit's. */
  memoryGet(params: MemoryGetParams, options?: CallOptions): Promise<MemoryGetResult> {
    return this.call('memory.get', params, options);
  }

  /**
   * `memory.search`: the memory chunks that best answer `query`, best first, each with its file
   * and lines (`mode`: `auto`, `bm25`, `vector` or `hybrid`). Rejects with `MemoryUnavailable`
   * when the daemon's memory search is off.
   */
  memorySearch(params: MemorySearchParams, options?: CallOptions): Promise<MemorySearchResult> {
    return this.call('memory.search', params, options);
  }

  /**
   * `memory.merge`: folds the daily logs (`memory/YYYY-MM-DD.md`) of the days up to `through`
   * (default today) into `MEMORY.md`, skipping entries it already has, and keeps a backup of the
   * previous `MEMORY.md`. The daemon also does this once a day.
   */
  memoryMerge(params: MemoryMergeParams = {}, options?: CallOptions): Promise<MemoryMergeResult> {
    return this.call('memory.merge', params, options);
  }

  /** `memory.status`: the index, the search modes that are on, the watcher, the embedding backend, the next merge. */
  memoryStatus(params: MemoryStatusParams = {}, options?: CallOptions): Promise<MemoryStatusResult> {
    return this.call('memory.status', params, options);
  }

  // ---- learning candidates: lessons and rules learned from the work, in the workspace's signed store ----

  /**
   * `candidates.observe`: records a lesson or rule, merged into a similar recent candidate of the
   * same kind or a new `shadow` one. `evidence` with a `failure` and its `fix` adds to its score,
   * but no single observation is promoted (a lesson needs two sessions); `files` and `symbols`
   * boost it when a request names them. Over a limit (`text` 2,000 characters, 64 tags, files or
   * symbols of 512) it rejects with `InvalidParams`.
   */
  candidatesObserve(params: ObserveParams, options?: CallOptions): Promise<ObserveResult> {
    return this.call('candidates.observe', params, options);
  }

  /** `candidates.feedback`: whether following candidate `id` (`c1`) helped (`success`) or not (`failure`). */
  candidatesFeedback(params: FeedbackParams, options?: CallOptions): Promise<FeedbackResult> {
    return this.call('candidates.feedback', params, options);
  }

  /** `candidates.list`: the candidates (only those in `state` when given) and the store lines rejected on load. */
  candidatesList(params: ListParams = {}, options?: CallOptions): Promise<ListResult> {
    return this.call('candidates.list', params, options);
  }

  /**
   * `candidates.evaluate`: runs the promotion, demotion, archive and retention gates now; resolves
   * with the transitions and the ids removed. Promoted candidates are sections of the next prompts.
   */
  candidatesEvaluate(params: EvaluateParams = {}, options?: CallOptions): Promise<EvaluateResult> {
    return this.call('candidates.evaluate', params, options);
  }

  /** `candidates.remove`: removes a candidate; `removed` is false when none had that id. */
  candidatesRemove(params: RemoveParams, options?: CallOptions): Promise<RemoveResult> {
    return this.call('candidates.remove', params, options);
  }

  /**
   * Sends a request and resolves with its result; an error response rejects with a SatchelError.
   *
   * With `options.timeoutMs` or `options.signal`, a call that is still waiting when the time is up
   * (or the signal aborts) is cancelled with `$/cancelRequest`, and satchel's answer to that is
   * awaited (up to `CANCEL_GRACE_MS`), as in the Python client:
   * - satchel cancelled it: rejects with `RequestCancelled` (-32800). The call had no effect at
   *   all, so it may be resent as is; `cause` is the signal's reason when aborted;
   * - the call had already passed its commit point: the cancel is ignored and the call resolves
   *   with its result (or rejects with its error), as LSP allows;
   * - no answer, or the connection closed: rejects with `OutcomeUnknown`. Retry `context.prepare`
   *   with the full `messages` list (idempotent), or `append` with `expect_messages`.
   * A signal that is already aborted rejects with `RequestCancelled` without sending anything.
   */
  call<M extends keyof Methods>(method: M, params: Methods[M][0], options?: CallOptions): Promise<Methods[M][1]>;
  call(method: string, params?: unknown, options?: CallOptions): Promise<unknown>;
  call(method: string, params?: unknown, options: CallOptions = {}): Promise<unknown> {
    if (this.#closed) return Promise.reject(this.#closed);
    const { timeoutMs, signal } = options;
    if (signal?.aborted) {
      const error = new RequestCancelled(`${method}: aborted before it was sent; the call had no effect`);
      return Promise.reject(Object.assign(error, { cause: signal.reason }));
    }
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let grace: NodeJS.Timeout | undefined;
      // Why the call was cancelled, once it was: turns satchel's answer into the rejection.
      let cancelled: { why: string; cause?: unknown } | null = null;
      const settle = () => {
        clearTimeout(timer);
        clearTimeout(grace);
        signal?.removeEventListener('abort', onAbort);
      };
      const cancel = (why: string, cause?: unknown) => {
        if (cancelled || !this.#pending.has(id)) return;
        cancelled = { why, cause };
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (!this.#closed && !this.#output.writableEnded && !this.#output.destroyed) {
          this.#send({ method: '$/cancelRequest', params: { id } });
        }
        grace = setTimeout(() => {
          const pending = this.#pending.get(id);
          if (!pending) return;
          this.#pending.delete(id);
          pending.reject(new OutcomeUnknown(`${method}: ${why}, and satchel did not answer its $/cancelRequest within ${CANCEL_GRACE_MS} ms`));
        }, CANCEL_GRACE_MS);
      };
      const onAbort = () => cancel('aborted', signal!.reason);
      const bytes = this.#send({ id, method, ...(params === undefined ? {} : { params }) });
      this.#pending.set(id, {
        resolve: (result) => {
          settle();
          resolve(result);
        },
        reject: (error) => {
          settle();
          reject(cancelled ? cancelOutcome(method, cancelled, error) : error);
        },
        bytes,
      });
      if (timeoutMs !== undefined) timer = setTimeout(() => cancel(`no reply within ${timeoutMs} ms`), timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Sends a notification (no reply), e.g. `$/cancelRequest`. */
  notify(method: string, params?: unknown): void {
    if (this.#closed) throw this.#closed;
    this.#send({ method, ...(params === undefined ? {} : { params }) });
  }

  /** Calls `handler` for each notification `method` (e.g. `$/progress`); returns an unsubscribe function. */
  onNotification(method: string, handler: NotificationHandler): () => void {
    const handlers = this.#notificationHandlers.get(method) ?? new Set();
    this.#notificationHandlers.set(method, handlers.add(handler));
    return () => void handlers.delete(handler);
  }

  /** Answers satchel's requests `method` with `handler` (replacing any earlier one); returns an unregister function. */
  onRequest(method: string, handler: RequestHandler): () => void {
    this.#requestHandlers.set(method, handler);
    return () => void (this.#requestHandlers.get(method) === handler && this.#requestHandlers.delete(method));
  }

  /**
   * Runs summaries with your own model, like the Python client's `set_summarizer`: answers
   * `summarizer.complete {messages, max_tokens}` with `{text}` (the function's string), and sends
   * `initialize` declaring `capabilities.summarizer_complete`, since satchel only asks clients that
   * declared it (later `initialize` calls declare it too). Resolves with that `initialize`'s
   * result. The daemon uses it for sessions whose config has `"summarizer": "client"`; a throw (or
   * a result that is not a string) is sent back as an error and satchel falls back to its
   * extractive summary.
   */
  setSummarizer(summarize: Summarizer, options?: CallOptions): Promise<InitializeResult> {
    this.#summarizer = true;
    this.onRequest('summarizer.complete', async (params): Promise<SummarizerCompleteResult> => {
      const { messages, max_tokens } = params as SummarizerCompleteParams;
      const text: unknown = await summarize(messages, max_tokens);
      if (typeof text !== 'string') throw new TypeError(`the summarizer returned ${text === null ? 'null' : typeof text}, not a string`);
      return { text };
    });
    const initialized = this.initialize({}, options);
    initialized.catch(() => {}); // a caller that does not await it gets no unhandled rejection
    return initialized;
  }

  /**
   * Ends stdin (or the socket) and waits until satchel has answered what is in flight and
   * exited. Resolves with the exit code (null for a socket); kills it after `timeoutMs`.
   */
  async close(timeoutMs = 10_000): Promise<number | null> {
    if (!this.#closed) this.#closed = new ConnectionClosed('the client was closed');
    this.#shutdown();
    const timer = setTimeout(this.#kill, timeoutMs);
    try {
      return await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Writes one message as one line; returns its size in bytes. */
  #send(message: object): number {
    const line = JSON.stringify({ jsonrpc: '2.0', ...message }) + '\n';
    this.#output.write(line);
    return Buffer.byteLength(line);
  }

  #receive(line: string): void {
    let message: JsonRpcMessage;
    try {
      message = JSON.parse(line);
    } catch {
      return; // not ours to answer: satchel only writes JSON-RPC
    }
    if (typeof message.method === 'string') {
      if (message.id === undefined) {
        for (const handler of this.#notificationHandlers.get(message.method) ?? []) handler(message.params);
      } else {
        void this.#answer(message.id, message.method, message.params);
      }
      return;
    }
    let id = message.id;
    if (id === null && message.error?.code === -32007) {
      // satchel skips an oversized line unread, so its error has id null. Every request over
      // the limit is larger than every request under it: the largest pending one is it.
      let largest = -1;
      for (const [key, { bytes }] of this.#pending) if (bytes > largest) [id, largest] = [key, bytes];
    }
    const pending = typeof id === 'number' ? this.#pending.get(id) : undefined;
    if (!pending) return; // e.g. a parse error with id null
    this.#pending.delete(id as number);
    if (message.error) pending.reject(errorFromResponse(message.error));
    else pending.resolve(message.result);
  }

  async #answer(id: string | number | null, method: string, params: unknown): Promise<void> {
    const handler = this.#requestHandlers.get(method);
    let reply: object;
    try {
      if (!handler) throw new SatchelError(-32601, `the client has no handler for ${method}`);
      reply = { id, result: (await handler(params)) ?? null };
    } catch (e) {
      const error =
        e instanceof SatchelError
          ? { code: e.code, message: e.message, ...(e.data === undefined ? {} : { data: e.data }) }
          : { code: -32603, message: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
      reply = { id, error };
    }
    if (!this.#output.writableEnded && !this.#output.destroyed) this.#send(reply);
  }

  /** Rejects everything in flight; later calls reject at once. */
  #fail(error: Error): void {
    this.#closed ??= error;
    for (const { reject } of this.#pending.values()) reject(error);
    this.#pending.clear();
  }
}

/** The rejection of a call that was cancelled (timeout or abort), from satchel's answer to it. */
function cancelOutcome(method: string, cancelled: { why: string; cause?: unknown }, error: Error): Error {
  if (error instanceof RequestCancelled) {
    const confirmed = new RequestCancelled(`${method}: ${cancelled.why}; cancelled, and the call had no effect`, error.data);
    return cancelled.cause === undefined ? confirmed : Object.assign(confirmed, { cause: cancelled.cause });
  }
  if (error instanceof ConnectionClosed) {
    return new OutcomeUnknown(`${method}: ${cancelled.why}, and the connection closed before satchel answered its $/cancelRequest`, {
      cause: error,
    });
  }
  return error; // the call's own error: it ended before the cancel could matter
}
