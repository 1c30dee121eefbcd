"""What the sync and async clients share: framing, params, and decisions about each message.

Free of I/O, so the thread-based :class:`~satchel_client.Client` and the asyncio-based
:class:`~satchel_client.AsyncClient` build the same params and treat every incoming message
the same way; only how bytes move differs.
"""

import inspect
import json
import logging
import os
import shutil
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import MethodNotFound, SatchelError

log = logging.getLogger("satchel_client")

VERSION = "0.1.0"
SUMMARIZER_COMPLETE = "summarizer.complete"
CANCEL_REQUEST = "$/cancelRequest"

#: How long a call that timed out waits for the daemon's answer to its ``$/cancelRequest``.
#: satchel answers a cancel at once with -32800 when it wins (the call then had no effect);
#: when the call had already committed, its normal result follows shortly. Only if neither
#: comes within this time is the call's outcome unknown.
CANCEL_GRACE_SECS = 5.0

#: Largest line the async reader accepts. asyncio's default (64 KiB) is smaller than a single
#: tool result; satchel itself caps messages with ``--max-message-bytes`` (64 MiB by default,
#: at most 4 GiB), so the client never refuses what the daemon may send.
STREAM_LIMIT = 1 << 32

RequestHandler = Callable[[Any], Any]
NotificationHandler = Callable[[Any], Any]


def encode(message: Dict[str, Any]) -> bytes:
    """One NDJSON frame. ``json.dumps`` escapes newlines inside strings, so one line is one message."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def request(id_: int, method: str, params: Any) -> Dict[str, Any]:
    # satchel's methods take by-name params; `{}` rather than nothing keeps every method happy.
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": {} if params is None else params}


def notification(method: str, params: Any) -> Dict[str, Any]:
    message: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def kind(message: Any) -> str:
    """``response``, ``request``, ``notification`` or ``invalid``, by JSON-RPC's shape rules."""
    if not isinstance(message, dict):
        return "invalid"
    if "method" in message:
        return "request" if "id" in message else "notification"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    return "invalid"


def null_id_target(error: Any, sizes: Dict[Any, int]) -> Any:
    """Which pending request an error response with ``"id": null`` answers, when that is knowable.

    satchel answers a line it could not read far enough to find the id (one over
    ``--max-message-bytes``) with ``id: null``. Every request it accepted is within the limit
    and the refused one is over it, so for -32007 the largest pending request is the refused
    one; for other codes only a single pending request is unambiguous. ``sizes`` maps pending
    ids to their encoded size. ``None``: nobody to tell (the error is logged).
    """
    if not sizes:
        return None
    if isinstance(error, dict) and error.get("code") == -32007:
        return max(sizes, key=lambda id_: (sizes[id_], -id_))
    if len(sizes) == 1:
        return next(iter(sizes))
    return None


def without_none(**params: Any) -> Dict[str, Any]:
    """Leaves out unset arguments, so the daemon applies its own defaults."""
    return {k: v for k, v in params.items() if v is not None}


#: The LSP request satchel sends before it reports a compaction's progress.
WORK_DONE_PROGRESS_CREATE = "window/workDoneProgress/create"


def initialize_params(params: Dict[str, Any], has_summarizer: bool) -> Dict[str, Any]:
    """``initialize`` params; declares ``summarizer_complete`` when a summarizer is registered,
    and LSP work-done progress (``window.workDoneProgress``) always.

    The daemon asks a client for summaries only if it declared the capability, so a client
    that registered a summarizer must say so, or its handler would never be called.
    """
    params = dict(params)
    params.setdefault("client_info", {"name": "satchel-client (python)", "version": VERSION})
    capabilities = dict(params.get("capabilities") or {})
    if has_summarizer:
        capabilities.setdefault("summarizer_complete", True)
    # The client accepts LSP work-done progress (it answers window/workDoneProgress/create),
    # so `$/progress` handlers see a compaction's begin, reports and end.
    capabilities.setdefault("window", {"workDoneProgress": True})
    params["capabilities"] = capabilities
    return params


