"""The root of the server's exceptions: every role's errors (``http``, ``runner``,
``sessions``, ``streams``, ``chat``) derive from :class:`ServerError`.

An error that has an HTTP answer of its own is a :class:`ProblemError`: it says its
problem's ``status``, ``type`` and ``title`` as class attributes, and this occurrence's
detail, extension members and headers through its methods;
:func:`sandstream.server.http.problems.error_problem` renders any of them, and one
handler answers every route with it. Any other exception a route lets out is a 500.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sandstream.core import SandstreamError

__all__ = ["ProblemError", "ServerError"]


class ServerError(SandstreamError):
    """Base class of every exception the server raises on purpose."""


class ProblemError(ServerError):
    """An error answered as problem JSON (RFC 9457): ``status``, ``type`` (a URN) and
    ``title`` are the same for every occurrence; :meth:`detail`, :meth:`extensions`
    and :meth:`headers` are this one's."""

    status: ClassVar[int]
    type: ClassVar[str]
    title: ClassVar[str]

    def detail(self) -> str:
        """The problem's ``detail``: the error's message."""
        return str(self)

    def extensions(self) -> dict[str, Any]:
        """The problem's extension members (none)."""
        return {}

    def headers(self) -> dict[str, str]:
        """The answer's headers besides the problem's own (none)."""
        return {}

    def answered(self) -> None:
        """Called as the error is answered (nothing: an error may log itself here)."""
