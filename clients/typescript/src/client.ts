// The transport: NDJSON (one JSON-RPC 2.0 message per line) over a child's stdio or a Unix
// socket. Replies are matched by id (they may come out of order); satchel's own requests
// (`summarizer.complete`) go to the handlers registered with onRequest and are answered
// on the same stream.

import { spawn as spawnProcess, type ChildProcess, type StdioOptions } from 'node:child_process';
import { createConnection } from 'node:net';
import type { Readable, Writable } from 'node:stream';

import { ConnectionClosed, SatchelError, errorFromResponse } from './errors.js';
import type {
  Calibration,
  ChatMessage,
  CompactParams,
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
  /** Environment variables added to this process's environment (e.g. `SATCHEL_LOG`). */
  env?: Record<string, string | undefined>;
  /** What to do with satchel's log on stderr (default `inherit`). */
  stderr?: 'inherit' | 'ignore';
}

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

export class SatchelClient {
  readonly #output: Writable;
  readonly #shutdown: () => void;
  readonly #exited: Promise<number | null>;
  readonly #kill: () => void;
  readonly #pending = new Map<number, Pending>();
  readonly #notificationHandlers = new Map<string, Set<NotificationHandler>>();
  readonly #requestHandlers = new Map<string, RequestHandler>();
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

  /** Starts `satchel [--workspace DIR] serve [args…]` and talks to it over its stdin/stdout. */
  static spawn(options: SpawnOptions = {}): SatchelClient {
    const bin = options.satchel ?? process.env.SATCHEL_BIN ?? 'satchel';
    const args = [...(options.workspace ? ['--workspace', options.workspace] : []), 'serve', ...(options.args ?? [])];
    const stdio: StdioOptions = ['pipe', 'pipe', options.stderr ?? 'inherit'];
    const child: ChildProcess = spawnProcess(bin, args, { stdio, env: { ...process.env, ...options.env } });
    const exited = new Promise<number | null>((resolve) => {
      child.once('close', (code) => resolve(code));
      child.once('error', (e) => {
        client.#fail(e); // e.g. ENOENT: no such executable (emitted after the constructor ran)
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

  /** Sends `initialize`; declares `summarizer_complete` when a summariser is set. */
  initialize(params: InitializeParams = {}): Promise<InitializeResult> {
    const capabilities = this.#summarizer ? { summarizer_complete: true, ...params.capabilities } : params.capabilities;
    return this.call('initialize', capabilities ? { ...params, capabilities } : params);
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
  prepare(params: PrepareParams): Promise<PrepareResult> {
    return this.call('context.prepare', params);
  }

  compact(params: CompactParams): Promise<CompactResult> {
    return this.call('context.compact', params);
  }

  read(params: ReadParams): Promise<ReadResult> {
    return this.call('context.read', params);
  }

  /**
   * `context.inspect`: tokens, pressure, summary, offloads, the monitor and calibration, and how
   * the last request's system prompt was assembled (`query_hint` recomputes the focus from that
   * text; `detail_key` adds one section's full text as `detail`).
   */
  inspect(params: InspectParams): Promise<InspectResult> {
    return this.call('context.inspect', params);
  }

  /**
   * Reports the provider's input tokens for the session's last `prepare` as a `context.usage`
   * notification (no reply), as clients do right after the model call; satchel corrects its
   * counts from the next call on.
   */
  reportUsage(sessionId: string, inputTokens: number): void {
    this.notify('context.usage', { session_id: sessionId, input_tokens: inputTokens } satisfies UsageParams);
  }

  /** `context.usage` as a request: reports the provider's input tokens and resolves with the calibration. */
  usage(params: UsageParams): Promise<Calibration> {
    return this.call('context.usage', params);
  }

  /** Lists the workspace's sessions, with live numbers for those this daemon drives. */
  sessions(params: SessionsParams = {}): Promise<SessionsResult> {
    return this.call('context.sessions', params);
  }

  /** Subscribes this connection to `context.event` notifications of a session (see `onNotification`). */
  watch(params: WatchParams): Promise<WatchResult> {
    return this.call('context.watch', params);
  }

  // ---- long-term memory: `MEMORY.md` and `memory/**/*.md` of the workspace, and their index ----

  /**
   * `memory.write`: replaces the memory file `path` (`MEMORY.md` or a `.md` file under `memory/`)
   * with `content`, atomically, and indexes it: searchable when this resolves. Any other path
   * rejects with `InvalidParams`.
   */
  memoryWrite(params: MemoryWriteParams): Promise<MemoryFileChange> {
    return this.call('memory.write', params);
  }

  /** `memory.append`: appends `text` to a memory file (created if missing), durably, and indexes it. */
  memoryAppend(params: MemoryAppendParams): Promise<MemoryFileChange> {
    return this.call('memory.append', params);
  }

  /** `memory.get`: a memory file, or its lines `start_line..=end_line` (1-based), e.g. a search hit's. */
  memoryGet(params: MemoryGetParams): Promise<MemoryGetResult> {
    return this.call('memory.get', params);
  }

  /**
   * `memory.search`: the memory chunks that best answer `query`, best first, each with its file
   * and lines (`mode`: `auto`, `bm25`, `vector` or `hybrid`). Rejects with `MemoryUnavailable`
   * when the daemon's memory search is off.
   */
  memorySearch(params: MemorySearchParams): Promise<MemorySearchResult> {
    return this.call('memory.search', params);
  }

  /**
   * `memory.merge`: folds the daily logs (`memory/YYYY-MM-DD.md`) of the days up to `through`
   * (default today) into `MEMORY.md`, skipping entries it already has, and keeps a backup of the
   * previous `MEMORY.md`. The daemon also does this once a day.
   */
  memoryMerge(params: MemoryMergeParams = {}): Promise<MemoryMergeResult> {
    return this.call('memory.merge', params);
  }

  /** `memory.status`: the index, the search modes that are on, the watcher, the embedding backend, the next merge. */
  memoryStatus(params: MemoryStatusParams = {}): Promise<MemoryStatusResult> {
    return this.call('memory.status', params);
  }

  /** Sends a request and resolves with its result; an error response rejects with a SatchelError. */
  call<M extends keyof Methods>(method: M, params: Methods[M][0]): Promise<Methods[M][1]>;
  call(method: string, params?: unknown): Promise<unknown>;
  call(method: string, params?: unknown): Promise<unknown> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const bytes = this.#send({ id, method, ...(params === undefined ? {} : { params }) });
      this.#pending.set(id, { resolve, reject, bytes });
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
   * Runs summaries with your own model: answers `summarizer.complete {messages, max_tokens}`
   * with `{text}`. Call it before `initialize`, which then declares the capability; the
   * daemon uses it for sessions whose config has `"summarizer": "client"`.
   */
  setSummarizer(summarize: Summarizer): void {
    this.#summarizer = true;
    this.onRequest('summarizer.complete', async (params): Promise<SummarizerCompleteResult> => {
      const { messages, max_tokens } = params as SummarizerCompleteParams;
      return { text: await summarize(messages, max_tokens) };
    });
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
          : { code: -32603, message: e instanceof Error ? e.message : String(e) };
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
