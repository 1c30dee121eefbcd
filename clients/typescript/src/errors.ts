// Errors: a JSON-RPC error response becomes a SatchelError subclass chosen by its code
// (protocol/errors.md, openrpc.json `x-satchel-errors`).

/** An error response from satchel (or from a client-side handler, sent back to satchel). */
export class SatchelError extends Error {
  /** The JSON-RPC error code. */
  readonly code: number;
  /** The error's `data`: satchel sends `{name, details}` for some errors (e.g. the field of InvalidParams). */
  readonly data: unknown;

  constructor(code: number, message: string, data?: unknown) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.data = data;
  }
}

/** The connection ended (daemon exited, socket closed, or `close()` was called) before a reply. */
export class ConnectionClosed extends Error {
  override name = 'ConnectionClosed';
}

/** Where `SatchelClient.spawn` took the executable from. */
export type SatchelBinSource = 'option' | 'env' | 'path';

/**
 * `SatchelClient.spawn` could not run the executable (e.g. ENOENT: no such file): every call
 * rejects with it. The message names the path tried and how to set it (`SATCHEL_BIN` or the
 * `satchel` option); `code` is the system error's (`ENOENT`, `EACCES`, …) and `cause` the error itself.
 */
export class SpawnFailed extends ConnectionClosed {
  override name = 'SpawnFailed';
  /** The executable that was tried. */
  readonly path: string;
  /** Where it came from: the `satchel` option, `$SATCHEL_BIN`, or the default `satchel` on the PATH. */
  readonly source: SatchelBinSource;
  /** The system error code, e.g. `ENOENT`. */
  readonly code: string | undefined;

  constructor(path: string, source: SatchelBinSource, error: Error & { code?: string }) {
    const tried =
      source === 'option'
        ? `${path} (the \`satchel\` option)`
        : source === 'env'
          ? `${path} (from SATCHEL_BIN)`
          : `\`${path}\` on the PATH (neither the \`satchel\` option nor SATCHEL_BIN is set)`;
    const what = error.code === 'ENOENT' ? 'satchel executable not found' : 'cannot run the satchel executable';
    super(
      `${what}: tried ${tried}: ${error.message}. Set SATCHEL_BIN to the satchel binary, or pass ` +
        `SatchelClient.spawn({ satchel: '/path/to/satchel' }) (build it with \`cargo build -p satchel\`: target/debug/satchel)`,
      { cause: error },
    );
    this.path = path;
    this.source = source;
    this.code = error.code;
  }
}

/**
 * A call timed out or was aborted, and satchel did not confirm the cancel (no answer to the
 * `$/cancelRequest` within `CANCEL_GRACE_MS`, or the connection closed): the call may or may not
 * have taken effect. Retry `context.prepare` with the full `messages` list (idempotent), or `append`
 * with `expect_messages`, which refuses to append twice.
 */
export class OutcomeUnknown extends Error {
  override name = 'OutcomeUnknown';

  constructor(message: string, options?: { cause?: unknown }) {
    super(
      `${message}: the outcome is unknown (retry context.prepare with the full \`messages\` list, or \`append\` with \`expect_messages\`)`,
      options,
    );
  }
}

type Sub = new (message: string, data?: unknown) => SatchelError;
const sub = (code: number): Sub =>
  class extends SatchelError {
    constructor(message: string, data?: unknown) {
      super(code, message, data);
    }
  };

// One class per code; `class X extends sub(code) {}` keeps X's name on instances.
export class ParseError extends sub(-32700) {}
export class InvalidRequest extends sub(-32600) {}
export class MethodNotFound extends sub(-32601) {}
export class InvalidParams extends sub(-32602) {}
export class InternalError extends sub(-32603) {}
/** Cancelled by `$/cancelRequest` before it took effect: the call had no effect, resending it is safe. */
export class RequestCancelled extends sub(-32800) {}
export class UnknownSession extends sub(-32001) {}
export class PathOutsideWorkspace extends sub(-32002) {}
export class FileNotFound extends sub(-32003) {}
export class StorageFailure extends sub(-32004) {}
export class SummarizeFailed extends sub(-32005) {}
/**
 * `append` carried `expect_messages` and the session holds another count: nothing was appended.
 * `data.details` is `{ expected, session_messages }`.
 */
export class StaleSession extends sub(-32009) {}
export class PayloadTooLarge extends sub(-32007) {}
export class ResponseTooLarge extends sub(-32008) {}
/**
 * Memory search is off (`memory_index_enabled` is false) or not built in (the daemon's `memory`
 * feature): `memorySearch`, `memoryMerge`, `memoryStatus` and `prepare({ memory })` reject with it.
 * The memory files themselves (`memoryWrite`, `memoryAppend`, `memoryGet`) still work.
 */
export class MemoryUnavailable extends sub(-32010) {}

/** Error class by code. */
export const ERROR_CLASSES: Readonly<Record<number, Sub>> = {
  [-32700]: ParseError,
  [-32600]: InvalidRequest,
  [-32601]: MethodNotFound,
  [-32602]: InvalidParams,
  [-32603]: InternalError,
  [-32800]: RequestCancelled,
  [-32001]: UnknownSession,
  [-32002]: PathOutsideWorkspace,
  [-32003]: FileNotFound,
  [-32004]: StorageFailure,
  [-32005]: SummarizeFailed,
  [-32009]: StaleSession,
  [-32007]: PayloadTooLarge,
  [-32008]: ResponseTooLarge,
  [-32010]: MemoryUnavailable,
};

/** The error for a JSON-RPC `error` object: the class of its code, else a plain SatchelError. */
export function errorFromResponse(error: { code: number; message: string; data?: unknown }): SatchelError {
  const Class = ERROR_CLASSES[error.code];
  return Class ? new Class(error.message, error.data) : new SatchelError(error.code, error.message, error.data);
}
