"""Serve a Quart-Trio app on a real loopback port inside a trio nursery."""

from __future__ import annotations

from typing import Any

import hypercorn.config
import hypercorn.trio
import trio

__all__ = ["serve_app"]


async def serve_app(nursery: trio.Nursery, app: Any) -> str:
    """Start ``app`` with Hypercorn on ``127.0.0.1:0``; return its base URL (no slash).

    The server lives as long as ``nursery``; cancelling the nursery stops it.
    """
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.1
    binds: list[str] = await nursery.start(hypercorn.trio.serve, app, config)
    return binds[0].rstrip("/")