def prepare_params(
    session_id: str,
    messages: Optional[List[Any]],
    append: Optional[List[Any]],
    format: Optional[str],
    system: Any,
    tools: Optional[List[Any]],
    config: Optional[Dict[str, Any]],
    expect_messages: Optional[int] = None,
    sections: Optional[List[Any]] = None,
    usage: Any = None,
    memory: Any = None,
    work_done_token: Union[int, str, None] = None,
) -> Dict[str, Any]:
    return without_none(
        session_id=session_id,
        messages=messages,
        append=append,
        expect_messages=expect_messages,
        format=format,
        system=system,
        sections=sections,
        usage=provider_usage(usage),
        memory=memory_recall(memory),
        tools=tools,
        workDoneToken=work_done_token,
        config=config,
    )


def provider_usage(usage: Any) -> Any:
    """``prepare``'s ``usage``: ``{"input_tokens": n}``, or just ``n`` for short."""
    if isinstance(usage, int) and not isinstance(usage, bool):
        return {"input_tokens": usage}
    return usage


def memory_recall(memory: Any) -> Any:
    """``prepare``'s ``memory``: a ``MemoryRecall`` dict, or ``True`` for ``{}`` (the defaults);
    ``False`` or ``None`` leave it out."""
    if memory is True:
        return {}
    if memory is False:
        return None
    return memory


def usage_params(session_id: str, input_tokens: int) -> Dict[str, Any]:
    """``context.usage`` params: the provider's input tokens for the session's last request."""
    return {"session_id": session_id, "input_tokens": input_tokens}


def inspect_params(session_id: str, query_hint: Optional[str], detail_key: Optional[str]) -> Dict[str, Any]:
    return without_none(session_id=session_id, query_hint=query_hint, detail_key=detail_key)


def timeout_message(method: str, timeout: Optional[float], cancelled: bool) -> str:
    """What a ``TimeoutError`` says: whether satchel confirmed that the call had no effect."""
    if cancelled:
        return f"{method}: no reply within {timeout} s; cancelled, and the call had no effect"
    return (
        f"{method}: no reply within {timeout} s, nor to its $/cancelRequest: the outcome is unknown "
        "(retry context.prepare with the full `messages` list, or `append` with `expect_messages`)"
    )


def summarizer_handler(fn: Callable[[List[Dict[str, str]], int], Any]) -> RequestHandler:
    """Adapts ``fn(messages, max_tokens) -> str`` (sync or async) to a ``summarizer.complete`` handler."""

    def text(value: Any) -> Dict[str, str]:
        if not isinstance(value, str):
            raise TypeError(f"the summarizer returned {type(value).__name__}, not str")
        return {"text": value}

    if inspect.iscoroutinefunction(fn):

        async def handle_async(params: Dict[str, Any]) -> Dict[str, str]:
            return text(await fn(params["messages"], params["max_tokens"]))

        return handle_async

    def handle(params: Dict[str, Any]) -> Dict[str, str]:
        return text(fn(params["messages"], params["max_tokens"]))

    return handle


def result_reply(id_: Any, result: Any) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_reply(id_: Any, exc: BaseException) -> Dict[str, Any]:
    """The error response for a handler's exception: its own code if it is a SatchelError."""
    if isinstance(exc, SatchelError):
        error = exc.to_error()
    else:
        log.warning("request handler failed", exc_info=exc)
        error = {"code": -32603, "message": f"{type(exc).__name__}: {exc}"}
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def no_handler(method: str) -> MethodNotFound:
    return MethodNotFound(-32601, f"this client has no handler for {method!r}")


