"""Settling a chat turn from its runner session's chunks: fold, write, release — once.

:class:`TurnSettler` is the one place a chat turn is persisted. Given the runner
session's id and its chunks (bytes, cursor order, the terminal last), it folds them
with the core into the assistant message (every step the session produced, running
ones closed; the steps kept are bounded by ``max_turn_steps``/``max_turn_bytes``) and
writes it, with the files the run wrote back, in **one** store transaction that also
settles the chat's session and releases the chat's lock
(:meth:`~.store.ChatStore.settle_turn`). It is idempotent: a turn that settled
already is left as it is. The log mover's ``on_terminal`` callback
(:mod:`.turn_mover`) calls it with the chunks it moved and its lease's generation.

Chunks that do not end in a terminal line (a session cut short) are folded as they
are and closed with ``error{code:"upstream_closed"}``; the steps they hold are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from itertools import islice
from typing import Final

import trio

from sandstream.core import StreamProcessor
from sandstream.core.persistence import PersistedMessage, assistant_message

from .ids import now_ms
from .store import ChatStore

__all__ = ["TurnSettler", "fold_chunks"]

log = logging.getLogger("sandstream.chat")

_FEED_CHUNKS: Final = 4096
"""Chunks joined into one feed of the core (fewer calls, one decode pass each)."""


def fold_chunks(
    chunks: Iterable[bytes],
    *,
    message_id: str,
    created_at: int,
    max_steps: int,
    max_step_bytes: int,
    max_line_bytes: int,
) -> PersistedMessage:
    """The assistant message the chunks (NDJSON lines, in cursor order) fold to."""
    processor = StreamProcessor(
        "ndjson", max_line_bytes=max_line_bytes, max_steps=max_steps, max_step_bytes=max_step_bytes
    )
    source = iter(chunks)
    while batch := list(islice(source, _FEED_CHUNKS)):
        processor.feed(b"".join(batch))
        if processor.ended:
            break
    processor.close("the session ended without a result or error")
    return assistant_message(processor.turn, message_id=message_id, created_at=created_at)


class TurnSettler:
    """Settles chat turns in ``store`` (see the module docstring)."""

    def __init__(
        self, store: ChatStore, *, max_steps: int, max_step_bytes: int, max_line_bytes: int
    ) -> None:
        self.store = store
        self._limits = {
            "max_steps": max_steps,
            "max_step_bytes": max_step_bytes,
            "max_line_bytes": max_line_bytes,
        }

    async def settle(
        self, session_id: str, chunks: Iterable[bytes], *, generation: int | None = None
    ) -> bool:
        """Fold ``chunks`` into the assistant message of the turn whose runner session
        is ``session_id`` and settle it (one transaction). Returns False (nothing
        written) for a session that is no chat turn's, or a turn settled already.
        With ``generation`` (the log mover's lease), the transaction raises
        :class:`~.mover.FencedError` (nothing written) if a newer generation claimed
        the session meanwhile.

        The fold runs in a worker thread. Raises the store's errors. Cancellation:
        before the write nothing is written; the write itself is not interrupted.
        """
        turn = await self.store.get_turn(session_id)
        if turn is None or turn.state == "settled":
            return False
        message = await trio.to_thread.run_sync(
            lambda: fold_chunks(
                chunks, message_id=turn.assistant_message_id, created_at=now_ms(), **self._limits
            )
        )
        settled = await self.store.settle_turn(turn.id, message, now_ms(), generation=generation)
        if settled:
            log.info(
                "chat %s: turn %s settled (%s)", turn.chat_id, session_id, message.status or ""
            )
        return settled
