"""Bad input on every route of ``sandstream serve`` (chat backend + embedded runner).

Raw sockets against a real Hypercorn (tests/support/raw_http.py): what matters is the
exact bytes sent and what the server answers, and when.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.chat.harness import API_TOKEN, RUNNER_TOKEN, WORKSPACE, ChatServer
from tests.support.raw_http import RawResponse, connect, read_response, read_until_closed

pytestmark = pytest.mark.usefixtures("chat_database")

PROBLEM = "application/problem+json"
DEADLINE = 30.0

# (method, path, token) of every route with a JSON body.
JSON_ROUTES = [
    ("POST", "/api/assistant/chat/stream", API_TOKEN),
    ("POST", "/api/assistant/chats", API_TOKEN),
    ("POST", "/api/agents/run", API_TOKEN),
    ("PUT", "/api/workflows/wf1/environment", API_TOKEN),
    ("POST", "/stream", RUNNER_TOKEN),
]
DEEP = 100_000
BAD_BODIES = {
    # Each schema decodes one of these two fields first, so its string is decoded.
    "invalid-utf8-in-a-string": b'{"workspaceId": "w\xff", "agent_url": "http://\xff"}',
    "nesting-100000-deep": b'{"x": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    "not-json": b"{nope",
    "truncated": b'{"workspaceId": "w',
}


def _request(method: str, path: str, token: str, body: bytes, *headers: str) -> bytes:
    head = [
        f"{method} {path} HTTP/1.1",
        "Host: test",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _exchange(server: ChatServer, raw: bytes) -> RawResponse:
    async with await connect(server.url) as stream:
        await stream.send_all(raw)
        return await read_response(stream, timeout=DEADLINE)


def _assert_problem(response: RawResponse, status: int, kind: str) -> dict[str, Any]:
    assert response.status == status, response
    assert response.headers["content-type"] == PROBLEM, response.headers
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"urn:sandstream:problem:{kind}", problem
    assert problem["status"] == status and problem["title"]
    return problem


@pytest.mark.parametrize("name", BAD_BODIES)
@pytest.mark.parametrize(("method", "path", "token"), JSON_ROUTES, ids=[r[1] for r in JSON_ROUTES])
async def test_a_bad_json_body_is_a_422_problem_on_every_route(
    server: ChatServer, method: str, path: str, token: str, name: str
) -> None:
    body = BAD_BODIES[name]
    raw = _request(method, path, token, body, f"Content-Length: {len(body)}")
    problem = _assert_problem(await _exchange(server, raw), 422, "invalid-body")
    assert problem["detail"].startswith("the body is invalid"), problem


MALFORMED = {
    "bad-request-line": (b"NOT AN HTTP REQUEST\r\n\r\n", 400),
    "bad-chunk-size": (
        _request(
            "POST", "/api/assistant/chats", API_TOKEN, b"zz\r\n", "Transfer-Encoding: chunked"
        ),
        400,
    ),
    "header-block-too-large": (
        b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        431,
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
async def test_requests_hypercorn_rejects_itself_get_problem_json(
    server: ChatServer, name: str
) -> None:
    raw, status = MALFORMED[name]
    async with await connect(server.url) as stream:
        await stream.send_all(raw)
        response = await read_response(stream, timeout=DEADLINE)
        _assert_problem(response, status, "malformed-request")
        assert response.headers["connection"] == "close"
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
async def test_the_embedded_stream_refuses_a_big_body_without_reading_it(
    server: ChatServer, framing: str
) -> None:
    limit = server.runner.settings.max_body_bytes
    assert limit < 5 * 1024 * 1024 < server.service.settings.max_results_bytes
    total = 5 * 1024 * 1024
    chunk = b"x" * 65536
    async with await connect(server.url) as stream:
        if framing == "content-length":
            # Only the head is sent: the answer cannot wait for the body.
            await stream.send_all(
                _request("POST", "/stream", RUNNER_TOKEN, b"", f"Content-Length: {total}")
            )
        else:
            # One chunk past the limit is sent, then nothing until the answer comes.
            await stream.send_all(
                _request("POST", "/stream", RUNNER_TOKEN, b"", "Transfer-Encoding: chunked")
            )
            for _ in range(limit // len(chunk) + 1):
                await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        response = await read_response(stream, timeout=DEADLINE)
        problem = _assert_problem(response, 413, "payload-too-large")
        assert str(limit) in problem["detail"]
        assert await read_until_closed(stream, timeout=DEADLINE) == b""
    assert server.runner.admitted == 0


async def test_an_upload_announcing_too_many_bytes_is_refused_before_its_body(
    server: ChatServer,
) -> None:
    async with server.client() as client:
        created = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
    chat_id = created.json()["id"]
    path = f"/api/assistant/chats/{chat_id}/files?workspaceId={WORKSPACE}"
    head = _request(
        "POST",
        path,
        API_TOKEN,
        b"",
        f"Content-Length: {server.service.settings.max_upload_bytes * 2}",
    ).replace(b"application/json", b"multipart/form-data; boundary=xyz")
    async with await connect(server.url) as stream:
        await stream.send_all(head)  # no body at all: the answer cannot wait for one
        _assert_problem(await read_response(stream, timeout=DEADLINE), 413, "payload-too-large")
        assert await read_until_closed(stream, timeout=DEADLINE) == b""


# -- ids, query parameters, titles -------------------------------------------------------


async def _get(server: ChatServer, path: str, params: dict[str, str]) -> httpx.Response:
    async with server.client() as client:
        return await client.get(path, params=params)


@pytest.mark.parametrize(
    "workspace", ["ws1\n", "ws1 ", " ws1", "bad id!", "-ws", "ws/1", "x" * 201]
)
async def test_a_workspace_id_outside_the_id_pattern_is_refused_in_the_body(
    server: ChatServer, workspace: str
) -> None:
    run = await server.turn("hello", workspaceId=workspace)
    assert run.status == 422
    assert run.problem["type"] == "urn:sandstream:problem:invalid-body"


@pytest.mark.parametrize(
    "path",
    ["/api/assistant/chats", "/api/assistant/chats/chat_x", "/api/workflows/wf1/environment"],
)
@pytest.mark.parametrize("workspace", ["ws1\n", "bad id!", "ws/1", " ", "x" * 201])
async def test_a_workspace_id_outside_the_id_pattern_is_refused_in_the_query(
    server: ChatServer, path: str, workspace: str
) -> None:
    response = await _get(server, path, {"workspaceId": workspace})
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "urn:sandstream:problem:invalid-body"


async def test_a_workflow_id_in_the_path_must_match_the_whole_pattern(server: ChatServer) -> None:
    response = await _get(server, "/api/workflows/wf1%0A/environment", {"workspaceId": WORKSPACE})
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("limit", ["٣", "³", "1_0", " 3", "3 ", "+3", "0x3", "1" * 30])
async def test_limit_takes_ascii_digits_only(server: ChatServer, limit: str) -> None:
    response = await _get(
        server, "/api/assistant/chats", {"workspaceId": WORKSPACE, "limit": limit}
    )
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "urn:sandstream:problem:invalid-body"


async def test_a_valid_limit_and_workspace_are_still_served(server: ChatServer) -> None:
    response = await _get(server, "/api/assistant/chats", {"workspaceId": WORKSPACE, "limit": "3"})
    assert response.status_code == 200, response.text
    assert response.json() == {"chats": []}


@pytest.mark.parametrize(
    "title", ["a\x00b", "line\nbreak", "tab\there", "bell\x07", "del\x7f", "c1\x85"]
)
async def test_a_title_with_a_control_character_is_refused(server: ChatServer, title: str) -> None:
    async with server.client() as client:
        response = await client.post(
            "/api/assistant/chats", json={"workspaceId": WORKSPACE, "title": title}
        )
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "urn:sandstream:problem:invalid-body"


async def test_a_plain_title_is_kept(server: ChatServer) -> None:
    async with server.client() as client:
        response = await client.post(
            "/api/assistant/chats", json={"workspaceId": WORKSPACE, "title": "Résumé — draft 2"}
        )
    assert response.status_code == 201, response.text
    assert response.json()["title"] == "Résumé — draft 2"
