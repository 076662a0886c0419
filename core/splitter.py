"""Incremental NDJSON line splitting with a bound on line size.

Bytes go in with any chunk boundaries; the same lines come out whatever the chunking.
``\\n`` ends a line, one trailing ``\\r`` is dropped, and at :meth:`NDJSONSplitter.close`
bytes after the last ``\\n`` are a final line (docs/protocol.md, "Rules"). Bad input: a
line over ``max_line_bytes`` is discarded up to its newline and returned as ``None`` in
its place; memory held between calls is at most ``max_line_bytes + 1`` bytes.
"""

from __future__ import annotations

from typing import Final, cast

from .errors import SplitterClosedError

__all__ = ["DEFAULT_MAX_LINE_BYTES", "NDJSONSplitter"]

DEFAULT_MAX_LINE_BYTES: Final = 1 << 20


class NDJSONSplitter:
    """Split a byte stream into lines; ``None`` stands for a line over the bound.

    Blank lines are returned as ``b""`` so that list positions are line numbers.
    """

    __slots__ = ("_closed", "_discarding", "_max", "_pending")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
        self._max = max_line_bytes
        self._pending = bytearray()
        self._discarding = False
        self._closed = False

    @property
    def max_line_bytes(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete line (never more than ``max_line_bytes + 1``)."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[bytes | None]:
        """Return the lines completed by ``data``, without their terminators."""
        if self._closed:
            raise SplitterClosedError("feed() after close()")
        first_newline = data.find(b"\n")
        if first_newline < 0:
            self._hold(data)
            return []
        parts = data.split(b"\n")
        tail = parts.pop()
        lines = cast(list[bytes | None], parts)  # entries become None when over the bound
        if 13 in data:  # int membership is a memchr, far cheaper than b"\r" in data
            lines = [_strip_cr(line) for line in lines]
        if self._pending or self._discarding:
            # The first line began in an earlier chunk: rebuilt from its raw bytes, so
            # that its one CR is dropped once and its length counts all of it.
            if self._discarding:
                lines[0] = None
            else:
                self._pending += data[:first_newline]
                lines[0] = _strip_cr(bytes(self._pending))
            self._pending.clear()
            self._discarding = False
        limit = self._max
        if max(map(len, filter(None, lines)), default=0) > limit:  # C speed; rarely true
            for index, line in enumerate(lines):
                if line is not None and len(line) > limit:
                    lines[index] = None
        self._hold(tail)
        return lines

    def close(self) -> list[bytes | None]:
        """End the stream: return the final unterminated line, if any. Idempotent."""
        if self._closed:
            return []
        self._closed = True
        if self._discarding:
            self._discarding = False
            return [None]
        if not self._pending:
            return []
        line = _strip_cr(bytes(self._pending))
        self._pending.clear()
        assert line is not None
        return [None if len(line) > self._max else line]

    def _hold(self, data: bytes) -> None:
        if self._discarding:
            return
        self._pending += data
        # One extra byte: a trailing "\r" may still turn out to be part of "\r\n".
        if len(self._pending) > self._max + 1:
            self._pending.clear()
            self._discarding = True


def _strip_cr(line: bytes | None) -> bytes | None:
    if line is not None and line.endswith(b"\r"):
        return line[:-1]
    return line
