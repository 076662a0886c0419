"""A chat turn on a durable session: started, joined, interrupted, followed up, swept.

:class:`ChatTurns` writes a turn's start in one store transaction, starts its runner
session (embedded, or on a remote runner) and hands it to the log mover, which moves its
chunks and settles it; viewers only read the session (:mod:`.viewer`). A request that
cannot start a turn raises before anything is written; once the start is written, a
cancelled caller leaves a turn that runs and settles.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol

import psycopg
import trio

from sandstream.core import (
    LIVE_EXTENSION,
    USAGE_EXTENSION,
    PermissionAnswer,
    PersistedMessage,
    TokenBudget,
    user_message,
)
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.credentials import MintedTokens
from sandstream.server.chat.model import (
    ChatBusyError,
    ChatStreamRequest,
    NoRunningTurnError,
    RunnerSessionGoneError,
    StoreError,
    TokenBudgetSpentError,
    TurnRecord,
    TurnRequest,
    TurnStart,
    new_id,
    now_ms,
)
from sandstream.server.chat.mover import TurnSettler
from sandstream.server.chat.store import (
    TRANSIENT_TYPES,
    ChatMessageStore,
    UsageStore,
    report_failure,
    utc_day,
)
from sandstream.server.http import abort_scope_connection
from sandstream.server.runner import END_GRACE
from sandstream.server.sessions import CursorGoneError, SessionService, terminal_state

from .dispatching import Dispatcher
from .frames import done_frame
from .runner_link import (
    EmbeddedSession,
    RunnerSession,
    SessionEndedError,
    connect_runner_session,
    start_runner_session,
)
from .turn_mover import TurnMover, TurnMoverStore
from .viewer import TurnStreamBody, Viewers

__all__ = ["ChatTurns", "ChatTurnsStore", "StartedTurn"]

log = logging.getLogger("sandstream.chat")

INTERRUPT_TIMEOUT: Final = 60.0
"""Seconds an interrupt waits for its turn to settle."""
SETTLE_WAIT: Final = 10.0
"""Seconds a viewer holds the terminal back while the turn settles."""
DAY_MS: Final = 86_400_000


class ChatTurnsStore(ChatMessageStore, TurnMoverStore, UsageStore, Protocol):
    """What :class:`ChatTurns` uses of the chat store: the chats and their messages,
    the tokens spent, and what its log mover uses (turns, push alerts, the mover's
    tables)."""


@dataclass(frozen=True, slots=True)
class StartedTurn:
    """A chat turn as its viewers see it: the record, its session, its ``start`` data."""

    record: TurnRecord
    session: RunnerSession
    start: dict[str, Any]


class ChatTurns:
    """The chat turns of one process. ``sessions`` is the embedded runner's session
    service (``None`` when every turn goes to a remote runner; set once the app is
    composed); ``mover`` the process's log mover for chat turns."""

    def __init__(
        self,
        settings: ChatSettings,
        store: ChatTurnsStore,
        dispatcher: Dispatcher,
        *,
        instance_id: str,
        max_line_bytes: int,
    ) -> None:
        self.settings = settings
        self.store = store
        self.dispatcher = dispatcher
        self.instance_id = instance_id
        self.sessions: SessionService | None = None
        self.settler = TurnSettler(
            store,
            max_steps=settings.max_turn_steps,
            max_step_bytes=settings.max_turn_bytes,
            max_line_bytes=max_line_bytes,
        )
        self.mover = TurnMover(settings, store, self.settler, instance_id)
        self.viewers = Viewers()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the log mover until cancelled (:class:`~sandstream.server.chat.turns.TurnMover`)."""
        await self.mover.run(self.sessions, task_status=task_status)

    async def sweep(self) -> list[str]:
        """Settle as ``turn_lost`` the turns whose lock expired (their process died) and
        that no log mover can settle: turns without a runner session, and embedded
        sessions of another process. Running remote turns, and embedded ones of this
        process's runner, are the log mover's (it takes them over and settles them from
        their chunks, steps kept). Returns the chats freed. Raises the store's errors."""
        spare = {
            turn.id
            for turn in await self.store.running_turns()
            if turn.runner_url is not None
            or (turn.session_id is not None and self.mover.embedded_here(turn.session_id))
        }
        freed = await self.store.sweep_lost_turns(now=now_ms(), spare=spare)
        for chat_id in freed:
            log.warning("chat %s: its turn's lock expired unsettled; settled as turn_lost", chat_id)
        return freed

    async def sweep_logged(self) -> None:
        """:meth:`sweep`, its failure logged instead of raised (a transient one, the
        database away or busy, as one warning line: :func:`report_failure`)."""
        try:
            await self.sweep()
        except Exception as exc:
            report_failure(log, "sweeping lost turns", exc)

    async def sweep_periodically(self) -> None:
        """:meth:`sweep_logged` every ``settings.sweep_interval`` s until cancelled: a
        failed sweep is retried at the next one, whatever it raised."""
        while True:
            await trio.sleep(self.settings.sweep_interval)
            await self.sweep_logged()

    async def start(self, body: ChatStreamRequest, scope: dict[str, Any]) -> StartedTurn:
        """Write the turn's start, start its runner session, and claim it for the mover.

        Raises (having written nothing): ``TargetError``, ``ChatNotFoundError``,
        ``ChatBusyError``, ``AttachmentError``, ``RunnerUnavailableError``,
        ``RemoteRunnerError``, :class:`TokenBudgetSpentError` (the workspace's budget
        for the day is spent). Cancellation: once the start is written it completes
        (shielded), so a client gone at that moment leaves a turn that runs and settles.
        """
        self.dispatcher.admit()
        target = await self.dispatcher.target(body.workspace_id, body.workflow_id, body.sandbox_url)
        runner_url = target.url if target.kind == "remote" else None
        budget = await self.budget(body.workspace_id)
        try:
            return await self._start(body, runner_url, scope, budget)
        except ChatBusyError as exc:
            if not exc.adoptable:
                raise
        await self.sweep()  # a dead turn without a session here is settled as lost
        return await self._start(body, runner_url, scope, budget)

    async def budget(self, workspace_id: str) -> TokenBudget | None:
        """The tokens a new turn of the workspace may spend: the tighter of the turn's
        budget and what is left of the workspace's for the UTC day (``None``: neither
        is set). Raises :class:`TokenBudgetSpentError` when nothing is left today."""
        settings = self.settings
        per_turn = settings.turn_token_budget
        daily = settings.workspace_daily_token_budget
        turn = None if per_turn is None else TokenBudget(per_turn, "turn", per_turn)
        if daily is None:
            return turn
        now = now_ms()
        used = (await self.store.workspace_usage(workspace_id, utc_day(now))).tokens.total
        left = daily - used
        if left <= 0:
            until_tomorrow = DAY_MS - now % DAY_MS
            raise TokenBudgetSpentError(workspace_id, used, daily, -(-until_tomorrow // 1000))
        if turn is not None and turn.tokens <= left:
            return turn
        return TokenBudget(left, "workspace_day", daily)

    async def _start(
        self,
        body: ChatStreamRequest,
        runner_url: str | None,
        scope: dict[str, Any],
        budget: TokenBudget | None,
    ) -> StartedTurn:
        settings = self.settings
        now = now_ms()
        tokens = self.dispatcher.mint(now)
        turn_id = new_id("sess")
        request = TurnRequest(
            workspace_id=body.workspace_id,
            chat_id=body.chat_id,
            workflow_id=body.workflow_id,
            text=body.message,
            attachment_ids=body.attachment_ids,
            user_message_id=new_id("msg"),
            assistant_message_id=new_id("msg"),
            session_id=turn_id,
            holder=f"{self.instance_id}:{turn_id}",
            lease_expires_at=now + int(settings.lock_lease * 1000),
            tokens=list(tokens.stored),
            now=now,
            replay_limit=settings.replay_limit,
            runner_url=runner_url,
            on_disconnect=body.on_disconnect,
        )
        with trio.CancelScope(shield=True):
            start = await self.store.begin_turn(request)
            async with trio.open_nursery() as keeping:
                keeping.start_soon(self._keep_lock, start.chat.id, request.holder)
                try:
                    record, session = await self._start_session(
                        body, request, tokens, start, scope, budget
                    )
                finally:
                    keeping.cancel_scope.cancel()
        log.info(
            "chat %s: turn %s -> session %s on %s",
            start.chat.id,
            turn_id,
            session.id,
            runner_url or "the embedded runner",
        )
        return StartedTurn(record, session, self._start_data(record, start.chat.conversation_id))

    async def _start_session(
        self,
        body: ChatStreamRequest,
        request: TurnRequest,
        tokens: MintedTokens,
        start: TurnStart,
        scope: dict[str, Any],
        budget: TokenBudget | None,
    ) -> tuple[TurnRecord, RunnerSession]:
        """Start the runner session of a turn whose start is written, attach it and
        hand it to the log mover; a session that cannot start undoes the turn's start."""
        settings = self.settings
        turn_id = request.session_id
        providers = await self.dispatcher.providers(body.workspace_id, body.workflow_id)
        dispatch = self.dispatcher.dispatch(
            turn_id,
            tokens,
            body.message,
            start.session.conversation,
            scope,
            extensions=(LIVE_EXTENSION, USAGE_EXTENSION),
            providers=providers,
            budget=budget,
        )
        try:
            session = await start_runner_session(
                dispatch,
                embedded=self.sessions,
                runner_url=request.runner_url,
                token=settings.runner_token,
                connect_timeout=settings.remote_connect_timeout,
            )
        except BaseException:
            await self.store.abort_turn(start)
            raise
        await self.store.attach_runner_session(turn_id, session.id)
        record = TurnRecord(
            id=turn_id,
            chat_id=start.chat.id,
            workspace_id=body.workspace_id,
            session_id=session.id,
            runner_url=request.runner_url,
            assistant_message_id=request.assistant_message_id,
            user_message_id=request.user_message_id,
            on_disconnect=body.on_disconnect,
            state="running",
            created_at=request.now,
        )
        self.mover.claim_now(record)
        return record, session

    async def _keep_lock(self, chat_id: str, holder: str) -> None:
        """Renew the chat's lock every ``lock_heartbeat`` s while its turn starts (until
        cancelled), so that a start held up for longer than the lock's lease is not
        taken for a dead one; the log mover holds the lock from then on. A failed
        renewal is logged; the next one tries again."""
        settings = self.settings
        while True:
            await trio.sleep(settings.lock_heartbeat)
            try:
                expires_at = now_ms() + int(settings.lock_lease * 1000)
                if not await self.store.renew_lock(chat_id, holder, expires_at):
                    return
            except (sqlite3.Error, psycopg.Error, StoreError) as exc:
                log.warning(
                    "chat %s: renewing the lock of a starting turn failed: %r", chat_id, exc
                )

    @staticmethod
    def _start_data(record: TurnRecord, conversation_id: str | None) -> dict[str, Any]:
        return {
            "chatId": record.chat_id,
            "userMessageId": record.user_message_id,
            "assistantMessageId": record.assistant_message_id,
            "conversationId": conversation_id,
            "sessionId": record.session_id,
        }

    def _session(self, record: TurnRecord) -> RunnerSession:
        """The runner session of a running turn. Raises :class:`RunnerSessionGoneError`."""
        assert record.session_id is not None
        return connect_runner_session(
            record.session_id,
            embedded=self.sessions,
            runner_url=record.runner_url,
            token=self.settings.runner_token,
            connect_timeout=self.settings.remote_connect_timeout,
        )

    async def latest(
        self, workspace_id: str, chat_id: str, *, live: bool = True
    ) -> StartedTurn | None:
        """The chat's running turn (``live``), or its latest one, settled or not, whose
        session the runner still has; ``None`` if there is none (``ChatNotFoundError``)."""
        record = await self.store.latest_turn(workspace_id, chat_id)
        if record is None or record.session_id is None:
            return None
        if live and record.state != "running":
            return None
        try:
            session = self._session(record)
        except RunnerSessionGoneError:
            return None
        chat = await self.store.get_chat(workspace_id, chat_id, now=now_ms())
        return StartedTurn(record, session, self._start_data(record, chat.conversation_id))

    def stream_body(
        self,
        turn: StartedTurn,
        *,
        after: int | None,
        scope: dict[str, Any],
        interrupt_on_disconnect: bool = False,
        live_writes: bool = True,
    ) -> TurnStreamBody:
        """A viewer's response body for ``turn``, after cursor ``after``. With
        ``live_writes``, an embedded session's new runs are written to the client's
        connection as step frames while the viewer is caught up: only for a body whose
        frames go out unchanged (not one translated into another stream)."""
        record = turn.record

        async def at_terminal() -> list[Any]:
            """The files the turn wrote back, once settled; none while the database is
            away (the viewer still gets the terminal: the turn settles when it returns)."""
            try:
                await self._settled(record)
                if self.settings.push.enabled:  # a device saw the turn end: nobody is pushed
                    await self.store.mark_push_seen(record.chat_id, now_ms())
                return [f.attachment() for f in await self.store.turn_result_files(record.id)]
            except TRANSIENT_TYPES as exc:
                log.warning("chat %s: its files are not read now: %r", record.chat_id, exc)
                return []

        async def on_asked(permission_ids: list[str]) -> None:
            """A device saw these questions: their alerts push nobody (a failed write is
            logged: the viewer goes on)."""
            try:
                await self.store.mark_permissions_seen(record.id, permission_ids, now_ms())
            except (sqlite3.Error, psycopg.Error, StoreError) as exc:
                log.warning("chat %s: marking its questions seen failed: %r", record.chat_id, exc)

        return TurnStreamBody(
            turn.session,
            after=after,
            start=turn.start,
            at_terminal=at_terminal,
            ping_interval=self.settings.ping_interval,
            stall_timeout=self.settings.stall_timeout,
            abort_client=partial(abort_scope_connection, scope),
            live_scope=scope if live_writes else None,
            interrupt_on_disconnect=interrupt_on_disconnect,
            registry=self.viewers,
            on_asked=on_asked if self.settings.push.enabled else None,
        )

    async def done_after_terminal(self, turn: StartedTurn, cursor: int) -> bytes:
        """The ``done`` frame for a viewer whose last frame was the turn's terminal, at
        ``cursor`` (its ``done`` was lost), once the turn settled; ``b""`` when the
        session's chunk at ``cursor`` is no terminal, or cannot be read at once (the
        viewer then follows the session as any other)."""
        try:
            async with turn.session.reader(cursor - 1, self.settings.ping_interval) as reader:
                item = await reader.next()
        except (CursorGoneError, RunnerSessionGoneError):
            return b""
        if item is None or isinstance(item, str) or item.last != cursor:
            return b""
        data = item.data
        state = terminal_state(data[data.rfind(b"\n", 0, -1) + 1 :])
        if state is None:
            return b""
        await self._settled(turn.record)
        return done_frame("result" if state == "completed" else "error", cursor)

    async def _settled(self, record: TurnRecord, timeout: float = SETTLE_WAIT) -> bool:
        """Wait up to ``timeout`` s until the turn has settled (by the replica that moves
        its session, this one or another); False if it has not."""
        assert record.session_id is not None
        return await self.mover.wait_settled(record.session_id, timeout)

    async def interrupt(self, workspace_id: str, chat_id: str) -> PersistedMessage:
        """Stop the chat's running turn and wait until it settled; return its message.

        Raises :class:`NoRunningTurnError` (nothing runs), ``ChatNotFoundError``,
        ``TimeoutError`` (it did not settle within :data:`INTERRUPT_TIMEOUT`).
        """
        turn = await self.latest(workspace_id, chat_id)
        if turn is None:
            raise NoRunningTurnError(chat_id)
        with trio.fail_after(INTERRUPT_TIMEOUT):
            try:
                await turn.session.interrupt()
            except RunnerSessionGoneError as exc:
                log.warning("chat %s: %s", chat_id, exc)
        if not await self._settled(turn.record, INTERRUPT_TIMEOUT):
            raise TimeoutError(f"chat {chat_id}: the interrupted turn did not settle")
        messages = await self.store.get_messages(workspace_id, chat_id)
        return next(m for m in reversed(messages) if m.id == turn.record.assistant_message_id)

    async def send_message(self, workspace_id: str, chat_id: str, text: str) -> PersistedMessage:
        """Give ``text`` to the chat's running turn and persist it as a user message.

        Raises :class:`NoRunningTurnError` (nothing runs, or it ended meanwhile),
        ``ChatNotFoundError``, ``RemoteRunnerError``.
        """
        turn = await self.latest(workspace_id, chat_id)
        if turn is None:
            raise NoRunningTurnError(chat_id)
        try:
            await turn.session.send_message(text)
        except (SessionEndedError, RunnerSessionGoneError):
            raise NoRunningTurnError(chat_id) from None
        now = now_ms()
        message = user_message(new_id("msg"), text, created_at=now)
        await self.store.append_user_message(workspace_id, chat_id, message, now)
        return message

    async def answer_permission(
        self, workspace_id: str, chat_id: str, answer: PermissionAnswer
    ) -> None:
        """Give the user's answer to a permission request of the chat's running turn.

        The turn's runner session takes the first answer (also across replicas); the
        request's push alert is then moot (dropped if it waits, dismissed if sent; the log
        mover, folding the request's ``resolved`` line, does it too). Raises
        ``PermissionNotFoundError`` (the turn never asked it), ``PermissionAnsweredError``
        (answered or resolved before), :class:`NoRunningTurnError` (nothing runs, or it
        ended meanwhile), ``ChatNotFoundError``, ``RemoteRunnerError``.
        """
        turn = await self.latest(workspace_id, chat_id)
        if turn is None:
            raise NoRunningTurnError(chat_id)
        try:
            await turn.session.answer_permission(answer)
        except (SessionEndedError, RunnerSessionGoneError):
            raise NoRunningTurnError(chat_id) from None
        if self.settings.push.enabled:  # answered: its alert is moot
            try:
                await self.store.permission_answered(turn.record.id, answer.id, now_ms())
            except (sqlite3.Error, psycopg.Error, StoreError) as exc:  # the mover sees it too
                log.warning("chat %s: dropping an answered alert failed: %r", chat_id, exc)

    async def shutdown(self) -> None:
        """End every live turn and wait for them to settle (at most
        ``settings.shutdown_timeout`` s; cancellation stops the waiting).

        Embedded sessions end with ``error{code:"shutdown"}`` and are settled by the
        log mover (their viewers get the terminal); remote turns go on running on their
        runners and are taken over by another replica's log mover (this one releases
        its leases when it is cancelled after the drain). Once every embedded turn has
        settled, the log mover lets go of the session buffer (so that the buffer closes
        with its WAL checkpointed and removed). Viewers still open are then ended (without
        a terminal: they resume elsewhere).
        """
        with trio.move_on_after(self.settings.shutdown_timeout):
            embedded = [
                turn.session_id
                for turn in await self.store.running_turns()
                if turn.session_id is not None and self.mover.embedded_here(turn.session_id)
            ]
            for session_id in embedded:
                assert self.sessions is not None
                EmbeddedSession(self.sessions.get(session_id)).end("the server is shutting down")
            for session_id in embedded:
                await self.mover.wait_settled(session_id, self.settings.shutdown_timeout)
            with trio.move_on_after(END_GRACE):  # their viewers deliver the terminal
                await self.viewers.wait_until_none(
                    lambda body: isinstance(body.session, EmbeddedSession)
                )
        for viewer in self.viewers.bodies():
            viewer.close()
