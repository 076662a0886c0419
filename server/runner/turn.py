"""One turn: a container, its stdout validated by the core, bytes out — one nursery.

    async with runner.open_turn(dispatch) as turn:  # nursery opened, container started
        async for chunk in turn:                    # validated NDJSON (or SSE) bytes
            await client.send(chunk)
    # here the container is gone

Cancellation (the caller leaving, ``break``, an exception) stops the container in
``__aexit__``; :meth:`TurnStream.end` ends the stream with ``error{code}``, after a
``permission`` line ``resolved`` (``cancelled``) for each request still pending (``live``
extension): nobody can answer them any more. The stream
ends with exactly one terminal line unless the caller left (docs/architecture.md, "The
turn" and "Cancellation paths").
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, TypeAlias

import trio

from sandstream.core import (
    Error,
    Log,
    Mode,
    ModelUsage,
    Permission,
    Result,
    StreamProcessor,
    TokenBudget,
    Usage,
    encode_line,
)
from sandstream.server.gateway import (
    CallFailure,
    GatewayListenError,
    ObserverFactory,
    ProxiedCall,
    TurnGateway,
    with_access,
)

from .errors import LaunchError, TurnStateError
from .launcher import ContainerExit, ContainerHandle, ContainerLauncher
from .settings import RunnerSettings

__all__ = [
    "END_GRACE",
    "AccessRecord",
    "TurnOutcome",
    "TurnStream",
    "new_turn_id",
]

log = logging.getLogger("sandstream.runner")

TurnOutcome: TypeAlias = Literal[
    "result",  # the container sent its result
    "error",  # the container sent an error line
    "container_exited",  # it exited without a terminal line (upstream_closed)
    "limit_exceeded",  # the launcher ended it over a resource limit (memory_limit, ...)
    "launch_failed",
    "client_disconnected",  # the HTTP client went away
    "cancelled",  # an in-process caller left early
    "runtime_exceeded",
    "stalled",
    "shutdown",
    "protocol_error",
    "interrupted",  # a durable session's interrupt
    "provider_unavailable",  # its model calls kept failing (the model gateway)
    "budget_reached",  # its model calls spent its token budget (the model gateway)
    "not_started",  # admitted, but the response body never started
]

EndCode: TypeAlias = Literal[
    "runtime_exceeded",
    "stalled",
    "shutdown",
    "protocol_error",
    "interrupted",
    "provider_unavailable",
    "budget_reached",
]

END_GRACE: Final = 1.0
"""On shutdown, how long a client may take to take its last chunk before it is cut."""

_RECEIVE_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def new_turn_id() -> str:
    """A fresh turn id: ``turn_`` and 16 random hex digits."""
    return f"turn_{secrets.token_hex(8)}"


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """The access-log record of one turn, written once when it closes.

    ``outcome`` says how it ended; ``terminal`` is ``"result"`` or the error code the
    client received last (``None`` if none was sent). ``lines``/``bytes``/``writes``
    count what was handed to the client. ``first_line_ms``: from the turn's opening
    to its first line handed to the client; ``first_text_ms``: to the first that
    carried the agent's text (a ``delta``); ``None`` when there was none.
    ``teardown_ms``: from the moment the turn decided to stop the container to the
    container being reaped (``None`` when it exited on its own).
    """

    turn_id: str
    outcome: TurnOutcome
    terminal: str | None
    duration_ms: float
    lines: int
    bytes: int
    writes: int
    diagnostics: int
    container: str | None
    returncode: int | None
    escalated: bool
    stragglers: int
    teardown_ms: float | None
    first_line_ms: float | None = None
    first_text_ms: float | None = None


class _LaunchStatus:
    """The ``task_status`` handed to the launcher (a :class:`trio.TaskStatus`)."""

    def __init__(self, turn: TurnStream) -> None:
        self._turn = turn

    def started(self, value: ContainerHandle | None = None) -> None:
        turn = self._turn
        turn._handle = value
        turn._launched.set()
        if value is not None and turn._on_container_started is not None:
            turn._on_container_started(turn)


class TurnStream:
    """One turn's container, stream and teardown. See the module docstring.

    Build it with :meth:`Runner.open_turn <sandstream.server.runner.admission.Runner.open_turn>`
    (admitted against the capacity limit), or directly with a launcher. ``dispatch``:
    the JSON the container reads on stdin. ``mode``: the core's output mode (``"sse"``
    also makes the ``start`` frame and pings). ``abort_client``: called synchronously by
    :meth:`abort_client` (stall, or a shutdown that cannot deliver the last line) to cut
    a connection whose write is blocked. ``cancel_outcome``: the record's outcome for a
    caller that left early. ``on_container_started``: called once the container runs;
    ``on_container_gone``: once it is gone (or was never started); ``on_closed``: once,
    with the :class:`AccessRecord`.
    ``messages``: lines for stdin after the dispatch; without it stdin closes after it.
    ``extensions``: the envelope extensions the dispatch asked for (the core then
    accepts their lines; ``usage`` lines only from the runner itself,
    ``processor.add_usage``, never from the container). ``provider_keys``: the provider
    variables of the turn's model gateway (:class:`~sandstream.server.gateway.TurnGateway`),
    opened before the container starts, whose access replaces them in the dispatch; each
    failed model call becomes a ``log`` line (``warn``) of the stream at once, and calls
    failing for ``settings.provider_unavailable_after`` end the turn with
    ``error{code:"provider_unavailable"}``. ``call_observers``: more observers of each
    model call (:data:`~sandstream.server.gateway.ObserverFactory`); the runner's
    meter hands each call's ``usage`` line to :meth:`add_usage`. ``budget``: the tokens
    the turn's model calls may spend; the gateway refuses a model call once they are
    spent (telling ``on_over_budget``) and the turn ends ``error{code:"budget_reached"}``.
    """

    def __init__(
        self,
        dispatch: bytes,
        *,
        launcher: ContainerLauncher,
        settings: RunnerSettings,
        turn_id: str | None = None,
        mode: Mode = "ndjson",
        cancel_outcome: Literal["cancelled", "client_disconnected"] = "cancelled",
        abort_client: Callable[[], object] | None = None,
        on_container_started: Callable[[TurnStream], object] | None = None,
        on_container_gone: Callable[[TurnStream], object] | None = None,
        on_closed: Callable[[TurnStream, AccessRecord], object] | None = None,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        extensions: Collection[str] = (),
        provider_keys: Mapping[str, str] | None = None,
        call_observers: Sequence[ObserverFactory] = (),
        budget: TokenBudget | None = None,
        on_over_budget: Callable[[ProxiedCall], object] | None = None,
    ) -> None:
        self.id = turn_id or new_turn_id()
        self.processor = StreamProcessor(
            mode,
            strict=settings.strict,
            max_line_bytes=settings.max_line_bytes,
            extensions=extensions,
            usage_from_upstream=False,  # usage lines: the runner's own metering, never a sandbox's
        )
        """The core's state for this turn: ``processor.turn`` has steps and terminal."""
        self._dispatch = dispatch
        self._launcher = launcher
        self._settings = settings
        self._cancel_outcome: TurnOutcome = cancel_outcome
        self._abort_client = abort_client
        self._on_container_started = on_container_started
        self._on_container_gone = on_container_gone
        self._on_closed = on_closed
        self._messages = messages
        self._provider_keys = provider_keys
        self._call_observers = call_observers
        self._budget = budget
        self._on_over_budget = on_over_budget
        self.gateway: TurnGateway | None = None
        """The turn's model gateway, once open (``None``: the turn has none)."""
        self.metered = Usage()
        """The tokens of the turn's model calls metered so far (also those whose lines
        are not in the stream yet): what its budget is checked against."""
        self._notes: list[Log | ModelUsage] = []
        self._wake_scope: trio.CancelScope | None = None

        self._state: Literal["new", "open", "closed"] = "new"
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self._container_scope = trio.CancelScope()
        self._launched = trio.Event()
        self._gone = trio.Event()
        self._handle: ContainerHandle | None = None
        self._launch_error: LaunchError | None = None
        self._stdout: trio.abc.ReceiveStream | None = None

        self._end: tuple[EndCode, str] | None = None
        self._outcome: TurnOutcome | None = None
        self._read_scope: trio.CancelScope | None = None
        self._discard_scope: trio.CancelScope | None = None
        self._read_deadline = float("inf")
        self._eof = False
        self._done = False

        self._sending_since: float | None = None

        self._opened_at = time.monotonic()
        self._first_line_ms: float | None = None
        self._first_text_ms: float | None = None
        self._stop_requested_at: float | None = None
        self.lines = 0
        """Lines handed to the caller (frames, in an SSE mode)."""
        self.last_lines = 0
        """Lines (frames) in the last chunk handed to the caller."""
        self.bytes = 0
        """Bytes handed to the caller."""
        self.writes = 0
        """Chunks handed to the caller."""
        self.record: AccessRecord | None = None
        """The access-log record, once the turn is closed."""
        self.closed = trio.Event()
        """Set once the turn is closed: container gone and record written."""

    # -- public state -------------------------------------------------------------

    @property
    def container(self) -> ContainerHandle | None:
        """The running container's handle, once launched (``None`` if it failed)."""
        return self._handle

    @property
    def container_exit(self) -> ContainerExit | None:
        """How the container ended, once it is gone."""
        return None if self._handle is None else self._handle.exit

    @property
    def container_gone(self) -> trio.Event:
        """Set once the container has been reaped (or was never started)."""
        return self._gone

    @property
    def started(self) -> bool:
        """True once entered (``__aenter__``)."""
        return self._state != "new"

    @property
    def ended(self) -> bool:
        """True once the terminal line has been handed out (or the caller left)."""
        return self._done

    # -- control ------------------------------------------------------------------

    def end(self, code: EndCode, message: str, *, client_grace: float | None = None) -> None:
        """End the turn with ``error{code, message}`` and stop the container.

        Safe to call from any task, at any time, any number of times: the first
        reason wins, and nothing happens once the terminal line was handed out.
        A pending read is interrupted at once; the error line is the next chunk
        (or nothing, if the container had already sent its own terminal). The
        container's stdout is read and dropped while it stops, as soon as no read is
        pending, so it exits on ``SIGTERM`` whatever the caller does. With
        ``client_grace``, a caller that has not written the chunk it holds now within
        that many seconds is cut off (:meth:`abort_client`). Called before the turn
        is entered, no container is ever started.
        """
        if self._done or self._end is not None or self._state == "closed":
            return
        self._end = (code, message)
        self._outcome = code
        if self._read_scope is not None:
            self._read_scope.cancel()  # the reader starts the discarding on its way out
        else:
            self._start_discarding()
        self._stop_container()
        if client_grace is not None and self._sending_since is not None:
            assert self._nursery is not None  # a chunk was handed out: the turn is open
            self._nursery.start_soon(self._cut_if_still_holding, self.writes, client_grace)

    def abort_client(self) -> None:
        """Cut the client off (the ``abort_client`` hook), for a write that is stuck.

        Does nothing without a hook. The caller's pending write then fails, the
        caller leaves the ``async with``, and the turn closes.
        """
        if self._abort_client is not None:
            try:
                self._abort_client()
            except OSError as exc:
                log.warning("turn %s: cutting the client connection failed: %r", self.id, exc)

    def discard(self) -> None:
        """Give up a turn that was never entered: release what it holds. Idempotent."""
        if self._state != "new":
            return
        self._state = "closed"
        self._outcome = "not_started"
        self._done = True
        self._mark_gone()
        self._write_record()

    # -- async context manager ------------------------------------------------------

    async def __aenter__(self) -> TurnStream:
        """Open the turn's nursery and start the container.

        Returns once the container runs (or failed to start: then the stream holds
        just ``error{code:"launch_failed"}``). Cancellation: the container, if it
        had started, is stopped and reaped before :class:`trio.Cancelled` propagates.
        """
        if self._state != "new":
            raise TurnStateError(f"turn {self.id} was already {self._state}")
        self._state = "open"
        self._opened_at = time.monotonic()
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        try:
            if self._end is None and self._provider_keys:
                await self._open_gateway(self._nursery, self._provider_keys)
            if self._end is None and self._launch_error is None:
                self._nursery.start_soon(self._run_container)
                await self._launched.wait()
            else:
                self._mark_gone()
            if self._handle is not None:
                self._stdout = self._handle.stdout
                if self._settings.runtime_cap != float("inf"):
                    self._nursery.start_soon(self._watch_runtime, self._settings.runtime_cap)
                if self._settings.stall_timeout is not None:
                    self._nursery.start_soon(self._watch_stall, self._settings.stall_timeout)
            elif self._launch_error is not None:
                self._outcome = "launch_failed"
        except BaseException:
            if not self._done:
                self._done = True
                self._outcome = self._cancel_outcome
            self._stop_container()
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the container if it still runs, wait until it is reaped, write the record.

        Never suppresses the exception in flight. The wait is shielded and bounded by
        the kill grace: a cancelled caller still returns only once the container's
        process group is gone.
        """
        if self._state != "open":
            return
        if not self._done:
            self._done = True
            if self._end is None:
                self._outcome = self._cancel_outcome
        self._stop_container()
        await self._close()

    async def _open_gateway(self, nursery: trio.Nursery, keys: Mapping[str, str]) -> None:
        """Open the turn's model gateway and give the sandbox its access instead of the
        keys; a listener that cannot open fails the launch."""
        self.gateway = TurnGateway(
            self.id,
            keys,
            unavailable_after=self._settings.provider_unavailable_after,
            on_failure=self._provider_failed,
            on_unavailable=self._provider_unavailable,
            observers=self._call_observers,
            admit=None if self._budget is None else self._admit_call,
        )
        try:
            access = await nursery.start(self.gateway.serve)
        except GatewayListenError as exc:
            self._launch_error = LaunchError(exc.errno, exc.strerror or str(exc))
            log.error("turn %s: %s", self.id, exc)
            return
        self._dispatch = with_access(self._dispatch, access)

    def _provider_failed(self, failure: CallFailure) -> None:
        message = f"model call failed: {failure.describe()}"
        log.warning("turn %s: %s", self.id, message)
        self._note(Log(level="warn", message=message, ts=time.time_ns() // 1_000_000))

    def _provider_unavailable(self, failure: CallFailure) -> None:
        after = self._settings.provider_unavailable_after
        message = f"no model call succeeded for {after:g} s; the last: {failure.describe()}"
        log.warning("turn %s: %s", self.id, message)
        self.end("provider_unavailable", message)

    def add_usage(self, line: ModelUsage) -> None:
        """A model call of the turn, metered (the runner's meter): its tokens count
        against the budget now, and its ``usage`` line goes into the stream like a
        line of the runner's own (:meth:`_note`). After the stream's end the tokens
        are still added to ``processor.turn.usage``: they were spent."""
        self.metered += Usage(
            line.input_tokens, line.output_tokens, line.cached_input_tokens, line.cache_write_tokens
        )
        self._note(line)

    def _admit_call(self, call: ProxiedCall) -> str | None:
        """The gateway's question before a model call: ``None`` lets it pass; once the
        budget is spent, the refusal's message (and the turn ends ``budget_reached``)."""
        budget = self._budget
        assert budget is not None
        used = self.metered.total
        if used < budget.tokens:
            return None
        message = budget.describe(used)
        log.info("turn %s: %s; its next model call is refused", self.id, message)
        if self._on_over_budget is not None:
            self._on_over_budget(call)
        self.end("budget_reached", message)
        return message

    def _note(self, line: Log | ModelUsage) -> None:
        """Put a line of the runner's own into the stream, at once (a pending read of
        the container's stdout is woken; nothing it would have read is lost). Lines
        are queued in order and go out between the container's lines, never inside
        one. Once the stream has ended a ``log`` line is dropped, a ``usage`` line
        folded into the turn's totals only."""
        if self._done or self.processor.closed:
            if type(line) is ModelUsage:
                self.processor.add_usage(line)
            return
        self._notes.append(line)
        if self._wake_scope is not None:
            self._wake_scope.cancel()

    def _take_notes(self) -> bytes:
        """The output of the queued lines of the runner's own (a ``usage`` line is
        folded also when the turn has ended: :meth:`StreamProcessor.add_usage`)."""
        notes, self._notes = self._notes, []
        processor = self.processor
        out: list[bytes] = []
        for note in notes:
            if type(note) is ModelUsage:
                out.append(processor.add_usage(note))
            elif not (processor.closed or processor.ended):
                out.append(processor.insert(encode_line(note)[:-1]))
        return b"".join(out)

    # -- async iterator ----------------------------------------------------------------

    def __aiter__(self) -> TurnStream:
        return self

    async def __anext__(self) -> bytes:
        """The next chunk of output: one or more whole lines, never empty.

        Raises :class:`StopAsyncIteration` after the terminal line. Cancellation is
        safe: nothing read is lost, and the next call goes on where this one was.
        """
        if self._state != "open":
            raise TurnStateError(f"iterate turn {self.id} inside 'async with' ({self._state})")
        self._sending_since = None  # the caller is back: the previous chunk is written
        while not self._done:
            out = await self._next_output()
            if out:
                self.writes += 1
                self.bytes += len(out)
                self.last_lines = self.processor.written - self.lines
                self.lines = self.processor.written
                self._sending_since = trio.current_time()
                self._note_firsts()
                return out
        raise StopAsyncIteration

    # -- internals: output ---------------------------------------------------------------

    async def _next_output(self) -> bytes:
        processor = self.processor
        if self._end is not None:
            self._done = True
            self._start_discarding()
            if processor.closed:
                return b""
            return self._take_notes() + self._cancel_pending() + processor.fail(*self._end)
        if self._handle is None:  # launch failed
            self._done = True
            assert self._launch_error is not None
            reason = self._launch_error.strerror or str(self._launch_error)
            return processor.fail("launch_failed", f"the container could not start: {reason}")
        if self._eof:
            return await self._finish()
        data = await self._read()
        if data is False:  # woken: the runner has lines of its own
            return self._take_notes()
        if data is None:  # interrupted: end() was called, or the drain deadline passed
            if self._end is None:
                self._eof = True
            return b""
        if not data:
            self._eof = True
            return b""
        out = processor.feed(data)
        if processor.ended and processor.turn.synthesized:  # strict mode: protocol_error
            self._outcome = "protocol_error"
            self._done = True
            self._stop_container()
        return out

    def _cancel_pending(self) -> bytes:
        """The output of a ``resolved`` (``cancelled``) line for each permission
        request still pending, fed to the core as if the container had sent it."""
        processor = self.processor
        if processor.ended:
            return b""
        ts = time.time_ns() // 1_000_000
        lines = [
            encode_line(Permission(id=request_id, status="resolved", reply="cancelled", ts=ts))
            for request_id, row in processor.turn.permissions.items()
            if row.status == "pending"
        ]
        return processor.feed(b"".join(lines)) if lines else b""

    async def _read(self) -> bytes | Literal[False] | None:
        """One read of stdout: data, ``b""`` at EOF, ``None`` if interrupted, ``False``
        if woken by a line of the runner's own (:meth:`_note`)."""
        assert self._stdout is not None
        with trio.CancelScope(deadline=self._read_deadline) as scope:
            self._read_scope = scope
            try:
                with trio.CancelScope() as wake:
                    self._wake_scope = wake
                    if self._notes:
                        wake.cancel()
                    data = await self._stdout.receive_some(self._settings.read_size)
                    return data if type(data) is bytes else bytes(data)
                return False
            except _RECEIVE_ERRORS as exc:
                log.warning("turn %s: reading the container's stdout failed: %r", self.id, exc)
                return b""
            finally:
                self._read_scope = None
                self._wake_scope = None
        return None

    async def _finish(self) -> bytes:
        """At stdout EOF: collect the exit status and make the terminal line."""
        if not self._gone.is_set():
            # It closed stdout, so it is about to exit; give it settle_timeout.
            with trio.move_on_after(self._settings.settle_timeout) as scope:
                self._read_scope = scope
                try:
                    await self._gone.wait()
                finally:
                    self._read_scope = None
            if self._end is not None:
                return b""
            if not self._gone.is_set():
                self._stop_container()
                await self._gone.wait()
        self._done = True
        exit_ = self.container_exit
        processor = self.processor
        notes = self._take_notes()
        if exit_ is not None and exit_.limit is not None and not processor.ended:
            self._outcome = "limit_exceeded"
            return notes + processor.fail(exit_.limit.code, exit_.limit.message)
        status = exit_.describe() if exit_ is not None else "ended"
        ended_before = processor.ended
        out = notes + processor.close(f"the container {status} without sending a result or error")
        if not ended_before and processor.turn.synthesized:
            self._outcome = "container_exited"
        return out

    # -- internals: tasks ------------------------------------------------------------

    async def _run_container(self) -> None:
        try:
            with self._container_scope:
                await self._launcher.run(
                    self._dispatch,
                    self.id,
                    messages=self._messages,
                    task_status=_LaunchStatus(self),
                )
        except LaunchError as exc:
            self._launch_error = exc
            log.error("turn %s: %s", self.id, exc.strerror)
        finally:
            if self._messages is not None:
                self._messages.close()  # also when it never started
            self._launched.set()
            self._mark_gone()

    async def _watch_runtime(self, cap: float) -> None:
        await trio.sleep(cap)
        self.end("runtime_exceeded", f"the turn ran past its runtime cap of {cap:g} s")

    async def _cut_if_still_holding(self, writes: int, grace: float) -> None:
        """Cut the client off if, after ``grace``, the caller still holds chunk ``writes``."""
        await trio.sleep(grace)
        if self._sending_since is not None and self.writes == writes:
            log.warning(
                "turn %s: the client did not take its last chunk within %g s; cutting it off",
                self.id,
                grace,
            )
            self.abort_client()

    async def _watch_stall(self, timeout: float) -> None:
        """End the turn once one chunk has been in the caller's hands for ``timeout``.

        Polls (every quarter of ``timeout``) rather than waking on every chunk, so a
        busy stream pays nothing for it: a stall is seen after 1 to 1.25 ``timeout``.
        """
        while True:
            await trio.sleep(timeout / 4)
            since = self._sending_since
            if since is None or trio.current_time() - since < timeout:
                continue
            log.warning("turn %s: client stalled for %g s, ending the turn", self.id, timeout)
            self.end("stalled", f"the client did not read for {timeout:g} s")
            self._outcome = "stalled"
            self.abort_client()
            return

    # -- internals: teardown ------------------------------------------------------------

    def _stop_container(self) -> None:
        if self._stop_requested_at is None and not self._gone.is_set():
            self._stop_requested_at = time.monotonic()
        self._container_scope.cancel()

    def _start_discarding(self) -> None:
        """Start :meth:`_discard_output` in the nursery, once; only when no read is
        pending (two readers of one stream would collide)."""
        if self._discard_scope is not None or self._stdout is None or self._gone.is_set():
            return
        assert self._nursery is not None and self._read_scope is None
        self._discard_scope = trio.CancelScope(shield=True)  # cancelled once it is gone
        self._nursery.start_soon(self._discard_output, self._stdout, self._discard_scope)

    async def _discard_output(
        self, stdout: trio.abc.ReceiveStream, scope: trio.CancelScope
    ) -> None:
        """Read and drop stdout until the container is gone (shielded).

        A container blocked writing to a full pipe could not act on ``SIGTERM``
        (its last write never completes), and would be ``SIGKILL``-ed after the
        grace. Reading on while it stops lets it exit at once. Bounded: the
        container is gone within the kill grace, and that ends this.
        """
        with scope:
            try:
                while await stdout.receive_some(self._settings.read_size):
                    pass
            except _RECEIVE_ERRORS:
                pass

    def _mark_gone(self) -> None:
        if self._gone.is_set():
            return
        self._gone.set()
        if self.gateway is not None:
            self.gateway.revoke()
        if self._discard_scope is not None:
            self._discard_scope.cancel()
        # Whatever still sits in the pipe is given drain_timeout to arrive.
        self._read_deadline = trio.current_time() + self._settings.drain_timeout
        if self._read_scope is not None:
            self._read_scope.deadline = min(self._read_scope.deadline, self._read_deadline)
        if self._on_container_gone is not None:
            self._on_container_gone(self)

    async def _close(self) -> None:
        """Close the nursery (shielded, so the container is always reaped), then record."""
        assert self._nursery is not None and self._nursery_manager is not None
        try:
            self._start_discarding()  # the nursery waits for it: shielded, bounded
            scope = self._nursery.cancel_scope
            scope.shield = True
            scope.cancel()
            await self._nursery_manager.__aexit__(None, None, None)
        finally:
            self._state = "closed"
            self._take_notes()  # a usage line still queued is folded: its tokens were spent
            self._mark_gone()
            if self._stdout is not None:
                with trio.CancelScope(shield=True):
                    await self._stdout.aclose()
            self._write_record()

    def _note_firsts(self) -> None:
        """The time to the first line handed out, and to the first with text."""
        if self._first_line_ms is None:
            self._first_line_ms = self._since_opened_ms()
        live = self.processor.turn.live
        if (
            self._first_text_ms is None
            and live is not None
            and live.text_chars + live.omitted_text_chars > 0
        ):
            self._first_text_ms = self._since_opened_ms()

    def _since_opened_ms(self) -> float:
        return round((time.monotonic() - self._opened_at) * 1000, 3)

    def _write_record(self) -> None:
        exit_ = self.container_exit
        terminal = self.processor.turn.terminal
        terminal_code: str | None
        if type(terminal) is Result:
            terminal_code = "result"
        elif type(terminal) is Error:
            terminal_code = terminal.code
        else:
            terminal_code = None
        outcome = self._outcome
        if outcome is None:
            outcome = "result" if terminal_code == "result" else "error"
        teardown_ms = None
        if exit_ is not None and self._stop_requested_at is not None:
            teardown_ms = max(0.0, (exit_.reaped_at - self._stop_requested_at) * 1000)
        self.record = AccessRecord(
            turn_id=self.id,
            outcome=outcome,
            terminal=terminal_code,
            duration_ms=self._since_opened_ms(),
            lines=self.lines,
            bytes=self.bytes,
            writes=self.writes,
            diagnostics=self.processor.turn.diagnostic_count,
            container=None if self._handle is None else self._handle.id,
            returncode=None if exit_ is None else exit_.returncode,
            escalated=False if exit_ is None else exit_.escalated,
            stragglers=0 if exit_ is None else exit_.stragglers,
            teardown_ms=None if teardown_ms is None else round(teardown_ms, 3),
            first_line_ms=self._first_line_ms,
            first_text_ms=self._first_text_ms,
        )
        self.closed.set()
        if self._on_closed is not None:
            self._on_closed(self, self.record)

    def __repr__(self) -> str:
        return f"<TurnStream {self.id} {self._state} outcome={self._outcome}>"
