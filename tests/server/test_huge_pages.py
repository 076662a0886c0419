"""The container's heap in transparent huge pages (what makes a killed sandbox exit fast).

Real bwrap, the real container on a real runner: while a turn streams, the container's
``/proc/<pid>/smaps_rollup`` shows huge pages exactly where the host allows them, the
stream is what the scripted agent produces, and the programs the container starts do
not inherit the tunable. The collapse itself runs in a real Python subprocess. (How
much faster the exit is, is measured in ``benchmarks/teardown``.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.container.agents.scripted import encode_load_lines
from sandstream.container.huge_pages import forget_heap_tunables
from sandstream.core.schemas import HEAP_TUNABLES, ConfigResponse, LoadSpec, ScriptedAgent
from sandstream.server.runner.bwrap import THP_SETTINGS_DIR, BwrapLauncher
from sandstream.server.runner.huge_pages import THP_SETTING, heap_env, huge_pages_allowed
from sandstream.server.runner.launcher import (
    DEFAULT_CONTAINER_ARGV,
    LocalSubprocessLauncher,
    container_heap_env,
)
from tests.server.harness import Reader, bwrap_launcher, parse_stream, shell, start_runner

LOAD = LoadSpec(lines=300, rate=300.0, payload_bytes=64)


def _anon_huge_pages(pid: int) -> int:
    """``AnonHugePages`` of process ``pid``, in KiB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError(f"no AnonHugePages in /proc/{pid}/smaps_rollup")


def _without_ts(line: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in line.items() if key not in ("ts", "durationMs")}


async def test_under_bwrap_the_container_heap_is_in_huge_pages_and_the_turn_is_unchanged(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    server = await start_runner(nursery, launcher=bwrap_launcher())
    workspace.config = ConfigResponse(
        agent=ScriptedAgent(
            load=LOAD,
            steps=[shell('echo "tunables=${GLIBC_TUNABLES-none} malloc=${PYTHONMALLOC-none}"')],
            message="loaded",
        )
    )
    async with server.stream(workspace.mint_dispatch()) as response:
        assert response.status_code == 200
        reader = Reader(response)
        await reader.until(lambda line: line["type"] == "log")  # it streams
        _, sandbox = await server.wait_sandbox()
        huge = _anon_huge_pages(sandbox.init_pid)  # the container is the sandbox's init
        body = await reader.rest()
    if huge_pages_allowed():
        # the heap (glibc's part and the collapsed arenas): several 2 MiB pages
        assert huge >= 4096, huge
    else:
        assert huge == 0, huge
    lines = [_without_ts(line) for line in parse_stream(body)]
    encoded = encode_load_lines(0, LOAD.lines, LOAD, 0)
    expected = [_without_ts(msgspec.json.decode(line)) for line in encoded.splitlines()]
    start = lines.index(expected[0])  # after the container's bootstrap log
    assert lines[start : start + len(expected)] == expected
    rest = lines[start + len(expected) :]
    (step,) = [line for line in rest if line.get("status") == "succeeded"]
    assert "tunables=none malloc=none" in str(step["result"])
    assert lines[-1]["type"] == "result" and lines[-1]["message"] == "loaded"


def test_the_collapse_puts_a_python_heap_in_huge_pages_where_allowed(tmp_path: Path) -> None:
    script = tmp_path / "collapse.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from sandstream.container.huge_pages import collapse_heap

            def huge():
                for line in open("/proc/self/smaps_rollup"):
                    if line.startswith("AnonHugePages:"):
                        return int(line.split()[1])

            objects = [str(i) * 3 for i in range(400_000)]  # Python's arenas, ~30 MiB
            before = huge()
            collapsed = collapse_heap()
            print(before, huge(), collapsed)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True
    )
    before, after, collapsed = (int(word) for word in result.stdout.split())
    if huge_pages_allowed():
        assert collapsed >= 8 << 20, result.stdout
        assert after - before >= collapsed >> 10, result.stdout
    else:
        assert collapsed == 0 and after == before, result.stdout


def test_the_tunables_are_given_only_where_the_host_gives_huge_pages(tmp_path: Path) -> None:
    setting = tmp_path / "enabled"
    for text, expected in (
        ("always [madvise] never\n", HEAP_TUNABLES),
        ("[always] madvise never\n", HEAP_TUNABLES),
        ("always madvise [never]\n", {}),
    ):
        setting.write_text(text)
        assert heap_env(str(setting)) == expected
    assert heap_env(str(tmp_path / "missing")) == {}


def test_only_our_container_is_started_with_the_tunables() -> None:
    ours = heap_env()
    assert container_heap_env(DEFAULT_CONTAINER_ARGV) == ours
    assert container_heap_env(["/opt/py/bin/python3", "-m", "sandstream.container", "-x"]) == ours
    for custom in (["python3", "agent.py"], ["sh", "-c", "exec python3 -m sandstream.container"]):
        assert container_heap_env(custom) == {}
        assert "GLIBC_TUNABLES" not in BwrapLauncher(argv=custom).sandbox_env("turn_x")
    assert LocalSubprocessLauncher().container_env("turn_x", "/tmp/t").items() >= ours.items()
    # a user's own value wins
    custom_env = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    assert BwrapLauncher(env=custom_env).sandbox_env("turn_x")["GLIBC_TUNABLES"] == (
        "glibc.malloc.arena_max=1"
    )


def test_the_thp_settings_are_visible_in_a_sandbox_only_with_the_tunables() -> None:
    def bound(launcher: BwrapLauncher) -> bool:
        line = launcher.command("turn_x", info_fd=7, block_fd=8)
        return any(
            arg == "--ro-bind-try" and line[i + 1] == THP_SETTINGS_DIR for i, arg in enumerate(line)
        )

    assert THP_SETTING.startswith(THP_SETTINGS_DIR + "/")
    assert bound(BwrapLauncher()) == bool(heap_env())
    assert not bound(BwrapLauncher(argv=["sh", "-c", "true"]))


@pytest.mark.parametrize(
    ("environ", "asked", "left"),
    [
        ({**HEAP_TUNABLES, "A": "1"}, True, {"A": "1"}),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, False, None),
        ({}, False, {}),
    ],
)
def test_the_container_keeps_the_tunables_from_what_it_starts(
    environ: dict[str, str], asked: bool, left: dict[str, str] | None
) -> None:
    before = dict(environ)
    assert forget_heap_tunables(environ) is asked
    assert environ == (before if left is None else left)
