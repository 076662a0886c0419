"""The chat lock's lease: renewed by a heartbeat while a turn streams.

The lock is a lease on the chat row (holder id + expiry, in the store). A live turn
renews it every ``heartbeat`` seconds for ``lease`` more seconds; if the process
dies, nobody renews it, and once it has expired the next sweep
(:meth:`~.service.ChatService.sweep`, at start-up and every ``sweep_interval``) or
the next turn on that chat, whichever comes first, settles the dead turn (its
assistant message written as ``turn_lost``, its tokens dead) and frees the chat.
So no chat stays stuck longer than one lease and one sweep interval.
"""

from __future__ import annotations

import logging
import sqlite3

import trio

from .errors import StoreError
from .ids import now_ms
from .store import ChatStore

__all__ = ["keep_lease"]

log = logging.getLogger("sandstream.chat")


async def keep_lease(
    store: ChatStore, chat_id: str, holder: str, *, lease: float, heartbeat: float
) -> None:
    """Renew the lock every ``heartbeat`` s until cancelled, or until it was lost.

    A failed renewal (database busy) is logged and retried at the next beat; the
    lease is long enough to survive a few. Returns if ``holder`` no longer holds the
    lock (it expired and another turn took it). Cancellation: stops at once.
    """
    while True:
        await trio.sleep(heartbeat)
        try:
            held = await store.renew_lock(chat_id, holder, now_ms() + int(lease * 1000))
        except (sqlite3.Error, StoreError) as exc:
            log.warning("chat %s: renewing the lock failed: %r", chat_id, exc)
            continue
        if not held:
            log.error("chat %s: the lock was lost (its lease expired); the turn goes on", chat_id)
            return
