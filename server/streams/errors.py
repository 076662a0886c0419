"""The Durable Streams role's exceptions, under :class:`StreamError`.

Each but the base names the protocol's answer to it, a problem of type
:data:`PROBLEM_TYPE` and a name (``...stream-closed``) with the protocol's headers: 400
:class:`InvalidStreamRequestError`, 404 :class:`StreamNotFoundError`, 409
:class:`StreamConflictError` (and :class:`StreamClosedError`,
:class:`ProducerSequenceGapError`), 410 :class:`StreamGoneError`, 403
:class:`StaleProducerEpochError`, 413 :class:`StreamFullError`, 429
:class:`TooManyStreamsError`, 503 :class:`StreamStoreFailedError`.
"""

from __future__ import annotations

from typing import ClassVar, Final

from sandstream.server.errors import ProblemError, ServerError

__all__ = [
    "PROBLEM_TYPE",
    "InvalidStreamRequestError",
    "ProducerSequenceGapError",
    "StaleProducerEpochError",
    "StreamClosedError",
    "StreamConflictError",
    "StreamError",
    "StreamFullError",
    "StreamGoneError",
    "StreamNotFoundError",
    "StreamStoreFailedError",
    "TooManyStreamsError",
]

PROBLEM_TYPE: Final = "urn:sandstream:problem:stream-"
"""The streams' problem types: this and a name (``...stream-closed``)."""


class StreamError(ServerError):
    """Base class of the Durable Streams role's exceptions."""


class InvalidStreamRequestError(StreamError, ProblemError, ValueError):
    """A header, query parameter or body the protocol does not allow (400)."""

    status: ClassVar[int] = 400
    type: ClassVar[str] = PROBLEM_TYPE + "invalid-request"
    title: ClassVar[str] = "Invalid request"


class StreamNotFoundError(StreamError, ProblemError, KeyError):
    """No stream at this path (never created, deleted, or expired) (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = PROBLEM_TYPE + "not-found"
    title: ClassVar[str] = "Not found"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such stream"


class StreamGoneError(StreamError, ProblemError):
    """The stream was deleted while forks still read it, or the offset is below what
    retention keeps (410)."""

    status: ClassVar[int] = 410
    type: ClassVar[str] = PROBLEM_TYPE + "gone"
    title: ClassVar[str] = "Gone"


class StreamConflictError(StreamError, ProblemError):
    """The request contradicts the stream: another configuration, another content type,
    a ``Stream-Seq`` that does not increase (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = PROBLEM_TYPE + "conflict"
    title: ClassVar[str] = "Conflict"


class StreamClosedError(StreamConflictError):
    """The stream is closed: it takes no more data (409, ``Stream-Closed: true``).

    ``tail``: the stream's final offset (a position).
    """

    type: ClassVar[str] = PROBLEM_TYPE + "closed"
    title: ClassVar[str] = "Closed"

    def __init__(self, tail: int) -> None:
        super().__init__("the stream is closed")
        self.tail = tail

    def headers(self) -> dict[str, str]:
        from .offsets import format_offset  # offsets raises these errors: imported late

        return {"Stream-Closed": "true", "Stream-Next-Offset": format_offset(self.tail)}


class StaleProducerEpochError(StreamError, ProblemError):
    """A producer wrote with an epoch older than the stream knows: fenced (403)."""

    status: ClassVar[int] = 403
    type: ClassVar[str] = PROBLEM_TYPE + "stale-producer-epoch"
    title: ClassVar[str] = "Stale producer epoch"

    def __init__(self, current_epoch: int) -> None:
        super().__init__(f"stale producer epoch (current epoch {current_epoch})")
        self.current_epoch = current_epoch

    def headers(self) -> dict[str, str]:
        return {"Producer-Epoch": str(self.current_epoch)}


class ProducerSequenceGapError(StreamConflictError):
    """A producer skipped sequence numbers (409 with the expected and received seq)."""

    type: ClassVar[str] = PROBLEM_TYPE + "producer-sequence-gap"
    title: ClassVar[str] = "Producer sequence gap"

    def __init__(self, expected: int, received: int) -> None:
        super().__init__(f"producer sequence gap: expected {expected}, received {received}")
        self.expected = expected
        self.received = received

    def headers(self) -> dict[str, str]:
        return {
            "Producer-Expected-Seq": str(self.expected),
            "Producer-Received-Seq": str(self.received),
        }


class StreamStoreFailedError(StreamError, ProblemError):
    """The disk refused what a request needed (a write, a read, a new stream's files),
    or the store is closed (503): nothing of it was stored; the next request tries again."""

    status: ClassVar[int] = 503
    type: ClassVar[str] = PROBLEM_TYPE + "store-failed"
    title: ClassVar[str] = "Store failed"


class StreamFullError(StreamError, ProblemError):
    """An append would take the stream past the bytes one stream may hold (413)."""

    status: ClassVar[int] = 413
    type: ClassVar[str] = PROBLEM_TYPE + "full"
    title: ClassVar[str] = "Stream full"


class TooManyStreamsError(StreamError, ProblemError):
    """A new stream past the most the HTTP API may hold at once (429): delete one first."""

    status: ClassVar[int] = 429
    type: ClassVar[str] = PROBLEM_TYPE + "quota"
    title: ClassVar[str] = "Too many streams"
