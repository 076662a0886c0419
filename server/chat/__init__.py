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

from sandstream.server.chat.agents import (
    AgentsRun,
    EmbeddedUpstream,
    RelayBody,
    RelayedRun,
    RemoteUpstream,
    RunningRuns,
)
from sandstream.server.chat.api import ChatService, get_service
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.model import (
    AgentProfile,
    AttachmentError,
    ChatBusyError,
    ChatConfigError,
    ChatError,
    ChatNotFoundError,
    FileNotFoundInBagError,
    StoreError,
    Target,
    TargetError,
    TokenRejectedError,
    UnsupportedMediaTypeError,
    UploadError,
    UploadTooLargeError,
    load_agent_profile,
    resolve_target,
)
from sandstream.server.chat.mover import TurnFold, TurnSettler, fold_chunks
from sandstream.server.chat.store import (
    BlobStore,
    ChatStore,
    PostgresChatStore,
    SqlChatStore,
    SQLiteChatStore,
    sanitize_name,
)
from sandstream.server.chat.turns import LockKeepingLease, TurnMover, TurnStreamBody

from .serving import ChatAwareHTTPConnection, install_chat, serve_chat

__all__ = [
    "AgentProfile",
    "AgentsRun",
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
    "LockKeepingLease",
    "PostgresChatStore",
    "RelayBody",
    "RelayedRun",
    "RemoteUpstream",
    "RunningRuns",
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
