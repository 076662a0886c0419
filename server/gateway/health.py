"""Whether a turn's providers answer: each failed call noted at once, and the turn given
up once its calls have kept failing, none succeeding, for ``unavailable_after`` seconds.

A call fails when its answer is a 5xx or a 429, or it is cut (refused, timed out,
dropped mid-stream); it succeeds when a 2xx or 3xx answer passes whole. A 4xx other than
429 is the client's problem and neither. The clock starts at the first failure since
the last success; a 2xx answer still streaming holds it (its end decides). The watch is a
trio task (:meth:`ProviderHealth.watch`); cancelling it stops watching.
Bad input: an error body that is not JSON or not UTF-8 is quoted as text, shortened.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
import trio

from .observers import CallObserver, Headers, ProxiedCall

__all__ = ["CallFailure", "FailedAnswer", "ProviderHealth"]

ERROR_BODY_LIMIT: Final = 16 * 1024
"""Bytes of a failed answer's body kept to find the provider's error message."""
MESSAGE_LIMIT: Final = 300


@dataclass(frozen=True, slots=True)
class CallFailure:
    """A failed call: its provider, what was asked, the status (``None``: no answer
    came, or it was cut) and what went wrong (the provider's own message if it gave one)."""

    call: ProxiedCall
    status: int | None
    message: str

    def describe(self) -> str:
        """One line: ``anthropic POST v1/messages: 500: overloaded``."""
        status = "" if self.status is None else f" {self.status}"
        call = self.call
        return f"{call.provider} {call.method} /{call.path}:{status} {self.message}"


def error_message(body: bytes) -> str:
    """The provider's message in an error body (``error.message`` of Anthropic, OpenAI
    and Gemini, also in a list), else the body as text; shortened."""
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError:
        value = None
    if isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _short(error["message"])
        if isinstance(error, str):
            return _short(error)
    text = body.decode("utf-8", "replace").strip()
    return _short(text) if text else "no message"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


class ProviderHealth:
    """One turn's provider health. ``on_failure`` is called at once with each failed
    call; ``on_unavailable`` once, with the last failure, when calls have failed for
    ``unavailable_after`` seconds with none succeeding (then the watch ends)."""

    def __init__(
        self,
        unavailable_after: float,
        *,
        on_failure: Callable[[CallFailure], object],
        on_unavailable: Callable[[CallFailure], object],
    ) -> None:
        self.unavailable_after = unavailable_after
        self._on_failure = on_failure
        self._on_unavailable = on_unavailable
        self.failing_since: float | None = None
        """When the first failure since the last success was seen (trio's clock)."""
        self.last: CallFailure | None = None
        self.streaming = 0
        """2xx answers passing now."""
        self._changed = trio.Event()

    def observer(self, call: ProxiedCall) -> CallObserver:
        """The observer of one call (an :data:`~.observers.ObserverFactory`)."""
        return _HealthObserver(self, call)

    def failed(self, failure: CallFailure) -> None:
        if self.failing_since is None:
            self.failing_since = trio.current_time()
        self.last = failure
        self._notify()
        self._on_failure(failure)

    def succeeded(self) -> None:
        self.failing_since = None
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    @property
    def deadline(self) -> float:
        """When the turn is given up unless a call succeeds (inf: not failing)."""
        if self.failing_since is None or self.streaming:
            return math.inf
        return self.failing_since + self.unavailable_after

    async def watch(self) -> None:
        """Call ``on_unavailable`` once the deadline passes; return then."""
        while True:
            changed = self._changed
            with trio.move_on_at(self.deadline):
                await changed.wait()
                continue
            if self.last is not None and trio.current_time() >= self.deadline:
                self._on_unavailable(self.last)
                return


class FailedAnswer:
    """What one answer says of a failure: its status, and the start of its body when
    the status is a failing one (a 5xx or a 429). Told what an observer is told."""

    __slots__ = ("_body", "status")

    def __init__(self) -> None:
        self.status: int | None = None
        self._body = bytearray()

    @property
    def failing(self) -> bool:
        """Whether the status is a failing one (a 5xx or a 429)."""
        status = self.status
        return status is not None and (status >= 500 or status == 429)

    def chunk(self, data: bytes) -> None:
        if self.failing and len(self._body) < ERROR_BODY_LIMIT:
            self._body += data[: ERROR_BODY_LIMIT - len(self._body)]

    def message(self) -> str:
        """The provider's message in the body kept (:func:`error_message`)."""
        return error_message(bytes(self._body))


class _HealthObserver:
    """Classifies one call for :class:`ProviderHealth`."""

    __slots__ = ("_answer", "_call", "_health")

    def __init__(self, health: ProviderHealth, call: ProxiedCall) -> None:
        self._health = health
        self._call = call
        self._answer = FailedAnswer()

    def response(self, status: int, reason: str, headers: Headers) -> None:
        self._answer.status = status
        if 200 <= status < 300:
            self._health.streaming += 1
            self._health._notify()

    def chunk(self, data: bytes) -> None:
        self._answer.chunk(data)

    def end(self) -> None:
        self._done()
        answer = self._answer
        if answer.failing:
            self._health.failed(CallFailure(self._call, answer.status, answer.message()))
        elif answer.status is not None and answer.status < 400:
            self._health.succeeded()

    def cut(self, reason: str, *, upstream: bool) -> None:
        self._done()
        if upstream:
            self._health.failed(CallFailure(self._call, self._answer.status, reason))

    def _done(self) -> None:
        status = self._answer.status
        if status is not None and 200 <= status < 300:
            self._health.streaming -= 1
