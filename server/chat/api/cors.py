"""CORS for browser clients on other origins (``--cors-origin``; none by default).

Only the chat API is CORS-enabled: the blueprints :func:`install_cors` is given (the
chat, its streams, the UI stream, agents and workflows). The runner's ``/sessions/*``,
the sandbox callbacks and the web app never answer a preflight or carry CORS headers.

On those routes, once origins are configured, every answer carries ``Vary: Origin``
(it depends on the ``Origin`` header, whether allowed or not), and an answer to a
configured origin (exact match, or ``*`` for any) carries
``Access-Control-Allow-Origin: <that origin>`` (never a wildcard: the API takes
credentials) and the response headers a client reads (``Access-Control-Expose-Headers``).
A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered here,
before authentication: ``204`` with the allowed methods and headers (``Authorization``,
``Content-Type``, ``Last-Event-ID``) for a configured origin, ``403`` problem
(``urn:sandstream:problem:origin-not-allowed``) for any other. Without configured
origins nothing is added and preflights are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from quart import Blueprint, Quart, Response, request

from sandstream.server.http import problem

__all__ = ["ORIGIN_NOT_ALLOWED", "install_cors"]

ALLOWED_METHODS: Final = "GET, POST, PUT, DELETE, OPTIONS"
ALLOWED_HEADERS: Final = "Authorization, Content-Type, Last-Event-ID"
EXPOSED_HEADERS: Final = "X-Chat-Id, X-Session-Id, Retry-After, Location"
MAX_AGE: Final = "600"
ORIGIN_NOT_ALLOWED: Final = "urn:sandstream:problem:origin-not-allowed"


def install_cors(app: Quart, origins: frozenset[str], blueprints: Iterable[Blueprint]) -> None:
    """Answer preflights and add CORS headers on ``app``'s routes of ``blueprints``."""
    enabled = frozenset(blueprint.name for blueprint in blueprints)

    def applies() -> bool:
        return request.blueprint in enabled

    def allowed(origin: str | None) -> bool:
        return origin is not None and (origin in origins or "*" in origins)

    @app.before_request
    async def _preflight() -> Response | None:
        if not applies():
            return None
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        origin = request.headers.get("Origin")
        if not allowed(origin):
            return problem(
                403,
                "Origin not allowed",
                f"CORS is not enabled for {origin!r}",
                type=ORIGIN_NOT_ALLOWED,
            )
        response = Response(b"", status=204)
        response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
        response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        response.headers["Access-Control-Max-Age"] = MAX_AGE
        return response

    @app.after_request
    async def _headers(response: Response) -> Response:
        if not origins or not applies():
            return response
        response.vary.add("Origin")
        origin = request.headers.get("Origin")
        if allowed(origin):
            assert origin is not None
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        return response
