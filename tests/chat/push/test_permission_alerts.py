"""The push alerts of permission requests and lost turns in a real chat store (SQLite
and PostgreSQL), as the log mover, the viewers, the answer route and the lost-turn
sweep record them: a question a viewer saw before its alert was recorded pushes nobody;
a newer question replaces the one waiting; a settled turn drops its waiting question
and dismisses one a device had; a mover whose lease was taken over records nothing; a
turn the sweep settles as lost gets a failed turn's alert."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandstream.core.persistence import assistant_message
from sandstream.core.turn import Turn
from sandstream.server.chat.credentials.one_time import mint_tokens
from sandstream.server.chat.model.errors import FencedError
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import PushSubscription, TurnRecord, TurnRequest
from sandstream.server.chat.store.sql import SqlChatStore
from tests.chat.databases import open_store

pytestmark = pytest.mark.usefixtures("chat_database")

WORKSPACE = "ws_questions"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlChatStore]:
    opened = await open_store(tmp_path)
    try:
        await opened.add_push_subscription(
            PushSubscription(
                id="dev_phone",
                workspace_id=WORKSPACE,
                kind="fcm",
                address="fcm-token-of-the-phone",
                created_at=now_ms(),
            )
        )
        yield opened
    finally:
        await opened.close()


async def running_turn(store: SqlChatStore, *, lock_ms: int = 60_000) -> TurnRecord:
    """A turn of a new chat, running on a runner session, its lock held ``lock_ms``."""
    now = now_ms()
    turn_id = new_id("sess")
    start = await store.begin_turn(
        TurnRequest(
            workspace_id=WORKSPACE,
            chat_id=None,
            workflow_id=None,
            text="tidy the repository",
            attachment_ids=[],
            user_message_id=new_id("msg"),
            assistant_message_id=new_id("msg"),
            session_id=turn_id,
            holder=f"srv_test:{turn_id}",
            lease_expires_at=now + lock_ms,
            tokens=list(mint_tokens(now).stored),
            now=now,
            replay_limit=20,
        )
    )
    session_id = new_id("ses")
    await store.attach_runner_session(turn_id, session_id)
    record = await store.get_turn(session_id)
    assert record is not None and record.chat_id == start.chat.id
    return record


async def pushes(store: SqlChatStore) -> list[dict[str, Any]]:
    """Every push: the questions' alerts by request id, then the others oldest first
    (two written in one millisecond have no order of their own)."""

    def read(conn: Any) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT id, kind, collapse_key, title, body, permission_id, state, seen_at, "
            "created_at FROM pending_pushes"
        ).fetchall()
        return [dict(zip(row.keys(), row, strict=True)) for row in rows]

    rows = await store.db.read(read)
    return sorted(
        rows,
        key=lambda r: (r["permission_id"] is None, r["permission_id"] or "", r["created_at"]),
    )


async def ask(
    store: SqlChatStore, turn: TurnRecord, asked: str | None, *resolved: str, generation: int = 1
) -> None:
    assert turn.session_id is not None
    await store.record_permission_news(
        turn.session_id, generation=generation, asked=asked, resolved=resolved, now=now_ms()
    )


async def test_a_question_a_viewer_saw_before_its_alert_was_recorded_pushes_nobody(
    store: SqlChatStore,
) -> None:
    turn = await running_turn(store)
    await store.mark_permissions_seen(turn.id, ["perm_1"], now_ms())  # the viewer was first
    await ask(store, turn, "perm_1")
    await ask(store, turn, "perm_2")
    first, second = await pushes(store)
    assert (first["permission_id"], first["state"]) == ("perm_1", "dropped")  # replaced
    assert first["seen_at"] is not None
    assert (second["permission_id"], second["state"], second["seen_at"]) == (
        "perm_2",
        "pending",
        None,
    )
    assert second["title"] == "Waiting for your answer"
    assert second["body"] == "tidy the repository"
    assert second["collapse_key"] == f"permission-{turn.chat_id}"
    await store.mark_permissions_seen(turn.id, ["perm_2"], now_ms())
    assert (await pushes(store))[1]["seen_at"] is not None


async def test_a_question_recorded_again_after_a_takeover_stays_one_alert(
    store: SqlChatStore,
) -> None:
    turn = await running_turn(store)
    await ask(store, turn, "perm_1")
    await ask(store, turn, "perm_1", generation=2)  # the new owner folds it again
    [alert] = await pushes(store)
    assert (alert["permission_id"], alert["state"]) == ("perm_1", "pending")


async def test_an_answered_question_is_dropped_or_dismissed(store: SqlChatStore) -> None:
    turn = await running_turn(store)
    await ask(store, turn, "perm_1")
    await store.permission_answered(turn.id, "perm_1", now_ms())
    [dropped] = await pushes(store)
    assert dropped["state"] == "dropped"  # it waited: nobody is pushed

    await ask(store, turn, "perm_2")
    [claimed] = await store.claim_due_pushes("a", now=now_ms(), delay_ms=0, lease_ms=30_000)
    assert claimed.permission_id == "perm_2"
    await store.begin_push_delivery(
        claimed.id, "dev_phone", generation=claimed.generation, now=now_ms(), lease_ms=30_000
    )
    await store.finish_push_delivery(claimed.id, "dev_phone", "sent", generation=claimed.generation)
    await store.end_push(claimed.id, generation=claimed.generation, now=now_ms())
    await ask(store, turn, None, "perm_2")  # the mover folded its resolved line
    await store.permission_answered(turn.id, "perm_2", now_ms())  # and it was answered here
    _, sent, dismiss = await pushes(store)
    assert (sent["permission_id"], sent["state"]) == ("perm_2", "sent")
    assert (dismiss["id"], dismiss["kind"], dismiss["state"]) == (
        f"{sent['id']}.dismiss",
        "dismiss",
        "pending",
    )
    assert dismiss["collapse_key"] == f"permission-{turn.chat_id}"


async def test_a_settled_turn_drops_its_waiting_question_and_alerts_its_end(
    store: SqlChatStore,
) -> None:
    turn = await running_turn(store)
    await ask(store, turn, "perm_1")
    message = assistant_message(Turn(), message_id=turn.assistant_message_id, created_at=now_ms())
    assert await store.settle_turn(turn.id, message, now_ms())
    question, end = await pushes(store)
    assert (question["permission_id"], question["state"]) == ("perm_1", "dropped")
    assert (end["permission_id"], end["state"], end["title"]) == (None, "pending", "Failed")
    assert end["collapse_key"] == f"chat-{turn.chat_id}"
    await ask(store, turn, "perm_2")  # a mover late with its news: the turn is settled
    assert len(await pushes(store)) == 2


async def test_a_mover_whose_lease_was_taken_over_records_nothing(store: SqlChatStore) -> None:
    turn = await running_turn(store)
    assert turn.session_id is not None
    await store.moved_chunks.fence(turn.session_id, 3)
    with pytest.raises(FencedError):
        await ask(store, turn, "perm_1", generation=2)
    assert await pushes(store) == []
    await ask(store, turn, "perm_1", generation=3)
    assert len(await pushes(store)) == 1


async def test_a_turn_the_sweep_settles_as_lost_alerts_as_a_failed_turn(
    store: SqlChatStore,
) -> None:
    turn = await running_turn(store, lock_ms=0)  # its server died: the lock has expired
    await ask(store, turn, "perm_1")
    assert await store.sweep_lost_turns(now=now_ms() + 1) == [turn.chat_id]
    question, lost = await pushes(store)
    assert question["state"] == "dropped"
    assert (lost["kind"], lost["state"], lost["title"]) == ("alert", "pending", "Failed")
    assert lost["body"] == "tidy the repository"
    assert lost["collapse_key"] == f"chat-{turn.chat_id}"
