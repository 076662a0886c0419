"""A chat turn's runner session, embedded or remote, behind one interface.

:class:`RunnerSession`: read a session's chunks after a cursor
(:meth:`~RunnerSession.reader`), hand the agent a user message or the answer to a
permission request, interrupt it. :func:`start_runner_session` creates one,
:func:`connect_runner_session` finds it again. :class:`EmbeddedSession` is a session of
this process's ``SessionService``; :class:`RemoteSession` one of a remote runner, read as
NDJSON from ``GET {url}/sessions/{id}/stream`` and reopened from the last cursor when the
connection breaks before the terminal. Leaving the reader (also by cancellation) ends its read.

Errors: :class:`RunnerSessionGoneError` (unknown session, or runner unreachable for
``gone_after`` s), :class:`SessionEndedError`, :class:`PermissionNotFoundError` and
:class:`PermissionAnsweredError` (the runner session decides: it is where answers are
serialized, whichever replica sends them), :class:`RemoteRunnerError` (a refusal).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import httpx
import msgspec
import trio

from sandstream.core import Dispatch, PermissionAnswer
from sandstream.server.chat.model import RemoteRunnerError, RunnerSessionGoneError, answer_detail
from sandstream.server.runner import RunnerUnavailableError
from sandstream.server.sessions import (
    PERMISSION_ANSWERED,
    PERMISSION_NOT_FOUND,
    CaughtUp,
    Chunks,
    CursorGoneError,
    Follow,
    KeepAlive,
    PermissionAnsweredError,
    PermissionNotFoundError,
    Run,
    Session,
    SessionEndedError,
    SessionNotFoundError,
    SessionService,
    Subscribe,
    terminal_state,
)

__all__ = [
    "KEEPALIVE",
    "CursorGoneError",
    "EmbeddedSession",
    "Position",
    "RemoteSession",
    "RunnerSession",
    "SessionEndedError",
    "SessionReader",
    "connect_runner_session",
    "start_runner_session",
]

log = logging.getLogger("sandstream.chat")

KEEPALIVE: Final = "keepalive"
READ_BYTES: Final = 1024 * 1024
"""The most one read of an embedded session hands a viewer: what a lagging viewer holds,
and large enough that it catches up rather than falls further behind."""
RECONNECT_DELAYS: Final = (0.05, 0.2, 0.5, 1.0, 2.0)
"""Seconds between attempts to reopen a remote session's stream (the last repeats)."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a session is: ``last``, its newest chunk's cursor; ``ended``: that chunk
    is its terminal."""

    last: int
    ended: bool


class SessionReader(Protocol):
    async def next(self) -> Chunks | Literal["keepalive"] | None:
        """The next chunks, ``KEEPALIVE`` after ``keepalive`` idle seconds, or ``None``
        once the session's last chunk was returned. Raises :class:`RunnerSessionGoneError`
        (remote runner lost) and :class:`~sandstream.server.sessions.CursorGoneError`.
        Cancellation: safe; the next call goes on where the last one stopped."""
        ...


class RunnerSession(Protocol):
    @property
    def id(self) -> str:
        """The runner's id of the session."""
        ...

    @property
    def runner_url(self) -> str | None:
        """The remote runner's base URL (``None``: embedded)."""
        ...

    def reader(
        self, after: int, keepalive: float, subscribe: Subscribe | None = None
    ) -> AbstractAsyncContextManager[SessionReader]:
        """Read the chunks after cursor ``after`` (raises
        :class:`~sandstream.server.sessions.CursorGoneError` for a dropped cursor).
        ``subscribe``: how the reader takes the session's new runs without its task
        waking while it is caught up (embedded sessions; others ignore it)."""
        ...

    async def position(self) -> Position:
        """The newest chunk's cursor now, and whether that is the session's last one.
        Raises :class:`RunnerSessionGoneError`."""
        ...

    async def send_message(self, text: str) -> None:
        """Hand ``text`` to the agent. Raises :class:`SessionEndedError`."""
        ...

    async def answer_permission(self, answer: PermissionAnswer) -> None:
        """Hand the answer to a permission request to the agent; the first answer wins.
        Raises :class:`PermissionNotFoundError`, :class:`PermissionAnsweredError`,
        :class:`SessionEndedError`."""
        ...

    async def interrupt(self) -> None:
        """End the session (``error{code:"interrupted"}``); returns once its container is
        gone. Idempotent."""
        ...


# -- embedded ---------------------------------------------------------------------------


class _FollowReader:
    def __init__(self, follow: Follow) -> None:
        self._follow = follow

    async def next(self) -> Chunks | Literal["keepalive"] | None:
        while True:
            try:
                event = await self._follow.__anext__()
            except StopAsyncIteration:
                return None
            if isinstance(event, Chunks):
                return event
            if isinstance(event, KeepAlive):
                return KEEPALIVE
            assert isinstance(event, CaughtUp)


