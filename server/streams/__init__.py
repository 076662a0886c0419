"""The Durable Streams role: ``/v1/stream/{path}``, durable byte streams over HTTP.

:class:`StreamStore` (:mod:`.store`: every stream's state, append, read, wait, fork,
delete, expiry) keeps each stream's bytes once, in an append-only log of segment files
(:mod:`.segments`, records framed by :mod:`.records`) written by one group-committing
task (:mod:`.committer`), with a small SQLite index (:mod:`.index`); the protocol's
pieces are sans-IO (:mod:`.offsets`, :mod:`.headers`, :mod:`.producers`,
:mod:`.jsonmode`, :mod:`.sse`, :mod:`.cursors`); :mod:`.routes` serves them, with
:mod:`.answers` (the append), :mod:`.raw_append` (plain appends, below
Quart) and :mod:`.sse_body` (the ``live=sse`` readers, whose caught-up ones wait in
their stream's live set, :mod:`.live`, and are written each append by the HTTP
fan-out). :mod:`.follow` is how every caught-up reader of a stream waits, the
sessions' readers too.
"""

from .api_description import STREAMS_OPERATIONS
from .committer import SyncPolicy
from .errors import (
    InvalidStreamRequestError,
    ProducerSequenceGapError,
    StaleProducerEpochError,
    StreamClosedError,
    StreamConflictError,
    StreamError,
    StreamFullError,
    StreamGoneError,
    StreamNotFoundError,
    StreamStoreFailedError,
    TooManyStreamsError,
)
from .follow import Follower, wait_changed, wait_live
from .live import LiveAppend, LiveReader, LiveSubscriber
from .records import Record
from .routes import STREAM_PREFIX, Streams, get_streams, install_streams
from .settings import StreamSettings
from .store import Appended, Chunk, StreamStore
from .stream import Stream, StreamConfig

__all__ = [
    "STREAMS_OPERATIONS",
    "STREAM_PREFIX",
    "Appended",
    "Chunk",
    "Follower",
    "InvalidStreamRequestError",
    "LiveAppend",
    "LiveReader",
    "LiveSubscriber",
    "ProducerSequenceGapError",
    "Record",
    "StaleProducerEpochError",
    "Stream",
    "StreamClosedError",
    "StreamConfig",
    "StreamConflictError",
    "StreamError",
    "StreamFullError",
    "StreamGoneError",
    "StreamNotFoundError",
    "StreamSettings",
    "StreamStore",
    "StreamStoreFailedError",
    "Streams",
    "SyncPolicy",
    "TooManyStreamsError",
    "get_streams",
    "install_streams",
    "wait_changed",
    "wait_live",
]
