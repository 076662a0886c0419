"""The Assistant API: ``POST /api/assistant/chat/stream`` and the chats API.

Every route needs the chat API token (``Authorization: Bearer``) and is scoped by
workspace (``workspaceId`` in the body or the query). Errors are problem JSON
(:mod:`.errors_http`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
from quart import Blueprint, Response, request

from sandstream.server.http.connection import abort_scope_connection
from sandstream.server.http.problems import invalid
from sandstream.server.http.requests import int_query, json_response, read_json

from .app_state import get_service, require_api_token
from .files import FileBody, file_response
from .ids import now_ms
from .multipart import UploadLimits, receive_files
from .relay import RelayBody
from .schemas import ChatStreamRequest, CreateChatRequest, workspace_query

__all__ = ["chat_blueprint"]

chat_blueprint = Blueprint("assistant", __name__, url_prefix="/api/assistant")
require_api_token(chat_blueprint)

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"


@chat_blueprint.post("/chat/stream")
async def chat_stream() -> Response:
    """One user turn → ``200 text/event-stream``: start, steps, result/error, done."""
    service = get_service()
    settings = service.settings
    body = await read_json(ChatStreamRequest, settings.max_json_bytes)
    if not body.message.strip():
        return invalid("message must not be blank")
    if len(body.message) > settings.max_message_chars:
        return invalid(f"message is limited to {settings.max_message_chars} characters")
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    turn = await service.start_chat_turn(body, scope)
    relay = RelayBody(
        turn,
        ping_interval=settings.ping_interval,
        stall_timeout=settings.stall_timeout,
        abort_client=partial(abort_scope_connection, scope),
    )
    response = Response(relay, status=200, content_type=SSE_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.headers["X-Chat-Id"] = turn.chat_id
    response.headers["X-Session-Id"] = turn.session_id
    response.timeout = None  # Quart's RESPONSE_TIMEOUT would cut the stream
    return response


@chat_blueprint.get("/chats")
async def list_chats() -> Response:
    """``{"chats": [...]}``: the workspace's chats, most recently updated first."""
    service = get_service()
    workspace_id = workspace_query()
    limit = int_query("limit", 100, minimum=1, maximum=service.settings.max_chats_listed)
    chats = await service.store.list_chats(workspace_id, limit=limit, now=now_ms())
    return json_response({"chats": chats})


@chat_blueprint.post("/chats")
async def create_chat() -> Response:
    """An empty chat (to upload files before its first turn) → 201 with the chat."""
    service = get_service()
    body = await read_json(CreateChatRequest, service.settings.max_json_bytes)
    chat = await service.store.create_chat(
        workspace_id=body.workspace_id, workflow_id=body.workflow_id, title=body.title, now=now_ms()
    )
    return json_response(chat, 201)


@chat_blueprint.get("/chats/<chat_id>")
async def get_chat(chat_id: str) -> Response:
    """The chat and its messages (``PersistedMessage``s, ``seq`` order; ``limit``: last N)."""
    service = get_service()
    workspace_id = workspace_query()
    limit = request.args.get("limit")
    count = None if limit is None else int_query("limit", 0, minimum=1, maximum=100_000)
    chat = await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    messages = await service.store.get_messages(workspace_id, chat_id, limit=count)
    payload: dict[str, Any] = msgspec.to_builtins(chat)
    payload["messages"] = messages
    return json_response(payload)


@chat_blueprint.delete("/chats/<chat_id>")
async def delete_chat(chat_id: str) -> Response:
    """Soft-delete the chat and its bag files → 204 (409 while a turn is in flight)."""
    service = get_service()
    workspace_id = workspace_query()
    await service.store.delete_chat(workspace_id, chat_id, now=now_ms())
    return Response(b"", status=204)


@chat_blueprint.post("/chats/<chat_id>/files")
async def upload_files(chat_id: str) -> Response:
    """Upload ``multipart/form-data`` files to the chat's bag → 201 ``{"files": [...]}``."""
    service = get_service()
    settings = service.settings
    workspace_id = workspace_query()
    await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    received = await receive_files(
        request.body,
        request.headers.get("Content-Type"),
        blobs=service.blobs,
        content_length=request.content_length,
        limits=UploadLimits(settings.max_upload_bytes, settings.max_upload_files),
    )
    if not received:
        return invalid("the upload holds no file part")
    files = await service.store.add_uploads(
        workspace_id, chat_id, [r.blob for r in received], now=now_ms()
    )
    return json_response({"files": [f.attachment() for f in files]}, 201)


@chat_blueprint.get("/chats/<chat_id>/files")
async def list_files(chat_id: str) -> Response:
    """``{"files": [...]}``: the chat's bag (uploads and results), oldest first."""
    service = get_service()
    workspace_id = workspace_query()
    files = await service.store.list_files(workspace_id, chat_id)
    return json_response({"files": files})


@chat_blueprint.get("/chats/<chat_id>/files/<file_id>")
async def download_file(chat_id: str, file_id: str) -> Response:
    """A bag file's bytes, as a download (``Content-Disposition: attachment``)."""
    service = get_service()
    workspace_id = workspace_query()
    bag_file = await service.store.get_file(workspace_id, chat_id, file_id)
    return await file_response(bag_file, FileBody(service.blobs.path(bag_file.sha256)))
