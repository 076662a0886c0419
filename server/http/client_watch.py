"""A streaming body's watch on its client: cut off one that stopped reading.

Hypercorn shields socket writes, so a client that stops reading blocks the body's
``send`` forever. A body calls :meth:`ClientWatch.handed_out` as it returns a chunk
and :meth:`ClientWatch.taken` when it is asked for the next one (the previous one is
then written), and the fan-out does the same around a live write it must finish
(:mod:`.fanout`); :meth:`ClientWatch.watch`, run in the body's nursery, cuts the
connection of a client that held one chunk for ``timeout`` seconds and cancels the
nursery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

__all__ = ["ClientWatch"]

log = logging.getLogger("sandstream.chat")


class ClientWatch:
    """When the client was last handed a chunk it has not taken; see the module.

    ``abort_client`` closes the client's connection (``None``: nothing to cut).
    """

    def __init__(self, abort_client: Callable[[], object] | None) -> None:
        self._abort_client = abort_client
        self.sending_since: float | None = None
        """When the chunk in the client's hands was handed out (``None``: none is)."""
        self._send_begun = trio.Event()
        self.stalled = False
        """Set once :meth:`watch` cut the client off."""

    def handed_out(self, now: float) -> None:
        """A chunk goes to the client at ``now`` (trio time)."""
        self.sending_since = now
        self._send_begun.set()

    def taken(self) -> None:
        """The body was asked for more: the chunk handed out is written."""
        self.sending_since = None

    def cut(self) -> None:
        """Close the client's connection; a failure is logged, never raised."""
        if self._abort_client is not None:
            try:
                self._abort_client()
            except OSError as exc:
                log.warning("cutting the client connection failed: %r", exc)

    async def watch(self, timeout: float, scope: trio.CancelScope, label: str) -> None:
        """Until cancelled: once a chunk was held ``timeout`` s, set :attr:`stalled`,
        cut the client and cancel ``scope`` (the body's nursery); then return."""
        while True:
            since = self.sending_since
            if since is None:
                self._send_begun = trio.Event()
                await self._send_begun.wait()
                continue
            if trio.current_time() < since + timeout:
                await trio.sleep_until(since + timeout)
                continue
            log.warning(
                "session %s: a client did not read for %g s; cutting it off", label, timeout
            )
            self.stalled = True
            self.cut()
            scope.cancel()
            return
