"""Attachment paths and bounds the container checks before it fetches or writes anything.

The delivery itself (a real chat server, real containers) is tested in
``tests/chat/test_files.py`` and ``tests/chat/test_callbacks.py``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from sandstream.container.attachments import MAX_FILES, download_attachments
from sandstream.container.errors import AttachmentsError
from sandstream.container.http import HttpSettings, new_client
from sandstream.container.output import Emitter
from sandstream.core.schemas import Attachment


def _attachment(path: str, size: int = 1, file_id: str = "file_1") -> Attachment:
    return Attachment(id=file_id, path=path, size=size)


@pytest.mark.parametrize(
    ("attachments", "reason"),
    [
        ([_attachment("../escape.txt")], "unsafe attachment path '../escape.txt'"),
        ([_attachment("attachments/../../x")], "unsafe attachment path"),
        ([_attachment("/etc/passwd")], "unsafe attachment path"),
        ([_attachment("output/a.txt")], "unsafe attachment path"),
        ([_attachment("attachments/sub/a.txt")], "unsafe attachment path"),
        ([_attachment("attachments/a\x1b.txt")], "unsafe attachment path"),
        (
            [_attachment("attachments/a.txt"), _attachment("attachments/a.txt", file_id="f2")],
            "share",
        ),
        ([_attachment("attachments/big", size=600 * 1024 * 1024)], "bytes of attachments"),
        (
            [_attachment(f"attachments/{n}", file_id=f"f{n}") for n in range(MAX_FILES + 1)],
            "attachments (limit",
        ),
    ],
)
async def test_unsafe_paths_and_bounds_fail_the_step_before_any_request(
    tmp_path: Path, attachments: list[Attachment], reason: str
) -> None:
    lines = bytearray()
    emitter = Emitter(lines.extend)
    settings = HttpSettings(callback_retry_sec=0)
    async with new_client(settings) as client:  # a request would fail to connect: port 9
        with pytest.raises(AttachmentsError) as raised:
            await download_attachments(
                client,
                settings,
                agent_url="http://127.0.0.1:9/api/sandbox/s",
                token="t",
                attachments=attachments,
                work_dir=tmp_path,
                emitter=emitter,
            )
    assert reason in raised.value.message  # not "downloading … failed": nothing was sent
    assert raised.value.code == "attachments_failed"
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "attachments"])
    running, failed = [msgspec.json.decode(line) for line in lines.splitlines()]
    assert running["status"] == "running" and running["name"] == "download_attachments"
    assert failed["status"] == "failed" and failed["error"] == raised.value.message
