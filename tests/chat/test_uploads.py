"""Uploads and writebacks of every size up to the limit, through a real server.

A bag upload is ``multipart/form-data`` read as it arrives; however the body is cut
on the wire (httpx's own framing, or a client streaming odd pieces), every file up to
``--max-upload-bytes`` is stored whole, every time. Files an agent writes to its
output dir come back the same way (``POST /results`` from the sandbox).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from tests.chat.harness import WORKSPACE, ChatServer, scripted, shell, start_chat_server

pytestmark = pytest.mark.usefixtures("chat_database")

MiB = 1024 * 1024
SIZES = (1 * MiB, 2 * MiB, 5 * MiB, 20 * MiB, 31 * MiB)
ROUNDS = 10
ODD_PIECE = 3 * MiB + 1
"""A client that streams its body in pieces of this size (not a power of two)."""


async def _new_chat(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/assistant/chats", json={"workspaceId": WORKSPACE})
    assert response.status_code == 201, response.text
    chat_id: str = response.json()["id"]
    return chat_id


def _files_url(chat_id: str) -> str:
    return f"/api/assistant/chats/{chat_id}/files?workspaceId={WORKSPACE}"


def _check_stored(response: httpx.Response, content: bytes) -> None:
    assert response.status_code == 201, (len(content), response.status_code, response.text)
    [stored] = response.json()["files"]
    assert stored["size"] == len(content)
    assert stored["sha256"] == hashlib.sha256(content).hexdigest()


async def _in_pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize("size", SIZES, ids=[f"{s // MiB}MiB" for s in SIZES])
async def test_uploads_up_to_the_limit_succeed_every_time(server: ChatServer, size: int) -> None:
    assert size < server.service.settings.max_upload_bytes
    async with server.client(timeout=120) as client:
        chat_id = await _new_chat(client)
        for _ in range(ROUNDS):
            content = os.urandom(size)
            response = await client.post(
                _files_url(chat_id), files=[("files", ("data.bin", content, "text/plain"))]
            )
            _check_stored(response, content)


@pytest.mark.parametrize("size", SIZES, ids=[f"{s // MiB}MiB" for s in SIZES])
async def test_uploads_streamed_in_odd_pieces_succeed_every_time(
    server: ChatServer, size: int
) -> None:
    async with server.client(timeout=120) as client:
        chat_id = await _new_chat(client)
        for _ in range(ROUNDS):
            content = os.urandom(size)
            # httpx's own multipart framing, sent by a streaming client in odd pieces
            framed = client.build_request(
                "POST", _files_url(chat_id), files=[("files", ("odd.bin", content, "text/plain"))]
            )
            body = framed.read()
            response = await client.post(
                _files_url(chat_id),
                content=_in_pieces(body, ODD_PIECE),
                headers={"Content-Type": framed.headers["Content-Type"]},
            )
            _check_stored(response, content)


async def test_an_upload_over_the_limit_or_with_a_bad_boundary_is_refused_with_a_problem(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    limit = 3 * MiB
    server = await start_chat_server(nursery, tmp_path, max_upload_bytes=limit)
    async with server.client() as client:
        chat_id = await _new_chat(client)
        at_limit = os.urandom(limit)
        _check_stored(
            await client.post(_files_url(chat_id), files=[("files", ("a.bin", at_limit, "x/y"))]),
            at_limit,
        )
        framed = client.build_request(
            "POST", _files_url(chat_id), files=[("files", ("b.bin", at_limit + b"!", "x/y"))]
        )
        body = framed.read()
        over = await client.post(
            _files_url(chat_id),
            content=_in_pieces(body, ODD_PIECE),  # streamed: no Content-Length to refuse early
            headers={"Content-Type": framed.headers["Content-Type"]},
        )
        long_boundary = await client.post(
            _files_url(chat_id),
            content=b"--" + b"b" * 71 + b"--\r\n",
            headers={"Content-Type": f"multipart/form-data; boundary={'b' * 71}"},
        )
    assert over.status_code == 413
    assert over.headers["content-type"] == "application/problem+json"
    assert over.json()["type"] == "urn:sandstream:problem:payload-too-large"
    assert long_boundary.status_code == 422
    assert "1 to 70 bytes" in long_boundary.json()["detail"]
    assert list((server.data_dir / "bag" / "tmp").iterdir()) == []


WRITEBACK_BYTES = 10 * MiB


async def test_writebacks_of_10_mib_succeed_every_time(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Each turn's agent writes 10 MiB of random bytes to its output dir; each comes
    back to the bag whole (the container's ``POST /results``)."""
    agent = scripted(
        shell(
            f"head -c {WRITEBACK_BYTES} /dev/urandom > output/out.bin && sha256sum output/out.bin"
        )
    )
    server = await start_chat_server(nursery, tmp_path, agent=agent)
    for _ in range(ROUNDS):
        run = await server.turn("write it")
        assert run.status == 200 and run.kinds[-2:] == ["result", "done"], run.body[-800:]
        [step] = run.folded().steps
        assert step.result is not None
        stdout: str = msgspec.json.decode(step.result)["stdout"]
        written: dict[str, Any] = (await server.chat(run.chat_id))["messages"][-1]
        [result] = written["fileAttachments"]
        assert (result["name"], result["size"]) == ("out.bin", WRITEBACK_BYTES)
        assert stdout.split()[0] == result["sha256"]
