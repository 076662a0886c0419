"""HTTP helpers of the chat routes: problem types, JSON in and out, query parameters."""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec
from quart import Response, request

from sandstream.server.problems import INVALID_BODY, UNAUTHORIZED, problem

__all__ = [
    "BAD_RUNNER",
    "CHAT_BUSY",
    "NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "UNKNOWN_ATTACHMENT",
    "UNSUPPORTED_MEDIA_TYPE",
    "BadRequestError",
    "int_query",
    "invalid",
    "json_response",
    "read_json",
    "require_query",
    "unauthorized",
]

T = TypeVar("T")

CHAT_BUSY: Final = "urn:sandstream:problem:chat-busy"
NOT_FOUND: Final = "urn:sandstream:problem:not-found"
UNKNOWN_ATTACHMENT: Final = "urn:sandstream:problem:unknown-attachment"
PAYLOAD_TOO_LARGE: Final = "urn:sandstream:problem:payload-too-large"
UNSUPPORTED_MEDIA_TYPE: Final = "urn:sandstream:problem:unsupported-media-type"
BAD_RUNNER: Final = "urn:sandstream:problem:bad-runner"


class BadRequestError(Exception):
    """A request that cannot be served as sent; ``response`` is its problem answer."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` (msgspec-encodable) as ``application/json``, not cached."""
    response = Response(msgspec.json.encode(value), status=status, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


def unauthorized(detail: str, realm: str) -> Response:
    return problem(
        401,
        "Unauthorized",
        detail,
        type=UNAUTHORIZED,
        headers={"WWW-Authenticate": f'Bearer realm="{realm}"'},
    )


def invalid(detail: str, **extensions: Any) -> Response:
    return problem(422, "Invalid request", detail, type=INVALID_BODY, **extensions)


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
