"""Replay: the sandbox sees the last 20 messages of the conversation, no more, and
replay reads only the text it sends (never a message's body)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.support.model_server import reply, start_model_server
from sandstream.core.persistence import (
    ErrorBlock,
    PersistedFileAttachment,
    PersistedMessage,
    StepTrace,
    StepTraceBlock,
    TextBlock,
    replay_text,
    user_message,
)
from sandstream.core.schemas import ChatTurn
from sandstream.server.chat import SQLiteChatStore, load_agent_profile
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import TurnFinish, TurnRequest
from sandstream.server.chat.store.migrations import MIGRATIONS, migrate
from sandstream.server.chat.store.sql import DATABASE_NAME
from tests.chat.harness import WORKSPACE, ChatServer, allow, start_chat_server


async def _seed_turns(server: ChatServer, count: int) -> str:
    """``count`` settled turns through the store's own turn path; returns the chat id."""
    chat_id: str | None = None
    for n in range(count):
        now = now_ms()
        session_id = new_id("sess")
        start = await server.store.begin_turn(
            TurnRequest(
                workspace_id=WORKSPACE,
                chat_id=chat_id,
                workflow_id=None,
                text=f"question {n}",
                attachment_ids=[],
                user_message_id=new_id("msg"),
                assistant_message_id=new_id("msg"),
                session_id=session_id,
                holder=f"seed:{session_id}",
                lease_expires_at=now + 30_000,
                tokens=[],
                now=now,
                replay_limit=20,
            )
        )
        chat_id = start.chat.id
        await server.store.finish_turn(
            TurnFinish(
                chat_id=chat_id,
                session_id=session_id,
                holder=start.holder,
                message=PersistedMessage(
                    id=start.session.assistant_message_id or "",
                    role="assistant",
                    content=[TextBlock(f"answer {n}")],
                    created_at=now_ms(),
                    status="complete",
                ),
                now=now_ms(),
            )
        )
    assert chat_id is not None
    return chat_id


