"""The web app's files over HTTP: content types, the CSP, revalidation, unknown names.

Against the chat app on a real socket, and once against ``sandstream serve`` as a
process (the page is what the command serves at ``/``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandstream.server.web.routes import CONTENT_SECURITY_POLICY, STATIC_DIR
from tests.chat.harness import ChatServer, start_chat_server, start_serve_process

FILES = {
    "/": "text/html; charset=utf-8",
    "/web/app.js": "text/javascript; charset=utf-8",
    "/web/api.js": "text/javascript; charset=utf-8",
    "/web/sse.js": "text/javascript; charset=utf-8",
    "/web/fold.js": "text/javascript; charset=utf-8",
    "/web/render.js": "text/javascript; charset=utf-8",
    "/web/markdown.js": "text/javascript; charset=utf-8",
    "/web/app.css": "text/css; charset=utf-8",
}


@pytest.fixture
async def chat_server(nursery: trio.Nursery, tmp_path: Path) -> ChatServer:
    """The chat app with the embedded runner on a loopback port."""
    return await start_chat_server(nursery, tmp_path / "data")


@pytest.mark.parametrize(("path", "content_type"), FILES.items())
async def test_each_file_is_served_with_its_type_and_a_strict_policy(
    chat_server: ChatServer, path: str, content_type: str
) -> None:
    async with chat_server.client(auth=False) as client:
        response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    name = "index.html" if path == "/" else path.removeprefix("/web/")
    assert response.content == (STATIC_DIR / name).read_bytes()
    headers = response.headers
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-cache"
    assert headers["etag"].startswith('"')


async def test_a_matching_etag_is_answered_304_and_another_200(chat_server: ChatServer) -> None:
    async with chat_server.client(auth=False) as client:
        first = await client.get("/web/app.js")
        etag = first.headers["etag"]
        again = await client.get("/web/app.js", headers={"If-None-Match": f'W/"x", {etag}'})
        stale = await client.get("/web/app.js", headers={"If-None-Match": '"stale"'})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    assert again.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert stale.status_code == 200
    assert stale.content == first.content


@pytest.mark.parametrize("path", ["/web/nope.js", "/web/..%2Fapp.py", "/web/", "/web/index"])
async def test_an_unknown_name_is_a_404_problem(chat_server: ChatServer, path: str) -> None:
    async with chat_server.client(auth=False) as client:
        response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:sandstream:problem:not-found"


async def test_the_page_needs_no_token_but_the_api_does(chat_server: ChatServer) -> None:
    async with chat_server.client(auth=False) as client:
        page = await client.get("/")
        api = await client.get("/api/assistant/chats", params={"workspaceId": "ws"})
    assert page.status_code == 200
    assert api.status_code == 401


async def test_sandstream_serve_serves_the_app_at_the_root(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    served = await start_serve_process(nursery, tmp_path / "data", {"agent": {"kind": "scripted"}})
    async with served.client("unused") as client:
        page = await client.get("/")
        module = await client.get("/web/app.js")
    assert page.status_code == 200
    assert b'<script type="module" src="/web/app.js"></script>' in page.content
    assert module.headers["content-type"] == "text/javascript; charset=utf-8"
    served.process.terminate()
    with trio.fail_after(30):
        await served.exited.wait()
