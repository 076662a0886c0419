"""Settling a chat turn from its runner session's chunks: fold, write, release — once.

:class:`TurnSettler` is the one place a chat turn is persisted: it folds the session's
chunks with the core into the assistant message (bounded by ``max_turn_steps`` /
``max_turn_bytes``) and writes it, with the files the run wrote back, the session
settled and the chat's lock released, in **one** store transaction
(:meth:`~..store.contract.ChatStore.settle_turn`). Idempotent: a settled turn is left as
it is. Chunks without a terminal line are closed with ``error{code:"upstream_closed"}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from sandstream.core import StreamProcessor
from sandstream.core.envelope import LIVE_EXTENSION
from sandstream.core.persistence import PersistedMessage, assistant_message

from ..ids import now_ms
from ..store.contract import ChatStore

__all__ = ["ChunkFolder", "TurnSettler", "fold_chunks"]

log = logging.getLogger("sandstream.chat")

_FEED_BYTES: Final = 64 * 1024
"""Chunks are joined into feeds of the core of about this size (fewer calls)."""
_YIELD_SECONDS: Final = 1e-4
"""The fold sleeps this long after each feed, giving the GIL up to the event loop
(docs/chat.md, "Log mover")."""

ChunkFolder = Callable[[Callable[[Iterable[bytes]], PersistedMessage]], Awaitable[PersistedMessage]]
"""Runs a fold over a session's chunks and returns its result
(:meth:`~..store.moved_runs.MovedChunks.fold` with the session id bound): the chunks
need not all be in memory at once."""


def fold_chunks(
    chunks: Iterable[bytes],
    *,
    message_id: str,
    created_at: int,
    max_steps: int,
    max_step_bytes: int,
    max_line_bytes: int,
) -> PersistedMessage:
    """The assistant message the chunks fold to: NDJSON in cursor order, each item
    one or more whole lines (a chunk, or a run of them as the log mover stores them).
    Meant for a worker thread: it pauses after each feed (:data:`_YIELD_SECONDS`)."""
    processor = StreamProcessor(
        "ndjson",
        max_line_bytes=max_line_bytes,
        max_steps=max_steps,
        max_step_bytes=max_step_bytes,
        extensions=(LIVE_EXTENSION,),
    )
    batch: list[bytes] = []
    size = 0
    for chunk in chunks:
        batch.append(chunk)
        size += len(chunk)
        if size >= _FEED_BYTES:
            processor.feed(b"".join(batch))
            batch, size = [], 0
            if processor.ended:
                break
            time.sleep(_YIELD_SECONDS)
    if batch and not processor.ended:
        processor.feed(b"".join(batch))
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
        self, session_id: str, fold_over: ChunkFolder, *, generation: int | None = None
    ) -> bool:
        """Fold the session's chunks (``fold_over`` runs the fold over them) into the
        assistant message of the turn whose runner session is ``session_id`` and settle
        it (one transaction). Returns False (nothing
        written) for a session that is no chat turn's, or a turn settled already.
        With ``generation`` (the log mover's lease), the transaction raises
        :class:`~..errors.FencedError` (nothing written) if a newer generation claimed
        the session meanwhile.

        The fold runs where ``fold_over`` runs it (a worker thread). Raises the
        store's errors. Cancellation:
        before the write nothing is written; the write itself is not interrupted.
        """
        turn = await self.store.get_turn(session_id)
        if turn is None or turn.state == "settled":
            return False
        message = await fold_over(
            lambda chunks: fold_chunks(
                chunks, message_id=turn.assistant_message_id, created_at=now_ms(), **self._limits
            )
        )
        settled = await self.store.settle_turn(turn.id, message, now_ms(), generation=generation)
        if settled:
            log.info(
                "chat %s: turn %s settled (%s)", turn.chat_id, session_id, message.status or ""
            )
        return settled
