"""Chats' workspace snapshots in the chat store: the ``chat_snapshots`` table.

A snapshot is what a chat turn's sandbox saved of its work dir and agent home for the
chat's next turn: its manifest (:class:`~sandstream.core.SnapshotManifest`, stored once
as its canonical JSON, zlib-compressed, by that JSON's SHA-256 in
``snapshot_manifests``, so an unchanged workspace adds a row and no manifest; dropped
once no snapshot holds it) and where it came from. The files' bytes
are blobs of the bag's blob store (:mod:`..bag`), by SHA-256, and are never deleted
here; ``workspace_blobs`` records which blobs a workspace's sandboxes sent, the only
ones its snapshots may list. A chat keeps its newest snapshots only: adding one
deletes the older ones past ``keep`` in the same transaction, and deleting the chat
deletes them all
(:mod:`.chats`); a fork of the chat gets its own copy of the row it starts from
(:func:`copy_snapshot`, :mod:`.forks`), the same manifest. :class:`Snapshots` holds the
:class:`~..contract.ChatStore` methods on it.

Bad input: :class:`~sandstream.server.chat.model.NoChatError` for a dispatch without a
chat, :class:`~sandstream.server.chat.model.ChatNotFoundError` for a deleted chat.
Cancellation: a call that started runs to completion in its worker thread
(:mod:`..database`).
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping
from typing import Any, Final

import msgspec

from sandstream.core import SnapshotManifest, manifest_digest
from sandstream.server.chat.model import DispatchRecord, NoChatError, SnapshotRecord, new_id

from ..database import Connection, Database
from .chats import DROP_UNUSED_MANIFESTS, load_chat

__all__ = ["Snapshots", "copy_snapshot"]

_manifest_decoder: Final = msgspec.json.Decoder(SnapshotManifest)
_MANIFEST_LEVEL: Final = 6
"""zlib's level for a stored manifest (its JSON is mostly paths and hex: about 4.5x)."""


def stored_manifest(manifest: SnapshotManifest) -> bytes:
    """``manifest`` as ``snapshot_manifests`` keeps it: its JSON, zlib-compressed."""
    return zlib.compress(msgspec.json.encode(manifest), _MANIFEST_LEVEL)


def _manifest(stored: bytes) -> SnapshotManifest:
    return _manifest_decoder.decode(zlib.decompress(stored))


_BATCH: Final = 500
"""Hashes asked in one ``IN (...)``: below SQLite's bound on a statement's parameters."""
_COLUMNS: Final = (
    "id, workspace_id, chat_id, dispatch_id, assistant_message_id, manifest_sha256, files, "
    "total_bytes, created_at"
)
_SELECT: Final = (
    "SELECT s.id, s.workspace_id, s.chat_id, s.dispatch_id, s.assistant_message_id, "
    "m.manifest, s.files, s.total_bytes, s.created_at FROM chat_snapshots s "
    "JOIN snapshot_manifests m ON m.sha256 = s.manifest_sha256"
)


def _snapshot(row: Any) -> SnapshotRecord:
    return SnapshotRecord(
        id=row["id"],
        workspace_id=row["workspace_id"],
        chat_id=row["chat_id"],
        dispatch_id=row["dispatch_id"],
        assistant_message_id=row["assistant_message_id"],
        manifest=_manifest(bytes(row["manifest"])),
        files=row["files"],
        total_bytes=row["total_bytes"],
        created_at=row["created_at"],
    )


def copy_snapshot(
    conn: Connection, chat_id: str, seq: int, *, to_chat: str, message_ids: Mapping[str, str]
) -> None:
    """Copy to chat ``to_chat`` the snapshot of chat ``chat_id`` its fork from the message
    at ``seq`` starts with: the newest one saved by the turn of that message, else the
    newest saved by a turn of an earlier message; its ``assistant_message_id`` becomes
    that message's copy (``message_ids``: the source's ids to the fork's). Nothing when
    the chat keeps no such snapshot (none was saved, or only ones it no longer keeps)."""
    row = conn.execute(
        "SELECT s.workspace_id, s.dispatch_id, s.assistant_message_id, s.manifest_sha256, "
        "s.files, s.total_bytes, s.created_at FROM chat_snapshots s JOIN messages m "
        "ON m.chat_id = s.chat_id AND m.id = s.assistant_message_id "
        "WHERE s.chat_id = ? AND m.seq <= ? ORDER BY m.seq DESC, s.rowid DESC LIMIT 1",
        (chat_id, seq),
    ).fetchone()
    if row is None:
        return
    conn.execute(
        f"INSERT INTO chat_snapshots ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            new_id("snap"),
            row["workspace_id"],
            to_chat,
            row["dispatch_id"],
            message_ids[row["assistant_message_id"]],
            row["manifest_sha256"],
            row["files"],
            row["total_bytes"],
            row["created_at"],
        ),
    )


