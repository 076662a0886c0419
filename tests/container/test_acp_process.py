"""The agent's stdio are socket pairs: a process of the same uid cannot open them again
through ``/proc/<pid>/fd`` even where the agent is dumpable (no shield preloaded), and
the agent reads and writes them as it would pipes."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest
import trio

from sandstream.container.agents.acp.process import agent_process

ECHO = "import sys; sys.stdout.write(sys.stdin.readline().upper()); sys.stdout.flush(); input()"


async def test_the_agents_stdio_cannot_be_opened_through_proc(tmp_path: Path) -> None:
    command = [sys.executable, "-c", ECHO]
    async with agent_process(command, cwd=tmp_path, env=dict(os.environ), grace=1.0) as agent:
        pid = agent.process.pid
        for fd in (0, 1, 2):
            for flags in (os.O_RDONLY, os.O_WRONLY):
                with pytest.raises(OSError) as refused:
                    os.open(f"/proc/{pid}/fd/{fd}", flags | os.O_NONBLOCK)
                assert refused.value.errno == errno.ENXIO
        await agent.stdin.send_all(b"hello\n")
        with trio.fail_after(30):
            assert await agent.stdout.receive_some(100) == b"HELLO\n"
        await agent.stdin.send_all(b"\n")  # its input(): it exits
        with trio.fail_after(30):
            assert await agent.process.wait() == 0
            assert await agent.stdout.receive_some(100) == b""  # its end of file
