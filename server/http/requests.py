"""Reading requests and answering JSON: bounded JSON bodies, query parameters, JSON out."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from quart import Response, request

from .problems import PAYLOAD_TOO_LARGE, BadRequestError, invalid, problem

__all__ = ["int_query", "json_response", "read_json", "require_query"]

T = TypeVar("T")


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` (msgspec-encodable) as ``application/json``, not cached."""
    response = Response(msgspec.json.encode(value), status=status, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


async def read_json(schema: type[T], limit: int) -> T:
    """The request body decoded as ``schema``. Raises :class:`BadRequestError` (413/422)."""
    too_large = problem(
        413, "Payload Too Large", f"the body is limited to {limit} bytes", type=PAYLOAD_TOO_LARGE
    )
    if (request.content_length or 0) > limit:
        raise BadRequestError(too_large)
    body = bytearray()
    async for chunk in request.body:
        body += chunk
        if len(body) > limit:
            raise BadRequestError(too_large)
    try:
        return msgspec.json.decode(bytes(body), type=schema)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadRequestError(invalid(f"the body is invalid: {exc}")) from exc


def require_query(name: str, *, max_length: int = 200) -> str:
    """A required, non-empty query parameter. Raises :class:`BadRequestError` (422)."""
    value = request.args.get(name, "").strip()
    if not value or len(value) > max_length:
        raise BadRequestError(invalid(f"the query parameter {name!r} is required"))
    return value


def int_query(name: str, default: int, *, minimum: int, maximum: int) -> int:
    """An optional integer query parameter in bounds. Raises BadRequestError (422)."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(invalid(f"{name} must be an integer, got {raw!r}")) from None
    if not minimum <= value <= maximum:
        raise BadRequestError(invalid(f"{name} must be between {minimum} and {maximum}"))
    return value
