"""CORS for browser clients on other origins (``--cors-origin``; none by default).

For a request whose ``Origin`` is one of the configured origins (exact match, or
``*`` for any), every answer carries ``Access-Control-Allow-Origin: <that origin>``
(never a wildcard: the API takes credentials), ``Vary: Origin`` and the response
headers a client reads (``Access-Control-Expose-Headers``). A preflight (``OPTIONS``
with ``Access-Control-Request-Method``) is answered here, before any route or
authentication: ``204`` with the allowed methods and headers (``Authorization``,
``Content-Type``, ``Last-Event-ID``) for a configured origin, ``403`` problem for
any other. Without configured origins nothing is added and preflights are refused.
"""

from __future__ import annotations

from typing import Final

from quart import Quart, Response, request

from sandstream.server.http.problems import problem

__all__ = ["install_cors"]

ALLOWED_METHODS: Final = "GET, POST, PUT, DELETE, OPTIONS"
ALLOWED_HEADERS: Final = "Authorization, Content-Type, Last-Event-ID"
EXPOSED_HEADERS: Final = "X-Chat-Id, X-Session-Id, Retry-After, Location"
MAX_AGE: Final = "600"


def install_cors(app: Quart, origins: frozenset[str]) -> None:
    """Answer preflights and add CORS headers on ``app`` for ``origins``."""

    def allowed(origin: str | None) -> bool:
        return origin is not None and (origin in origins or "*" in origins)

    @app.before_request
    async def _preflight() -> Response | None:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        origin = request.headers.get("Origin")
        if not allowed(origin):
            return problem(403, "Origin not allowed", f"CORS is not enabled for {origin!r}")
        response = Response(b"", status=204)
        response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
        response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        response.headers["Access-Control-Max-Age"] = MAX_AGE
        return response

    @app.after_request
    async def _headers(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if allowed(origin):
            assert origin is not None
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
            response.headers.add("Vary", "Origin")
        return response
