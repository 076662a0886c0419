"""The chat turn for the Vercel AI SDK's ``useChat``: its request body in, the UI message
stream out (:class:`~sandstream.core.UIMessageStream`).

``POST /api/assistant/ui/chat`` starts a turn as ``POST /api/assistant/chat/stream``
does, from ``DefaultChatTransport``'s body; ``GET /api/assistant/ui/chat/{chatId}/stream``
(the transport's resume) follows the chat's live turn from its ``start``, ``204`` when
none is live. The client states its ``ai`` major version in ``X-AI-SDK-Version`` (5
when absent; not an integer: 422): it decides which chunks of a permission request
it gets. Both need the chat API token and ``workspaceId``; bad input is problem JSON
(docs/chat.md, "AI SDK (useChat)"). A client that leaves never ends the turn.
"""

from __future__ import annotations

import re
from functools import partial
from types import TracebackType
from typing import Annotated, Any, Final, Literal, Protocol
from urllib.parse import unquote, urlencode, urlsplit

import msgspec
from quart import Blueprint, Response, request
from quart.wrappers.response import ResponseBody

from sandstream.core import UI_MESSAGE_STREAM_HEADERS, UIMessageStream
from sandstream.server.chat.model import ChatStreamRequest, Identifier
from sandstream.server.chat.turns import StartedTurn
from sandstream.server.http import BadRequestError, invalid, read_json

from .bodies import check_id, workspace_query
from .chat import check_message
from .guard import get_service, require_api_token

__all__ = [
    "AI_VERSION_HEADER",
    "ChatSSEBody",
    "UIChatRequest",
    "UIMessageStreamBody",
    "bag_file_url",
    "ui_blueprint",
    "ui_stream_response",
]

ui_blueprint = Blueprint("assistant_ui", __name__, url_prefix="/api/assistant/ui")
require_api_token(ui_blueprint)

_BAG_FILE_PATH: Final = re.compile(r"/api/assistant/chats/([^/]+)/files/([^/]+)\Z")
AI_VERSION_HEADER: Final = "X-AI-SDK-Version"
_AI_VERSION: Final = re.compile(r"[1-9][0-9]{0,2}")


class UIMessagePart(msgspec.Struct, rename="camel", kw_only=True):
    """A part of a ``UIMessage``: only ``text`` and ``file`` parts are read."""

    type: str
    text: str | None = None
    url: str | None = None


class UIMessage(msgspec.Struct, kw_only=True):
    """A ``UIMessage`` as ``useChat`` sends it (``metadata`` and the rest ignored)."""

    id: str
    role: Literal["system", "user", "assistant"]
    parts: Annotated[list[UIMessagePart], msgspec.Meta(max_length=1000)]


class UIChatRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/ui/chat``: ``DefaultChatTransport``'s body.

    ``workflowId``, ``sandboxUrl`` and ``workspaceId`` may come from the transport's
    ``body`` option; ``messageId`` (an edited or regenerated message) is refused.
    """

    id: Identifier
    messages: Annotated[list[UIMessage], msgspec.Meta(min_length=1, max_length=100_000)]
    trigger: str = "submit-message"
    message_id: str | None = None
    workspace_id: Identifier | None = None
    workflow_id: Identifier | None = None
    sandbox_url: str | None = None


@ui_blueprint.post("/chat")
async def ui_chat() -> Response:
    """One user turn → ``200`` UI message stream: start, tool parts, text, finish, [DONE]."""
    service = get_service()
    settings = service.settings
    ai_version = _ai_version()
    body = await read_json(UIChatRequest, settings.max_json_bytes)
    if body.trigger != "submit-message" or body.message_id is not None:
        return invalid(
            "only new messages can be sent (trigger 'submit-message' without messageId): "
            "the chat's history is the server's and is never rewritten"
        )
    last = body.messages[-1]
    if last.role != "user":
        return invalid(f"the last message must be the user's, not the {last.role}'s")
    message = "\n\n".join(p.text for p in last.parts if p.type == "text" and p.text is not None)
    refused = check_message(message)
    if refused is not None:
        return refused
    attachment_ids = [_bag_file_id(p.url, body.id) for p in last.parts if p.type == "file"]
    turn_request = ChatStreamRequest(
        workspace_id=body.workspace_id or workspace_query(),
        message=message,
        chat_id=body.id,
        workflow_id=body.workflow_id,
        attachment_ids=attachment_ids,
        sandbox_url=body.sandbox_url,
    )
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    turn = await service.turns.start(turn_request, scope)
    response = ui_stream_response(
        service.turns.stream_body(turn, after=None, scope=scope, live_writes=False),
        turn,
        turn_request.workspace_id,
        ai_version,
    )
    response.headers["X-Session-Id"] = turn.record.session_id or ""
    return response


def ui_stream_response(
    source: ChatSSEBody, turn: StartedTurn, workspace_id: str, ai_version: int = 5
) -> Response:
    """``200``: the chat SSE of ``source`` as the UI message stream of ``turn``'s message,
    for a client of ``ai`` ``ai_version``.

    ``source`` is read from its first frame (``start``): a resume follows the live
    turn from its beginning, so the client rebuilds the whole message.
    """
    chat_id = turn.record.chat_id
    message_id = turn.record.assistant_message_id
    stream = UIMessageStream(
        message_id,
        file_url=partial(bag_file_url, workspace_id, chat_id),
        ai_version=ai_version,
    )
    response = Response(UIMessageStreamBody(source, stream), status=200)
    response.headers.update(UI_MESSAGE_STREAM_HEADERS)
    response.headers["X-Chat-Id"] = chat_id
    response.timeout = None  # Quart's RESPONSE_TIMEOUT would cut the stream
    return response


@ui_blueprint.get("/chat/<chat_id>/stream")
async def ui_chat_resume(chat_id: str) -> Response:
    """The chat's live turn from its ``start``, as a UI message stream; ``204`` when
    nothing is live."""
    service = get_service()
    workspace_id = workspace_query()
    check_id(chat_id, "chatId")
    ai_version = _ai_version()
    turn = await service.turns.latest(workspace_id, chat_id, live=True)
    if turn is None:
        return Response(b"", status=204)
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    return ui_stream_response(
        service.turns.stream_body(turn, after=None, scope=scope, live_writes=False),
        turn,
        workspace_id,
        ai_version,
    )


def _ai_version() -> int:
    """The ``ai`` major version the client states (``X-AI-SDK-Version``; 5 when it does
    not); :class:`BadRequestError` (422) for a value that is not one."""
    raw = request.headers.get(AI_VERSION_HEADER, "").strip()
    if not raw:
        return 5
    if _AI_VERSION.fullmatch(raw) is None:
        raise BadRequestError(
            invalid(
                f"{AI_VERSION_HEADER} must be the major version of ai (5, 6, 7…), got {raw[:20]!r}"
            )
        )
    return int(raw)


def bag_file_url(workspace_id: str, chat_id: str, file_id: str) -> str:
    """The path a bag file is downloaded from (and a file part may name)."""
    return (
        f"/api/assistant/chats/{chat_id}/files/{file_id}?{urlencode({'workspaceId': workspace_id})}"
    )


def _bag_file_id(url: str | None, chat_id: str) -> str:
    """The id of the bag file a file part's ``url`` names (absolute or relative:
    ``…/api/assistant/chats/{chatId}/files/{fileId}``, query ignored); 422 otherwise."""
    match = _BAG_FILE_PATH.search(urlsplit(url or "").path)
    if match is None or unquote(match[1]) != chat_id:
        raise _bad_file_part(url)
    return check_id(unquote(match[2]), "a file part's file id")


def _bad_file_part(url: str | None) -> BadRequestError:
    shown = (url or "")[:80]
    return BadRequestError(
        invalid(
            "a file part's url must be a file of this chat's bag "
            f"(/api/assistant/chats/{{chatId}}/files/{{fileId}}, uploaded first), not {shown!r}"
        )
    )


class ChatSSEBody(Protocol):
    """A response body of the chat's SSE
    (:meth:`~sandstream.server.chat.turns.ChatTurns.stream_body`)."""

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def __anext__(self) -> bytes: ...


class UIMessageStreamBody(ResponseBody):
    """A chat SSE response body (:meth:`~sandstream.server.chat.turns.ChatTurns.stream_body`),
    translated by ``stream``: the source's frames go out as UI message stream frames.

    The source stays in charge of the turn: entering, leaving (also on cancellation)
    and every read are its own, so a client that leaves or stops reading is handled
    as on the chat's own stream. Reading stops at the translator's ``[DONE]``.
    """

    def __init__(self, source: ChatSSEBody, stream: UIMessageStream) -> None:
        self._source = source
        self._stream = stream

    async def __aenter__(self) -> UIMessageStreamBody:
        await self._source.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._source.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> UIMessageStreamBody:
        return self

    async def __anext__(self) -> bytes:
        """The next UI frames (a ``: ping`` passes through as one)."""
        stream = self._stream
        while not stream.finished:
            try:
                chunk = await self._source.__anext__()
            except StopAsyncIteration:
                out = stream.close()
            else:
                out = stream.feed(chunk)
            if out:
                return out
        raise StopAsyncIteration
