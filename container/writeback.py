"""Writeback: POST the files of the run's output dir to ``{agent_url}/results``.

Called only after the agent completed, so a cancelled or failed run never redeems its
upload token. One ``multipart/form-data`` request, a ``files`` part per file named by its
path relative to the output dir; symlinks and special files are skipped (logged). The
request carries an ``Idempotency-Key`` and is retried like every callback
(:func:`~.http.send_callback`): the workspace stores the files of a repeated upload once.

A writeback that fails (the token refused, the workspace unreachable or answering
non-2xx after the retries, the output over the limits, a file unreadable) does not
fail the run: it is one failed ``write_back`` step whose ``args`` list the files and
whose ``error`` says they were not written back and why, and a ``warn`` log; the
agent's answer stands. Cancellation propagates.
"""

from __future__ import annotations

import mimetypes
import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import trio

from sandstream.core import JSONInputError, ResultsReceipt, Step, decode_json

from .bootstrap import workspace_url
from .errors import WritebackError
from .http import IDEMPOTENCY_HEADER, HttpSettings, body_excerpt, idempotency_key, send_callback
from .output import Emitter, new_step_id

__all__ = [
    "MAX_FILES",
    "MAX_TOTAL_BYTES",
    "STEP_NAME",
    "OutputFile",
    "collect_output",
    "not_written_message",
    "write_back",
]

MAX_FILES: Final = 1000
MAX_TOTAL_BYTES: Final = 512 * 1024 * 1024
STEP_NAME: Final = "write_back"
_NAMED_FILES: Final = 20
"""How many of the files not written back a failure's message names."""


@dataclass(frozen=True)
class OutputFile:
    """A regular file of the output dir, by its relative POSIX path."""

    name: str
    path: Path
    size: int


def collect_output(output_dir: Path, emitter: Emitter | None = None) -> list[OutputFile]:
    """The regular files under ``output_dir``, sorted by name; symlinks are skipped."""
    files: list[OutputFile] = []
    if not output_dir.is_dir():
        return files
    for folder, dirs, names in os.walk(output_dir):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            rel = path.relative_to(output_dir).as_posix()
            if path.is_symlink() or not path.is_file():
                if emitter is not None:
                    emitter.log("warn", f"writeback: skipping {rel} (not a regular file)")
                continue
            files.append(OutputFile(name=rel, path=path, size=path.stat().st_size))
    return files


def not_written_message(names: list[str], reason: str) -> str:
    """``N file(s) not written back (a, b, … and K more): <reason>``."""
    listed = ", ".join(names[:_NAMED_FILES])
    if len(names) > _NAMED_FILES:
        listed += f" and {len(names) - _NAMED_FILES} more"
    return f"{len(names)} file(s) not written back ({listed}): {reason}"


async def write_back(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    *,
    agent_url: str,
    token: str | None,
    output_dir: Path,
    emitter: Emitter,
) -> int:
    """Upload the output dir's files; return how many were written back (0 when the
    upload failed: that is a failed ``write_back`` step and a ``warn`` log)."""
    files = collect_output(output_dir, emitter)
    if not files:
        emitter.log("debug", "writeback: no output files")
        return 0
    if not token:
        emitter.log(
            "info", f"writeback: {len(files)} output file(s) not written back (no upload token)"
        )
        return 0
    started = trio.current_time()
    try:
        return await _upload(client, settings, agent_url, token, files, emitter)
    except WritebackError as exc:
        names = [item.name for item in files]
        message = not_written_message(names, str(exc))
        step_id = new_step_id()
        emitter.emit_many(
            (
                Step(
                    id=step_id,
                    name=STEP_NAME,
                    status="running",
                    args={"files": names},
                ),
                Step(
                    id=step_id,
                    name=STEP_NAME,
                    status="failed",
                    error=message,
                    duration_ms=round((trio.current_time() - started) * 1000),
                ),
            )
        )
        emitter.log("warn", f"writeback: {message}")
        return 0


async def _upload(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    agent_url: str,
    token: str,
    files: list[OutputFile],
    emitter: Emitter,
) -> int:
    """POST ``files``; raise :class:`WritebackError` when they were not stored."""
    total = sum(item.size for item in files)
    if len(files) > MAX_FILES:
        raise WritebackError(f"{len(files)} output files (limit {MAX_FILES})")
    if total > MAX_TOTAL_BYTES:
        raise WritebackError(f"{total} bytes of output (limit {MAX_TOTAL_BYTES})")
    url = workspace_url(agent_url, "results")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        IDEMPOTENCY_HEADER: idempotency_key(),
    }
    with ExitStack() as stack:

        def build() -> httpx.Request:
            stack.close()
            parts = [
                (
                    "files",
                    (
                        item.name,
                        stack.enter_context(item.path.open("rb")),
                        mimetypes.guess_type(item.name)[0] or "application/octet-stream",
                    ),
                )
                for item in files
            ]
            return client.build_request("POST", url, headers=headers, files=parts)

        try:
            response = await send_callback(client, settings, build)
        except httpx.HTTPError as exc:
            raise WritebackError(f"POST /results failed: {exc!r}") from exc
        except OSError as exc:
            raise WritebackError(f"cannot read output file: {exc}") from exc
    if response.status_code in (401, 403):
        raise WritebackError(
            f"workspace refused the upload token ({response.status_code}): "
            "wrong, expired or already used"
        )
    if not response.is_success:
        raise WritebackError(
            f"POST /results answered {response.status_code}: {body_excerpt(response)}"
        )
    stored = len(files)
    if response.content.strip():
        try:
            receipt = decode_json(response.content, ResultsReceipt)
            stored = len(receipt.files) or stored
        except JSONInputError:
            emitter.log("warn", "writeback: unreadable /results answer ignored")
    emitter.log("info", f"writeback: {stored} file(s), {total} bytes written back")
    return stored
