"""Where the routes find the :class:`~sandstream.server.chat.api.ChatService`, the API-token
guard, and the check of a sandbox callback's one-time token that does not consume it."""

from __future__ import annotations

from typing import Final

from quart import Blueprint, Quart, Response, current_app, request

from sandstream.server.chat.credentials import bearer_token, hash_token
from sandstream.server.chat.model import DispatchRecord, Purpose, TokenRejectedError, now_ms
from sandstream.server.http import check_bearer, unauthorized

from .chat_service import ChatService

__all__ = ["CHAT_EXTENSION", "checked_dispatch", "get_service", "require_api_token"]

CHAT_EXTENSION: Final = "sandstream.chat"


def get_service(app: Quart | None = None) -> ChatService:
    """The :class:`ChatService` installed on ``app`` (default: the current app)."""
    target = app if app is not None else current_app
    service: ChatService = target.extensions[CHAT_EXTENSION]
    return service


def require_api_token(blueprint: Blueprint) -> None:
    """Answer 401 (problem JSON) to any request of ``blueprint`` without the API token."""

    @blueprint.before_request
    async def _check_api_token() -> Response | None:
        token = get_service().settings.api_token
        if check_bearer(request.headers.get("Authorization"), token):
            return None
        return unauthorized(
            "this API needs the chat API token: Authorization: Bearer <token>", "sandstream"
        )


async def checked_dispatch(purpose: Purpose, session_id: str) -> DispatchRecord:
    """The dispatch whose ``purpose`` token the request carries (``Authorization: Bearer
    <otp>``) for session ``session_id``, checked and not consumed: it holds, redeemed or
    not, until it expires or its turn settles. Raises
    :class:`~sandstream.server.chat.model.TokenRejectedError` (401) otherwise."""
    token = bearer_token(request.headers.get("Authorization"))
    if token is None:
        raise TokenRejectedError(f"no bearer token on a {purpose} callback")
    return await get_service().store.check_token(
        hash_token(token), purpose=purpose, session_id=session_id, now=now_ms()
    )
