"""Third-party SSE clients reading a real chat stream over a real socket.

httpx-sse dispatches an event on every blank line once an id was seen, so a
keep-alive followed by a blank line reached it as an empty event. Here it reads a
turn that idles in a tool while the server pings every 10 ms.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
import trio
from httpx_sse import aconnect_sse

from benchmarks.support.servers import http1_client
from tests.chat.harness import (
    AUTH,
    DEADLINE,
    WORKSPACE,
    parse_sse,
    plans,
    sleeping,
    start_chat_server,
)

pytestmark = pytest.mark.usefixtures("chat_database")


class _Recorded(httpx.AsyncByteStream):
    """A response body that keeps a copy of every byte it hands on."""

    def __init__(self, inner: httpx.AsyncByteStream, sink: bytearray) -> None:
        self._inner = inner
        self._sink = sink

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._sink += chunk
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingTransport(httpx.AsyncHTTPTransport):
    """httpx's own HTTP/1.1 transport, recording the raw bytes of response bodies."""

    def __init__(self) -> None:
        super().__init__(http1=True, http2=False)
        self.received = bytearray()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Recorded(response.stream, self.received)
        return response


async def test_httpx_sse_gets_no_empty_event_from_keep_alives(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = plans(nap=sleeping(1.5))  # the tool sleeps 1.5 s: the stream idles
    server = await start_chat_server(nursery, tmp_path, agent=agent, ping_interval=0.01)
    transport = RecordingTransport()
    body = {"workspaceId": WORKSPACE, "message": "nap a little"}
    with trio.fail_after(DEADLINE):
        async with (
            http1_client(server.url, headers=AUTH, timeout=DEADLINE, transport=transport) as client,
            aconnect_sse(client, "POST", "/api/assistant/chat/stream", json=body) as source,
        ):
            assert source.response.status_code == 200
            events = [event async for event in source.aiter_sse()]

    received = bytes(transport.received)
    pings = received.count(b": ping\n")
    assert pings >= 1  # it did idle, and pings went out, right after frames too
    assert b"\n\n: ping\n" in received
    assert [event.event for event in events] == ["start", "step", "step", "delta", "result", "done"]
    ids = [int(event.id) for event in events]  # the session's cursors, start at 0
    assert ids[0] == 0 and ids == sorted(set(ids))
    for event in events:
        assert isinstance(msgspec.json.decode(event.data), dict)  # JSON.parse(e.data) works
    # httpx-sse saw exactly the events the core's parser reads from the same bytes.
    parsed, comments = parse_sse(received)
    assert [(e.event, e.data, e.id) for e in parsed] == [(e.event, e.data, e.id) for e in events]
    assert comments == ["ping"] * pings
