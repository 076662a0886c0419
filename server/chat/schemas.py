"""Request bodies of the chat API (camelCase JSON), validated by msgspec on decode."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from sandstream.container.schemas import ChatTurn

__all__ = [
    "AgentsRunRequest",
    "ChatStreamRequest",
    "CreateChatRequest",
    "EnvironmentRequest",
    "Identifier",
]

ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
Identifier = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
"""Workspace, workflow, chat and file ids: 1-200 of ``A-Za-z0-9._:@-``."""


class ChatStreamRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chat/stream``: one user turn.

    No ``chatId`` creates the chat. ``attachmentIds`` name files already uploaded to
    the chat's bag. ``sandboxUrl`` picks a runner (it must be allow-listed).
    """

    workspace_id: Identifier
    message: str
    chat_id: Identifier | None = None
    workflow_id: Identifier | None = None
    attachment_ids: Annotated[list[Identifier], msgspec.Meta(max_length=100)] = msgspec.field(
        default_factory=list
    )
    sandbox_url: str | None = None


class CreateChatRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats``: an empty chat (to upload files before the first turn)."""

    workspace_id: Identifier
    workflow_id: Identifier | None = None
    title: Annotated[str, msgspec.Meta(max_length=200)] | None = None


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
