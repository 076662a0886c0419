"""What the server does with connections: idle ones close, slow bodies are cut.

Real Hypercorn on 127.0.0.1:0, raw sockets (tests/support/raw_http.py). The
keep-alive timeout is short here; every "closed" is asserted under a generous
deadline, never by sleeping.
"""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.runner_process import start_runner_process
from benchmarks.support.workspace import WorkspaceServer
from tests.server.harness import TOKEN, RunnerServer, parse_stream, start_runner
from tests.support.raw_http import connect, read_response, read_until_closed

KEEP_ALIVE = 0.5
DEADLINE = 20.0


@pytest.fixture
async def server(nursery: trio.Nursery) -> RunnerServer:
    return await start_runner(nursery, keep_alive_timeout=KEEP_ALIVE)


def _post(path: str, body: bytes, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: test", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_a_connection_that_never_sends_a_request_is_closed(server: RunnerServer) -> None:
    async with await connect(server.url) as stream:
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


async def test_a_kept_alive_connection_is_closed_once_idle(server: RunnerServer) -> None:
    async with await connect(server.url) as stream:
        for _ in range(2):  # it is reusable first, then closed when idle
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            response = await read_response(stream)
            assert response.status == 200
            assert response.json()["status"] == "ok"
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


async def test_connection_close_is_honoured(server: RunnerServer) -> None:
    async with await connect(server.url) as stream:
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        assert (await read_response(stream)).status == 200
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


@pytest.mark.parametrize("send_body", [True, False], ids=["body-sent", "body-unsent"])
async def test_a_connection_is_closed_after_a_401(server: RunnerServer, send_body: bool) -> None:
    body = b'{"prompt": "hi"}'
    request = _post("/stream", body, "Content-Type: application/json")
    async with await connect(server.url) as stream:
        await stream.send_all(request if send_body else request[: -len(body)])
        response = await read_response(stream)
        assert response.status == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


async def test_a_body_trickled_byte_by_byte_is_cut(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    server.app.config["BODY_TIMEOUT"] = 1.0
    dispatch = workspace.mint_dispatch("slow")
    body = msgspec.json.encode(dispatch)
    request = _post("/stream", body, f"Authorization: Bearer {TOKEN}")
    head_length = len(request) - len(body)
    received = bytearray()
    async with await connect(server.url) as stream:
        await stream.send_all(request[:head_length])

        async def trickle() -> None:
            for byte in body:
                try:
                    await stream.send_all(bytes([byte]))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                await trio.sleep(0.05)

        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                received += await read_until_closed(stream, timeout=DEADLINE)
                nursery.cancel_scope.cancel()
    # The whole body would take len(body) * 0.05 s; it was cut long before that.
    assert len(body) * 0.05 > 5
    assert received.startswith(b"HTTP/1.1 408 "), bytes(received)
    assert b"application/problem+json" in received
    assert b"urn:sandstream:problem:body-timeout" in received
    assert server.runner.admitted == 0


async def test_a_turn_still_works_on_a_connection_reused_after_a_response(
    server: RunnerServer, workspace: WorkspaceServer
) -> None:
    async with await connect(server.url) as stream:
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        assert (await read_response(stream)).status == 200
        body = msgspec.json.encode(workspace.mint_dispatch("again"))
        await stream.send_all(
            _post("/stream", body, f"Authorization: Bearer {TOKEN}", "Connection: close")
        )
        response = await read_response(stream)
        assert response.status == 200
    assert parse_stream(_unchunk(response.body))[-1]["type"] == "result"


def _unchunk(body: bytes) -> bytes:
    """The payload of a ``Transfer-Encoding: chunked`` body."""
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


# -- the file-descriptor budget ------------------------------------------------------------

IDLE_SOCKETS = 2000
LOW_SOFT_LIMIT = 1024
"""A common default soft RLIMIT_NOFILE: fewer descriptors than the idle sockets need."""


@pytest.fixture
def open_file_budget() -> Iterator[None]:
    """This test process holds the client ends: give it the descriptors, then put it back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * IDLE_SOCKETS + 1000
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) is below the {needed} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("open_file_budget")
async def test_two_thousand_idle_connections_do_not_stop_a_turn(
    workspace: WorkspaceServer,
) -> None:
    # `sandstream runner` started with a soft limit of 1024, as many systems do.
    low_limit = ("prlimit", f"--nofile={LOW_SOFT_LIMIT}:", "--")
    idle: list[trio.SocketStream] = []
    try:
        async with trio.open_nursery() as nursery:
            runner = await start_runner_process(
                nursery, "--container-stderr", "discard", token=TOKEN, wrapper=low_limit
            )
            with trio.fail_after(120):
                for _ in range(IDLE_SOCKETS):  # each one gets a response, then sits idle
                    idle.append(stream := await connect(runner.url))
                    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
                for stream in idle:
                    assert (await read_response(stream)).status == 200
                async with httpx.AsyncClient(base_url=runner.url, timeout=60) as client:
                    response = await client.post(
                        "/stream",
                        json=workspace.mint_dispatch("still here"),
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    )
            assert response.status_code == 200
            lines = parse_stream(response.content)
            assert lines[-1]["type"] == "result", lines
            runner.process.send_signal(signal.SIGTERM)
            with trio.fail_after(60):
                assert await runner.process.wait() == 0
    finally:
        for stream in idle:
            await stream.aclose()
