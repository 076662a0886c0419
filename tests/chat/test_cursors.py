"""Every cursor and ``Last-Event-ID`` is read by the core's one parser: the runner's
``/sessions/{id}/stream`` and WebSocket, and the chat's join, give the same 422 for
every malformed one, ``204`` to a reader at the end of an ended stream, and a 422
``cursor-ahead`` (never a ``204``) to a cursor past a stream's last id, live or ended.

One chat server serves both: the chat and its embedded runner's sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio_websocket

from sandstream.core.cursors import MAX_CURSOR
from sandstream.server.sessions import CURSOR_AHEAD, INVALID_CURSOR
from tests.chat.harness import (
    AUTH,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    plans,
    running_step,
    sleeping,
    start_chat_server,
)

pytestmark = pytest.mark.usefixtures("chat_database")

RUNNER_AUTH = {"Authorization": f"Bearer {RUNNER_TOKEN}"}
MALFORMED = ["٣", "\uff11", "²", "+1", "-1", " 1", "1 ", "3_0", "01", "1e3", "0x1", str(2**70)]
"""Refused as ``?cursor=``; as ``Last-Event-ID`` too, except the spaced ones (HTTP
strips the whitespace around a header's value: ``" 1"`` arrives as ``1``)."""
AS_HEADERS = [text for text in MALFORMED if text.strip() == text]


async def get(
    server: ChatServer,
    path: str,
    *,
    cursor: str | None = None,
    last_event_id: str | None = None,
    auth: dict[str, str],
    accept: str = "text/event-stream",
) -> httpx.Response:
    """``GET path``, read whole; a non-ASCII ``Last-Event-ID`` is sent as UTF-8."""
    params = (
        {"workspaceId": WORKSPACE}
        if cursor is None
        else {"workspaceId": WORKSPACE, "cursor": cursor}
    )
    headers: dict[str, Any] = {**auth, "Accept": accept}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id.encode()
    async with server.client(auth=False) as client:
        return await client.get(path, params=params, headers=headers)


def refused(response: httpx.Response, kind: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == kind, problem
    return problem


@pytest.fixture
async def ended(nursery: trio.Nursery, tmp_path: Path) -> tuple[ChatServer, str, str, int]:
    """A chat server, and its chat whose one turn has ended: the chat's id, the
    session's, and the session's last cursor (its terminal)."""
    server = await start_chat_server(nursery, tmp_path)
    run = await server.turn("hello")
    assert run.kinds[-1] == "done", run.kinds
    last = int(run.events[-2].id)
    return server, run.chat_id, run.headers["X-Session-Id"], last


async def test_a_malformed_cursor_is_the_same_422_on_the_runner_and_the_chat(
    ended: tuple[ChatServer, str, str, int],
) -> None:
    server, chat_id, session_id, _ = ended
    runner = (f"/sessions/{session_id}/stream", RUNNER_AUTH)
    chat = (f"/api/assistant/chats/{chat_id}/stream", AUTH)
    details: dict[str, list[str]] = {}
    for path, auth in (runner, chat):
        for text in [*MALFORMED, ""]:
            problem = refused(await get(server, path, cursor=text, auth=auth), INVALID_CURSOR)
            assert problem["detail"].startswith("cursor "), problem
            details.setdefault(f"cursor={text}", []).append(problem["detail"])
        for text in AS_HEADERS:
            answer = await get(server, path, last_event_id=text, auth=auth)
            problem = refused(answer, INVALID_CURSOR)
            assert problem["detail"].startswith("Last-Event-ID "), problem
            details.setdefault(f"id={text}", []).append(problem["detail"])
        # A good Last-Event-ID does not excuse a bad ?cursor=, though it wins.
        refused(await get(server, path, cursor="+1", last_event_id="1", auth=auth), INVALID_CURSOR)
    assert all(len(set(pair)) == 1 and len(pair) == 2 for pair in details.values()), details
    assert "at most 9007199254740991" in details[f"cursor={2**70}"][0]
    url = server.url.replace("http://", "ws://") + f"/sessions/{session_id}/ws"
    for text in ("3_0", "٣", str(MAX_CURSOR + 1)):
        with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
            async with trio_websocket.open_websocket_url(
                f"{url}?{httpx.QueryParams(cursor=text)}",
                extra_headers=[(b"Authorization", f"Bearer {RUNNER_TOKEN}".encode())],
            ):
                pass
        assert rejected.value.status_code == 422, text
        assert msgspec.json.decode(rejected.value.body or b"")["type"] == INVALID_CURSOR


async def test_an_ended_stream_is_204_at_its_end_and_422_past_it(
    ended: tuple[ChatServer, str, str, int],
) -> None:
    server, chat_id, session_id, last = ended
    runner = f"/sessions/{session_id}/stream"
    chat = f"/api/assistant/chats/{chat_id}/stream"
    # The runner: its last chunk is its end; the chat: the done frame after it (last + 1).
    # Each API names the problem's member in its own casing.
    for path, auth, end, last_id in (
        (runner, RUNNER_AUTH, last, "last_id"),
        (chat, AUTH, last + 1, "lastId"),
    ):
        for answer in (
            await get(server, path, last_event_id=str(end), auth=auth),
            await get(server, path, cursor=str(end), auth=auth),
            await get(server, path, cursor="1", last_event_id=str(end), auth=auth),
        ):
            assert (answer.status_code, answer.content) == (204, b""), path
        problem = refused(
            await get(server, path, last_event_id=str(end + 1), auth=auth), CURSOR_AHEAD
        )
        assert problem[last_id] == end
        # Last-Event-ID wins over ?cursor=: an EventSource's reconnect, its URL unchanged.
        resumed = await get(server, path, cursor="1", last_event_id=str(end - 1), auth=auth)
        assert resumed.status_code == 200
        assert f"id: {end - 1}".encode() not in resumed.content
        assert f"id: {end}\n".encode() in resumed.content
    closed = await get(server, runner, last_event_id=str(last), auth=RUNNER_AUTH)
    assert closed.headers["Stream-Closed"] == "true"
    assert closed.headers["Session-Last-Chunk-Id"] == str(last)
    ndjson = await get(
        server, runner, cursor=str(last), auth=RUNNER_AUTH, accept="application/x-ndjson"
    )
    assert ndjson.status_code == 204


async def test_a_cursor_ahead_of_a_live_session_is_a_422_never_a_204(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(slow=sleeping(300)))
    body = {"workspaceId": WORKSPACE, "message": "slow please"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        step = await reader.until(running_step)
        chat_id = msgspec.json.decode(start.data)["chatId"]
        session_id = response.headers["X-Session-Id"]
        for path, auth, last_id in (
            (f"/sessions/{session_id}/stream", RUNNER_AUTH, "last_id"),
            (f"/api/assistant/chats/{chat_id}/stream", AUTH, "lastId"),
        ):
            for ahead in (int(step.id) + 1, int(step.id) + 2, MAX_CURSOR):
                answer = await get(server, path, last_event_id=str(ahead), auth=auth)
                problem = refused(answer, CURSOR_AHEAD)
                assert problem[last_id] >= int(step.id)
        async with server.client() as client:
            stopped = await client.post(
                f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
            )
        assert stopped.status_code == 200
