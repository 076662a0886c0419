"""What a client asks the chat for, as decoded from a JSON body (camelCase, validated by
msgspec on decode: a body that does not fit is refused before anything starts): a chat
turn (:class:`ChatStreamRequest`) and an Agents-block run (:class:`AgentsRunRequest`),
and the ids they are made of."""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from sandstream.core import ChatTurn

__all__ = ["ID_PATTERN", "AgentsRunRequest", "ChatStreamRequest", "Identifier", "Title"]

ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}\Z"
"""``\\Z``, not ``$``: ``$`` also matches before a trailing newline (``"ws1\\n"``)."""
Identifier = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
"""Workspace, workflow, chat and file ids: 1-200 of ``A-Za-z0-9._:@-``, the first one
a letter or digit."""
Title = Annotated[str, msgspec.Meta(max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]*\Z")]
"""A chat title: at most 200 characters, none of them a control character."""


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


class AgentsRunRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/agents/run``: a workflow's Agents-block run (no chat)."""

    workspace_id: Identifier
    prompt: str
    workflow_id: Identifier | None = None
    conversation: Annotated[list[ChatTurn], msgspec.Meta(max_length=100)] = msgspec.field(
        default_factory=list
    )
    sandbox_url: str | None = None
