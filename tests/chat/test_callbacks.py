"""The sandbox callbacks: exact schemas, one-time tokens, results into the bag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from sandstream.core.persistence import PersistedMessage
from sandstream.core.schemas import (
    Attachment,
    ConfigResponse,
    EnvResponse,
    ResultsReceipt,
)
from sandstream.server.chat.credentials.one_time import (
    DEFAULT_LIFETIMES,
    MintedTokens,
    idempotency_key,
    mint_tokens,
)
from sandstream.server.chat.model.errors import IdempotencyKeyError
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import Environment, TurnFinish, TurnRequest, TurnStart
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")


async def _session(
    server: ChatServer,
    *,
    lifetimes: dict[str, float] | None = None,
    minted_at: int | None = None,
    workflow_id: str | None = None,
    chat_id: str | None = None,
    attachment_ids: list[str] | None = None,
) -> tuple[TurnStart, MintedTokens]:
    """A turn's start as the chat route writes it (no container): tokens in plaintext."""
    now = now_ms()
    tokens = mint_tokens(minted_at or now, lifetimes or dict(DEFAULT_LIFETIMES))  # type: ignore[arg-type]
    session_id = new_id("sess")
    start = await server.store.begin_turn(
        TurnRequest(
            workspace_id=WORKSPACE,
            chat_id=chat_id,
            workflow_id=workflow_id,
            text="what is up",
            attachment_ids=attachment_ids or [],
            user_message_id=new_id("msg"),
            assistant_message_id=new_id("msg"),
            session_id=session_id,
            holder=f"test:{session_id}",
            lease_expires_at=now + 30_000,
            tokens=list(tokens.stored),
            now=now,
            replay_limit=20,
        )
    )
    return start, tokens


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _snapshot(server: ChatServer) -> dict[str, Any]:
    """What a refused callback must not change: tokens, bag rows, blobs, temp files."""

    def query(conn: Any) -> dict[str, Any]:
        return {
            "tokens": [tuple(r) for r in conn.execute("SELECT * FROM tokens ORDER BY hash")],
            "files": [tuple(r) for r in conn.execute("SELECT * FROM bag_files ORDER BY id")],
        }

    state = await server.store.db.read(query)
    bag = server.data_dir / "bag"
    state["blobs"] = sorted(await server.stored_blobs())
    state["tmp"] = sorted(p.name for p in (bag / "tmp").iterdir())
    return state


async def _refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["type"] == "urn:sandstream:problem:unauthorized"


def _files(*items: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (name, content, "text/plain")) for name, content in items]


