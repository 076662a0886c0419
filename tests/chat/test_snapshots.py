"""The workspace snapshot callbacks over real sockets, on SQLite and PostgreSQL: blobs
sent as a blob pack, the manifest stored as the chat's newest snapshot, the next
turn's ``/config`` naming it and its restore streaming the blobs back; retention,
deletion with the chat, and every refusal."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from sandstream.core import (
    BlobData,
    BlobEnd,
    BlobPackReader,
    ConfigResponse,
    PersistedMessage,
    SnapshotEntry,
    SnapshotManifest,
    blob_header,
    manifest_digest,
)
from sandstream.server.chat.credentials.one_time import MintedTokens, mint_tokens
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import (
    DispatchRecord,
    TurnFinish,
    TurnRequest,
    TurnStart,
)
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

GIB = 1024 * 1024 * 1024


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(files: dict[str, bytes], *, dirs: tuple[str, ...] = ()) -> SnapshotManifest:
    """The two roots, then ``dirs``, then ``files`` (by snapshot path), then a link."""
    entries = [SnapshotEntry(path=root, type="dir") for root in ("work", "home", *dirs)]
    for path, data in files.items():
        entries.append(
            SnapshotEntry(path=path, type="file", mode=0o644, size=len(data), sha256=_sha(data))
        )
    entries.append(SnapshotEntry(path="work/latest", type="symlink", target="."))
    return SnapshotManifest(entries=entries)


def _pack(*blobs: bytes) -> bytes:
    return b"".join(blob_header(_sha(blob), len(blob)) + blob for blob in blobs)


def _unpack(body: bytes) -> list[tuple[str, bytes]]:
    """The blobs of a pack, read by the core's reader 1000 bytes at a time."""
    reader = BlobPackReader(GIB)
    blobs: list[tuple[str, bytes]] = []
    data = bytearray()
    for start in range(0, len(body), 1000):
        for event in reader.feed(body[start : start + 1000]):
            if isinstance(event, BlobData):
                data += event.data
            elif isinstance(event, BlobEnd):
                blobs.append((event.sha256, bytes(data)))
                data.clear()
    reader.close()
    return blobs


