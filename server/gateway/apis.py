"""The provider APIs the gateway forwards: which paths, how a client presents its key,
how the real key is put in its place, and each provider's own 401 answer.

A request's path is ``/{provider}/{rest}``; ``rest`` is what the client appended to its
base URL, and goes to the provider's base URL the same way. Only the paths the agents
use are forwarded (:data:`ALLOWED`); others get the provider's 404. Pure functions over
bytes; bad input (a path of no provider, a header that is not Latin-1) is answered, never
raised.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Final

import msgspec

from sandstream.core import Provider, provider_by_name

__all__ = [
    "ALLOWED",
    "HOP_BY_HOP",
    "Route",
    "error_body",
    "presented_key",
    "response_headers",
    "route",
    "upstream_request",
]

ALLOWED: Final[dict[str, tuple[tuple[str, re.Pattern[str]], ...]]] = {
    "anthropic": (
        ("POST", re.compile(r"v1/messages(/count_tokens)?")),
        ("GET", re.compile(r"v1/models(/[^/]+)?")),
    ),
    "openai": (
        ("POST", re.compile(r"chat/completions|responses")),
        ("GET", re.compile(r"models(/[^/]+)?")),
    ),
    "gemini": (
        (
            "POST",
            re.compile(
                r"v1(beta|alpha)?/models/[^/:]+:(generateContent|streamGenerateContent|countTokens)"
            ),
        ),
        ("GET", re.compile(r"v1(beta|alpha)?/models(/[^/:]+)?")),
    ),
}
"""Per provider, the (method, path after its prefix) pairs forwarded."""

HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Headers of one connection (RFC 9110 7.6.1), never forwarded; nor those that
``Connection`` names."""

_KEY_HEADERS: Final = frozenset({b"authorization", b"x-api-key", b"x-goog-api-key"})

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Route:
    """A request's provider and the path and query (raw, without ``?``) it has upstream."""

    provider: Provider
    rest: str
    query: bytes


def route(target: bytes) -> Route | None:
    """The route of request-target ``target``; ``None`` if it names no provider."""
    raw_path, _, query = target.partition(b"?")
    path = raw_path.decode("latin-1")
    name, _, rest = path.lstrip("/").partition("/")
    provider = provider_by_name(name)
    return None if provider is None else Route(provider, rest, query)


def allowed(method: bytes, found: Route) -> bool:
    """Whether ``method`` on ``found``'s path is one the gateway forwards."""
    name = method.decode("latin-1").upper()
    rest = urllib.parse.unquote(found.rest)
    return any(
        name == verb and pattern.fullmatch(rest) for verb, pattern in ALLOWED[found.provider.name]
    )


def presented_key(provider: Provider, headers: Headers, query: bytes) -> str | None:
    """The key the client presents, as ``provider``'s clients send it: ``x-api-key`` or
    ``Authorization: Bearer`` (Anthropic), ``Authorization: Bearer`` (OpenAI),
    ``x-goog-api-key`` or ``?key=`` (Gemini)."""
    found = {name.lower(): value for name, value in headers if name.lower() in _KEY_HEADERS}
    bearer = found.get(b"authorization", b"")
    token = bearer[7:].strip() if bearer[:7].lower() == b"bearer " else b""
    if provider.name == "anthropic":
        given = found.get(b"x-api-key") or token
    elif provider.name == "openai":
        given = token
    else:
        given = found.get(b"x-goog-api-key") or _query_key(query)
    return given.decode("latin-1") if given else None


def _query_key(query: bytes) -> bytes:
    for part in query.split(b"&"):
        if part.startswith(b"key="):
            return urllib.parse.unquote_to_bytes(part[4:])
    return b""


def upstream_request(
    found: Route, headers: Headers, key: str, base_url: str
) -> tuple[str, Headers]:
    """The upstream URL and headers of a request: the client's headers less the
    connection's own, ``Host`` and its key headers, with the real ``key`` where the
    client put its own (a Gemini ``?key=`` is replaced in place); ``Content-Length``
    kept, so a body's framing stays the client's."""
    connection_named = _connection_named(headers)
    out: Headers = []
    kinds: set[bytes] = set()
    bearer = False
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in connection_named:
            continue
        if lower in _KEY_HEADERS:
            kinds.add(lower)
            bearer = bearer or (lower == b"authorization" and value[:7].lower() == b"bearer ")
            continue
        if lower == b"host" or lower == b"expect":  # a 100 Continue was the gateway's to send
            continue
        out.append((name, value))
    secret = key.encode("latin-1")
    query = found.query
    provider = found.provider.name
    if (provider == "anthropic" and b"x-api-key" in kinds) or (
        provider == "gemini" and (b"x-goog-api-key" in kinds)
    ):
        out.append((b"x-api-key" if provider == "anthropic" else b"x-goog-api-key", secret))
    elif provider == "gemini" and _query_key(query):
        query = b"&".join(
            b"key=" + urllib.parse.quote_from_bytes(secret).encode() if p.startswith(b"key=") else p
            for p in query.split(b"&")
        )
    elif bearer or provider == "openai":
        out.append((b"authorization", b"Bearer " + secret))
    url = f"{base_url}/{found.rest}"
    if query:
        url += "?" + query.decode("latin-1")
    return url, out


def response_headers(headers: Headers) -> Headers:
    """The upstream answer's headers less the connection's own (the body's framing is
    redone for the client: ``Content-Length`` kept, ``Transfer-Encoding`` not)."""
    connection_named = _connection_named(headers)
    return [
        (name, value)
        for name, value in headers
        if name.lower() not in HOP_BY_HOP and name.lower() not in connection_named
    ]


def _connection_named(headers: Headers) -> set[bytes]:
    named: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return named


def error_body(provider: Provider, status: int, message: str) -> bytes:
    """``provider``'s own error body for ``status`` (401 or 404): Anthropic's
    ``{"type":"error","error":{"type",...}}``, OpenAI's ``{"error":{"message","type",
    "code"}}``, Gemini's ``{"error":{"code","message","status"}}``."""
    unauthorized = status == 401
    if provider.name == "anthropic":
        kind = "authentication_error" if unauthorized else "not_found_error"
        body: object = {"type": "error", "error": {"type": kind, "message": message}}
    elif provider.name == "openai":
        code = "invalid_api_key" if unauthorized else "unknown_url"
        body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    else:
        state = "UNAUTHENTICATED" if unauthorized else "NOT_FOUND"
        body = {"error": {"code": status, "message": message, "status": state}}
    return msgspec.json.encode(body)