class EmbeddedSession:
    """A session of this process's :class:`SessionService`."""

    runner_url: None = None

    def __init__(self, session: Session) -> None:
        self.session = session
        self.id = session.id

    @asynccontextmanager
    async def reader(
        self, after: int, keepalive: float, subscribe: Subscribe | None = None
    ) -> AsyncIterator[SessionReader]:
        self.session.check_cursor(after)
        follow = Follow(
            self.session, after, max_bytes=READ_BYTES, keepalive=keepalive, subscribe=subscribe
        )
        yield _FollowReader(follow)

    async def position(self) -> Position:
        return Position(self.session.last_cursor, self.session.ended)

    async def send_message(self, text: str) -> None:
        await self.session.send_message(text)

    async def answer_permission(self, answer: PermissionAnswer) -> None:
        await self.session.answer_permission(answer)

    async def interrupt(self) -> None:
        await self.session.interrupt()

    def end(self, message: str) -> None:
        """End the session now with ``error{code:"shutdown"}`` (server shutdown)."""
        if self.session.turn is not None:
            self.session.turn.end("shutdown", message)


# -- remote -------------------------------------------------------------------------------


class _Status(msgspec.Struct):
    id: str
    state: str
    last_chunk_id: int


class _Created(msgspec.Struct):
    id: str


class _Problem(msgspec.Struct):
    type: str = "about:blank"
    reply: str | None = None


def _problem(response: httpx.Response) -> _Problem:
    """The problem JSON a runner refused with (its defaults when it sent none)."""
    try:
        return msgspec.json.decode(response.content, type=_Problem)
    except msgspec.DecodeError:
        return _Problem()


