"""The ASGI HTTP connection every role's app uses: idle connections close, bodies have a deadline.

:class:`HTTPConnection` (quart-trio's, amended) does not cancel the response on the
``http.disconnect`` Hypercorn queues after the final body message, so keep-alive idle
timers and ``Connection: close`` work; a disconnect before it (the client leaving
mid-response) cancels the response at once. A request body still arriving
``body_timeout`` (Quart's ``BODY_TIMEOUT``) after the request started raises
``RequestTimeout`` (408) in the route. Paths may have body limits of their own
(:data:`BODY_LIMITS`), and handlers that answer some of their requests below Quart
(:data:`RAW_ROUTES`, :class:`RawRoute`). Why: docs/architecture.md, "Connections".
"""

from __future__ import annotations

import math
from typing import Final, Protocol

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, HTTPScope
from quart import Quart
from quart.wrappers import Request
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.exceptions import RequestTimeout

from .fanout import RAW_SEND_EXTENSION

__all__ = ["BODY_LIMITS", "RAW_ROUTES", "HTTPConnection", "RawRoute"]

BODY_LIMITS: Final = "sandstream.body_limits"
"""App config: ``{path prefix: bytes}``, a request body limit of their own for the
paths under a prefix, instead of ``MAX_CONTENT_LENGTH`` (413 above it)."""
RAW_ROUTES: Final = "sandstream.raw_routes"
"""App config: ``{path prefix: RawRoute}``, the handler offered each request under a
prefix before Quart sees it."""


class RawRoute(Protocol):
    """Answers some requests below Quart, for the cost of Quart's request machinery."""

    async def __call__(
        self, app: Quart, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> bool:
        """Answer the request of ``scope`` (True), or leave it to Quart (False), having
        received nothing. Must not raise."""
        ...


class HTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection with a keep-alive path that is never cancelled and
    a deadline on the request body. Set it as ``app.asgi_http_class``.

    Cancellation: a client disconnect before the response is complete cancels the
    route and the response body at once (quart-trio's behaviour); after it, nothing is
    cancelled.
    """

    _response_complete = False

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        raw_routes: dict[str, RawRoute] | None = self.app.config.get(RAW_ROUTES)
        if raw_routes:
            path = self.scope["path"]
            for prefix, route in raw_routes.items():
                if path.startswith(prefix):
                    if await route(self.app, self.scope, receive, send):
                        return
                    break
        # Hypercorn's own send, for the live writes beside ASGI (.fanout)
        self.scope.setdefault("extensions", {})[RAW_SEND_EXTENSION] = {"send": send}

        async def send_noting_the_end(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._response_complete = True
            await send(message)

        await super().__call__(receive, send_noting_the_end)

    async def handle_messages(  # type: ignore[override]
        self, nursery: trio.Nursery, request: Request, receive: ASGIReceiveCallable
    ) -> None:
        timeout = request.body_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            while not request.body._complete.is_set():
                message = await receive()
                if message["type"] == "http.request":
                    request.body.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        request.body.set_complete()
                elif message["type"] == "http.disconnect":
                    self._disconnected(nursery)
                    return
        if deadline.cancelled_caught:
            # Quart's own way to fail a body read in the route (as on overflow): the
            # reader wakes, and its next read raises. (Not marked complete: an ``async
            # for`` over a complete body ends quietly instead of raising.)
            request.body._must_raise = RequestTimeout(
                f"the request body did not arrive within {timeout} seconds"
            )
            request.body._has_data.set()
        while (await receive())["type"] != "http.disconnect":
            pass  # the rest of a body nobody reads any more
        self._disconnected(nursery)

    def _create_request_from_scope(self, send: ASGISendCallable) -> Request:
        request = super()._create_request_from_scope(send)
        limits: dict[str, int] = self.app.config.get(BODY_LIMITS) or {}
        for prefix, limit in limits.items():
            if request.path.startswith(prefix):
                request.body = request.body_class(request.content_length, limit)
                break
        return request

    def _disconnected(self, nursery: trio.Nursery) -> None:
        if not self._response_complete:
            nursery.cancel_scope.cancel()
