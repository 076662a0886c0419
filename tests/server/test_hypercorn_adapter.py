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
from quart_trio import QuartTrio

from benchmarks.support.servers import serve_app
from sandstream.server.http.hypercorn_adapter import HYPERCORN_VERSION, set_h11_error_answer
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
