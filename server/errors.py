"""The root of the server's exceptions: every role's errors (``http``, ``runner``,
``sessions``, ``chat``) derive from :class:`ServerError`."""

from __future__ import annotations

from sandstream.core.errors import SandstreamError

__all__ = ["ServerError"]


class ServerError(SandstreamError):
    """Base class of every exception the server raises on purpose."""
