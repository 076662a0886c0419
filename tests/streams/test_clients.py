"""The official Durable Streams clients follow a stream live to its end.

Each client (``@durable-streams/client`` in Node, PyPI ``durable-streams`` in Python)
reads a stream from ``-1`` in one live mode while the test appends to it over HTTP,
one append at a time, each delivered before the next is sent, and then closes it. The
client must receive exactly the appended bytes (a ``text/plain`` stream) or messages
(an ``application/json`` stream), send only requests of its mode, and end by itself.
Against sandstream's server and, as the baseline, the Node reference server.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.streams.followers import CLIENTS, Client, start_follower
from tests.streams.servers import StreamServer

TEXT_PARTS = [b"hello ", "w\u00f6rld\n".encode(), "\U0001f642 line two\n".encode(), b"end"]
JSON_APPENDS: list[Any] = [{"n": 1, "text": "h\u00e9"}, [{"n": 2}, {"n": 3}], "a string", 42]
"""Appended one by one; an array's elements are separate messages."""


@pytest.mark.parametrize("live", ["long-poll", "sse"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_a_client_follows_a_stream_live_to_its_end(
    stream_server: StreamServer,
    node: Path,
    nursery: trio.Nursery,
    client: Client,
    content_type: str,
    live: str,
) -> None:
    url = f"{stream_server.url}/v1/stream/clients-{uuid.uuid4().hex}"
    json_mode = content_type == "application/json"
    async with stream_server.client() as http:
        created = await http.put(url, headers={"Content-Type": content_type})
        assert created.status_code == 201, created.text
        follower = await start_follower(
            nursery, node, client, url, live=live, json_mode=json_mode, token=stream_server.token
        )
        await follower.wait_ready()
        sent_bytes, sent_messages = b"", list[Any]()
        for part in JSON_APPENDS if json_mode else TEXT_PARTS:
            body = msgspec.json.encode(part) if json_mode else part
            appended = await http.post(url, content=body, headers={"Content-Type": content_type})
            assert appended.status_code in (200, 204), appended.text
            if json_mode:  # an array appends its elements, each a message
                sent_messages += part if isinstance(part, list) else [part]
                await follower.wait_items(sent_messages)
            else:
                sent_bytes += part
                await follower.wait_received(sent_bytes)
        closed = await http.post(url, headers={"Stream-Closed": "true"})
        assert closed.status_code in (200, 204), closed.text
        end = await follower.wait_end()

    assert (follower.items, follower.data) == (sent_messages, sent_bytes)
    # The Python client (0.1.0) cannot tell a closed stream's SSE end from another one.
    assert end["streamClosed"] is (None if (client, live) == ("python", "sse") else True)
    assert set(follower.live_modes) <= {None, live}, follower.live_modes
    assert live in follower.live_modes, follower.live_modes
