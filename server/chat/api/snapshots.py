"""The workspace snapshot callbacks: what a chat turn's sandbox saves of its work dir
and agent home for the chat's next turn, and how that turn gets it back.

A snapshot is a :class:`~sandstream.core.SnapshotManifest`; its files' bytes are blobs
of the bag's blob store, by SHA-256, each stored once whichever chat or turn sent it.
The sandbox saves one after its turn with its upload token, checked and not consumed
(so these calls may come in any number, also after ``/results``, until the turn
settles):

- ``POST /api/sandbox/{sessionId}/snapshot/missing``: ``{"sha256": [...]}`` (at most
  :data:`~sandstream.core.MAX_SNAPSHOT_HASHES`, each 64 lowercase hex) → ``200
  {"missing": [...]}``, those to send (each once, in the order asked): the blob store
  lacks them, or no sandbox of the workspace sent them yet — knowing a hash is no
  proof of holding its bytes, so a manifest lists only blobs its workspace sent;
- ``POST …/snapshot/blobs``: a blob pack (:mod:`.blob_packs`) → ``201 {"stored": n}``,
  each blob committed at its end (bytes stored before are stored once) and recorded as
  sent by the workspace;
- ``PUT …/snapshot``: the manifest → ``201 {"id", "files", "bytes"}``, stored as the
  chat's newest snapshot (its older ones past ``--snapshots-kept`` deleted); the same
  manifest again from the same dispatch answers the same snapshot.

The chat's next turn finds the latest manifest in its ``/config`` answer and reads its
blobs with its run token, checked and not consumed:

- ``POST …/snapshot/restore``: ``{"sha256": [...]}`` → ``200 application/octet-stream``,
  the blob pack of those blobs in the order asked; each must be listed by one of the
  kept snapshots of the dispatch's own chat, so a token never reads another chat's
  blobs.

Bad input: a wrong, expired or other-purpose token, or a settled turn's, is a 401 and
nothing is read or written; a dispatch without a chat (an Agents-block run) a 409
(:class:`~sandstream.server.chat.model.NoChatError`); a body that does not decode, a
manifest :func:`~sandstream.core.check_manifest` refuses or whose sizes are not its
blobs', a malformed pack: 422; a manifest over ``--snapshot-max-bytes`` (or any while
that is 0), a pack over it, a body over its route's bound: 413; a manifest listing
blobs not stored, or not sent by its workspace: 409
(:class:`~sandstream.server.chat.model.SnapshotIncompleteError`);
a restore of a blob no kept snapshot of the chat lists: 404
(:class:`~sandstream.server.chat.model.SnapshotBlobNotFoundError`). Cancellation: a
pack being received discards the blob it was in (whole ones before it may stay
stored); a restore's blob being read is closed.
"""

from __future__ import annotations

from typing import Final

from quart import Blueprint, Response, request

from sandstream.core import (
    MAX_SNAPSHOT_HASHES,
    BlobHashes,
    MissingBlobs,
    SnapshotManifest,
    SnapshotManifestError,
    SnapshotReceipt,
    StoredBlobs,
    check_manifest,
)
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.model import (
    DispatchRecord,
    NoChatError,
    Purpose,
    SnapshotBlobNotFoundError,
    SnapshotIncompleteError,
    SnapshotTooLargeError,
    now_ms,
)
from sandstream.server.http import BadRequestError, invalid, json_response, read_json

from .blob_packs import pack_limit, pack_response, receive_pack
from .chat_service import ChatService
from .guard import checked_dispatch, get_service

__all__ = ["largest_snapshot_body", "snapshots_blueprint"]

snapshots_blueprint = Blueprint("sandbox_snapshots", __name__, url_prefix="/api/sandbox")

_MANIFEST_BYTES: Final = 32 * 1024 * 1024
"""The longest manifest ``PUT …/snapshot`` reads (413 beyond)."""
_HASHES_BYTES: Final = MAX_SNAPSHOT_HASHES * 80 + 1024
"""The longest ``{"sha256": [...]}`` body: room for each hash, quoted, with its comma
and some white space (413 beyond)."""


def largest_snapshot_body(settings: ChatSettings) -> int:
    """The longest request body a snapshot callback reads under ``settings``."""
    return max(_MANIFEST_BYTES, _HASHES_BYTES, pack_limit(settings.snapshot_max_bytes))


