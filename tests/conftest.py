"""Test-wide settings, fixtures, and the leak check.

Hypothesis runs without deadlines: CI machines are shared and slow.

The suite leaves no process and no temp entry behind, and fails when it does:

- every test runs with a ``TMPDIR`` of its own (``tempfile`` in this process, and
  every subprocess started meanwhile, create their temp entries there); an entry
  still there when the test ends fails that test, at teardown;
- every process started during the session inherits ``TEST_LEAK_MARKER``, so one
  still alive when the session ends (even orphaned, in a session of its own) fails
  the run; it is named with its ``TMPDIR`` (which names its test) and killed.

Both checks give things that are being torn down a grace period before failing.
Tests under :data:`FAST` are marked ``fast`` (``pytest -m fast``, .dev/test-fast): the
unit-level ones, which start no server, sandbox or browser and together run in under
a minute; one of them marked ``slow`` (a venv, a fuzzer, MiBs of input) is not.

Nothing here imports the server's stack at collection (the ``workspace`` fixture does,
when a test asks for it), so that tests/core runs on a core-only install.
The suite runs on pytest-xdist's workers (pyproject.toml): each worker is a session
of its own here, with its own marker and its own checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import psutil
import pytest
from hypothesis import settings

from tests.support import processes

if TYPE_CHECKING:
    import trio

    from benchmarks.support.postgres_server import PostgresServer
    from benchmarks.support.workspace import WorkspaceServer

settings.register_profile("sandstream", deadline=None)
settings.load_profile("sandstream")

LEAK_MARKER_ENV = "TEST_LEAK_MARKER"
LEAK_GRACE = 10.0
"""Seconds a leftover gets to go away (a tree being torn down) before it is a leak."""

T = TypeVar("T")

FAST: Final = (
    "tests/core/",
    "tests/test_exports.py",
    "tests/test_layers.py",
    "tests/test_docstring_refs.py",
    "tests/gateway/test_apis.py",
    "tests/agents/test_presets.py",
    "tests/benchmarks/test_baselines.py",
    "tests/chat/push/test_encryption.py",
    "tests/chat/test_blob_packs.py",
    "tests/chat/test_multipart_reader.py",
    "tests/chat/test_runner_answers.py",
    "tests/chat/test_turn_fold.py",
    "tests/container/test_acp_permissions.py",
    "tests/container/test_acp_translate.py",
    "tests/container/test_attachments.py",
    "tests/container/test_output.py",
    "tests/container/test_snapshots.py",
    "tests/container/test_stdin_framing.py",
    "tests/server/test_bwrap_command.py",
    "tests/server/test_limits.py",
    "tests/server/test_log_format.py",
    "tests/server/test_runner_extensions.py",
    "tests/sessions/test_buffer.py",
    "tests/sessions/test_stored_runs.py",
    "tests/streams/test_protocol_pieces.py",
    "tests/streams/test_records.py",
)
"""The unit-level test modules and folders (paths from the checkout), marked ``fast``."""
_CHECKOUT = Path(__file__).resolve().parents[1]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m fast``, collect nothing outside :data:`FAST` (importing every test
    module would take half the subset's minute)."""
    if config.getoption("markexpr") != "fast":
        return None
    try:
        where = collection_path.resolve().relative_to(_CHECKOUT).as_posix()
    except ValueError:
        return None
    if collection_path.is_dir():
        inside = f"{where}/"
        return not any(path.startswith(inside) or inside.startswith(path) for path in FAST)
    return not where.startswith(FAST) and where.endswith(".py") and where != "tests/conftest.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``fast`` each test under :data:`FAST` not marked ``slow``."""
    for item in items:
        where = item.path.relative_to(_CHECKOUT).as_posix()
        if where.startswith(FAST) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


_SESSION_MARKER = uuid.uuid4().hex
os.environ[LEAK_MARKER_ENV] = _SESSION_MARKER  # before any fixture can start a process


@pytest.fixture
async def workspace(nursery: trio.Nursery) -> WorkspaceServer:
    """A workspace serving an empty env and a scripted agent that answers "Done."."""
    from benchmarks.support.workspace import start_workspace
    from sandstream.core.schemas import ConfigResponse, ScriptedAgent

    return await start_workspace(nursery, config=ConfigResponse(agent=ScriptedAgent()))


@pytest.fixture(scope="session", autouse=True)
def _no_leftovers_after_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the run if a process it started is still alive, or a temp entry left."""
    with _private_tmpdir(tmp_path_factory.mktemp("tmp")) as tmpdir:
        yield
    leaked = _wait_until(_leaked_processes)
    problems = [f"process still running: {processes.describe(pid)}" for pid in leaked]
    processes.kill(leaked)
    left = _wait_until(lambda: _entries(tmpdir))
    shutil.rmtree(tmpdir, ignore_errors=True)
    problems += [f"temp entry left: {entry}" for entry in left]
    if problems:
        pytest.fail("the test suite leaked (now cleaned up):\n" + "\n".join(problems))


@pytest.fixture(autouse=True)
def _no_temp_entries_after_the_test(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Run the test with a ``TMPDIR`` of its own; fail it if it leaves an entry there."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    with _private_tmpdir(tmp_path_factory.mktemp(f"tmpdir-{name}")) as tmpdir:
        yield
    left = _wait_until(lambda: _entries(tmpdir))
    if left:
        described = "; ".join(_describe_entry(tmpdir / name) for name in left)
        pytest.fail(f"the test left temp entries behind in {tmpdir}: {described}")


def _describe_entry(path: Path) -> str:
    """An entry's name with what it holds (a dir's first names, a file's first bytes)."""
    try:
        if path.is_dir():
            return f"{path.name}/ {sorted(p.name for p in path.iterdir())[:10]}"
        with open(path, "rb") as file:
            return f"{path.name} {file.read(200)!r}"
    except OSError as exc:
        return f"{path.name} ({exc})"


@contextmanager
def _private_tmpdir(path: Path) -> Iterator[Path]:
    """Point ``$TMPDIR`` and :mod:`tempfile` at ``path`` inside the block."""
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None  # computed again from $TMPDIR


def _leaked_processes() -> list[int]:
    """Processes of this session still alive: marked ones and our own descendants."""
    pids = set(processes.with_env(LEAK_MARKER_ENV, [_SESSION_MARKER]))
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return sorted(pids)


def _entries(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


def _wait_until(found: Callable[[], list[T]]) -> list[T]:
    """Poll ``found`` until it finds nothing or the grace period ends; what it found last."""
    deadline = time.monotonic() + LEAK_GRACE
    while (result := found()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return result


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (started when a test first needs it)."""
    from benchmarks.support.postgres_server import open_postgres_server

    with open_postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def node() -> Path:
    """Node.js, with tests/node's npm packages installed (.dev/setup.sh's
    ``node_packages``) if they are missing."""
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        ["bash", "-c", "source .dev/setup.sh && node_packages >&2"], cwd=root, check=True
    )
    found = shutil.which("node")
    assert found is not None, "node is not installed (Debian: apt-get install nodejs)"
    return Path(found)
