"""The chat store's SQL, by concern, the same on SQLite and PostgreSQL
(:mod:`..database`):

- :mod:`.chat_store`: :class:`SqlChatStore`, composed of the parts below, and its two
  databases, :class:`SQLiteChatStore` and :class:`PostgresChatStore`;
- :mod:`.chats`: chats and their messages;
- :mod:`.turns`: chat turns, the single-flight lock, lost turns and their sweep;
- :mod:`.dispatch`: dispatch records and one-time tokens;
- :mod:`.bag_files`: the chat bag's metadata;
- :mod:`.environments`: workflow environments;
- :mod:`.push`: push subscriptions, the alerts events record, seen and moot ones;
- :mod:`.push_claims`: the push outbox's claims and each device's delivery;
- :mod:`.snapshots`: chats' workspace snapshots, the newest kept;
- :mod:`.grants`: chats' permission grants;
- :mod:`.forks`: a new chat from one assistant message of another;
- :mod:`.usage`: the tokens each chat, and each workspace per UTC day, spent.

The log mover's tables of the same database are the store's too:
:mod:`..moved_runs` and :mod:`..leases`.
"""

from .chat_store import DATABASE_NAME, PostgresChatStore, SqlChatStore, SQLiteChatStore
from .chats import TITLE_CHARS
from .snapshots import stored_manifest
from .turns import TURN_LOST
from .usage import utc_day

__all__ = [
    "DATABASE_NAME",
    "TITLE_CHARS",
    "TURN_LOST",
    "PostgresChatStore",
    "SQLiteChatStore",
    "SqlChatStore",
    "stored_manifest",
    "utc_day",
]
