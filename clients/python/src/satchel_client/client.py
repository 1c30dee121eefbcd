"""The blocking client: any thread may call it; one reader thread delivers every reply.

satchel answers requests concurrently and out of order, and may call the client back
(``summarizer.complete``) while a ``context.prepare`` is still waiting. So calls do not read
replies themselves: each registers a future under its id, and a single reader thread routes
every incoming line to the right future, notification handler or request handler.
"""

import concurrent.futures
import itertools
import json
import os
import socket
import subprocess
import threading
import time
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Union

from . import _protocol as P
from .errors import ConnectionClosed, RequestCancelled, error_from_response
from .types import (
    Calibration,
    CandidateKind,
    CandidateState,
    EvaluateResult,
    FeedbackOutcome,
    FeedbackResult,
    ListResult,
    ObserveEvidence,
    ObserveResult,
    RemoveResult,
    CompactResult,
    ExpandRange,
    ExpandResult,
    PinsResult,
    PurgeResult,
    InitializeResult,
    InspectResult,
    MemoryFileChange,
    MemoryGetResult,
    MemoryMergeResult,
    MemoryRecall,
    MemorySearchResult,
    MemoryStatusResult,
    PrepareResult,
    PromptSection,
    SearchMode,
    ProviderUsage,
    ReadResult,
    SessionsResult,
    WatchResult,
)

PathLike = Union[str, "os.PathLike[str]"]
Summarizer = Callable[[List[Dict[str, str]], int], str]


