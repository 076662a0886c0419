"""The model gateway's exceptions, under :class:`GatewayError`."""

from __future__ import annotations

from sandstream.server.errors import ServerError

__all__ = ["GatewayError", "GatewayListenError"]


class GatewayError(ServerError):
    """Base class of the model gateway's exceptions."""


class GatewayListenError(GatewayError, OSError):
    """A turn's gateway listener could not be opened on the loopback interface."""
