"""The workspace snapshot callbacks over real sockets, on SQLite and PostgreSQL: blobs
sent as a blob pack, the manifest stored as the chat's newest snapshot, the next
turn's ``/config`` naming it and its restore streaming the blobs back; retention,
deletion with the chat, and every refusal."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
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
    SnapshotEntry,
    SnapshotManifest,
    manifest_digest,
)
from sandstream.server.chat.credentials.one_time import mint_tokens
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import DispatchRecord
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server
from tests.chat.snapshot_harness import SandboxTurn, begin, finish, manifest_of, pack, save, sha

pytestmark = pytest.mark.usefixtures("chat_database")

GIB = 1024 * 1024 * 1024


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


async def _config(client: httpx.AsyncClient, turn: SandboxTurn) -> ConfigResponse:
    response = await client.get(f"{turn.base}/config", headers=turn.run())
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=ConfigResponse)


async def _restore(
    client: httpx.AsyncClient, turn: SandboxTurn, hashes: list[str]
) -> httpx.Response:
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
    manifest = manifest_of(
        {"work/src/notes.md": notes, "work/src/data.bin": data, "home/.notes": notes},
        dirs=("work/src",),
    )
    first = await begin(server)
    async with server.client(auth=False) as client:
        asked = [sha(notes), sha(data), sha(notes)]
        response = await client.post(
            f"{first.base}/snapshot/missing", headers=first.upload(), json={"sha256": asked}
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"missing": [sha(notes), sha(data)]}
        response = await client.post(
            f"{first.base}/snapshot/blobs",
            headers=first.upload(),
            content=_pieces(pack(notes, data)),
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
    await finish(server, first)

    second = await begin(server, first.chat_id)
    async with server.client(auth=False) as client:
        config = await _config(client, second)
        assert config.snapshot == manifest
        assert config.snapshot_max_bytes == GIB
        order = [sha(data), sha(notes), sha(data)]
        restored = await _restore(client, second, order)
    assert restored.status_code == 200, restored.text
    assert restored.headers["content-type"] == "application/octet-stream"
    assert int(restored.headers["content-length"]) == len(restored.content)
    assert _unpack(restored.content) == [
        (sha(data), data),
        (sha(notes), notes),
        (sha(data), data),
    ]


async def test_identical_content_is_stored_once_across_chats(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    shared = b"the same file in two chats\n"
    one, other = await begin(server), await begin(server)
    assert one.chat_id != other.chat_id
    async with server.client(auth=False) as client:
        assert (await save(client, one, manifest_of({"work/a": shared}), shared)).status_code == 201
        missing = await client.post(
            f"{other.base}/snapshot/missing",
            headers=other.upload(),
            json={"sha256": [sha(shared)]},
        )
        assert missing.json() == {"missing": []}  # the other chat need not send it
        put = await client.put(
            f"{other.base}/snapshot",
            headers=other.upload(),
            content=msgspec.json.encode(manifest_of({"home/b": shared})),
        )
        assert put.status_code == 201, put.text
    assert await server.stored_blobs() == [sha(shared)]
    assert [row[1] for row in await _rows(server)] == [one.chat_id, other.chat_id]


async def test_a_manifest_lists_only_blobs_its_workspace_sent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    secret = b"a file of another workspace\n"
    theirs = await begin(server, workspace="ws_other")
    mine = await begin(server)
    manifest = manifest_of({"work/copy": secret})
    async with server.client(auth=False) as client:
        saved = await save(client, theirs, manifest_of({"work/s": secret}), secret)
        assert saved.status_code == 201, saved.text
        # Stored, but knowing its hash is no proof of holding its bytes.
        missing = await client.post(
            f"{mine.base}/snapshot/missing",
            headers=mine.upload(),
            json={"sha256": [sha(secret)]},
        )
        assert missing.json() == {"missing": [sha(secret)]}
        put = await client.put(
            f"{mine.base}/snapshot", headers=mine.upload(), content=msgspec.json.encode(manifest)
        )
        assert _problem(put, 409, "snapshot-incomplete")["missingCount"] == 1
        assert [row[1] for row in await _rows(server)] == [theirs.chat_id]
        # Sent, the bytes are proved: the manifest is taken, the blob still stored once.
        assert (await save(client, mine, manifest, secret)).status_code == 201
    assert await server.stored_blobs() == [sha(secret)]
    assert [row[1] for row in await _rows(server)] == [theirs.chat_id, mine.chat_id]


async def test_a_chat_keeps_its_newest_snapshots(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path, snapshots_kept=2)
    versions = [f"version {n}\n".encode() for n in range(3)]
    turn = await begin(server)
    ids = []
    async with server.client(auth=False) as client:
        for version in versions:
            put = await save(client, turn, manifest_of({"work/file": version}), version)
            assert put.status_code == 201, put.text
            ids.append(put.json()["id"])
    assert [row[0] for row in await _rows(server)] == ids[1:]
    await finish(server, turn)
    following = await begin(server, turn.chat_id)
    async with server.client(auth=False) as client:
        assert (await _config(client, following)).snapshot == manifest_of(
            {"work/file": versions[2]}
        )
        restored = await _restore(client, following, [sha(versions[1])])
        assert _unpack(restored.content) == [(sha(versions[1]), versions[1])]
        dropped = await _restore(client, following, [sha(versions[2]), sha(versions[0])])
    problem = _problem(dropped, 404, "not-found")
    assert problem["sha256"] == sha(versions[0])
    assert sorted(await server.stored_blobs()) == sorted(map(sha, versions))  # blobs stay


async def test_deleting_a_chat_deletes_its_snapshots(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_chat_server(nursery, tmp_path)
    content = b"kept until the chat goes\n"
    turn, other = await begin(server), await begin(server)
    async with server.client(auth=False) as client:
        assert (
            await save(client, turn, manifest_of({"work/a": content}), content)
        ).status_code == 201
        assert (await save(client, other, manifest_of({"work/b": content}))).status_code == 201
    await finish(server, turn)
    async with server.client() as client:
        deleted = await client.delete(
            f"/api/assistant/chats/{turn.chat_id}", params={"workspaceId": WORKSPACE}
        )
    assert deleted.status_code == 204, deleted.text
    assert [row[1] for row in await _rows(server)] == [other.chat_id]
    assert await server.stored_blobs() == [sha(content)]  # blobs are never deleted here
    assert await _manifests(server) == [manifest_digest(manifest_of({"work/b": content}))]


async def test_an_unchanged_workspace_adds_a_snapshot_not_a_manifest(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    content = b"nothing changes\n"
    manifest = manifest_of({"work/a": content})
    turn = await begin(server)
    async with server.client(auth=False) as client:
        assert (await save(client, turn, manifest, content)).status_code == 201
        await finish(server, turn)
        following = await begin(server, turn.chat_id)
        assert (await save(client, following, manifest)).status_code == 201
    assert len(await _rows(server)) == 2
    assert await _manifests(server) == [manifest_digest(manifest)]


async def test_a_tampered_or_cut_pack_commits_no_blob_of_its_own(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await begin(server)
    good, bad = b"a whole blob\n", os.urandom(300 * 1024)
    tampered = bytearray(pack(bad))
    tampered[-5] ^= 0x01
    async with server.client(auth=False) as client:
        for body in (bytes(tampered), pack(bad)[:-1], b"not a header\n"):
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
            content=_pieces(pack(good) + bytes(tampered)),
        )
        _problem(response, 422, "invalid-body")
    assert set(await server.stored_blobs()) <= {sha(good)}
    assert _tmp(server) == []


async def test_bad_manifests_are_refused_and_store_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await begin(server)
    content = b"content\n"
    climbing = SnapshotManifest(
        entries=[
            SnapshotEntry(path="work", type="dir"),
            SnapshotEntry(path="work/../etc", type="dir"),
        ]
    )
    wrong_size = manifest_of({"work/a": content})
    wrong_size.entries[2] = msgspec.structs.replace(wrong_size.entries[2], size=len(content) + 1)
    async with server.client(auth=False) as client:
        assert (await save(client, turn, manifest_of({}), content)).status_code == 201
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
                content=msgspec.json.encode(manifest_of({"work/a": content, "work/b": unknown})),
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
    turn = await begin(server)
    first, second = os.urandom(600), os.urandom(600)
    async with server.client(auth=False) as client:
        too_big = await client.put(
            f"{turn.base}/snapshot",
            headers=turn.upload(),
            content=msgspec.json.encode(manifest_of({"work/a": first, "work/b": second})),
        )
        _problem(too_big, 413, "payload-too-large")
        cut = await client.post(
            f"{turn.base}/snapshot/blobs",
            headers=turn.upload(),
            content=_pieces(pack(first, second), 100),
        )
        _problem(cut, 413, "payload-too-large")
        config = await _config(client, turn)
        assert config.snapshot is None and config.snapshot_max_bytes == 1000
    assert await server.stored_blobs() == [sha(first)]  # the second never started
    assert _tmp(server) == [] and await _rows(server) == []

    off = await start_chat_server(nursery, tmp_path / "off", snapshot_max_bytes=0)
    turn = await begin(off)
    async with off.client(auth=False) as client:
        for response in (
            await client.put(
                f"{turn.base}/snapshot",
                headers=turn.upload(),
                content=msgspec.json.encode(manifest_of({})),
            ),
            await client.post(
                f"{turn.base}/snapshot/blobs", headers=turn.upload(), content=pack(first)
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
    turn, other = await begin(server), await begin(server)
    async with server.client(auth=False) as client:
        assert (await save(client, turn, manifest_of({"work/a": mine}), mine)).status_code == 201
        assert (
            await save(client, other, manifest_of({"work/a": theirs}), theirs)
        ).status_code == 201
        foreign = await _restore(client, turn, [sha(mine), sha(theirs)])
        problem = _problem(foreign, 404, "not-found")
        assert (problem["sha256"], problem["notFoundCount"]) == (sha(theirs), 1)
        # The other chat's run token on this turn's session is no token at all.
        stolen = await client.post(
            f"{turn.base}/snapshot/restore", headers=other.run(), json={"sha256": [sha(mine)]}
        )
        _problem(stolen, 401, "unauthorized")
        assert _unpack((await _restore(client, turn, [sha(mine)])).content) == [(sha(mine), mine)]


async def test_every_snapshot_callback_needs_its_token(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn, other = await begin(server), await begin(server)
    content = b"content\n"
    body = {"sha256": [sha(content)]}
    calls: list[tuple[str, str, Any, str]] = [
        ("POST", "snapshot/missing", body, "upload"),
        ("POST", "snapshot/blobs", pack(content), "upload"),
        ("PUT", "snapshot", manifest_of({"work/a": content}), "upload"),
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
    await finish(server, turn)
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
            await client.post(f"{base}/snapshot/blobs", headers=upload, content=pack(content)),
            await client.put(
                f"{base}/snapshot",
                headers=upload,
                content=msgspec.json.encode(manifest_of({"work/a": content})),
            ),
            await client.post(
                f"{base}/snapshot/restore",
                headers={"Authorization": f"Bearer {tokens.run}"},
                json={"sha256": [sha(content)]},
            ),
        ):
            problem = _problem(response, 409, "no-chat")
            assert problem["sessionId"] == run.id
    assert await server.stored_blobs() == []