async def _chat_dispatch(purpose: Purpose, session_id: str) -> tuple[DispatchRecord, str]:
    """The dispatch of the request's ``purpose`` token (checked, not consumed) and its
    chat. Raises TokenRejectedError (401) or :class:`NoChatError` (409)."""
    session = await checked_dispatch(purpose, session_id)
    if session.chat_id is None:
        raise NoChatError(session.id)
    return session, session.chat_id


@snapshots_blueprint.post("/<session_id>/snapshot/missing")
async def missing(session_id: str) -> Response:
    """Which of the blobs asked the blob store lacks (upload token) → ``MissingBlobs``."""
    session, _ = await _chat_dispatch("upload", session_id)
    asked = await read_json(BlobHashes, _HASHES_BYTES)
    service = get_service()
    stored = await service.blobs.stored_sizes(asked.sha256)
    unsent = set(await service.store.unsent_hashes(session.workspace_id, asked.sha256))
    lacking = [
        sha256 for sha256 in dict.fromkeys(asked.sha256) if sha256 not in stored or sha256 in unsent
    ]
    return json_response(MissingBlobs(missing=lacking))


@snapshots_blueprint.post("/<session_id>/snapshot/blobs")
async def blobs(session_id: str) -> Response:
    """A blob pack into the blob store (upload token) → 201 ``StoredBlobs``."""
    session, _ = await _chat_dispatch("upload", session_id)
    service = get_service()
    stored = await receive_pack(
        request.body,
        service.blobs,
        max_bytes=service.settings.snapshot_max_bytes,
        content_length=request.content_length,
    )
    await service.store.add_workspace_blobs(session.workspace_id, stored)
    return json_response(StoredBlobs(stored=len(stored)), 201)


@snapshots_blueprint.put("/<session_id>/snapshot")
async def put_snapshot(session_id: str) -> Response:
    """The chat's newest snapshot (upload token) → 201 ``SnapshotReceipt``."""
    session, _ = await _chat_dispatch("upload", session_id)
    service = get_service()
    settings = service.settings
    manifest = await read_json(SnapshotManifest, _MANIFEST_BYTES)
    try:
        check_manifest(manifest)
    except SnapshotManifestError as exc:
        raise BadRequestError(invalid(f"the manifest cannot be restored: {exc}")) from None
    bound = settings.snapshot_max_bytes
    if bound == 0:
        raise SnapshotTooLargeError("workspace snapshots are off (--snapshot-max-bytes 0)")
    if manifest.total_bytes > bound:
        raise SnapshotTooLargeError(
            f"the snapshot's files come to {manifest.total_bytes} bytes, over {bound}"
        )
    await _check_blobs(service, session.workspace_id, manifest)
    snapshot = await service.store.add_snapshot(
        session, manifest, keep=settings.snapshots_kept, now=now_ms()
    )
    receipt = SnapshotReceipt(
        id=snapshot.id, files=snapshot.files, total_bytes=snapshot.total_bytes
    )
    return json_response(receipt, 201)


async def _check_blobs(service: ChatService, workspace_id: str, manifest: SnapshotManifest) -> None:
    """Raise :class:`SnapshotIncompleteError` (409) unless every file's blob is stored
    and was sent by the workspace, and a 422 unless each has the size its entry says."""
    hashes = manifest.hashes()
    sizes = await service.blobs.stored_sizes(hashes)
    unsent = await service.store.unsent_hashes(workspace_id, hashes)
    lacking = len((hashes - sizes.keys()) | set(unsent))
    if lacking:
        raise SnapshotIncompleteError(lacking)
    for entry in manifest.files:
        stored = sizes.get(entry.sha256 or "")
        if stored != entry.size:
            raise BadRequestError(
                invalid(f"{entry.path!r}: {entry.size} bytes, but its blob has {stored}")
            )


@snapshots_blueprint.post("/<session_id>/snapshot/restore")
async def restore(session_id: str) -> Response:
    """Blobs of the chat's kept snapshots (run token) → 200, their blob pack."""
    session, chat_id = await _chat_dispatch("run", session_id)
    asked = await read_json(BlobHashes, _HASHES_BYTES)
    service = get_service()
    unkept = await service.store.unkept_hashes(session.workspace_id, chat_id, asked.sha256)
    if unkept:
        raise SnapshotBlobNotFoundError(unkept[0], len(unkept))
    sizes = await service.blobs.stored_sizes(asked.sha256)
    gone = [sha256 for sha256 in dict.fromkeys(asked.sha256) if sha256 not in sizes]
    if gone:  # listed, but no longer stored
        raise SnapshotBlobNotFoundError(gone[0], len(gone))
    return pack_response(service.blobs, [(sha256, sizes[sha256]) for sha256 in asked.sha256])
