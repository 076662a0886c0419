"""The chat backend's service: starts turns and runs, owns the live ones.

Routes are thin; :class:`ChatService` does the work: pick the runner, mint the three
one-time tokens, write the turn's start (lock, user message, session, hashed tokens)
in one transaction, build the dispatch, admit it with the runner, and hand back a
:class:`~.live.LiveTurn` for the response body to stream.
"""

from __future__ import annotations

import logging
import sqlite3
from functools import partial
from typing import Any, Final

import msgspec
import trio

from sandstream.container.schemas import ChatTurn, Dispatch
from sandstream.core import DEFAULT_MAX_LINE_BYTES
from sandstream.core.persistence import ChatTurn as CoreChatTurn
from sandstream.server.http.connection import abort_scope_connection
from sandstream.server.runner.service import Runner, ShuttingDownError

from .bag import BlobStore
from .config import ChatSettings
from .dispatch import EmbeddedUpstream, RemoteUpstream, Target, Upstream, resolve_target
from .errors import StoreError
from .ids import new_id, now_ms
from .live import LiveAgentsRun, LiveChatTurn, LiveTurn, LiveTurns
from .models import Session, TurnRequest, TurnStart
from .schemas import AgentsRunRequest, ChatStreamRequest
from .store import ChatStore
from .tokens import MintedTokens, mint_tokens

__all__ = ["PENDING_TURNS", "ChatService"]

log = logging.getLogger("sandstream.chat")

PENDING_TURNS: Final = "sandstream.chat.pending_turns"
"""ASGI scope key: turns started by a request whose body may never start."""
CALLBACK_PREFIX: Final = "/api/sandbox"


