"""What arrives during a run on stdin after the dispatch (durable sessions): user
messages and answers to the agent's permission requests.

:func:`read_messages` reads one :data:`InboundMessage` JSON line at a time in a worker
thread into the run's :class:`Inbox` (EOF: no more); the agent calls :meth:`Inbox.take`
before each model call, and :meth:`Inbox.ask` waits for the answer to a request. Bad
input (bad JSON, wrong shape, not UTF-8, too deep, too long), and an answer to no
pending request or to one already answered, is a ``warn`` log and skipped.
Cancellation: :func:`read_messages` returns at once and the blocked read is abandoned in
its thread (the container leaves with ``os._exit``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import BinaryIO, Final, Literal, TypeAlias

import trio

from sandstream.core import (
    InboundMessage,
    JSONInputError,
    PermissionAnswer,
    UserMessage,
    decode_json,
)

from .errors import OutputClosedError
from .output import Emitter

__all__ = ["MAX_MESSAGE_BYTES", "Answer", "Inbox", "read_messages"]

MAX_MESSAGE_BYTES: Final = 1024 * 1024
"""A stdin message line longer than this is skipped."""

Answer: TypeAlias = Literal["once", "always", "reject"]


class Inbox:
    """Messages received and not yet taken by the agent, in arrival order, and the
    answers to the permission requests the agent waits on."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._asked: dict[str, trio.MemorySendChannel[Answer]] = {}
        self.received = 0
        """Messages received since the start."""

    async def ask(self, request_id: str) -> Answer:
        """Wait for the answer to permission request ``request_id``; the first one wins.

        Raises ``ValueError`` if that request is already being waited on. Cancellation
        withdraws the request: a later answer to it is refused.
        """
        if request_id in self._asked:
            raise ValueError(f"permission request {request_id!r} is already pending")
        send, receive = trio.open_memory_channel[Answer](1)
        self._asked[request_id] = send
        try:
            async with receive:
                return await receive.receive()
        finally:
            self._asked.pop(request_id, None)

    def answer(self, answer: PermissionAnswer) -> str | None:
        """Hand ``answer`` to the request waiting on it; return why not, if it was not."""
        send = self._asked.pop(answer.id, None)
        if send is None:
            return f"no pending permission request {answer.id!r}"
        send.send_nowait(answer.reply)
        return None

    def put(self, text: str) -> None:
        self._pending.append(text)
        self.received += 1

    @property
    def pending(self) -> bool:
        """True when a message waits to be taken."""
        return bool(self._pending)

    def take(self) -> list[str]:
        """Every message received since the last call (possibly none); never blocks."""
        taken, self._pending = self._pending, []
        return taken


async def read_messages(source: BinaryIO, inbox: Inbox, emitter: Emitter) -> None:
    """Read message lines from ``source`` into ``inbox`` until EOF (see the module doc)."""
    readline: Callable[[], bytes] = lambda: source.readline(MAX_MESSAGE_BYTES + 1)  # noqa: E731
    line_number = 1  # the dispatch was line 1
    while True:
        line = await trio.to_thread.run_sync(readline, abandon_on_cancel=True)
        if not line:
            return
        line_number += 1
        if len(line) > MAX_MESSAGE_BYTES:
            while line and not line.endswith(b"\n"):  # skip the rest of the long line
                line = await trio.to_thread.run_sync(readline, abandon_on_cancel=True)
            _warn(emitter, f"stdin line {line_number}: message over {MAX_MESSAGE_BYTES} bytes")
            continue
        if not line.strip():
            continue
        try:
            message: InboundMessage = decode_json(line, InboundMessage)
        except JSONInputError as exc:
            _warn(emitter, f"stdin line {line_number}: not a message: {exc}")
            continue
        if isinstance(message, UserMessage):
            inbox.put(message.text)
        elif (refused := inbox.answer(message)) is not None:
            _warn(emitter, f"stdin line {line_number}: {refused}")


def _warn(emitter: Emitter, message: str) -> None:
    with contextlib.suppress(OutputClosedError):  # the run reports a closed stdout itself
        emitter.log("warn", message)
