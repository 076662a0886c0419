"""Request bodies (camelCase JSON, validated by msgspec on decode) and ids of the chat API."""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

import msgspec

from sandstream.core.schemas import ChatTurn
from sandstream.server.http.errors import BadRequestError
from sandstream.server.http.problems import invalid
from sandstream.server.http.requests import require_query

__all__ = [
    "AgentsRunRequest",
    "ChatStreamRequest",
    "CreateChatRequest",
    "EnvironmentRequest",
    "Identifier",
    "MessageRequest",
    "Title",
    "check_id",
    "workspace_query",
]

ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}\Z"
"""``\\Z``, not ``$``: ``$`` also matches before a trailing newline (``"ws1\\n"``)."""
Identifier = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
"""Workspace, workflow, chat and file ids: 1-200 of ``A-Za-z0-9._:@-``, the first one
a letter or digit."""
Title = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]*\Z")]
"""A chat title: at most 200 characters, none of them a control character."""

_ID: Final = re.compile(ID_PATTERN)


def check_id(value: str, name: str) -> str:
    """``value`` if it is an :data:`Identifier`; :class:`BadRequestError` (422) if not."""
    if _ID.fullmatch(value) is None:
        raise BadRequestError(
            invalid(f"{name} must be 1-200 of A-Za-z0-9._:@- (starting with a letter or digit)")
        )
    return value


def workspace_query() -> str:
    """The request's ``workspaceId`` query parameter, checked by :func:`check_id`."""
    return check_id(require_query("workspaceId"), "workspaceId")


class ChatStreamRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chat/stream``: one user turn.

    No ``chatId`` creates the chat. ``attachmentIds`` name files already uploaded to
    the chat's bag. ``sandboxUrl`` picks a runner (it must be allow-listed).
    ``onDisconnect``: ``"continue"`` (a client that leaves does not end the turn) or
    ``"cancel"`` (it interrupts the turn's session).
    """

    workspace_id: Identifier
    message: str
    chat_id: Identifier | None = None
    workflow_id: Identifier | None = None
    attachment_ids: Annotated[list[Identifier], msgspec.Meta(max_length=100)] = msgspec.field(
        default_factory=list
    )
    sandbox_url: str | None = None
    on_disconnect: Literal["continue", "cancel"] = "continue"


class MessageRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats/{chatId}/messages``: a message for the running turn."""

    workspace_id: Identifier
    message: str


class CreateChatRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats``: an empty chat (to upload files before the first turn)."""

    workspace_id: Identifier
    workflow_id: Identifier | None = None
    title: Title | None = None


class AgentsRunRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/agents/run``: a workflow's Agents-block run (no chat)."""

    workspace_id: Identifier
    prompt: str
    workflow_id: Identifier | None = None
    conversation: Annotated[list[ChatTurn], msgspec.Meta(max_length=100)] = msgspec.field(
        default_factory=list
    )
    sandbox_url: str | None = None


class EnvironmentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``PUT /api/workflows/{workflowId}/environment``: the workflow's named environment."""

    workspace_id: Identifier
    vars: dict[str, str] = msgspec.field(default_factory=dict)
    setup_script: str = ""
