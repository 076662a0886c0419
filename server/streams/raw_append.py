"""Plain appends answered below Quart: ``POST /v1/stream/{path}`` straight from ASGI.

An append is small and frequent, and Quart's request machinery (a request context,
routing, hooks, two tasks per request) costs more CPU than the append itself.
:class:`RawAppends` is offered every request under the streams' prefix by the app's
HTTP connection (:data:`~sandstream.server.http.asgi.RAW_ROUTES`). It answers a
``POST`` that carries the token and a ``Content-Length`` within the limit, to a path
the blueprint would take as it is: it reads the body, runs :func:`.answers.append`,
and sends what the blueprint would (a protocol error's own problem, the common
headers), timed in the app's request metrics. Everything else (other
methods, no token, a chunked or too large body, a reserved path, one Quart would
redirect) is left to Quart untouched.

Bad input: a body slower than the app's ``BODY_TIMEOUT`` gets 408, an unexpected error
is logged and gets 500, as from Quart. Cancellation: a client that leaves before its
body arrived gets nothing; an append once queued is stored whether its client still
waits or not (:mod:`.store`).
"""

from __future__ import annotations

import math
import time

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGISendCallable,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    HTTPScope,
)
from quart import Quart, Response
from quart.utils import encode_headers
from werkzeug.datastructures import Headers
from werkzeug.exceptions import RequestTimeout

from sandstream.server.errors import ProblemError
from sandstream.server.http import (
    METRICS_EXTENSION,
    AppMetrics,
    check_bearer,
    error_problem,
    http_problem,
    route_template,
    unexpected_problem,
)

from .answers import append, with_common_headers
from .store import StreamStore

__all__ = ["RawAppends"]


class RawAppends:
    """The appends to ``store`` under ``prefix`` (see the module docstring): ``token``
    is the runner's, ``reserved`` the path prefixes only the server writes,
    ``max_bytes`` the largest body; ``route`` is the blueprint's rule (the requests'
    metrics label)."""

    def __init__(
        self,
        store: StreamStore,
        token: str | None,
        reserved: tuple[str, ...],
        prefix: str,
        max_bytes: int,
        *,
        route: str,
    ) -> None:
        self._store = store
        self._token = token
        self._reserved = reserved
        self._prefix = prefix
        self._max_bytes = max_bytes
        self._route = route_template(route)

    async def __call__(
        self, app: Quart, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> bool:
        """Answer a plain append (True), or leave the request to Quart (False)."""
        started = time.perf_counter()
        path = scope["path"]
        if (
            scope["method"] != "POST"
            or scope.get("root_path")
            or len(path) <= len(self._prefix)
            or "//" in path
            or path.startswith(self._reserved)
        ):
            return False
        headers = Headers()
        for name, value in scope["headers"]:
            headers.add(name.decode("latin1").title(), value.decode("latin1"))
        length = headers.get("Content-Length")
        if (
            not check_bearer(headers.get("Authorization"), self._token)
            or "Transfer-Encoding" in headers
            or length is None
            or not length.isdigit()
            or int(length) > self._max_bytes
        ):
            return False
        body = await _body(receive, app.config["BODY_TIMEOUT"])
        if body is None:
            return True  # the client left
        response = await self._answer(app, path, headers, body)
        metrics: AppMetrics | None = app.extensions.get(METRICS_EXTENSION)
        if metrics is not None:
            status = f"{response.status_code // 100}xx"
            metrics.request_seconds.labels(self._route, status).observe(
                time.perf_counter() - started
            )
        await send(
            HTTPResponseStartEvent(
                type="http.response.start",
                status=response.status_code,
                headers=encode_headers(response.headers),
            )
        )
        data = await response.get_data(as_text=False)
        await send(HTTPResponseBodyEvent(type="http.response.body", body=data, more_body=False))
        return True

    async def _answer(
        self, app: Quart, path: str, headers: Headers, body: bytes | RequestTimeout
    ) -> Response:
        try:
            if isinstance(body, RequestTimeout):
                response = http_problem(body)
            else:
                response = await append(self._store, path, headers, body)
        except ProblemError as error:
            response = error_problem(error)
        except Exception as error:
            response = unexpected_problem(app, error)
        return with_common_headers(response)


async def _body(
    receive: ASGIReceiveCallable, timeout: float | None
) -> bytes | RequestTimeout | None:
    """The request's body; :class:`RequestTimeout` if it was slower than ``timeout``
    seconds, ``None`` if the client left first."""
    parts: list[bytes] = []
    with trio.move_on_after(math.inf if timeout is None else timeout):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            if message["type"] != "http.request":
                continue
            parts.append(message["body"])
            if not message["more_body"]:
                return b"".join(parts)
    return RequestTimeout(f"the request body did not arrive within {timeout} seconds")
