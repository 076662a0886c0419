"""Who used the machine's CPUs over a stretch of a benchmark, in cores.

A :class:`CpuMeter` samples, in one go: the ``serve`` process's own CPU time; its
descendants' (the containers, their sandboxes: what ``serve`` has reaped, so a container
counts once it has exited); the workspace server's; this process's (the viewers); and the
whole machine's busy and stolen time (``/proc/stat``: other tenants of a shared machine
show there, and nowhere else). :meth:`CpuMeter.cores` turns two samples into cores used
on average between them. A process gone meanwhile raises :class:`psutil.NoSuchProcess`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

__all__ = ["CpuMeter", "CpuSample"]


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds so far, by party (see the module docstring)."""

    serve: float
    containers: float
    workspace: float
    viewers: float
    machine_busy: float
    machine_stolen: float


class CpuMeter:
    """Samples the CPU time of ``serve`` (a pid), ``workspace`` (a pid) and this process."""

    def __init__(self, serve: int, workspace: int) -> None:
        self._serve = psutil.Process(serve)
        self._workspace = psutil.Process(workspace)

    def sample(self) -> CpuSample:
        serve = self._serve.cpu_times()
        workspace = self._workspace.cpu_times()
        machine = psutil.cpu_times()
        busy = machine.user + machine.nice + machine.system + machine.irq + machine.softirq
        return CpuSample(
            serve=serve.user + serve.system,
            containers=serve.children_user + serve.children_system,
            workspace=workspace.user + workspace.system,
            viewers=time.process_time(),
            machine_busy=busy,
            machine_stolen=machine.steal,
        )

    @staticmethod
    def cores(before: CpuSample, after: CpuSample, seconds: float) -> dict[str, float]:
        """Cores each party used on average over the ``seconds`` between two samples."""
        return {
            name: round((getattr(after, name) - getattr(before, name)) / seconds, 2)
            for name in CpuSample.__dataclass_fields__
        }