class RemoteSession:
    """A session of the remote runner at ``runner_url`` (with its ``token``)."""

    def __init__(
        self,
        runner_url: str,
        session_id: str,
        *,
        token: str | None,
        connect_timeout: float = 10.0,
        gone_after: float = 30.0,
    ) -> None:
        self.runner_url = runner_url
        self.id = session_id
        self._token = token
        self._connect_timeout = connect_timeout
        self._gone_after = gone_after

    def _client(self) -> httpx.AsyncClient:
        return _runner_client(self._token, self._connect_timeout)

    @property
    def _base(self) -> str:
        return f"{self.runner_url}/sessions/{self.id}"

    @asynccontextmanager
    async def reader(
        self, after: int, keepalive: float, subscribe: Subscribe | None = None
    ) -> AsyncIterator[SessionReader]:
        send, receive = trio.open_memory_channel[Chunks | BaseException](16)
        async with self._client() as client, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, after, send)
            try:
                yield _ChannelReader(receive, keepalive)
            finally:
                nursery.cancel_scope.cancel()

    async def _pump(
        self,
        client: httpx.AsyncClient,
        after: int,
        send: trio.MemorySendChannel[Chunks | BaseException],
    ) -> None:
        """Read the session's NDJSON from ``after`` to its terminal, reconnecting."""
        cursor = after
        attempt = 0
        failing_since: float | None = None
        async with send:
            while True:
                ended = False
                try:
                    async with client.stream(
                        "GET",
                        f"{self._base}/stream",
                        params={"cursor": str(cursor)},
                        headers={"Accept": "application/x-ndjson"},
                    ) as response:
                        if response.status_code == 204:  # the cursor is the ended session's last
                            return
                        if response.status_code in (404, 410, 422):
                            detail = await answer_detail(response) or (
                                f"the runner answered {response.status_code}"
                            )
                            await send.send(RunnerSessionGoneError(f"session {self.id}: {detail}"))
                            return
                        if response.status_code != 200:
                            raise httpx.TransportError(f"answered {response.status_code}")
                        pending = b""
                        async for data in response.aiter_raw():
                            attempt, failing_since = 0, None
                            data = pending + data
                            end = data.rfind(b"\n") + 1
                            pending = data[end:]
                            if not end:
                                continue
                            run = Run(cursor + 1, data[:end], data.count(b"\n", 0, end))
                            await send.send(Chunks([run]))
                            cursor = run.last
                            last_line = data[data.rfind(b"\n", 0, end - 1) + 1 : end - 1]
                            ended = terminal_state(last_line) is not None
                    if ended:
                        return
                except httpx.TransportError as exc:
                    now = trio.current_time()
                    failing_since = failing_since if failing_since is not None else now
                    if now - failing_since > self._gone_after:
                        await send.send(
                            RunnerSessionGoneError(
                                f"session {self.id}: the runner is unreachable: {exc}"
                            )
                        )
                        return
                    log.info("session %s: reading it failed (%r); reconnecting", self.id, exc)
                await trio.sleep(RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
                attempt += 1

    async def _request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        try:
            async with self._client() as client:
                return await client.request(method, f"{self._base}{path}", **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError as exc:
            raise RunnerSessionGoneError(
                f"session {self.id}: the runner is unreachable: {exc}"
            ) from exc

    async def position(self) -> Position:
        response = await self._request("GET", "/status")
        if response.status_code != 200:
            raise RunnerSessionGoneError(
                f"session {self.id}: the runner answered {response.status_code}"
            )
        status = msgspec.json.decode(response.content, type=_Status)
        return Position(status.last_chunk_id, status.state != "running")

    async def send_message(self, text: str) -> None:
        response = await self._request("POST", "/message", json={"text": text})
        if response.status_code == 409:
            raise SessionEndedError(self.id)
        if response.status_code != 200:
            raise RemoteRunnerError(
                f"the runner answered {response.status_code} to a message: {response.text[:200]}"
            )

    async def answer_permission(self, answer: PermissionAnswer) -> None:
        response = await self._request(
            "POST",
            "/message",
            content=msgspec.json.encode(answer),
            headers={"Content-Type": "application/json"},
        )
        if response.status_code == 200:
            return
        refusal = _problem(response)
        if response.status_code == 404 and refusal.type == PERMISSION_NOT_FOUND:
            raise PermissionNotFoundError(answer.id)
        if response.status_code == 409 and refusal.type == PERMISSION_ANSWERED:
            raise PermissionAnsweredError(answer.id, refusal.reply)
        if response.status_code == 409:
            raise SessionEndedError(self.id)
        if response.status_code == 404:
            raise RunnerSessionGoneError(f"session {self.id}: the runner does not know it")
        raise RemoteRunnerError(
            f"the runner answered {response.status_code} to a permission answer: "
            f"{response.text[:200]}"
        )

    async def interrupt(self) -> None:
        response = await self._request("POST", "/interrupt")
        if response.status_code == 404:
            raise RunnerSessionGoneError(f"session {self.id}: the runner does not know it")
        if response.status_code != 200:
            raise RemoteRunnerError(
                f"the runner answered {response.status_code} to an interrupt: {response.text[:200]}"
            )


class _ChannelReader:
    def __init__(
        self, receive: trio.MemoryReceiveChannel[Chunks | BaseException], keepalive: float
    ) -> None:
        self._receive = receive
        self._keepalive = keepalive

    async def next(self) -> Chunks | Literal["keepalive"] | None:
        with trio.move_on_after(self._keepalive):
            try:
                item = await self._receive.receive()
            except trio.EndOfChannel:
                return None
            if isinstance(item, BaseException):
                raise item
            return item
        return KEEPALIVE


def _runner_client(token: str | None, connect_timeout: float) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(
        connect=connect_timeout, read=None, write=connect_timeout, pool=connect_timeout
    )
    return httpx.AsyncClient(http1=True, http2=False, timeout=timeout, headers=headers)


# -- creating and finding ------------------------------------------------------------------


async def start_runner_session(
    dispatch: Dispatch,
    *,
    embedded: SessionService | None,
    runner_url: str | None,
    token: str | None,
    connect_timeout: float,
) -> RunnerSession:
    """Start a session running ``dispatch``: on ``embedded`` when ``runner_url`` is
    ``None``, else ``POST {runner_url}/sessions``.

    Raises ``RunnerUnavailableError`` (at capacity, shutting down: 503 with its
    ``Retry-After``), :class:`RemoteRunnerError` (unreachable or refused).
    """
    if runner_url is None:
        assert embedded is not None
        return EmbeddedSession(await embedded.create(dispatch))
    endpoint = f"{runner_url}/sessions"
    try:
        async with _runner_client(token, connect_timeout) as client:
            response = await client.post(
                endpoint,
                content=msgspec.json.encode(dispatch),
                headers={"Content-Type": "application/json"},
            )
    except httpx.TransportError as exc:
        raise RemoteRunnerError(f"cannot reach the runner at {endpoint}: {exc!r}") from exc
    if response.status_code == 503:
        retry = int(response.headers.get("Retry-After") or 5)
        raise RunnerUnavailableError(f"the runner at {runner_url} is unavailable", retry)
    if response.status_code != 201:
        raise RemoteRunnerError(
            f"the runner at {runner_url} answered {response.status_code}: {response.text[:200]}"
        )
    created = msgspec.json.decode(response.content, type=_Created)
    return RemoteSession(runner_url, created.id, token=token, connect_timeout=connect_timeout)


def connect_runner_session(
    session_id: str,
    *,
    embedded: SessionService | None,
    runner_url: str | None,
    token: str | None,
    connect_timeout: float,
) -> RunnerSession:
    """The session ``session_id`` again (a turn started earlier, maybe by another
    process). Raises :class:`RunnerSessionGoneError` for an embedded session this process
    does not have."""
    if runner_url is None:
        if embedded is None:
            raise RunnerSessionGoneError(f"session {session_id}: no embedded runner here")
        try:
            return EmbeddedSession(embedded.get(session_id))
        except SessionNotFoundError:
            raise RunnerSessionGoneError(f"session {session_id}: not in this runner") from None
    return RemoteSession(runner_url, session_id, token=token, connect_timeout=connect_timeout)
