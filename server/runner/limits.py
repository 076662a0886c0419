"""Per-sandbox resource limits: what they are, how they are read, which one was hit.

:class:`ResourceLimits`: memory, processes, CPU time and disk (the sandbox's ``/tmp``
and ``/dev/shm`` together) per sandbox. A launcher reads each sandbox with a
:class:`Meter` — :class:`CgroupMeter` (cgroup v2 or v1; the kernel enforces memory and
processes) or :class:`ProcMeter` (``/proc``, where no cgroup can be created) — and
:func:`watch_limits` polls it and returns the first :class:`LimitExceeded`; the
launcher then kills the sandbox and the turn ends with its code (docs/architecture.md,
"Resource limits").
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol, TypeAlias

import trio

__all__ = [
    "CgroupMeter",
    "CgroupRoot",
    "LimitCode",
    "LimitExceeded",
    "Meter",
    "ProcMeter",
    "ResourceLimits",
    "Usage",
    "disk_used",
    "exceeded",
    "find_cgroup_root",
    "parse_size",
    "watch_limits",
]

LimitCode: TypeAlias = Literal["memory_limit", "process_limit", "cpu_limit", "disk_limit"]

_SIZE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_CGROUP_FS: Final = "/sys/fs/cgroup"
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
_TICKS: Final = os.sysconf("SC_CLK_TCK")


def parse_size(text: str) -> int | None:
    """``"512M"`` → 536870912 (K, M, G, T are powers of 1024); ``"0"``/``"none"`` → None.

    Raises :class:`ValueError` with a readable message on anything else.
    """
    if text.strip().lower() in ("0", "none", "off", "unlimited"):
        return None
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M, 2G, or none)")
    return int(float(match[1]) * _UNITS[match[2].lower()])


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    """What one sandbox may use; ``None`` is unlimited.

    ``memory_bytes``: resident memory of all its processes together (its tmpfs counts
    too, where a cgroup measures it). ``processes``: processes alive at once.
    ``cpu_seconds``: CPU time of all its processes together. ``disk_bytes``: what its
    writable file systems (``/tmp``, the work dir included, and ``/dev/shm``) may hold
    together; each is a tmpfs of this size, and the limit watch ends the sandbox once
    they hold this much between them.
    """

    memory_bytes: int | None = 2 << 30
    processes: int | None = 512
    cpu_seconds: float | None = None
    disk_bytes: int | None = 1 << 30

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "processes", "disk_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        cpu = self.cpu_seconds
        if cpu is not None and not (cpu > 0 and math.isfinite(cpu)):
            raise ValueError(f"cpu_seconds must be a finite number > 0 or None, got {cpu}")


@dataclass(frozen=True, slots=True)
class LimitExceeded:
    """Which limit ended a sandbox: ``code`` for the ``error`` line, and why."""

    code: LimitCode
    message: str


@dataclass(frozen=True, slots=True)
class Usage:
    """One reading of a sandbox. ``oom_kills``/``refused_forks``: kernel enforcement
    events so far (cgroups only; 0 for :class:`ProcMeter`)."""

    memory_bytes: int = 0
    processes: int = 0
    cpu_seconds: float = 0.0
    oom_kills: int = 0
    refused_forks: int = 0


class Meter(Protocol):
    """Measures one sandbox. ``sample`` is cheap and never blocks for long."""

    def sample(self) -> Usage: ...


def exceeded(usage: Usage, limits: ResourceLimits) -> LimitExceeded | None:
    """The first limit ``usage`` is over (memory, processes, CPU), or ``None``."""
    memory = limits.memory_bytes
    if usage.oom_kills or (memory is not None and usage.memory_bytes > memory):
        return LimitExceeded(
            "memory_limit", f"the sandbox went over its memory limit of {_human(memory)}"
        )
    processes = limits.processes
    if usage.refused_forks or (processes is not None and usage.processes > processes):
        return LimitExceeded(
            "process_limit", f"the sandbox went over its limit of {processes} processes"
        )
    cpu = limits.cpu_seconds
    if cpu is not None and usage.cpu_seconds > cpu:
        return LimitExceeded("cpu_limit", f"the sandbox used more than {cpu:g} s of CPU time")
    return None


def disk_used(paths: Iterable[str]) -> int:
    """Bytes in use on the filesystems at ``paths`` together (one unreadable counts 0)."""
    used = 0
    for path in paths:
        try:
            stat = os.statvfs(path)
        except OSError:
            continue
        used += (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    return used


async def watch_limits(
    meter: Meter,
    limits: ResourceLimits,
    *,
    disk_paths: Sequence[str],
    interval: float,
) -> LimitExceeded:
    """Poll ``meter`` (and the filesystems at ``disk_paths``, which share the disk
    limit) every ``interval`` s until a limit is hit.

    Returns the hit; runs forever otherwise. Cancellation: just stops polling.
    """
    while True:
        await trio.sleep(interval)
        hit = exceeded(meter.sample(), limits)
        disk = limits.disk_bytes
        if hit is None and disk is not None and disk_paths and disk_used(disk_paths) >= disk:
            hit = LimitExceeded(
                "disk_limit", f"the sandbox filled its disk limit of {_human(disk)}"
            )
        if hit is not None:
            return hit


def _human(size: int | None) -> str:
    if size is None:
        return "none"
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}iB"
    return f"{size} bytes"


# -- cgroups ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CgroupRoot:
    """Where this process may create sandbox cgroups: one directory per controller.

    cgroup v2: the same directory for ``memory``, ``pids`` and ``cpu``; v1: the
    process's own cgroup in each of the ``memory``, ``pids`` and ``cpuacct``
    hierarchies. Children are created below ``<dir>/sandstream``.
    """

    version: Literal[1, 2]
    memory: Path
    pids: Path
    cpu: Path

    def prune(self, older_than: float = 60.0) -> int:
        """Remove empty sandbox cgroups left by a runner that was killed; return how many.

        Only directories older than ``older_than`` seconds are tried (a sandbox being
        set up right now is younger), and ``rmdir`` fails on any that holds a process.
        """
        removed = 0
        now = time.time()
        for key in dict.fromkeys((self.memory, self.pids, self.cpu)):
            parent = key / "sandstream"
            try:
                children = [p for p in parent.iterdir() if p.is_dir()]
            except OSError:
                continue
            for child in children:
                try:
                    if now - child.stat().st_mtime > older_than:
                        child.rmdir()
                        removed += 1
                except OSError:
                    continue
        return removed

    def create(self, name: str, limits: ResourceLimits) -> CgroupMeter:
        """Create the cgroups of sandbox ``name`` with ``limits`` set (``OSError`` if not)."""
        dirs = {key: getattr(self, key) / "sandstream" / name for key in ("memory", "pids", "cpu")}
        created: list[Path] = []
        try:
            for path in dict.fromkeys(dirs.values()):
                path.mkdir(parents=True)
                created.append(path)
            meter = CgroupMeter(self.version, dirs["memory"], dirs["pids"], dirs["cpu"])
            meter.apply(limits)
        except OSError:
            for path in reversed(created):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        return meter


@dataclass(frozen=True, slots=True)
class CgroupMeter:
    """The cgroup(s) of one sandbox: limits, readings, ``attach`` and ``remove``."""

    version: Literal[1, 2]
    memory: Path
    pids: Path
    cpu: Path

    def apply(self, limits: ResourceLimits) -> None:
        if self.version == 2:
            if limits.memory_bytes is not None:
                _write(self.memory / "memory.max", limits.memory_bytes)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    _write(self.memory / "memory.swap.max", 0)
            if limits.processes is not None:
                _write(self.pids / "pids.max", limits.processes)
            return
        if limits.memory_bytes is not None:
            _write(self.memory / "memory.limit_in_bytes", limits.memory_bytes)
            with contextlib.suppress(OSError):  # absent without swap accounting
                _write(self.memory / "memory.memsw.limit_in_bytes", limits.memory_bytes)
        if limits.processes is not None:
            _write(self.pids / "pids.max", limits.processes)

    def attach(self, pid: int) -> None:
        """Move ``pid`` (before it forks anything) into every cgroup of the sandbox."""
        for path in dict.fromkeys((self.memory, self.pids, self.cpu)):
            _write(path / "cgroup.procs", pid)

    def sample(self) -> Usage:
        if self.version == 2:
            memory = _read_int(self.memory / "memory.current")
            oom = _read_keyed(self.memory / "memory.events").get("oom_kill", 0)
            cpu = _read_keyed(self.cpu / "cpu.stat").get("usage_usec", 0) / 1e6
        else:
            memory = _read_int(self.memory / "memory.usage_in_bytes")
            oom = _read_keyed(self.memory / "memory.oom_control").get("oom_kill", 0)
            cpu = _read_int(self.cpu / "cpuacct.usage") / 1e9
        return Usage(
            memory_bytes=memory,
            processes=_read_int(self.pids / "pids.current"),
            cpu_seconds=cpu,
            oom_kills=oom,
            refused_forks=_read_keyed(self.pids / "pids.events").get("max", 0),
        )

    async def remove(self, timeout: float = 2.0) -> bool:
        """Remove the (empty) cgroups; retried while the kernel releases exited tasks.

        Returns False if one could not be removed within ``timeout``. Cancellation:
        stops retrying (the directory stays; it is empty and harmless).
        """
        with trio.move_on_after(timeout):
            for path in dict.fromkeys((self.memory, self.pids, self.cpu)):
                while True:
                    try:
                        path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError as exc:
                        if exc.errno != errno.EBUSY:
                            return False
                        await trio.sleep(0.005)
            return True
        return False


def find_cgroup_root(
    proc_self: str = "/proc/self", probe: Callable[[CgroupRoot], bool] | None = None
) -> CgroupRoot | None:
    """The place to create sandbox cgroups, or ``None`` if there is none we may use.

    cgroup v2 is used when this process's cgroup has ``memory`` and ``pids`` enabled
    for its children (``cgroup.subtree_control``, enabled here if allowed); otherwise
    the v1 ``memory``, ``pids`` and ``cpuacct`` hierarchies, when all three are
    mounted. ``probe`` (default: create and remove a test cgroup) checks it is writable.
    """
    mounts = _cgroup_mounts(proc_self)
    own = _own_cgroups(proc_self)
    candidates: list[CgroupRoot] = []
    v2 = mounts.get("cgroup2")
    if v2 is not None and "" in own:
        base = _under(v2, own[""])
        if base is not None and _enable_v2(base):
            candidates.append(CgroupRoot(2, base, base, base))
    v1 = {
        key: _under(mounts[key], own[key])
        for key in ("memory", "pids", "cpuacct")
        if key in mounts and key in own
    }
    if len(v1) == 3 and all(path is not None for path in v1.values()):
        memory, pids, cpu = (v1[key] for key in ("memory", "pids", "cpuacct"))
        assert memory is not None and pids is not None and cpu is not None
        candidates.append(CgroupRoot(1, memory, pids, cpu))
    check = probe or _writable
    for candidate in candidates:
        if check(candidate):
            return candidate
    return None


def _writable(root: CgroupRoot) -> bool:
    name = f"probe-{os.getpid()}"
    try:
        meter = root.create(name, ResourceLimits())
    except OSError:
        return False
    for path in dict.fromkeys((meter.memory, meter.pids, meter.cpu)):
        with contextlib.suppress(OSError):
            path.rmdir()
    return True


def _enable_v2(base: Path) -> bool:
    try:
        enabled = set((base / "cgroup.subtree_control").read_text().split())
        available = set((base / "cgroup.controllers").read_text().split())
    except OSError:
        return False
    wanted = {"memory", "pids"}
    if not wanted <= available:
        return False
    missing = wanted - enabled
    if missing:
        try:
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
        except OSError:
            return False
    return True


def _cgroup_mounts(proc_self: str) -> dict[str, tuple[str, str]]:
    """``{controller or "cgroup2": (mount point, mount root)}`` from mountinfo."""
    found: dict[str, tuple[str, str]] = {}
    try:
        lines = Path(proc_self, "mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            found.setdefault("cgroup2", (fields[4], fields[3]))
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in ("memory", "pids", "cpuacct"):
                    found.setdefault(option, (fields[4], fields[3]))
    return found


def _own_cgroups(proc_self: str) -> dict[str, str]:
    """``{controller: path}`` of this process (``""`` is the v2 path)."""
    own: dict[str, str] = {}
    try:
        lines = Path(proc_self, "cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            own[controller] = parts[2]
    return own


def _under(mount: tuple[str, str], path: str) -> Path | None:
    point, root = mount
    if not path.startswith(root):
        return None
    relative = path[len(root) :].lstrip("/")
    base = Path(point, relative)
    return base if base.is_dir() else None


def _write(path: Path, value: int) -> None:
    with open(path, "w") as file:
        file.write(str(value))


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _read_keyed(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return values
    for line in lines:
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


# -- /proc ----------------------------------------------------------------------------------


class ProcMeter:
    """Counts and sums the processes of one PID namespace from ``/proc``.

    ``init_pid`` is the namespace's init (its pid 1) as the host sees it. A reading costs one
    ``readlink`` per host process (a few ms with hundreds of processes).
    """

    def __init__(self, init_pid: int) -> None:
        self._namespace: str | None
        try:
            self._namespace = os.readlink(f"/proc/{init_pid}/ns/pid")
        except OSError:
            self._namespace = None

    def sample(self) -> Usage:
        if self._namespace is None:
            return Usage()
        memory = processes = 0
        ticks = 0
        for pid in self._members():
            try:
                with open(f"/proc/{pid}/stat", "rb") as file:
                    stat = file.read()
                with open(f"/proc/{pid}/statm", "rb") as file:
                    statm = file.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue
            processes += 1
            # utime stime cutime cstime: fields 14-17 of stat (11-14 after "state").
            ticks += sum(int(value) for value in fields[11:15])
            memory += int(statm.split()[1]) * _PAGE
        return Usage(memory_bytes=memory, processes=processes, cpu_seconds=ticks / _TICKS)

    def _members(self) -> Iterable[int]:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == self._namespace:
                    yield int(name)
            except OSError:
                continue
