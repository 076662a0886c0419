"""Coverage-guided fuzzing of the SSE parser (core/sse_parser.py) against a reference.

    python -m tests.fuzz.sse [CORPUS_DIR ...] [libFuzzer flags, e.g. -max_total_time=3600]

An input (:class:`~tests.fuzz.harness.Input`, three option bytes) is an event stream,
cut points, the line bound (byte 0: 1-64 characters), the data bound (byte 1: 1-256
characters) and byte 2: whether comments are kept (bit 0) and which cut points are
reconnections (bit ``1 + i % 7`` for the i-th cut). :func:`check` feeds the stream in
its pieces, calling :meth:`~sandstream.core.sse_parser.SSEParser.reconnect` at the
reconnections, and compares, per connection, the items, last event id and retry (or
the :class:`~sandstream.core.errors.SSEParseError`) with :func:`reference`: the WHATWG
"event stream interpretation" applied to each connection's bytes at once. After every
feed the parser holds at most its two bounds in characters (bounded memory).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

import atheris

with atheris.instrument_imports(include=["sandstream.core.sse_parser"]):
    from sandstream.core.errors import SSEParseError
    from sandstream.core.sse_parser import Comment, ServerSentEvent, SSEParser

from tests.fuzz.harness import Input, fuzz

__all__ = ["Options", "SSEMismatch", "check", "reference"]

_LINE_END = re.compile(r"\r\n|\r|\n")
Items = list[ServerSentEvent | Comment]
Connection = tuple[Items | None, str, int | None]
"""Items (``None``: the parse error), last event id, retry after one connection."""


class SSEMismatch(AssertionError):
    """The parser disagreed with the reference, or held more than its bounds."""


@dataclass(frozen=True)
class Options:
    max_line: int
    max_data: int
    comments: bool
    reconnect_mask: int

    @classmethod
    def read(cls, raw: bytes) -> Options:
        return cls(1 + raw[0] % 64, 1 + raw[1] % 256, bool(raw[2] & 1), raw[2] >> 1)

    def connections(self, stream: bytes, cuts: tuple[int, ...]) -> list[list[bytes]]:
        """The stream's pieces, grouped by connection."""
        groups: list[list[bytes]] = [[]]
        start = 0
        for index, cut in enumerate(cuts):
            groups[-1].append(stream[start:cut])
            start = cut
            if self.reconnect_mask >> (index % 7) & 1:
                groups.append([])
        groups[-1].append(stream[start:])
        return groups


def reference(connections: list[bytes], options: Options) -> list[Connection]:
    """What a browser makes of each connection's whole bytes (WHATWG HTML 9.2.6)."""
    last_id, retry = "", None
    results: list[Connection] = []
    for raw in connections:
        # Not final: an incomplete UTF-8 sequence at the end is no character yet.
        text = codecs.getincrementaldecoder("utf-8")("replace").decode(raw)
        text = text.removeprefix("\ufeff")
        *lines, tail = _LINE_END.split(text)
        items: Items = []
        refused = False
        data: list[str] | None = None
        data_chars, event, id_buffer = 0, "", last_id
        for line in [*lines, None]:
            if line is None:  # end of the connection: the unterminated line's bound
                refused = len(tail) > options.max_line
                break
            if len(line) > options.max_line:
                refused = True
                break
            if not line:
                last_id = id_buffer
                if data is not None:
                    items.append(
                        ServerSentEvent(
                            event=event or "message", data="\n".join(data), id=last_id, retry=retry
                        )
                    )
                data, data_chars, event = None, 0, ""
                continue
            if line.startswith(":"):
                if options.comments:
                    items.append(Comment(line[2:] if line.startswith(": ") else line[1:]))
                continue
            field, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            if field == "data":
                data_chars += len(value) + 1
                if data_chars > options.max_data:
                    refused = True
                    break
                data = [*(data or []), value]
            elif field == "event":
                event = value
            elif field == "id" and "\0" not in value:
                id_buffer = value
            elif (
                field == "retry"
                and value.isascii()
                and value.isdigit()
                and len(value.lstrip("0")) < 20
            ):
                retry = int(value)
        results.append((None if refused else items, last_id, retry))
    return results


def parse(connections: list[list[bytes]], options: Options) -> list[Connection]:
    """What the parser makes of each connection's pieces, checking its memory bound."""
    parser = SSEParser(
        include_comments=options.comments,
        max_line_chars=options.max_line,
        max_data_chars=options.max_data,
    )
    bound = options.max_line + options.max_data
    results: list[Connection] = []
    for index, group in enumerate(connections):
        if index:
            parser.reconnect()
        items: Items = []
        try:
            for piece in group:
                items += parser.feed(piece)
                if parser.buffered > bound:
                    raise SSEMismatch(f"holds {parser.buffered} characters, bound {bound}")
        except SSEParseError:
            results.append((None, parser.last_event_id, parser.retry))
            continue
        items += parser.close()
        results.append((items, parser.last_event_id, parser.retry))
    return results


def check(data: bytes) -> None:
    case = Input.decode(data, 3)
    options = Options.read(case.options)
    connections = options.connections(case.stream, case.cuts)
    got = parse(connections, options)
    want = reference([b"".join(group) for group in connections], options)
    if got != want:
        raise SSEMismatch(f"{got!r}\n  != {want!r}\n  {options!r} {case!r}")


def test_one_input(data: bytes) -> None:
    check(data)


SAMPLES = (
    b'\xef\xbb\xbfretry: 1000\nid: 7\nevent: step\ndata: {"a":1}\ndata:x\n\n: ping\n\n',
    b"data: one\r\n\r\nid\r\ndata\r\r:c\rdata: two\n\nevent:e\ndata:\xff\xfe\n\n",
    b"id: a\x00b\ndata: \xe2\x82\xacuro\n\nretry: 99999999999999999999\ndata: t\nunknown\n\n",
)


def seeds() -> Iterator[bytes]:
    for stream in SAMPLES:
        for mask in (0, 0x7F):
            cuts = tuple(range(3, len(stream), 11))
            yield Input(bytes([63, 255, mask << 1 | 1]), cuts, stream).encode()
            yield Input(bytes([7, 12, mask << 1]), cuts[:3], stream).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
