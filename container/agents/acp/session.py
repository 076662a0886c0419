"""The ACP client role for one turn: ``initialize``, the session (resumed, loaded or new:
:mod:`.continuation`), ``session/set_mode``, ``session/prompt``, then ``session/update``
notifications until the prompt's answer.

A session resumed or loaded already holds the conversation: the prompt is the turn's
own text, and what ``session/load`` replays is dropped. A resume or load that fails
falls to the next way with a ``warn`` line; an ``agent_session`` step says which way was
used (and an ``info`` line). On a session resumed or loaded, the preset's model is set
again when the agent's answer shows another (:mod:`.model_choice`); an agent that
refuses it, or offers no such model, leaves the session's with a ``warn`` line.

:class:`AcpSession` is the connection's :class:`~.connection.Handler`: updates go
through the :class:`~.translate.Translator` to the emitter, permission requests to the
:class:`~.permissions.PermissionDesk`; the agent's other requests (no file system, no
terminal were offered) are answered ``-32601``. The prompt's ``stopReason``:
``end_turn`` gives the message; ``max_tokens``, ``refusal``, ``max_turn_requests``
raise their :mod:`.errors`; ``cancelled`` ends the turn as interrupted
(:class:`trio.Cancelled` propagates from the caller). An agent silent for
``stall_timeout_sec`` while the prompt runs (not counting waits for the user) raises
:class:`~.errors.AgentStalledError`.

Cancellation: :meth:`request_cancel` (called when the run is cancelled; the session
itself runs shielded) answers pending permission requests ``cancelled``, sends
``session/cancel`` and waits at most ``cancel_grace`` seconds for the prompt's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Final, TypeVar

import pydantic
import trio
from acp.schema import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestPermissionRequest,
    SessionNotification,
)

from sandstream.core import ConfigResponse, Step

from ...context import RunContext
from ...errors import ContainerError
from ...output import new_step_id, now_ms
from ..claude_code import render_prompt
from .connection import Connection, Reply, RpcFault
from .continuation import METHODS, Rung, read_session, remember_session, rungs
from .errors import (
    AgentStalledError,
    MaxTokensError,
    MaxTurnRequestsError,
    ProtocolError,
    RefusalError,
    RemoteError,
)
from .model_choice import ModelNotOfferedError, model_request
from .permissions import PermissionDesk
from .translate import TRANSLATED, Translator
from .wire import INVALID_PARAMS

__all__ = ["PROTOCOL_VERSION", "SESSION_STEP", "AcpSession", "TurnCancelled", "mcp_servers"]

PROTOCOL_VERSION: Final = 1
SESSION_STEP: Final = "agent_session"
"""The step that opens the agent's session: ``args.ways`` the ways it tries, in order;
``result.way`` the one used, ``result.continued`` whether it is the last turn's."""
CANCEL_GRACE: Final = 3.0
"""Seconds an agent gets to answer the prompt after ``session/cancel``."""

M = TypeVar("M", bound=pydantic.BaseModel)

_STOP_ERRORS: Final = {
    "max_tokens": (MaxTokensError, "the model reached its output token limit"),
    "refusal": (RefusalError, "the model refused to continue"),
    "max_turn_requests": (MaxTurnRequestsError, "the agent reached its limit of model requests"),
}


class TurnCancelled(Exception):
    """The turn ended because it was cancelled (stop reason ``cancelled``)."""


def mcp_servers(config: ConfigResponse) -> list[dict[str, Any]]:
    """The config's MCP servers as ACP ``mcpServers`` (stdio or HTTP)."""
    servers: list[dict[str, Any]] = []
    for server in config.mcp_servers:
        if server.command:
            env = [{"name": key, "value": value} for key, value in server.env.items()]
            servers.append(
                {
                    "name": server.name,
                    "command": server.command[0],
                    "args": server.command[1:],
                    "env": env,
                }
            )
        elif server.url:
            servers.append({"type": "http", "name": server.name, "url": server.url, "headers": []})
    return servers


