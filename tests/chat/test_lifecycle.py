"""How turns settle: single flight, client disconnect (``onDisconnect``), crash, shutdown
(also with a client that stopped reading), capacity, pings."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from sandstream.core.persistence import StepTraceBlock
from sandstream.core.schemas import LoadSpec, ScriptedAgent
from sandstream.server import BwrapContainer, LocalContainer, RunnerSettings
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.runner.turn import TurnStream
from tests.chat.harness import (
    API_TOKEN,
    DEADLINE,
    RUNNER_TOKEN,
    WORKSPACE,
    ChatServer,
    EventReader,
    marked,
    persisted_form,
    plans,
    running_step,
    sleeping,
    start_chat_server,
    wait_no_process,
)
from tests.support.container import remove_run_dirs

pytestmark = pytest.mark.usefixtures("chat_database")


def _assistant(chat: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = chat["messages"][-1]
    return message


def _settled(chat: dict[str, Any]) -> bool:
    return (
        "activeMessageId" not in chat
        and bool(chat["messages"])
        and chat["messages"][-1]["role"] == "assistant"
    )


async def _turn(server: ChatServer) -> TurnStream:
    """The runner's only open turn (the chat turn's session), once it has a container."""
    with trio.fail_after(60):
        while True:
            turns = server.runner.turns()
            if len(turns) == 1 and isinstance(turns[0].container, (LocalContainer, BwrapContainer)):
                return turns[0]
            await trio.sleep(0.01)


async def _container(server: ChatServer) -> LocalContainer | BwrapContainer:
    container = (await _turn(server)).container
    assert isinstance(container, (LocalContainer, BwrapContainer))
    return container


async def test_concurrent_dispatches_on_one_chat_run_exactly_one(server: ChatServer) -> None:
    first = await server.turn("create the chat")
    chat_id = first.chat_id
    count = 12
    statuses: list[int] = []
    problems: list[dict[str, Any]] = []
    winner: dict[str, Any] = {}
    answered = trio.Event()

    async def dispatch() -> None:
        body = {
            "workspaceId": WORKSPACE,
            "chatId": chat_id,
            "message": "slow turn",
            "onDisconnect": "cancel",
        }
        async with server.stream(body) as response:
            statuses.append(response.status_code)
            if response.status_code == 200:
                reader = EventReader(response)
                start = await reader.next()
                assert start is not None and start.event == "start"
                winner.update(msgspec.json.decode(start.data))
            else:
                problems.append(msgspec.json.decode(await response.aread()))
                assert response.headers["content-type"] == "application/problem+json"
            if len(statuses) == count:
                answered.set()
            await answered.wait()  # the winner holds its turn until everyone was answered

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(dispatch)
    assert sorted(statuses) == [200] + [409] * (count - 1)
    for problem in problems:
        assert problem["status"] == 409
        assert problem["type"] == "urn:sandstream:problem:chat-busy"
        assert problem["activeMessageId"] == winner["assistantMessageId"]
        assert problem["activeUserMessageId"] == winner["userMessageId"]
    # The winner's client left (onDisconnect: cancel): its turn is interrupted and
    # settles, and the chat is free.
    chat = await server.wait_chat(chat_id, _settled)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant"] * 2
    assert _assistant(chat)["status"] == "interrupted"


async def test_a_client_that_leaves_does_not_end_the_turn_by_default(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=plans(nap=sleeping(1.5)))
    async with server.stream({"workspaceId": WORKSPACE, "message": "nap now"}) as response:
        reader = EventReader(response)
        await reader.until(running_step)
    chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
    chat = await server.wait_chat(chat_id, _settled)
    assert _assistant(chat)["status"] == "complete"  # it ran to its end without a client


async def test_client_disconnect_with_cancel_stops_the_container_and_persists_interrupted(
    server: ChatServer,
) -> None:
    body = {"workspaceId": WORKSPACE, "message": "slow and steady", "onDisconnect": "cancel"}
    async with server.stream(body) as response:
        assert response.status_code == 200
        reader = EventReader(response)
        await reader.until(running_step)
        turn = await _turn(server)
        container = await _container(server)
        assert container.exit is None
    # Leaving the block closed the connection mid-turn.
    await wait_no_process(turn.id)
    chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
    chat = await server.wait_chat(chat_id, _settled)
    assistant = _assistant(chat)
    assert assistant["status"] == "interrupted"
    assert {"type": "error", "code": "interrupted", "message": "the session was interrupted"} in (
        assistant["content"]
    )
    steps = next(b for b in assistant["content"] if b["type"] == "steps")["steps"]
    # The step that was running is closed, so a history reload shows no spinner.
    assert [(s["name"], s["status"]) for s in steps] == [("run_shell", "cancelled")]
    assert steps[0]["error"] == "the turn was interrupted: the session was interrupted"
    # The chat settles at the session's end; the runner's turn closes once the sandbox
    # is torn down (its mounts released), a moment later on a loaded machine.
    with trio.fail_after(60):
        await turn.closed.wait()
    assert container.exit is not None and container.exit.terminated
    # The lock was released: the next turn runs.
    run = await server.turn("again", chat_id=chat_id)
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"]


async def test_a_crashed_container_ends_the_turn_and_frees_the_chat(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "slow crash"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        turn = await _turn(server)
        container = await _container(server)
        os.kill(container.pid, signal.SIGKILL)
        error = await reader.until(lambda e: e.event == "error")
        done = await reader.next()
        assert done is not None and done.event == "done"
    assert msgspec.json.decode(error.data)["code"] == "upstream_closed"
    assert "SIGKILL" in msgspec.json.decode(error.data)["message"]
    chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
    chat = await server.wait_chat(chat_id, _settled)
    assistant = _assistant(chat)
    assert assistant["status"] == "failed"
    steps = next(b for b in assistant["content"] if b["type"] == "steps")["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [("run_shell", "failed")]
    assert steps[0]["error"].startswith(
        "the turn ended before this step finished: [upstream_closed]"
    )
    assert assistant == persisted_form(reader.events, assistant)
    await wait_no_process(turn.id)
    # A bwrap sandbox's run dirs live in its own /tmp: nothing is left on the host.
    assert remove_run_dirs() == []


async def test_shutdown_ends_live_turns_and_persists_them(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "slow until shutdown"}
    async with trio.open_nursery() as nursery, server.stream(body) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        turn = await _turn(server)
        nursery.start_soon(server.shutdown)
        error = await reader.until(lambda e: e.event == "error")
        done = await reader.next()
    assert msgspec.json.decode(error.data)["code"] == "shutdown"
    assert done is not None and done.event == "done"
    await wait_no_process(turn.id)
    chat_id = msgspec.json.decode(reader.events[0].data)["chatId"]
    messages = await server.store.get_messages(WORKSPACE, chat_id)
    assert messages[-1].status == "failed"
    steps = next(b for b in messages[-1].content if isinstance(b, StepTraceBlock)).steps
    assert [(s.name, s.status) for s in steps] == [("run_shell", "failed")]
    assert steps[0].error == (
        "the turn ended before this step finished: [shutdown] the server is shutting down"
    )
    chat = await server.store.get_chat(WORKSPACE, chat_id, now=0)
    assert chat.active_message_id is None  # released (now=0: any lease would count)


async def test_pings_keep_an_idle_stream_alive(nursery: trio.Nursery, tmp_path: Path) -> None:
    agent = plans(nap=sleeping(1.5))
    server = await start_chat_server(nursery, tmp_path, agent=agent, ping_interval=0.2)
    run = await server.turn("nap a little")
    assert run.status == 200
    assert "ping" in run.comments
    assert b"\n\n: ping\n" in run.body  # between frames, with no blank line of its own
    assert b": ping\n\n" not in run.body
    assert run.kinds[-2:] == ["result", "done"]
    ids = [int(e.id) for e in run.events]
    assert ids[0] == 0 and ids == sorted(set(ids))


async def test_a_full_runner_answers_503_and_writes_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(
        nursery,
        tmp_path,
        agent=plans(slow=sleeping(300)),
        runner_settings=RunnerSettings(
            token=RUNNER_TOKEN,
            max_live=1,
            retry_after=7,
        ),
    )
    async with server.stream({"workspaceId": WORKSPACE, "message": "slow one"}) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        refused = await server.turn("another chat")
        assert refused.status == 503
        assert refused.headers["retry-after"] == "7"
        assert refused.problem["type"] == "urn:sandstream:problem:at-capacity"
        listed = await server.store.list_chats(WORKSPACE, limit=10, now=0)
        assert len(listed) == 1  # the refused turn's chat was not kept
        assert listed[0].message_count == 1


async def test_a_client_that_stops_reading_is_cut_off(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    flood = ScriptedAgent(load=LoadSpec(lines=40_000, payload_bytes=1024, line_type="step"))
    server = await start_chat_server(nursery, tmp_path, agent=plans(flood=flood), stall_timeout=1.0)
    body = msgspec.json.encode(
        {"workspaceId": WORKSPACE, "message": "flood me", "onDisconnect": "cancel"}
    )
    stream = await _post_raw(server, body)
    try:
        # Never read: the server's writes block once the socket buffers are full; the
        # watchdog cuts the client (and onDisconnect: cancel interrupts the turn, unless
        # the flood ended first).
        with trio.fail_after(DEADLINE):
            while not (chats := await server.store.list_chats(WORKSPACE, limit=1, now=now_ms())):
                await trio.sleep(0.05)
            chat = await server.wait_chat(chats[0].id, _settled)
            while len(server.service.turns.viewers):  # the viewer was cut off
                await trio.sleep(0.05)
        assert _assistant(chat)["status"] in ("interrupted", "complete")
    finally:
        await stream.aclose()


async def _post_raw(
    server: ChatServer, body: bytes, rcvbuf: int | None = None
) -> trio.SocketStream:
    host, port = server.url.removeprefix("http://").split(":")
    sock = trio.socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, rcvbuf)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    await stream.send_all(
        b"POST /api/assistant/chat/stream HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (API_TOKEN.encode(), len(body), body)
    )
    return stream


async def test_shutdown_with_a_client_that_stopped_reading_settles_as_shutdown(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    paced = ScriptedAgent(
        load=LoadSpec(lines=400_000, rate=2000, payload_bytes=1024, line_type="step")
    )
    server = await start_chat_server(
        nursery,
        tmp_path,
        agent=plans(flood=paced),
        stall_timeout=None,  # no watchdog: only shutdown may end this viewer
        runner_settings=RunnerSettings(
            token=RUNNER_TOKEN,
            max_live=4,
            shutdown_timeout=5.0,
            stall_timeout=None,
        ),
        kill_grace=300.0,  # a container left to the grace would outlive the test
    )
    body = msgspec.json.encode({"workspaceId": WORKSPACE, "message": "flood me"})
    stream = await _post_raw(server, body, rcvbuf=4096)
    try:
        # Never read. The session goes on regardless (its buffer takes the output).
        turn = await _turn(server)
        container = await _container(server)
        assert server.service.sessions is not None
        with trio.fail_after(DEADLINE):
            while not any(s.last_cursor > 4000 for s in server.service.sessions.sessions()):
                await trio.sleep(0.05)
        await server.shutdown()
        # By the time shutdown returned the container was gone, stopped by SIGTERM
        # rather than killed after the 300 s grace, and the turn was settled.
        assert marked(turn.id) == []
        assert container.exit is not None and not container.exit.escalated
        chats = await server.store.list_chats(WORKSPACE, limit=1, now=now_ms())
        chat = await server.store.get_chat(WORKSPACE, chats[0].id, now=0)
        assert chat.active_message_id is None
        messages = await server.store.get_messages(WORKSPACE, chats[0].id)
        answer = messages[-1]
        assert (answer.role, answer.status) == ("assistant", "failed")
        error = msgspec.to_builtins(answer.content[-1])
        assert error["type"] == "error" and error["code"] == "shutdown", error
    finally:
        await stream.aclose()  # (frees a server stuck writing to it, if shutdown failed)
