"""How much of an upstream connection's bytes is one answer's body (RFC 9112 6.3):
a ``Content-Length``, chunks (``Transfer-Encoding: chunked``), or the connection's end.

Sans-IO, in the manner of h11: :meth:`BodyReader.feed` takes the bytes read after the
answer's head, in any pieces, and gives the body's payload in the same order (whatever
the pieces, the same payload); :attr:`BodyReader.done` once the body ended (its framing
said so), :attr:`BodyReader.leftover` the bytes read past it. A length-framed body's
bytes are handed on as they are, never copied. Bad input (a chunk size that is not hex,
a chunk not followed by its line end, a line past :data:`MAX_LINE_BYTES`) raises
:class:`~.errors.UpstreamFramingError`; nothing here blocks.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import UpstreamFramingError

__all__ = ["MAX_LINE_BYTES", "BodyReader", "ChunkedBody", "LengthBody", "UntilClose"]

MAX_LINE_BYTES: Final = 64 * 1024
"""The longest chunk-size line (with its extensions) or trailer line read."""
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
_LINE_END: Final = frozenset((b"\r\n", b"\n"))


class BodyReader:
    """The body of one answer, read from the bytes after its head."""

    __slots__ = ("done", "leftover")

    def __init__(self) -> None:
        self.done = False
        """Whether the body ended (its framing said so)."""
        self.leftover = b""
        """Bytes read past the body's end (the start of what comes next)."""

    def feed(self, data: bytes) -> list[bytes]:
        """The payload in ``data``, in order (none once :attr:`done`)."""
        raise NotImplementedError


class LengthBody(BodyReader):
    """A body of ``length`` bytes."""

    __slots__ = ("_left",)

    def __init__(self, length: int) -> None:
        super().__init__()
        self._left = length
        self.done = length == 0

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            self.leftover += data
            return []
        left = self._left
        if len(data) < left:
            self._left = left - len(data)
            return [data] if data else []
        self._left = 0
        self.done = True
        if len(data) == left:
            return [data]
        self.leftover = data[left:]
        return [data[:left]]


class UntilClose(BodyReader):
    """A body that ends with the connection (neither length nor chunks)."""

    __slots__ = ()

    def feed(self, data: bytes) -> list[bytes]:
        return [data] if data else []


class ChunkedBody(BodyReader):
    """A chunked body: the chunks' data, without their framing; trailers are read and
    dropped (the gateway forwards none)."""

    __slots__ = ("_left", "_line", "_state")

    def __init__(self) -> None:
        super().__init__()
        self._state = "size"  # "size", "data", "data-end", "trailer"
        self._left = 0
        self._line = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            self.leftover += data
            return []
        payload: list[bytes] = []
        at = 0
        end = len(data)
        while at < end and not self.done:
            if self._state == "data":
                take = min(self._left, end - at)
                payload.append(data if take == end and at == 0 else data[at : at + take])
                at += take
                self._left -= take
                if not self._left:
                    self._state = "data-end"
                continue
            newline = data.find(b"\n", at)
            stop = end if newline < 0 else newline + 1
            if len(self._line) + stop - at > MAX_LINE_BYTES:
                raise UpstreamFramingError("a chunked body's line is too long")
            self._line += data[at:stop]
            at = stop
            if newline >= 0:
                line = bytes(self._line)
                self._line.clear()
                self._read_line(line)
        if self.done:
            self.leftover = data[at:]
        return payload

    def _read_line(self, line: bytes) -> None:
        if self._state == "size":
            size = _CHUNK_SIZE.fullmatch(line)
            if size is None:
                raise UpstreamFramingError(f"a chunk size that is not one: {line[:40]!r}")
            self._left = int(size.group(1), 16)
            self._state = "data" if self._left else "trailer"
        elif self._state == "data-end":
            if line not in _LINE_END:
                raise UpstreamFramingError("a chunk's data ran past its size")
            self._state = "size"
        elif line in _LINE_END:  # the trailer's end
            self.done = True
