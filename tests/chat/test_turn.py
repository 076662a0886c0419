"""A whole turn over a real socket: SSE frames, persistence, history, replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.chat.harness import (
    AUTH,
    WORKSPACE,
    ChatServer,
    persisted_form,
    scripted,
    shell,
    start_chat_server,
    write,
)

pytestmark = pytest.mark.usefixtures("chat_database")


def _assistant(chat: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = chat["messages"][-1]
    assert message["role"] == "assistant"
    return message


async def test_a_full_turn_streams_and_persists_what_it_streamed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = scripted(
        shell("echo hi"), write("output/notes/summary.md", "# notes\n"), message="ok {prompt}"
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    run = await server.turn("hello there")
    assert run.status == 200
    assert run.headers["content-type"].startswith("text/event-stream")
    assert run.headers["cache-control"] == "no-cache"
    assert run.headers["x-accel-buffering"] == "no"
    # The answer streams in before the result; the written-back file is announced live,
    # before the result.
    assert run.kinds == [
        *("start", "step", "step", "step", "step"),
        *("delta", "delta", "delta", "files", "result", "done"),
    ]
    assert "".join(d["text"] for d in run.data("delta")) == "ok hello there"
    # ids are the session's cursors: start 0, then increasing, done the terminal's + 1;
    # the files frame has none of its own (it travels with the terminal).
    ids = [int(e.id) for e in run.events if e.event != "files"]
    assert ids[0] == 0 and ids == sorted(set(ids)) and ids[-1] == ids[-2] + 1
    assert b"\n\nevent: files\n" in run.body
    start = run.start
    assert set(start) >= {"chatId", "userMessageId", "assistantMessageId"}
    assert start["conversationId"] == start["userMessageId"]  # the first turn
    assert run.data("result")[0]["message"] == "ok hello there"
    assert msgspec.json.decode(run.events[-1].data) == {"terminal": "result", "diagnostics": 0}

    chat = await server.chat(run.chat_id)
    assert chat["conversationId"] == start["userMessageId"]
    assert chat["title"] == "hello there"
    assert "activeMessageId" not in chat  # the lock was released
    user, assistant = chat["messages"]
    assert user["id"] == start["userMessageId"]
    assert user["content"] == [{"type": "text", "text": "hello there"}]
    assert assistant["id"] == start["assistantMessageId"]
    assert assistant["status"] == "complete"
    # The persisted message is exactly what the live stream folds to.
    assert assistant == persisted_form(run.events, assistant)
    # The written-back file is the assistant message's attachment.
    [attachment] = assistant["fileAttachments"]
    assert attachment["name"] == "notes/summary.md" and attachment["size"] == 8
    assert attachment["contentType"] == "text/markdown"
    assert run.data("files") == [{"files": [attachment]}]  # live and history agree


async def test_history_reload_equals_the_live_streams(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = scripted(shell("echo one; echo two"))
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    first = await server.turn("first")
    second = await server.turn("second", chat_id=first.chat_id)
    assert second.status == 200
    assert second.start["conversationId"] == first.start["userMessageId"]  # unchanged
    chat = await server.chat(first.chat_id)
    messages = chat["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [m["id"] for m in messages] == [
        first.start["userMessageId"],
        first.start["assistantMessageId"],
        second.start["userMessageId"],
        second.start["assistantMessageId"],
    ]
    assert messages[1] == persisted_form(first.events, messages[1])
    assert messages[3] == persisted_form(second.events, messages[3])
    # The second dispatch replayed the first exchange to the sandbox.
    session = await _session_conversation(server, second.start["assistantMessageId"])
    assert [(t["role"], t["content"]) for t in session] == [
        ("user", "first"),
        ("assistant", "Done: first"),
    ]
    listed = await _list(server)
    assert [c["id"] for c in listed] == [first.chat_id]
    assert listed[0]["messageCount"] == 4


async def test_an_error_terminal_is_persisted_as_failed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    agent = scripted(
        shell("echo partial"), message="", error={"code": "model_timeout", "message": "too slow"}
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    run = await server.turn("fail please")
    assert run.kinds[-2:] == ["error", "done"]
    assert run.data("error")[0]["code"] == "model_timeout"
    assistant = _assistant(await server.chat(run.chat_id))
    assert assistant["status"] == "failed"
    assert {"type": "error", "code": "model_timeout", "message": "too slow"} in assistant["content"]
    assert assistant == persisted_form(run.events, assistant)


async def test_logs_are_filtered_and_the_chat_list_is_scoped(server: ChatServer) -> None:
    run = await server.turn("x")
    assert "log" not in run.kinds  # the container logs its lifecycle; the chat hides it
    async with server.client(auth=False) as client:
        health = await client.get("/healthz")  # the embedded runner's
        assert health.status_code == 200 and health.json()["status"] == "ok"
        unknown = await client.get("/api/assistant/nope")
        assert unknown.status_code == 404
        assert unknown.headers["content-type"] == "application/problem+json"
    async with server.client() as client:
        other = await client.get("/api/assistant/chats", params={"workspaceId": "ws_other"})
        assert other.json() == {"chats": []}
        hidden = await client.get(
            f"/api/assistant/chats/{run.chat_id}", params={"workspaceId": "ws_other"}
        )
        assert hidden.status_code == 404
        assert hidden.headers["content-type"] == "application/problem+json"


async def _list(server: ChatServer) -> list[dict[str, Any]]:
    async with server.client() as client:
        response = await client.get("/api/assistant/chats", params={"workspaceId": WORKSPACE})
    assert response.status_code == 200
    chats: list[dict[str, Any]] = response.json()["chats"]
    return chats


async def _session_conversation(server: ChatServer, assistant_id: str) -> list[dict[str, Any]]:
    def query(conn: Any) -> bytes:
        row = conn.execute(
            "SELECT conversation FROM sessions WHERE assistant_message_id = ?", (assistant_id,)
        ).fetchone()
        return bytes(row[0])

    raw = await server.store.db.read(query)
    turns: list[dict[str, Any]] = msgspec.json.decode(raw)
    return turns


async def test_every_refusal_is_problem_json_and_writes_nothing(server: ChatServer) -> None:
    url = "/api/assistant/chat/stream"
    hi = b'{"workspaceId":"w","message":"hi"}'
    huge = b'{"workspaceId":"w","message":"' + b"x" * 2_000_000 + b'"}'
    cases: list[tuple[dict[str, str], bytes, int, str]] = [
        ({}, hi, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong"}, hi, 401, "unauthorized"),
        (AUTH, b"{not json", 422, "invalid-body"),
        (AUTH, b'{"message":"no workspace"}', 422, "invalid-body"),
        (AUTH, b'{"workspaceId":"bad id!","message":"x"}', 422, "invalid-body"),
        (AUTH, b'{"workspaceId":"w","message":"   "}', 422, "invalid-body"),
        (AUTH, b'{"workspaceId":"w","message":"x","chatId":"chat_nope"}', 404, "not-found"),
        (AUTH, huge, 413, "payload-too-large"),
    ]  # fmt: skip
    async with server.client(auth=False) as client:
        for headers, body, status, kind in cases:
            response = await client.post(url, content=body, headers=headers)
            assert response.status_code == status, (body[:60], response.text)
            assert response.headers["content-type"] == "application/problem+json"
            problem = response.json()
            assert problem["type"] == f"urn:sandstream:problem:{kind}"
            assert problem["status"] == status and problem["title"]
            if status == 401:
                assert response.headers["www-authenticate"].startswith("Bearer")
    assert await server.store.list_chats("w", limit=10, now=0) == []