class AcpSession:
    """One turn with one agent (see the module doc)."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        agent: str,
        mode: str | None,
        model: str | None = None,
        hidden_text: tuple[str, ...],
        permission_timeout: float,
        stall_timeout: float,
        cancel_grace: float = CANCEL_GRACE,
    ) -> None:
        self._ctx = ctx
        self._mode = mode
        self._model = model
        self._stall = stall_timeout
        self._grace = cancel_grace
        self._translator = Translator(live=ctx.live, hidden_text=hidden_text)
        self._desk = PermissionDesk(ctx, permission_timeout)
        self._agent = agent
        self._session_id: str | None = None
        self._loading = False
        self._cancel = trio.Event()

    # --- what the agent sends (Handler) -------------------------------------------------

    def notification(self, method: str, params: Any) -> None:
        if method != "session/update":
            self._ctx.emitter.log("debug", f"agent notification {method} ignored")
            return
        if self._loading:
            return  # the conversation so far, replayed by session/load
        kind = params.get("update", {}).get("sessionUpdate") if isinstance(params, dict) else None
        if isinstance(kind, str) and kind not in TRANSLATED:
            return  # usage, commands, session info, config options: nothing to show
        try:
            update = SessionNotification.model_validate(params).update
        except pydantic.ValidationError as exc:
            raise ProtocolError(f"session/update does not match ACP: {_first_error(exc)}") from None
        self._ctx.emitter.emit_many(self._translator.update(update, now_ms()))

    def request(self, method: str, params: Any) -> Awaitable[Any] | None:
        if method != "session/request_permission":
            return None
        try:
            asked = RequestPermissionRequest.model_validate(params)
        except pydantic.ValidationError as exc:
            raise RpcFault(INVALID_PARAMS, f"invalid params: {_first_error(exc)}") from None
        step_id, lines = self._translator.tool_call(asked.tool_call, now_ms())
        self._ctx.emitter.emit_many(lines)
        tool_kind = self._translator.tool_kind(asked.tool_call.tool_call_id)
        request_id = self._desk.announce(step_id, tool_kind, asked.tool_call.title, asked.options)
        return self._desk.answer(request_id, asked.options)

    # --- the turn -------------------------------------------------------------------------

    def request_cancel(self) -> None:
        """Cancel the turn (see the module doc); safe to call at any time."""
        self._desk.cancel_all()
        self._cancel.set()

    async def run(self, connection: Connection) -> str:
        """The turn, from ``initialize`` to the message; raises as the module doc says."""
        ctx = self._ctx
        init = await self._call(
            connection,
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": {"name": "sandstream", "version": "1"},
            },
            InitializeResponse,
        )
        info = init.agent_info
        described = f"{info.name} {info.version}" if info is not None else "an agent"
        ctx.emitter.log("info", f"acp agent: {described}, protocol {init.protocol_version}")
        rung, session_id, answer = await self._open(connection, init)
        self._session_id = session_id
        remember_session(ctx.home_dir, self._agent, session_id)
        if rung != "new" and self._model is not None:
            await self._choose_model(connection, session_id, answer)
        if self._mode is not None:
            await self._call(
                connection,
                "session/set_mode",
                {"sessionId": session_id, "modeId": self._mode},
                None,
            )
        history = ctx.conversation if rung == "new" else []
        text = render_prompt(ctx.prompt, history, ctx.config.attachments)
        if ctx.config.system_prompt:
            text = f"{ctx.config.system_prompt}\n\n{text}"
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        response = await self._prompt(connection, params)
        reason = response.stop_reason
        if reason == "end_turn":
            ctx.emitter.emit_many(self._translator.finish("the turn ended before the tool did"))
            return self._translator.message
        if reason == "cancelled":
            raise TurnCancelled("the agent cancelled the turn")
        error, message = _STOP_ERRORS[reason]
        ctx.emitter.emit_many(self._translator.finish(f"the turn stopped ({reason})"))
        raise error(message)

    async def _open(
        self, connection: Connection, init: InitializeResponse
    ) -> tuple[Rung, str, Any]:
        """Open the turn's session by the first of :func:`~.continuation.rungs` that
        works, as one ``agent_session`` step (its ``result`` says the way used); the
        way, the session id and the agent's answer."""
        ctx = self._ctx
        kept = read_session(ctx.home_dir, self._agent)
        ways = rungs(init, kept)
        step_id = new_step_id()
        started = trio.current_time()
        tried = [METHODS[rung] for rung in ways]
        ctx.emitter.emit(
            Step(id=step_id, name=SESSION_STEP, status="running", args={"ways": tried})
        )
        try:
            rung, session_id, answer = await self._first_way(connection, ways, kept)
        except BaseException as exc:
            ctx.emitter.emit(
                Step(
                    id=step_id,
                    name=SESSION_STEP,
                    status="failed",
                    error=str(exc) or type(exc).__name__,
                    duration_ms=round((trio.current_time() - started) * 1000),
                )
            )
            raise
        ctx.emitter.emit(
            Step(
                id=step_id,
                name=SESSION_STEP,
                status="succeeded",
                result={"way": METHODS[rung], "continued": rung != "new"},
                duration_ms=round((trio.current_time() - started) * 1000),
            )
        )
        return rung, session_id, answer

    async def _first_way(
        self, connection: Connection, ways: list[Rung], kept: str | None
    ) -> tuple[Rung, str, Any]:
        ctx = self._ctx
        opening = {"cwd": str(Path(ctx.work_dir)), "mcpServers": mcp_servers(ctx.config)}
        for rung in ways:
            method = METHODS[rung]
            if rung == "new":
                answer = await self._call(connection, method, opening, None)
                new = _valid(method, answer, NewSessionResponse)
                said = "a new session" + (", the conversation as a preamble" if kept else "")
                ctx.emitter.log("info", f"acp agent: {said} ({method})")
                return rung, new.session_id, answer
            assert kept is not None
            self._loading = rung == "load"
            try:
                answer = await self._call(connection, method, {**opening, "sessionId": kept}, None)
            except RemoteError as exc:  # it could not: the next way may
                ctx.emitter.log("warn", f"acp agent: {method} failed ({exc}); trying the next way")
                continue
            finally:
                self._loading = False
            ctx.emitter.log("info", f"acp agent: its session from the chat's last turn ({method})")
            return rung, kept, answer
        raise AssertionError("rungs() always ends with new")

    async def _choose_model(self, connection: Connection, session_id: str, answer: Any) -> None:
        """Set the preset's model again on a continued session (see the module doc)."""
        assert self._model is not None
        log = self._ctx.emitter.log
        try:
            request = model_request(answer, session_id, self._model)
        except ModelNotOfferedError as exc:
            log("warn", f"acp agent: the session keeps its model ({exc})")
            return
        if request is None:
            return
        try:
            await self._call(connection, request.method, request.params, None)
        except RemoteError as exc:
            log("warn", f"acp agent: {request.method} failed ({exc}); the session keeps its model")
            return
        log("info", f"acp agent: the model {self._model} set again ({request.method})")

    async def _call(self, connection: Connection, method: str, params: Any, model: Any) -> Any:
        """A setup request, bounded by the stall timeout and given up on a cancel."""
        failure: ContainerError | None = None  # raised out here: a nursery would group it
        result: Any = None
        with trio.move_on_after(self._stall) as timer:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._give_up_on_cancel, nursery.cancel_scope)
                try:
                    result = await connection.request(method, params)
                except ContainerError as exc:
                    failure = exc
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if timer.cancelled_caught:
            raise AgentStalledError(f"no answer to {method} in {self._stall:g} s")
        if self._cancel.is_set():
            raise TurnCancelled(f"cancelled during {method}")
        return result if model is None else _valid(method, result, model)

    async def _give_up_on_cancel(self, scope: trio.CancelScope) -> None:
        await self._cancel.wait()
        scope.cancel()

    async def _prompt(self, connection: Connection, params: Any) -> PromptResponse:
        reply = await connection.start_request("session/prompt", params)
        result: Any = None
        failure: ContainerError | None = None  # raised out here: a nursery would group it
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_stall, connection, nursery.cancel_scope)
                nursery.start_soon(self._give_up_on_cancel, nursery.cancel_scope)
                try:
                    result = await reply.result()
                except ContainerError as exc:
                    failure = exc
                nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
            if not reply.answered:
                if not self._cancel.is_set():
                    raise AgentStalledError(
                        f"the agent said nothing for {self._stall:g} s during the prompt"
                    )
                result = await self._cancel_prompt(connection, reply)
        finally:
            reply.abandon()
        return _valid("session/prompt", result, PromptResponse)

    async def _cancel_prompt(self, connection: Connection, reply: Reply) -> Any:
        assert self._session_id is not None
        self._ctx.emitter.log("info", "acp agent: cancelling the turn (session/cancel)")
        with trio.move_on_after(self._grace):
            await connection.notify("session/cancel", {"sessionId": self._session_id})
            result = await reply.result()
            self._ctx.emitter.emit_many(self._translator.finish("cancelled"))
            return result
        self._ctx.emitter.emit_many(self._translator.finish("cancelled"))
        raise TurnCancelled("the agent did not answer session/cancel in time")

    async def _watch_stall(self, connection: Connection, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` once the agent has been silent too long (not while the user
        is being asked, nor while one of its tools runs: the runtime cap bounds those)."""
        while True:
            now = trio.current_time()
            if self._desk.waiting or self._translator.tools_running:
                await trio.sleep(min(1.0, self._stall))
                continue
            deadline = max(connection.last_heard, self._desk.last_answered) + self._stall
            if now >= deadline:
                scope.cancel()
                return
            await trio.sleep_until(deadline)


def _valid(method: str, answer: Any, model: type[M]) -> M:
    """``answer`` to ``method`` as ``model``; :class:`~.errors.ProtocolError` if it is not."""
    try:
        return model.model_validate(answer)
    except pydantic.ValidationError as exc:
        mismatch = f"{method} answer does not match ACP: {_first_error(exc)}"
        raise ProtocolError(mismatch) from None


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])
