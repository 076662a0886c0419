"""The chat bag over HTTP: uploads, attachments, downloads, soft delete, scoping."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from tests.chat.harness import (
    WORKSPACE,
    ChatServer,
    EventReader,
    running_step,
    scripted,
    shell,
    start_chat_server,
)

pytestmark = pytest.mark.usefixtures("chat_database")


async def _new_chat(client: httpx.AsyncClient, workspace: str = WORKSPACE) -> str:
    response = await client.post("/api/assistant/chats", json={"workspaceId": workspace})
    assert response.status_code == 201, response.text
    chat_id: str = response.json()["id"]
    return chat_id


async def _upload(
    client: httpx.AsyncClient, chat_id: str, *files: tuple[str, bytes, str]
) -> list[dict[str, Any]]:
    response = await client.post(
        f"/api/assistant/chats/{chat_id}/files",
        params={"workspaceId": WORKSPACE},
        files=[("files", f) for f in files],
    )
    assert response.status_code == 201, response.text
    uploaded: list[dict[str, Any]] = response.json()["files"]
    return uploaded


async def test_attachments_round_trip(server: ChatServer) -> None:
    content = "héllo, bag\n".encode() * 100
    async with server.client() as client:
        chat_id = await _new_chat(client)
        [doc, img] = await _upload(
            client,
            chat_id,
            ("C:\\Users\\me\\notes.txt", content, "text/plain; charset=utf-8"),
            ("pixel.png", b"\x89PNG\r\n\x1a\n", "image/png"),
        )
        assert doc["name"] == "notes.txt" and doc["size"] == len(content)
        assert doc["sha256"] == hashlib.sha256(content).hexdigest()
        assert doc["contentType"] == "text/plain"
        run = await server.turn(
            "look at these", chat_id=chat_id, attachmentIds=[doc["id"], img["id"]]
        )
        assert run.status == 200 and run.kinds[-1] == "done"
        chat = await server.chat(chat_id)
        user = chat["messages"][0]
        assert user["fileAttachments"] == [doc, img]  # resolved from the bag, in order
        assert chat["conversationId"] == user["id"]  # the first turn of a pre-made chat
        download = await client.get(
            f"/api/assistant/chats/{chat_id}/files/{doc['id']}", params={"workspaceId": WORKSPACE}
        )
        assert download.status_code == 200 and download.content == content
        assert download.headers["content-length"] == str(len(content))
        assert "filename*=UTF-8''notes.txt" in download.headers["content-disposition"]
        listed = await client.get(
            f"/api/assistant/chats/{chat_id}/files", params={"workspaceId": WORKSPACE}
        )
        assert [f["id"] for f in listed.json()["files"]] == [doc["id"], img["id"]]
    # The next turn tells the sandbox about the attachments.
    second = await server.turn("and now?", chat_id=chat_id)
    assert second.status == 200
    conversation = await _conversation(server, second.start["assistantMessageId"])
    assert conversation[0]["content"] == "look at these\n\n[attached: notes.txt, pixel.png]"


async def test_unknown_or_foreign_attachments_are_refused_and_nothing_written(
    server: ChatServer,
) -> None:
    async with server.client() as client:
        mine = await _new_chat(client)
        theirs = await _new_chat(client)
        [foreign] = await _upload(client, theirs, ("x.txt", b"x", "text/plain"))
        for ids in ([foreign["id"]], ["file_nope"]):
            run = await server.turn("hi", chat_id=mine, attachmentIds=ids)
            assert run.status == 422
            assert run.problem["type"] == "urn:sandstream:problem:unknown-attachment"
            assert run.problem["unknownIds"] == ids
        first_turn = await server.turn("hi", attachmentIds=[foreign["id"]])  # no chat yet
        assert first_turn.status == 422
    chat = await server.chat(mine)
    assert chat["messages"] == [] and "activeMessageId" not in chat
    assert len(await server.store.list_chats(WORKSPACE, limit=10, now=0)) == 2


async def test_soft_delete_hides_the_chat_and_its_files(server: ChatServer) -> None:
    first = await server.turn("keep me")
    chat_id = first.chat_id
    async with server.client() as client:
        [upload] = await _upload(client, chat_id, ("a.txt", b"secret", "text/plain"))
        url = f"/api/assistant/chats/{chat_id}"
        params = {"workspaceId": WORKSPACE}
        assert (await client.delete(url, params={"workspaceId": "ws_other"})).status_code == 404
        assert (await client.delete(url, params=params)).status_code == 204
        assert (await client.get(url, params=params)).status_code == 404
        assert (await client.get(f"{url}/files", params=params)).status_code == 404
        gone = await client.get(f"{url}/files/{upload['id']}", params=params)
        assert (
            gone.status_code == 404 and gone.headers["content-type"] == "application/problem+json"
        )
        listed = await client.get("/api/assistant/chats", params=params)
        assert listed.json() == {"chats": []}
        again = await client.post(
            f"{url}/files", params=params, files=[("files", ("b.txt", b"b", "text/plain"))]
        )
        assert again.status_code == 404
        assert (await client.delete(url, params=params)).status_code == 404
    run = await server.turn("anyone?", chat_id=chat_id)
    assert run.status == 404
    # The rows are soft-deleted, not dropped.
    rows = await server.store.db.read(
        lambda conn: conn.execute(
            "SELECT COUNT(*), COUNT(deleted_at) FROM bag_files WHERE chat_id = ?", (chat_id,)
        ).fetchone()
    )
    assert tuple(rows) == (1, 1)


async def test_a_busy_chat_cannot_be_deleted(server: ChatServer) -> None:
    body = {"workspaceId": WORKSPACE, "message": "slow down"}
    async with server.stream(body) as response:
        reader = EventReader(response)
        await reader.until(running_step)
        chat_id = reader.events[0].data.split('"chatId":"')[1].split('"')[0]
        async with server.client() as client:
            busy = await client.delete(
                f"/api/assistant/chats/{chat_id}", params={"workspaceId": WORKSPACE}
            )
    assert busy.status_code == 409
    assert busy.json()["activeMessageId"]


async def test_upload_limits_and_media_type(server: ChatServer) -> None:
    limit = server.service.settings.max_upload_bytes
    async with server.client() as client:
        chat_id = await _new_chat(client)
        url = f"/api/assistant/chats/{chat_id}/files"
        params = {"workspaceId": WORKSPACE}
        too_big = await client.post(
            url, params=params, files=[("files", ("big.bin", b"x" * (limit + 1), "text/plain"))]
        )
        assert too_big.status_code == 413
        not_multipart = await client.post(url, params=params, json={"files": []})
        assert not_multipart.status_code == 415
        empty = await client.post(url, params=params, data={"note": "no file here"}, files=[])
        assert empty.status_code in (415, 422)
    assert await server.stored_blobs() == []
    assert list((server.data_dir / "bag" / "tmp").iterdir()) == []


async def _conversation(server: ChatServer, assistant_id: str) -> list[dict[str, Any]]:
    raw = await server.store.db.read(
        lambda conn: conn.execute(
            "SELECT conversation FROM sessions WHERE assistant_message_id = ?", (assistant_id,)
        ).fetchone()[0]
    )
    turns: list[dict[str, Any]] = msgspec.json.decode(raw)
    return turns


async def test_attachments_are_delivered_into_the_sandbox_work_dir(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The agent finds the turn's attachments in its work dir, at the paths its config
    names; copying them to output/ writes back the very bytes that were uploaded."""
    agent = scripted(
        shell("cat attachments/notes.txt && cp attachments/* output/"),
        message="{prompt}",
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    notes, other_notes, pixel = b"first notes\n", b"second\n", b"\x89PNG\r\n\x1a\n\x00\xff"
    async with server.client() as client:
        chat_id = await _new_chat(client)
        uploaded = await _upload(
            client,
            chat_id,
            ("notes.txt", notes, "text/plain"),
            ("C:\\elsewhere\\notes.txt", other_notes, "text/plain"),  # the same name
            ("pixel.png", pixel, "image/png"),
        )
    run = await server.turn("use them", chat_id=chat_id, attachmentIds=[f["id"] for f in uploaded])
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"], run.body[-800:]
    paths = ["attachments/notes.txt", "attachments/notes (2).txt", "attachments/pixel.png"]
    download, shell_step = run.folded().steps
    assert (download.name, download.status) == ("download_attachments", "succeeded")
    assert download.args is not None and download.result is not None
    assert msgspec.json.decode(download.args) == {"files": paths}
    assert msgspec.json.decode(download.result) == {
        "files": [{"path": p, "size": f["size"]} for p, f in zip(paths, uploaded, strict=True)]
    }
    assert shell_step.status == "succeeded" and shell_step.result is not None
    assert "first notes" in msgspec.json.decode(shell_step.result)["stdout"]
    chat = await server.chat(chat_id)
    written_back = {f["name"]: f["sha256"] for f in chat["messages"][-1]["fileAttachments"]}
    assert written_back == {
        "notes.txt": hashlib.sha256(notes).hexdigest(),
        "notes (2).txt": hashlib.sha256(other_notes).hexdigest(),
        "pixel.png": hashlib.sha256(pixel).hexdigest(),
    }


async def test_a_failed_attachment_download_fails_the_turn_with_a_clear_step(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_chat_server(nursery, tmp_path, agent=scripted(shell("echo never")))
    async with server.client() as client:
        chat_id = await _new_chat(client)
        [gone] = await _upload(client, chat_id, ("gone.csv", b"a,b\n", "text/csv"))
    # The blob vanished (an operator's mistake): the workspace answers 404.
    await server.remove_blob(gone["sha256"])
    run = await server.turn("read it", chat_id=chat_id, attachmentIds=[gone["id"]])
    assert run.kinds == ["start", "step", "step", "error", "done"]
    [step] = run.folded().steps
    assert (step.name, step.status) == ("download_attachments", "failed")
    assert step.error is not None and "attachments/gone.csv answered 404" in step.error
    error = run.data("error")[0]
    assert error["code"] == "attachments_failed" and error["message"] == step.error
    chat = await server.chat(chat_id)
    assert chat["messages"][-1]["status"] == "failed"
