"""The HTTP plumbing's exceptions, under :class:`HTTPLayerError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandstream.server.errors import ServerError

if TYPE_CHECKING:
    from quart import Response

__all__ = [
    "BadRequestError",
    "HTTPLayerError",
    "MissingTokenError",
]


class HTTPLayerError(ServerError):
    """Base class of the HTTP plumbing's exceptions."""


class BadRequestError(HTTPLayerError):
    """A request that cannot be served as sent; ``response`` is its problem answer."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class MissingTokenError(HTTPLayerError, RuntimeError):
    """The runner was asked to start without a token and without ``--insecure-no-token``."""
