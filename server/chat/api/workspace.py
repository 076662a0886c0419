"""A chat's workspace as its user sees it: the work dir its latest turn left.

- ``GET /api/assistant/chats/{chatId}/workspace?workspaceId=`` → ``200`` the chat's
  latest workspace snapshot (:class:`WorkspaceListing`): its id, when and by which
  assistant message it was saved, and the entries of its ``work`` root (the sandbox's
  work dir) by their path inside it; ``snapshotId: null`` and no files for a chat
  without one.
- ``GET …/workspace/file?path=&workspaceId=`` → the bytes of the regular file at that
  path of the work dir in that snapshot, as a download (:mod:`.downloads`).

Only the ``work`` root is shown or served: the ``home`` root holds the agent's own
session state, which never leaves the sandboxes. A path is looked up as listed, never
resolved: ``..``, an absolute path, a directory, a link or a ``home`` path is simply no
file of the work dir.

Both need the chat API token and are scoped by workspace, as the chat's bag files are.
Bad input: an unknown or deleted chat, or another workspace's, is a ``404``
(:class:`~sandstream.server.chat.model.ChatNotFoundError`); a path that is no regular
file of the work dir, or whose blob is not stored, a ``404``
(:class:`~sandstream.server.chat.model.WorkspaceFileNotFoundError`); a missing or
over-long ``path``, or a bad ``workspaceId``, a ``422``. Cancellation: a download being
sent closes its blob's reader; nothing else is held.
"""

from __future__ import annotations

from typing import Final

import msgspec
from quart import Blueprint, Response

from sandstream.core import EntryType, SnapshotManifest
from sandstream.server.chat.model import WorkspaceFileNotFoundError, now_ms
from sandstream.server.chat.store import content_type_for
from sandstream.server.http import json_response, require_query

from .bodies import workspace_query
from .downloads import blob_download
from .guard import get_service, require_api_token

__all__ = ["WorkspaceEntry", "WorkspaceListing", "workspace_blueprint"]

workspace_blueprint = Blueprint("assistant_workspace", __name__, url_prefix="/api/assistant")
require_api_token(workspace_blueprint)

_PREFIX: Final = "work/"
"""What the paths of the one root shown, the sandbox's work dir, start with (never
``home/``)."""
_MAX_PATH: Final = 4096
"""The longest ``path`` taken (a snapshot path is at most 4096 bytes)."""


class WorkspaceEntry(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """One entry of the work dir: ``path`` inside it; ``sha256`` for a file, ``target``
    for a link."""

    path: str
    type: EntryType
    mode: int
    size: int
    sha256: str | None = None
    target: str | None = None


class WorkspaceListing(msgspec.Struct, frozen=True, rename="camel", kw_only=True):
    """``GET …/workspace``: the chat's latest snapshot (all ``None`` and no files when
    it has none)."""

    snapshot_id: str | None
    created_at: int | None
    message_id: str | None
    files: list[WorkspaceEntry]


def _work_entries(manifest: SnapshotManifest) -> list[WorkspaceEntry]:
    """The entries of ``manifest``'s work root below it, in the manifest's order."""
    return [
        WorkspaceEntry(
            path=entry.path.removeprefix(_PREFIX),
            type=entry.type,
            mode=entry.mode,
            size=entry.size,
            sha256=entry.sha256,
            target=entry.target,
        )
        for entry in manifest.entries
        if entry.path.startswith(_PREFIX)
    ]


def _work_file(manifest: SnapshotManifest, path: str) -> tuple[str, int]:
    """The SHA-256 and size of the regular file at ``path`` of ``manifest``'s work root,
    exactly as listed. Raises :class:`WorkspaceFileNotFoundError`."""
    wanted = _PREFIX + path
    for entry in manifest.entries:
        if entry.path == wanted and entry.type == "file" and entry.sha256 is not None:
            return entry.sha256, entry.size
    raise WorkspaceFileNotFoundError(path)


@workspace_blueprint.get("/chats/<chat_id>/workspace")
async def workspace(chat_id: str) -> Response:
    """The work dir of the chat's latest snapshot → ``200`` :class:`WorkspaceListing`."""
    service = get_service()
    workspace_id = workspace_query()
    await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    snapshot = await service.store.latest_snapshot(workspace_id, chat_id)
    if snapshot is None:
        listing = WorkspaceListing(snapshot_id=None, created_at=None, message_id=None, files=[])
    else:
        listing = WorkspaceListing(
            snapshot_id=snapshot.id,
            created_at=snapshot.created_at,
            message_id=snapshot.assistant_message_id,
            files=_work_entries(snapshot.manifest),
        )
    return json_response(listing)


@workspace_blueprint.get("/chats/<chat_id>/workspace/file")
async def workspace_file(chat_id: str) -> Response:
    """A file of the chat's latest snapshot's work dir, as a download."""
    service = get_service()
    workspace_id = workspace_query()
    path = require_query("path", max_length=_MAX_PATH)
    await service.store.get_chat(workspace_id, chat_id, now=now_ms())
    snapshot = await service.store.latest_snapshot(workspace_id, chat_id)
    if snapshot is None:
        raise WorkspaceFileNotFoundError(path)
    sha256, size = _work_file(snapshot.manifest, path)
    if not await service.blobs.exists(sha256):
        raise WorkspaceFileNotFoundError(path)
    return blob_download(
        service.blobs,
        sha256=sha256,
        size=size,
        name=path,
        content_type=content_type_for(path, None),
    )
