"""Sans-IO reading of a ``multipart/form-data`` body, however it is cut into chunks.

:class:`PartReader` wraps werkzeug's ``MultipartDecoder`` and feeds it only as many bytes
as its buffer has room for (:data:`MAX_BUFFERED`), handling the decoder's events between
two slices; a chunk of any size is taken in as many slices as it needs. Memory stays
bounded by the buffer: file data leaves it as it is decoded, and only a preamble or a
part's headers bigger than the buffer can fill it, which is refused
(:class:`MultipartTooLargeError`). Bytes after the closing boundary (the epilogue) are
dropped unread.

The decoder must never see input that stops inside a delimiter: given ``\r\n--B-`` (the
start of a closing delimiter) it passes the ``\r`` on as data and then takes the ``\n`` as
the delimiter's line break, adding a byte to the part. So a chunk's last few bytes that
could be the start of a delimiter are held back until the next chunk (or the end) tells.
With that, the same body gives the same parts for every chunking. A part whose content
starts with the boundary (a delimiter right after its headers, which RFC 2046 forbids)
is refused: the decoder reads it one way or the other depending on the chunking.

Bad input raises :class:`MultipartError` (a malformed or truncated body). Nothing here
blocks or holds resources: a caller that stops early just drops the reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, TypeAlias

from werkzeug.sansio.multipart import (
    Data,
    Epilogue,
    Field,
    File,
    MultipartDecoder,
    NeedData,
    State,
)

from sandstream.server.chat.model import UploadError, UploadTooLargeError

__all__ = [
    "MAX_BOUNDARY",
    "MAX_BUFFERED",
    "MultipartError",
    "MultipartTooLargeError",
    "PartEvent",
    "PartReader",
]

MAX_BUFFERED: Final = 1024 * 1024
"""Bytes the decoder holds at most: the bound on a preamble and on one part's headers."""
MAX_BOUNDARY: Final = 70
"""The longest boundary RFC 2046 allows."""
_PADDING: Final = b" \t\x0b\x0c"
"""What the decoder takes as padding between a boundary and its line break."""

PartEvent: TypeAlias = File | Field | Data
"""What :meth:`PartReader.feed` yields: a file part starts (``File``), a non-file part
starts (``Field``), or the data of the part last started (``Data``, the last one with
``more_data`` false)."""


class MultipartError(UploadError):
    """The body is not well-formed ``multipart/form-data``."""


class MultipartTooLargeError(UploadTooLargeError):
    """A preamble or a part's headers do not fit in :data:`MAX_BUFFERED` bytes."""


