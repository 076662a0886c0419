"""User messages that arrive during a run, on stdin after the dispatch (durable sessions).

:func:`read_messages` reads one :class:`UserMessage` JSON line at a time in a worker
thread into the run's :class:`Inbox` (EOF: no more); the agent calls :meth:`Inbox.take`
before each model call. Bad input (bad JSON, wrong shape, not UTF-8, too deep, too long)
is a ``warn`` log and skipped. Cancellation: :func:`read_messages` returns at once and
the blocked read is abandoned in its thread (the container leaves with ``os._exit``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import BinaryIO, Final

import trio

from sandstream.core.errors import JSONInputError
from sandstream.core.json_input import decode_json
from sandstream.core.schemas import UserMessage

from .errors import OutputClosedError
from .output import Emitter

__all__ = ["MAX_MESSAGE_BYTES", "Inbox", "read_messages"]

MAX_MESSAGE_BYTES: Final = 1024 * 1024
"""A stdin message line longer than this is skipped."""


class Inbox:
    """Messages received and not yet taken by the agent, in arrival order."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self.received = 0
        """Messages received since the start."""

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
            message = decode_json(line, UserMessage)
        except JSONInputError as exc:
            _warn(emitter, f"stdin line {line_number}: not a message: {exc}")
            continue
        inbox.put(message.text)


def _warn(emitter: Emitter, message: str) -> None:
    with contextlib.suppress(OutputClosedError):  # the run reports a closed stdout itself
        emitter.log("warn", message)
