"""The chat backend's HTTP routes, a module per route group, and what they share.

- :mod:`.chat` — the Assistant API (turn, join, stop, follow-up, chats, files);
  :mod:`.ui_stream` — the same turn as the AI SDK's UI message stream;
  :mod:`.agents` — the Agents block and workflow environments;
  :mod:`.workspace` — a chat's workspace (its latest snapshot's work dir) and its files;
  :mod:`.callbacks` — the sandbox callbacks (one-time tokens); :mod:`.snapshots` —
  the sandbox's workspace snapshot callbacks; :mod:`.readiness` — ``GET /readyz``;
- :mod:`.guard` (the service, the API-token check, a one-time token's check),
  :mod:`.bodies` (request bodies), :mod:`.cors`, :mod:`.multipart` (uploads into the
  blob store), :mod:`.blob_packs` (blob packs into and out of the blob store),
  :mod:`.downloads` (a blob's bytes as a download).

A chat error a route lets out answers for itself (:mod:`~sandstream.server.chat.model.errors`).
"""

from .agents import agents_blueprint
from .api_description import CHAT_OPERATIONS
from .callbacks import callbacks_blueprint
from .chat import chat_blueprint, stream_blueprint
from .chat_service import ChatService
from .cors import install_cors
from .guard import CHAT_EXTENSION, get_service
from .multipart import PART_OVERHEAD
from .push import push_ack_blueprint, push_blueprint
from .readiness import READY_TIMEOUT, readiness_blueprint
from .snapshots import largest_snapshot_body, snapshots_blueprint
from .ui_stream import ui_blueprint
from .workspace import workspace_blueprint

__all__: list[str] = [
    "CHAT_EXTENSION",
    "CHAT_OPERATIONS",
    "PART_OVERHEAD",
    "READY_TIMEOUT",
    "ChatService",
    "agents_blueprint",
    "callbacks_blueprint",
    "chat_blueprint",
    "get_service",
    "install_cors",
    "largest_snapshot_body",
    "push_ack_blueprint",
    "push_blueprint",
    "readiness_blueprint",
    "snapshots_blueprint",
    "stream_blueprint",
    "ui_blueprint",
    "workspace_blueprint",
]
