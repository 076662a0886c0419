"""What sees a proxied call's answer as it passes: :class:`CallObserver`.

Each call through the gateway gets one observer from each of the turn's
:data:`ObserverFactory` s; the proxy tells it the answer's status and headers, each chunk
of its body as it is forwarded (the very bytes, never copied or held), and then exactly
one of :meth:`~CallObserver.end` (the whole answer passed) or
:meth:`~CallObserver.cut` (no answer, or not all of it: refused, timed out, dropped,
or the turn ended). An observer is sans-IO: it is called synchronously, must not block,
and an exception it raises is logged and the observer dropped, never the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["CallObserver", "ObserverFactory", "Observers", "ProxiedCall"]

log = logging.getLogger("sandstream.gateway")

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class ProxiedCall:
    """One call: the turn, the provider, the method and the path after the provider's
    prefix (no query)."""

    turn_id: str
    provider: str
    method: str
    path: str


class CallObserver(Protocol):
    """Told about one call's answer, in order: :meth:`response` (unless cut before it),
    :meth:`chunk` for each piece of the body, then :meth:`end` or :meth:`cut`."""

    def response(self, status: int, reason: str, headers: Headers) -> None: ...

    def chunk(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def cut(self, reason: str, *, upstream: bool) -> None:
        """The answer did not pass whole: ``upstream`` when the provider's side failed
        (refused, timed out, dropped), not when the client left or the turn ended."""
        ...


ObserverFactory = Callable[[ProxiedCall], CallObserver | None]
"""Makes the observer of one call (a :class:`~.metering.CallMeter`, ``health.observer``),
or gives ``None`` for a call it has no business with."""


class Observers:
    """The observers of one call, told together; one that raises is logged and dropped."""

    __slots__ = ("_call", "_observers")

    def __init__(self, call: ProxiedCall, factories: Sequence[ObserverFactory]) -> None:
        self._call = call
        made = (factory(call) for factory in factories)
        self._observers = [observer for observer in made if observer is not None]

    def response(self, status: int, reason: str, headers: Headers) -> None:
        self._tell(lambda o: o.response(status, reason, headers))

    def chunk(self, data: bytes) -> None:
        for observer in self._observers:
            try:
                observer.chunk(data)
            except Exception:
                self._drop(observer)

    def end(self) -> None:
        self._tell(lambda o: o.end())

    def cut(self, reason: str, *, upstream: bool) -> None:
        self._tell(lambda o: o.cut(reason, upstream=upstream))

    def _tell(self, event: Callable[[CallObserver], object]) -> None:
        for observer in list(self._observers):
            try:
                event(observer)
            except Exception:
                self._drop(observer)

    def _drop(self, observer: CallObserver) -> None:
        log.exception("observer %r of %s failed; dropped", observer, self._call)
        self._observers = [o for o in self._observers if o is not observer]
