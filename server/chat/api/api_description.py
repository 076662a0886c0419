"""The OpenAPI description of the chat backend's routes (this package's modules and
``GET /healthz`` of :mod:`~sandstream.server.chat.serving`): one
:class:`~sandstream.server.http.Operation` per endpoint and method, naming the bodies
the routes decode (:mod:`.bodies`, the model's requests) and the records they answer."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from sandstream.core import (
    BlobHashes,
    ConfigResponse,
    EnvResponse,
    MessageUsage,
    MissingBlobs,
    PersistedFileAttachment,
    PersistedMessage,
    ResultsReceipt,
    SnapshotManifest,
    SnapshotReceipt,
    StoredBlobs,
)
from sandstream.server.chat.model import (
    AgentsRunRequest,
    BagFile,
    Chat,
    ChatStreamRequest,
    Environment,
    PermissionGrantRecord,
    PushSubscription,
)
from sandstream.server.http import (
    API_TOKEN,
    STREAM_TOKEN,
    UPLOAD_TOKEN,
    Content,
    Operation,
    Operations,
    json_content,
    shape,
)

from .bodies import (
    CreateChatRequest,
    EnvironmentRequest,
    ForkRequest,
    MessageRequest,
    PermissionReplyRequest,
)
from .push import AckRequest, SubscribeRequest
from .ui_stream import UIChatRequest
from .workspace import WorkspaceListing

__all__ = ["CHAT_OPERATIONS"]

_API: Final = (API_TOKEN,)
_CALLBACK: Final = (UPLOAD_TOKEN,)
_WORKSPACE: Final = {"workspaceId": "The workspace (required)."}
_SSE: Final = Content("text/event-stream; charset=utf-8", {"type": "string"})
_NDJSON: Final = Content("application/x-ndjson", {"type": "string"})
_BYTES: Final = Content("application/octet-stream")
_MULTIPART: Final = Content("multipart/form-data")

ChatMessage = shape("ChatMessage", chatId=str, message=PersistedMessage)
ChatWithMessages = shape(
    "ChatWithMessages", base=Chat, usage=MessageUsage, messages=list[PersistedMessage]
)
ChatList = shape("ChatList", chats=list[Chat])
GrantList = shape("GrantList", grants=list[PermissionGrantRecord])
BagFileList = shape("BagFileList", files=list[BagFile])
UploadedFiles = shape("UploadedFiles", files=list[PersistedFileAttachment])
StreamToken = shape("StreamToken", token=str, expiresAt=int, streamUrl=str)
PermissionReplied = shape("PermissionReplied", chatId=str, requestId=str, reply=str)
SubscriptionList = shape("SubscriptionList", subscriptions=list[PushSubscription])
VapidKey = shape("VapidKey", publicKey=str)
ChatHealth = shape("ChatHealth", status=Literal["ok"], live=int)
CallbacksHealth = shape("CallbacksHealth", status=Literal["ok"], service=str)


class ReadinessCheck(msgspec.Struct, kw_only=True):
    """One part of ``GET /readyz``: ready, or why not."""

    ok: bool
    error: str | None = None


Readiness = shape(
    "Readiness", status=Literal["ready", "not_ready"], checks=dict[str, ReadinessCheck]
)


def _api(summary: str, answers: dict[int, Content | None], **more: object) -> Operation:
    """An operation of the Assistant API: the API token, workspace-scoped."""
    query = more.pop("query", _WORKSPACE)
    return Operation(summary, answers, security=_API, query=query, **more)  # type: ignore[arg-type]


CHAT_OPERATIONS: Final[Operations] = {
    ("assistant.chat_stream", "POST"): _api(
        "One user turn, streamed as SSE: start, steps, result or error, done.",
        {200: _SSE},
        body=json_content(ChatStreamRequest),
        problems=(404, 409, 503),
        query={},
    ),
    ("assistant_stream.join_stream", "GET"): Operation(
        "Join the chat's running turn after a cursor (SSE); 204 when none runs.",
        {200: _SSE, 204: None},
        security=(API_TOKEN, STREAM_TOKEN),
        query={**_WORKSPACE, "cursor": "Replay after this event id (Last-Event-ID wins)."},
        problems=(404, 409, 410),
    ),
    ("assistant.stream_token", "POST"): _api(
        "A short-lived token for GET …/chats/{chatId}/stream?token= (EventSource).",
        {201: json_content(StreamToken)},
        problems=(404,),
    ),
    ("assistant.interrupt", "POST"): _api(
        "Stop the chat's running turn; answers the settled message.",
        {200: json_content(ChatMessage)},
        problems=(404, 409),
    ),
    ("assistant.follow_up", "POST"): _api(
        "A message for the running turn's agent; answers the stored user message.",
        {202: json_content(ChatMessage)},
        body=json_content(MessageRequest),
        problems=(404, 409),
        query={},
    ),
    ("assistant.answer_permission", "POST"): _api(
        "The user's answer to a permission request of the running turn.",
        {200: json_content(PermissionReplied)},
        body=json_content(PermissionReplyRequest),
        problems=(404, 409),
        query={},
    ),
    ("assistant.list_chats", "GET"): _api(
        "The workspace's chats, most recently updated first.",
        {200: json_content(ChatList)},
        query={**_WORKSPACE, "limit": "At most this many chats."},
    ),
    ("assistant.create_chat", "POST"): _api(
        "An empty chat.",
        {201: json_content(Chat)},
        body=json_content(CreateChatRequest),
        query={},
    ),
    ("assistant.get_chat", "GET"): _api(
        "The chat with its usage and its messages (limit: the last N).",
        {200: json_content(ChatWithMessages)},
        query={**_WORKSPACE, "limit": "Only the last N messages."},
        problems=(404,),
    ),
    ("assistant.fork_chat", "POST"): _api(
        "A new chat from one assistant message of this one (and its workspace).",
        {201: json_content(Chat)},
        body=json_content(ForkRequest),
        problems=(404, 409),
        query={},
    ),
    ("assistant.delete_chat", "DELETE"): _api(
        "Soft-delete the chat and its files.", {204: None}, problems=(404, 409)
    ),
    ("assistant.list_grants", "GET"): _api(
        "The chat's permission grants, oldest first.",
        {200: json_content(GrantList)},
        problems=(404,),
    ),
    ("assistant.revoke_grant", "DELETE"): _api(
        "Revoke one of the chat's permission grants.", {204: None}, problems=(404,)
    ),
    ("assistant.upload_files", "POST"): _api(
        "Upload files to the chat's bag.",
        {201: json_content(UploadedFiles)},
        body=_MULTIPART,
        problems=(404, 413, 415, 422),
    ),
    ("assistant.list_files", "GET"): _api(
        "The chat's bag files (uploads and results), oldest first.",
        {200: json_content(BagFileList)},
        problems=(404,),
    ),
    ("assistant.download_file", "GET"): _api(
        "A bag file's bytes, as a download.", {200: _BYTES}, problems=(404,)
    ),
    ("assistant_workspace.workspace", "GET"): _api(
        "The work dir of the chat's latest snapshot.",
        {200: json_content(WorkspaceListing)},
        problems=(404,),
    ),
    ("assistant_workspace.workspace_file", "GET"): _api(
        "A file of the chat's latest snapshot's work dir, as a download.",
        {200: _BYTES},
        query={**_WORKSPACE, "path": "The file's path in the work dir (required)."},
        problems=(404,),
    ),
    ("assistant_ui.ui_chat", "POST"): _api(
        "One user turn as the AI SDK's UI message stream.",
        {200: _SSE},
        body=json_content(UIChatRequest),
        problems=(404, 409, 503),
        query={},
    ),
    ("assistant_ui.ui_chat_resume", "GET"): _api(
        "The chat's live turn from its start as a UI message stream; 204 when none.",
        {200: _SSE, 204: None},
        problems=(404,),
    ),
    ("agents.agents_run", "POST"): _api(
        "One Agents-block run, streamed as NDJSON.",
        {200: _NDJSON},
        body=json_content(AgentsRunRequest),
        problems=(503,),
        query={},
    ),
    ("agents.list_run_files", "GET"): _api(
        "The files a run wrote back, oldest first.",
        {200: json_content(BagFileList)},
        problems=(404,),
    ),
    ("agents.download_run_file", "GET"): _api(
        "A written-back file's bytes, as a download.", {200: _BYTES}, problems=(404,)
    ),
    ("agents.put_environment", "PUT"): _api(
        "Create or replace a workflow's environment.",
        {200: json_content(Environment)},
        body=json_content(EnvironmentRequest),
        query={},
    ),
    ("agents.get_environment", "GET"): _api(
        "A workflow's environment.", {200: json_content(Environment)}, problems=(404,)
    ),
    ("assistant_push.vapid_public_key", "GET"): _api(
        "The applicationServerKey to subscribe with (404: Web Push not configured).",
        {200: json_content(VapidKey)},
        problems=(404,),
        query={},
    ),
    ("assistant_push.subscribe", "POST"): _api(
        "Register a device for alerts.",
        {201: json_content(PushSubscription)},
        body=json_content(SubscribeRequest),
        problems=(409,),
        query={},
    ),
    ("assistant_push.list_subscriptions", "GET"): _api(
        "The workspace's devices, oldest first.", {200: json_content(SubscriptionList)}
    ),
    ("assistant_push.unsubscribe", "DELETE"): _api(
        "Forget a device.", {204: None}, problems=(404,)
    ),
    ("assistant_push_ack.ack", "POST"): _api(
        "A device saw or opened an alert.",
        {204: None},
        body=json_content(AckRequest),
        problems=(404,),
        query={},
    ),
    ("sandbox_callbacks.healthz", "GET"): Operation(
        "That the public URL reaches a chat backend.", {200: json_content(CallbacksHealth)}
    ),
    ("sandbox_callbacks.env", "GET"): Operation(
        "The sandbox's named environment (setup token).",
        {200: json_content(EnvResponse)},
        security=_CALLBACK,
    ),
    ("sandbox_callbacks.config", "GET"): Operation(
        "The sandbox's agent and turn (run token).",
        {200: json_content(ConfigResponse)},
        security=_CALLBACK,
    ),
    ("sandbox_callbacks.attachment", "GET"): Operation(
        "One of the turn's attached files (run token).",
        {200: _BYTES},
        security=_CALLBACK,
        problems=(404,),
    ),
    ("sandbox_callbacks.results", "POST"): Operation(
        "Files the sandbox writes back (upload token).",
        {201: json_content(ResultsReceipt)},
        security=_CALLBACK,
        body=_MULTIPART,
        problems=(413, 415, 422),
    ),
    ("sandbox_snapshots.missing", "POST"): Operation(
        "Which of these blobs the blob store lacks (upload token).",
        {200: json_content(MissingBlobs)},
        security=_CALLBACK,
        body=json_content(BlobHashes),
    ),
    ("sandbox_snapshots.blobs", "POST"): Operation(
        "A blob pack into the blob store (upload token).",
        {201: json_content(StoredBlobs)},
        security=_CALLBACK,
        body=_BYTES,
        problems=(413, 422),
    ),
    ("sandbox_snapshots.put_snapshot", "PUT"): Operation(
        "The chat's newest workspace snapshot (upload token).",
        {201: json_content(SnapshotReceipt)},
        security=_CALLBACK,
        body=json_content(SnapshotManifest),
        problems=(409,),
    ),
    ("sandbox_snapshots.restore", "POST"): Operation(
        "Blobs of the chat's kept snapshots, as a blob pack (run token).",
        {200: _BYTES},
        security=_CALLBACK,
        body=json_content(BlobHashes),
        problems=(404,),
    ),
    ("chat_readiness.readyz", "GET"): Operation(
        "Readiness: the database, Redis and the runner each checked.",
        {200: json_content(Readiness), 503: json_content(Readiness)},
    ),
    ("chat_health.healthz", "GET"): Operation(
        "Liveness (when no embedded runner serves it).",
        {200: json_content(ChatHealth)},
        problems=(503,),
    ),
}