class PartReader:
    """Decode one ``multipart/form-data`` body with ``boundary`` (as sent in the
    ``Content-Type``, without the leading ``--``).

    Call :meth:`feed` with each chunk and :meth:`close` at the end of the body; both
    yield :data:`PartEvent` s in body order. ``max_buffered`` (default
    :data:`MAX_BUFFERED`) bounds what is held between two events. Raises
    :class:`MultipartError` for a boundary longer than :data:`MAX_BOUNDARY` bytes.
    """

    def __init__(self, boundary: bytes, *, max_buffered: int = MAX_BUFFERED) -> None:
        if not 0 < len(boundary) <= MAX_BOUNDARY:
            raise MultipartError(f"the boundary must be 1 to {MAX_BOUNDARY} bytes long")
        if max_buffered < 4 * MAX_BOUNDARY:
            raise ValueError(f"max_buffered must be >= {4 * MAX_BOUNDARY}, got {max_buffered}")
        self._max = max_buffered
        self._decoder = MultipartDecoder(boundary, max_buffered, max_parts=None)
        self._dash_boundary = b"--" + boundary
        self._window = len(self._dash_boundary) + 16
        self._held = b""
        self._closed = False

    @property
    def finished(self) -> bool:
        """True once the closing boundary was read (later bytes are ignored)."""
        return self._decoder.state in (State.EPILOGUE, State.COMPLETE)

    def feed(self, chunk: bytes) -> Iterator[PartEvent]:
        """The events ``chunk`` completes. Consume the iterator whole before the next
        call: slices are fed lazily, one after the events of the previous one.

        Raises :class:`MultipartTooLargeError` or :class:`MultipartError`.
        """
        if self._closed:
            raise RuntimeError("feed() after close()")
        data = self._held + chunk if self._held else chunk
        self._held = b""
        yield from self._feed(memoryview(data), final=False)

    def close(self) -> Iterator[PartEvent]:
        """The events left at the end of the body. Raises :class:`MultipartError` if
        it ended before its closing boundary."""
        self._closed = True
        held, self._held = self._held, b""
        yield from self._feed(memoryview(held), final=True)
        if self.finished:
            return
        self._decoder.receive_data(None)
        yield from self._events()

    def _feed(self, view: memoryview, *, final: bool) -> Iterator[PartEvent]:
        """Feed ``view`` slice by slice, none ending inside a delimiter; unless
        ``final``, what may be the start of one at its very end is held back."""
        while view and not self.finished:
            room = self._max - len(self._decoder.buffer)
            if room <= 0:
                raise MultipartTooLargeError(
                    f"a multipart preamble or part header is over {self._max} bytes"
                )
            piece = view[:room]
            cut = len(piece)
            if not (final and cut == len(view)):
                cut = self._delimiter_start(piece)
                if cut == 0 and len(piece) < len(view):
                    cut = len(piece)  # a slice as small as a delimiter: in a part's headers
            if cut == 0:
                self._held = bytes(view)
                return
            self._decoder.receive_data(bytes(piece[:cut]))
            view = view[cut:]
            yield from self._events()

    def _delimiter_start(self, data: memoryview) -> int:
        """Where the end of ``data`` may start a delimiter not whole yet (else its length)."""
        start = max(0, len(data) - self._window)
        tail = bytes(data[start:])
        for index, byte in enumerate(tail):
            if byte in b"\r\n" and self._unfinished_delimiter(tail[index:]):
                return start + index
        return len(data)

    def _unfinished_delimiter(self, tail: bytes) -> bool:
        """Whether ``tail`` (a line break, then the end of the input so far) may still
        grow into a delimiter: line break, ``--boundary``, then ``--`` or padding and a
        line break."""
        if tail == b"\r":
            return True  # maybe the first half of \r\n
        rest = tail[2:] if tail.startswith(b"\r\n") else tail[1:]
        dash_boundary = self._dash_boundary
        if len(rest) < len(dash_boundary):
            return dash_boundary.startswith(rest)
        if not rest.startswith(dash_boundary):
            return False
        after = rest[len(dash_boundary) :]
        return after == b"-" or after.lstrip(_PADDING) in (b"", b"\r")

    def _starts_with_delimiter(self) -> bool:
        """Whether what the decoder holds after a part's headers (the blank line's line
        break, then the content) starts with a delimiter."""
        held = bytes(self._decoder.buffer[: len(self._dash_boundary) + 2])
        for line_break in (b"\r\n", b"\n", b"\r"):
            if held.startswith(line_break):
                return held[len(line_break) :].startswith(self._dash_boundary)
        return False

    def _events(self) -> Iterator[PartEvent]:
        while True:
            try:
                event = self._decoder.next_event()
            except ValueError as exc:  # werkzeug's word for a malformed body
                raise MultipartError(f"malformed multipart body: {exc}") from exc
            if isinstance(event, (NeedData, Epilogue)):
                return
            if isinstance(event, (File, Field)) and self._starts_with_delimiter():
                # A delimiter right after the part's headers: the decoder would read it
                # as the part's end or as its content depending on where a chunk ends.
                raise MultipartError("a part's content starts with the boundary")
            if isinstance(event, (File, Field, Data)):
                yield event  # not the preamble
