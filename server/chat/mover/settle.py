"""Settling a chat turn from its runner session's chunks: fold, write, release — once.

:class:`TurnFold` is a turn's assistant message in the making: the log mover feeds it
the session's chunks as it follows them (bounded by ``max_turn_steps`` /
``max_turn_bytes``), so no copy of the chunks is needed to settle. :class:`TurnSettler`
is the one place a chat turn is persisted: it writes the fold's message, with the
files the run wrote back, the session settled and the chat's lock released, in **one**
store transaction (:meth:`~..store.contract.TurnStore.settle_turn`). Idempotent: a
settled turn is left as it is. Chunks without a terminal line are closed with
``error{code:"upstream_closed"}``. Each turn it settles is counted by how it ended and
timed from its start (:class:`SettledTurns`, the chat's turn metrics on whichever
replica settles it: with or without a runner of its own).

Bad input: lines the core refuses end the fold as the core ends a turn
(``protocol_error``). Cancellation: a feed in progress runs to its end in its worker
thread; nothing is written before the settling transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Final

import trio
from prometheus_client import Counter, Histogram

from sandstream.core import (
    LIVE_EXTENSION,
    USAGE_EXTENSION,
    ErrorBlock,
    PermissionRow,
    PersistedMessage,
    StreamProcessor,
    assistant_message,
)
from sandstream.server.chat.model import now_ms
from sandstream.server.chat.store import TurnStore

from .permissions import PermissionWatch

__all__ = ["SettledTurns", "TurnFold", "TurnSettler", "fold_chunks"]

log = logging.getLogger("sandstream.chat")

_FEED_BYTES: Final = 64 * 1024
"""A feed is handed to the core in slices of this size."""
_YIELD_SECONDS: Final = 1e-4
"""The fold sleeps this long after each slice, giving the GIL up to the event loop
(docs/chat.md, "Log mover")."""


class TurnFold:
    """The assistant message a session's chunks fold to, fed as they come.

    :meth:`feed` takes the session's NDJSON in cursor order; it is meant for a worker
    thread (one feed at a time) and pauses after each slice (:data:`_YIELD_SECONDS`).
    Lines after the terminal are ignored.

    ``shared``: the core of the runner that runs the same session in this process, when
    it folds with these bounds: its turn is this fold, made once (the session's chunks
    are that core's output, and fold to what it holds); feeds are then not needed and
    are ignored.

    ``watch`` follows its permission requests for the push alerts
    (:mod:`.permissions`), shared or not: a runner's core folds them as the session's
    own fold would."""

    def __init__(
        self,
        *,
        max_steps: int,
        max_step_bytes: int,
        max_line_bytes: int,
        shared: StreamProcessor | None = None,
    ) -> None:
        self._own = shared is None
        self._processor = shared or StreamProcessor(
            "ndjson",
            max_line_bytes=max_line_bytes,
            max_steps=max_steps,
            max_step_bytes=max_step_bytes,
            extensions=(LIVE_EXTENSION, USAGE_EXTENSION),
        )
        self.watch = PermissionWatch()

    @property
    def shared(self) -> bool:
        """Whether this is a runner's fold, shared (see the class docstring)."""
        return not self._own

    @property
    def needs_chunks(self) -> bool:
        """Whether :meth:`feed` wants the chunks (not when shared)."""
        return self._own

    @property
    def ended(self) -> bool:
        """Whether a terminal line (or a refused one) ended the turn."""
        return self._processor.ended

    @property
    def permissions(self) -> Mapping[str, PermissionRow]:
        """The turn's permission requests so far, by id (read it between feeds)."""
        return self._processor.turn.permissions

    @property
    def lines(self) -> int:
        """How many lines were folded so far."""
        return self._processor.written

    def feed(self, data: bytes) -> None:
        """Fold ``data`` (the next bytes of the session's NDJSON)."""
        if not self._own:
            return
        processor = self._processor
        for start in range(0, len(data), _FEED_BYTES):
            if processor.ended:
                return
            processor.feed(data[start : start + _FEED_BYTES])
            time.sleep(_YIELD_SECONDS)

    def message(self, *, message_id: str, created_at: int) -> PersistedMessage:
        """The message as it stands, closed (a turn without a terminal fails with
        ``upstream_closed``; a shared one is left as its runner left it); no more
        feeds after this."""
        if self._own:
            self._processor.close("the session ended without a result or error")
        return assistant_message(self._processor.turn, message_id=message_id, created_at=created_at)


def fold_chunks(
    chunks: Iterable[bytes],
    *,
    message_id: str,
    created_at: int,
    max_steps: int,
    max_step_bytes: int,
    max_line_bytes: int,
) -> PersistedMessage:
    """The assistant message ``chunks`` (NDJSON in cursor order, each item one or more
    whole lines) fold to, at once."""
    fold = TurnFold(
        max_steps=max_steps, max_step_bytes=max_step_bytes, max_line_bytes=max_line_bytes
    )
    fold.feed(b"".join(chunks))
    return fold.message(message_id=message_id, created_at=created_at)


class SettledTurns:
    """The chat turns this replica settled: ``sandstream_chat_turns_settled_total`` by
    the stored message's status and error code, ``sandstream_chat_turn_duration_seconds``
    from the turn's start to its settling (metrics of no registry: a collector yields
    them, :class:`~.metrics.ChatTurnsCollector`)."""

    def __init__(self) -> None:
        self.settled = Counter(
            "sandstream_chat_turns_settled",
            "Chat turns settled here, by the stored message's status and error code",
            ("status", "code"),
            registry=None,
        )
        self.duration = Histogram(
            "sandstream_chat_turn_duration_seconds",
            "Seconds from a chat turn's start to its settling",
            buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
            registry=None,
        )

    def observe(self, message: PersistedMessage, started_ms: int, settled_ms: int) -> None:
        error = next((b for b in message.content if isinstance(b, ErrorBlock)), None)
        code = "" if error is None else error.code
        self.settled.labels(message.status or "", code).inc()
        self.duration.observe(max(0, settled_ms - started_ms) / 1000)


class TurnSettler:
    """Settles chat turns in ``store`` (see the module docstring)."""

    def __init__(
        self, store: TurnStore, *, max_steps: int, max_step_bytes: int, max_line_bytes: int
    ) -> None:
        self.store = store
        self.turns = SettledTurns()
        self._limits = {
            "max_steps": max_steps,
            "max_step_bytes": max_step_bytes,
            "max_line_bytes": max_line_bytes,
        }

    def new_fold(self, runner: StreamProcessor | None = None) -> TurnFold:
        """A fold with the settler's limits: ``runner``'s, shared, when that core (of
        the runner running the session in this process) folds within the same bounds
        (its lines no longer than this fold's); else an empty one."""
        limits = self._limits
        shared = (
            runner is not None
            and runner.turn.max_steps == limits["max_steps"]
            and runner.turn.max_step_bytes == limits["max_step_bytes"]
            and runner.max_line_bytes <= limits["max_line_bytes"]
        )
        return TurnFold(
            max_steps=limits["max_steps"],
            max_step_bytes=limits["max_step_bytes"],
            max_line_bytes=limits["max_line_bytes"],
            shared=runner if shared else None,
        )

    async def settle(
        self, session_id: str, fold: TurnFold, *, generation: int | None = None
    ) -> bool:
        """Settle the turn whose runner session is ``session_id`` with the message
        ``fold`` holds (one transaction). Returns False (nothing written) for a
        session that is no chat turn's, or a turn settled already. With
        ``generation`` (the log mover's lease), the transaction raises
        :class:`~sandstream.server.chat.model.FencedError` (nothing written) if a newer generation
        claimed the session meanwhile.

        Raises the store's errors. Cancellation: before the write nothing is written;
        the write itself is not interrupted.
        """
        turn = await self.store.get_turn(session_id)
        if turn is None or turn.state == "settled":
            return False
        message_id = turn.assistant_message_id
        message = await trio.to_thread.run_sync(
            lambda: fold.message(message_id=message_id, created_at=now_ms())
        )
        settled_at = now_ms()
        settled = await self.store.settle_turn(turn.id, message, settled_at, generation=generation)
        if settled:
            self.turns.observe(message, turn.created_at, settled_at)
            log.info(
                "chat %s: turn %s settled (%s)", turn.chat_id, session_id, message.status or ""
            )
        return settled
