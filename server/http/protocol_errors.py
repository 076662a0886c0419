"""Problem JSON for the errors Hypercorn answers itself, below the app.

A request h11 cannot parse (a bad request line, a bad chunk size, a header block over
``h11_max_incomplete_size``) never reaches Quart: Hypercorn's HTTP/1.1 protocol answers
it with h11's status hint (400, 431, ...) and an empty body, then closes the
connection. Hypercorn has no hook for that answer, so :func:`install_protocol_problems`
replaces it, process-wide (through :mod:`.hypercorn_adapter`), with one that sends the
same status and ``Connection: close`` with an ``application/problem+json`` body (type
``urn:sandstream:problem:malformed-request``). It is idempotent, and fails loudly if a
Hypercorn upgrade moved what it replaces.
"""

from __future__ import annotations

from http import HTTPStatus

from .hypercorn_adapter import set_h11_error_answer
from .problems import MALFORMED_REQUEST, PROBLEM_CONTENT_TYPE, problem_body

__all__ = ["install_protocol_problems"]


def _problem_answer(status_code: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Hypercorn's error answer, with a problem body (same status, same close)."""
    body = problem_body(
        status_code,
        HTTPStatus(status_code).phrase,
        "the request is not valid HTTP/1.1 and cannot be answered otherwise",
        type=MALFORMED_REQUEST,
    )
    headers = [
        (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return headers, body


def install_protocol_problems() -> None:
    """Make Hypercorn's own HTTP/1.1 error answers problem JSON (process-wide, idempotent)."""
    set_h11_error_answer(_problem_answer)