class Snapshots:
    """The :class:`~..contract.ChatStore` methods on chats' workspace snapshots."""

    db: Database

    async def add_snapshot(
        self, session: DispatchRecord, manifest: SnapshotManifest, *, keep: int, now: int
    ) -> SnapshotRecord:
        chat_id = session.chat_id
        if chat_id is None:
            raise NoChatError(session.id)
        body = stored_manifest(manifest)
        snapshot = SnapshotRecord(
            id=new_id("snap"),
            workspace_id=session.workspace_id,
            chat_id=chat_id,
            dispatch_id=session.id,
            assistant_message_id=session.assistant_message_id,
            manifest=manifest,
            files=len(manifest.files),
            total_bytes=manifest.total_bytes,
            created_at=now,
        )
        digest = manifest_digest(manifest)

        def run(conn: Connection) -> SnapshotRecord:
            load_chat(conn, session.workspace_id, chat_id)
            row = conn.execute(
                f"{_SELECT} WHERE s.chat_id = ? AND s.dispatch_id = ? AND s.manifest_sha256 = ?",
                (chat_id, session.id, digest),
            ).fetchone()
            if row is not None:  # this dispatch stored this manifest already
                return _snapshot(row)
            conn.execute(
                "INSERT INTO snapshot_manifests (sha256, manifest) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                (digest, body),
            )
            conn.execute(
                f"INSERT INTO chat_snapshots ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    snapshot.id,
                    snapshot.workspace_id,
                    snapshot.chat_id,
                    snapshot.dispatch_id,
                    snapshot.assistant_message_id,
                    digest,
                    snapshot.files,
                    snapshot.total_bytes,
                    snapshot.created_at,
                ),
            )
            conn.execute(
                "DELETE FROM chat_snapshots WHERE chat_id = ? AND id NOT IN ("
                "SELECT id FROM chat_snapshots WHERE chat_id = ? ORDER BY rowid DESC LIMIT ?)",
                (chat_id, chat_id, keep),
            )
            conn.execute(DROP_UNUSED_MANIFESTS)
            return snapshot

        return await self.db.write(run)

    async def latest_snapshot(self, workspace_id: str, chat_id: str) -> SnapshotRecord | None:
        def run(conn: Connection) -> SnapshotRecord | None:
            row = conn.execute(
                f"{_SELECT} WHERE s.chat_id = ? AND s.workspace_id = ? "
                "ORDER BY s.rowid DESC LIMIT 1",
                (chat_id, workspace_id),
            ).fetchone()
            return None if row is None else _snapshot(row)

        return await self.db.read(run)

    async def unkept_hashes(
        self, workspace_id: str, chat_id: str, hashes: Collection[str]
    ) -> list[str]:
        def run(conn: Connection) -> list[str]:
            kept: set[str] = set()
            for row in conn.execute(
                "SELECT DISTINCT m.manifest FROM chat_snapshots s "
                "JOIN snapshot_manifests m ON m.sha256 = s.manifest_sha256 "
                "WHERE s.chat_id = ? AND s.workspace_id = ?",
                (chat_id, workspace_id),
            ):
                kept |= _manifest(bytes(row[0])).hashes()
            return [sha256 for sha256 in dict.fromkeys(hashes) if sha256 not in kept]

        return await self.db.read(run)

    async def add_workspace_blobs(self, workspace_id: str, hashes: Collection[str]) -> None:
        rows = [(workspace_id, sha256) for sha256 in dict.fromkeys(hashes)]
        if not rows:
            return

        def run(conn: Connection) -> None:
            conn.executemany(
                "INSERT INTO workspace_blobs (workspace_id, sha256) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                rows,
            )

        await self.db.write(run)

    async def unsent_hashes(self, workspace_id: str, hashes: Collection[str]) -> list[str]:
        asked = list(dict.fromkeys(hashes))

        def run(conn: Connection) -> list[str]:
            sent: set[str] = set()
            for start in range(0, len(asked), _BATCH):
                batch = asked[start : start + _BATCH]
                marks = ", ".join("?" * len(batch))
                sent.update(
                    row[0]
                    for row in conn.execute(
                        f"SELECT sha256 FROM workspace_blobs WHERE workspace_id = ? "
                        f"AND sha256 IN ({marks})",
                        (workspace_id, *batch),
                    )
                )
            return [sha256 for sha256 in asked if sha256 not in sent]

        return await self.db.read(run)
