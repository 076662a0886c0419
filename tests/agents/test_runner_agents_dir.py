"""The runner shows the agents dir read-only in every sandbox and names it there."""

from __future__ import annotations

from pathlib import Path

from sandstream.server.cli import build_runner_parser, launcher_from_args
from sandstream.server.runner.bwrap import BwrapLauncher
from sandstream.server.runner.launcher import LocalSubprocessLauncher


def test_the_agents_dir_is_bound_read_only_and_named(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    parser = build_runner_parser()
    launcher = launcher_from_args(
        parser.parse_args(["--sandbox", "bwrap", "--agents-dir", str(agents)])
    )
    assert isinstance(launcher, BwrapLauncher)
    command = launcher.command("t1", info_fd=3, block_fd=4)
    binds = [command[i + 1 : i + 3] for i, arg in enumerate(command) if arg == "--ro-bind"]
    assert [str(agents), str(agents)] in binds
    assert launcher.sandbox_env("t1")["SANDSTREAM_AGENTS_DIR"] == str(agents)

    local = launcher_from_args(
        parser.parse_args(["--sandbox", "local", "--agents-dir", str(agents)])
    )
    assert isinstance(local, LocalSubprocessLauncher)
    assert local.env["SANDSTREAM_AGENTS_DIR"] == str(agents)


def test_a_missing_agents_dir_is_named_but_not_bound(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    launcher = launcher_from_args(
        build_runner_parser().parse_args(["--sandbox", "bwrap", "--agents-dir", str(missing)])
    )
    assert isinstance(launcher, BwrapLauncher)
    command = launcher.command("t1", info_fd=3, block_fd=4)
    binds = [command[i + 1] for i, arg in enumerate(command) if arg == "--ro-bind"]
    assert str(missing) not in binds
    assert launcher.sandbox_env("t1")["SANDSTREAM_AGENTS_DIR"] == str(missing)
