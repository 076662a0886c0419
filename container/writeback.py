"""Writeback: POST the files of the run's output dir to ``{agent_url}/results``.

Called only after the agent completed, so a cancelled or failed run never redeems its
upload token. One ``multipart/form-data`` request, a ``files`` part per file named by its
path relative to the output dir; symlinks and special files are skipped (logged).
Raises :class:`~.errors.WritebackError` (``writeback_failed``) when the token is refused,
the workspace is unreachable or answers non-2xx, or the output exceeds the limits.
Cancellation propagates.
"""

from __future__ import annotations

import mimetypes
import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from sandstream.core.errors import JSONInputError
from sandstream.core.json_input import decode_json
from sandstream.core.schemas import ResultsReceipt

from .bootstrap import workspace_url
from .errors import WritebackError
from .http import HttpSettings, body_excerpt, send_with_retries
from .output import Emitter

__all__ = ["MAX_FILES", "MAX_TOTAL_BYTES", "OutputFile", "collect_output", "write_back"]

MAX_FILES: Final = 1000
MAX_TOTAL_BYTES: Final = 512 * 1024 * 1024


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


async def write_back(
    client: httpx.AsyncClient,
    settings: HttpSettings,
    *,
    agent_url: str,
    token: str | None,
    output_dir: Path,
    emitter: Emitter,
) -> int:
    """Upload the output dir's files; return how many were written back."""
    files = collect_output(output_dir, emitter)
    if not files:
        emitter.log("debug", "writeback: no output files")
        return 0
    if not token:
        emitter.log(
            "info", f"writeback: {len(files)} output file(s) not written back (no upload token)"
        )
        return 0
    total = sum(item.size for item in files)
    if len(files) > MAX_FILES:
        raise WritebackError(f"{len(files)} output files (limit {MAX_FILES})")
    if total > MAX_TOTAL_BYTES:
        raise WritebackError(f"{total} bytes of output (limit {MAX_TOTAL_BYTES})")
    url = workspace_url(agent_url, "results")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
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
            response = await send_with_retries(client, settings, build)
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
