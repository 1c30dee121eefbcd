"""Exceptions: one class per satchel error code, so callers catch what they can handle.

An error response becomes the class registered for its ``code`` (``except UnknownSession:``
instead of comparing numbers); a code this client does not know yet still raises
:class:`SatchelError`, so a newer daemon never breaks an older client. The table mirrors
``protocol/errors.md``; a test checks it against ``protocol/openrpc.json`` so it cannot drift.

The same classes work in the other direction: a request handler (``on_request``) that raises
one sends that code back to satchel; any other exception is sent as ``InternalError``.
"""

from typing import Any, Callable, Dict, Mapping, Optional, Type, TypeVar


class SatchelError(Exception):
    """A JSON-RPC error response: ``code``, ``message`` and the optional ``data``.

    satchel's ``data`` is usually ``{"name": ..., "details": {...}}`` (e.g. the offending
    field of an ``InvalidParams``), kept as received.
    """

    #: The error code of a subclass; ``None`` on the base class.
    code_for_class: Optional[int] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} (satchel error {self.code})"

    def to_error(self) -> Dict[str, Any]:
        """The JSON-RPC ``error`` object, for answering a server->client request."""
        error: Dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ConnectionClosed(ConnectionError):
    """The daemon went away (or the client was closed) before a reply came.

    Not a :class:`SatchelError`: no error response was received, so there is no code.
    """


_E = TypeVar("_E", bound=Type[SatchelError])


def _code(code: int) -> Callable[[_E], _E]:
    """Registers a subclass as the class of ``code``."""

    def register(cls: _E) -> _E:
        cls.code_for_class = code
        ERRORS[code] = cls
        return cls

    return register


#: Error code -> exception class.
ERRORS: Dict[int, Type[SatchelError]] = {}


@_code(-32700)
class ParseError(SatchelError):
    """The message is not valid JSON."""


@_code(-32600)
class InvalidRequest(SatchelError):
    """Valid JSON, but not a JSON-RPC 2.0 request object."""


@_code(-32601)
class MethodNotFound(SatchelError):
    """No method of that name (e.g. a method newer than the daemon)."""


@_code(-32602)
class InvalidParams(SatchelError):
    """Params do not match the method; the message and ``data`` name the field."""


@_code(-32603)
class InternalError(SatchelError):
    """Unexpected failure inside satchel; the daemon keeps serving."""


@_code(-32800)
class RequestCancelled(SatchelError):
    """The request was cancelled by ``$/cancelRequest`` before it took effect.

    The call had no effect at all: the session is exactly as it was before, so resending the
    same request is safe. (A cancel that comes too late is ignored and the call's normal
    result arrives instead.)
    """


@_code(-32001)
class UnknownSession(SatchelError):
    """The session id is not known (e.g. ``append`` before any ``messages``)."""


@_code(-32002)
class PathOutsideWorkspace(SatchelError):
    """A path is absolute, contains ``..``, or resolves outside the workspace."""


@_code(-32003)
class FileNotFound(SatchelError):
    """The path is inside the workspace but no such file exists."""


@_code(-32004)
class StorageFailure(SatchelError):
    """Writing to the workspace failed; the session is unchanged and the request can be retried."""


@_code(-32005)
class SummarizeFailed(SatchelError):
    """The summariser failed (``context.compact``); nothing was compacted."""


@_code(-32009)
class StaleSession(SatchelError):
    """``append`` carried ``expect_messages`` and the session holds another count; nothing was appended.

    The client's view of the session is stale: an earlier reply was lost (its messages were
    appended after all) or another client appended. ``data["details"]`` is
    ``{"expected": N, "session_messages": held}``: append from message ``held`` on, or
    resend the full ``messages`` list.
    """


@_code(-32007)
class PayloadTooLarge(SatchelError):
    """The request is larger than the transport's size limit (``--max-message-bytes``)."""


@_code(-32008)
class ResponseTooLarge(SatchelError):
    """The reply would be larger than the transport's size limit (``--max-message-bytes``)."""


@_code(-32010)
class MemoryUnavailable(SatchelError):
    """Memory search is off (``memory_index_enabled`` is false) or not built in (the daemon's
    ``memory`` feature): ``memory_search``, ``memory_merge``, ``memory_status`` and
    ``prepare(memory=...)`` raise it. The memory files themselves (``memory_write``,
    ``memory_append``, ``memory_get``) still work."""


def error_from_response(error: Mapping[str, Any]) -> SatchelError:
    """The exception for a JSON-RPC ``error`` object: its code's class, else the base class."""
    code = error.get("code")
    message = error.get("message") or "unknown error"
    cls = ERRORS.get(code, SatchelError) if isinstance(code, int) else SatchelError
    return cls(code if isinstance(code, int) else -32603, str(message), error.get("data"))
