"""CORS on the chat API only, ``Vary: Origin`` wherever it applies, and a problem type
on every error answer (never ``about:blank``) — over a real server."""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path

import pytest
import trio

from sandstream.server.chat.api.cors import ORIGIN_NOT_ALLOWED
from sandstream.server.http.problems import METHOD_NOT_ALLOWED, status_type
from tests.chat.harness import WORKSPACE, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

ORIGIN = "https://app.example"
PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
NOT_CHAT_API = (
    "/sessions/ses_x/stream",
    "/sessions/ses_x/status",
    "/sessions",
    "/api/sandbox/ses_x/env",
    "/api/sandbox/ses_x/results",
    "/",
)
"""Routes a browser on another origin has no business calling."""


async def test_preflights_are_answered_on_the_chat_api_only(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, cors_origins=frozenset({ORIGIN}))
    async with server.client(auth=False) as client:
        chat_api = await client.options("/api/assistant/chats", headers=PREFLIGHT)
        others = {path: await client.options(path, headers=PREFLIGHT) for path in NOT_CHAT_API}
        plain = {path: await client.get(path, headers={"Origin": ORIGIN}) for path in NOT_CHAT_API}
    assert chat_api.status_code == 204
    assert chat_api.headers["Access-Control-Allow-Origin"] == ORIGIN
    for path, response in {**others, **plain}.items():
        assert "Access-Control-Allow-Origin" not in response.headers, path
        assert "Access-Control-Allow-Methods" not in response.headers, path


async def test_every_chat_api_answer_varies_on_origin(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, cors_origins=frozenset({ORIGIN}))
    query = {"workspaceId": WORKSPACE}
    async with server.client() as client:
        answers = {
            "allowed": await client.get(
                "/api/assistant/chats", params=query, headers={"Origin": ORIGIN}
            ),
            "other origin": await client.get(
                "/api/assistant/chats", params=query, headers={"Origin": "https://evil.example"}
            ),
            "no origin": await client.get("/api/assistant/chats", params=query),
            "refused preflight": await client.options(
                "/api/assistant/chats",
                headers={**PREFLIGHT, "Origin": "https://evil.example"},
            ),
            "preflight": await client.options("/api/assistant/chats", headers=PREFLIGHT),
            "error": await client.get("/api/assistant/chats/chat_nope", params=query),
        }
    for name, response in answers.items():
        assert "origin" in response.headers.get("Vary", "").lower(), name
    refused = answers["refused preflight"]
    assert refused.status_code == 403 and refused.json()["type"] == ORIGIN_NOT_ALLOWED


async def test_error_answers_name_a_problem_type(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path)
    chat_id = (await server.turn("hello")).chat_id
    token = server.service.stream_tokens.mint(WORKSPACE, "chat_a", 10**15)
    async with server.client(auth=False) as client:
        wrong_method = await client.delete("/api/assistant/chat/stream")
        other_chat = await client.get(
            f"/api/assistant/chats/{chat_id}/stream",
            params={"workspaceId": WORKSPACE, "token": token},
        )
    assert wrong_method.status_code == 405
    assert wrong_method.json()["type"] == METHOD_NOT_ALLOWED
    assert other_chat.status_code == 403
    assert other_chat.json()["type"].startswith("urn:sandstream:problem:")
    for status in HTTPStatus:
        if status >= 400:
            assert status_type(status).startswith("urn:sandstream:problem:"), status
