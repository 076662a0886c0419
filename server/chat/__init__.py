"""The chat backend (the Assistant side of seeds 000, 002 and 003) on Quart-Trio.

- :class:`ChatService` starts turns: lock, user message, session and hashed one-time
  tokens in one transaction, then a runner session (embedded or remote) kept by a
  :class:`TurnKeeper` until it ended and settled (:class:`TurnSettler`);
- :class:`TurnStreamBody` is one viewer of a turn: the session's chunks after a
  cursor as SSE frames (``id:`` the cursor); :class:`RelayBody` streams an
  Agents-block run (validated NDJSON), one nursery per run, settled once;
- :class:`ChatStore` is the storage interface, :class:`SQLiteChatStore` the embedded
  default (WAL, worker threads, versioned migrations), :class:`BlobStore` the bag's
  content-addressed bytes;
- :func:`install_chat` / :func:`serve_chat` mount and serve it all;
  ``sandstream serve`` (:mod:`sandstream.server.cli.serve`) runs it on embedded
  defaults.
"""

from .agent_profile import AgentProfile, load_agent_profile
from .agents.live import LiveAgentsRun, LiveTurn, LiveTurns
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
from .mover.settle import TurnSettler, fold_chunks
from .mover.turns import LockKeepingLease, TurnMover
from .service import ChatService
from .serving import ChatAwareHTTPConnection, install_chat, serve_chat
from .store.bag import BlobStore, sanitize_name
from .store.contract import ChatStore
from .store.sqlite import SQLiteChatStore
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
    "LiveTurn",
    "LiveTurns",
    "LockKeepingLease",
    "RelayBody",
    "RemoteUpstream",
    "SQLiteChatStore",
    "StoreError",
    "Target",
    "TargetError",
    "TokenRejectedError",
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
