"""What a turn's fold says about its permission requests that the push alerts have not
heard yet.

:class:`PermissionWatch` compares a fold's permission requests (the core's
:class:`~sandstream.core.live.PermissionRow` by id, in the order they were asked)
with what it reported before: the requests newly ``pending`` and those newly
``resolved`` are :class:`PermissionNews`, reported once the store recorded them
(:meth:`PermissionWatch.reported`), so a failed write is reported again after the
next batch. A new fold (a takeover folds the session again) gets a new watch, which
reports everything once more; the store ignores what it recorded before. Reads the
fold between its feeds (never while a worker thread feeds it); nothing to cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sandstream.core import PermissionRow

__all__ = ["PermissionNews", "PermissionWatch"]


@dataclass(frozen=True, slots=True)
class PermissionNews:
    """Requests newly ``asked`` (pending, oldest first) and newly ``resolved``."""

    asked: tuple[str, ...]
    resolved: tuple[str, ...]

    @property
    def newest(self) -> str | None:
        """The newest request still pending, the one its alert is about."""
        return self.asked[-1] if self.asked else None


class PermissionWatch:
    """The permission requests of one fold reported so far (see the module docstring)."""

    __slots__ = ("_reported",)

    def __init__(self) -> None:
        self._reported: dict[str, str] = {}

    def news(self, requests: Mapping[str, PermissionRow]) -> PermissionNews | None:
        """What ``requests`` holds that was not reported; ``None``: nothing."""
        if len(requests) == 0:
            return None
        reported = self._reported
        asked: list[str] = []
        resolved: list[str] = []
        for request_id, row in requests.items():
            if reported.get(request_id) != row.status:
                (resolved if row.status == "resolved" else asked).append(request_id)
        if not asked and not resolved:
            return None
        return PermissionNews(tuple(asked), tuple(resolved))

    def reported(self, news: PermissionNews) -> None:
        """The store recorded ``news``."""
        for request_id in news.asked:
            self._reported[request_id] = "pending"
        for request_id in news.resolved:
            self._reported[request_id] = "resolved"
