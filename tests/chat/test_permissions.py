"""Live text and the human in the loop through the chat: the scripted agent streams its
answer as ``delta`` events and asks before a step (``permission`` events); answers go
through ``POST /api/assistant/chats/{chatId}/permissions/{requestId}`` to the turn's
runner session, which takes the first. Real server, real sandboxes, real containers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from benchmarks.support.runner_process import start_runner_process
from sandstream.core.schemas import ScriptedAgent, ScriptedStep
from sandstream.core.sse_parser import ServerSentEvent
from tests.chat.harness import (
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    persisted_form,
    plans,
    start_chat_server,
    wait_no_process,
)

pytestmark = pytest.mark.usefixtures("chat_database")

PARAMS = {"workspaceId": WORKSPACE}


def _asking(command: str = "echo ran", *, times: int = 1) -> ScriptedAgent:
    step = ScriptedStep(tool="run_shell", args={"command": command, "timeout_sec": 60}, ask=True)
    return ScriptedAgent(steps=[step] * times, message="asked: {prompt}")


AGENT = plans(
    ask=_asking(),
    three=ScriptedAgent(
        steps=[
            *_asking(times=2).steps,
            ScriptedStep(tool="write_file", args={"path": "x.txt", "content": "x"}, ask=True),
        ],
        message="asked: {prompt}",
    ),
    think=ScriptedAgent(
        message="The answer, in several words: {prompt}", reasoning="Let me think it over."
    ),
    unanswered=ScriptedAgent(
        steps=[ScriptedStep(tool="run_shell", args={"command": "echo ran"}, ask=True)],
        permission_timeout_sec=0.5,
    ),
)


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> ChatServer:
    return await start_chat_server(nursery, tmp_path / "data", agent=AGENT)


def _data(event: ServerSentEvent) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode(event.data)
    return data


def _pending(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "pending"


def _resolved(event: ServerSentEvent) -> bool:
    return event.event == "permission" and _data(event)["status"] == "resolved"


async def _answer(server: ChatServer, chat_id: str, request_id: str, body: Any) -> httpx.Response:
    async with server.client() as client:
        return await client.post(
            f"/api/assistant/chats/{chat_id}/permissions/{request_id}", params=PARAMS, json=body
        )


async def _to_the_end(reader: EventReader) -> list[str]:
    with trio.fail_after(DEADLINE):
        while await reader.next() is not None:
            pass
    return [e.event for e in reader.events]


async def _settled(server: ChatServer, chat_id: str) -> dict[str, Any]:
    chat = await server.wait_chat(chat_id, lambda c: "activeMessageId" not in c)
    message: dict[str, Any] = chat["messages"][-1]
    return message


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b["type"] == kind]


async def test_the_answer_streams_before_the_result_and_the_stored_message_is_the_fold(
    server: ChatServer,
) -> None:
    run = await server.turn("think hard")
    kinds = run.kinds
    assert kinds[-2:] == ["result", "done"]
    deltas = run.data("delta")
    text = [d for d in deltas if d["kind"] == "text"]
    reasoning = [d for d in deltas if d["kind"] == "reasoning"]
    [result] = run.data("result")
    assert result["message"] == "The answer, in several words: think hard"
    assert len(text) > 3 and "".join(d["text"] for d in text) == result["message"]
    assert "".join(d["text"] for d in reasoning) == "Let me think it over."
    assert len({d["id"] for d in text}) == 1  # one message
    assert kinds.index("delta") < kinds.index("result")
    stored = await _settled(server, run.chat_id)
    assert stored == persisted_form(run.events, stored)
    assert _blocks(stored, "text") == [{"type": "text", "text": result["message"]}]
    assert stored["status"] == "complete"


@pytest.mark.parametrize("reply", ["once", "always", "reject"])
async def test_a_permission_answered_from_the_chat(server: ChatServer, reply: str) -> None:
    """Two asking shell steps, then an asking write: the first request is answered
    ``reply``, every later one ``reject`` (the turn stays live meanwhile)."""
    body = {"workspaceId": WORKSPACE, "message": "three please"}
    async with server.stream(body) as response:
        assert response.status_code == 200
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        chat_id = _data(reader.events[0])["chatId"]
        assert [o["kind"] for o in asked["options"]] == [
            "allow_once",
            "allow_always",
            "reject_once",
        ]
        assert asked["step"] and asked["title"]
        answered = await _answer(server, chat_id, asked["id"], {"reply": reply})
        assert answered.status_code == 200, answered.text
        assert answered.json() == {"chatId": chat_id, "requestId": asked["id"], "reply": reply}
        with trio.fail_after(DEADLINE):  # the next request: the turn is still live
            later: dict[str, Any] | None = _data(await reader.until(_pending))
        # The first answer won: a second one is refused, whatever it says.
        again = await _answer(server, chat_id, asked["id"], {"reply": "once"})
        assert again.status_code == 409
        assert again.headers["content-type"] == "application/problem+json"
        assert again.json()["type"] == "urn:sandstream:problem:permission-answered"
        with trio.fail_after(DEADLINE):
            while later is not None:
                refused = await _answer(server, chat_id, later["id"], {"reply": "reject"})
                assert refused.status_code == 200, refused.text
                event = await reader.until(lambda e: _pending(e) or e.event == "done")
                later = _data(event) if event.event == "permission" else None
        kinds = [e.event for e in reader.events]
    resolved = [_data(e) for e in reader.events if _resolved(e)]
    assert resolved[0] == {
        "type": "permission", "id": asked["id"], "status": "resolved", "reply": reply,
        "ts": resolved[0]["ts"],
    }  # fmt: skip
    assert [r["reply"] for r in resolved[1:]] == ["reject"] * (len(resolved) - 1)
    # always: the second shell step runs without asking again; only the write asks.
    assert len(resolved) == (2 if reply == "always" else 3)
    steps = [_data(e) for e in reader.events if e.event == "step" and '"running"' not in e.data]
    assert steps[0]["id"] == asked["step"]
    first_two = [s["status"] for s in steps[:2]]
    if reply == "reject":
        assert first_two == ["failed", "failed"]
        assert steps[0]["error"] == "rejected by the user"
    elif reply == "once":
        assert first_two == ["succeeded", "failed"]
    else:
        assert first_two == ["succeeded", "succeeded"]
        assert all("ran" in s["result"]["stdout"] for s in steps[:2])
    assert steps[2]["status"] == "failed"  # the write, rejected
    assert kinds[-2:] == ["result", "done"]
    stored = await _settled(server, chat_id)
    assert stored == persisted_form(reader.events, stored)
    assert [b["reply"] for b in _blocks(stored, "permission")] == [r["reply"] for r in resolved]
    # Once the turn has ended there is nothing to answer.
    late = await _answer(server, chat_id, asked["id"], {"reply": "once"})
    assert late.status_code == 409


async def test_unknown_requests_and_bad_replies_are_refused(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "ask please"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        chat_id = _data(reader.events[0])["chatId"]
        unknown = await _answer(server, chat_id, "perm_nosuchrequest", {"reply": "once"})
        assert unknown.status_code == 404
        assert unknown.json()["type"] == "urn:sandstream:problem:permission-not-found"
        assert unknown.json()["requestId"] == "perm_nosuchrequest"  # the chat API's casing
        for bad in ({"reply": "sure"}, {}, {"reply": "once", "extra": 1}, ["once"]):
            refused = await _answer(server, chat_id, asked["id"], bad)
            assert refused.status_code == 422, bad
            assert refused.json()["type"] == "urn:sandstream:problem:invalid-body"
        # None of that answered it: the real answer still wins.
        assert (await _answer(server, chat_id, asked["id"], {"reply": "once"})).status_code == 200
        await _to_the_end(reader)
    assert [_data(e)["reply"] for e in reader.events if _resolved(e)] == ["once"]


async def test_every_viewer_sees_the_card_pending_and_its_outcome(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "ask please"}
    async with server.stream(body) as response:
        first = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await first.until(_pending))
        chat_id = _data(first.events[0])["chatId"]
        # A viewer that joins now (a reload) sees the request, still pending.
        async with (
            server.client() as client,
            client.stream("GET", f"/api/assistant/chats/{chat_id}/stream", params=PARAMS) as joined,
        ):
            second = EventReader(joined)
            with trio.fail_after(DEADLINE):
                seen = _data(await second.until(_pending))
            assert seen == asked
            assert not any(_resolved(e) for e in second.events)
            assert (
                await _answer(server, chat_id, asked["id"], {"reply": "once"})
            ).status_code == 200
            await _to_the_end(second)
        await _to_the_end(first)
    for reader in (first, second):
        outcomes = [_data(e)["reply"] for e in reader.events if _resolved(e)]
        assert outcomes == ["once"]
        assert reader.events[-1].event == "done"


async def test_an_unanswered_request_is_rejected_after_its_timeout(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "unanswered"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        kinds = await _to_the_end(reader)
    [resolved] = [_data(e) for e in reader.events if _resolved(e)]
    assert resolved["reply"] == "reject"
    [failed] = [_data(e) for e in reader.events if e.event == "step" and '"failed"' in e.data]
    assert failed["error"] == "rejected: no answer within 0.5 s"
    assert kinds[-2:] == ["result", "done"]
    stored = await _settled(server, _data(reader.events[0])["chatId"])
    [block] = _blocks(stored, "permission")
    assert block["status"] == "resolved" and block["reply"] == "reject"


async def test_an_interrupt_cancels_a_pending_request_and_leaves_no_process(
    server: ChatServer,
) -> None:
    body = {"workspaceId": WORKSPACE, "message": "ask please"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        chat_id = _data(reader.events[0])["chatId"]
        [turn] = server.runner.turns()
        async with server.client() as client:
            stopped = await client.post(f"/api/assistant/chats/{chat_id}/interrupt", params=PARAMS)
        assert stopped.status_code == 200, stopped.text
        kinds = await _to_the_end(reader)
    await wait_no_process(turn.id)
    assert kinds[-3:] == ["permission", "error", "done"]
    assert _data(reader.events[-3]) == {
        "type": "permission", "id": asked["id"], "status": "resolved", "reply": "cancelled",
        "ts": _data(reader.events[-3])["ts"],
    }  # fmt: skip
    assert _data(reader.events[-2])["code"] == "interrupted"
    stored = stopped.json()["message"]
    assert stored["status"] == "interrupted"
    assert stored == persisted_form(reader.events, stored)
    [block] = _blocks(stored, "permission")
    assert (block["status"], block["reply"]) == ("resolved", "cancelled")
    late = await _answer(server, chat_id, asked["id"], {"reply": "once"})
    assert late.status_code == 409


async def test_two_replicas_answering_at_once_one_wins(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Replicas share the chat database and a remote runner: its session takes the
    first answer, the other replica's gets the runner's 409 as its own."""
    runner = await start_runner_process(
        nursery, "--data-dir", str(tmp_path / "runner-data"), token=RUNNER_TOKEN
    )
    data_dir = tmp_path / "chat-data"
    first, second = [
        await start_chat_server(
            nursery, data_dir, embedded=False, sandbox_url=runner.url, agent=AGENT
        )
        for _ in range(2)
    ]
    # Three asking steps: the turn stays live, waiting on the next request, while the
    # two replicas' answers to the first are taken.
    body = {"workspaceId": WORKSPACE, "message": "three please"}
    async with first.stream(body) as response:
        reader = EventReader(response)
        with trio.fail_after(DEADLINE):
            asked = _data(await reader.until(_pending))
        chat_id = _data(reader.events[0])["chatId"]
        # An unknown request is the runner's 404, passed on by the other replica.
        unknown = await _answer(second, chat_id, "perm_nosuchrequest", {"reply": "once"})
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["type"] == "urn:sandstream:problem:permission-not-found"
        answers: dict[str, httpx.Response] = {}

        async def answer(name: str, replica: ChatServer, reply: str) -> None:
            answers[name] = await _answer(replica, chat_id, asked["id"], {"reply": reply})

        async with trio.open_nursery() as both:
            both.start_soon(answer, "first", first, "reject")
            both.start_soon(answer, "second", second, "once")
        statuses = sorted(r.status_code for r in answers.values())
        assert statuses == [200, 409], {k: r.text for k, r in answers.items()}
        [winner] = [name for name, r in answers.items() if r.status_code == 200]
        loser = answers["second" if winner == "first" else "first"]
        assert loser.json()["type"] == "urn:sandstream:problem:permission-answered"
        with trio.fail_after(DEADLINE):  # the rest of the turn: reject what it asks
            while True:
                event = await reader.until(lambda e: _pending(e) or e.event == "done")
                if event.event == "done":
                    break
                later = _data(event)
                assert (await _answer(first, chat_id, later["id"], {"reply": "reject"})).is_success
    resolved = [_data(e) for e in reader.events if _resolved(e)]
    assert resolved[0]["id"] == asked["id"]
    assert resolved[0]["reply"] == answers[winner].json()["reply"]


