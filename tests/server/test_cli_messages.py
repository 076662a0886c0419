"""What a newcomer's mistakes on the command line get: one clear line, never a
traceback — run through the installed ``sandstream`` script, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandstream.server.cli.options import NETWORK_OFF_REFUSED
from tests.core.helpers import line, step

SCRIPT = str(Path(sys.executable).parent / "sandstream")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


@pytest.mark.parametrize("command", ["serve", "runner"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [("99999", "a port is 0 to 65535, got 99999"), ("http", "not a port number: 'http'")],
)
def test_a_bad_port_is_a_usage_line_and_a_reason(
    tmp_path: Path, command: str, value: str, reason: str
) -> None:
    done = _run(command, "--port", value, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"usage: sandstream {command} [OPTION ...] (--help lists them)",
        f"sandstream {command}: error: argument --port: {reason}",
    ]


@pytest.mark.parametrize("command", ["serve", "runner"])
def test_sandbox_network_off_with_the_default_container_is_refused_at_start(
    tmp_path: Path, command: str
) -> None:
    args = ["--sandbox", "bwrap", "--sandbox-network", "off"]
    if command == "runner":
        args += ["--insecure-no-token"]
    done = _run(command, *args, "--port", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"sandstream {command}: {NETWORK_OFF_REFUSED}"]
    assert "listening" not in done.stdout


def test_version_and_a_non_number_for_a_count(tmp_path: Path) -> None:
    version = _run("--version", cwd=tmp_path)
    count = _run("convert", "--max-line-bytes", "abc", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("sandstream 0.")
    assert count.returncode == 2
    assert count.stderr.splitlines()[-1] == (
        "sandstream convert: error: argument --max-line-bytes: not a whole number: 'abc'"
    )


def test_validate_says_when_it_kept_only_the_first_steps(tmp_path: Path) -> None:
    run = tmp_path / "run.ndjson"
    run.write_bytes(
        b"".join(step(f"s{i}", "succeeded") for i in range(2_500))
        + line(type="result", message="ok")
    )
    one = tmp_path / "one.ndjson"
    one.write_bytes(step("s", "succeeded") + line(type="result", message="ok"))
    capped = _run("validate", str(run), cwd=tmp_path)
    single = _run("validate", str(one), cwd=tmp_path)
    assert capped.returncode == 0, capped.stdout
    assert f"{run}: 2501 lines, 2500 steps (the first 2000 kept: 2000 succeeded; 500 more" in (
        capped.stdout
    )
    assert "at most 2000 steps" in capped.stdout
    assert single.stdout.startswith(f"{one}: 2 lines, 1 step (1 succeeded), 0 logs,")
