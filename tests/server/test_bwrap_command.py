"""What a custom container command makes visible in its sandbox (no sandbox started)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sandstream.server import LaunchError
from sandstream.server.runner.bwrap import BwrapLauncher


def _binds(argv: list[str], **options: object) -> tuple[list[str], list[str]]:
    """(the read-only binds, the command run inside) of one sandbox's bwrap line."""
    line = BwrapLauncher(argv=argv, **options).command("turn_x", info_fd=7, block_fd=8)  # type: ignore[arg-type]
    binds = [line[i + 1] for i, arg in enumerate(line) if arg == "--ro-bind"]
    return binds, line[line.index("--") + 1 :]


def test_a_venv_script_and_its_arguments_are_bound_wherever_they_live(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(sys.executable)}\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    tool = tmp_path / "tools" / "run.sh"
    tool.parent.mkdir()
    tool.write_text(f"#!{venv / 'bin' / 'python'}\n")
    data = tmp_path / "input.json"
    data.write_text("{}")
    binds, inside = _binds([str(tool), "--flag", str(data), "not-a-path"])
    assert {str(venv), str(tool), str(data)} <= set(binds)
    assert inside == [str(tool), "--flag", str(data), "not-a-path"]
    # the interpreter the venv's python points at, with its prefix
    assert any(os.path.realpath(sys.executable).startswith(b) for b in binds)


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "container.sh").write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    binds, inside = _binds(["sh", "container.sh"])
    assert inside[1:] == [str(tmp_path / "container.sh")]
    assert str(tmp_path / "container.sh") in binds


def test_the_hidden_data_dir_is_never_bound_and_is_covered(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "file").write_text("x")
    binds, _ = _binds(
        ["sh", str(data / "file")], hidden_paths=[str(data)], extra_paths=[str(tmp_path)]
    )
    assert str(data / "file") not in binds and str(tmp_path) in binds
    line = BwrapLauncher(
        argv=["sh"], hidden_paths=[str(data)], extra_paths=[str(tmp_path)]
    ).command("turn_x", info_fd=7, block_fd=8)
    assert line[line.index("--tmpfs", line.index(str(tmp_path))) + 1] == str(data)


def test_a_missing_program_is_a_launch_error() -> None:
    with pytest.raises(LaunchError, match="no-such-program"):
        _binds(["no-such-program"])
