"""Stream tokens: short-lived credentials for a native ``EventSource``, scoped to a chat.

``EventSource`` sends no headers, so ``GET /api/assistant/chats/{chatId}/stream``
also accepts ``?token=<stream token>``, minted by ``POST
/api/assistant/chats/{chatId}/stream-token`` (which needs the API token). A token
is ``<payload>.<mac>``: the payload (base64url) names the workspace, the chat and
the expiry (Unix epoch ms); the MAC is HMAC-SHA256 under a key derived from the chat
API token, so every replica sharing that token checks it, and nothing is stored.
A token for one chat opens no other; it works any number of times until it expires
(an ``EventSource`` reconnects with the same URL).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import msgspec

from sandstream.server.chat.model import StreamTokenError, StreamTokenScopeError

__all__ = ["StreamTokens"]


class _Claims(msgspec.Struct, array_like=True):
    workspace_id: str
    chat_id: str
    expires_at: int


class StreamTokens:
    """Mints and checks stream tokens under a key derived from ``api_token``."""

    def __init__(self, api_token: str) -> None:
        self._key = hmac.new(
            api_token.encode("utf-8", "surrogatepass"), b"sandstream stream token", hashlib.sha256
        ).digest()

    def _mac(self, payload: bytes) -> str:
        digest = hmac.new(self._key, payload, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def mint(self, workspace_id: str, chat_id: str, expires_at: int) -> str:
        """A token for ``chat_id`` of ``workspace_id``, valid until ``expires_at`` (ms)."""
        claims = msgspec.json.encode(_Claims(workspace_id, chat_id, expires_at))
        payload = base64.urlsafe_b64encode(claims).rstrip(b"=")
        return f"{payload.decode()}.{self._mac(payload)}"

    def check(self, token: str, *, workspace_id: str, chat_id: str, now: int) -> None:
        """Accept ``token`` for this chat at ``now``, or raise :class:`StreamTokenError`
        (malformed, forged, expired) or :class:`StreamTokenScopeError` (another chat)."""
        payload, _, mac = token.partition(".")
        if not payload or not mac or not hmac.compare_digest(mac, self._mac(payload.encode())):
            raise StreamTokenError("the stream token is not valid")
        try:
            padded = payload + "=" * (-len(payload) % 4)
            claims = msgspec.json.decode(base64.urlsafe_b64decode(padded), type=_Claims)
        except (ValueError, msgspec.DecodeError):
            raise StreamTokenError("the stream token is not valid") from None
        if claims.expires_at <= now:
            raise StreamTokenError("the stream token has expired")
        if claims.workspace_id != workspace_id or claims.chat_id != chat_id:
            raise StreamTokenScopeError("the stream token is for another chat")