async def _pieces(data: bytes, size: int = 7919) -> AsyncIterator[bytes]:
    """``data`` as a chunked request body of odd pieces."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


@dataclass
class _Turn:
    """A turn begun as the chat route begins it (no container), its tokens in clear."""

    start: TurnStart
    tokens: MintedTokens

    @property
    def base(self) -> str:
        return f"/api/sandbox/{self.start.session.id}"

    @property
    def chat_id(self) -> str:
        return self.start.chat.id

    def upload(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.upload}"}

    def run(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.run}"}


async def _begin(
    server: ChatServer, chat_id: str | None = None, *, workspace: str = WORKSPACE
) -> _Turn:
    now = now_ms()
    tokens = mint_tokens(now)
    session_id = new_id("sess")
    start = await server.store.begin_turn(
        TurnRequest(
            workspace_id=workspace,
            chat_id=chat_id,
            workflow_id=None,
            text="keep working",
            attachment_ids=[],
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
    return _Turn(start, tokens)


async def _finish(server: ChatServer, turn: _Turn) -> None:
    await server.store.finish_turn(
        TurnFinish(
            chat_id=turn.chat_id,
            session_id=turn.start.session.id,
            holder=turn.start.holder,
            message=PersistedMessage(
                id=turn.start.session.assistant_message_id or "",
                role="assistant",
                content=[],
                created_at=now_ms(),
                status="complete",
            ),
            now=now_ms(),
        )
    )


async def _save(
    client: httpx.AsyncClient, turn: _Turn, manifest: SnapshotManifest, *blobs: bytes
) -> httpx.Response:
    """What a sandbox does after its turn: send the blobs, then put the manifest."""
    sent = await client.post(
        f"{turn.base}/snapshot/blobs", headers=turn.upload(), content=_pack(*blobs)
    )
    assert sent.status_code == 201, sent.text
    return await client.put(
        f"{turn.base}/snapshot", headers=turn.upload(), content=msgspec.json.encode(manifest)
    )


async def _config(client: httpx.AsyncClient, turn: _Turn) -> ConfigResponse:
    response = await client.get(f"{turn.base}/config", headers=turn.run())
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=ConfigResponse)


async def _restore(client: httpx.AsyncClient, turn: _Turn, hashes: list[str]) -> httpx.Response:
    return await client.post(
        f"{turn.base}/snapshot/restore", headers=turn.run(), json={"sha256": hashes}
    )


async def _rows(server: ChatServer) -> list[tuple[Any, ...]]:
    """Every stored snapshot: id, chat, dispatch, files, bytes, oldest first."""
    return await server.store.db.read(
        lambda conn: [
            tuple(row)
            for row in conn.execute(
                "SELECT id, chat_id, dispatch_id, files, total_bytes FROM chat_snapshots "
                "ORDER BY rowid"
            )
        ]
    )


async def _manifests(server: ChatServer) -> list[str]:
    """The SHA-256 of every stored manifest."""
    return await server.store.db.read(
        lambda conn: sorted(row[0] for row in conn.execute("SELECT sha256 FROM snapshot_manifests"))
    )


def _tmp(server: ChatServer) -> list[str]:
    return sorted(path.name for path in (server.data_dir / "bag" / "tmp").iterdir())


def _problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"urn:sandstream:problem:{kind}", problem
    return problem


async def test_a_saved_workspace_comes_back_to_the_chats_next_turn(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    notes, data = b"notes\n", os.urandom(600 * 1024)  # data spans several blob reads
    manifest = _manifest(
        {"work/src/notes.md": notes, "work/src/data.bin": data, "home/.notes": notes},
        dirs=("work/src",),
    )
    first = await _begin(server)
    async with server.client(auth=False) as client:
        asked = [_sha(notes), _sha(data), _sha(notes)]
        response = await client.post(
            f"{first.base}/snapshot/missing", headers=first.upload(), json={"sha256": asked}
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"missing": [_sha(notes), _sha(data)]}
        response = await client.post(
            f"{first.base}/snapshot/blobs",
            headers=first.upload(),
            content=_pieces(_pack(notes, data)),
        )
        assert response.status_code == 201, response.text
        assert response.json() == {"stored": 2}
        response = await client.post(
            f"{first.base}/snapshot/missing", headers=first.upload(), json={"sha256": asked}
        )
        assert response.json() == {"missing": []}
        body = msgspec.json.encode(manifest)
        put = await client.put(f"{first.base}/snapshot", headers=first.upload(), content=body)
        assert put.status_code == 201, put.text
        receipt = put.json()
        assert receipt["id"].startswith("snap_")
        assert (receipt["files"], receipt["bytes"]) == (3, 2 * len(notes) + len(data))
        again = await client.put(f"{first.base}/snapshot", headers=first.upload(), content=body)
        assert again.status_code == 201 and again.json() == receipt  # the same snapshot
    assert await _rows(server) == [
        (receipt["id"], first.chat_id, first.start.session.id, 3, receipt["bytes"])
    ]
    assert _tmp(server) == []
    await _finish(server, first)

    second = await _begin(server, first.chat_id)
    async with server.client(auth=False) as client:
        config = await _config(client, second)
        assert config.snapshot == manifest
        assert config.snapshot_max_bytes == GIB
        order = [_sha(data), _sha(notes), _sha(data)]
        restored = await _restore(client, second, order)
    assert restored.status_code == 200, restored.text
    assert restored.headers["content-type"] == "application/octet-stream"
    assert int(restored.headers["content-length"]) == len(restored.content)
    assert _unpack(restored.content) == [
        (_sha(data), data),
        (_sha(notes), notes),
        (_sha(data), data),
    ]


async def test_identical_content_is_stored_once_across_chats(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    shared = b"the same file in two chats\n"
    one, other = await _begin(server), await _begin(server)
    assert one.chat_id != other.chat_id
    async with server.client(auth=False) as client:
        assert (await _save(client, one, _manifest({"work/a": shared}), shared)).status_code == 201
        missing = await client.post(
            f"{other.base}/snapshot/missing",
            headers=other.upload(),
            json={"sha256": [_sha(shared)]},
        )
        assert missing.json() == {"missing": []}  # the other chat need not send it
        put = await client.put(
            f"{other.base}/snapshot",
            headers=other.upload(),
            content=msgspec.json.encode(_manifest({"home/b": shared})),
        )
        assert put.status_code == 201, put.text
    assert await server.stored_blobs() == [_sha(shared)]
    assert [row[1] for row in await _rows(server)] == [one.chat_id, other.chat_id]


async def test_a_manifest_lists_only_blobs_its_workspace_sent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    secret = b"a file of another workspace\n"
    theirs = await _begin(server, workspace="ws_other")
    mine = await _begin(server)
    manifest = _manifest({"work/copy": secret})
    async with server.client(auth=False) as client:
        saved = await _save(client, theirs, _manifest({"work/s": secret}), secret)
        assert saved.status_code == 201, saved.text
        # Stored, but knowing its hash is no proof of holding its bytes.
        missing = await client.post(
            f"{mine.base}/snapshot/missing",
            headers=mine.upload(),
            json={"sha256": [_sha(secret)]},
        )
        assert missing.json() == {"missing": [_sha(secret)]}
        put = await client.put(
            f"{mine.base}/snapshot", headers=mine.upload(), content=msgspec.json.encode(manifest)
        )
        assert _problem(put, 409, "snapshot-incomplete")["missingCount"] == 1
        assert [row[1] for row in await _rows(server)] == [theirs.chat_id]
        # Sent, the bytes are proved: the manifest is taken, the blob still stored once.
        assert (await _save(client, mine, manifest, secret)).status_code == 201
    assert await server.stored_blobs() == [_sha(secret)]
    assert [row[1] for row in await _rows(server)] == [theirs.chat_id, mine.chat_id]


async def test_a_chat_keeps_its_newest_snapshots(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path, snapshots_kept=2)
    versions = [f"version {n}\n".encode() for n in range(3)]
    turn = await _begin(server)
    ids = []
    async with server.client(auth=False) as client:
        for version in versions:
            put = await _save(client, turn, _manifest({"work/file": version}), version)
            assert put.status_code == 201, put.text
            ids.append(put.json()["id"])
    assert [row[0] for row in await _rows(server)] == ids[1:]
    await _finish(server, turn)
    following = await _begin(server, turn.chat_id)
    async with server.client(auth=False) as client:
        assert (await _config(client, following)).snapshot == _manifest({"work/file": versions[2]})
        restored = await _restore(client, following, [_sha(versions[1])])
        assert _unpack(restored.content) == [(_sha(versions[1]), versions[1])]
        dropped = await _restore(client, following, [_sha(versions[2]), _sha(versions[0])])
    problem = _problem(dropped, 404, "not-found")
    assert problem["sha256"] == _sha(versions[0])
    assert sorted(await server.stored_blobs()) == sorted(map(_sha, versions))  # blobs stay


async def test_deleting_a_chat_deletes_its_snapshots(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path)
    content = b"kept until the chat goes\n"
    turn, other = await _begin(server), await _begin(server)
    async with server.client(auth=False) as client:
        assert (
            await _save(client, turn, _manifest({"work/a": content}), content)
        ).status_code == 201
        assert (await _save(client, other, _manifest({"work/b": content}))).status_code == 201
    await _finish(server, turn)
    async with server.client() as client:
        deleted = await client.delete(
            f"/api/assistant/chats/{turn.chat_id}", params={"workspaceId": WORKSPACE}
        )
    assert deleted.status_code == 204, deleted.text
    assert [row[1] for row in await _rows(server)] == [other.chat_id]
    assert await server.stored_blobs() == [_sha(content)]  # blobs are never deleted here
    assert await _manifests(server) == [manifest_digest(_manifest({"work/b": content}))]


async def test_an_unchanged_workspace_adds_a_snapshot_not_a_manifest(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    content = b"nothing changes\n"
    manifest = _manifest({"work/a": content})
    turn = await _begin(server)
    async with server.client(auth=False) as client:
        assert (await _save(client, turn, manifest, content)).status_code == 201
        await _finish(server, turn)
        following = await _begin(server, turn.chat_id)
        assert (await _save(client, following, manifest)).status_code == 201
    assert len(await _rows(server)) == 2
    assert await _manifests(server) == [manifest_digest(manifest)]


async def test_a_tampered_or_cut_pack_commits_no_blob_of_its_own(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await _begin(server)
    good, bad = b"a whole blob\n", os.urandom(300 * 1024)
    tampered = bytearray(_pack(bad))
    tampered[-5] ^= 0x01
    async with server.client(auth=False) as client:
        for body in (bytes(tampered), _pack(bad)[:-1], b"not a header\n"):
            response = await client.post(
                f"{turn.base}/snapshot/blobs", headers=turn.upload(), content=_pieces(body)
            )
            _problem(response, 422, "invalid-body")
        assert await server.stored_blobs() == [] and _tmp(server) == []
        # After a whole blob: that one may be stored (if the reader handed it over before
        # it met the bad one), the bad one never.
        response = await client.post(
            f"{turn.base}/snapshot/blobs",
            headers=turn.upload(),
            content=_pieces(_pack(good) + bytes(tampered)),
        )
        _problem(response, 422, "invalid-body")
    assert set(await server.stored_blobs()) <= {_sha(good)}
    assert _tmp(server) == []


async def test_bad_manifests_are_refused_and_store_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await _begin(server)
    content = b"content\n"
    climbing = SnapshotManifest(
        entries=[
            SnapshotEntry(path="work", type="dir"),
            SnapshotEntry(path="work/../etc", type="dir"),
        ]
    )
    wrong_size = _manifest({"work/a": content})
    wrong_size.entries[2] = msgspec.structs.replace(wrong_size.entries[2], size=len(content) + 1)
    async with server.client(auth=False) as client:
        assert (await _save(client, turn, _manifest({}), content)).status_code == 201
        url = f"{turn.base}/snapshot"
        for body in (msgspec.json.encode(climbing), msgspec.json.encode(wrong_size), b"{", b"[]"):
            _problem(
                await client.put(url, headers=turn.upload(), content=body), 422, "invalid-body"
            )
        unknown = b"never sent\n"
        problem = _problem(
            await client.put(
                url,
                headers=turn.upload(),
                content=msgspec.json.encode(_manifest({"work/a": content, "work/b": unknown})),
            ),
            409,
            "snapshot-incomplete",
        )
        assert problem["missingCount"] == 1
        missing = f"{turn.base}/snapshot/missing"
        for hashes in (["A" * 64], ["0" * 63], [0], ["0" * 64] * 100_001):
            response = await client.post(missing, headers=turn.upload(), json={"sha256": hashes})
            _problem(response, 422, "invalid-body")
    assert len(await _rows(server)) == 1  # only the empty snapshot of the first save


async def test_the_bound_and_snapshots_off(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path / "small", snapshot_max_bytes=1000)
    turn = await _begin(server)
    first, second = os.urandom(600), os.urandom(600)
    async with server.client(auth=False) as client:
        too_big = await client.put(
            f"{turn.base}/snapshot",
            headers=turn.upload(),
            content=msgspec.json.encode(_manifest({"work/a": first, "work/b": second})),
        )
        _problem(too_big, 413, "payload-too-large")
        cut = await client.post(
            f"{turn.base}/snapshot/blobs",
            headers=turn.upload(),
            content=_pieces(_pack(first, second), 100),
        )
        _problem(cut, 413, "payload-too-large")
        config = await _config(client, turn)
        assert config.snapshot is None and config.snapshot_max_bytes == 1000
    assert await server.stored_blobs() == [_sha(first)]  # the second never started
    assert _tmp(server) == [] and await _rows(server) == []

    off = await start_chat_server(nursery, tmp_path / "off", snapshot_max_bytes=0)
    turn = await _begin(off)
    async with off.client(auth=False) as client:
        for response in (
            await client.put(
                f"{turn.base}/snapshot",
                headers=turn.upload(),
                content=msgspec.json.encode(_manifest({})),
            ),
            await client.post(
                f"{turn.base}/snapshot/blobs", headers=turn.upload(), content=_pack(first)
            ),
        ):
            _problem(response, 413, "payload-too-large")
        config = await _config(client, turn)
    assert config.snapshot is None and config.snapshot_max_bytes == 0
    assert await off.stored_blobs() == []


async def test_a_token_reads_only_its_own_chats_blobs(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    mine, theirs = b"mine\n", b"theirs\n"
    turn, other = await _begin(server), await _begin(server)
    async with server.client(auth=False) as client:
        assert (await _save(client, turn, _manifest({"work/a": mine}), mine)).status_code == 201
        assert (
            await _save(client, other, _manifest({"work/a": theirs}), theirs)
        ).status_code == 201
        foreign = await _restore(client, turn, [_sha(mine), _sha(theirs)])
        problem = _problem(foreign, 404, "not-found")
        assert (problem["sha256"], problem["notFoundCount"]) == (_sha(theirs), 1)
        # The other chat's run token on this turn's session is no token at all.
        stolen = await client.post(
            f"{turn.base}/snapshot/restore", headers=other.run(), json={"sha256": [_sha(mine)]}
        )
        _problem(stolen, 401, "unauthorized")
        assert _unpack((await _restore(client, turn, [_sha(mine)])).content) == [(_sha(mine), mine)]


async def test_every_snapshot_callback_needs_its_token(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn, other = await _begin(server), await _begin(server)
    content = b"content\n"
    body = {"sha256": [_sha(content)]}
    calls: list[tuple[str, str, Any, str]] = [
        ("POST", "snapshot/missing", body, "upload"),
        ("POST", "snapshot/blobs", _pack(content), "upload"),
        ("PUT", "snapshot", _manifest({"work/a": content}), "upload"),
        ("POST", "snapshot/restore", body, "run"),
    ]
    async with server.client(auth=False) as client:
        for method, route, value, purpose in calls:
            content_bytes = value if isinstance(value, bytes) else msgspec.json.encode(value)
            wrong = {"upload": turn.tokens.run, "run": turn.tokens.upload}[purpose]
            for token in (
                None,
                turn.tokens.setup,
                wrong,
                getattr(other.tokens, purpose),
                "otp_upload_forged",
            ):
                headers = {} if token is None else {"Authorization": f"Bearer {token}"}
                response = await client.request(
                    method, f"{turn.base}/{route}", headers=headers, content=content_bytes
                )
                _problem(response, 401, "unauthorized")
    assert await server.stored_blobs() == [] and await _rows(server) == []
    # A settled turn's tokens are refused too.
    await _finish(server, turn)
    async with server.client(auth=False) as client:
        late = await client.post(f"{turn.base}/snapshot/missing", headers=turn.upload(), json=body)
        _problem(late, 401, "unauthorized")


async def test_a_dispatch_without_a_chat_has_no_snapshots(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    now = now_ms()
    tokens = mint_tokens(now)
    run = DispatchRecord(
        id=new_id("sess"), kind="agents", workspace_id=WORKSPACE, prompt="go", created_at=now
    )
    await server.store.record_dispatch(run, list(tokens.stored))
    base = f"/api/sandbox/{run.id}"
    upload = {"Authorization": f"Bearer {tokens.upload}"}
    content = b"content\n"
    async with server.client(auth=False) as client:
        config = await client.get(
            f"{base}/config", headers={"Authorization": f"Bearer {tokens.run}"}
        )
        decoded = msgspec.json.decode(config.content, type=ConfigResponse)
        assert decoded.snapshot is None and decoded.snapshot_max_bytes == 0
        for response in (
            await client.post(f"{base}/snapshot/missing", headers=upload, json={"sha256": []}),
            await client.post(f"{base}/snapshot/blobs", headers=upload, content=_pack(content)),
            await client.put(
                f"{base}/snapshot",
                headers=upload,
                content=msgspec.json.encode(_manifest({"work/a": content})),
            ),
            await client.post(
                f"{base}/snapshot/restore",
                headers={"Authorization": f"Bearer {tokens.run}"},
                json={"sha256": [_sha(content)]},
            ),
        ):
            problem = _problem(response, 409, "no-chat")
            assert problem["sessionId"] == run.id
    assert await server.stored_blobs() == []
