"""Chat turns on durable sessions: resume, a second viewer, stop, follow-up, CORS,
stream tokens — over real sockets, the embedded runner and a remote one.

SSE is parsed with the core's parser (:class:`~.harness.EventReader`) and with
httpx-sse; frames are compared as ``(id, event, data)``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from httpx_sse import aconnect_sse

from benchmarks.support.runner_process import start_runner_process
from sandstream.core.schemas import LoadSpec, ScriptedAgent
from sandstream.core.sse_parser import ServerSentEvent, SSEParser
from sandstream.server.chat.turns.frames import TurnFrames
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    marked,
    plans,
    running_step,
    scripted,
    shell,
    sleeping,
    start_chat_server,
    write,
)

pytestmark = pytest.mark.usefixtures("chat_database")

Frame = tuple[str, str, str]
STREAM = "/api/assistant/chats/{}/stream"


def frames(events: list[Any]) -> list[Frame]:
    """``(id, event, data)``; a ``files`` frame has no id of its own (a parser reports
    the last one before it, which depends on where the reader started)."""
    return [("" if e.event == "files" else e.id, e.event, e.data) for e in events]


async def _start(server: ChatServer, client: httpx.AsyncClient, message: str, **fields: Any) -> Any:
    body = {"workspaceId": WORKSPACE, "message": message, **fields}
    return client.stream("POST", "/api/assistant/chat/stream", json=body)


async def join(
    server: ChatServer,
    chat_id: str,
    *,
    last_event_id: str | None = None,
    params: dict[str, str] | None = None,
    auth: bool = True,
) -> tuple[int, list[ServerSentEvent]]:
    """``GET …/stream`` read to its end with the core's parser: status and events."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    query = {"workspaceId": WORKSPACE, **(params or {})}
    async with (
        server.client(auth=auth) as client,
        client.stream("GET", STREAM.format(chat_id), params=query, headers=headers) as response,
    ):
        reader = EventReader(response)
        while await reader.next() is not None:
            pass
        return response.status_code, reader.events


def session_frames(server: ChatServer, chunks: list[bytes]) -> list[tuple[str, str, str]]:
    """The frames the session's chunks render to (id, event, data), terminal included."""
    rendered = TurnFrames()
    out = rendered.render_run(1, b"".join(chunks), len(chunks)) + rendered.terminal_frame
    parser = SSEParser()
    events = parser.feed(out) + parser.close()
    return frames(events)


async def session_chunks(server: ChatServer, session_id: str) -> list[bytes]:
    assert server.service.sessions is not None
    session = server.service.sessions.get(session_id)
    chunks: list[bytes] = []
    while runs := await session.read_runs(len(chunks), 1 << 30):
        chunks += [chunk for run in runs for chunk in run.lines]
    return chunks


# -- resume and viewers ------------------------------------------------------------------


