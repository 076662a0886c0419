"""What a container's stdin is given, and when: a turn's :class:`Claim` through a
:class:`Binding`.

A cold container is started for its turn: its binding is claimed from the start
(:meth:`Binding.cold`). A warm one (:mod:`.pool`) is started ahead of any turn with
``--warm``; it says :data:`~sandstream.core.WARM_READY` and waits. A turn claims it
(:meth:`Binding.give`); the launcher then does what the turn needs before the container
may go on (a bwrap sandbox's network: its pasta forwards the turn's ports), reports it
(:meth:`Binding.bound`), and :func:`~.launcher.feed_bound` writes the binding line (the turn's
environment: :class:`~sandstream.core.WarmBinding`), the dispatch and the messages.
Nothing of a turn is in a warm sandbox before that.

Nothing here blocks but the waits, which cancellation ends with nothing to undo; a
second claim of one container is a :class:`RuntimeError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
import trio

from sandstream.core import WarmBinding

from .errors import LaunchError
from .procs import TURN_MARKER_ENV

__all__ = ["WARM_FLAG", "Binding", "Claim"]

WARM_FLAG: Final = "--warm"
"""The container's flag for a warm start (:mod:`sandstream.container.cli`)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A turn taking a container: its dispatch (the JSON line), its id, the messages
    that follow the dispatch on stdin (``None``: stdin closes after it)."""

    dispatch: bytes
    turn_id: str
    messages: trio.MemoryReceiveChannel[bytes] | None = None

    def binding_line(self) -> bytes:
        """The line a warm container reads before the dispatch: the turn's environment
        (its marker, :data:`~.procs.TURN_MARKER_ENV`)."""
        return msgspec.json.encode(WarmBinding(env={TURN_MARKER_ENV: self.turn_id})) + b"\n"


class Binding:
    """The hand-over of one container to the turn that claims it. See the module
    docstring. ``warm``: started ahead of its turn (``--warm``, a binding line before
    the dispatch)."""

    def __init__(self, *, warm: bool) -> None:
        self.warm = warm
        self.claim: Claim | None = None
        self.error: LaunchError | None = None
        """Why the claimed container could not be bound (it is then ended)."""
        self._claimed = trio.Event()
        self._settled = trio.Event()

    @classmethod
    def cold(cls, claim: Claim) -> Binding:
        """The binding of a container started for ``claim``'s turn: claimed and bound
        already (nothing of its start waits for the turn)."""
        binding = cls(warm=False)
        binding.give(claim)
        binding.bound()
        return binding

    @property
    def claimed(self) -> bool:
        return self.claim is not None

    @property
    def is_bound(self) -> bool:
        """Claimed, and the container got (or is getting) the turn's lines."""
        return self._settled.is_set() and self.error is None

    def give(self, claim: Claim) -> None:
        """Hand the container to ``claim``'s turn (once)."""
        if self.claim is not None:
            raise RuntimeError("a container serves one turn: this one is claimed already")
        self.claim = claim
        self._claimed.set()

    async def wait_claimed(self) -> Claim:
        await self._claimed.wait()
        assert self.claim is not None
        return self.claim

    def bound(self, error: LaunchError | None = None) -> None:
        """The launcher's answer to the claim: ready for the turn, or ``error``."""
        if not self._settled.is_set():
            self.error = error
            self._settled.set()

    async def wait_settled(self) -> None:
        """Return once the claim is answered, bound or not."""
        await self._settled.wait()

    async def wait_bound(self) -> None:
        """Return once the container is the turn's; raise :class:`LaunchError` if it
        could not be bound."""
        await self.wait_settled()
        if self.error is not None:
            raise self.error

    def turn_messages(self) -> trio.MemoryReceiveChannel[bytes] | None:
        """The messages of the turn this container serves (``None`` until it is bound:
        a claim that failed to bind keeps its messages for the cold start that follows)."""
        return self.claim.messages if self.is_bound and self.claim is not None else None

    def markers(self, sandbox_id: str) -> list[str]:
        """The turn markers the container's processes may carry: ``sandbox_id`` (what it
        was started with) and, once bound, its turn's."""
        claim = self.claim
        if claim is None or not self.is_bound or claim.turn_id == sandbox_id:
            return [sandbox_id]
        return [sandbox_id, claim.turn_id]
