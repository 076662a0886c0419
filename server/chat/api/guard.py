"""Where the routes find the :class:`~sandstream.server.chat.api.ChatService`, and the API-token
guard."""

from __future__ import annotations

from typing import Final

from quart import Blueprint, Quart, Response, current_app, request

from sandstream.server.http import check_bearer, unauthorized

from .chat_service import ChatService

__all__ = ["CHAT_EXTENSION", "get_service", "require_api_token"]

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
