"""The public URL: the base address sandboxes call back (``{public_url}/api/sandbox/…``).

:func:`normalize_public_url` checks a configured one (an absolute ``http(s)`` URL with a
host, no credentials, query or fragment; a path prefix is kept, trailing ``/`` dropped)
and raises :class:`~sandstream.server.chat.model.PublicUrlError` naming ``--public-url`` otherwise.
:func:`replicas_configured` says when several replicas share the chat state, so each
must be given a public URL that outlives it (a load balancer in front of them all).
:func:`probe_public_url` checks, once the server listens, that the URL reaches a
sandstream chat backend (``GET {public_url}/api/sandbox/healthz``); it only logs, since
the other replicas behind a load balancer may still be starting. Cancellation of the
probe propagates.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING, Final

import httpx

from sandstream.server.chat.model import PublicUrlError

if TYPE_CHECKING:
    from .settings import ChatSettings

__all__ = [
    "CALLBACKS_HEALTH_PATH",
    "CALLBACKS_SERVICE",
    "normalize_public_url",
    "probe_public_url",
    "public_url_problem",
    "replicas_configured",
]

log = logging.getLogger(__name__)

CALLBACKS_HEALTH_PATH: Final = "/api/sandbox/healthz"
CALLBACKS_SERVICE: Final = "sandstream-chat"
"""The ``service`` field of the callbacks' health answer, which the probe expects."""


def normalize_public_url(url: str) -> str:
    """``url`` without trailing slashes, if it can be a callback base; else raises
    :class:`PublicUrlError`."""
    text = url.strip().rstrip("/")
    if not text.isprintable() or any(char.isspace() for char in text):
        raise PublicUrlError(f"--public-url must not hold spaces or control characters: {url!r}")
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError as exc:
        raise PublicUrlError(f"--public-url is not a URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PublicUrlError(
            f"--public-url must be an absolute http:// or https:// URL with a host: {url!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise PublicUrlError("--public-url must not carry credentials (user:password@)")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise PublicUrlError(f"--public-url must not have a query or a fragment: {url!r}")
    return text


def replicas_configured(settings: ChatSettings) -> bool:
    """Whether several replicas may share this server's chat state (``--redis-url``,
    or a PostgreSQL ``--database-url``)."""
    return settings.redis_url is not None or settings.database_url is not None


async def public_url_problem(public_url: str, *, timeout: float = 5.0) -> str | None:
    """Why ``GET {public_url}/api/sandbox/healthz`` does not show a sandstream chat
    backend, or ``None`` when it does."""
    url = public_url + CALLBACKS_HEALTH_PATH
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            response = await client.get(url)
    except httpx.HTTPError as exc:
        return f"GET {url} failed: {exc!r}"
    try:
        service = response.json().get("service")
    except (ValueError, AttributeError):
        service = None
    if response.status_code != 200 or service != CALLBACKS_SERVICE:
        return f"GET {url} answered {response.status_code}, not a sandstream chat backend"
    return None


async def probe_public_url(public_url: str) -> None:
    """Log whether the public URL reaches a sandstream chat backend (a warning if not)."""
    problem = await public_url_problem(public_url)
    if problem is None:
        log.info("the public URL %s reaches a sandstream chat backend", public_url)
    else:
        log.warning(
            "the public URL %s does not reach a sandstream chat backend, so sandboxes "
            "cannot call back (fine while the replicas behind it start): %s",
            public_url,
            problem,
        )
