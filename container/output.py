"""Stdout discipline: envelope lines only, each written whole, exactly one terminal.

:class:`Emitter` is the only writer of the container's stdout. Each envelope is
encoded whole with :func:`~sandstream.core.envelope.encode_line`, stamped with ``ts``
(epoch ms) when it has none, shrunk if it would exceed the line bound, and written in
one synchronous call that loops until every byte is out. Because the write is
synchronous, trio cancellation and signals can never interrupt it half-way: a reader
sees whole lines or nothing. After the first terminal (``result`` or ``error``) the
emitter drops everything else, so a run can never produce a second terminal.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec

from sandstream.core import (
    Delta,
    Error,
    LiveEnvelope,
    Log,
    LogLevel,
    Permission,
    Result,
    Step,
    encode_line,
)

from .errors import OutputClosedError

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "Emitter",
    "FdSink",
    "Sink",
    "new_step_id",
    "now_ms",
]

DEFAULT_MAX_LINE_BYTES: Final = 512 * 1024
"""Lines are kept under this size (half of the core's default bound)."""

_PREVIEW_CHARS: Final = 2000
_ELLIPSIS: Final = "… [truncated]"

Sink = Callable[[bytes], None]
"""Writes a block of whole lines, blocking until all of it is written."""


def now_ms() -> int:
    """Wall-clock time as Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


def new_step_id() -> str:
    """A fresh, unique step id (``step_`` + 16 hex digits)."""
    return f"step_{uuid.uuid4().hex[:16]}"


class FdSink:
    """Write to a file descriptor (stdout by default), looping over partial writes.

    Raises :class:`OutputClosedError` when the reader has gone away (``EPIPE``). A
    non-blocking descriptor is waited on with ``select`` rather than failing.
    """

    def __init__(self, fd: int = 1) -> None:
        self.fd = fd

    def __call__(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                select.select([], [self.fd], [])
                continue
            except BrokenPipeError as exc:
                raise OutputClosedError("stdout closed by the reader") from exc
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    raise OutputClosedError(f"stdout unusable: {exc}") from exc
                raise
            view = view[written:]


class Emitter:
    """Encode, stamp and write envelope lines; enforce the single terminal.

    ``sink`` receives one or more whole lines per call (default: :class:`FdSink` on
    fd 1). Non-terminal lines after the terminal are dropped (and noted on stderr).
    """

    def __init__(
        self,
        sink: Sink | None = None,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if max_line_bytes < 1024:
            raise ValueError("max_line_bytes must be at least 1024")
        self._sink: Sink = sink if sink is not None else FdSink(1)
        self._max = max_line_bytes
        self._clock = clock
        self.terminal: Result | Error | None = None
        self.lines_written = 0

    @property
    def finished(self) -> bool:
        """Whether the terminal line has been written."""
        return self.terminal is not None

    def emit(self, envelope: LiveEnvelope) -> None:
        """Write one non-terminal line (a terminal goes through :meth:`finish`)."""
        self.emit_many((envelope,))

    def emit_many(self, envelopes: Iterable[LiveEnvelope]) -> None:
        """Write several non-terminal lines in one write (each line whole)."""
        if self.terminal is not None:
            _note("dropping lines emitted after the terminal")
            return
        blocks: list[bytes] = []
        for envelope in envelopes:
            if isinstance(envelope, Result | Error):
                raise TypeError("terminal envelopes go through Emitter.finish()")
            blocks.append(self._encode(envelope))
        if blocks:
            self._sink(b"".join(blocks))
            self.lines_written += len(blocks)

    def emit_encoded(self, block: bytes, lines: int) -> None:
        """Write pre-encoded, known-valid, non-terminal lines (the benchmark load path).

        ``block`` must be whole envelope lines, each ending in ``\n``, each under the
        line bound; nothing is checked here, so only trusted encoders may call this.
        """
        if self.terminal is not None:
            _note("dropping lines emitted after the terminal")
            return
        self._sink(block)
        self.lines_written += lines

    def log(self, level: LogLevel, message: str) -> None:
        """Write a ``log`` line."""
        self.emit(Log(level=level, message=message))

    def finish(self, terminal: Result | Error) -> bool:
        """Write the run's terminal line; return ``False`` (writing nothing) if one was."""
        if self.terminal is not None:
            _note(f"second terminal dropped: {terminal!r}")
            return False
        line = self._encode(terminal)
        self.terminal = terminal
        self._sink(line)
        self.lines_written += 1
        return True

    def _encode(self, envelope: LiveEnvelope) -> bytes:
        if envelope.ts is None:
            envelope = msgspec.structs.replace(envelope, ts=self._clock())
        line = encode_line(envelope)
        if len(line) <= self._max:
            return line
        return encode_line(_shrink(envelope, self._max))


def _shrink(envelope: LiveEnvelope, limit: int) -> LiveEnvelope:
    """Cut an oversized envelope's payloads so that its line fits in ``limit`` bytes."""
    # Worst case JSON escaping is 6 bytes per character ("\u001f").
    budget = max(64, (limit - 512) // 6)
    if isinstance(envelope, Step):
        return msgspec.structs.replace(
            envelope,
            args=_preview(envelope.args),
            result=_preview(envelope.result),
            error=_cut(envelope.error, budget) if envelope.error is not None else None,
        )
    if isinstance(envelope, Log | Result | Error):
        return msgspec.structs.replace(envelope, message=_cut(envelope.message, budget))
    if isinstance(envelope, Delta):  # producers split long text into several deltas
        return msgspec.structs.replace(envelope, text=_cut(envelope.text, budget))
    if isinstance(envelope, Permission) and envelope.title is not None:
        return msgspec.structs.replace(envelope, title=_cut(envelope.title, budget))
    raise TypeError(f"not an envelope: {envelope!r}")  # pragma: no cover


def _preview(value: Any) -> Any:
    if value is None:
        return None
    text = msgspec.json.encode(value).decode("utf-8", "replace")
    if len(text) <= _PREVIEW_CHARS:
        return value
    return {"truncated": True, "bytes": len(text), "preview": text[:_PREVIEW_CHARS]}


def _cut(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    return text[: budget - len(_ELLIPSIS)] + _ELLIPSIS


def _note(message: str) -> None:
    print(f"sandstream.container: {message}", file=sys.stderr, flush=True)
