"""The Durable Streams answers that do not need Quart's request: appends, common headers.

:func:`append` runs one append (or close) from its path, headers and body;
:func:`with_common_headers` adds what every answer says (no MIME sniffing, CORS). They
serve the blueprint (:mod:`.routes`) and the appends answered below Quart
(:mod:`.raw_append`) alike. Bad input raises the :mod:`.errors`, each the protocol's
answer to it (:func:`~sandstream.server.http.problems.error_problem` renders them);
nothing here is cancelled but the store's own waits.
"""

from __future__ import annotations

from typing import Final

from quart import Response
from werkzeug.datastructures import Headers

from .errors import InvalidStreamRequestError
from .headers import closed_flag, producer_stamp, stream_seq
from .offsets import format_offset
from .records import ProducerStamp
from .store import Appended, StreamStore

__all__ = ["COMMON_HEADERS", "append", "with_common_headers"]

COMMON_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "cross-origin",
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, "
        "Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, "
        "Producer-Received-Seq, ETag, Location, Content-Type"
    ),
}
"""On every answer: no MIME sniffing, and readable by a page of any origin (that still
needs the token: no cookie ever authenticates here)."""


def with_common_headers(response: Response) -> Response:
    """``response`` with :data:`COMMON_HEADERS` (and no ``Content-Type`` on a 204 or
    304)."""
    for name, value in COMMON_HEADERS.items():
        response.headers[name] = value
    if response.status_code in (204, 304):
        del response.headers["Content-Type"]
    return response


async def append(store: StreamStore, path: str, headers: Headers, body: bytes) -> Response:
    """Append ``body`` to the stream at ``path`` (or close it: an empty body with
    ``Stream-Closed: true``), as the request's ``headers`` say."""
    stream = store.get(path)
    close = closed_flag(headers.get("Stream-Closed"))
    producer = producer_stamp(
        headers.get("Producer-Id"), headers.get("Producer-Epoch"), headers.get("Producer-Seq")
    )
    seq = stream_seq(headers.get("Stream-Seq"))
    if not body:
        if not close:
            raise InvalidStreamRequestError("an append needs a body (or Stream-Closed: true)")
        outcome = await store.close(stream, producer)
    else:
        content_type = headers.get("Content-Type")
        if not content_type:
            raise InvalidStreamRequestError("an append needs a Content-Type")
        outcome = await store.append(
            stream,
            body,
            content_type=content_type,
            producer=producer,
            stream_seq=seq,
            close=close,
        )
    return _appended(outcome, producer, data=bool(body))


def _appended(outcome: Appended, producer: ProducerStamp | None, *, data: bool) -> Response:
    """200 for new data from a producer; 204 otherwise (plain appends, closes, retries)."""
    fresh = data and producer is not None and not outcome.duplicate
    response = Response(b"", status=200 if fresh else 204)
    response.headers["Stream-Next-Offset"] = format_offset(outcome.tail)
    if outcome.closed:
        response.headers["Stream-Closed"] = "true"
    if producer is not None:
        response.headers["Producer-Epoch"] = str(producer.epoch)
        response.headers["Producer-Seq"] = str(
            producer.seq if outcome.producer_seq is None else outcome.producer_seq
        )
    return response