class Client(P.Handlers):
    """A connection to one satchel daemon, usable from many threads at once.

    Make one with :meth:`spawn` (a private daemon over stdio) or :meth:`connect` (a running
    daemon's Unix socket). Use it as a context manager so the daemon is shut down cleanly.
    """

    def __init__(
        self,
        reader: IO[bytes],
        writer: IO[bytes],
        *,
        process: Optional["subprocess.Popen[bytes]"] = None,
        sock: Optional[socket.socket] = None,
    ) -> None:
        """Wraps a byte stream pair; prefer :meth:`spawn` or :meth:`connect`."""
        super().__init__()
        self._reader = reader
        self._writer = writer
        self._process = process
        self._sock = sock
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _pending and _closed
        self._write_lock = threading.Lock()  # one frame at a time on the wire
        self._pending: Dict[Any, "concurrent.futures.Future[Any]"] = {}
        self._sizes: Dict[Any, int] = {}  # encoded size of each pending request, see null_id_target
        self._closed: Optional[ConnectionClosed] = None
        self._closing = False
        self._has_summarizer = False
        self._thread = threading.Thread(target=self._read_loop, name="satchel-client-reader", daemon=True)
        self._thread.start()

    # --- construction --------------------------------------------------------------------

    @classmethod
    def spawn(
        cls,
        satchel: Optional[PathLike] = None,
        workspace: Optional[PathLike] = None,
        args: Sequence[str] = (),
        env: Optional[Dict[str, str]] = None,
        *,
        stderr: Any = None,
        summarizer: Optional[Summarizer] = None,
    ) -> "Client":
        """Starts ``satchel [--workspace DIR] serve ARGS`` and talks to it over its stdin/stdout.

        ``satchel`` is the binary (default ``$SATCHEL_BIN``, else ``satchel`` on PATH).
        ``workspace`` defaults to satchel's own (``$SATCHEL_HOME`` or the platform data dir).
        ``env`` is added to the current environment. ``stderr`` (satchel's logs) is inherited
        unless it is a path (appended to) or a file/``subprocess.DEVNULL``; satchel logs
        warnings and errors only (``SATCHEL_LOG=warn``) unless ``env`` or the environment sets
        ``SATCHEL_LOG`` (e.g. ``env={"SATCHEL_LOG": "info"}``). With
        ``summarizer``, the client answers ``summarizer.complete`` with it and sends
        ``initialize`` declaring so (see :meth:`set_summarizer`).
        """
        argv = P.command(satchel, workspace, args)
        target, to_close = P.stderr_target(stderr)
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=target, env=P.spawn_env(env)
            )
        finally:
            if to_close is not None:
                to_close.close()  # the child has its own copy
        assert process.stdout is not None and process.stdin is not None
        client = cls(process.stdout, process.stdin, process=process)
        if summarizer is not None:
            try:
                client.set_summarizer(summarizer)
            except BaseException:
                client.close()
                raise
        return client

    @classmethod
    def connect(cls, socket_path: PathLike, *, timeout: Optional[float] = None) -> "Client":
        """Attaches to a daemon serving ``satchel serve --socket PATH``.

        The daemon is shared (e.g. with an editor), so closing this client only closes the
        connection. ``timeout`` bounds the connect itself, not later calls.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(os.fspath(socket_path))
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return cls(sock.makefile("rb"), sock.makefile("wb"), sock=sock)

    # --- protocol methods ----------------------------------------------------------------

    def initialize(self, **params: Any) -> InitializeResult:
        """``initialize``: server version, protocol version, effective config.

        Optional for satchel, but the way to declare capabilities; when a summarizer is
        registered, ``capabilities.summarizer_complete`` is added.
        """
        return self.call("initialize", P.initialize_params(params, self._has_summarizer))

    def prepare(
        self,
        session_id: str,
        messages: Optional[List[Any]] = None,
        append: Optional[List[Any]] = None,
        format: Optional[str] = None,
        system: Any = None,
        tools: Optional[List[Any]] = None,
        config: Optional[Dict[str, Any]] = None,
        *,
        expect_messages: Optional[int] = None,
        sections: Optional[List[PromptSection]] = None,
        usage: Union[ProviderUsage, int, None] = None,
        memory: Union[MemoryRecall, bool, None] = None,
        work_done_token: Union[int, str, None] = None,
    ) -> PrepareResult:
        """``context.prepare``: send ``messages`` (the full list) or ``append`` (only new ones);
        get back the request-ready conversation, tokens per zone and what was done.

        With ``append``, pass ``expect_messages`` = the ``reconciliation.session_messages`` of
        the last reply: if the session holds another count (a lost reply, another client),
        the call raises :class:`~satchel_client.StaleSession` and appends nothing, so
        retrying an ``append`` never adds the same messages twice.

        ``sections`` (:class:`~satchel_client.types.PromptSection` dicts: ``key``,
        ``content``, ``priority``, optionally ``protected``, ``source_type``, ``scope``,
        ``reason``, ``paths``) are assembled after ``system`` under the prompt budget: the
        result's ``system`` is the prompt to send and ``prompt`` says how it was assembled.
        ``usage`` is the provider's usage of the session's previous request
        (``{"input_tokens": n}``, or ``n``), which corrects satchel's counts; see also
        :meth:`report_usage`.

        ``memory`` (a :class:`~satchel_client.types.MemoryRecall`: ``max_results``,
        ``min_score``, ``priority``; ``{}`` or ``True`` for the defaults) adds the top
        :meth:`memory_search` hits for the newest user message to the prompt as the section
        ``memory:recall``; it raises :class:`~satchel_client.MemoryUnavailable` when the
        daemon's memory search is off. ``work_done_token`` is LSP's ``workDoneToken``: a
        compaction's ``$/progress`` goes under it.
        """
        return self.call(
            "context.prepare",
            P.prepare_params(
                session_id,
                messages,
                append,
                format,
                system,
                tools,
                config,
                expect_messages,
                sections,
                usage,
                memory,
                work_done_token,
            ),
        )

    def compact(
        self,
        session_id: str,
        instruction: Optional[str] = None,
        config: Optional[Dict[str, Any]] = None,
        *,
        work_done_token: Union[int, str, None] = None,
    ) -> CompactResult:
        """``context.compact``: compact everything but the recent reserve now. With
        ``work_done_token`` (LSP's ``workDoneToken``), its ``$/progress`` goes under that token."""
        return self.call(
            "context.compact",
            P.without_none(
                session_id=session_id, instruction=instruction, workDoneToken=work_done_token, config=config
            ),
        )

    def read(
        self,
        path: str,
        start_line: Optional[int] = None,
        byte_offset: Optional[int] = None,
        max_bytes: Optional[int] = None,
    ) -> ReadResult:
        """``context.read``: a slice of an offloaded file, as named in a truncation notice."""
        return self.call(
            "context.read",
            P.without_none(path=path, start_line=start_line, byte_offset=byte_offset, max_bytes=max_bytes),
        )

    def inspect(
        self, session_id: str, query_hint: Optional[str] = None, detail_key: Optional[str] = None
    ) -> InspectResult:
        """``context.inspect``: tokens per zone, pressure, summary, offloads, compactions, the
        monitor and calibration, and how the last request's system prompt was assembled.

        ``query_hint`` computes the request focus from that text instead of the newest user
        message; ``detail_key`` adds the full text of that section as ``detail``.
        """
        return self.call("context.inspect", P.inspect_params(session_id, query_hint, detail_key))

    def expand(
        self,
        session_id: str,
        compaction_id: Optional[str] = None,
        archive: Optional[ExpandRange] = None,
        max_tokens: Optional[int] = None,
    ) -> ExpandResult:
        """``context.expand``: bring a compacted span (``compaction_id``, or an ``archive``
        range of the session) back into the next ``prepare`` only, within ``max_tokens``
        (default a quarter of the window); the result says what it will carry."""
        return self.call(
            "context.expand",
            P.without_none(
                session_id=session_id, compaction_id=compaction_id, archive=archive, max_tokens=max_tokens
            ),
        )

    def pin(
        self,
        session_id: str,
        message_index: Optional[int] = None,
        text: Optional[str] = None,
        result_id: Optional[str] = None,
        label: Optional[str] = None,
    ) -> PinsResult:
        """``context.pin``: keep a message (by original index), a text, or a tool result (by its
        id, ``r12``) verbatim in every request, across compactions and restarts."""
        return self.call(
            "context.pin",
            P.without_none(
                session_id=session_id, message_index=message_index, text=text, result_id=result_id, label=label
            ),
        )

    def unpin(self, session_id: str, pin_id: str) -> PinsResult:
        """``context.unpin``: remove a pin (``p1``)."""
        return self.call("context.unpin", {"session_id": session_id, "pin_id": pin_id})

    def purge(self, session_id: str, result_id: str) -> PurgeResult:
        """``context.purge``: later requests show the result (``r12``) as a one-line stub; its
        file keeps it."""
        return self.call("context.purge", {"session_id": session_id, "result_id": result_id})

    def usage(self, session_id: str, input_tokens: int) -> Calibration:
        """``context.usage`` as a request: reports the provider's input tokens for the
        session's last ``prepare`` and returns the resulting calibration. Clients usually
        send it as a notification instead: :meth:`report_usage`."""
        return self.call("context.usage", P.usage_params(session_id, input_tokens))

    def report_usage(self, session_id: str, input_tokens: int) -> None:
        """``context.usage`` as a notification (no reply), right after the model call: the
        provider's input tokens for the session's last ``prepare``, which corrects satchel's
        counts from the next call on."""
        self.notify("context.usage", P.usage_params(session_id, input_tokens))

    def sessions(self) -> SessionsResult:
        """``context.sessions``: every stored session, with live numbers for those in use."""
        return self.call("context.sessions", {})

    def watch(self, session_id: str) -> WatchResult:
        """``context.watch``: subscribes this connection to ``context.event`` notifications of
        the session (after each prepare and compaction); receive them with
        ``on_notification("context.event", fn)``, registered before calling this."""
        return self.call("context.watch", {"session_id": session_id})

    # --- long-term memory ------------------------------------------------------------------
    # The files `MEMORY.md` and `memory/**/*.md` of the workspace are the memory; satchel
    # keeps a search index of them. Paths are workspace-relative.

    def memory_write(self, path: str, content: str) -> MemoryFileChange:
        """``memory.write``: replaces the memory file ``path`` (``MEMORY.md`` or a ``.md`` file
        under ``memory/``) with ``content``, atomically, and indexes it: it is searchable when
        this returns. Another path raises :class:`~satchel_client.InvalidParams`."""
        return self.call("memory.write", {"path": path, "content": content})

    def memory_append(self, path: str, text: str) -> MemoryFileChange:
        """``memory.append``: appends ``text`` to the memory file ``path`` (created if missing;
        a newline goes first when the file does not end with one), durably, and indexes it."""
        return self.call("memory.append", {"path": path, "text": text})

    def memory_get(
        self, path: str, start_line: Optional[int] = None, end_line: Optional[int] = None
    ) -> MemoryGetResult:
        """``memory.get``: the memory file ``path``, or its lines ``start_line..=end_line``
        (1-based), e.g. those a :meth:`memory_search` hit names."""
        return self.call("memory.get", P.without_none(path=path, start_line=start_line, end_line=end_line))

    def memory_search(
        self,
        query: str,
        max_results: Optional[int] = None,
        min_score: Optional[float] = None,
        mode: Optional[SearchMode] = None,
    ) -> MemorySearchResult:
        """``memory.search``: the memory chunks that best answer ``query``, best first, each
        with its file and lines. ``mode`` is ``auto`` (default), ``bm25``, ``vector`` or
        ``hybrid``; raises :class:`~satchel_client.MemoryUnavailable` when memory search is off."""
        return self.call(
            "memory.search",
            P.without_none(query=query, max_results=max_results, min_score=min_score, mode=mode),
        )

    def memory_merge(self, through: Optional[str] = None) -> MemoryMergeResult:
        """``memory.merge``: folds the daily logs (``memory/YYYY-MM-DD.md``) of the days up to
        ``through`` (``YYYY-MM-DD``, default today) into ``MEMORY.md``, skipping entries it
        already has, and keeps a backup of the previous ``MEMORY.md``. The daemon also does
        this once a day."""
        return self.call("memory.merge", P.without_none(through=through))

    def memory_status(self) -> MemoryStatusResult:
        """``memory.status``: the index (files, chunks, size), the search modes that are on,
        the file watcher, the embedding backend and when the next daily merge runs."""
        return self.call("memory.status", {})

    # --- learning candidates ----------------------------------------------------------------
    # Short lessons and rules learned from the work (a failure and its fix), kept in the
    # workspace's signed store; promoted ones are sections of the system prompt.

    def candidates_observe(
        self,
        text: str,
        kind: CandidateKind,
        tags: Optional[List[str]] = None,
        files: Optional[List[str]] = None,
        symbols: Optional[List[str]] = None,
        evidence: Optional[ObserveEvidence] = None,
        session_id: Optional[str] = None,
    ) -> ObserveResult:
        """``candidates.observe``: records a lesson or rule (``kind``: ``lesson``, ``rule``,
        ``preference``, ``correction``), merged into a similar recent candidate of the same kind
        or a new ``shadow`` one. ``evidence`` with a ``failure`` and its ``fix`` adds to its score,
        but no single observation is promoted (a lesson needs two sessions); ``files`` and
        ``symbols`` boost it when a request names them. Over a limit (``text`` 2,000 characters,
        64 tags, files or symbols of 512) raises ``InvalidParams``."""
        return self.call(
            "candidates.observe",
            P.without_none(
                text=text,
                kind=kind,
                tags=tags,
                files=files,
                symbols=symbols,
                evidence=evidence,
                session_id=session_id,
            ),
        )

    def candidates_feedback(self, id: str, outcome: FeedbackOutcome) -> FeedbackResult:
        """``candidates.feedback``: whether following candidate ``id`` (``c1``) helped
        (``success``) or not (``failure``)."""
        return self.call("candidates.feedback", {"id": id, "outcome": outcome})

    def candidates_list(self, state: Optional[CandidateState] = None) -> ListResult:
        """``candidates.list``: the candidates (only those in ``state`` when given) and the store
        lines rejected on load (bad signature, unparsable)."""
        return self.call("candidates.list", P.without_none(state=state))

    def candidates_evaluate(self) -> EvaluateResult:
        """``candidates.evaluate``: runs the promotion, demotion, archive and retention gates now;
        returns the transitions and the ids removed."""
        return self.call("candidates.evaluate", {})

    def candidates_remove(self, id: str) -> RemoveResult:
        """``candidates.remove``: removes candidate ``id``; ``removed`` is false when none had it."""
        return self.call("candidates.remove", {"id": id})

    def set_summarizer(self, fn: Summarizer) -> InitializeResult:
        """Lets ``fn(messages, max_tokens) -> str`` write satchel's summaries.

        Registers it for ``summarizer.complete`` and sends ``initialize`` with
        ``capabilities.summarizer_complete``, since satchel only asks clients that declared
        it. satchel uses it when the config says ``"summarizer": "client"``; ``messages``
        are OpenAI-style ``{role, content}`` dicts. An exception is sent back as an error, and
        satchel falls back to its extractive summary.
        """
        self.on_request(P.SUMMARIZER_COMPLETE, P.summarizer_handler(fn))
        self._has_summarizer = True
        return self.initialize()

    # --- generic JSON-RPC ----------------------------------------------------------------

    def call(self, method: str, params: Any = None, *, timeout: Optional[float] = None) -> Any:
        """Sends a request and waits for its result (or raises its error as a SatchelError).

        When ``timeout`` passes, the request is cancelled with ``$/cancelRequest`` and the
        daemon's answer to that is awaited (up to 5 more seconds, ``CANCEL_GRACE_SECS``):

        - satchel cancelled the call: ``TimeoutError`` is raised, with the
          :class:`~satchel_client.RequestCancelled` as its ``__cause__``. The call had no
          effect at all (the session is exactly as before), so it may be resent as is;
        - the call had already passed its commit point: the cancel is ignored and its normal
          result is returned (or its error raised), as LSP allows;
        - no answer (or the connection closed): ``TimeoutError`` whose ``__cause__`` is not a
          ``RequestCancelled``. The outcome is unknown: retry
          ``context.prepare`` with the full ``messages`` list (idempotent), or ``append`` with
          ``expect_messages``.
        """
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._lock:
            if self._closed is not None:
                raise ConnectionClosed(*self._closed.args)
            id_ = next(self._ids)
            data = P.encode(P.request(id_, method, params))
            self._pending[id_] = future
            self._sizes[id_] = len(data)
        try:
            self._write(data)
            try:
                return future.result(timeout)
            except concurrent.futures.TimeoutError:
                if future.done():  # the reply came as the wait ended
                    return future.result()
            try:
                self.notify(P.CANCEL_REQUEST, {"id": id_})
                return future.result(P.CANCEL_GRACE_SECS)
            except RequestCancelled as e:
                raise TimeoutError(P.timeout_message(method, timeout, cancelled=True)) from e
            except ConnectionClosed as e:  # no answer: the outcome is unknown
                raise TimeoutError(P.timeout_message(method, timeout, cancelled=False)) from e
            except concurrent.futures.TimeoutError:
                raise TimeoutError(P.timeout_message(method, timeout, cancelled=False)) from None
        finally:
            with self._lock:
                self._pending.pop(id_, None)
                self._sizes.pop(id_, None)

    def notify(self, method: str, params: Any = None) -> None:
        """Sends a notification (no reply), e.g. ``$/cancelRequest``."""
        self._send(P.notification(method, params))

    # --- lifecycle -----------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Shuts down: in-flight requests still get their replies, then the connection closes.

        A spawned daemon sees EOF on stdin, finishes what it was doing and exits; if it has
        not exited after ``timeout`` seconds it is terminated (then killed). A socket
        connection waits up to ``timeout`` for pending replies, then closes; that daemon
        keeps running for its other clients. Safe to call twice.
        """
        if self._closing:
            return
        self._closing = True
        if self._sock is not None:
            deadline = time.monotonic() + timeout
            while self._pending and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._write_lock:
            try:
                self._writer.close()
            except OSError:
                pass
        if self._process is not None:
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.terminate()
                try:
                    self._process.wait(5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        self._thread.join(timeout)
        self._fail_pending(ConnectionClosed("the client was closed"))
        if not self._thread.is_alive():  # closing a reader mid-readline would block on its lock
            self._reader.close()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def process(self) -> Optional["subprocess.Popen[bytes]"]:
        """The spawned daemon, if this client spawned one."""
        return self._process

    # --- internals -----------------------------------------------------------------------

    def _send(self, message: Dict[str, Any]) -> None:
        self._write(P.encode(message))

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            if self._closed is not None:
                raise ConnectionClosed(*self._closed.args)
            try:
                self._writer.write(data)
                self._writer.flush()
            except (OSError, ValueError) as e:  # ValueError: write to a closed file
                raise ConnectionClosed(f"cannot send to satchel: {e}") from e

    def _read_loop(self) -> None:
        reason = "satchel closed the connection"
        try:
            for line in iter(self._reader.readline, b""):
                if line.strip():
                    try:
                        self._dispatch(line)
                    except Exception:  # a bad message must not stop the replies to everyone else
                        P.log.exception("could not handle a message from satchel: %.200r", line)
        except (OSError, ValueError) as e:
            reason = f"reading from satchel failed: {e}"
        if self._process is not None:
            try:
                code = self._process.wait(1)
                reason = f"satchel exited with code {code}" + (" (see its stderr)" if code else "")
            except subprocess.TimeoutExpired:
                pass
        self._fail_pending(ConnectionClosed(reason))

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            P.log.warning("ignoring a line that is not JSON: %.200r", line)
            return
        kind = P.kind(message)
        if kind == "response":
            with self._lock:
                id_ = message["id"]
                if id_ is None:
                    id_ = P.null_id_target(message.get("error"), self._sizes)
                future = self._pending.pop(id_, None)
                self._sizes.pop(id_, None)
            if future is None:
                if message["id"] is None:
                    P.log.warning("satchel error for an unidentifiable message: %r", message.get("error"))
                else:
                    P.log.debug("reply to an unknown or abandoned request: %r", message["id"])
            elif "error" in message:
                future.set_exception(error_from_response(message["error"] or {}))
            else:
                future.set_result(message["result"])
        elif kind == "request":
            # Its own thread: a handler may take long (a model call) or call the client.
            threading.Thread(target=self._answer, args=(message,), name="satchel-client-handler", daemon=True).start()
        elif kind == "notification":
            self._notify_handlers(message)
        else:
            P.log.warning("ignoring an unexpected message: %.200r", line)

    def _answer(self, message: Dict[str, Any]) -> None:
        method, id_ = message["method"], message["id"]
        handler = self._request_handlers.get(method)
        try:
            if handler is None:
                raise P.no_handler(method)
            reply = P.result_reply(id_, handler(message.get("params")))
        except Exception as e:
            reply = P.error_reply(id_, e)
        try:
            self._send(reply)
        except ConnectionClosed:
            P.log.debug("could not answer %s: the connection is closed", method)

    def _fail_pending(self, error: ConnectionClosed) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = error
            pending, self._pending = self._pending, {}
            self._sizes = {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
