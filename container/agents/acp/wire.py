"""JSON-RPC 2.0 messages as ACP sends them on stdio: one JSON object a line (sans-IO).

:class:`MessageReader` turns the agent's stdout bytes, in any chunking, into
:data:`Message` values; :func:`encode` turns one into a line. Ids are ints or strings
(some agents use UUIDs) and are kept as they came. A line over ``max_line_bytes`` has
its strings cut (:mod:`sandstream.core.translators.long_lines`), so a tool's huge output
does not end the turn. Bad input raises :class:`~.errors.ProtocolError`: a line that is
not UTF-8 JSON, an object that is no JSON-RPC 2.0 message, a line still too long once
cut. No I/O, nothing to cancel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgspec

from sandstream.core import JSONInputError, LongLineSplitter, decode_json

from .errors import ProtocolError

__all__ = [
    "DEFAULT_KEEP_STRING_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "ErrorResponse",
    "Message",
    "MessageReader",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "encode",
]

DEFAULT_MAX_LINE_BYTES: Final = 8 * 1024 * 1024
DEFAULT_KEEP_STRING_BYTES: Final = 512 * 1024

RequestId: TypeAlias = int | str

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


@dataclass(frozen=True)
class Request:
    id: RequestId
    method: str
    params: Any = None


@dataclass(frozen=True)
class Notification:
    method: str
    params: Any = None


@dataclass(frozen=True)
class Response:
    id: RequestId
    result: Any


@dataclass(frozen=True)
class ErrorResponse:
    """An error answer; ``id`` is ``None`` when the peer could not read the request."""

    id: RequestId | None
    code: int
    message: str
    data: Any = None


Message: TypeAlias = Request | Notification | Response | ErrorResponse


class MessageReader:
    """Split bytes into lines and lines into messages; blank lines are skipped."""

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        keep_string_bytes: int = DEFAULT_KEEP_STRING_BYTES,
    ) -> None:
        self._splitter = LongLineSplitter(max_line_bytes, keep_string_bytes)
        self.lines = 0

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by ``data``; raises :class:`ProtocolError`."""
        return [self._message(line) for line in self._splitter.feed(data) if _content(line)]

    def close(self) -> list[Message]:
        """End of output: the last line if it had no ``\\n``."""
        return [self._message(line) for line in self._splitter.close() if _content(line)]

    def _message(self, line: bytes | None) -> Message:
        self.lines += 1  # counts the lines with content
        if line is None:
            limit = self._splitter.max_line_bytes
            raise ProtocolError(f"agent output line {self.lines} is over {limit} bytes")
        try:
            obj = decode_json(line)
        except JSONInputError as exc:
            raise ProtocolError(
                f"agent output line {self.lines} is not JSON ({exc}): {_excerpt(line)}"
            ) from None
        try:
            return parse(obj)
        except ProtocolError as exc:
            raise ProtocolError(f"agent output line {self.lines}: {exc.message}") from None


def _content(line: bytes | None) -> bool:
    return line is None or bool(line.strip())


def parse(obj: Any) -> Message:
    """Classify one decoded JSON-RPC object; raises :class:`ProtocolError`."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"not a JSON object: {_excerpt_value(obj)}")
    if obj.get("jsonrpc") != "2.0":
        raise ProtocolError(f'no "jsonrpc": "2.0": {_excerpt_value(obj)}')
    method = obj.get("method")
    has_id = "id" in obj
    ident = obj.get("id")
    if method is not None:
        if not isinstance(method, str) or not method:
            raise ProtocolError(f"method is not a string: {_excerpt_value(obj)}")
        if not has_id:
            return Notification(method, obj.get("params"))
        return Request(_request_id(ident, obj), method, obj.get("params"))
    if "result" in obj:
        return Response(_request_id(ident, obj), obj["result"])
    error = obj.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        if isinstance(code, int) and not isinstance(code, bool) and isinstance(message, str):
            answered = None if ident is None else _request_id(ident, obj)
            return ErrorResponse(answered, code, message, error.get("data"))
    raise ProtocolError(f"not a request, notification or response: {_excerpt_value(obj)}")


def _request_id(value: Any, obj: Any) -> RequestId:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ProtocolError(f"id is not an int or a string: {_excerpt_value(obj)}")


def encode(message: Message) -> bytes:
    """One message as a JSON line, ``\\n`` included."""
    obj: dict[str, Any] = {"jsonrpc": "2.0"}
    if isinstance(message, Request):
        obj |= {"id": message.id, "method": message.method}
        if message.params is not None:
            obj["params"] = message.params
    elif isinstance(message, Notification):
        obj["method"] = message.method
        if message.params is not None:
            obj["params"] = message.params
    elif isinstance(message, Response):
        obj |= {"id": message.id, "result": message.result}
    else:
        error: dict[str, Any] = {"code": message.code, "message": message.message}
        if message.data is not None:
            error["data"] = message.data
        obj |= {"id": message.id, "error": error}
    return msgspec.json.encode(obj) + b"\n"


def _excerpt(line: bytes, limit: int = 200) -> str:
    text = line[: limit * 4].decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "…"


def _excerpt_value(obj: Any) -> str:
    return _excerpt(msgspec.json.encode(obj))
