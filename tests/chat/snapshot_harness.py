"""Workspace snapshots stored the way a sandbox stores them, with no container: a chat
turn begun with the store as the chat route begins it, its one-time tokens in clear,
then blobs sent and a manifest put through the sandbox callbacks over real sockets::

    turn = await begin(server)
    data = b"def f(): ...\n"
    manifest = manifest_of({"work/src/f.py": data}, dirs=("work/src",))
    async with server.client(auth=False) as client:
        assert (await save(client, turn, manifest, data)).status_code == 201
    await finish(server, turn)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import httpx
import msgspec

from sandstream.core import PersistedMessage, SnapshotEntry, SnapshotManifest, blob_header
from sandstream.core.persistence import TextBlock
from sandstream.server.chat.credentials.one_time import MintedTokens, mint_tokens
from sandstream.server.chat.model.ids import new_id, now_ms
from sandstream.server.chat.model.records import TurnFinish, TurnRequest, TurnStart
from tests.chat.harness import WORKSPACE, ChatServer


def sha(data: bytes) -> str:
    """The SHA-256 of ``data``, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def manifest_of(files: dict[str, bytes], *, dirs: tuple[str, ...] = ()) -> SnapshotManifest:
    """The two roots, then ``dirs``, then ``files`` (by snapshot path), then a link."""
    entries = [SnapshotEntry(path=root, type="dir") for root in ("work", "home", *dirs)]
    for path, data in files.items():
        entries.append(
            SnapshotEntry(path=path, type="file", mode=0o644, size=len(data), sha256=sha(data))
        )
    entries.append(SnapshotEntry(path="work/latest", type="symlink", target="."))
    return SnapshotManifest(entries=entries)


def pack(*blobs: bytes) -> bytes:
    """``blobs`` as one blob pack."""
    return b"".join(blob_header(sha(blob), len(blob)) + blob for blob in blobs)


@dataclass
class SandboxTurn:
    """A turn begun as the chat route begins it (no container), its tokens in clear."""

    start: TurnStart
    tokens: MintedTokens

    @property
    def base(self) -> str:
        return f"/api/sandbox/{self.start.session.id}"

    @property
    def chat_id(self) -> str:
        return self.start.chat.id

    @property
    def answer_id(self) -> str:
        return self.start.session.assistant_message_id or ""

    def upload(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.upload}"}

    def run(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.run}"}


async def begin(
    server: ChatServer,
    chat_id: str | None = None,
    *,
    text: str = "keep working",
    attachment_ids: tuple[str, ...] = (),
    workspace: str = WORKSPACE,
) -> SandboxTurn:
    """A turn of chat ``chat_id`` (a new chat if ``None``) of ``workspace``, begun: the
    user says ``text`` with the uploads ``attachment_ids``."""
    now = now_ms()
    tokens = mint_tokens(now)
    session_id = new_id("sess")
    start = await server.store.begin_turn(
        TurnRequest(
            workspace_id=workspace,
            chat_id=chat_id,
            workflow_id=None,
            text=text,
            attachment_ids=list(attachment_ids),
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
    return SandboxTurn(start, tokens)


async def finish(server: ChatServer, turn: SandboxTurn, answer: str | None = None) -> None:
    """Settle ``turn`` with a complete answer, ``answer`` or empty (its tokens die)."""
    await server.store.finish_turn(
        TurnFinish(
            chat_id=turn.chat_id,
            session_id=turn.start.session.id,
            holder=turn.start.holder,
            message=PersistedMessage(
                id=turn.answer_id,
                role="assistant",
                content=[] if answer is None else [TextBlock(answer)],
                created_at=now_ms(),
                status="complete",
            ),
            now=now_ms(),
        )
    )


async def save(
    client: httpx.AsyncClient, turn: SandboxTurn, manifest: SnapshotManifest, *blobs: bytes
) -> httpx.Response:
    """What a sandbox does after its turn: send the blobs, then put the manifest."""
    sent = await client.post(
        f"{turn.base}/snapshot/blobs", headers=turn.upload(), content=pack(*blobs)
    )
    assert sent.status_code == 201, sent.text
    return await client.put(
        f"{turn.base}/snapshot", headers=turn.upload(), content=msgspec.json.encode(manifest)
    )
