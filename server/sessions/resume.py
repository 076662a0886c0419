"""Where a reader of a stream resumes, as the runner's sessions and the chat both read it.

:func:`request_cursor` is the cursor of a request: ``Last-Event-ID`` over ``?cursor=``
(:func:`sandstream.core.cursors.resume_cursor`); a malformed one raises
:class:`~.errors.InvalidCursorError` (422). A cursor past a stream's last frame is a
:class:`~.errors.CursorAheadError` (422). A pure function of the request's values:
nothing to cancel.
"""

from __future__ import annotations

from collections.abc import Mapping

from werkzeug.datastructures import Headers

from sandstream.core import CursorError, resume_cursor

from .errors import InvalidCursorError

__all__ = ["request_cursor"]


def request_cursor(args: Mapping[str, str], headers: Headers) -> int | None:
    """The cursor the request resumes after (``None``: none given). Raises
    :class:`~.errors.InvalidCursorError` (422) for a malformed one."""
    try:
        return resume_cursor(args.get("cursor"), headers.get("Last-Event-ID"))
    except CursorError as exc:
        raise InvalidCursorError(str(exc)) from None
