"""The core's exceptions, under :class:`SandstreamError`, the root of every exception
sandstream raises on purpose (the server's and the container's derive from it too).

Bad stream input never raises: it becomes a diagnostic or a synthesized terminal. These
are raised for misuse (feeding a closed processor), for untrusted JSON decoded on its
own (:class:`JSONInputError`) and for inputs that break a memory bound."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = [
    "CursorError",
    "JSONInputError",
    "JSONInputReason",
    "ProcessorClosedError",
    "SSEParseError",
    "SSEParserClosedError",
    "SandstreamError",
    "SplitterClosedError",
    "UIMessageStreamError",
]


class SandstreamError(Exception):
    """Base class of every exception sandstream raises on purpose."""


class ProcessorClosedError(SandstreamError, RuntimeError):
    """``feed()`` was called after the processor was closed, cancelled or failed."""


class SplitterClosedError(SandstreamError, RuntimeError):
    """Raised when data is fed to a splitter after :meth:`NDJSONSplitter.close`."""


class CursorError(SandstreamError, ValueError):
    """A cursor or SSE event id from outside that is not the canonical decimal form of
    a cursor (:mod:`sandstream.core.cursors`); ``str(error)`` is fit to show its sender."""


class SSEParseError(SandstreamError, ValueError):
    """The stream exceeded a memory bound; the parser accepts no more input."""


class SSEParserClosedError(SandstreamError, RuntimeError):
    """Data was fed to a parser after :meth:`SSEParser.close` or after an error
    (and before :meth:`SSEParser.reconnect`)."""


JSONInputReason: TypeAlias = Literal["invalid_json", "invalid_utf8", "too_deep", "invalid_value"]
"""Why input was refused: not JSON, not UTF-8, nested too deeply, or the wrong shape."""


class JSONInputError(SandstreamError, ValueError):
    """Untrusted JSON that could not be decoded.

    ``reason`` says why (:data:`JSONInputReason`); ``str(error)`` is a message fit to
    show to whoever sent the input (it quotes no more than msgspec's own position
    information, never the input itself).
    """

    def __init__(self, reason: JSONInputReason, message: str) -> None:
        super().__init__(message)
        self.reason: JSONInputReason = reason
        self.message = message


class UIMessageStreamError(SandstreamError):
    """The input was not the chat's SSE (a frame's data is not its envelope line)."""
