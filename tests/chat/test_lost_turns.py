"""Lost turns are settled with nobody touching their chat: lock released, session
settled, tokens dead. A turn whose runner session is known is taken over by the log
mover and settled from its chunks (its steps kept); one without is settled as
``turn_lost`` by the lost-turn sweep, at start-up and periodically, and keeps the
grants its ``always`` answers gave."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from sandstream.server.chat import SqlChatStore
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.sessions.buffer import BUFFER_FILE
from tests.chat.databases import open_store
from tests.chat.harness import (
    DEADLINE,
    WORKSPACE,
    EventReader,
    begin_dead_turn,
    descendants,
    kill_and_wait,
    plans,
    running_step,
    sleeping,
    start_chat_server,
    start_serve_process,
)
from tests.server.harness import wait_until_alive
from tests.support.container import remove_run_dirs

pytestmark = pytest.mark.usefixtures("chat_database")

SLOW = {
    "agent": {
        "kind": "scripted",
        "steps": [{"tool": "run_shell", "args": {"command": "sleep 120", "timeout_sec": 300}}],
        "message": "slept",
    }
}


async def _state(store: SqlChatStore, chat_id: str, session_id: str) -> dict[str, Any]:
    """What is left of a turn: the chat's lock, the session, its live tokens, the messages."""

    def read(conn: Any) -> dict[str, Any]:
        chat = conn.execute("SELECT lock_holder FROM chats WHERE id = ?", (chat_id,)).fetchone()
        session = conn.execute(
            "SELECT settled_at FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        live = conn.execute(
            "SELECT purpose FROM tokens WHERE session_id = ? AND used_at IS NULL "
            "AND expires_at > ? ORDER BY purpose",
            (session_id, now_ms()),
        ).fetchall()
        return {
            "holder": chat["lock_holder"],
            "settled": session["settled_at"] is not None,
            "live_tokens": [row[0] for row in live],
        }

    state = await store.db.read(read)
    state["messages"] = await store.get_messages(WORKSPACE, chat_id)
    return state


def _assert_lost(state: dict[str, Any], assistant_id: str) -> None:
    assert state["holder"] is None
    assert state["settled"]
    assert state["live_tokens"] == []
    user, lost = state["messages"]
    assert user.role == "user"
    assert (lost.id, lost.role, lost.status) == (assistant_id, "assistant", "failed")
    assert msgspec.to_builtins(lost.content[-1])["code"] == "turn_lost"


