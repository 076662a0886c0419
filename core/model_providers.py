"""What a model gateway knows of the providers besides usage: which requests are model
calls, and the error bodies the providers answer with.

:func:`protocol_of` names the protocol of a request by its method and path (a route
that generates tokens) or gives ``None`` (model lists, token counting, anything else);
:func:`provider_error` is the JSON body a provider answers an error status with, in
its own shape, so that an agent's SDK reads a gateway's refusal as it reads the
provider's. Pure functions; bad input gives ``None`` or a generic error type, never
an exception.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from .envelope import ModelProtocol

__all__ = ["protocol_of", "provider_error"]

# The path's end, after any prefix a base URL adds (a proxy's "/anthropic", Azure's
# "/openai/deployments/{name}", Vertex AI's "/v1/projects/…/publishers/google").
_ROUTES: Final = (
    (re.compile(r"/v1/messages"), "anthropic"),
    (re.compile(r"/chat/completions"), "chat"),
    (re.compile(r"/responses"), "responses"),
    (re.compile(r"/models/[^/:]+:(?:generateContent|streamGenerateContent)"), "gemini"),
)

_ANTHROPIC_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# OpenAI's (type, code) per status; a spent quota is its own 429 (insufficient_quota),
# which OpenAI's clients do not retry.
_OPENAI_TYPES: Final = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
_OPENAI_QUOTA: Final = ("insufficient_quota", "insufficient_quota")
# google.rpc.Code names per HTTP status (AIP-193).
_GOOGLE_STATUSES: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def protocol_of(method: str, path: str) -> ModelProtocol | None:
    """The protocol of a model call ``method path`` (the path as the provider sees it,
    a query string allowed), or ``None`` for a request that generates no tokens.

    ``POST …/v1/messages``: ``anthropic``; ``POST …/chat/completions``: ``chat``;
    ``POST …/responses``: ``responses``; ``POST …/models/{model}:generateContent`` or
    ``:streamGenerateContent``: ``gemini``. Everything else (``GET`` model lists,
    ``…/messages/count_tokens``, ``…:countTokens``, a stored response's ``GET``) is
    ``None``.
    """
    if method.upper() != "POST":
        return None
    route = path.partition("?")[0].rstrip("/")
    for pattern, protocol in _ROUTES:
        match = pattern.search(route)
        if match is not None and match.end() == len(route):
            return protocol  # type: ignore[return-value]
    return None


def provider_error(
    protocol: ModelProtocol, status: int, message: str, *, quota: bool = False
) -> bytes:
    """The JSON error body ``protocol``'s provider answers ``status`` with, ``message``
    its human-readable text.

    Anthropic: ``{"type": "error", "error": {"type": …, "message": …}}`` (401
    ``authentication_error``, 429 ``rate_limit_error``, 500 ``api_error``, 503 and 529
    ``overloaded_error``). OpenAI (``chat``, ``responses``): ``{"error": {"message",
    "type", "param", "code"}}`` (401 ``invalid_api_key``, 429 ``rate_limit_exceeded``,
    or with ``quota`` ``insufficient_quota``, 500 and 503 ``server_error``). Gemini:
    ``{"error": {"code": status, "message", "status"}}`` (401 ``UNAUTHENTICATED``,
    429 ``RESOURCE_EXHAUSTED``, 500 ``INTERNAL``, 503 ``UNAVAILABLE``). A status not
    listed gets the provider's generic type for its class (4xx or 5xx).
    """
    body: dict[str, Any]
    if protocol == "anthropic":
        kind = _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        body = {"type": "error", "error": {"type": kind, "message": message}}
    elif protocol == "gemini":
        name = _GOOGLE_STATUSES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
        body = {"error": {"code": status, "message": message, "status": name}}
    else:
        fallback = ("server_error", None) if status >= 500 else ("invalid_request_error", None)
        kind, code = (
            _OPENAI_QUOTA if quota and status == 429 else _OPENAI_TYPES.get(status, fallback)
        )
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return msgspec.json.encode(body)
