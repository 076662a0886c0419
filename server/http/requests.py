"""Reading requests and answering JSON: bounded JSON bodies, query parameters, JSON out.

Every JSON request body of every role goes through :func:`read_json`, and so through
:func:`decode_json`, the one place that turns msgspec's failures into a 422.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import msgspec
from quart import Response, request

from sandstream.core import JSONInputError
from sandstream.core import decode_json as core_decode_json

from .errors import BadRequestError
from .problems import invalid, too_large

__all__ = ["decode_json", "int_query", "json_response", "read_json", "require_query"]

T = TypeVar("T")

_ASCII_INTEGER: Final = re.compile(r"-?[0-9]{1,18}")


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` (msgspec-encodable) as ``application/json``, not cached."""
    response = Response(msgspec.json.encode(value), status=status, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


async def read_json(schema: type[T], limit: int) -> T:
    """The request body decoded as ``schema``, read under the route's own ``limit``.

    A ``Content-Length`` over ``limit`` is refused before anything is read; otherwise
    the body is counted as it arrives and refused as soon as it crosses ``limit`` (the
    rest is never read; the refusal closes the connection). Raises
    :class:`BadRequestError`: 413 over the limit, 422 not a valid ``schema`` (see
    :func:`decode_json`); a body slower than ``BODY_TIMEOUT`` raises werkzeug's
    ``RequestTimeout`` (408, :mod:`.asgi`). Cancellation: nothing to clean up.
    """
    if (request.content_length or 0) > limit:
        raise BadRequestError(too_large(limit))
    body = bytearray()
    async for chunk in request.body:
        body += chunk
        if len(body) > limit:
            raise BadRequestError(too_large(limit))
    return decode_json(bytes(body), schema)


def decode_json(data: bytes, schema: type[T]) -> T:
    """``data`` decoded as ``schema``; :class:`BadRequestError` (422) for any bad input.

    The decoding is :func:`sandstream.core.json_input.decode_json`, which maps every
    way msgspec refuses input (``DecodeError``, ``ValidationError``, and the
    ``UnicodeDecodeError`` / ``RecursionError`` of bad UTF-8 or deep nesting) to one
    :class:`~sandstream.core.json_input.JSONInputError`: all of them are the client's
    fault.
    """
    try:
        return core_decode_json(data, schema)
    except JSONInputError as exc:
        raise BadRequestError(invalid(f"the body is invalid: {exc}", reason=exc.reason)) from None


def require_query(name: str, *, max_length: int = 200) -> str:
    """A required, non-blank query parameter, as sent. Raises :class:`BadRequestError` (422)."""
    value = request.args.get(name, "")
    if not value.strip() or len(value) > max_length:
        raise BadRequestError(invalid(f"the query parameter {name!r} is required"))
    return value


def int_query(
    name: str,
    default: int,
    *,
    minimum: int,
    maximum: int,
    args: Mapping[str, str] | None = None,
) -> int:
    """An optional integer query parameter in bounds, from ``args`` (the request's when
    ``None``; a WebSocket route passes its own). Raises BadRequestError (422).

    Only ASCII digits with an optional ``-`` are an integer here (``int()`` would also
    take ``٣``, ``1_000`` and surrounding spaces).
    """
    raw = (request.args if args is None else args).get(name)
    if raw is None or raw == "":
        return default
    if _ASCII_INTEGER.fullmatch(raw) is None:
        raise BadRequestError(invalid(f"{name} must be an integer, got {raw!r}"))
    value = int(raw)
    if not minimum <= value <= maximum:
        raise BadRequestError(invalid(f"{name} must be between {minimum} and {maximum}"))
    return value