async def test_reload_mid_turn_resumes_exactly_the_missing_frames_and_viewers_agree(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = scripted(
        shell("echo one"), shell("sleep 0.5"), shell("echo two"), write("output/a.md", "# a\n")
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    async with server.client() as client, await _start(server, client, "reload me") as response:
        first = EventReader(response)
        start = await first.until(lambda e: e.event == "start")
        await first.until(running_step)
        chat_id = msgspec.json.decode(start.data)["chatId"]
        before = list(first.events)
    # The page reloads: the POST is gone, the turn goes on (onDisconnect: continue).
    viewer: list[ServerSentEvent] = []

    async def second_device() -> None:
        status, events = await join(server, chat_id)
        assert status == 200
        viewer.extend(events)

    async with trio.open_nursery() as inner:
        inner.start_soon(second_device)
        async with (
            server.client() as client,
            aconnect_sse(
                client,
                "GET",
                STREAM.format(chat_id),
                params={"workspaceId": WORKSPACE},
                headers={"Last-Event-ID": before[-1].id},
            ) as source,
        ):
            after = [event async for event in source.aiter_sse()]
    assert [e.event for e in after][-3:] == ["files", "result", "done"]
    assert int(after[0].id) > int(before[-1].id)
    assert frames(before) + frames(after) == frames(viewer)  # exactly the missing ones
    assert viewer[0].event == "start" and viewer[0].id == "0"
    chat = await server.wait_chat(chat_id, lambda c: c["messages"][-1]["role"] == "assistant")
    assert chat["messages"][-1]["status"] == "complete"
    # After the done frame there is nothing more: 204, also with its id.
    status, events = await join(server, chat_id)
    assert (status, events) == (204, [])
    status, events = await join(server, chat_id, last_event_id=viewer[-1].id)
    assert (status, events) == (204, [])
    # A reload that missed only the end still gets it (the turn has settled meanwhile).
    status, events = await join(server, chat_id, params={"cursor": viewer[-4].id})
    assert status == 200 and frames(events) == frames(viewer[-3:])
    # One that saw the terminal but lost the done frame gets just the done frame.
    status, events = await join(server, chat_id, last_event_id=viewer[-2].id)
    assert status == 200 and frames(events) == frames(viewer[-1:])


async def test_two_hundred_random_reconnects_see_exactly_the_sessions_frames(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    load = LoadSpec(lines=2000, rate=250, payload_bytes=48, line_type="step")
    server = await start_chat_server(nursery, tmp_path, agent=scripted(message="loaded", load=load))
    rng = random.Random(20261123)
    async with server.client() as client:
        async with await _start(server, client, "load") as response:
            start = await EventReader(response).until(lambda e: e.event == "start")
        data = msgspec.json.decode(start.data)
        seen: list[Frame] = frames([start])
        cycles = 0
        with trio.fail_after(DEADLINE * 2):
            while seen[-1][1] != "done":
                cycles += 1
                headers = {"Last-Event-ID": seen[-1][0]}
                query = {"workspaceId": WORKSPACE}
                url = STREAM.format(data["chatId"])
                async with client.stream("GET", url, params=query, headers=headers) as joined:
                    assert joined.status_code == 200
                    parser = SSEParser()
                    want = rng.randint(1, 8)
                    got = 0
                    # At most ``want`` frames a connection, however the bytes come in
                    # (so the number of reconnects does not depend on timing).
                    async for raw in joined.aiter_raw():
                        if rng.random() < 0.3:  # the network drops mid-frame
                            raw = raw[: rng.randrange(len(raw) + 1)]
                            seen += frames(parser.feed(raw)[: want - got])
                            break
                        events = parser.feed(raw)[: want - got]
                        seen += frames(events)
                        got += len(events)
                        if got >= want:
                            break
    assert cycles >= 200, cycles
    chunks = await session_chunks(server, data["sessionId"])
    expected = session_frames(server, chunks)
    assert seen[1:-1] == expected  # none lost, none twice
    assert seen[-1][:2] == (str(int(expected[-1][0]) + 1), "done")


# -- stop and follow-up ---------------------------------------------------------------------


async def test_stop_mid_tool_persists_interrupted_and_frees_the_chat_at_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(slow=sleeping(300)))
    async with server.client() as client, await _start(server, client, "slow please") as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        await reader.until(running_step)
        chat_id = msgspec.json.decode(start.data)["chatId"]
        [turn] = server.runner.turns()
        assert marked(turn.id)
        stopped = await client.post(
            f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
        )
        assert marked(turn.id) == []  # the container is gone when the stop returns
        rest = []
        while (event := await reader.next()) is not None:
            rest.append(event)
        again = await client.post(
            "/api/assistant/chat/stream",
            json={"workspaceId": WORKSPACE, "message": "hello", "chatId": chat_id},
        )
    assert stopped.status_code == 200, stopped.text
    message = stopped.json()["message"]
    assert message["status"] == "interrupted"
    [trace] = [block for block in message["content"] if block["type"] == "steps"]
    assert [s["status"] for s in trace["steps"]] == ["cancelled"]
    assert [e.event for e in rest] == ["error", "done"]
    assert msgspec.json.decode(rest[0].data)["code"] == "interrupted"
    assert again.status_code == 200  # no 409 race
    chat = await server.chat(chat_id)
    assert [m.get("status") for m in chat["messages"]] == [None, "interrupted", None, "complete"]
    # Nothing runs now: a stop or a message is refused with 409.
    async with server.client() as client:
        nothing = await client.post(
            f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
        )
    assert nothing.status_code == 409


async def test_a_busy_chat_answers_409_with_retry_after(server: ChatServer) -> None:
    async with server.client() as client, await _start(server, client, "slow please") as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        chat_id = msgspec.json.decode(start.data)["chatId"]
        busy = await client.post(
            "/api/assistant/chat/stream",
            json={"workspaceId": WORKSPACE, "message": "hi", "chatId": chat_id},
        )
        assert busy.status_code == 409
        assert int(busy.headers["Retry-After"]) >= 1
        await client.post(
            f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
        )


async def test_a_follow_up_mid_turn_reaches_the_agent_and_is_stored(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    plan = ScriptedAgent(steps=[shell("sleep 1.5"), shell("echo after")], message="done")
    server = await start_chat_server(nursery, tmp_path, agent=plans(nap=plan))
    async with server.client() as client, await _start(server, client, "nap now") as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        await reader.until(running_step)
        data = msgspec.json.decode(start.data)
        posted = await client.post(
            f"/api/assistant/chats/{data['chatId']}/messages",
            json={"workspaceId": WORKSPACE, "message": "also do this"},
        )
        await reader.until(lambda e: e.event == "done")
    assert posted.status_code == 202, posted.text
    chunks = await session_chunks(server, data["sessionId"])
    logs = [c for c in chunks if b'"type":"log"' in c and b"also do this" in c]
    assert logs, "the agent never took the follow-up"
    chat = await server.chat(data["chatId"])
    roles = [(m["role"], m["content"][0].get("text")) for m in chat["messages"]]
    assert roles[:2] == [("user", "nap now"), ("user", "also do this")]
    assert chat["messages"][-1]["status"] == "complete"


# -- browsers: stream tokens and CORS ------------------------------------------------------


async def test_an_eventsource_joins_with_a_stream_token_scoped_to_its_chat(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(slow=sleeping(300)))
    other = await server.turn("hello")
    async with server.client() as client, await _start(server, client, "slow please") as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        chat_id = msgspec.json.decode(start.data)["chatId"]
        minted = await client.post(
            f"/api/assistant/chats/{chat_id}/stream-token", params={"workspaceId": WORKSPACE}
        )
        assert minted.status_code == 201
        token = minted.json()["token"]
        async with server.client(auth=False) as browser:
            url = STREAM.format(chat_id)
            query = {"workspaceId": WORKSPACE}
            async with browser.stream("GET", url, params={**query, "token": token}) as joined:
                assert joined.status_code == 200
                seen = EventReader(joined)
                assert (await seen.until(lambda e: e.event == "start")).id == "0"
            none = await browser.get(url, params=query)
            forged = await browser.get(url, params={**query, "token": token[:-2] + "xx"})
            elsewhere = await browser.get(
                STREAM.format(other.chat_id), params={**query, "token": token}
            )
            expired_token = server.service.stream_tokens.mint(WORKSPACE, chat_id, 0)
            expired = await browser.get(url, params={**query, "token": expired_token})
        await client.post(
            f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
        )
    assert none.status_code == 401 and forged.status_code == 401
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    assert elsewhere.status_code == 403


async def test_cors_preflight_and_headers_for_configured_origins_only(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    origin = "https://app.example"
    server = await start_chat_server(nursery, tmp_path, cors_origins=frozenset({origin}))
    preflight = {
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "last-event-id",
    }
    async with server.client(auth=False) as client:
        ok = await client.options(STREAM.format("chat_x"), headers={"Origin": origin, **preflight})
        refused = await client.options(
            STREAM.format("chat_x"), headers={"Origin": "https://evil.example", **preflight}
        )
    async with server.client() as client:
        listed = await client.get(
            "/api/assistant/chats", params={"workspaceId": WORKSPACE}, headers={"Origin": origin}
        )
        other = await client.get(
            "/api/assistant/chats",
            params={"workspaceId": WORKSPACE},
            headers={"Origin": "https://evil.example"},
        )
    assert ok.status_code == 204
    assert ok.headers["Access-Control-Allow-Origin"] == origin
    assert "GET" in ok.headers["Access-Control-Allow-Methods"]
    assert "Last-Event-ID" in ok.headers["Access-Control-Allow-Headers"]
    assert refused.status_code == 403 and "Access-Control-Allow-Origin" not in refused.headers
    assert listed.status_code == 200 and listed.headers["Access-Control-Allow-Origin"] == origin
    assert "Origin" in listed.headers["Vary"]
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers


# -- a remote runner ------------------------------------------------------------------------


async def test_a_remote_runners_session_resumes_and_stops(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner"), "--sandbox", "bwrap", token=RUNNER_TOKEN
    )
    agent = plans(slow=sleeping(300, shell("echo before")))
    server = await start_chat_server(
        nursery, tmp_path / "chat", embedded=False, sandbox_url=runner.url, agent=agent
    )
    async with server.client() as client, await _start(server, client, "slow please") as response:
        reader = EventReader(response)
        start = await reader.until(lambda e: e.event == "start")
        await reader.until(lambda e: running_step(e) and "sleep" in e.data)
        chat_id = msgspec.json.decode(start.data)["chatId"]
        seen = list(reader.events)
    async with server.client() as client:
        stopped = await client.post(
            f"/api/assistant/chats/{chat_id}/interrupt", params={"workspaceId": WORKSPACE}
        )
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["message"]["status"] == "interrupted"
    code, rest = await join(server, chat_id, last_event_id=seen[-1].id)
    assert code == 200 and [e.event for e in rest] == ["error", "done"]
    code, whole = await join(server, chat_id, params={"cursor": "0"})
    assert code == 200 and frames(whole) == frames(seen[1:] + rest)
    # The turn ran on the runner: its session there ended interrupted.
    session_id = msgspec.json.decode(start.data)["sessionId"]
    async with httpx.AsyncClient(
        base_url=runner.url, headers={"Authorization": f"Bearer {RUNNER_TOKEN}"}
    ) as client:
        status = (await client.get(f"/sessions/{session_id}/status")).json()
    assert status["state"] == "interrupted"
