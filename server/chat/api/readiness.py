"""``GET /readyz``: whether this replica can serve turns now, for load balancers and
orchestrators (``GET /healthz`` stays the process's liveness).

Each part the replica needs is asked at once, each within :data:`READY_TIMEOUT` s: the
chat database (a trivial query), Redis when ``--redis-url`` is set (``PING``), and the
remote runner of a replica with ``--sandbox-url`` (its ``GET /healthz``). The answer is
``200`` when every part answered, else ``503``; both with JSON naming each part and,
for one that is not ready, why (the error's kind only: the route needs no token, so it
names no address). A draining replica is not ready either. A part's state changes are
logged (one line each), not every probe. Cancellation: the checks stop with the request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import httpx
import trio
from quart import Blueprint, Response

from sandstream.server.chat.mover import Lease, RedisLease
from sandstream.server.http import json_response

from .chat_service import ChatService
from .guard import get_service

__all__ = ["READY_TIMEOUT", "readiness_blueprint", "readiness_of"]

log = logging.getLogger("sandstream.chat")

READY_TIMEOUT: Final = 2.0
"""Seconds each part of a readiness check may take to answer."""

readiness_blueprint = Blueprint("chat_readiness", __name__)


@readiness_blueprint.get("/readyz")
async def readyz() -> Response:
    """200 ``{"status": "ready", "checks": {part: {"ok": true}}}``; 503 with
    ``"status": "not_ready"`` and ``{"ok": false, "error": …}`` for each part that is
    not (``draining`` while the server shuts down)."""
    failures = await readiness_of(get_service())
    ready = all(why is None for why in failures.values())
    checks = {
        part: {"ok": True} if why is None else {"ok": False, "error": why}
        for part, why in failures.items()
    }
    return json_response(
        {"status": "ready" if ready else "not_ready", "checks": checks},
        status=200 if ready else 503,
    )


async def readiness_of(service: ChatService) -> dict[str, str | None]:
    """Each part's failure (``None``: ready), asked concurrently; see the module docstring."""
    settings = service.settings
    checks: dict[str, Callable[[], Awaitable[str | None]]] = {
        "database": partial(_database, service)
    }
    if settings.redis_url is not None:
        checks["redis"] = partial(_redis, service.turns.mover.lease)
    if settings.sandbox_url is not None:
        checks["runner"] = partial(_runner, settings.sandbox_url, settings.runner_token)
    failures: dict[str, str | None] = {}

    async def run(part: str, check: Callable[[], Awaitable[str | None]]) -> None:
        failures[part] = "timed out"
        with trio.move_on_after(READY_TIMEOUT):
            failures[part] = await check()

    async with trio.open_nursery() as nursery:
        for part, check in checks.items():
            nursery.start_soon(run, part, check)
    if service.draining:
        failures["server"] = "draining"
    _log_changes(service.readiness, failures)
    return dict(sorted(failures.items()))


def _log_changes(last: dict[str, str | None], failures: dict[str, str | None]) -> None:
    """Log each part whose state differs from ``last`` (then updated)."""
    for part, why in failures.items():
        if last.get(part) == why:
            continue
        last[part] = why
        if why is None:
            log.info("readiness: %s is ready again", part)
        else:
            log.warning("readiness: %s is not ready (%s)", part, why)


async def _database(service: ChatService) -> str | None:
    try:
        await service.store.ping(READY_TIMEOUT)
    except Exception as exc:
        return type(exc).__name__
    return None


async def _redis(lease: Lease | None) -> str | None:
    if not isinstance(lease, RedisLease):
        return "not connected"
    try:
        await lease.ping()
    except Exception as exc:
        return type(exc).__name__
    return None


async def _runner(url: str, token: str | None) -> str | None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(timeout=READY_TIMEOUT, headers=headers) as client:
            response = await client.get(f"{url.rstrip('/')}/healthz")
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return None if response.status_code == 200 else f"answered {response.status_code}"
