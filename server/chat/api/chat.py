"""The Assistant API: ``POST /api/assistant/chat/stream``, joining, stopping and
following up a turn, and the chats API (with a chat's files and permission grants;
forking a chat too).

Every route needs the chat API token (``Authorization: Bearer``) and is scoped by
workspace (``workspaceId`` in the body or the query), except ``GET
…/chats/{chatId}/stream``, which also takes a stream token in the query (for a native
``EventSource``, :mod:`~sandstream.server.chat.credentials.stream_tokens`). Errors are
problem JSON (each of :mod:`~sandstream.server.chat.model.errors` says its own).
"""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Blueprint, Response, request

from sandstream.core import PermissionAnswer
from sandstream.server.chat.model import ChatStreamRequest, StreamTokenError, now_ms
from sandstream.server.chat.turns import StartedTurn
from sandstream.server.http import check_bearer, int_query, invalid, json_response, read_json
from sandstream.server.sessions import CursorAheadError, request_cursor

from .bodies import (
    CreateChatRequest,
    ForkRequest,
    MessageRequest,
    PermissionReplyRequest,
    check_id,
    workspace_query,
)
from .downloads import file_response
from .guard import get_service, require_api_token
from .multipart import UploadLimits, receive_files

__all__ = ["chat_blueprint", "check_message", "stream_blueprint"]

chat_blueprint = Blueprint("assistant", __name__, url_prefix="/api/assistant")
require_api_token(chat_blueprint)
stream_blueprint = Blueprint("assistant_stream", __name__, url_prefix="/api/assistant")
"""``GET /chats/{chatId}/stream``: the API token or a stream token (checked by the route)."""

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"


def check_message(text: str) -> Response | None:
    """``422`` for a blank or too long user message, else ``None``."""
    settings = get_service().settings
    if not text.strip():
        return invalid("message must not be blank")
    if len(text) > settings.max_message_chars:
        return invalid(f"message is limited to {settings.max_message_chars} characters")
    return None


def _sse(turn: StartedTurn, after: int | None, *, interrupt_on_disconnect: bool) -> Response:
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    body = get_service().turns.stream_body(
        turn, after=after, scope=scope, interrupt_on_disconnect=interrupt_on_disconnect
    )
    return _sse_response(body, turn)


