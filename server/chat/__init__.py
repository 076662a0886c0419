"""The chat backend on Quart-Trio: conversations, one-time tokens, each turn a runner session.

- :class:`ChatService` starts turns (lock, user message, session and one-time tokens in
  one transaction, then a runner session, embedded or remote); :class:`TurnMover` follows
  each session, folding its chunks into a :class:`TurnFold`, and :class:`TurnSettler`
  settles the turn;
- :class:`TurnStreamBody` is one viewer of a turn (SSE from a cursor);
  :class:`RelayBody` streams an Agents-block run, one nursery, settled once;
- :class:`ChatStore` is the storage interface (every part of :mod:`.store.contract`,
  whose narrow interfaces the service's parts each take), :class:`SQLiteChatStore` its
  default (:class:`PostgresChatStore` with ``--database-url``),
  :class:`BlobStore` the bag's bytes; :func:`install_chat` / :func:`serve_chat` mount and
  serve it all (``sandstream serve``; docs/chat.md).
"""

from .agent_profile import AgentProfile, load_agent_profile
from .agents.live import LiveAgentsRun, LiveRun, LiveRuns
from .agents.relay import RelayBody
from .agents.upstream import EmbeddedUpstream, RemoteUpstream
from .api.guard import get_service
from .config import ChatSettings
from .errors import (
    AttachmentError,
    ChatBusyError,
    ChatConfigError,
    ChatError,
    ChatNotFoundError,
    FileNotFoundInBagError,
    StoreError,
    TargetError,
    TokenRejectedError,
    UnsupportedMediaTypeError,
    UploadError,
    UploadTooLargeError,
)
from .mover.settle import TurnFold, TurnSettler, fold_chunks
from .mover.turns import LockKeepingLease, TurnMover
from .service import ChatService
from .serving import ChatAwareHTTPConnection, install_chat, serve_chat
from .store.bag import BlobStore, sanitize_name
from .store.contract import ChatStore
from .store.sql import PostgresChatStore, SqlChatStore, SQLiteChatStore
from .targets import Target, resolve_target
from .turns.viewer import TurnStreamBody

__all__ = [
    "AgentProfile",
    "AttachmentError",
    "BlobStore",
    "ChatAwareHTTPConnection",
    "ChatBusyError",
    "ChatConfigError",
    "ChatError",
    "ChatNotFoundError",
    "ChatService",
    "ChatSettings",
    "ChatStore",
    "EmbeddedUpstream",
    "FileNotFoundInBagError",
    "LiveAgentsRun",
    "LiveRun",
    "LiveRuns",
    "LockKeepingLease",
    "PostgresChatStore",
    "RelayBody",
    "RemoteUpstream",
    "SQLiteChatStore",
    "SqlChatStore",
    "StoreError",
    "Target",
    "TargetError",
    "TokenRejectedError",
    "TurnFold",
    "TurnMover",
    "TurnSettler",
    "TurnStreamBody",
    "UnsupportedMediaTypeError",
    "UploadError",
    "UploadTooLargeError",
    "fold_chunks",
    "get_service",
    "install_chat",
    "load_agent_profile",
    "resolve_target",
    "sanitize_name",
    "serve_chat",
]
