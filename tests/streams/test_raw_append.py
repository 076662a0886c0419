"""Appends answered below Quart (server/streams/raw_append.py) answer as the blueprint does.

Each request is made twice over real sockets, to two streams that went through the
same requests: with a ``Content-Length`` (answered below Quart) and chunked (left to
Quart, which takes no body without a length below it). Status, headers and body must
be the same, refusals included (but for ``Connection: close``, which Quart adds as it
may refuse before reading the body); requests the raw path leaves alone still get
Quart's answers, and every request is timed in the app's metrics either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import trio
from quart import Quart

from sandstream.server.http.metrics import get_metrics
from tests.sessions.harness import TOKEN, start_sessions
from tests.support.raw_http import connect, read_response

_VARYING = {"date", "server", "connection"}
"""Headers that differ by the moment or by whether the body was read first."""

TEXT = {"Content-Type": "text/plain"}
JSON = {"Content-Type": "application/json"}


def _producer(epoch: int, seq: int) -> dict[str, str]:
    return {"Producer-Id": "p", "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)}


STEPS: list[tuple[str, bytes, dict[str, str]]] = [
    ("text", b"hello", TEXT),
    ("text", b"x", JSON),  # 409: another content type
    ("text", b"one", {**TEXT, **_producer(0, 0)}),  # 200: fresh
    ("text", b"one", {**TEXT, **_producer(0, 0)}),  # 204: a retry
    ("text", b"gap", {**TEXT, **_producer(0, 5)}),  # 409: a sequence gap
    ("text", b"new", {**TEXT, **_producer(1, 0)}),  # 200: a new epoch
    ("text", b"old", {**TEXT, **_producer(0, 1)}),  # 403: a stale epoch
    ("text", b"b", {**TEXT, "Stream-Seq": "b"}),
    ("text", b"a", {**TEXT, "Stream-Seq": "a"}),  # 409: Stream-Seq goes back
    ("text", b"", TEXT),  # 400: no body, no close
    ("text", b"", {"Stream-Closed": "true"}),  # 204: closed
    ("text", b"more", TEXT),  # 409: closed
    ("json", b'[1, {"two": 2}]', JSON),
    ("json", b"[]", JSON),  # 400: an empty array
    ("json", b"{not json", JSON),  # 400
    ("missing", b"x", TEXT),  # 404
]


def _path(name: str, via: str) -> str:
    """Each stream twice, one per path; a missing one is missing for both."""
    return "/v1/stream/missing" if name == "missing" else f"/v1/stream/{name}-{via}"


async def _chunked(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _comparable(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {k: v for k, v in response.headers.items() if k.lower() not in _VARYING}
    return response.status_code, headers, response.content


def _timed(app: Quart) -> float:
    """How many requests to the streams' route the app's metrics timed."""
    registry = get_metrics(app).registry
    return sum(
        registry.get_sample_value(
            "sandstream_http_request_duration_seconds_count",
            {"route": "/v1/stream/{name}", "status": status},
        )
        or 0.0
        for status in ("2xx", "4xx", "5xx")
    )


async def test_an_append_with_a_length_is_answered_as_the_blueprint_answers_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        for via in ("raw", "quart"):
            await client.put(f"/v1/stream/text-{via}", headers=TEXT)
            await client.put(f"/v1/stream/json-{via}", headers=JSON)
        before = _timed(server.app)
        for name, body, headers in STEPS:
            raw = await client.post(_path(name, "raw"), content=body, headers=headers)
            quart = await client.post(_path(name, "quart"), content=_chunked(body), headers=headers)
            assert "content-length" in raw.request.headers
            assert "content-length" not in quart.request.headers
            assert _comparable(raw) == _comparable(quart), (name, body, headers)
            if quart.status_code >= 400:  # refused; below Quart, only once the body is read
                assert quart.headers["Connection"] == "close"
                assert "Connection" not in raw.headers
        assert _timed(server.app) - before == 2 * len(STEPS)
        raw_read = await client.get("/v1/stream/text-raw", params={"offset": "-1"})
        quart_read = await client.get("/v1/stream/text-quart", params={"offset": "-1"})
        assert raw_read.content == quart_read.content == b"helloonenewb"
    await server.shutdown()


async def test_an_append_the_raw_path_leaves_alone_gets_quarts_answer(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        await client.put("/v1/stream/s", headers=TEXT)
        async with server.client(auth=False) as stranger:
            refused = await stranger.post("/v1/stream/s", content=b"x", headers=TEXT)
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        session_stream = await client.post("/v1/stream/sessions/ses_0", content=b"x", headers=TEXT)
        assert session_stream.status_code == 405  # written by the server alone
        assert (await client.post("/v1/stream/", content=b"x", headers=TEXT)).status_code == 404
        read = await client.get("/v1/stream/s", params={"offset": "-1"})
        assert read.content == b""
    await server.shutdown()


async def test_a_body_slower_than_the_body_timeout_gets_408(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    server.app.config["BODY_TIMEOUT"] = 0.2
    async with server.client() as client:
        await client.put("/v1/stream/slow", headers=TEXT)
    async with await connect(server.url) as stream:
        await stream.send_all(
            b"POST /v1/stream/slow HTTP/1.1\r\nHost: test\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"Content-Type: text/plain\r\nContent-Length: 10\r\n\r\nhalf!"
        )
        response = await read_response(stream)
    assert response.status == 408
    assert response.json()["type"] == "urn:sandstream:problem:body-timeout"
    assert response.headers["x-content-type-options"] == "nosniff"
    async with server.client() as client:
        assert (await client.get("/v1/stream/slow", params={"offset": "-1"})).content == b""
    await server.shutdown()
