"""The chat store on SQLite, by concern:

- :mod:`.chat_store`: :class:`SQLiteChatStore`, the database file and the store
  composed of the parts below;
- :mod:`.chats`: chats and their messages;
- :mod:`.turns`: chat turns, the single-flight lock, lost turns and their sweep;
- :mod:`.dispatch`: dispatch records and one-time tokens;
- :mod:`.bag_files`: the chat bag's metadata;
- :mod:`.environments`: workflow environments.

The log mover's tables of the same database are the store's too:
:mod:`..moved_runs` and :mod:`..leases`.
"""

from .chat_store import DATABASE_NAME, SQLiteChatStore
from .chats import TITLE_CHARS
from .turns import TURN_LOST

__all__ = ["DATABASE_NAME", "TITLE_CHARS", "TURN_LOST", "SQLiteChatStore"]
