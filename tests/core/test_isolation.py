"""The core stands alone: importing it loads no async runtime or HTTP stack, and a
core-only install (``pip install .``) runs the core's commands and names the extra
the others need."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a venv and a pip install

FORBIDDEN = ("trio", "quart", "quart_trio", "hypercorn", "httpx", "anyio", "asyncio", "threading")


def test_importing_the_core_loads_none_of_the_server_stack() -> None:
    code = (
        "import sys, sandstream.core, sandstream.core.persistence, "
        "sandstream.core.sse_parser, sandstream.core.translators.claude_code\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


@pytest.fixture(scope="module")
def core_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with ``pip install .`` alone (no extras); its ``bin`` folder.

    Installed from a copy of the sources, so the build leaves nothing in the checkout.
    """
    root = tmp_path_factory.mktemp("core-only")
    source = root / "src"
    checkout = Path(__file__).resolve().parents[2]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("core", "server", "container"):
        shutil.copytree(checkout / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(checkout / name, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return venv / "bin"


def _no_traceback(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The stderr lines of a finished command, asserting they hold no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.splitlines()


def test_a_core_only_install_runs_the_core_commands(core_only: Path, tmp_path: Path) -> None:
    run = tmp_path / "run.ndjson"
    run.write_bytes(b'{"type":"result","message":"ok"}\n')
    done = subprocess.run(
        [str(core_only / "sandstream"), "validate", str(run)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "terminal: result at line 1" in done.stdout


def test_a_core_only_install_lists_the_commands_of_the_extras(core_only: Path) -> None:
    done = subprocess.run(
        [str(core_only / "sandstream"), "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listing = " ".join(done.stdout.split())
    # The container's command module imports nothing it lacks; the server's cannot load.
    assert "container run one sandbox dispatch (needs sandstream[container])" in listing
    assert "runner not installed: needs sandstream[server]" in listing
    assert "serve not installed: needs sandstream[server]" in listing


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["sandstream", "container"], "container"),
        (["python", "-m", "sandstream.container"], "container"),
        (["sandstream", "serve"], "server"),
        (["sandstream", "runner"], "server"),
    ],
)
def test_a_command_of_a_missing_extra_names_the_extra_in_one_line(
    core_only: Path, argv: list[str], extra: str
) -> None:
    done = subprocess.run(
        [str(core_only / argv[0]), *argv[1:]],
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (1, 2)
    [line] = _no_traceback(done)
    assert f"needs the {extra!r} extra" in line
    assert f"[{extra}]" in line
    if extra == "container":  # the container's contract: one terminal line all the same
        [terminal] = [json.loads(raw) for raw in done.stdout.splitlines()]
        assert terminal["type"] == "error" and terminal["code"] == "internal_error"
