"""The Durable Streams role's settings: one frozen dataclass, validated on construction.

Its one flag, ``--streams-sync``, is declared on its field
(:mod:`sandstream.server.settings_table`). A bad value raises :class:`ValueError`
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandstream.server.settings_table import Setting, at_least, check_fields, finite_positive

from .committer import SyncPolicy
from .segments import DEFAULT_SEGMENT_BYTES

__all__ = ["StreamSettings"]


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    """Where the streams live and how they are served. Times are in seconds.

    ``directory``: the index and the logs. ``sync``: when appends become durable.
    ``long_poll_timeout``: how long a ``live=long-poll`` read waits for data.
    ``sse_reconnect``: an SSE response ends after this long (clients reconnect from
    its last offset, which lets caches collapse readers). ``read_bytes``: the most
    bytes one read answers with. ``tail_bytes``: a stream's newest bytes kept in
    memory for live readers. ``segment_bytes``: the size of a log segment file.
    ``max_append_bytes``: the largest body a create or append may send (413 above).
    The quotas bound what the HTTP API writes (the streams the server writes itself,
    the sessions', are bounded by the sessions): ``max_streams`` streams at once (429
    for one more), ``max_stream_bytes`` stored in one stream (413 for an append past
    it), and ``max_path_chars`` in a stream's path (400).
    """

    directory: Path
    sync: SyncPolicy = Setting(  # noqa: RUF009
        flag="--streams-sync",
        default="commit",
        metavar="POLICY",
        shown="commit",
        help="when appends to the Durable Streams (the sessions' included) are made "
        "durable: 'commit' (fsync before the append is answered, shared by concurrent "
        "appends) or SECONDS (answered once written, fsync every SECONDS)",
        convert=SyncPolicy.parse,
    ).field(default=SyncPolicy())
    long_poll_timeout: float = Setting(default=20.0, check=finite_positive).field()
    sse_reconnect: float = Setting(default=60.0, check=finite_positive).field()
    read_bytes: int = Setting(default=1024 * 1024, check=at_least(1)).field()
    tail_bytes: int = Setting(default=256 * 1024, check=at_least(1)).field()
    segment_bytes: int = Setting(default=DEFAULT_SEGMENT_BYTES, check=at_least(1)).field()
    max_append_bytes: int = Setting(default=32 * 1024 * 1024, check=at_least(1)).field()
    max_streams: int = Setting(
        flag="--streams-max-streams",
        default=10_000,
        parse=int,
        metavar="N",
        help="the most Durable Streams the HTTP API may hold at once (429 for one more; "
        "the sessions' own streams are not counted)",
        check=at_least(1),
    ).field()
    max_stream_bytes: int = Setting(
        flag="--streams-max-stream-bytes",
        default=1024 * 1024 * 1024,
        parse=int,
        metavar="BYTES",
        help="the most bytes one Durable Stream written through the HTTP API may hold "
        "(413 for an append past it)",
        check=at_least(1),
    ).field()
    max_path_chars: int = Setting(default=1024, check=at_least(16)).field()

    def __post_init__(self) -> None:
        check_fields(self, ValueError)
