"""The chat store (on each database) and the small pure pieces, without HTTP."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandstream.container.attachments import target_path
from sandstream.core.persistence import PersistedMessage
from sandstream.server.chat import (
    AttachmentError,
    ChatBusyError,
    ChatConfigError,
    ChatNotFoundError,
    ChatSettings,
    SQLiteChatStore,
    StoreError,
    TargetError,
    TokenRejectedError,
    resolve_target,
    sanitize_name,
)
from sandstream.server.chat.credentials.api_token import resolve_api_token
from sandstream.server.chat.credentials.one_time import hash_token, mint_tokens
from sandstream.server.chat.model.agent_profile import sandbox_attachments
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import BagFile, NewBlob, TurnFinish, TurnRequest
from sandstream.server.chat.store.migrations import MIGRATIONS, current_version
from tests.chat.databases import open_store

WS = "ws_store"


def _request(chat_id: str | None, *, now: int | None = None, lease_ms: int = 30_000,
             attachments: list[str] | None = None) -> TurnRequest:  # fmt: skip
    now = now_ms() if now is None else now
    session_id = new_id("sess")
    return TurnRequest(
        workspace_id=WS,
        chat_id=chat_id,
        workflow_id=None,
        text="hello",
        attachment_ids=attachments or [],
        user_message_id=new_id("msg"),
        assistant_message_id=new_id("msg"),
        session_id=session_id,
        holder=f"test:{session_id}",
        lease_expires_at=now + lease_ms,
        tokens=list(mint_tokens(now).stored),
        now=now,
        replay_limit=20,
    )


def _finish(chat_id: str, req: TurnRequest) -> TurnFinish:
    message = PersistedMessage(
        id=req.assistant_message_id, role="assistant", content=[], created_at=now_ms(),
        status="complete",
    )  # fmt: skip
    return TurnFinish(
        chat_id=chat_id, session_id=req.session_id, holder=req.holder, message=message,
        now=now_ms(),
    )  # fmt: skip


async def test_migrations_wal_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    store = await SQLiteChatStore.open(tmp_path)
    await store.close()
    store = await SQLiteChatStore.open(tmp_path)  # reopening applies nothing
    await store.close()
    conn = sqlite3.connect(tmp_path / "chat.sqlite3")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert current_version(conn) == MIGRATIONS[-1].version
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
        conn.execute(
            "INSERT INTO schema_version VALUES (?, 'from the future', 0)",
            (MIGRATIONS[-1].version + 1,),
        )
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(StoreError, match="newer"):
        await SQLiteChatStore.open(tmp_path)


@pytest.mark.usefixtures("chat_database")
async def test_many_concurrent_turns_on_one_chat_one_takes_the_lock(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        first = _request(None)
        start = await store.begin_turn(first)
        await store.finish_turn(_finish(start.chat.id, first))
        winners: list[str] = []
        busy: list[ChatBusyError] = []

        async def attempt() -> None:
            req = _request(start.chat.id)
            try:
                await store.begin_turn(req)
                winners.append(req.assistant_message_id)
            except ChatBusyError as exc:
                busy.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(attempt)
        assert len(winners) == 1 and len(busy) == 19
        assert {exc.active_message_id for exc in busy} == set(winners)
        messages = await store.get_messages(WS, start.chat.id)
        assert len(messages) == 3  # first exchange + the winner's user message
    finally:
        await store.close()


@pytest.mark.usefixtures("chat_database")
async def test_an_expired_lock_is_taken_over_and_its_turn_marked_lost(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        t0 = now_ms()
        dead = _request(None, now=t0, lease_ms=1000)
        start = await store.begin_turn(dead)
        with pytest.raises(ChatBusyError):  # still leased
            await store.begin_turn(_request(start.chat.id, now=t0 + 500))
        # The holder could renew while alive...
        assert await store.renew_lock(start.chat.id, dead.holder, t0 + 2000)
        assert not await store.renew_lock(start.chat.id, "someone:else", t0 + 9000)
        # ...but it died: after the lease, the next turn takes over.
        taker = _request(start.chat.id, now=t0 + 2001)
        taken = await store.begin_turn(taker)
        assert taken.recovered_message_id == dead.assistant_message_id
        assert not await store.renew_lock(start.chat.id, dead.holder, t0 + 9000)
        messages = await store.get_messages(WS, start.chat.id)
        assert [m.role for m in messages] == ["user", "assistant", "user"]
        assert messages[1].status == "failed" and messages[1].content[0].code == "turn_lost"  # type: ignore[union-attr]
        # The dead turn's tokens are dead too.
        setup = next(t for t in dead.tokens if t.purpose == "setup")
        with pytest.raises(TokenRejectedError):
            await store.consume_token(
                setup.hash, purpose="setup", session_id=dead.session_id, now=t0 + 2002
            )
        # If the "dead" turn was only slow, its real message replaces the lost one.
        await store.finish_turn(_finish(start.chat.id, dead))
        messages = await store.get_messages(WS, start.chat.id)
        assert messages[1].status == "complete" and len(messages) == 3
        chat = await store.get_chat(WS, start.chat.id, now=t0 + 2003)
        assert chat.active_message_id == taker.assistant_message_id  # still the taker's
    finally:
        await store.close()


@pytest.mark.usefixtures("chat_database")
async def test_refused_turns_write_nothing(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        with pytest.raises(ChatNotFoundError):
            await store.begin_turn(_request("chat_missing"))
        with pytest.raises(AttachmentError):
            await store.begin_turn(_request(None, attachments=["file_x"]))
        assert await store.list_chats(WS, limit=10, now=0) == []
        chat = await store.create_chat(workspace_id=WS, workflow_id=None, title=None, now=now_ms())
        blob = NewBlob(name="a", size=1, content_type="text/plain", sha256="0" * 64)
        other = await store.create_chat(workspace_id=WS, workflow_id=None, title=None, now=now_ms())
        [foreign] = await store.add_uploads(WS, other.id, [blob], now=now_ms())
        with pytest.raises(AttachmentError) as caught:
            await store.begin_turn(_request(chat.id, attachments=[foreign.id]))
        assert caught.value.unknown == [foreign.id]
        assert await store.get_messages(WS, chat.id) == []
        assert (await store.get_chat(WS, chat.id, now=0)).active_message_id is None
        # abort_turn undoes a start completely (a first turn: the chat goes too).
        req = _request(None)
        start = await store.begin_turn(req)
        await store.abort_turn(start)
        with pytest.raises(ChatNotFoundError):
            await store.get_chat(WS, start.chat.id, now=0)
        setup = next(t for t in req.tokens if t.purpose == "setup")
        with pytest.raises(TokenRejectedError):
            await store.consume_token(setup.hash, purpose="setup", session_id=req.session_id,
                                      now=now_ms())  # fmt: skip
    finally:
        await store.close()


def test_sanitize_name() -> None:
    assert sanitize_name("../../etc/passwd") == "passwd"
    assert sanitize_name("../../etc/passwd", keep_dirs=True) == "etc/passwd"
    assert sanitize_name("C:\\fakepath\\report.pdf") == "report.pdf"
    assert sanitize_name("a\x00b\x1bc\u202e.txt") == "abc.txt"
    assert sanitize_name(" spaced out. ") == "spaced out"
    assert sanitize_name("") == sanitize_name("/") == sanitize_name("..") == "file"
    long = sanitize_name("é" * 500)
    assert len(long.encode()) <= 255 and long == "é" * 127


def test_resolve_target_order_and_allow_list() -> None:
    allowed = frozenset({"http://runner-b:8765"})
    pick = resolve_target(
        request_url="http://runner-b:8765/",
        workflow_url="http://runner-a:8765",
        server_url="http://runner-a:8765",
        allowed=allowed,
        embedded=True,
    )
    assert (pick.kind, pick.source, pick.url) == ("remote", "request", "http://runner-b:8765")
    pick = resolve_target(
        request_url=None, workflow_url="http://runner-a:8765", server_url="http://runner-a:8765",
        allowed=frozenset(), embedded=False,
    )  # fmt: skip
    assert (pick.source, pick.url) == ("workflow", "http://runner-a:8765")
    pick = resolve_target(request_url=None, workflow_url=None, server_url=None,
                          allowed=frozenset(), embedded=True)  # fmt: skip
    assert pick.kind == "embedded"
    with pytest.raises(TargetError, match="not allowed"):
        resolve_target(request_url="http://elsewhere", workflow_url=None, server_url=None,
                       allowed=allowed, embedded=True)  # fmt: skip
    with pytest.raises(TargetError):
        resolve_target(request_url="file:///etc", workflow_url=None, server_url=None,
                       allowed=allowed, embedded=True)  # fmt: skip


def test_settings_fail_fast(tmp_path: Path) -> None:
    with pytest.raises(ChatConfigError, match="SANDBOX_URL"):
        ChatSettings(data_dir=tmp_path, api_token="t", embedded_runner=False)
    with pytest.raises(ChatConfigError, match="heartbeat"):
        ChatSettings(data_dir=tmp_path, api_token="t", lock_lease=5, lock_heartbeat=5)
    with pytest.raises(ChatConfigError, match="lease ttl"):
        ChatSettings(data_dir=tmp_path, api_token="t", lock_heartbeat=2, lease_ttl=2)
    with pytest.raises(ChatConfigError, match="redis://"):
        ChatSettings(data_dir=tmp_path, api_token="t", redis_url="http://cache:6380/0")
    with pytest.raises(ChatConfigError, match="--public-url is required"):
        ChatSettings(data_dir=tmp_path, api_token="t", redis_url="rediss://cache:6380/0")
    with pytest.raises(ChatConfigError, match="--public-url is required"):
        ChatSettings(data_dir=tmp_path, api_token="t", database_url="postgresql://db/chat")
    with pytest.raises(ChatConfigError):
        ChatSettings(data_dir=tmp_path, api_token=" ")
    settings = ChatSettings(
        data_dir=tmp_path, api_token="t", embedded_runner=False, sandbox_url="http://r:1/"
    )
    assert settings.sandbox_url == "http://r:1"


def test_api_token_from_env_or_saved(tmp_path: Path) -> None:
    assert resolve_api_token({"SANDSTREAM_API_TOKEN": "abc"}, tmp_path).value == "abc"
    first = resolve_api_token({}, tmp_path)
    assert first.source == "generated" and len(first.value) >= 32
    again = resolve_api_token({}, tmp_path)
    assert again.source == "file" and again.value == first.value
    assert oct(os.stat(tmp_path / "api-token").st_mode & 0o777) == "0o600"
    assert hash_token(first.value) != first.value


_long_names = st.tuples(st.text(max_size=200), st.sampled_from(["é", "a", ".", " ", "\u3000"]))


@given(st.one_of(st.text(), _long_names.map(lambda t: t[0] + t[1] * 300)), st.booleans())
@settings(max_examples=500, deadline=None)
@example("é" * 127 + ".txt", False)  # clipped to "ééé…é.": trimmed again
@example("abc. \u3000 .", False)
@example("a/" + "b" * 1030 + "/c. .", True)
def test_sanitize_name_is_its_own_sanitized_form(name: str, keep_dirs: bool) -> None:
    once = sanitize_name(name, keep_dirs=keep_dirs)
    assert sanitize_name(once, keep_dirs=keep_dirs) == once
    assert once and len(once.encode()) <= (1024 if keep_dirs else 255)


@given(st.lists(st.one_of(st.text(max_size=300), st.just("é" * 127 + ".txt")), max_size=12))
@settings(max_examples=300, deadline=None)
def test_attachment_paths_are_unique_and_pass_the_containers_check(names: list[str]) -> None:
    files = [
        BagFile(
            id=f"file_{n}",
            workspace_id="ws",
            name=sanitize_name(name),
            size=1,
            content_type="text/plain",
            sha256="0" * 64,
            source="upload",
            created_at=0,
        )
        for n, name in enumerate(names)
    ]
    attachments = sandbox_attachments(files)
    assert [a.id for a in attachments] == [f.id for f in files]
    assert len({a.path.casefold() for a in attachments}) == len(files)
    seen: set[str] = set()
    for attachment in attachments:  # what the container checks before it writes
        assert target_path(Path("/work"), attachment, seen).parent == Path("/work/attachments")
        assert len(attachment.path.rsplit("/", 1)[1].encode()) <= 255
