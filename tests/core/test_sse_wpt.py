"""The parsing vectors of the web-platform-tests ``eventsource/format-*`` tests.

Each WPT test opens an ``EventSource`` on a small server script and asserts on the
events it gets, across reconnections where the server closes the stream. Here each
test becomes a :class:`Vector`: the script's response body as a function of the
``Last-Event-ID`` the client sends, how many connections the browser makes before
the test is done, and the ``(type, data, lastEventId)`` of every event the WPT test
sees. The driver plays the browser with one :class:`SSEParser`, calling
:meth:`~SSEParser.reconnect` between connections. Every vector must also hold
under any chunking of each connection's body.

Sources (web-platform-tests/wpt, directory ``eventsource/``; each vector names its
test file; read in the copy vendored by nodejs/node under
``test/fixtures/wpt/eventsource/`` and, for the server scripts, by servo/servo under
``tests/wpt/tests/eventsource/resources/``):

- ``resources/message.py``: body = ``message`` + (``"\\n\\n"`` unless ``newline=none``)
  + ``"\\n"``, whatever ``Last-Event-ID``.
- ``resources/last-event-id.py``: with a ``Last-Event-ID``, ``data: <it>\\n\\n``;
  without, ``id: <idvalue, default "…">\\nretry: 200\\ndata: hello\\n\\n``.
- ``resources/last-event-id2.py``: three fixed bodies (``type=1, 2, 3``).

Not ported, because they test HTTP, not the byte stream a parser sees:
``format-mime-bogus``, ``format-mime-valid-bogus`` and
``format-mime-trailing-semicolon`` (the Content-Type check belongs to the client's
HTTP layer). ``format-utf-8`` is ported: its ``charset=windows-1252`` must not
matter, so the parser decodes the bytes as UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core.sse_parser import SSEParser
from tests.fuzz.invariants import pieces

Seen = tuple[str, str, str]
"""``(event type, data, lastEventId)`` of one dispatched event."""

Server = Callable[[str], bytes]
"""The response body for a connection, given the ``Last-Event-ID`` it sent ("" none)."""


def message_py(message: bytes, *, newline: bool = True) -> Server:
    """``resources/message.py?message=…[&newline=none]``."""
    body = message + (b"\n\n" if newline else b"") + b"\n"
    return lambda _last_event_id: body


def last_event_id_py(idvalue: str = "\u2026") -> Server:
    """``resources/last-event-id.py[?idvalue=…]``."""

    def respond(last_event_id: str) -> bytes:
        if last_event_id:
            return f"data: {last_event_id}\n\n".encode()
        return f"id: {idvalue}\nretry: 200\ndata: hello\n\n".encode()

    return respond


LAST_EVENT_ID2_PY = {
    1: b"id: 1\ndata: 1\n\ndata: 2\n\nid: 2\ndata:3\n\ndata:4\n\n",
    2: b"id: 1\ndata: 1\n\nid:\ndata:2\n\ndata:3\n\n",
    3: b"id: 1\ndata: 1\n\nid\ndata:2\n\ndata:3\n\n",
}
"""``resources/last-event-id2.py?type=N``."""


def fixed(body: bytes) -> Server:
    return lambda _last_event_id: body


@dataclass(frozen=True)
class Vector:
    source: str
    """The WPT test file (under ``eventsource/``) this vector comes from."""
    server: Server
    events: tuple[Seen, ...]
    connections: int = 1
    retry: int | None = None
    """The reconnection time the test expects, where it checks one."""


def msg(data: str, last_event_id: str = "", event: str = "message") -> Seen:
    return (event, data, last_event_id)


LONG = "x" * 2048  # format-comments: (new Array(2*1024+1)).join("x")

VECTORS = [
    Vector(
        "format-bom.any.js",
        message_py(unquote_to_bytes("%EF%BB%BFdata%3A1%0A%0A%EF%BB%BFdata%3A2%0A%0Adata%3A3")),
        (msg("1"), msg("3")),
    ),
    Vector(
        "format-bom-2.any.js",
        message_py(unquote_to_bytes("%EF%BB%BF%EF%BB%BFdata%3A1%0A%0Adata%3A2%0A%0Adata%3A3")),
        (msg("2"), msg("3")),
    ),
    Vector(
        "format-comments.any.js",
        message_py(
            f"data:1\r:\0\n:\r\ndata:2\n:{LONG}\rdata:3\n:data:fail\r:{LONG}\ndata:4\n".encode(),
            newline=False,
        ),
        (msg("1\n2\n3\n4"),),
    ),
    Vector(
        "format-data-before-final-empty-line.any.js",
        message_py(b"retry:1000\ndata:test1\n\nid:test\ndata:test2", newline=False),
        # The unfinished second event (and its id) dies with each connection.
        (msg("test1"), msg("test1")),
        connections=2,
        retry=1000,
    ),
    Vector(
        "format-field-data.any.js",
        message_py(b"data:\n\ndata\ndata\n\ndata:test"),
        (msg(""), msg("\n"), msg("test")),
    ),
    Vector("format-field-event-empty.any.js", message_py(b"event: \ndata:data"), (msg("data"),)),
    Vector(
        "format-field-event.any.js",
        message_py(b"event:test\ndata:x\n\ndata:x"),
        (msg("x", event="test"), msg("x")),
    ),
    Vector(
        "format-field-id.any.js",
        last_event_id_py(),
        (msg("hello", "\u2026"), msg("\u2026", "\u2026")),
        connections=2,
    ),
    Vector(
        "format-field-id-2.any.js",
        last_event_id_py(),
        (msg("hello", "\u2026"), msg("\u2026", "\u2026"), msg("\u2026", "\u2026")),
        connections=3,
    ),
    *(
        Vector(
            f"format-field-id-null.window.js (idvalue={idvalue!r})",
            last_event_id_py(idvalue),
            (msg("hello"), msg("hello")),  # the id is ignored: no Last-Event-ID is sent
            connections=2,
        )
        for idvalue in ["\0\0", "x\0", "\0x", "x\0x", " \0"]
    ),
    Vector(
        "format-field-id-3.window.js (lastEventId persists)",
        fixed(LAST_EVENT_ID2_PY[1]),
        (msg("1", "1"), msg("2", "1"), msg("3", "2"), msg("4", "2")),
    ),
    Vector(
        "format-field-id-3.window.js (lastEventId resets)",
        fixed(LAST_EVENT_ID2_PY[2]),
        (msg("1", "1"), msg("2"), msg("3")),
    ),
    Vector(
        "format-field-id-3.window.js (lastEventId resets (id without colon))",
        fixed(LAST_EVENT_ID2_PY[3]),
        (msg("1", "1"), msg("2"), msg("3")),
    ),
    Vector(
        "format-field-parsing.any.js",
        message_py(
            b"data:\0\ndata:  2\rData:1\ndata\0:2\ndata:1\r\0data:4\nda-ta:3\rdata_5\n"
            b"data:3\rdata:\r\n data:32\ndata:4\n",
            newline=False,
        ),
        (msg("\0\n 2\n1\n3\n\n4"),),
    ),
    Vector(
        "format-field-retry-bogus.any.js",
        message_py(b"retry:3000\nretry:1000x\ndata:x"),
        (msg("x"), msg("x")),
        connections=2,
        retry=3000,
    ),
    Vector("format-field-retry-empty.any.js", message_py(b"retry\ndata:test"), (msg("test"),)),
    Vector(
        "format-field-retry.any.js",
        message_py(b"retry:03000\ndata:x"),  # "03000" is 3000, not octal
        (msg("x"), msg("x")),
        connections=2,
        retry=3000,
    ),
    Vector(
        "format-field-unknown.any.js",
        message_py(
            b"data:test\n data\ndata\nfoobar:xxx\njustsometext\n:thisisacommentyay\ndata:test"
        ),
        (msg("test\n\ntest"),),
    ),
    Vector(
        "format-leading-space.any.js",
        message_py(b"data:\ttest\rdata: \ndata:test"),
        (msg("\ttest\n\ntest"),),
    ),
    Vector(
        "format-newlines.any.js",
        message_py(b"data:test\r\ndata\ndata:test\r\n\r", newline=False),
        (msg("test\n\ntest"),),
    ),
    Vector("format-null-character.any.js", message_py(b"data:\0\n\n"), (msg("\0"),)),
    Vector(
        "format-utf-8.any.js",
        message_py(unquote_to_bytes("data%3Aok%E2%80%A6")),
        (msg("ok\u2026"),),
    ),
]


def browse(vector: Vector, cut: Callable[[bytes], list[bytes]]) -> tuple[list[Seen], int | None]:
    """Play the browser: connect, read the body in ``cut`` pieces, reconnect, repeat."""
    parser = SSEParser()
    seen: list[Seen] = []
    for connection in range(vector.connections):
        if connection:
            parser.reconnect()
        for piece in cut(vector.server(parser.last_event_id)):
            seen += [(e.event, e.data, e.id) for e in parser.feed(piece)]
        parser.close()  # the server closed the stream
    return seen, parser.retry


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.source)
def test_wpt_vector(vector: Vector) -> None:
    seen, retry = browse(vector, lambda body: [body])
    assert seen == list(vector.events)
    if vector.retry is not None:
        assert retry == vector.retry


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.source)
@given(data=st.data())
def test_wpt_vector_under_any_chunking(vector: Vector, data: st.DataObject) -> None:
    def cut(body: bytes) -> list[bytes]:
        cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(body)), max_size=12))
        return pieces(body, cuts)

    assert browse(vector, cut) == browse(vector, lambda body: [body])


def test_one_byte_at_a_time_gives_every_vector() -> None:
    for vector in VECTORS:
        seen, _ = browse(vector, lambda body: [body[i : i + 1] for i in range(len(body))])
        assert seen == list(vector.events), vector.source
