"""The dispatch on stdin (or --dispatch FILE): invalid input ends with one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.support.workspace import WorkspaceServer
from tests.support.container import run_container, run_in_process


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        (b"", "empty dispatch"),
        (b"{not json", "malformed"),
        (b"[]", "Expected `object`"),
        (json.dumps({"agent_url": "http://x", "otp_setup": "a"}).encode(), "otp_run"),
        (
            json.dumps(
                {"agent_url": "ftp://x", "otp_setup": "a", "otp_run": "b", "prompt": "p"}
            ).encode(),
            "agent_url",
        ),
        (
            json.dumps(
                {"agent_url": "http://x", "otp_setup": "", "otp_run": "b", "prompt": "p"}
            ).encode(),
            "otp_setup",
        ),
    ],
)
async def test_invalid_dispatch_is_one_bad_dispatch_error(stdin: bytes, needle: str) -> None:
    run = await run_in_process(stdin)
    assert run.returncode == 2, run
    assert run.terminal["type"] == "error"
    assert run.terminal["code"] == "bad_dispatch"
    assert needle in run.terminal["message"]
    assert len(run.lines) == 1


async def test_invalid_dispatch_exits_2() -> None:
    run = await run_container(b"{not json")
    assert run.returncode == 2, run
    assert run.terminal["code"] == "bad_dispatch"
    assert run.stderr == b""


async def test_dispatch_from_file(workspace: WorkspaceServer, tmp_path: Path) -> None:
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(workspace.mint_dispatch("from a file")))
    run = await run_container(b"ignored", "--dispatch", str(path))
    assert run.returncode == 0, run
    assert run.terminal == {"type": "result", "message": "Done.", "ts": run.terminal["ts"]}


async def test_unreadable_dispatch_file(tmp_path: Path) -> None:
    run = await run_container(b"", "--dispatch", str(tmp_path / "missing.json"))
    assert run.returncode == 2
    assert run.terminal["code"] == "bad_dispatch"
    assert "cannot read" in run.terminal["message"]


async def test_unknown_dispatch_fields_are_ignored(workspace: WorkspaceServer) -> None:
    dispatch = {**workspace.mint_dispatch(), "future_field": {"x": 1}}
    run = await run_in_process(dispatch)
    assert run.returncode == 0, run


def _dispatch_with_raw(workspace: WorkspaceServer, field: str, raw: bytes) -> bytes:
    """A valid dispatch with ``field`` set to ``raw``, spliced in as bytes."""
    head = json.dumps({**workspace.mint_dispatch(), field: "@@"}).encode()
    return head.replace(b'"@@"', raw)


_DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("field", "raw", "needle"),
    [
        ("prompt", b'"caf\xe9"', "invalid UTF-8: byte 0xe9"),  # Latin-1, not UTF-8
        ("prompt", b'"\xed\xa0\x80"', "invalid UTF-8: byte 0xed"),  # an encoded surrogate
        ("future_field", b'"\xff"', "invalid UTF-8: byte 0xff"),  # in a field that is ignored
        ("future_field", _DEEP, "JSON nested too deeply"),
    ],
)
@pytest.mark.parametrize("source", ["stdin", "file"])
async def test_undecodable_dispatch_is_bad_dispatch_exit_2(
    workspace: WorkspaceServer, tmp_path: Path, field: str, raw: bytes, needle: str, source: str
) -> None:
    data = _dispatch_with_raw(workspace, field, raw)
    if source == "stdin":
        run = await run_container(data)
    else:
        path = tmp_path / "dispatch.json"
        path.write_bytes(data)
        run = await run_container(b"", "--dispatch", str(path))
    assert run.returncode == 2, run
    assert run.terminal["code"] == "bad_dispatch"
    assert run.terminal["message"].startswith("invalid dispatch: ")
    assert needle in run.terminal["message"]
    assert len(run.lines) == 1
    assert run.stderr == b""  # no traceback: not an internal error
    assert not workspace.requests("env")  # nothing was redeemed
