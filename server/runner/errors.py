"""The runner's exceptions, under :class:`RunnerError`. A refused turn
(:class:`RunnerUnavailableError`) is a 503 problem with ``Retry-After``, for every role
that admits work on the runner."""

from __future__ import annotations

from typing import ClassVar

from sandstream.server.errors import ProblemError, ServerError
from sandstream.server.http import AT_CAPACITY, SHUTTING_DOWN

__all__ = [
    "AtCapacityError",
    "LaunchError",
    "RunnerError",
    "RunnerUnavailableError",
    "ShuttingDownError",
    "TurnStateError",
]


class RunnerError(ServerError):
    """Base class of the runner's exceptions."""


class RunnerUnavailableError(RunnerError, ProblemError):
    """A turn was refused; try again after ``retry_after`` seconds (503)."""

    status: ClassVar[int] = 503
    type: ClassVar[str] = SHUTTING_DOWN
    title: ClassVar[str] = "Runner shutting down"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class AtCapacityError(RunnerUnavailableError):
    """``max_live`` containers are already running."""

    type: ClassVar[str] = AT_CAPACITY
    title: ClassVar[str] = "Runner at capacity"


class ShuttingDownError(RunnerUnavailableError):
    """The runner is shutting down and admits no new turn."""


class LaunchError(RunnerError, OSError):
    """The sandbox could not be started (no such program, no resources...)."""


class TurnStateError(RunnerError, RuntimeError):
    """A :class:`TurnStream` was used out of order (entered twice, iterated unentered)."""
