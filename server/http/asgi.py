"""The ASGI HTTP connection every role's app uses: idle connections close, bodies have a deadline.

**Why connections never closed.** Hypercorn runs the end of a response inside the
app's own ``send`` call: the last ``http.response.body`` message makes its HTTP/1.1
protocol finish the stream, put ``http.disconnect`` on the app's receive queue, and
then either recycle the connection for keep-alive (start the idle timer that closes it
after ``keep_alive_timeout``) or close it (``Connection: close``, a body left unread,
as after a 401). quart-trio's :class:`~quart_trio.asgi.TrioASGIHTTPConnection` runs
``handle_messages`` and ``handle_request`` in one nursery and cancels that nursery as
soon as ``handle_messages`` sees ``http.disconnect``. The queue hand-off is a
checkpoint, so ``handle_messages`` wakes while Hypercorn's bookkeeping is still
running in ``handle_request``'s task, cancels it, and the next checkpoint in
Hypercorn's code (taking the idle timer's lock, ``send_eof`` before closing) raises
:class:`trio.Cancelled`, which the nursery swallows. Neither the idle timer nor the
close ever happens: every connection that has had a response stays open until the
client leaves, and a client that never leaves holds a file descriptor forever. Any
Quart-Trio app on Hypercorn's trio worker shows it.

**The fix, where it lives.** A disconnect that arrives once the app has sent its final
body message is the end of our own response, not a client leaving, so it must not
cancel the task that is still inside ``send``: :class:`HTTPConnection` notes the final
message before handing it to Hypercorn and, after it, lets ``handle_request`` finish
(it closes the nursery itself when ``send`` returns). A disconnect *before* that point
(the client left mid-response) still cancels the response at once, as before.

**Body deadline.** Hypercorn's ``read_timeout`` is per read, so a body sent one byte a
second never trips it. The whole request body must arrive within the request's
``body_timeout`` (Quart's ``BODY_TIMEOUT`` setting, seconds; ``None``: no limit),
counted from the start of the request; past it, reading the body raises
:class:`werkzeug.exceptions.RequestTimeout` in the route (a 408 problem, and the
connection is closed since its body was not read to the end).
"""

from __future__ import annotations

import math

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent
from quart.wrappers import Request
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.exceptions import RequestTimeout

from .fanout import RAW_SEND_EXTENSION

__all__ = ["HTTPConnection"]


class HTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection with a keep-alive path that is never cancelled and
    a deadline on the request body. Set it as ``app.asgi_http_class``.

    Cancellation: a client disconnect before the response is complete cancels the
    route and the response body at once (quart-trio's behaviour); after it, nothing is
    cancelled.
    """

    _response_complete = False

    async def __call__(self, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
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

    def _disconnected(self, nursery: trio.Nursery) -> None:
        if not self._response_complete:
            nursery.cancel_scope.cancel()
