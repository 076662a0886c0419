"""The Hypercorn adapter (server/http/hypercorn_adapter.py) is pinned to one Hypercorn.

An upgrade fails here first: the installed version must be the one the adapter was
written for, and what it uses of Hypercorn's internals must be there and behave as it
expects (on a real Hypercorn: a request h11 cannot parse gets the adapter's answer).
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import trio
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.http.hypercorn_adapter import (
    HYPERCORN_VERSION,
    raw_connection,
    set_h11_error_answer,
)
from sandstream.server.http.protocol_errors import install_protocol_problems
from tests.support.raw_http import url_address


def test_the_installed_hypercorn_is_the_one_the_adapter_was_written_for() -> None:
    assert version("hypercorn") == HYPERCORN_VERSION


def test_the_internals_the_adapter_uses_are_there_with_the_signatures_it_calls() -> None:
    error = inspect.signature(H11Protocol._send_error_response)
    assert list(error.parameters) == ["self", "status_code"]
    assert inspect.iscoroutinefunction(H11Protocol._send_error_response)
    send = inspect.signature(H11Protocol._send_h11_event)
    assert list(send.parameters) == ["self", "event"]
    assert inspect.iscoroutinefunction(H11Protocol._send_h11_event)


async def test_a_request_h11_cannot_parse_gets_the_answer_set(nursery: trio.Nursery) -> None:
    set_h11_error_answer(lambda status: ([(b"x-answer", b"%d" % status)], b"refused\n"))
    try:
        url = await serve_app(nursery, QuartTrio(__name__))
        host, port = url_address(url)
        received = b""
        with trio.fail_after(10):
            async with await trio.open_tcp_stream(host, port) as stream:
                await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
                while data := await stream.receive_some(65536):
                    received += data
    finally:
        install_protocol_problems()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert b"x-answer: 400" in head.lower()
    assert body.endswith(b"refused\n")


async def test_the_raw_connection_under_an_http_1_1_response_writes_its_socket(
    nursery: trio.Nursery,
) -> None:
    found: list[bool] = []

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = raw_connection(send)
        found.append(raw is not None and not raw.lock.locked())
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if raw is not None:  # the body's bytes, below h11 (its framing is none here)
            async with raw.lock:
                pass  # the lock is Hypercorn's own: free between two of its writes
            await raw.send_raw(b"raw\r\n")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    url = await serve_app(nursery, app)
    host, port = url_address(url)
    received = b""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while data := await stream.receive_some(65536):
                received += data
    assert found == [True]
    assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"\r\n\r\nraw\r\n")


def test_a_send_that_is_not_hypercorn_s_has_no_raw_connection() -> None:
    async def send(message: object) -> None:
        pass

    assert raw_connection(send) is None
