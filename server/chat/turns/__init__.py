"""A chat turn on a durable session: its runner link, its viewers and their frames.

- :mod:`.chat_turns` — :class:`~.chat_turns.ChatTurns`: start, join, interrupt, follow up,
  sweep, shutdown;
- :mod:`.runner_link` — the turn's runner session, embedded or remote, behind one
  interface (read from a cursor, send a message, interrupt);
- :mod:`.viewer` — one viewer's SSE response: the session's chunks after a cursor;
- :mod:`.frames` — the chat's SSE framing of a session's chunks.
"""

from .chat_turns import ChatTurns, StartedTurn
from .dispatching import Dispatcher
from .turn_mover import LockKeepingLease, TurnMover
from .viewer import TurnStreamBody

__all__: list[str] = [
    "ChatTurns",
    "Dispatcher",
    "LockKeepingLease",
    "StartedTurn",
    "TurnMover",
    "TurnStreamBody",
]
