"""Agents-block runs: each one ``POST /stream`` dispatch, streamed by its response.

:class:`AgentsRuns` records a run's dispatch and tokens and admits it on the runner; its
response body (:mod:`.relay`) streams it in one nursery, and :mod:`.running` finishes it
exactly once. A run that cannot start raises before anything is kept.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

import msgspec
import trio

from sandstream.core import ChatTurn
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.model import AgentsRunRequest, DispatchRecord, Target, new_id, now_ms
from sandstream.server.chat.store import DispatchStore
from sandstream.server.chat.turns import Dispatcher
from sandstream.server.http import abort_scope_connection
from sandstream.server.runner import Runner

from .running import AgentsRun, RelayedRun, RunningRuns
from .upstream import EmbeddedUpstream, RemoteUpstream, Upstream

__all__ = ["PENDING_RUNS", "AgentsRuns"]

PENDING_RUNS: Final = "sandstream.chat.pending_runs"
"""ASGI scope key: runs started by a request whose body may never start."""


class AgentsRuns:
    """The Agents-block runs of one process; ``running`` holds those in flight."""

    def __init__(
        self,
        settings: ChatSettings,
        store: DispatchStore,
        dispatcher: Dispatcher,
        runner: Runner | None,
        *,
        max_line_bytes: int,
    ) -> None:
        self.settings = settings
        self.store = store
        self.dispatcher = dispatcher
        self.runner = runner
        self.max_line_bytes = max_line_bytes
        self.running = RunningRuns()

    async def start(self, body: AgentsRunRequest, scope: dict[str, Any]) -> AgentsRun:
        """Record the run's session and tokens and admit its dispatch.

        Raises ``TargetError`` or ``RunnerUnavailableError`` (nothing kept).
        """
        self.dispatcher.admit()
        target = await self.dispatcher.target(body.workspace_id, body.workflow_id, body.sandbox_url)
        now = now_ms()
        tokens = self.dispatcher.mint(now)
        session = DispatchRecord(
            id=new_id("sess"),
            kind="agents",
            workspace_id=body.workspace_id,
            workflow_id=body.workflow_id,
            prompt=body.prompt,
            conversation=[ChatTurn(t.role, t.content, t.ts or 0) for t in body.conversation],
            created_at=now,
        )
        providers = await self.dispatcher.providers(body.workspace_id, body.workflow_id)
        with trio.CancelScope(shield=True):
            await self.store.record_dispatch(session, list(tokens.stored))
            dispatch = msgspec.json.encode(
                self.dispatcher.dispatch(
                    session.id,
                    tokens,
                    body.prompt,
                    body.conversation,
                    scope,
                    providers=providers,
                )
            )
            try:
                upstream = self._upstream(target, dispatch, session.id, scope)
            except BaseException:
                await self.store.close_dispatch(session.id, now=now_ms())
                raise
            run = AgentsRun(
                store=self.store,
                session_id=session.id,
                upstream=upstream,
                max_line_bytes=self.max_line_bytes,
            )
            self._register(run, scope)
        return run

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

    def _register(self, run: RelayedRun, scope: dict[str, Any]) -> None:
        self.running.add(run)
        scope.setdefault(PENDING_RUNS, []).append(run)

    async def shutdown(self) -> None:
        """End every run with ``error{code:"shutdown"}`` and wait (at most
        ``settings.shutdown_timeout`` s) until each one finished."""
        await self.running.shutdown(self.settings.shutdown_timeout)
