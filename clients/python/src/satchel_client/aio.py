"""The asyncio client: the same methods as :class:`~satchel_client.Client`, as coroutines.

One reader task routes every incoming line (replies by id, notifications, the daemon's own
requests), so any number of calls may be awaited at once, e.g. with ``asyncio.gather``.
"""

import asyncio
import inspect
import itertools
import json
import os
import subprocess
from typing import Any, Awaitable, Callable, Dict, Generator, List, Optional, Sequence, Set, Union

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
Summarizer = Callable[[List[Dict[str, str]], int], Union[str, Awaitable[str]]]


class _Opening:
    """What :meth:`AsyncClient.spawn` and :meth:`AsyncClient.connect` return: await it for the
    client, or use it directly in ``async with`` (which closes the client at the end)."""

    def __init__(self, opening: Awaitable["AsyncClient"]) -> None:
        self._opening = opening
        self._client: Optional[AsyncClient] = None

    def __await__(self) -> Generator[Any, None, "AsyncClient"]:
        return self._opening.__await__()

    async def __aenter__(self) -> "AsyncClient":
        self._client = await self._opening
        return self._client

    async def __aexit__(self, *exc: Any) -> None:
        assert self._client is not None
        await self._client.aclose()


class AsyncClient(P.Handlers):
    """A connection to one satchel daemon for asyncio code.

    ``async with AsyncClient.spawn() as client:`` or ``client = await AsyncClient.connect(path)``.
    Must be used from the event loop it was made on.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        process: Optional["asyncio.subprocess.Process"] = None,
        is_socket: bool = False,
    ) -> None:
        """Wraps a stream pair (inside a running loop); prefer :meth:`spawn` or :meth:`connect`."""
        super().__init__()
        self._reader = reader
        self._writer = writer
        self._process = process
        self._is_socket = is_socket
        self._ids = itertools.count(1)
        self._pending: Dict[Any, "asyncio.Future[Any]"] = {}
        self._sizes: Dict[Any, int] = {}  # encoded size of each pending request, see null_id_target
        self._write_lock = asyncio.Lock()  # Python 3.9's drain() allows one waiter at a time
        self._closed: Optional[ConnectionClosed] = None
        self._closing = False
        self._has_summarizer = False
        self._tasks: Set["asyncio.Task[Any]"] = set()  # handler tasks, kept alive until done
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

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
    ) -> _Opening:
        """Starts ``satchel [--workspace DIR] serve ARGS``; arguments as for ``Client.spawn``.

        ``summarizer`` may be a plain function (run in a worker thread, so a blocking model
        call does not stall the loop) or a coroutine function.
        """
        return _Opening(cls._spawn(satchel, workspace, args, env, stderr, summarizer))

    @classmethod
    async def _spawn(
        cls,
        satchel: Optional[PathLike],
        workspace: Optional[PathLike],
        args: Sequence[str],
        env: Optional[Dict[str, str]],
        stderr: Any,
        summarizer: Optional[Summarizer],
    ) -> "AsyncClient":
        argv = P.command(satchel, workspace, args)
        target, to_close = P.stderr_target(stderr)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=target,
                env=P.spawn_env(env),
                limit=P.STREAM_LIMIT,
            )
        finally:
            if to_close is not None:
                to_close.close()
        assert process.stdout is not None and process.stdin is not None
        client = cls(process.stdout, process.stdin, process=process)
        if summarizer is not None:
            try:
                await client.set_summarizer(summarizer)
            except BaseException:
                await client.aclose()
                raise
        return client

    @classmethod
    def connect(cls, socket_path: PathLike) -> _Opening:
        """Attaches to a daemon serving ``satchel serve --socket PATH`` (closing leaves it running)."""

        async def opening() -> "AsyncClient":
            reader, writer = await asyncio.open_unix_connection(os.fspath(socket_path), limit=P.STREAM_LIMIT)
            return cls(reader, writer, is_socket=True)

        return _Opening(opening())

    # --- protocol methods (see Client for what each does) --------------------------------

    async def initialize(self, **params: Any) -> InitializeResult:
        """``initialize``; declares ``summarizer_complete`` when a summarizer is registered."""
        return await self.call("initialize", P.initialize_params(params, self._has_summarizer))

    async def prepare(
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
        """``context.prepare`` with ``messages`` (full list) or ``append`` (new ones only);
        ``expect_messages`` guards an ``append``, ``sections``, ``usage``, ``memory`` and
        ``work_done_token`` are as in ``Client.prepare``."""
        return await self.call(
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

    async def compact(
        self,
        session_id: str,
        instruction: Optional[str] = None,
        config: Optional[Dict[str, Any]] = None,
        *,
        work_done_token: Union[int, str, None] = None,
    ) -> CompactResult:
        """``context.compact``: compact everything but the recent reserve now (``$/progress``
        under ``work_done_token`` when given)."""
        return await self.call(
            "context.compact",
            P.without_none(
                session_id=session_id, instruction=instruction, workDoneToken=work_done_token, config=config
            ),
        )

    async def read(
        self,
        path: str,
        start_line: Optional[int] = None,
        byte_offset: Optional[int] = None,
        max_bytes: Optional[int] = None,
    ) -> ReadResult:
        """``context.read``: a slice of an offloaded file."""
        return await self.call(
            "context.read",
            P.without_none(path=path, start_line=start_line, byte_offset=byte_offset, max_bytes=max_bytes),
        )

    async def inspect(
        self, session_id: str, query_hint: Optional[str] = None, detail_key: Optional[str] = None
    ) -> InspectResult:
        """``context.inspect``; ``query_hint`` and ``detail_key`` as in ``Client.inspect``."""
        return await self.call("context.inspect", P.inspect_params(session_id, query_hint, detail_key))

    async def expand(
        self,
        session_id: str,
        compaction_id: Optional[str] = None,
        archive: Optional[ExpandRange] = None,
        max_tokens: Optional[int] = None,
    ) -> ExpandResult:
        """``context.expand``: bring a compacted span (``compaction_id``, or an ``archive``
        range of the session) back into the next ``prepare`` only, within ``max_tokens``
        (default a quarter of the window); the result says what it will carry."""
        return await self.call(
            "context.expand",
            P.without_none(
                session_id=session_id, compaction_id=compaction_id, archive=archive, max_tokens=max_tokens
            ),
        )

    async def pin(
        self,
        session_id: str,
        message_index: Optional[int] = None,
        text: Optional[str] = None,
        result_id: Optional[str] = None,
        label: Optional[str] = None,
    ) -> PinsResult:
        """``context.pin``: keep a message (by original index), a text, or a tool result (by its
        id, ``r12``) verbatim in every request, across compactions and restarts."""
        return await self.call(
            "context.pin",
            P.without_none(
                session_id=session_id, message_index=message_index, text=text, result_id=result_id, label=label
            ),
        )

    async def unpin(self, session_id: str, pin_id: str) -> PinsResult:
        """``context.unpin``: remove a pin (``p1``)."""
        return await self.call("context.unpin", {"session_id": session_id, "pin_id": pin_id})

    async def purge(self, session_id: str, result_id: str) -> PurgeResult:
        """``context.purge``: later requests show the result (``r12``) as a one-line stub; its
        file keeps it."""
        return await self.call("context.purge", {"session_id": session_id, "result_id": result_id})

    async def usage(self, session_id: str, input_tokens: int) -> Calibration:
        """``context.usage`` as a request, returning the calibration (see ``Client.usage``)."""
        return await self.call("context.usage", P.usage_params(session_id, input_tokens))

    async def report_usage(self, session_id: str, input_tokens: int) -> None:
        """``context.usage`` as a notification (no reply), as in ``Client.report_usage``."""
        await self.notify("context.usage", P.usage_params(session_id, input_tokens))

    async def sessions(self) -> SessionsResult:
        """``context.sessions``: every stored session, with live numbers for those in use."""
        return await self.call("context.sessions", {})

    async def watch(self, session_id: str) -> WatchResult:
        """``context.watch``: subscribes this connection to ``context.event`` notifications of
        the session (after each prepare and compaction); receive them with
        ``on_notification("context.event", fn)``, registered before calling this."""
        return await self.call("context.watch", {"session_id": session_id})

    # --- long-term memory (see Client for what each does) ----------------------------------

    async def memory_write(self, path: str, content: str) -> MemoryFileChange:
        """``memory.write``: replaces a memory file and indexes it (see ``Client.memory_write``)."""
        return await self.call("memory.write", {"path": path, "content": content})

    async def memory_append(self, path: str, text: str) -> MemoryFileChange:
        """``memory.append``: appends to a memory file (created if missing) and indexes it."""
        return await self.call("memory.append", {"path": path, "text": text})

    async def memory_get(
        self, path: str, start_line: Optional[int] = None, end_line: Optional[int] = None
    ) -> MemoryGetResult:
        """``memory.get``: a memory file, or its lines ``start_line..=end_line`` (1-based)."""
        return await self.call("memory.get", P.without_none(path=path, start_line=start_line, end_line=end_line))

    async def memory_search(
        self,
        query: str,
        max_results: Optional[int] = None,
        min_score: Optional[float] = None,
        mode: Optional[SearchMode] = None,
    ) -> MemorySearchResult:
        """``memory.search``: the memory chunks that best answer ``query`` (see ``Client.memory_search``)."""
        return await self.call(
            "memory.search",
            P.without_none(query=query, max_results=max_results, min_score=min_score, mode=mode),
        )

    async def memory_merge(self, through: Optional[str] = None) -> MemoryMergeResult:
        """``memory.merge``: folds the daily logs up to ``through`` (``YYYY-MM-DD``) into ``MEMORY.md``."""
        return await self.call("memory.merge", P.without_none(through=through))

    async def memory_status(self) -> MemoryStatusResult:
        """``memory.status``: the index, search modes, watcher, embedding backend and next merge."""
        return await self.call("memory.status", {})

    # --- learning candidates ----------------------------------------------------------------
    # Short lessons and rules learned from the work (a failure and its fix), kept in the
    # workspace's signed store; promoted ones are sections of the system prompt.

    async def candidates_observe(
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
        return await self.call(
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

    async def candidates_feedback(self, id: str, outcome: FeedbackOutcome) -> FeedbackResult:
        """``candidates.feedback``: whether following candidate ``id`` (``c1``) helped
        (``success``) or not (``failure``)."""
        return await self.call("candidates.feedback", {"id": id, "outcome": outcome})

    async def candidates_list(self, state: Optional[CandidateState] = None) -> ListResult:
        """``candidates.list``: the candidates (only those in ``state`` when given) and the store
        lines rejected on load (bad signature, unparsable)."""
        return await self.call("candidates.list", P.without_none(state=state))

    async def candidates_evaluate(self) -> EvaluateResult:
        """``candidates.evaluate``: runs the promotion, demotion, archive and retention gates now;
        returns the transitions and the ids removed."""
        return await self.call("candidates.evaluate", {})

    async def candidates_remove(self, id: str) -> RemoveResult:
        """``candidates.remove``: removes candidate ``id``; ``removed`` is false when none had it."""
        return await self.call("candidates.remove", {"id": id})

    async def set_summarizer(self, fn: Summarizer) -> InitializeResult:
        """Answers ``summarizer.complete`` with ``fn(messages, max_tokens)`` (sync or async) and
        sends ``initialize`` declaring the capability; see ``Client.set_summarizer``."""
        self.on_request(P.SUMMARIZER_COMPLETE, P.summarizer_handler(fn))
        self._has_summarizer = True
        return await self.initialize()

    # --- generic JSON-RPC ----------------------------------------------------------------

    async def call(self, method: str, params: Any = None, *, timeout: Optional[float] = None) -> Any:
        """Sends a request and awaits its result (or raises its error as a SatchelError).

        When ``timeout`` passes, the request is cancelled on the daemon with
        ``$/cancelRequest`` and its answer awaited, as in ``Client.call``: satchel's
        -32800 raises ``asyncio.TimeoutError`` with the ``RequestCancelled`` as its
        ``__cause__`` (the call had no effect); a call that had already committed returns its
        result; no answer within ``CANCEL_GRACE_SECS`` raises ``asyncio.TimeoutError`` whose
        cause is not a ``RequestCancelled`` (outcome unknown). If the awaiting task is cancelled, ``$/cancelRequest`` is
        sent too, and the task does not wait for the daemon's answer.
        """
        if self._closed is not None:
            raise ConnectionClosed(*self._closed.args)
        id_ = next(self._ids)
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        data = P.encode(P.request(id_, method, params))
        self._pending[id_] = future
        self._sizes[id_] = len(data)
        cancel_sent = False
        try:
            await self._write(data)
            try:
                # shield: on timeout the future stays pending, to receive the cancel's outcome.
                return await asyncio.wait_for(asyncio.shield(future), timeout)
            except asyncio.TimeoutError:
                if future.done():  # the reply came as the wait ended
                    return future.result()
            cancel_sent = self._send_cancel(id_)
            try:
                return await asyncio.wait_for(asyncio.shield(future), P.CANCEL_GRACE_SECS)
            except RequestCancelled as e:
                raise asyncio.TimeoutError(P.timeout_message(method, timeout, cancelled=True)) from e
            except ConnectionClosed as e:  # no answer: the outcome is unknown
                raise asyncio.TimeoutError(P.timeout_message(method, timeout, cancelled=False)) from e
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(P.timeout_message(method, timeout, cancelled=False)) from None
        except asyncio.CancelledError:
            if not cancel_sent and id_ in self._pending and not future.done():
                self._send_cancel(id_)
            raise
        finally:
            self._pending.pop(id_, None)
            self._sizes.pop(id_, None)
            if not future.done():
                future.cancel()

    async def notify(self, method: str, params: Any = None) -> None:
        """Sends a notification (no reply)."""
        await self._send(P.notification(method, params))

    # --- lifecycle -----------------------------------------------------------------------

    async def aclose(self, timeout: float = 10.0) -> None:
        """Shuts down like ``Client.close``: pending replies still arrive, then the stream closes;
        a spawned daemon gets ``timeout`` seconds to exit before it is terminated."""
        if self._closing:
            return
        self._closing = True
        if self._is_socket and self._pending:
            await asyncio.wait(list(self._pending.values()), timeout=timeout)
        self._writer.close()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), timeout)
        except (OSError, asyncio.TimeoutError):
            pass
        if self._process is not None:
            try:
                await asyncio.wait_for(self._process.wait(), timeout)
            except asyncio.TimeoutError:
                self._process.terminate()
                try:
                    await asyncio.wait_for(self._process.wait(), 5)
                except asyncio.TimeoutError:
                    self._process.kill()
                    await self._process.wait()
        try:
            await asyncio.wait_for(asyncio.shield(self._reader_task), timeout)
        except asyncio.TimeoutError:
            self._reader_task.cancel()
        for task in list(self._tasks):  # handlers still running could not send their answers
            task.cancel()
        self._fail_pending(ConnectionClosed("the client was closed"))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def process(self) -> Optional["asyncio.subprocess.Process"]:
        """The spawned daemon, if this client spawned one."""
        return self._process

    # --- internals -----------------------------------------------------------------------

    def _send_cancel(self, id_: int) -> bool:
        """Sends ``$/cancelRequest`` for ``id_``; ``False`` if the connection is closing."""
        if self._writer.is_closing():
            return False
        # write() is synchronous and frames are appended whole, so no lock is needed (and a
        # cancelled task should not wait for one).
        self._writer.write(P.encode(P.notification(P.CANCEL_REQUEST, {"id": id_})))
        return True

    async def _send(self, message: Dict[str, Any]) -> None:
        await self._write(P.encode(message))

    async def _write(self, data: bytes) -> None:
        if self._closed is not None:
            raise ConnectionClosed(*self._closed.args)
        async with self._write_lock:
            if self._writer.is_closing():  # asyncio would drop the write silently
                raise ConnectionClosed("the connection to satchel is closing")
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (OSError, RuntimeError) as e:  # RuntimeError: write after close
                raise ConnectionClosed(f"cannot send to satchel: {e}") from e

    async def _read_loop(self) -> None:
        reason = "satchel closed the connection"
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                if line.strip():
                    try:
                        self._dispatch(line)
                    except Exception:  # a bad message must not stop the replies to everyone else
                        P.log.exception("could not handle a message from satchel: %.200r", line)
        except (OSError, ValueError) as e:  # ValueError: a line over STREAM_LIMIT
            reason = f"reading from satchel failed: {e}"
        if self._process is not None:
            try:
                code = await asyncio.wait_for(self._process.wait(), 1)
                reason = f"satchel exited with code {code}" + (" (see its stderr)" if code else "")
            except asyncio.TimeoutError:
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
            id_ = message["id"]
            if id_ is None:
                id_ = P.null_id_target(message.get("error"), self._sizes)
            future = self._pending.pop(id_, None)
            self._sizes.pop(id_, None)
            if future is None or future.done():
                if message["id"] is None:
                    P.log.warning("satchel error for an unidentifiable message: %r", message.get("error"))
                else:
                    P.log.debug("reply to an unknown or abandoned request: %r", message["id"])
            elif "error" in message:
                future.set_exception(error_from_response(message["error"] or {}))
            else:
                future.set_result(message["result"])
        elif kind == "request":
            self._spawn_task(self._answer(message))
        elif kind == "notification":
            for returned in self._notify_handlers(message):
                if inspect.isawaitable(returned):
                    self._spawn_task(returned)
        else:
            P.log.warning("ignoring an unexpected message: %.200r", line)

    def _spawn_task(self, awaitable: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: Dict[str, Any]) -> None:
        method, id_ = message["method"], message["id"]
        handler = self._request_handlers.get(method)
        params = message.get("params")
        try:
            if handler is None:
                raise P.no_handler(method)
            if inspect.iscoroutinefunction(handler):
                result = await handler(params)
            else:
                # A worker thread: a plain handler may block (e.g. a synchronous model call).
                result = await asyncio.get_running_loop().run_in_executor(None, handler, params)
                if inspect.isawaitable(result):
                    result = await result
            reply = P.result_reply(id_, result)
        except Exception as e:
            reply = P.error_reply(id_, e)
        try:
            await self._send(reply)
        except ConnectionClosed:
            P.log.debug("could not answer %s: the connection is closed", method)

    def _fail_pending(self, error: ConnectionClosed) -> None:
        if self._closed is None:
            self._closed = error
        pending, self._pending = self._pending, {}
        self._sizes = {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
