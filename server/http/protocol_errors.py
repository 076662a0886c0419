"""Problem JSON for the errors Hypercorn answers itself, below the app.

A request h11 cannot parse (a bad request line, a bad chunk size, a header block over
``h11_max_incomplete_size``) never reaches Quart: Hypercorn's HTTP/1.1 protocol answers
it in ``H11Protocol._send_error_response`` with h11's status hint (400, 431, ...) and
an empty body, then closes the connection. Hypercorn has no hook for that answer, so
:func:`install_protocol_problems` replaces that one method, process-wide, with one
that sends the same status and ``Connection: close`` with an
``application/problem+json`` body (type ``urn:sandstream:problem:malformed-request``).
It is idempotent, and fails loudly if a Hypercorn upgrade moved the method.
"""

from __future__ import annotations

from http import HTTPStatus
from itertools import chain

import h11
from hypercorn.protocol.h11 import H11Protocol

from .problems import MALFORMED_REQUEST, PROBLEM_CONTENT_TYPE, problem_body

__all__ = ["install_protocol_problems"]


async def _send_problem_response(self: H11Protocol, status_code: int) -> None:
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
    await self._send_h11_event(
        h11.Response(
            status_code=status_code,
            headers=list(chain(headers, self.config.response_headers("h11"))),
        )
    )
    await self._send_h11_event(h11.Data(data=body))
    await self._send_h11_event(h11.EndOfMessage())


def install_protocol_problems() -> None:
    """Make Hypercorn's own HTTP/1.1 error answers problem JSON (process-wide, idempotent)."""
    if not callable(getattr(H11Protocol, "_send_error_response", None)):
        raise RuntimeError(
            "hypercorn.protocol.h11.H11Protocol has no _send_error_response: "
            "this Hypercorn version is not supported"
        )
    H11Protocol._send_error_response = _send_problem_response  # type: ignore[method-assign]
