"""Attachments: the turn's files, downloaded into the work dir before the setup script.

``/config`` names them (:class:`~sandstream.core.schemas.Attachment`); each is fetched
with the run token and written at its ``attachments/<name>`` path in the work dir, in one
step, ``download_attachments``. Bounds and checks: docs/container.md, "Lifecycle".

Bad input (a bound, size, hash or path check fails) or a failed fetch raises
:class:`~.errors.AttachmentsError` (``attachments_failed``) after closing the step as
failed and removing the partial file. Cancellation closes the step as failed
(``cancelled``), removes the partial file and propagates.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final

import httpx
import trio

from sandstream.core import ATTACHMENTS_DIR, Attachment, Step, sanitize_name

from .bootstrap import workspace_url
from .errors import AttachmentsError, OutputClosedError
from .http import HttpSettings, body_excerpt, send_callback
from .output import Emitter, new_step_id

__all__ = [
    "MAX_FILES",
    "MAX_TOTAL_BYTES",
    "STEP_NAME",
    "attachments_note",
    "download_attachments",
    "target_path",
]

MAX_FILES: Final = 100
MAX_TOTAL_BYTES: Final = 512 * 1024 * 1024
STEP_NAME: Final = "download_attachments"


def attachments_note(attachments: Sequence[Attachment]) -> str:
    """A sentence naming the attached files for an agent's prompt (``""``: none)."""
    if not attachments:
        return ""
    listed = ", ".join(f"{a.path} ({a.size} bytes, {a.content_type})" for a in attachments)
    return f"The user attached these files, in the work dir: {listed}."


def target_path(work_dir: Path, attachment: Attachment, seen: set[str]) -> Path:
    """Where ``attachment`` goes; raises AttachmentsError for a path that is not
    ``attachments/<sanitized name>`` or that another attachment already takes."""
    parts = PurePosixPath(attachment.path).parts
    if (
        len(parts) != 2
        or parts[0] != ATTACHMENTS_DIR
        or sanitize_name(parts[1]) != parts[1]
        or attachment.path != f"{ATTACHMENTS_DIR}/{parts[1]}"
    ):
        raise AttachmentsError(f"unsafe attachment path {attachment.path!r}")
    if attachment.path in seen:
        raise AttachmentsError(f"two attachments share the path {attachment.path!r}")
    seen.add(attachment.path)
    return work_dir / ATTACHMENTS_DIR / parts[1]


def _check_bounds(attachments: Sequence[Attachment]) -> None:
    total = sum(a.size for a in attachments)
    if len(attachments) > MAX_FILES:
        raise AttachmentsError(f"{len(attachments)} attachments (limit {MAX_FILES})")
    if total > MAX_TOTAL_BYTES:
        raise AttachmentsError(f"{total} bytes of attachments (limit {MAX_TOTAL_BYTES})")


async def download_attachments(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    *,
    agent_url: str,
    token: str,
    attachments: Sequence[Attachment],
    work_dir: Path,
    emitter: Emitter,
) -> list[Path]:
    """Download every attachment into ``work_dir`` as one step; return the files written."""
    if not attachments:
        return []
    step_id = new_step_id()
    emitter.emit(
        Step(
            id=step_id,
            name=STEP_NAME,
            status="running",
            args={"files": [a.path for a in attachments]},
        )
    )
    started = trio.current_time()
    written: list[Path] = []
    try:
        _check_bounds(attachments)
        seen: set[str] = set()
        targets = [target_path(work_dir, a, seen) for a in attachments]
        folder = work_dir / ATTACHMENTS_DIR
        folder.mkdir(exist_ok=True)
        if folder.is_symlink() or not folder.is_dir():
            raise AttachmentsError(f"{ATTACHMENTS_DIR}/ in the work dir is not a folder")
        for attachment, target in zip(attachments, targets, strict=True):
            await _download(client, settings, agent_url, token, attachment, target)
            written.append(target)
    except BaseException as exc:
        if isinstance(exc, AttachmentsError):
            reason = exc.message
        elif isinstance(exc, trio.Cancelled):
            reason = "cancelled"
        else:
            reason = f"interrupted: {exc!r}"
        with contextlib.suppress(OutputClosedError):
            _finish(emitter, step_id, started, error=reason)
        raise
    result = {"files": [{"path": a.path, "size": a.size} for a in attachments]}
    _finish(emitter, step_id, started, result=result)
    return written


def _finish(
    emitter: Emitter, step_id: str, started: float, *, result: Any = None, error: str | None = None
) -> None:
    duration_ms = round((trio.current_time() - started) * 1000)
    if error is None:
        step: Step[Any] = Step(
            id=step_id, name=STEP_NAME, status="succeeded", result=result, duration_ms=duration_ms
        )
    else:
        step = Step(
            id=step_id, name=STEP_NAME, status="failed", error=error, duration_ms=duration_ms
        )
    emitter.emit(step)


async def _download(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    agent_url: str,
    token: str,
    attachment: Attachment,
    target: Path,
) -> None:
    url = workspace_url(agent_url, f"attachments/{attachment.id}")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        response = await send_callback(
            client, settings, lambda: client.build_request("GET", url, headers=headers), stream=True
        )
    except httpx.HTTPError as exc:
        raise AttachmentsError(f"downloading {attachment.path} failed: {exc!r}") from exc
    try:
        if response.status_code in (401, 403):
            raise AttachmentsError(
                f"workspace refused the run token for {attachment.path} ({response.status_code})"
            )
        if not response.is_success:
            await response.aread()
            raise AttachmentsError(
                f"downloading {attachment.path} answered {response.status_code}: "
                f"{body_excerpt(response)}"
            )
        await _write(response, attachment, target)
    finally:
        await response.aclose()


async def _write(response: httpx.Response, attachment: Attachment, target: Path) -> None:
    """Stream the body into ``target`` (created exclusively, in place of a file an
    earlier turn of the chat left there); remove it on any failure."""
    try:
        if target.is_symlink() or target.is_file():
            target.unlink()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise AttachmentsError(f"cannot create {attachment.path}: {exc.strerror}") from exc
    digest = hashlib.sha256()
    size = 0
    try:
        async with trio.wrap_file(os.fdopen(fd, "wb")) as out:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > attachment.size:
                    raise AttachmentsError(
                        f"{attachment.path} is longer than its announced {attachment.size} bytes"
                    )
                digest.update(chunk)
                await out.write(chunk)
        if size != attachment.size:
            raise AttachmentsError(
                f"{attachment.path}: got {size} of its announced {attachment.size} bytes"
            )
        if attachment.sha256 is not None and digest.hexdigest() != attachment.sha256:
            raise AttachmentsError(f"{attachment.path}: its SHA-256 does not match")
    except httpx.HTTPError as exc:
        with contextlib.suppress(OSError):
            target.unlink()
        raise AttachmentsError(f"downloading {attachment.path} failed: {exc!r}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise
