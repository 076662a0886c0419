"""``/v1/stream/`` over real sockets: the token, the answers' headers, live reads that
end with their stream, and what the conformance suite does not cover."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.sessions.harness import start_sessions

SSE_DONE = b'"streamClosed":true'


async def test_every_request_needs_the_token(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client(auth=False) as client:
        for method in ("PUT", "POST", "GET", "HEAD", "DELETE"):
            response = await client.request(method, "/v1/stream/secret")
            assert response.status_code == 401, method
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
        preflight = await client.options(
            "/v1/stream/secret", headers={"Access-Control-Request-Method": "PUT"}
        )
        assert preflight.status_code == 204
        assert "authorization" in preflight.headers["Access-Control-Allow-Headers"].lower()
    async with server.client() as client:
        assert (await client.get("/v1/stream/secret")).status_code == 404
    await server.shutdown()


async def test_errors_are_problems_with_the_protocol_headers(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        created = await client.put(
            "/v1/stream/p", headers={"Content-Type": "text/plain", "Stream-Closed": "true"}
        )
        assert created.status_code == 201 and created.headers["Stream-Closed"] == "true"
        refused = await client.post(
            "/v1/stream/p", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert refused.status_code == 409
        assert refused.headers["Stream-Closed"] == "true"
        assert refused.headers["Stream-Next-Offset"] == created.headers["Stream-Next-Offset"]
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.json()["type"] == "urn:sandstream:problem:stream-closed"
        bad = await client.put("/v1/stream/q", headers={"Stream-TTL": "1.5"})
        assert bad.status_code == 400 and "Stream-TTL" in bad.json()["detail"]
    await server.shutdown()


async def test_live_readers_end_when_the_stream_closes_or_goes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_sessions(nursery, tmp_path)
    async with server.client() as client:
        created = await client.put("/v1/stream/live", headers={"Content-Type": "text/plain"})
        await client.put("/v1/stream/doomed", headers={"Content-Type": "text/plain"})
        tail = created.headers["Stream-Next-Offset"]
        received: dict[str, bytes] = {}

        async def follow(name: str, task_status: trio.TaskStatus[None]) -> None:
            url = f"/v1/stream/{name}"
            async with client.stream("GET", url, params={"offset": "-1", "live": "sse"}) as live:
                assert live.status_code == 200
                task_status.started()
                received[name] = b"".join([part async for part in live.aiter_raw()])

        async def long_poll(task_status: trio.TaskStatus[None]) -> None:
            task_status.started()
            response = await client.get(
                "/v1/stream/live", params={"offset": tail, "live": "long-poll"}
            )
            received["long-poll"] = response.content

        with trio.fail_after(30):
            async with trio.open_nursery() as readers:
                await readers.start(follow, "live")
                await readers.start(follow, "doomed")
                await readers.start(long_poll)
                text = {"Content-Type": "text/plain"}
                await client.post("/v1/stream/live", content=b"hello\nworld", headers=text)
                await client.post("/v1/stream/live", headers={"Stream-Closed": "true"})
                assert (await client.delete("/v1/stream/doomed")).status_code == 204
        events = received["live"].split(b"\n\n")
        assert b"event: data\ndata:hello\ndata:world" in events
        assert events[-1] == b"" and SSE_DONE in events[-2]
        assert SSE_DONE not in received["doomed"]
        assert received["long-poll"] == b"hello\nworld"
        at_end = await client.get("/v1/stream/live", params={"offset": "now", "live": "long-poll"})
        assert at_end.status_code == 204 and at_end.headers["Stream-Closed"] == "true"
    await server.shutdown()
