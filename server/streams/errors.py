"""The Durable Streams role's exceptions, under :class:`StreamError`.

Each names the protocol's answer to it (:mod:`.routes` turns them into responses):
400 :class:`InvalidStreamRequestError`, 404 :class:`StreamNotFoundError`, 409
:class:`StreamConflictError` (and :class:`StreamClosedError`,
:class:`ProducerSequenceGapError`), 410 :class:`StreamGoneError`, 403
:class:`StaleProducerEpochError`, 503 :class:`StreamStoreFailedError`.
"""

from __future__ import annotations

from sandstream.server.errors import ServerError

__all__ = [
    "InvalidStreamRequestError",
    "ProducerSequenceGapError",
    "StaleProducerEpochError",
    "StreamClosedError",
    "StreamConflictError",
    "StreamError",
    "StreamGoneError",
    "StreamNotFoundError",
    "StreamStoreFailedError",
]


class StreamError(ServerError):
    """Base class of the Durable Streams role's exceptions."""


class InvalidStreamRequestError(StreamError, ValueError):
    """A header, query parameter or body the protocol does not allow (400)."""


class StreamNotFoundError(StreamError, KeyError):
    """No stream at this path (never created, deleted, or expired) (404)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such stream"


class StreamGoneError(StreamError):
    """The stream was deleted while forks still read it, or the offset is below what
    retention keeps (410)."""


class StreamConflictError(StreamError):
    """The request contradicts the stream: another configuration, another content type,
    a ``Stream-Seq`` that does not increase (409)."""


class StreamClosedError(StreamConflictError):
    """The stream is closed: it takes no more data (409, ``Stream-Closed: true``).

    ``tail``: the stream's final offset (a position).
    """

    def __init__(self, tail: int) -> None:
        super().__init__("the stream is closed")
        self.tail = tail


class StaleProducerEpochError(StreamError):
    """A producer wrote with an epoch older than the stream knows: fenced (403)."""

    def __init__(self, current_epoch: int) -> None:
        super().__init__(f"stale producer epoch (current epoch {current_epoch})")
        self.current_epoch = current_epoch


class ProducerSequenceGapError(StreamConflictError):
    """A producer skipped sequence numbers (409 with the expected and received seq)."""

    def __init__(self, expected: int, received: int) -> None:
        super().__init__(f"producer sequence gap: expected {expected}, received {received}")
        self.expected = expected
        self.received = received


class StreamStoreFailedError(StreamError):
    """The store could not write to disk and stopped taking writes (503)."""
