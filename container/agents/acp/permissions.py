"""An agent's ``session/request_permission``, put to the user and answered by option kind.

With the ``live`` extension, :meth:`PermissionDesk.announce` writes a ``permission``
pending line (the request id assigned here, the tool call's step, title and kind, the
options) and :meth:`PermissionDesk.answer` waits for the user's answer on stdin
(:meth:`~sandstream.container.inbox.Inbox.ask`) at most ``timeout`` seconds (then
``reject``), answers the agent with the option of the matching kind (``once`` →
``allow_once``, ``always`` → ``allow_always``, ``reject`` → ``reject_once``, each
falling back to its sibling kind), and writes the resolved line.
A request one of the chat's grants matches (the same tool kind, exactly the same title:
:meth:`~sandstream.container.context.RunContext.granted`) is resolved ``always`` with
``by: "grant"`` right after its pending line, without waiting.
Without ``live`` the request is rejected at once (and logged). :meth:`cancel_all`
(an interrupt) answers every waiting request ``cancelled``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

import trio
from acp.schema import PermissionOption as AcpOption

from sandstream.core import Permission, PermissionOption, PermissionReply

from ...context import RunContext

__all__ = ["PermissionDesk", "choose_option"]

_KINDS: Final[dict[str, tuple[str, str]]] = {
    "once": ("allow_once", "allow_always"),
    "always": ("allow_always", "allow_once"),
    "reject": ("reject_once", "reject_always"),
}


def choose_option(options: Sequence[AcpOption], reply: str) -> AcpOption | None:
    """The agent's option for ``reply`` (``once``/``always``/``reject``), if it has one."""
    for kind in _KINDS[reply]:
        for option in options:
            if option.kind == kind:
                return option
    return None


class PermissionDesk:
    """The permission requests of one turn."""

    def __init__(self, ctx: RunContext, timeout: float) -> None:
        self._ctx = ctx
        self._timeout = timeout
        self._waiting: dict[str, trio.CancelScope] = {}
        self._granted: set[str] = set()
        self.cancelled = False
        self.last_answered = trio.current_time()

    @property
    def waiting(self) -> bool:
        """Whether a request waits for the user (the agent is silent meanwhile)."""
        return bool(self._waiting)

    def cancel_all(self) -> None:
        """Answer every waiting request ``cancelled``, and any later one at once."""
        self.cancelled = True
        for scope in self._waiting.values():
            scope.cancel()

    def announce(
        self, step_id: str, tool_kind: str, title: str | None, options: Sequence[AcpOption]
    ) -> str | None:
        """Write the pending line (live only; resolved at once when a grant matches); the
        request id, or ``None`` when not live."""
        if not self._ctx.live:
            self._ctx.emitter.log(
                "warn", f"agent asks permission for {title!r}: rejected (no live reader)"
            )
            return None
        request_id = f"perm_{uuid.uuid4().hex[:16]}"
        shown = [
            PermissionOption(id=option.option_id, kind=option.kind, name=option.name)
            for option in options
        ]
        self._ctx.emitter.emit(
            Permission(
                id=request_id,
                status="pending",
                step=step_id,
                title=title,
                tool_kind=tool_kind,
                options=shown,
            )
        )
        if self._ctx.granted(tool_kind, title):
            self._ctx.emitter.emit(
                Permission(id=request_id, status="resolved", reply="always", by="grant")
            )
            self._granted.add(request_id)
        else:
            self._waiting[request_id] = trio.CancelScope()
        return request_id

    async def answer(self, request_id: str | None, options: Sequence[AcpOption]) -> Any:
        """Wait for the user (see the module doc); the ``session/request_permission`` result."""
        reply: PermissionReply = "reject"
        if request_id in self._granted:
            self._granted.discard(request_id)
            reply = "always"
        elif request_id is not None:
            scope = self._waiting[request_id]
            if self.cancelled:
                scope.cancel()
            try:
                with scope, trio.move_on_after(self._timeout) as timer:
                    reply = await self._ctx.inbox.ask(request_id)
                if scope.cancelled_caught:
                    reply = "cancelled"
                elif timer.cancelled_caught:
                    self._ctx.emitter.log(
                        "warn", f"permission request {request_id}: no answer, rejected"
                    )
            finally:
                del self._waiting[request_id]
                self.last_answered = trio.current_time()
            self._ctx.emitter.emit(Permission(id=request_id, status="resolved", reply=reply))
        if reply == "cancelled":
            return {"outcome": {"outcome": "cancelled"}}
        option = choose_option(options, reply)
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option.option_id}}