class ChatService:
    """The chat backend's state: settings, store, blobs, the runner, the live turns.

    ``runner`` is the embedded runner (``None`` when every turn goes to a remote
    runner). ``bound_url`` is set once the server is bound (the default callback
    base when ``settings.public_url`` is not set).
    """

    def __init__(
        self,
        settings: ChatSettings,
        store: ChatStore,
        blobs: BlobStore,
        runner: Runner | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.blobs = blobs
        self.runner = runner
        self.instance_id = new_id("srv")
        """This process's identity in lock holder ids."""
        self.live = LiveTurns()
        self.bound_url: str | None = None
        self.max_line_bytes = runner.settings.max_line_bytes if runner else DEFAULT_MAX_LINE_BYTES

    # -- addresses -------------------------------------------------------------------------

    def callback_base(self, scope: dict[str, Any]) -> str:
        """The base URL sandboxes call back: configured, else bound, else this request's."""
        if self.settings.public_url:
            return self.settings.public_url
        if self.bound_url:
            return self.bound_url
        host, port = scope.get("server") or ("127.0.0.1", 80)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{scope.get('scheme', 'http')}://{host}:{port}"

    def agent_url(self, session_id: str, scope: dict[str, Any]) -> str:
        return f"{self.callback_base(scope)}{CALLBACK_PREFIX}/{session_id}"

    # -- turns ---------------------------------------------------------------------------------

    async def _target(
        self, workspace_id: str, workflow_id: str | None, request_url: str | None
    ) -> Target:
        """Resolve the runner (raises :class:`~.dispatch.TargetError`)."""
        workflow_url = None
        if workflow_id is not None:
            environment = await self.store.get_environment(workspace_id, workflow_id)
            if environment is not None:
                workflow_url = environment.vars.get("SANDBOX_URL")
        return resolve_target(
            request_url=request_url,
            workflow_url=workflow_url,
            server_url=self.settings.sandbox_url,
            allowed=self.settings.allowed_sandbox_urls,
            embedded=self.runner is not None,
        )

    def _refuse_if_draining(self) -> None:
        if self.live.draining:
            raise ShuttingDownError("the server is shutting down", 5)

    def _dispatch(
        self,
        session_id: str,
        tokens: MintedTokens,
        prompt: str,
        conversation: list[CoreChatTurn] | list[ChatTurn],
        scope: dict[str, Any],
    ) -> bytes:
        return msgspec.json.encode(
            Dispatch(
                agent_url=self.agent_url(session_id, scope),
                otp_setup=tokens.setup,
                otp_run=tokens.run,
                otp_upload=tokens.upload,
                prompt=prompt,
                conversation=[ChatTurn(t.role, t.content, t.ts) for t in conversation],
            )
        )

    def _upstream(
        self, target: Target, dispatch: bytes, session_id: str, scope: dict[str, Any]
    ) -> Upstream:
        """Admit the dispatch. Raises RunnerUnavailableError (embedded runner full)."""
        if target.kind == "embedded":
            assert self.runner is not None
            turn = self.runner.open_turn(
                dispatch,
                mode="ndjson",
                turn_id=session_id,
                abort_client=partial(abort_scope_connection, scope),
                cancel_outcome="client_disconnected",
            )
            return EmbeddedUpstream(turn)
        assert target.url is not None
        return RemoteUpstream(
            target.url,
            dispatch,
            token=self.settings.runner_token,
            connect_timeout=self.settings.remote_connect_timeout,
        )

    def _register(self, turn: LiveTurn, scope: dict[str, Any]) -> None:
        self.live.add(turn)
        scope.setdefault(PENDING_TURNS, []).append(turn)

    async def start_chat_turn(self, body: ChatStreamRequest, scope: dict[str, Any]) -> LiveChatTurn:
        """Write the turn's start and admit its dispatch; return the live turn.

        Raises (having written nothing): ``TargetError``, ``ChatNotFoundError``,
        ``ChatBusyError``, ``AttachmentError``, ``RunnerUnavailableError``.
        Cancellation: once the start is written it completes and the turn is
        registered with the request, so a client gone at that moment still gets its
        turn settled (when the connection closes).
        """
        self._refuse_if_draining()
        settings = self.settings
        target = await self._target(body.workspace_id, body.workflow_id, body.sandbox_url)
        now = now_ms()
        tokens = mint_tokens(now, settings.token_lifetimes)
        session_id = new_id("sess")
        request = TurnRequest(
            workspace_id=body.workspace_id,
            chat_id=body.chat_id,
            workflow_id=body.workflow_id,
            text=body.message,
            attachment_ids=body.attachment_ids,
            user_message_id=new_id("msg"),
            assistant_message_id=new_id("msg"),
            session_id=session_id,
            holder=f"{self.instance_id}:{session_id}",
            lease_expires_at=now + int(settings.lock_lease * 1000),
            tokens=list(tokens.stored),
            now=now,
            replay_limit=settings.replay_limit,
        )
        with trio.CancelScope(shield=True):
            start = await self.store.begin_turn(request)
            dispatch = self._dispatch(
                session_id, tokens, body.message, start.session.conversation, scope
            )
            try:
                upstream = self._upstream(target, dispatch, session_id, scope)
            except BaseException:
                await self.store.abort_turn(start)
                raise
            turn = self._chat_turn(start, upstream)
            self._register(turn, scope)
        log.info(
            "chat %s: turn %s -> %s runner%s",
            start.chat.id,
            session_id,
            target.kind,
            f" {target.url}" if target.url else "",
        )
        return turn

    def _chat_turn(self, start: TurnStart, upstream: Upstream) -> LiveChatTurn:
        session = start.session
        assert session.user_message_id is not None and session.assistant_message_id is not None
        start_data = {
            "chatId": start.chat.id,
            "userMessageId": session.user_message_id,
            "assistantMessageId": session.assistant_message_id,
            "conversationId": start.chat.conversation_id,
        }
        return LiveChatTurn(
            store=self.store,
            session_id=session.id,
            chat_id=start.chat.id,
            holder=start.holder,
            user_message_id=session.user_message_id,
            assistant_message_id=session.assistant_message_id,
            start=start_data,
            upstream=upstream,
            max_line_bytes=self.max_line_bytes,
            max_steps=self.settings.max_turn_steps,
            max_step_bytes=self.settings.max_turn_bytes,
            lock_lease=self.settings.lock_lease,
            lock_heartbeat=self.settings.lock_heartbeat,
        )

    async def start_agents_run(
        self, body: AgentsRunRequest, scope: dict[str, Any]
    ) -> LiveAgentsRun:
        """Record the run's session and tokens and admit its dispatch.

        Raises ``TargetError`` or ``RunnerUnavailableError`` (nothing kept).
        """
        self._refuse_if_draining()
        target = await self._target(body.workspace_id, body.workflow_id, body.sandbox_url)
        now = now_ms()
        tokens = mint_tokens(now, self.settings.token_lifetimes)
        session = Session(
            id=new_id("sess"),
            kind="agents",
            workspace_id=body.workspace_id,
            workflow_id=body.workflow_id,
            prompt=body.prompt,
            conversation=[CoreChatTurn(t.role, t.content, t.ts or 0) for t in body.conversation],
            created_at=now,
        )
        with trio.CancelScope(shield=True):
            await self.store.create_session(session, list(tokens.stored))
            dispatch = self._dispatch(session.id, tokens, body.prompt, body.conversation, scope)
            try:
                upstream = self._upstream(target, dispatch, session.id, scope)
            except BaseException:
                await self.store.settle_session(session.id, now=now_ms())
                raise
            run = LiveAgentsRun(
                store=self.store,
                session_id=session.id,
                upstream=upstream,
                max_line_bytes=self.max_line_bytes,
            )
            self._register(run, scope)
        return run

    # -- lost turns --------------------------------------------------------------------

    async def sweep(self) -> list[str]:
        """Settle the turns whose lock expired (their server died): ``turn_lost``, lock
        released, tokens dead. Returns the chats freed. Raises the store's errors."""
        freed = await self.store.sweep_lost_turns(now=now_ms())
        for chat_id in freed:
            log.warning("chat %s: its turn's lock expired unsettled; settled as turn_lost", chat_id)
        return freed

    async def sweep_periodically(self) -> None:
        """:meth:`sweep` every ``settings.sweep_interval`` s until cancelled; a failed
        sweep (database busy) is logged and retried at the next one."""
        while True:
            await trio.sleep(self.settings.sweep_interval)
            try:
                await self.sweep()
            except (sqlite3.Error, StoreError) as exc:
                log.warning("sweeping lost turns failed: %r", exc)

    async def shutdown(self) -> None:
        """End every live turn with ``error{code:"shutdown"}`` and wait for them to settle."""
        await self.live.shutdown(self.settings.shutdown_timeout)
