"""NDJSON lines of any length in bounded memory: the strings of an over-long line are cut.

:class:`LongLineSplitter` splits a byte stream into lines as
:class:`~sandstream.core.splitter.NDJSONSplitter` does (``\\n`` ends a line, one trailing
``\\r`` is dropped, any chunking gives the same lines). A line up to ``max_line_bytes``
comes out whole. A longer one is shortened while it streams in: each JSON string in it
(a key too) keeps its first ``keep_string_bytes`` bytes (cut on a character and escape
boundary, a surrogate pair's two escapes being one character) and ends with
:data:`CUT_MARKER` and the number of bytes cut; numbers, literals and nesting are kept, so
the fields after a huge string (a flag that follows a tool's output) still decode. Such
a line comes out as a :class:`ShortenedLine`.

Bad input: a line still over ``max_line_bytes`` once its strings are cut (huge structure)
comes out as ``None``; a shortened line that was not JSON stays not JSON (the caller's
decoder says so). Memory held between calls is at most about ``max_line_bytes`` bytes.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import SplitterClosedError

__all__ = ["CUT_MARKER", "LongLineSplitter", "ShortenedLine"]

CUT_MARKER: Final = "… [truncated: "
"""How a cut string ends: ``… [truncated: 123456 more bytes]``."""

_SPECIAL: Final = re.compile(rb'["\\]')


def _high_surrogate(escape: bytes | bytearray) -> bool:
    """Whether ``escape`` starts with ``\\uXXXX`` naming a high (leading) surrogate."""
    try:
        return 0xD800 <= int(escape[2:6], 16) <= 0xDBFF
    except ValueError:
        return False


class ShortenedLine(bytes):
    """A line whose strings were cut; ``cut`` is how many bytes were dropped."""

    cut: int


class _Shortener:
    """Copy one JSON text, cutting each string after ``keep`` bytes (streaming)."""

    __slots__ = (
        "_cut",
        "_escape",
        "_in_string",
        "_keep",
        "_kept",
        "_limit",
        "cut_total",
        "out",
        "overflow",
    )

    def __init__(self, keep: int, limit: int) -> None:
        self._keep = keep
        self._limit = limit
        self.out = bytearray()
        self.overflow = False
        self._in_string = False
        self._escape = bytearray()  # an escape sequence still arriving
        self._kept = 0  # bytes of the current string copied
        self._cut = 0  # bytes of the current string dropped
        self.cut_total = 0

    @property
    def held(self) -> int:
        """Bytes held: the output so far and an escape sequence still arriving."""
        return len(self.out) + len(self._escape)

    def feed(self, data: bytes | bytearray) -> None:
        i, n = 0, len(data)
        while i < n and not self.overflow:
            if not self._in_string:
                j = data.find(b'"', i)
                end = n if j < 0 else j + 1
                self._copy(data[i:end])
                if j >= 0:
                    self._in_string, self._kept, self._cut = True, 0, 0
                i = end
            elif self._escape:
                if self._lone_high_surrogate(data[i]):
                    self._keep_escape(self._escape[:6])
                    del self._escape[:6]  # what is left: nothing, or the next backslash
                    if not self._escape:
                        continue  # the byte is the string's own: read it as such
                self._escape.append(data[i])
                i += 1
                self._escape_step()
            else:
                match = _SPECIAL.search(data, i)
                k = n if match is None else match.start()
                self._string_bytes(data[i:k])
                i = k
                if k == n:
                    break
                if data[k] == 0x5C:  # backslash
                    self._escape.append(0x5C)
                    i += 1
                else:  # the closing quote
                    if self._cut:
                        self._copy(f"{CUT_MARKER}{self._cut} more bytes]".encode())
                        self.cut_total += self._cut
                    self._copy(b'"')
                    self._in_string = False
                    i += 1

    def _escape_step(self) -> None:
        escape = self._escape
        if len(escape) < 2 or (escape[1] == 0x75 and len(escape) < 6):  # \uXXXX
            return
        if len(escape) < 12 and _high_surrogate(escape):
            return  # its low half may follow: the pair is kept or cut as one
        self._keep_escape(escape)
        escape.clear()

    def _lone_high_surrogate(self, byte: int) -> bool:
        """Whether ``byte`` shows that the high surrogate escape held has no low half."""
        escape = self._escape
        if len(escape) < 6 or not _high_surrogate(escape):
            return False
        return (len(escape) == 6 and byte != 0x5C) or (len(escape) == 7 and byte != 0x75)

    def _keep_escape(self, escape: bytes | bytearray) -> None:
        if self._cut == 0 and self._kept + len(escape) <= self._keep:
            self._copy(escape)
            self._kept += len(escape)
        else:
            self._cut += len(escape)

    def _string_bytes(self, chunk: bytes | bytearray) -> None:
        if not chunk:
            return
        room = 0 if self._cut else self._keep - self._kept
        if room >= len(chunk):
            self._copy(chunk)
            self._kept += len(chunk)
            return
        if room > 0:
            self._copy(chunk[:room])
            self._kept += room
        if self._cut == 0 and (chunk[room] & 0xC0) == 0x80:  # the cut splits a character
            self._drop_split_character()
        self._cut += len(chunk) - room

    def _drop_split_character(self) -> None:
        """Drop the start of the character the cut splits, its lead byte and the (at most
        three) continuation bytes after it, however many chunks ago they were copied:
        where a string is cut does not depend on the chunking, and stays UTF-8."""
        out, size = self.out, 0
        limit = min(self._kept, 4, len(out))
        while size < limit and (out[-1 - size] & 0xC0) == 0x80:
            size += 1
        if size < limit and out[-1 - size] >= 0xC0:
            size += 1
            del out[-size:]
            self._kept -= size
            self._cut += size

    def _copy(self, data: bytes | bytearray) -> None:
        if len(self.out) + len(data) > self._limit:
            self.overflow = True
            self.out.clear()
        else:
            self.out += data


class LongLineSplitter:
    """Split a byte stream into lines; shorten over-long ones (see the module doc).

    Blank lines come out as ``b""`` so that list positions are line numbers.
    """

    __slots__ = ("_closed", "_cr", "_keep", "_max", "_pending", "_shortener")

    def __init__(self, max_line_bytes: int, keep_string_bytes: int) -> None:
        if not 0 < keep_string_bytes < max_line_bytes:
            raise ValueError("need 0 < keep_string_bytes < max_line_bytes")
        self._max = max_line_bytes
        self._keep = keep_string_bytes
        self._pending = bytearray()
        self._shortener: _Shortener | None = None
        self._cr = False
        """A CR held back from the shortener (see :meth:`_shorten`)."""
        self._closed = False

    @property
    def max_line_bytes(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete line: at most ``max_line_bytes + 1``, plus an
        escape sequence still arriving (up to 11: a surrogate pair's)."""
        shortener = self._shortener
        if shortener is None:
            return len(self._pending)
        return shortener.held

    def feed(self, data: bytes) -> list[bytes | None]:
        """Return the lines completed by ``data``, without their terminators."""
        if self._closed:
            raise SplitterClosedError("feed() after close()")
        lines: list[bytes | None] = []
        start = 0
        while (newline := data.find(b"\n", start)) >= 0:
            if self._shortener is None and not self._pending:
                lines.append(self._whole(data[start:newline]))
            else:
                self._hold(data[start:newline])
                lines.append(self._end_line())
            start = newline + 1
        self._hold(data[start:])
        return lines

    def close(self) -> list[bytes | None]:
        """End the stream: return the final unterminated line, if any. Idempotent."""
        if self._closed:
            return []
        self._closed = True
        if self._shortener is None and not self._pending:
            return []
        return [self._end_line()]

    def _hold(self, data: bytes) -> None:
        if self._shortener is not None:
            self._shorten(self._shortener, data)
            return
        self._pending += data
        if len(self._pending) > self._max + 1:  # the one extra byte: a CR to drop
            self._shortener = _Shortener(self._keep, self._max + 1)
            pending, self._pending = bytes(self._pending), bytearray()
            self._shorten(self._shortener, pending)

    def _shorten(self, shortener: _Shortener, data: bytes) -> None:
        """Feed the shortener all but a final CR, which waits for the next byte: a CR
        before the line's end is dropped, not shortened (it may end an escape)."""
        if not data:
            return
        if self._cr:
            shortener.feed(b"\r")
        self._cr = data.endswith(b"\r")
        shortener.feed(data[:-1] if self._cr else data)

    def _end_line(self) -> bytes | None:
        shortener, self._shortener = self._shortener, None
        self._cr = False
        if shortener is None:
            line = bytes(self._pending)
            self._pending.clear()
            return self._whole(line)
        return self._shortened(shortener)

    def _whole(self, line: bytes) -> bytes | None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) <= self._max:
            return line
        shortener = _Shortener(self._keep, self._max + 1)
        shortener.feed(line)
        return self._shortened(shortener)

    def _shortened(self, shortener: _Shortener) -> bytes | None:
        out = shortener.out
        if shortener.overflow or len(out) > self._max:
            return None
        line = ShortenedLine(out)
        line.cut = shortener.cut_total
        return line