async def test_after_a_sigkill_the_restarted_server_settles_the_lost_turn_with_its_steps(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    first = await start_serve_process(nursery, data_dir, SLOW)
    token = (data_dir / "api-token").read_text().strip()
    body = {"workspaceId": WORKSPACE, "message": "slow and doomed"}
    async with (
        first.client(token) as client,
        client.stream("POST", "/api/assistant/chat/stream", json=body) as response,
    ):
        runner_session = response.headers["x-session-id"]
        reader = EventReader(response)
        await reader.until(running_step)
        start = msgspec.json.decode(reader.events[0].data)
        await wait_until_alive(first.process.pid, "sleep 120")  # else it may start unseen
        orphans = descendants(first.process.pid)
        first.process.send_signal(signal.SIGKILL)
        with trio.fail_after(DEADLINE):
            await first.exited.wait()
    await kill_and_wait(orphans)  # nobody reaps the orphaned container of a SIGKILLed server
    # A bwrap sandbox's run dirs live in its own /tmp: nothing is left on the host.
    assert remove_run_dirs() == []
    store = await open_store(data_dir)
    try:
        turn = await store.get_turn(runner_session)
        assert turn is not None and turn.state == "running"
        before = await _state(store, start["chatId"], turn.id)
        assert before["holder"] is not None and not before["settled"]
        assert before["live_tokens"] == ["upload"]  # setup and run were redeemed
        assert [m.role for m in before["messages"]] == ["user"]
        # Wait out the dead server's lease (2 s), so the start-up sweep owns it.
        expires = await store.db.read(
            lambda conn: conn.execute(
                "SELECT lock_expires_at FROM chats WHERE id = ?", (start["chatId"],)
            ).fetchone()[0]
        )
        with trio.fail_after(DEADLINE):
            while now_ms() <= expires:
                await trio.sleep(0.05)
        # No periodic lost-turn sweep in time: the log mover takes it over.
        second = await start_serve_process(nursery, data_dir, SLOW, "--sweep-interval", "3600")
        with trio.fail_after(DEADLINE):
            while (after := await _state(store, start["chatId"], turn.id))["holder"]:
                await trio.sleep(0.05)
    finally:
        await store.close()
    assert after["settled"] and after["live_tokens"] == []
    _user, lost = after["messages"]
    assert (lost.id, lost.role, lost.status) == (start["assistantMessageId"], "assistant", "failed")
    content = msgspec.to_builtins(lost.content)
    assert content[-1]["code"] == "runner_lost"  # the restarted runner ended its session
    [steps] = [block["steps"] for block in content if block["type"] == "steps"]
    assert [(s["name"], s["status"]) for s in steps] == [("run_shell", "failed")]
    second.process.send_signal(signal.SIGTERM)
    with trio.fail_after(DEADLINE):
        await second.exited.wait()


ASK_THEN_SLEEP = {
    "agent": {
        "kind": "scripted",
        "steps": [
            {"tool": "run_shell", "args": {"command": "echo asked"}, "ask": True},
            {"tool": "run_shell", "args": {"command": "sleep 120", "timeout_sec": 300}},
        ],
        "message": "slept",
    }
}


async def test_a_turn_settled_lost_by_the_sweep_keeps_its_grants(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """An ``always`` of a turn whose server dies and whose session is gone with it (the
    restarted server cannot take it over: the sweep settles it ``turn_lost``) is the
    chat's grant all the same, from the moment the log mover folded the answer."""
    data_dir = tmp_path / "data"
    first = await start_serve_process(nursery, data_dir, ASK_THEN_SLEEP)
    token = (data_dir / "api-token").read_text().strip()
    body = {"workspaceId": WORKSPACE, "message": "ask, then die"}
    async with first.client(token) as client:
        async with client.stream("POST", "/api/assistant/chat/stream", json=body) as response:
            reader = EventReader(response)
            with trio.fail_after(DEADLINE):
                asked = await reader.until(
                    lambda e: e.event == "permission" and '"pending"' in e.data
                )
                start = msgspec.json.decode(reader.events[0].data)
                chat_id = start["chatId"]
                request_id = msgspec.json.decode(asked.data)["id"]
                answer = await client.post(
                    f"/api/assistant/chats/{chat_id}/permissions/{request_id}",
                    params={"workspaceId": WORKSPACE},
                    json={"reply": "always"},
                )
                assert answer.status_code == 200, answer.text
                await reader.until(lambda e: running_step(e) and "sleep 120" in e.data)
        grants = f"/api/assistant/chats/{chat_id}/grants"
        with trio.fail_after(DEADLINE):  # the mover folded the answer: the chat holds it
            while not (await client.get(grants, params={"workspaceId": WORKSPACE})).json()[
                "grants"
            ]:
                await trio.sleep(0.05)
    await wait_until_alive(first.process.pid, "sleep 120")
    orphans = descendants(first.process.pid)
    first.process.send_signal(signal.SIGKILL)
    with trio.fail_after(DEADLINE):
        await first.exited.wait()
    await kill_and_wait(orphans)
    assert remove_run_dirs() == []
    for buffer in data_dir.glob(f"{BUFFER_FILE}*"):  # its session is gone with it
        buffer.unlink()
    store = await open_store(data_dir)
    try:
        expires = await store.db.read(
            lambda conn: conn.execute(
                "SELECT lock_expires_at FROM chats WHERE id = ?", (chat_id,)
            ).fetchone()[0]
        )
        with trio.fail_after(DEADLINE):
            while now_ms() <= expires:
                await trio.sleep(0.05)
        second = await start_serve_process(nursery, data_dir, ASK_THEN_SLEEP)
        turn = await store.get_turn(response.headers["x-session-id"])
        assert turn is not None
        with trio.fail_after(DEADLINE):  # the start-up sweep settles it
            while (after := await _state(store, chat_id, turn.id))["holder"]:
                await trio.sleep(0.05)
        _assert_lost(after, start["assistantMessageId"])
    finally:
        await store.close()
    async with second.client(token) as client:
        listed = (await client.get(grants, params={"workspaceId": WORKSPACE})).json()["grants"]
    assert [(g["kind"], g["title"], g["messageId"]) for g in listed] == [
        ("run_shell", "Run run_shell?", start["assistantMessageId"])
    ], listed
    second.process.send_signal(signal.SIGTERM)
    with trio.fail_after(DEADLINE):
        await second.exited.wait()


async def test_the_periodic_sweep_settles_a_lease_that_expires_while_serving(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(
        nursery,
        tmp_path,
        agent=plans(slow=sleeping(300)),
        sweep_interval=0.2,
        lock_lease=2.0,
        lock_heartbeat=0.1,
    )
    # A turn of a server that died: its lock expires in 0.5 s and nobody renews it.
    now = now_ms()
    dead = await begin_dead_turn(server.store, "lost in a crash", lease_ms=500)
    session_id = dead.session.id
    # A live turn alongside, whose heartbeat keeps its lease: the sweep leaves it be.
    async with server.stream({"workspaceId": WORKSPACE, "message": "slow one"}) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        live = msgspec.json.decode(reader.events[0].data)
        with trio.fail_after(DEADLINE):
            while (await _state(server.store, dead.chat.id, session_id))["holder"] is not None:
                await trio.sleep(0.05)
        _assert_lost(
            await _state(server.store, dead.chat.id, session_id),
            dead.session.assistant_message_id or "",
        )
        # Several sweeps and more than a lease later, the live turn still holds its chat.
        with trio.fail_after(DEADLINE):
            while now_ms() < now + 3000:
                await trio.sleep(0.1)
        chat = await server.store.get_chat(WORKSPACE, live["chatId"], now=now_ms())
        assert chat.active_message_id == live["assistantMessageId"]


async def test_a_start_held_up_longer_than_the_lock_lease_is_not_taken_for_lost(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A turn whose runner session takes longer to start than the chat lock's lease
    (its session database locked by another process for a while) keeps its lock, and
    runs and settles as usual: the sweeps in the meantime leave it be."""
    server = await start_chat_server(
        nursery, tmp_path, sweep_interval=0.2, lock_lease=1.0, lock_heartbeat=0.25
    )
    held = 4.0  # four leases, sixteen sweeps
    other = sqlite3.connect(tmp_path / BUFFER_FILE, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")

        async def release() -> None:
            await trio.sleep(held)
            other.execute("COMMIT")

        async with trio.open_nursery() as holding:
            holding.start_soon(release)
            run = await server.turn("slow to start")
    finally:
        other.close()
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"]
    chat = await server.chat(run.chat_id)
    assert [(m["role"], m.get("status")) for m in chat["messages"]][-1] == (
        "assistant",
        "complete",
    )