async def _ui_chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The UI message stream's chunks, as they arrive."""
    pending = b""
    async for data in response.aiter_bytes():
        pending += data
        *frames, pending = pending.split(b"\n\n")
        for frame in frames:
            payload = frame.removeprefix(b"data: ")
            if payload != b"[DONE]":
                yield msgspec.json.decode(payload)


@pytest.mark.parametrize("version", [None, "6", "7"])
async def test_the_ai_sdk_stream_carries_the_request_for_the_clients_version(
    server: ChatServer, version: str | None
) -> None:
    async with server.client() as client:
        chat = await client.post("/api/assistant/chats", json=PARAMS)
        chat_id = chat.json()["id"]
        body = {
            "id": chat_id,
            "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "ask"}]}],
        }
        headers = {} if version is None else {"X-AI-SDK-Version": version}
        bad = await client.post(
            "/api/assistant/ui/chat", params=PARAMS, json=body, headers={"X-AI-SDK-Version": "v6"}
        )
        assert bad.status_code == 422
        chunks: list[dict[str, Any]] = []
        async with client.stream(
            "POST", "/api/assistant/ui/chat", params=PARAMS, json=body, headers=headers
        ) as response:
            assert response.status_code == 200
            with trio.fail_after(DEADLINE):
                async for chunk in _ui_chunks(response):
                    chunks.append(chunk)
                    if chunk["type"] == "data-permission" and chunk["data"]["status"] == "pending":
                        answered = await _answer(server, chat_id, chunk["id"], {"reply": "once"})
                        assert answered.status_code == 200
    kinds = [c["type"] for c in chunks]
    assert kinds.count("data-permission") == 2  # pending, then resolved
    assert ("tool-approval-request" in kinds) is (version is not None)
    assert ("tool-approval-response" in kinds) is (version == "7")
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "asked: ask"
