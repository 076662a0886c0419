"""Where a reader of a stream resumes, as the runner's sessions and the chat both read it.

:func:`request_cursor` is the cursor of a request: ``Last-Event-ID`` over ``?cursor=``
(:func:`sandstream.core.cursors.resume_cursor`), a malformed one a 422 problem of type
:data:`INVALID_CURSOR`. :func:`cursor_ahead` is the answer to a cursor past a stream's
last frame (422, :data:`CURSOR_AHEAD`): never a ``204``, which would end an
``EventSource`` for good while the stream may still run. Pure functions of the request's
values: nothing to cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from quart import Response
from werkzeug.datastructures import Headers

from sandstream.core import CursorError, resume_cursor
from sandstream.server.http import BadRequestError, problem

__all__ = ["CURSOR_AHEAD", "INVALID_CURSOR", "cursor_ahead", "request_cursor"]

INVALID_CURSOR: Final = "urn:sandstream:problem:invalid-cursor"
CURSOR_AHEAD: Final = "urn:sandstream:problem:cursor-ahead"


def request_cursor(args: Mapping[str, str], headers: Headers) -> int | None:
    """The cursor the request resumes after (``None``: none given). Raises
    :class:`BadRequestError` (422, :data:`INVALID_CURSOR`) for a malformed one."""
    try:
        return resume_cursor(args.get("cursor"), headers.get("Last-Event-ID"))
    except CursorError as exc:
        raise BadRequestError(
            problem(422, "Invalid cursor", str(exc), type=INVALID_CURSOR)
        ) from None


def cursor_ahead(cursor: int, last: int) -> Response:
    """422 (:data:`CURSOR_AHEAD`): ``cursor`` is past ``last``, the greatest id the
    stream has sent (``last_id`` in the problem)."""
    return problem(
        422,
        "Cursor ahead of the stream",
        f"cursor {cursor} is past this stream's last id ({last}): it is no cursor of "
        "this stream (read it from the start)",
        type=CURSOR_AHEAD,
        last_id=last,
    )
