"""The runner's exceptions, under :class:`RunnerError`."""

from __future__ import annotations

from sandstream.server.errors import ServerError

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


class RunnerUnavailableError(RunnerError):
    """A turn was refused; try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AtCapacityError(RunnerUnavailableError):
    """``max_live`` containers are already running."""


class ShuttingDownError(RunnerUnavailableError):
    """The runner is shutting down and admits no new turn."""


class LaunchError(RunnerError, OSError):
    """The sandbox could not be started (no such program, no resources...)."""


class TurnStateError(RunnerError, RuntimeError):
    """A :class:`TurnStream` was used out of order (entered twice, iterated unentered)."""
