"""Serve a Quart-Trio app on a real loopback port inside a trio nursery, and talk to it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import hypercorn.config
import hypercorn.trio
import trio

__all__ = ["http1_client", "serve_app"]


async def serve_app(
    nursery: trio.Nursery, app: Any, *, port: int = 0, tls: tuple[Path, Path] | None = None
) -> str:
    """Start ``app`` with Hypercorn on ``127.0.0.1:port`` (0: a free one); return its
    base URL (no slash).

    ``tls`` (a certificate file and its key file) serves HTTPS, HTTP/2 or HTTP/1.1 as
    the client's ALPN asks. The server lives as long as ``nursery``; cancelling the
    nursery stops it.
    """
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    if tls is not None:
        config.certfile, config.keyfile = map(str, tls)
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.1
    binds: list[str] = await nursery.start(hypercorn.trio.serve, app, config)
    return binds[0].rstrip("/")


def http1_client(
    base_url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    transport: httpx.AsyncHTTPTransport | None = None,
) -> httpx.AsyncClient:
    """An httpx client speaking HTTP/1.1 only, as the runner contract requires.

    A ``transport`` given replaces httpx's own; it must speak HTTP/1.1 only too.
    """
    return httpx.AsyncClient(
        base_url=base_url,
        headers=dict(headers or {}),
        timeout=timeout,
        http1=True,
        http2=False,
        transport=transport,
    )
