"""Python client for satchel, the daemon that keeps an AI agent's context window in budget.

``Client`` (threads) and ``AsyncClient`` (asyncio) speak satchel's JSON-RPC 2.0 protocol
(``protocol/`` in the satchel repository) over a spawned ``satchel serve`` or a Unix socket.
Results are plain dicts typed by :mod:`satchel_client.types`; error responses raise the
:mod:`satchel_client.errors` class of their code.
"""

from ._protocol import VERSION as __version__
from .aio import AsyncClient
from .client import Client
from .errors import (
    ERRORS,
    ConnectionClosed,
    FileNotFound,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    PathOutsideWorkspace,
    PayloadTooLarge,
    ResponseTooLarge,
    RequestCancelled,
    SatchelError,
    StaleSession,
    StorageFailure,
    SummarizeFailed,
    UnknownSession,
)
from .types import (
    Action,
    Calibration,
    CompactResult,
    CompactSummary,
    ContextMonitor,
    InitializeResult,
    InspectResult,
    PrepareResult,
    PromptAssembly,
    PromptSection,
    ReadResult,
    SectionReport,
    SessionsResult,
    TokenUsage,
    WatchResult,
)

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "ERRORS",
    "SatchelError",
    "ConnectionClosed",
    "ParseError",
    "InvalidRequest",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "RequestCancelled",
    "UnknownSession",
    "PathOutsideWorkspace",
    "FileNotFound",
    "StorageFailure",
    "SummarizeFailed",
    "StaleSession",
    "PayloadTooLarge",
    "ResponseTooLarge",
    "Action",
    "Calibration",
    "CompactResult",
    "CompactSummary",
    "ContextMonitor",
    "InitializeResult",
    "InspectResult",
    "PrepareResult",
    "PromptAssembly",
    "PromptSection",
    "ReadResult",
    "SectionReport",
    "SessionsResult",
    "TokenUsage",
    "WatchResult",
]
