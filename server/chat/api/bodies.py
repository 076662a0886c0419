"""The chat API's other request bodies (camelCase JSON, validated by msgspec on decode)
and its id checks; a bad id is a 422 problem."""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

from sandstream.server.chat.model import ID_PATTERN, Identifier, Title
from sandstream.server.http import BadRequestError, invalid, require_query

__all__ = [
    "CreateChatRequest",
    "EnvironmentRequest",
    "ForkRequest",
    "MessageRequest",
    "PermissionReplyRequest",
    "check_id",
    "workspace_query",
]

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


class MessageRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats/{chatId}/messages``: a message for the running turn."""

    workspace_id: Identifier
    message: str


class PermissionReplyRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/assistant/chats/{chatId}/permissions/{requestId}``: the user's answer."""

    reply: Literal["once", "always", "reject"]


class CreateChatRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats``: an empty chat (to upload files before the first turn)."""

    workspace_id: Identifier
    workflow_id: Identifier | None = None
    title: Title | None = None


class ForkRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/assistant/chats/{chatId}/fork``: the assistant message to fork from."""

    message_id: Identifier


class EnvironmentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``PUT /api/workflows/{workflowId}/environment``: the workflow's named environment."""

    workspace_id: Identifier
    vars: dict[str, str] = msgspec.field(default_factory=dict)
    setup_script: str = ""
