"""The chat's workspace across sandboxes: restored before a turn, saved after it.

A chat's turn finds what its previous turn left — the work dir and the agent's home,
as the snapshot ``/config`` names (:class:`~sandstream.core.SnapshotManifest`) — and
leaves its own for the next, whatever way it ended. :func:`restore_workspace` asks
the workspace for the snapshot's blobs in one blob pack (``POST
{agent_url}/snapshot/restore``, run token) and restores them
(:func:`~.snapshot_restore.restore_snapshot`: whole, or not at all). :func:`save_workspace`
first ends every process still below the container (nothing the agent ran can change
a file afterwards), takes the snapshot, asks which blobs the workspace lacks (``POST
…/snapshot/missing``), sends those (``POST …/snapshot/blobs``) and stores the manifest
(``PUT …/snapshot``), all with the upload token. Not saved: ``output/`` (its files
are written back to the chat instead, every turn) and the files the container writes
anew every turn (an agent's config files, which may hold a provider key).

Neither ever fails a turn: a snapshot that cannot be restored leaves the turn to start
fresh and one that cannot be saved leaves the next turn the last one saved, each with
a ``warn`` line saying so. Cancellation propagates (a restore cancelled half-way
leaves nothing behind).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import Final

import httpx
import msgspec

from sandstream.core import (
    BlobHashes,
    ConfigResponse,
    Dispatch,
    MissingBlobs,
    SnapshotManifest,
)

from .bootstrap import workspace_url
from .errors import SnapshotError
from .http import HttpSettings, body_excerpt, send_callback
from .output import Emitter
from .snapshot_restore import restore_snapshot
from .snapshots import TakenSnapshot, pack_blobs, take_snapshot
from .strays import end_descendants

__all__ = ["OUTPUT_ENTRY", "restore_workspace", "save_workspace"]

OUTPUT_ENTRY: Final = "work/output"
"""The snapshot path of the output dir, which is written back instead of saved."""


class _Refused(Exception):
    """A snapshot callback answered with an error (its message says which)."""


async def restore_workspace(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    dispatch: Dispatch,
    config: ConfigResponse,
    roots: Mapping[str, Path],
    emitter: Emitter,
) -> None:
    """Restore ``config.snapshot`` into ``roots`` (empty), or log why the turn starts
    fresh."""
    manifest = config.snapshot
    if manifest is None:
        return
    url = workspace_url(dispatch.agent_url, "snapshot/restore")
    body = msgspec.json.encode(BlobHashes(sha256=sorted(manifest.hashes())))
    headers = {"Authorization": f"Bearer {dispatch.otp_run}", "Content-Type": "application/json"}
    try:
        response = await send_callback(
            client,
            settings,
            lambda: client.build_request("POST", url, headers=headers, content=body),
            stream=True,
        )
        try:
            if not response.is_success:
                await response.aread()
                raise _Refused(f"{response.status_code}: {body_excerpt(response)}")
            files = await restore_snapshot(
                manifest, roots, response.aiter_raw(), max_blob_bytes=manifest.total_bytes
            )
        finally:
            await response.aclose()
    except (SnapshotError, _Refused, httpx.HTTPError) as exc:
        emitter.log(
            "warn",
            f"workspace: the chat's saved workspace could not be restored ({_reason(exc)}); "
            "this turn starts with an empty one",
        )
        return
    emitter.log(
        "info",
        f"workspace: restored {files} file(s), {manifest.total_bytes} bytes, "
        "from the chat's last turn",
    )


async def save_workspace(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    dispatch: Dispatch,
    config: ConfigResponse,
    roots: Mapping[str, Path],
    emitter: Emitter,
    unsaved: Collection[Path] = (),
) -> None:
    """Save ``roots`` as the chat's latest snapshot, less the files ``unsaved``, if the
    workspace asked for one (``config.snapshot_max_bytes``) and the upload token is
    still there."""
    bound = config.snapshot_max_bytes
    token = dispatch.otp_upload
    if not bound or not token:
        return
    await end_descendants()
    try:
        left_out = {OUTPUT_ENTRY, *_entry_paths(unsaved, roots)}
        taken = _leave_out(await take_snapshot(roots, max_bytes=bound), left_out)
        for path in taken.skipped:
            emitter.log("warn", f"workspace: {path} not saved (not a file, dir or inner link)")
        new = await _send(client, settings, dispatch.agent_url, token, taken)
    except (SnapshotError, _Refused, httpx.HTTPError) as exc:
        emitter.log(
            "warn",
            f"workspace: not saved ({_reason(exc)}); the chat's next turn starts from "
            "the last workspace saved",
        )
        return
    manifest = taken.manifest
    emitter.log(
        "info",
        f"workspace: saved {len(manifest.files)} file(s), {manifest.total_bytes} bytes ({new} new)",
    )


async def _send(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    agent_url: str,
    token: str,
    taken: TakenSnapshot,
) -> int:
    """Store ``taken``: its missing blobs, then its manifest; the new bytes sent."""
    auth = {"Authorization": f"Bearer {token}"}
    hashes = sorted(taken.paths)
    answer = await _call(
        client, settings, "POST", agent_url, "snapshot/missing", auth, BlobHashes(sha256=hashes)
    )
    missing = msgspec.json.decode(answer, type=MissingBlobs).missing
    unknown = set(missing) - taken.paths.keys()
    if unknown:
        raise _Refused(f"the workspace asked for {len(unknown)} blob(s) not in the snapshot")
    sizes = {entry.sha256: entry.size for entry in taken.manifest.files}
    if missing:
        url = workspace_url(agent_url, "snapshot/blobs")

        def blobs() -> httpx.Request:
            body: AsyncIterator[bytes] = pack_blobs(taken, missing)
            return client.build_request("POST", url, headers=auth, content=body)

        _check(await send_callback(client, settings, blobs), "POST /snapshot/blobs")
    await _call(client, settings, "PUT", agent_url, "snapshot", auth, taken.manifest)
    return sum(sizes[sha256] for sha256 in missing)


async def _call(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    method: str,
    agent_url: str,
    route: str,
    auth: dict[str, str],
    value: object,
) -> bytes:
    """Send ``value`` as JSON to ``route``; the answer's body (raises :class:`_Refused`
    for an error answer)."""
    url = workspace_url(agent_url, route)
    headers = {**auth, "Content-Type": "application/json"}
    body = msgspec.json.encode(value)
    response = await send_callback(
        client, settings, lambda: client.build_request(method, url, headers=headers, content=body)
    )
    _check(response, f"{method} /{route}")
    return response.content


def _check(response: httpx.Response, what: str) -> None:
    if not response.is_success:
        raise _Refused(f"{what} answered {response.status_code}: {body_excerpt(response)}")


def _entry_paths(paths: Collection[Path], roots: Mapping[str, Path]) -> set[str]:
    """The snapshot paths of ``paths`` (those under one of ``roots``)."""
    names = set()
    for path in paths:
        for name, root in roots.items():
            if path.is_relative_to(root):
                names.add(f"{name}/{path.relative_to(root).as_posix()}")
    return names


def _leave_out(taken: TakenSnapshot, names: set[str]) -> TakenSnapshot:
    """``taken`` less the entries ``names`` and everything below them (its skipped
    entries kept, for the warning)."""
    entries = [
        entry
        for entry in taken.manifest.entries
        if not any(entry.path == name or entry.path.startswith(name + "/") for name in names)
    ]
    manifest = SnapshotManifest(entries)
    kept = manifest.hashes()
    paths = {sha256: path for sha256, path in taken.paths.items() if sha256 in kept}
    return TakenSnapshot(manifest, paths, taken.skipped)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
