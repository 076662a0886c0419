"""``sandstream runner`` as a real process: token policy, serving, SIGTERM shutdown."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys

import httpx
import psutil
import pytest
import trio

from benchmarks.support.runner_process import start_runner_process
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import BwrapLauncher, LocalSubprocessLauncher, ResourceLimits
from sandstream.server.cli import build_runner_parser, launcher_from_args
from sandstream.server.http.auth import TOKEN_ENV
from tests.server.harness import Reader, parse_stream, scripted, shell, wait_gone

CLI = [sys.executable, "-m", "sandstream.server.cli", "runner"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env.update(extra)
    return env


async def test_it_refuses_to_start_without_a_token() -> None:
    result = await trio.run_process(
        [*CLI, "--port", "0"], env=_env(), capture_stderr=True, check=False
    )
    assert result.returncode == 2
    assert TOKEN_ENV.encode() in result.stderr
    assert b"--insecure-no-token" in result.stderr


async def test_it_serves_and_shuts_down_on_sigterm(workspace: WorkspaceServer) -> None:
    async with trio.open_nursery() as nursery:
        args = ("--container-stderr", "discard", "--kill-grace", "2")
        runner = await start_runner_process(nursery, *args, token="cli-token", env=_env())
        workspace.config = scripted(shell("sleep 312"))
        async with (
            httpx.AsyncClient(base_url=runner.url, timeout=30) as client,
            client.stream(
                "POST",
                "/stream",
                json=workspace.mint_dispatch(),
                headers={"Authorization": "Bearer cli-token"},
            ) as response,
        ):
            assert response.status_code == 200
            reader = Reader(response)
            await reader.until(lambda line: line.get("status") == "running")
            with trio.fail_after(20):
                while not any("sleep 312" in " ".join(c.cmdline()) for c in _kids(runner.pid)):
                    await trio.sleep(0.01)
            pids = [child.pid for child in _kids(runner.pid)]
            runner.process.send_signal(signal.SIGTERM)
            body = await reader.rest()
        with trio.fail_after(30):
            await runner.exited.wait()
    assert runner.process.returncode == 0, "\n".join(runner.stderr)
    lines = parse_stream(body)
    assert (lines[-1]["type"], lines[-1]["code"]) == ("error", "shutdown")
    await wait_gone(None, pids)
    records = runner.records()  # its log is JSON lines: stderr is no terminal
    assert [record["outcome"] for record in records] == ["shutdown"]
    # bwrap is installed, so it is the default sandbox.
    assert [record["container"].split(":")[0] for record in records] == ["bwrap"]


async def test_a_sigterm_as_soon_as_it_listens_shuts_it_down_gracefully() -> None:
    # The signal is sent the moment the runner says where it listens, five times over:
    # it must be caught from before that line, not only once the server is running.
    for _ in range(5):
        async with trio.open_nursery() as nursery:
            runner = await start_runner_process(nursery, token="cli-token", env=_env())
            runner.process.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await runner.exited.wait()
        assert runner.process.returncode == 0, "\n".join(runner.stderr)
        assert any("received SIGTERM: shutting down" in line for line in runner.stderr)


def test_the_sandbox_flags_build_the_launcher(caplog: pytest.LogCaptureFixture) -> None:
    parser = build_runner_parser()
    default = launcher_from_args(parser.parse_args([]))
    assert isinstance(default, BwrapLauncher)
    assert default.network == "isolated" and default.limits == ResourceLimits()
    args = parser.parse_args(
        [
            "--sandbox-network",
            "off",
            "--sandbox-allow",
            "127.0.0.1:11434",
            "--sandbox-allow",
            "[::1]:8081",
            "--memory-limit",
            "512M",
            "--process-limit",
            "none",
            "--cpu-limit",
            "30",
            "--disk-limit",
            "64M",
            "--container-cmd",
            "sh -c true",
        ]
    )
    launcher = launcher_from_args(args, hidden_paths=["/srv/data"])
    assert isinstance(launcher, BwrapLauncher)
    assert launcher.network == "none"  # off: the earlier name of none
    assert [str(endpoint) for endpoint in launcher.allowed] == ["127.0.0.1:11434", "[::1]:8081"]
    assert launcher.limits == ResourceLimits(
        memory_bytes=512 << 20, processes=None, cpu_seconds=30.0, disk_bytes=64 << 20
    )
    assert list(launcher.hidden_paths) == ["/srv/data"]
    assert list(launcher.argv) == ["sh", "-c", "true"]
    with caplog.at_level(logging.WARNING, logger="sandstream.runner"):
        local = launcher_from_args(parser.parse_args(["--sandbox", "local"]))
    assert isinstance(local, LocalSubprocessLauncher)
    assert any("NOT isolated" in record.getMessage() for record in caplog.records)
    assert not any("--sandbox-network host" in record.getMessage() for record in caplog.records)
    with caplog.at_level(logging.WARNING, logger="sandstream.runner"):
        host = launcher_from_args(
            parser.parse_args(["--sandbox", "bwrap", "--sandbox-network", "on"])
        )
    assert isinstance(host, BwrapLauncher) and host.network == "host"
    [warning] = [r for r in caplog.records if "--sandbox-network host" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "loopback" in warning.getMessage()
    sealed = launcher_from_args(
        parser.parse_args(["--sandbox-network", "sealed", "--sandbox-allow", "localhost:11434"])
    )
    assert isinstance(sealed, BwrapLauncher) and sealed.network == "sealed"
    with pytest.raises(ValueError, match="sealed reaches only this host's loopback"):
        launcher_from_args(
            parser.parse_args(["--sandbox-network", "sealed", "--sandbox-allow", "models.lan:80"])
        )
    for network in ("isolated", "sealed", "none"):
        with pytest.raises(ValueError, match="cannot isolate the network"):
            launcher_from_args(
                parser.parse_args(["--sandbox", "local", "--sandbox-network", network])
            )
    ranges = ["--sandbox-allow-range", "10.20.0.0/16", "--sandbox-allow-range", "fd00::/8"]
    isolated = launcher_from_args(parser.parse_args(ranges))
    assert isinstance(isolated, BwrapLauncher)
    assert [str(network) for network in isolated.allowed_ranges] == ["10.20.0.0/16", "fd00::/8"]
    for network in ("sealed", "host", "none"):
        with pytest.raises(ValueError, match="--sandbox-allow-range opens a range"):
            launcher_from_args(parser.parse_args([*ranges, "--sandbox-network", network]))
    with pytest.raises(ValueError, match="cannot isolate the network"):
        launcher_from_args(parser.parse_args([*ranges, "--sandbox", "local"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--sandbox-allow-range", "10.20.0.1/16"])


async def test_a_bad_limit_is_a_usage_error() -> None:
    result = await trio.run_process(
        [*CLI, "--insecure-no-token", "--memory-limit", "lots"],
        env=_env(),
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 2
    assert b"not a size: 'lots'" in result.stderr


def _kids(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


async def test_a_port_already_in_use_is_one_line_and_a_failure() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await trio.run_process(
            [*CLI, "--port", str(port)],
            env=_env(**{TOKEN_ENV: "cli-token"}),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"sandstream runner: 127.0.0.1:{port} is already in use"
    ]