class Handlers:
    """Registry of the callbacks for what the daemon sends unasked."""

    def __init__(self) -> None:
        # A work-done progress token satchel creates is accepted as it is.
        self._request_handlers: Dict[str, RequestHandler] = {WORK_DONE_PROGRESS_CREATE: lambda params: None}
        self._notification_handlers: Dict[str, List[NotificationHandler]] = {}

    def on_request(self, method: str, fn: Optional[RequestHandler] = None) -> Any:
        """Answers the daemon's requests for ``method`` with ``fn(params)``.

        The return value is sent as the ``result``; an exception is sent as an error (a
        :class:`SatchelError` with its own code, anything else as ``InternalError``). A method
        without a handler is answered with ``MethodNotFound``, so the daemon never waits for
        an answer that cannot come. Handlers run off the reader, so they may block (e.g.
        call a model) and may call the client. Usable as a decorator when ``fn`` is omitted.
        """
        if fn is None:
            return lambda f: self.on_request(method, f)
        self._request_handlers[method] = fn
        return fn

    def on_notification(self, method: str, fn: Optional[NotificationHandler] = None) -> Any:
        """Calls ``fn(params)`` for each notification ``method`` (e.g. ``$/progress``).

        Handlers run in arrival order on the reader itself, so they must be quick and must
        not wait for a reply from the client (which that same reader would have to deliver).
        Exceptions are logged and dropped. Usable as a decorator when ``fn`` is omitted.
        """
        if fn is None:
            return lambda f: self.on_notification(method, f)
        self._notification_handlers.setdefault(method, []).append(fn)
        return fn

    def _notify_handlers(self, message: Dict[str, Any]) -> List[Any]:
        """Runs the notification's handlers; returns what they returned (awaitables, for async)."""
        returned = []
        for fn in self._notification_handlers.get(message["method"], ()):
            try:
                returned.append(fn(message.get("params")))
            except Exception:
                log.exception("notification handler for %s failed", message["method"])
        return returned


def command(
    satchel: Optional[Union[str, "os.PathLike[str]"]],
    workspace: Optional[Union[str, "os.PathLike[str]"]],
    args: Sequence[str],
) -> List[str]:
    """The ``satchel [--workspace DIR] serve ARGS`` command line.

    The binary is ``satchel`` if given, else ``$SATCHEL_BIN``, else ``satchel`` on ``PATH``;
    it is resolved here so a missing binary gives an error that says what to do.
    """
    name = os.fspath(satchel) if satchel is not None else os.environ.get("SATCHEL_BIN") or "satchel"
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(
            f"satchel binary {name!r} not found: pass satchel=PATH, set SATCHEL_BIN, "
            "or put satchel on PATH (build it with `cargo build -p satchel`)"
        )
    argv = [path]
    if workspace is not None:
        argv += ["--workspace", os.fspath(workspace)]
    return argv + ["serve", *args]


#: satchel's log level (``SATCHEL_LOG``) in a spawned daemon unless ``env`` or the caller's
#: environment sets one: warnings and errors only, so an agent's terminal is not filled with
#: satchel's info lines. ``env={"SATCHEL_LOG": "info"}`` (or ``debug``) shows more.
DEFAULT_SATCHEL_LOG = "warn"


def spawn_env(env: Optional[Dict[str, str]]) -> Dict[str, str]:
    """The spawned daemon's environment: ``env`` adds to the current environment rather than
    replacing it (satchel needs ``HOME`` for its default workspace and honours the ``SATCHEL_*``
    settings the caller already has), and ``SATCHEL_LOG`` is ``DEFAULT_SATCHEL_LOG`` unless
    either of them sets it."""
    merged = {**os.environ, **(env or {})}
    merged.setdefault("SATCHEL_LOG", DEFAULT_SATCHEL_LOG)
    return merged


def stderr_target(stderr: Any) -> Tuple[Any, Any]:
    """What to pass as Popen's ``stderr``, and a file to close once the child holds it.

    ``None`` inherits the caller's stderr (satchel logs there, never on stdout); a path
    appends to that file; anything else (a file, ``subprocess.DEVNULL``) is passed through.
    """
    if isinstance(stderr, (str, os.PathLike)):
        f = open(stderr, "ab")
        return f, f
    return stderr, None
