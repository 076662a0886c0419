"""RFC 9457 problem details: every error the server answers is ``application/problem+json``.

A problem is a JSON object with ``type`` (a URI naming the kind of problem), ``title``
(short, the same for every occurrence of that type), ``status``, and ``detail`` (this
occurrence); extension members add machine-readable facts (``errors``,
``retry_after``). Types minted here are URNs, ``urn:sandstream:problem:<name>``: they
identify, they are not meant to be fetched. Every answer names one: there is no
``about:blank`` (an HTTP error Quart or werkzeug raises itself gets the type of its
status, :func:`status_type`).

An error raised on purpose answers for itself: a
:class:`~sandstream.server.errors.ProblemError` names its status, type and title, and
:func:`error_problem` renders it; :func:`install_problem_handlers` installs the one
handler that does so for every role's routes. Errors name their extension members in
camelCase, as the chat's API does; an API whose JSON is snake_case (the sessions')
answers them renamed (:func:`answer_in_snake_case`), so one error reads right in both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Final

import msgspec
from quart import Blueprint, Quart, Response, has_request_context, request
from werkzeug.exceptions import HTTPException

from sandstream.server.errors import ProblemError

from .errors import BadRequestError

__all__ = [
    "AT_CAPACITY",
    "BODY_TIMEOUT",
    "FORBIDDEN",
    "INVALID_BODY",
    "KNOWN_PROBLEM_TYPES",
    "MALFORMED_REQUEST",
    "METHOD_NOT_ALLOWED",
    "NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "PROBLEM_CONTENT_TYPE",
    "SHUTTING_DOWN",
    "UNAUTHORIZED",
    "UNSUPPORTED_MEDIA_TYPE",
    "answer_in_snake_case",
    "error_problem",
    "http_problem",
    "install_problem_handlers",
    "invalid",
    "problem",
    "problem_body",
    "snake_case",
    "status_type",
    "too_large",
    "unauthorized",
    "unexpected_problem",
]

PROBLEM_CONTENT_TYPE: Final = "application/problem+json"

UNAUTHORIZED: Final = "urn:sandstream:problem:unauthorized"
INVALID_BODY: Final = "urn:sandstream:problem:invalid-body"
AT_CAPACITY: Final = "urn:sandstream:problem:at-capacity"
SHUTTING_DOWN: Final = "urn:sandstream:problem:shutting-down"
INTERNAL: Final = "urn:sandstream:problem:internal-error"
NOT_FOUND: Final = "urn:sandstream:problem:not-found"
PAYLOAD_TOO_LARGE: Final = "urn:sandstream:problem:payload-too-large"
UNSUPPORTED_MEDIA_TYPE: Final = "urn:sandstream:problem:unsupported-media-type"
BODY_TIMEOUT: Final = "urn:sandstream:problem:body-timeout"
MALFORMED_REQUEST: Final = "urn:sandstream:problem:malformed-request"
FORBIDDEN: Final = "urn:sandstream:problem:forbidden"
METHOD_NOT_ALLOWED: Final = "urn:sandstream:problem:method-not-allowed"
_PREFIX: Final = "urn:sandstream:problem:"
KNOWN_PROBLEM_TYPES: Final = frozenset(
    {
        UNAUTHORIZED,
        INVALID_BODY,
        AT_CAPACITY,
        SHUTTING_DOWN,
        INTERNAL,
        NOT_FOUND,
        PAYLOAD_TOO_LARGE,
        UNSUPPORTED_MEDIA_TYPE,
        BODY_TIMEOUT,
        MALFORMED_REQUEST,
        FORBIDDEN,
        METHOD_NOT_ALLOWED,
    }
)
"""The problem types this package names (the roles' errors name theirs)."""

_TYPE_BY_STATUS: Final = {
    400: MALFORMED_REQUEST,
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    408: BODY_TIMEOUT,
    413: PAYLOAD_TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    500: INTERNAL,
}
"""Our type for the HTTP errors Quart or werkzeug raise themselves."""

_METHODS_WITH_BODY: Final = frozenset({"POST", "PUT", "PATCH"})
_HUMP: Final = re.compile(r"(?<=[a-z0-9])([A-Z])")


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    type: str,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> Response:
    """A problem-details response. ``extensions`` become extra JSON members."""
    body = problem_body(status, title, detail, type=type, **extensions)
    response = Response(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-store"
    if has_request_context() and request.method in _METHODS_WITH_BODY:
        # A refusal may come before the body is read. h11 cannot start the next
        # request on this connection until that body is drained, and nobody drains
        # it, so a client reusing the connection would hang: close it instead.
        response.headers["Connection"] = "close"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def problem_body(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    type: str,
    **extensions: Any,
) -> bytes:
    """The JSON of a problem, for answers written below Quart (see :mod:`.protocol_errors`)."""
    body: dict[str, Any] = {"type": type, "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    body.update(extensions)
    return msgspec.json.encode(body)


def install_problem_handlers(app: Quart) -> None:
    """Render every HTTP error (404, 405, 413, ...), :class:`BadRequestError`,
    :class:`~sandstream.server.errors.ProblemError` and uncaught exception as a problem."""

    @app.errorhandler(BadRequestError)
    async def _bad_request(error: BadRequestError) -> Response:
        return error.response

    @app.errorhandler(ProblemError)
    async def _problem(error: ProblemError) -> Response:
        return error_problem(error)

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        return http_problem(error)

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception) -> Response:
        return unexpected_problem(app, error)


def answer_in_snake_case(blueprint: Blueprint) -> None:
    """Answer the errors of ``blueprint``'s routes with their extension members in
    snake_case (``lastChunkId`` as ``last_chunk_id``), for an API whose JSON is."""

    @blueprint.errorhandler(ProblemError)
    async def _problem(error: ProblemError) -> Response:
        return error_problem(error, member=snake_case)


def error_problem(error: ProblemError, *, member: Callable[[str], str] | None = None) -> Response:
    """The problem answer ``error`` describes: its status, type and title, its detail,
    extension members (each name through ``member``, if given) and headers."""
    error.answered()
    extensions = error.extensions()
    if member is not None:
        extensions = {member(name): value for name, value in extensions.items()}
    return problem(
        error.status,
        error.title,
        error.detail(),
        type=error.type,
        headers=error.headers(),
        **extensions,
    )


def snake_case(name: str) -> str:
    """``name`` (camelCase) in snake_case: ``lastChunkId`` → ``last_chunk_id``."""
    return _HUMP.sub(r"_\1", name).lower()


def http_problem(error: HTTPException) -> Response:
    """The problem of an HTTP error Quart or werkzeug raised (its status and headers)."""
    status = error.code or 500
    headers = {
        name: value
        for name, value in error.get_headers()
        if name.lower() not in ("content-type", "content-length")
    }
    return problem(status, error.name, error.description, type=status_type(status), headers=headers)


def unexpected_problem(app: Quart, error: Exception) -> Response:
    """500 for an error nobody expected, logged on ``app``'s logger."""
    app.logger.exception("unhandled error", exc_info=error)
    return problem(500, "Internal Server Error", type=INTERNAL)


def status_type(status: int) -> str:
    """The problem type of an HTTP error by its status alone: ours where one is named
    (400 is a malformed request), else a URN of the status's phrase
    (``urn:sandstream:problem:range-not-satisfiable``)."""
    known = _TYPE_BY_STATUS.get(status)
    if known is not None:
        return known
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return f"{_PREFIX}http-{status}"
    return _PREFIX + "-".join(phrase.lower().replace("-", " ").split())


def unauthorized(detail: str, realm: str) -> Response:
    return problem(
        401,
        "Unauthorized",
        detail,
        type=UNAUTHORIZED,
        headers={"WWW-Authenticate": f'Bearer realm="{realm}"'},
    )


def too_large(limit: int) -> Response:
    """413: a body over ``limit`` bytes."""
    detail = f"the body is limited to {limit} bytes"
    return problem(413, "Payload Too Large", detail, type=PAYLOAD_TOO_LARGE)


def invalid(detail: str, **extensions: Any) -> Response:
    return problem(422, "Invalid request", detail, type=INVALID_BODY, **extensions)
