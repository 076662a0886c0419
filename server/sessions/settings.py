"""The session role's settings: one frozen dataclass, validated on construction.

Its flags (``--session-retain-chunks``, ``--session-ttl``) are declared on its fields
(:mod:`sandstream.server.settings_table`). A bad value raises :class:`ValueError`
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandstream.server.settings_table import (
    Setting,
    at_least,
    check_fields,
    finite_positive,
    positive,
)
from sandstream.server.streams import StreamSettings

__all__ = ["SessionSettings"]


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """Where the buffer lives and how long it keeps things. Times are in seconds.

    ``data_dir``: the buffer's directory (``sessions.sqlite3`` in it). Retention:
    ``retain_chunks`` keeps at most that many newest chunks per session (``None``:
    all); ``ttl`` deletes a session that ended that long ago (``None``: never),
    checked every ``sweep_interval``. ``read_bytes``: the most a reader is handed per
    read. ``keepalive``: an idle reader gets a keep-alive after this long.
    ``readers``: SQLite reader threads. ``streams``: the stream store that keeps the
    sessions' output (default: in ``streams/`` of ``data_dir``, default settings).
    """

    data_dir: Path
    retain_chunks: int | None = Setting(
        flag="--session-retain-chunks",
        parse=int,
        metavar="N",
        shown="all",
        help="keep at most the newest N chunks of each session",
        check=at_least(1),
    ).field()
    ttl: float | None = Setting(
        flag="--session-ttl",
        default=7 * 24 * 3600.0,
        parse=float,
        metavar="SEC",
        shown="7 days; 0: never",
        help="delete a session this long after it ended",
        check=positive,
        convert=lambda seconds: seconds or None,
    ).field()
    sweep_interval: float = Setting(default=60.0, check=finite_positive).field()
    read_bytes: int = Setting(default=256 * 1024, check=at_least(1)).field()
    keepalive: float = Setting(default=15.0, check=finite_positive).field()
    readers: int = Setting(default=4, check=at_least(1)).field()
    streams: StreamSettings | None = None

    @property
    def stream_settings(self) -> StreamSettings:
        """``streams``, or the default store in the data dir."""
        return self.streams or StreamSettings(directory=self.data_dir / "streams")

    def __post_init__(self) -> None:
        check_fields(self, ValueError)
