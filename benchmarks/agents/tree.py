"""The memory of a whole process tree, sampled from ``/proc``.

:func:`tree_memory` sums, over a process and all its descendants (:func:`tree_pids`,
through ``/proc/PID/task/TID/children``), the resident set (``/proc/PID/statm``: pages
shared between them, a ``node`` or ``bun`` binary mapped by two processes, count in
each) and the proportional set size (``/proc/PID/smaps_rollup``: each shared page
divided among the processes mapping it, so the sum is what the tree holds).
:class:`PeakSampler` keeps the largest sums seen while it runs, in a thread of its own
so that the trio loop timing the turn is not held up. A process that exits while it is
read is skipped.
"""

from __future__ import annotations

import os
import threading
from typing import Final

__all__ = ["PeakSampler", "tree_memory", "tree_pids"]

_PAGE: Final = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                found.extend(int(child) for child in file.read().split())
        except OSError:
            continue
    return found


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant of it."""
    pids, pending = [], [root]
    while pending:
        pid = pending.pop()
        pids.append(pid)
        pending.extend(_children(pid))
    return pids


def _pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
        for line in file:
            if line.startswith(b"Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def tree_memory(pids: list[int]) -> tuple[int, int]:
    """The summed resident and proportional bytes of ``pids`` (those gone count 0)."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as file:
                rss += int(file.read().split()[1]) * _PAGE
            pss += _pss(pid)
        except (OSError, IndexError, ValueError):
            continue
    return rss, pss


class PeakSampler:
    """Samples :func:`tree_memory` of ``root``'s tree every ``interval`` seconds until
    :meth:`stop`; ``rss`` and ``pss`` are the peaks so far (bytes), ``processes`` the
    most processes seen at once."""

    def __init__(self, root: int, interval: float = 0.02) -> None:
        self._root = root
        self._interval = interval
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.rss = self.pss = self.processes = 0
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        """Take one sample now."""
        pids = tree_pids(self._root)
        rss, pss = tree_memory(pids)
        with self._lock:
            self.rss = max(self.rss, rss)
            self.pss = max(self.pss, pss)
            self.processes = max(self.processes, len(pids))

    def stop(self) -> None:
        """Stop sampling (and take one last sample)."""
        self._stopped.set()
        self._thread.join()
        self.sample()