async def test_env_and_config_are_exactly_the_container_schemas(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    await server.store.put_environment(
        Environment(
            workspace_id=WORKSPACE,
            workflow_id="wf_1",
            vars={"GREETING": "hi"},
            setup_script="echo setup\n",
        )
    )
    start, tokens = await _session(server, workflow_id="wf_1")
    base = f"/api/sandbox/{start.session.id}"
    async with server.client(auth=False) as client:
        env = await client.get(f"{base}/env", headers=_bearer(tokens.setup))
        config = await client.get(f"{base}/config", headers=_bearer(tokens.run))
    assert env.status_code == 200 and config.status_code == 200
    assert env.headers["content-type"] == "application/json"
    decoded_env = msgspec.json.decode(env.content, type=EnvResponse)
    assert decoded_env == EnvResponse(vars={"GREETING": "hi"}, setup_script="echo setup\n")
    assert env.content == msgspec.json.encode(decoded_env)  # nothing but the schema
    decoded_config = msgspec.json.decode(config.content, type=ConfigResponse)
    assert decoded_config.prompt == "what is up"
    assert decoded_config.conversation == []
    assert config.content == msgspec.json.encode(decoded_config)


async def test_tokens_are_single_use_and_bound_to_purpose_and_session(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    start, tokens = await _session(server)
    other, other_tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    async with server.client(auth=False) as client:
        before = await _snapshot(server)
        # Wrong purpose: the setup token on /config and /results, the run token on /env.
        await _refused(await client.get(f"{base}/config", headers=_bearer(tokens.setup)))
        await _refused(await client.get(f"{base}/env", headers=_bearer(tokens.run)))
        await _refused(
            await client.post(
                f"{base}/results", headers=_bearer(tokens.setup), files=_files(("a.txt", b"x"))
            )
        )
        # Wrong session: another session's valid token.
        await _refused(await client.get(f"{base}/env", headers=_bearer(other_tokens.setup)))
        # No token, a malformed header, an unknown token.
        await _refused(await client.get(f"{base}/env"))
        await _refused(await client.get(f"{base}/env", headers={"Authorization": tokens.setup}))
        await _refused(await client.get(f"{base}/env", headers=_bearer("otp_setup_nope")))
        assert await _snapshot(server) == before  # refused: nothing consumed or written
        # The right use works once; the replay is refused and changes nothing.
        assert (await client.get(f"{base}/env", headers=_bearer(tokens.setup))).status_code == 200
        after_first = await _snapshot(server)
        await _refused(await client.get(f"{base}/env", headers=_bearer(tokens.setup)))
        assert await _snapshot(server) == after_first
        # The other session's token was not consumed by the wrong-session attempt.
        response = await client.get(
            f"/api/sandbox/{other.session.id}/env", headers=_bearer(other_tokens.setup)
        )
        assert response.status_code == 200


async def test_expired_tokens_are_refused_and_write_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    start, tokens = await _session(server, minted_at=now_ms() - 3_600_001)  # 60 min + 1 ms ago
    base = f"/api/sandbox/{start.session.id}"
    before = await _snapshot(server)
    async with server.client(auth=False) as client:
        await _refused(await client.get(f"{base}/env", headers=_bearer(tokens.setup)))
        await _refused(await client.get(f"{base}/config", headers=_bearer(tokens.run)))
        await _refused(
            await client.post(
                f"{base}/results", headers=_bearer(tokens.upload), files=_files(("a.txt", b"x"))
            )
        )
    assert await _snapshot(server) == before


async def test_results_land_in_the_bag_with_sanitized_names(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    start, tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    files = _files(
        ("reports/summary.md", b"# summary\n"),
        ("../../etc/passwd", b"root:x:0:0\n"),
        (" we\u202eird\u200b/.././name.txt. ", b"odd\n"),
        ("dup.txt", b"# summary\n"),  # same bytes: one blob, two entries
    )
    async with server.client(auth=False) as client:
        response = await client.post(f"{base}/results", headers=_bearer(tokens.upload), files=files)
        assert response.status_code == 201, response.text
        receipt = msgspec.json.decode(response.content, type=ResultsReceipt)
        assert [(f.path, f.size) for f in receipt.files] == [
            ("reports/summary.md", 10),
            ("etc/passwd", 11),
            ("weird/name.txt", 4),
            ("dup.txt", 10),
        ]
        # The upload token is single-use too.
        await _refused(
            await client.post(f"{base}/results", headers=_bearer(tokens.upload), files=files)
        )
    state = await _snapshot(server)
    assert len(state["files"]) == 4 and len(state["blobs"]) == 3 and state["tmp"] == []
    # Settling the turn attaches them to its assistant message and kills unused tokens.
    message = await server.store.finish_turn(
        TurnFinish(
            chat_id=start.chat.id,
            session_id=start.session.id,
            holder=start.holder,
            message=PersistedMessage(
                id=start.session.assistant_message_id or "",
                role="assistant",
                content=[],
                created_at=now_ms(),
                status="complete",
            ),
            now=now_ms(),
        )
    )
    assert [a.name for a in message.file_attachments] == [f.path for f in receipt.files]
    async with server.client(auth=False) as client:
        await _refused(await client.get(f"{base}/config", headers=_bearer(tokens.run)))
        chat = await server.chat(start.chat.id)
        download = await client.get(
            f"/api/assistant/chats/{start.chat.id}/files/{message.file_attachments[0].id}",
            params={"workspaceId": WORKSPACE},
            headers={"Authorization": "Bearer test-api-token"},
        )
    assert chat["messages"][-1]["fileAttachments"][1]["name"] == "etc/passwd"
    assert download.status_code == 200 and download.content == b"# summary\n"
    assert download.headers["content-disposition"].startswith('attachment; filename="summary.md"')
    assert download.headers["x-content-type-options"] == "nosniff"


@given(st.text(max_size=220))
def test_an_idempotency_key_is_1_to_200_visible_ascii_characters(text: str) -> None:
    if 1 <= len(text) <= 200 and all(33 <= ord(char) <= 126 for char in text):
        assert idempotency_key(text) == text
    else:
        with pytest.raises(IdempotencyKeyError):
            idempotency_key(text)


def test_no_idempotency_key_is_none() -> None:
    assert idempotency_key(None) is None


def _keyed(token: str, key: str) -> dict[str, str]:
    return {**_bearer(token), "Idempotency-Key": key}


async def test_a_redeemed_token_is_answered_again_only_with_its_idempotency_key(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    start, tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    async with server.client(auth=False) as client:
        first = await client.get(f"{base}/config", headers=_keyed(tokens.run, "key-1"))
        assert first.status_code == 200, first.text
        after_first = await _snapshot(server)
        # The retry of a lost answer: the same token and key get the same answer.
        again = await client.get(f"{base}/config", headers=_keyed(tokens.run, "key-1"))
        assert again.status_code == 200 and again.content == first.content
        # Anyone else presenting the token (no key, another key) is refused.
        await _refused(await client.get(f"{base}/config", headers=_bearer(tokens.run)))
        await _refused(await client.get(f"{base}/config", headers=_keyed(tokens.run, "key-2")))
        assert await _snapshot(server) == after_first
        # A malformed key is a clear 422 and consumes nothing.
        for bad in ("", "x" * 201, "caf\u00e9", "a b"):
            refused = await client.get(
                f"{base}/env",
                headers=[
                    (b"Authorization", f"Bearer {tokens.setup}".encode()),
                    (b"Idempotency-Key", bad.encode()),
                ],
            )
            assert refused.status_code == 422, (bad, refused.text)
            assert "Idempotency-Key" in refused.json()["detail"]
        assert await _snapshot(server) == after_first
        # Once the turn settled, the key does not bring the token back.
        await server.store.close_dispatch(start.session.id, now=now_ms())
        await _refused(await client.get(f"{base}/config", headers=_keyed(tokens.run, "key-1")))


async def test_a_retried_upload_stores_its_files_once_and_gets_the_same_receipt(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    start, tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    files = _files(("a.txt", b"alpha"), ("sub/b.txt", b"beta"))
    headers = _keyed(tokens.upload, "upload-key")
    async with server.client(auth=False) as client:
        first = await client.post(f"{base}/results", headers=headers, files=files)
        assert first.status_code == 201, first.text
        stored = await _snapshot(server)
        again = await client.post(f"{base}/results", headers=headers, files=files)
        assert again.status_code == 201, again.text
        assert again.content == first.content
        assert await _snapshot(server) == stored  # no second row, no new blob
        await _refused(
            await client.post(
                f"{base}/results", headers=_keyed(tokens.upload, "other"), files=files
            )
        )
    assert [name for _, (name, *_rest) in files] == [
        f.path for f in msgspec.json.decode(first.content, type=ResultsReceipt).files
    ]
    assert len(stored["files"]) == 2


async def test_oversized_results_are_refused_whole(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path, max_results_bytes=1000)
    start, tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    before = await _snapshot(server)
    async with server.client(auth=False) as client:
        response = await client.post(
            f"{base}/results",
            headers=_bearer(tokens.upload),
            files=_files(("small.txt", b"ok"), ("big.bin", b"x" * 5000)),
        )
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    after = await _snapshot(server)
    assert after["files"] == before["files"] and after["blobs"] == before["blobs"]
    assert after["tmp"] == []


async def test_the_run_token_downloads_exactly_the_turns_attachments_until_it_settles(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    params = {"workspaceId": WORKSPACE}
    async with server.client() as client:
        chat = (await client.post("/api/assistant/chats", json=params)).json()
        upload = await client.post(
            f"/api/assistant/chats/{chat['id']}/files",
            params=params,
            files=[
                ("files", ("../../etc/data.csv", b"a,b\n1,2\n", "text/csv")),
                ("files", ("not-attached.txt", b"secret", "text/plain")),
            ],
        )
    attached, unattached = upload.json()["files"]
    start, tokens = await _session(server, chat_id=chat["id"], attachment_ids=[attached["id"]])
    other, other_tokens = await _session(server)
    base = f"/api/sandbox/{start.session.id}"
    url = f"{base}/attachments/{attached['id']}"
    async with server.client(auth=False) as client:
        config = await client.get(f"{base}/config", headers=_bearer(tokens.run))
        decoded = msgspec.json.decode(config.content, type=ConfigResponse)
        assert decoded.attachments == [
            Attachment(
                id=attached["id"],
                path="attachments/data.csv",
                size=8,
                content_type="text/csv",
                sha256=attached["sha256"],
            )
        ]
        # The run token was redeemed by /config and still downloads, more than once.
        for _ in range(2):
            got = await client.get(url, headers=_bearer(tokens.run))
            assert got.status_code == 200 and got.content == b"a,b\n1,2\n"
        # Not another file of the chat's bag, nor with another token or session.
        missing = await client.get(
            f"{base}/attachments/{unattached['id']}", headers=_bearer(tokens.run)
        )
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        for headers in (
            _bearer(tokens.setup),
            _bearer(tokens.upload),
            _bearer(other_tokens.run),
            _bearer("made-up"),
            {},
        ):
            await _refused(await client.get(url, headers=headers))
        # Another turn's run token, on its own session: that file is not its attachment.
        foreign = await client.get(
            f"/api/sandbox/{other.session.id}/attachments/{attached['id']}",
            headers=_bearer(other_tokens.run),
        )
        assert foreign.status_code == 404
        # Once the turn settled, the token downloads nothing.
        await server.store.finish_turn(
            TurnFinish(
                chat_id=start.chat.id,
                session_id=start.session.id,
                holder=start.holder,
                message=PersistedMessage(
                    id=start.session.assistant_message_id or "",
                    role="assistant",
                    content=[],
                    created_at=now_ms(),
                    status="complete",
                ),
                now=now_ms(),
            )
        )
        await _refused(await client.get(url, headers=_bearer(tokens.run)))