def _sse_response(body: Any, turn: StartedTurn) -> Response:
    response = Response(body, status=200, content_type=SSE_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.headers["X-Chat-Id"] = turn.record.chat_id
    response.headers["X-Session-Id"] = turn.record.session_id or ""
    response.timeout = None  # Quart's RESPONSE_TIMEOUT would cut the stream
    return response


@chat_blueprint.post("/chat/stream")
async def chat_stream() -> Response:
    """One user turn → ``200 text/event-stream``: start, steps, result/error, done.

    The turn runs as a runner session: a client that leaves does not end it
    (``onDisconnect: "continue"``, the default) unless it asked for
    ``"cancel"``; anyone may join it with ``GET …/chats/{chatId}/stream``.
    """
    service = get_service()
    body = await read_json(ChatStreamRequest, service.settings.max_json_bytes)
    refused = check_message(body.message)
    if refused is not None:
        return refused
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    turn = await service.turns.start(body, scope)
    return _sse(turn, None, interrupt_on_disconnect=body.on_disconnect == "cancel")


def _authorize_stream(workspace_id: str, chat_id: str) -> None:
    """The API token, or a stream token for this chat in ``?token=``."""
    service = get_service()
    if check_bearer(request.headers.get("Authorization"), service.settings.api_token):
        return
    token = request.args.get("token")
    if not token:
        raise StreamTokenError("this stream needs the API token or a stream token (?token=)")
    service.stream_tokens.check(token, workspace_id=workspace_id, chat_id=chat_id, now=now_ms())


@stream_blueprint.get("/chats/<chat_id>/stream")
async def join_stream(chat_id: str) -> Response:
    """Join the chat's running turn after a cursor → SSE; ``204`` when no turn is running.

    Without a cursor the whole running turn (from ``start``); with ``Last-Event-ID``
    (which wins: an ``EventSource`` keeps its URL and adds it on each reconnect) or
    ``?cursor=N``, exactly the frames of the chat's latest turn whose ``id`` is
    greater than N, also when that turn has ended meanwhile: ``204`` once N is its
    ``done``, 422 for a cursor past the turn's last id (:mod:`...sessions.resume`).
    """
    service = get_service()
    workspace_id = workspace_query()
    check_id(chat_id, "chatId")
    _authorize_stream(workspace_id, chat_id)
    cursor = request_cursor(request.args, request.headers)
    turn = await service.turns.latest(workspace_id, chat_id, live=cursor is None)
    if turn is None:
        return Response(b"", status=204)
    if cursor is not None:
        position = await turn.session.position()
        if position.ended and cursor == position.last + 1:  # it saw done: nothing left
            return Response(b"", status=204)
        if cursor > position.last:
            raise CursorAheadError(cursor, position.last + 1 if position.ended else position.last)
        if cursor == position.last and (
            done := await service.turns.done_after_terminal(turn, cursor)
        ):
            return _sse_response(done, turn)  # it saw the terminal, not done
    return _sse(turn, cursor, interrupt_on_disconnect=False)


@chat_blueprint.post("/chats/<chat_id>/stream-token")
async def stream_token(chat_id: str) -> Response:
    """A stream token for ``GET …/chats/{chatId}/stream?token=`` → 201 (EventSource)."""
    service = get_service()
    workspace_id = workspace_query()
    await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    expires_at = now_ms() + int(service.settings.stream_token_ttl * 1000)
    token = service.stream_tokens.mint(workspace_id, chat_id, expires_at)
    url = f"/api/assistant/chats/{chat_id}/stream"
    return json_response({"token": token, "expiresAt": expires_at, "streamUrl": url}, 201)


@chat_blueprint.post("/chats/<chat_id>/interrupt")
async def interrupt(chat_id: str) -> Response:
    """Stop the chat's running turn (the stop button) → 200 with the settled message.

    Returns once the turn is persisted (``status: "interrupted"``) and the chat is
    free: the next turn is accepted at once. ``409`` when no turn runs.
    """
    service = get_service()
    workspace_id = workspace_query()
    message = await service.turns.interrupt(workspace_id, chat_id)
    return json_response({"chatId": chat_id, "message": message})


@chat_blueprint.post("/chats/<chat_id>/messages")
async def follow_up(chat_id: str) -> Response:
    """A message for the running turn's agent → 202 with the user message stored.

    ``409`` when no turn runs (start one with ``POST /chat/stream``).
    """
    service = get_service()
    body = await read_json(MessageRequest, service.settings.max_json_bytes)
    refused = check_message(body.message)
    if refused is not None:
        return refused
    message = await service.turns.send_message(body.workspace_id, chat_id, body.message)
    return json_response({"chatId": chat_id, "message": message}, 202)


@chat_blueprint.post("/chats/<chat_id>/permissions/<request_id>")
async def answer_permission(chat_id: str, request_id: str) -> Response:
    """The user's answer to a permission request of the running turn → 200.

    The first answer wins (across replicas too): ``409`` when the request was answered
    or resolved before, or no turn runs; ``404`` when the running turn never asked it.
    Every viewer sees the outcome as the request's ``resolved`` line in the stream.
    """
    service = get_service()
    workspace_id = workspace_query()
    check_id(request_id, "requestId")
    body = await read_json(PermissionReplyRequest, service.settings.max_json_bytes)
    answer = PermissionAnswer(id=request_id, reply=body.reply)
    await service.turns.answer_permission(workspace_id, chat_id, answer)
    return json_response({"chatId": chat_id, "requestId": request_id, "reply": body.reply})


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
    """The chat, the tokens its turns spent (``usage``) and its messages
    (``PersistedMessage``s, ``seq`` order; ``limit``: last N)."""
    service = get_service()
    workspace_id = workspace_query()
    limit = request.args.get("limit")
    count = None if limit is None else int_query("limit", 0, minimum=1, maximum=100_000)
    chat = await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    messages = await service.store.get_messages(workspace_id, chat_id, limit=count)
    payload: dict[str, Any] = msgspec.to_builtins(chat)
    payload["usage"] = await service.store.chat_usage(workspace_id, chat_id)
    payload["messages"] = messages
    return json_response(payload)


@chat_blueprint.post("/chats/<chat_id>/fork")
async def fork_chat(chat_id: str) -> Response:
    """A new chat from the assistant message ``messageId`` of this one → 201 with the new
    chat: that message and the ones before it copied, and the workspace its turn left
    (the snapshot it saved, else the newest saved before it), so its next turn goes on
    from there. The source may be busy; 404 for no such chat, 422 for a message that is
    not one of its assistant messages, 409 for the running turn's.
    """
    service = get_service()
    workspace_id = workspace_query()
    body = await read_json(ForkRequest, service.settings.max_json_bytes)
    chat = await service.store.fork_chat(workspace_id, chat_id, body.message_id, now=now_ms())
    return json_response(chat, 201)


@chat_blueprint.delete("/chats/<chat_id>")
async def delete_chat(chat_id: str) -> Response:
    """Soft-delete the chat and its bag files → 204 (409 while a turn is in flight)."""
    service = get_service()
    workspace_id = workspace_query()
    await service.store.delete_chat(workspace_id, chat_id, now=now_ms())
    return Response(b"", status=204)


@chat_blueprint.get("/chats/<chat_id>/grants")
async def list_grants(chat_id: str) -> Response:
    """``{"grants": [...]}``: the chat's permission grants, oldest first."""
    service = get_service()
    workspace_id = workspace_query()
    grants = await service.store.list_grants(workspace_id, chat_id)
    return json_response({"grants": grants})


@chat_blueprint.delete("/chats/<chat_id>/grants/<grant_id>")
async def revoke_grant(chat_id: str, grant_id: str) -> Response:
    """Revoke one of the chat's permission grants → 204 (404 for one it does not hold)."""
    service = get_service()
    workspace_id = workspace_query()
    check_id(grant_id, "grantId")
    await service.store.revoke_grant(workspace_id, chat_id, grant_id)
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
    return await file_response(bag_file, service.blobs)
