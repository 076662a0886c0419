"""The model gateway's exceptions, under :class:`GatewayError`."""

from __future__ import annotations

from sandstream.server.errors import ServerError

__all__ = [
    "GatewayError",
    "GatewayListenError",
    "UpstreamConnectError",
    "UpstreamCut",
    "UpstreamError",
    "UpstreamFramingError",
    "UpstreamTimeout",
]


class GatewayError(ServerError):
    """Base class of the model gateway's exceptions."""


class GatewayListenError(GatewayError, OSError):
    """A turn's gateway listener could not be opened on the loopback interface."""


class UpstreamError(GatewayError):
    """A call to the provider failed; the message says how (it goes in the failure's
    log line and in the client's 502)."""


class UpstreamConnectError(UpstreamError):
    """The provider could not be reached (no connection, TLS refused, a bad URL)."""


class UpstreamTimeout(UpstreamError):
    """The provider was silent past the timeout (connecting, reading or writing)."""


class UpstreamCut(UpstreamError):
    """The provider's connection failed or closed before its answer ended."""


class UpstreamFramingError(UpstreamCut):
    """The provider's answer broke HTTP/1.1 (its head, or a chunked body's framing)."""
