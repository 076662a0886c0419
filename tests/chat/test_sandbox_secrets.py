"""The chat backend's secrets stay out of its sandboxes (issue: a setup script printed
both tokens into the run's own output)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from sandstream.server import BwrapLauncher
from sandstream.server.cli.serve import _plan, build_serve_parser
from tests.chat.harness import API_TOKEN, RUNNER_TOKEN, scripted, shell, start_chat_server


async def test_a_turn_cannot_read_the_data_dir_or_the_server_environment(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDSTREAM_API_TOKEN", API_TOKEN)
    monkeypatch.setenv("SANDSTREAM_RUNNER_TOKEN", RUNNER_TOKEN)
    (tmp_path / "api-token").write_text(API_TOKEN)
    (tmp_path / "runner-token").write_text(RUNNER_TOKEN)
    probe = (
        f"cat {tmp_path}/api-token {tmp_path}/runner-token {tmp_path}/chat.sqlite3;"
        f" ls {tmp_path}; env; echo probed"
    )
    server = await start_chat_server(nursery, tmp_path, agent=scripted(shell(probe)))
    assert (tmp_path / "chat.sqlite3").exists()
    run = await server.turn("probe")
    assert run.status == 200 and run.kinds[-2:] == ["result", "done"]
    [step] = [s for s in run.data("step") if s["status"] == "succeeded"]
    stdout, stderr = step["result"]["stdout"], step["result"]["stderr"]
    assert "probed" in stdout and "No such file" in stderr
    for secret in (API_TOKEN, RUNNER_TOKEN, "SANDSTREAM_API_TOKEN", "SANDSTREAM_RUNNER_TOKEN"):
        assert secret not in stdout and secret.encode() not in run.body


def test_serve_hides_its_data_dir_from_bwrap_sandboxes(tmp_path: Path) -> None:
    args = build_serve_parser({}).parse_args(["--data-dir", str(tmp_path / "data")])
    plan = _plan(args, {"SANDSTREAM_API_TOKEN": "x" * 32})
    assert isinstance(plan.launcher, BwrapLauncher)
    assert list(plan.launcher.hidden_paths) == [str((tmp_path / "data").resolve())]
