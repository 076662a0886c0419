"""/dev in a bwrap sandbox: POSIX shared memory works, within the disk limit; the rest
of /dev is read-only.

``--dev /dev`` alone leaves ``/dev`` and its ``/dev/shm`` directory an unsized tmpfs
(half the host's memory), past ``--disk-limit``; these turns run in real sandboxes.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.server import ResourceLimits
from tests.server.harness import bwrap_launcher, parse_stream, scripted, shell, start_runner

PY = sys.executable
DISK = 16 << 20

SHARED_MEMORY = f"""{PY} - <<'EOF'
import multiprocessing as mp
from multiprocessing import shared_memory

def square(n):
    return n * n

block = shared_memory.SharedMemory(create=True, size=1 << 20)  # shm_open
block.buf[:5] = b"hello"
seen = shared_memory.SharedMemory(name=block.name)
print("shm", bytes(seen.buf[:5]).decode(), block.name)
seen.close()
block.close()
block.unlink()
with mp.Pool(2) as pool:  # its queues' locks are POSIX semaphores in /dev/shm
    print("pool", sum(pool.map(square, range(10))))
EOF
df -k /dev/shm | tail -1"""


async def _terminal(nursery: trio.Nursery, workspace: WorkspaceServer, command: str) -> Any:
    """Run ``command`` in a sandbox with a 16 MiB disk limit; return the stream's lines."""
    launcher = bwrap_launcher(limits=ResourceLimits(disk_bytes=DISK))
    server = await start_runner(nursery, launcher=launcher)
    workspace.config = scripted(shell(command, timeout_sec=120))
    with trio.fail_after(90):
        async with server.stream(workspace.mint_dispatch()) as response:
            return parse_stream(await response.aread())


async def test_shared_memory_works_in_a_sized_dev_shm(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    lines = await _terminal(nursery, workspace, SHARED_MEMORY)
    assert lines[-1]["type"] == "result", lines[-1]
    [step] = [line for line in lines if line["type"] == "step" and line["status"] == "succeeded"]
    stdout: str = step["result"]["stdout"]
    shm, pool, df = stdout.splitlines()
    assert shm.startswith("shm hello ") and pool == "pool 285"
    assert int(df.split()[1]) == DISK // 1024  # its own tmpfs, of the disk limit's size


async def test_filling_dev_shm_ends_the_turn_with_disk_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    lines = await _terminal(nursery, workspace, "head -c 100M /dev/zero > /dev/shm/big; sleep 60")
    assert lines[-1]["type"] == "error" and lines[-1]["code"] == "disk_limit", lines[-1]


async def test_dev_shm_and_tmp_share_the_disk_limit(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """Neither is full, but together they hold the limit: disk_limit."""
    half = "head -c 8M /dev/zero"
    lines = await _terminal(nursery, workspace, f"{half} > /dev/shm/a && {half} > a; sleep 60")
    assert lines[-1]["type"] == "error" and lines[-1]["code"] == "disk_limit", lines[-1]


async def test_dev_outside_dev_shm_is_read_only_and_its_devices_work(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """Filling ``/dev`` fails at once (not a byte is written past the limit); the devices,
    ``/dev/shm`` and a pseudo-terminal still work."""
    fill = "head -c 100M /dev/zero > /dev/big; echo $?; ls /dev/big; mkdir /dev/d"
    pty = f"{PY} -c 'import pty; pty.openpty()'"
    works = f"echo fine > /dev/null && head -c 4 /dev/urandom | wc -c && {pty} && echo pty"
    lines = await _terminal(nursery, workspace, f"{fill}; {works}; df -k /dev | tail -1")
    assert lines[-1]["type"] == "result", lines[-1]
    [step] = [line for line in lines if line["type"] == "step" and line["status"] == "succeeded"]
    stdout: str = step["result"]["stdout"]
    stderr: str = step["result"]["stderr"]
    status, count, pty, df = stdout.splitlines()
    assert status != "0" and count == "4" and pty == "pty", stdout
    assert stderr.count("Read-only file system") == 2, stderr  # the write and mkdir
    assert "/dev/big" in stderr and int(df.split()[2]) == 0, (stderr, df)  # nothing used