@pytest.mark.usefixtures("chat_database")
async def test_after_25_turns_the_container_receives_exactly_the_last_20(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = await start_model_server(nursery)
    assert model.api_key is not None
    agent = load_agent_profile(
        {
            "OPENAI_MODEL": "test-model",
            "OPENAI_BASE_URL": model.url,
            "OPENAI_API_KEY": model.api_key,
        }
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent, sandbox_allow=allow(model))
    chat_id = await _seed_turns(server, 25)  # 50 messages
    model.add(reply("the 26th answer"))
    run = await server.turn("question 25", chat_id=chat_id)
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"], run.body[-500:]
    assert run.data("result")[0]["message"] == "the 26th answer"
    [request] = model.requests
    messages = request["messages"]
    assert messages[0]["role"] == "system"
    replayed = [(m["role"], m["content"]) for m in messages[1:-1]]
    expected = []
    for n in range(15, 25):
        expected += [("user", f"question {n}"), ("assistant", f"answer {n}")]
    assert replayed == expected  # exactly the last 20 messages, oldest first
    assert messages[-1] == {"role": "user", "content": "question 25"}
    chat = await server.chat(chat_id)
    assert len(chat["messages"]) == 52
    assert chat["messages"][-1]["content"][0] == {"type": "text", "text": "the 26th answer"}
    # Real turns feed the window too: the next dispatch sees this exchange last.
    model.add(reply("the 27th answer"))
    await server.turn("question 26", chat_id=chat_id)
    replayed = [(m["role"], m["content"]) for m in model.requests[1]["messages"][1:-1]]
    assert len(replayed) == 20
    assert replayed[-2:] == [("user", "question 25"), ("assistant", "the 26th answer")]


def _legacy_database(path: Path, messages: list[PersistedMessage]) -> str:
    """A schema-1 database (before ``messages.replay``) holding one chat; its id."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, MIGRATIONS[:1])
        conn.execute(
            "INSERT INTO chats (id, workspace_id, created_at, updated_at) "
            "VALUES ('chat_legacy', ?, 0, 0)",
            (WORKSPACE,),
        )
        for seq, message in enumerate(messages):
            conn.execute(
                "INSERT INTO messages (chat_id, seq, id, role, created_at, body) "
                "VALUES ('chat_legacy', ?, ?, ?, ?, ?)",
                (seq, message.id, message.role, message.created_at, msgspec.json.encode(message)),
            )
    finally:
        conn.close()
    return "chat_legacy"


async def test_replay_of_a_huge_legacy_row_never_reads_its_body(tmp_path: Path) -> None:
    trace = StepTraceBlock(
        [StepTrace(f"step_{n}", "load", "succeeded", args={"n": n}) for n in range(150_000)]
    )
    huge = PersistedMessage(
        "msg_huge", "assistant", [TextBlock("the flooded answer"), trace], 2, status="complete"
    )
    chat_id = _legacy_database(
        tmp_path / DATABASE_NAME, [user_message("msg_q", "flood me", created_at=1), huge]
    )
    store = await SQLiteChatStore.open(tmp_path)  # migrates: the replay text is backfilled
    try:
        body_size = await store.db.read(
            lambda conn: conn.execute("SELECT max(length(body)) FROM messages").fetchone()[0]
        )
        assert body_size > 10_000_000
        reads: list[tuple[str, str]] = []

        def watch(action: int, table: str | None, column: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ and table == "messages":
                reads.append((table, column or ""))
            return sqlite3.SQLITE_OK

        def authorize(conn: object) -> None:
            assert isinstance(conn, sqlite3.Connection)
            conn.set_authorizer(watch)

        await store.db.write(authorize)
        now = now_ms()
        session_id = new_id("sess")
        start = await store.begin_turn(
            TurnRequest(
                workspace_id=WORKSPACE,
                chat_id=chat_id,
                workflow_id=None,
                text="and now?",
                attachment_ids=[],
                user_message_id=new_id("msg"),
                assistant_message_id=new_id("msg"),
                session_id=session_id,
                holder=f"test:{session_id}",
                lease_expires_at=now + 30_000,
                tokens=[],
                now=now,
                replay_limit=20,
            )
        )
    finally:
        await store.close()
    assert start.session.conversation == [
        ChatTurn("user", "flood me", 1),
        ChatTurn("assistant", "the flooded answer", 2),
    ]
    assert ("messages", "replay") in reads
    assert ("messages", "body") not in reads  # the 10 MB row was never read, let alone decoded


_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
_blocks = st.lists(
    st.one_of(
        st.builds(TextBlock, _text),
        st.builds(ErrorBlock, _text, _text),
        st.just(StepTraceBlock([StepTrace("s", "n", "running")])),
    ),
    max_size=4,
)
_messages = st.builds(
    PersistedMessage,
    id=st.just("m"),
    role=st.sampled_from(["user", "assistant"]),
    content=_blocks,
    created_at=st.integers(0, 2**40),
    file_attachments=st.lists(
        st.builds(PersistedFileAttachment, id=st.just("f"), name=_text, size=st.just(1)),
        max_size=3,
    ),
)


@given(message=_messages)
@settings(max_examples=200)
def test_the_migration_backfills_exactly_the_replay_text(message: PersistedMessage) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn, MIGRATIONS[:1])
        conn.execute("INSERT INTO chats (id, workspace_id, created_at, updated_at) "
                     "VALUES ('c', 'w', 0, 0)")  # fmt: skip
        conn.execute(
            "INSERT INTO messages (chat_id, seq, id, role, created_at, body) "
            "VALUES ('c', 0, 'm', ?, 0, ?)",
            (message.role, msgspec.json.encode(message)),
        )
        migrate(conn)
        [(replay,)] = conn.execute("SELECT replay FROM messages").fetchall()
    finally:
        conn.close()
    assert replay == replay_text(message)
