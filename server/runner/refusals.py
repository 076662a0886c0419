"""The runner's refusals as problem JSON, for every role that admits work on it."""

from __future__ import annotations

from quart import Response

from sandstream.server.http.problems import AT_CAPACITY, SHUTTING_DOWN, problem

from .errors import AtCapacityError, RunnerUnavailableError

__all__ = ["unavailable"]


def unavailable(error: RunnerUnavailableError) -> Response:
    """The 503 problem (with ``Retry-After``) for a runner at capacity or shutting down."""
    at_capacity = isinstance(error, AtCapacityError)
    return problem(
        503,
        "Runner at capacity" if at_capacity else "Runner shutting down",
        str(error),
        type=AT_CAPACITY if at_capacity else SHUTTING_DOWN,
        headers={"Retry-After": str(error.retry_after)},
    )
