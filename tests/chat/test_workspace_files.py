"""A chat's workspace over real sockets, on SQLite and PostgreSQL: ``GET
…/chats/{chatId}/workspace`` lists the work dir of the chat's latest snapshot (never the
agent's home) and ``…/workspace/file`` serves its files' bytes; anything else, another
workspace's chat included, is a 404. Snapshots are stored as a sandbox stores them
(:mod:`tests.chat.snapshot_harness`), with no container."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from sandstream.core import SnapshotEntry, SnapshotManifest
from tests.chat.harness import WORKSPACE, ChatServer, start_chat_server
from tests.chat.snapshot_harness import SandboxTurn, begin, finish, manifest_of, save, sha

pytestmark = pytest.mark.usefixtures("chat_database")

SOURCE = b"def f():\n    return 1\n"
SECRET = b'{"sessionId": "the agent\'s own"}\n'
DATA = os.urandom(600 * 1024)  # several blob reads


def _workspace() -> SnapshotManifest:
    """A work dir (a folder, two files, a link) and a home holding a session file."""
    return manifest_of(
        {"work/src/f.py": SOURCE, "work/data.bin": DATA, "home/.agent/session.json": SECRET},
        dirs=("work/src", "home/.agent"),
    )


async def _saved(server: ChatServer, manifest: SnapshotManifest, *blobs: bytes) -> SandboxTurn:
    """A new chat whose settled turn saved ``manifest``."""
    turn = await begin(server)
    async with server.client(auth=False) as client:
        put = await save(client, turn, manifest, *blobs)
    assert put.status_code == 201, put.text
    await finish(server, turn)
    return turn


async def _listing(
    client: httpx.AsyncClient, chat_id: str, workspace: str = WORKSPACE
) -> httpx.Response:
    return await client.get(
        f"/api/assistant/chats/{chat_id}/workspace", params={"workspaceId": workspace}
    )


async def _file(
    client: httpx.AsyncClient, chat_id: str, path: str, workspace: str = WORKSPACE
) -> httpx.Response:
    return await client.get(
        f"/api/assistant/chats/{chat_id}/workspace/file",
        params={"path": path, "workspaceId": workspace},
    )


def _not_found(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == "urn:sandstream:problem:not-found", problem
    return problem


async def test_the_workspace_lists_the_work_dir_of_the_latest_snapshot(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await begin(server)
    async with server.client() as client:
        empty = await _listing(client, turn.chat_id)
        assert empty.status_code == 200, empty.text
        assert empty.json() == {
            "snapshotId": None,
            "createdAt": None,
            "messageId": None,
            "files": [],
        }
    async with server.client(auth=False) as client:
        put = await save(client, turn, _workspace(), SOURCE, DATA, SECRET)
    assert put.status_code == 201, put.text
    await finish(server, turn)

    async with server.client() as client:
        listed = await _listing(client, turn.chat_id)
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["snapshotId"] == put.json()["id"]
    assert body["messageId"] == turn.start.session.assistant_message_id
    assert isinstance(body["createdAt"], int)
    assert body["files"] == [
        {"path": "src", "type": "dir", "mode": 0o755, "size": 0},
        {
            "path": "src/f.py",
            "type": "file",
            "mode": 0o644,
            "size": len(SOURCE),
            "sha256": sha(SOURCE),
        },
        {"path": "data.bin", "type": "file", "mode": 0o644, "size": len(DATA), "sha256": sha(DATA)},
        {"path": "latest", "type": "symlink", "mode": 0o755, "size": 0, "target": "."},
    ]
    assert b"session" not in listed.content and sha(SECRET).encode() not in listed.content

    # The chat's next turn saves a newer snapshot: the listing is that one's.
    following = await begin(server, turn.chat_id)
    changed = b"def f():\n    return 2\n"
    async with server.client(auth=False) as client:
        newer = await save(client, following, manifest_of({"work/f.py": changed}), changed)
    assert newer.status_code == 201, newer.text
    async with server.client() as client:
        listed = await _listing(client, turn.chat_id)
    assert listed.json()["snapshotId"] == newer.json()["id"]
    assert [entry["path"] for entry in listed.json()["files"]] == ["f.py", "latest"]


async def test_a_workspace_file_is_served_as_a_download(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await _saved(server, _workspace(), SOURCE, DATA, SECRET)
    async with server.client() as client:
        source = await _file(client, turn.chat_id, "src/f.py")
        data = await _file(client, turn.chat_id, "data.bin")
    assert source.status_code == 200, source.text
    assert source.content == SOURCE
    assert source.headers["etag"] == f'"{sha(SOURCE)}"'
    assert source.headers["content-length"] == str(len(SOURCE))
    assert source.headers["content-type"] == "text/x-python"
    assert source.headers["content-disposition"] == (
        "attachment; filename=\"f.py\"; filename*=UTF-8''f.py"
    )
    assert source.headers["x-content-type-options"] == "nosniff"
    assert data.status_code == 200, data.text
    assert data.content == DATA
    assert data.headers["etag"] == f'"{sha(DATA)}"'
    assert data.headers["content-type"] == "application/octet-stream"


async def test_only_regular_files_of_the_work_dir_are_served(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    manifest = _workspace()
    manifest.entries.append(SnapshotEntry(path="work/session", type="symlink", target="src/f.py"))
    turn = await _saved(server, manifest, SOURCE, DATA, SECRET)
    refused = [
        "src",  # a directory
        "latest",  # a link
        "session",  # a link to a file
        "home/.agent/session.json",  # the agent's home is never served
        ".agent/session.json",
        "../home/.agent/session.json",
        "/home/.agent/session.json",
        "work/src/f.py",
        "src/../src/f.py",
        "./src/f.py",
        "src//f.py",
        "src/f.py/",
        "missing.txt",
    ]
    async with server.client() as client:
        for path in refused:
            problem = _not_found(await _file(client, turn.chat_id, path))
            assert problem["path"] == path
        no_path = await client.get(
            f"/api/assistant/chats/{turn.chat_id}/workspace/file",
            params={"workspaceId": WORKSPACE},
        )
        assert no_path.status_code == 422, no_path.text
        # Listed, but its blob is no longer stored.
        await server.remove_blob(sha(SOURCE))
        _not_found(await _file(client, turn.chat_id, "src/f.py"))
        # A chat without a snapshot has no files.
        bare = await begin(server)
        _not_found(await _file(client, bare.chat_id, "src/f.py"))


async def test_another_workspaces_chat_or_an_unknown_one_is_a_404(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path)
    turn = await _saved(server, _workspace(), SOURCE, DATA, SECRET)
    async with server.client(auth=False) as client:
        for response in (
            await _listing(client, turn.chat_id),
            await _file(client, turn.chat_id, "src/f.py"),
        ):
            assert response.status_code == 401, response.text
    async with server.client() as client:
        for response in (
            await _listing(client, turn.chat_id, "ws_other"),
            await _file(client, turn.chat_id, "src/f.py", "ws_other"),
            await _listing(client, "chat_unknown"),
            await _file(client, "chat_unknown", "src/f.py"),
        ):
            assert _not_found(response)["title"] == "Chat not found"
        deleted = await client.delete(
            f"/api/assistant/chats/{turn.chat_id}", params={"workspaceId": WORKSPACE}
        )
        assert deleted.status_code == 204, deleted.text
        _not_found(await _listing(client, turn.chat_id))
        _not_found(await _file(client, turn.chat_id, "src/f.py"))
