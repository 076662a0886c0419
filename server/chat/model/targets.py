"""Where a turn or run goes: the embedded runner or a remote one (:func:`resolve_target`).

The request's ``sandboxUrl``, else the workflow environment's ``SANDBOX_URL``, else the
server's ``SANDBOX_URL``, else the embedded runner. URLs other than the server's own
must be allow-listed, since the runner token is sent to them; a malformed or
unlisted URL raises :class:`TargetError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import TargetError

__all__ = ["Target", "normalize_url", "resolve_target"]


@dataclass(frozen=True, slots=True)
class Target:
    """Where a turn is dispatched. ``url`` is the runner's base URL (remote only)."""

    kind: Literal["embedded", "remote"]
    source: Literal["request", "workflow", "server", "embedded"]
    url: str | None = None


def normalize_url(url: str) -> str:
    """A runner base URL without trailing slashes. Raises :class:`TargetError`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise TargetError(f"a runner URL must be http:// or https://, got {url!r}")
    return url


def resolve_target(
    *,
    request_url: str | None,
    workflow_url: str | None,
    server_url: str | None,
    allowed: frozenset[str],
    embedded: bool,
) -> Target:
    """The runner for one turn: request, then workflow, then server, then embedded.

    ``allowed`` holds the normalized URLs a request or workflow may name (the
    server's own is always allowed). Raises :class:`TargetError` for a URL that is
    malformed or not allowed, and when there is no runner at all.
    """
    server = normalize_url(server_url) if server_url else None
    for source, raw in (("request", request_url), ("workflow", workflow_url)):
        if raw:
            url = normalize_url(raw)
            if url != server and url not in allowed:
                raise TargetError(
                    f"the runner {url} (from the {source}) is not allowed; "
                    "add it to SANDSTREAM_ALLOWED_SANDBOX_URLS"
                )
            return Target("remote", source, url)  # type: ignore[arg-type]
    if server is not None:
        return Target("remote", "server", server)
    if embedded:
        return Target("embedded", "embedded")
    raise TargetError("no runner: set SANDBOX_URL or run the embedded runner")
