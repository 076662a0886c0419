"""The tokens of each model call, read as its answer passes: :class:`CallMeter`.

A :class:`CallMeter` is the :class:`~.observers.CallObserver` of one model call (a
request :func:`~sandstream.core.model_providers.protocol_of` names a protocol): it feeds
the answer's bytes to a :class:`~sandstream.core.UsageMeter` and, at the call's end or
cut, hands ``on_metered`` a :class:`MeteredCall`: the call's ``usage`` line (its status,
and for a failed call what went wrong) and its outcome. Sans-IO, like every observer;
bytes that are not the protocol's count nothing (the meter never raises).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from sandstream.core import ModelProtocol, ModelUsage, UsageMeter

from .health import FailedAnswer
from .observers import Headers, ProxiedCall

__all__ = ["CallMeter", "CallOutcome", "MeteredCall"]

CallOutcome: TypeAlias = Literal["succeeded", "failed", "refused", "abandoned"]
"""How a model call ended: ``succeeded`` (a 2xx or 3xx answer passed whole), ``failed``
(a 5xx or 429 answer, or none, or one the provider cut), ``refused`` (another 4xx:
the request's fault), ``abandoned`` (the client or the turn went away first)."""


@dataclass(frozen=True, slots=True)
class MeteredCall:
    """One model call, metered: the call, its ``usage`` line and its outcome."""

    call: ProxiedCall
    line: ModelUsage
    outcome: CallOutcome


class CallMeter:
    """Meters ``call`` of ``protocol``; hands ``on_metered`` the result once."""

    __slots__ = ("_answer", "_call", "_meter", "_on_metered", "_protocol")

    def __init__(
        self,
        call: ProxiedCall,
        protocol: ModelProtocol,
        on_metered: Callable[[MeteredCall], object],
    ) -> None:
        self._call = call
        self._protocol: ModelProtocol = protocol
        self._on_metered = on_metered
        self._meter = UsageMeter(protocol, content_type=None)
        self._answer = FailedAnswer()

    def response(self, status: int, reason: str, headers: Headers) -> None:
        self._answer.status = status
        content_type = next((v for n, v in headers if n.lower() == b"content-type"), None)
        self._meter = UsageMeter(
            self._protocol,
            content_type=None if content_type is None else content_type.decode("latin-1"),
        )

    def chunk(self, data: bytes) -> None:
        self._meter.feed(data)
        self._answer.chunk(data)

    def end(self) -> None:
        answer = self._answer
        status = answer.status
        if answer.failing:
            self._report("failed", answer.message())
        elif status is not None and status >= 400:
            self._report("refused", None)
        else:
            self._report("succeeded", None)

    def cut(self, reason: str, *, upstream: bool) -> None:
        if upstream:
            self._report("failed", reason)
        else:
            self._report("abandoned", None)

    def _report(self, outcome: CallOutcome, error: str | None) -> None:
        line = self._meter.line(
            time.time_ns() // 1_000_000, status=self._answer.status, error=error
        )
        self._on_metered(MeteredCall(self._call, line, outcome))
