"""The resident memory of a whole process tree, sampled from ``/proc``.

:func:`tree_rss` sums the resident set (``/proc/PID/statm``) of a process and all its
descendants (:func:`tree_pids`, through ``/proc/PID/task/TID/children``), so pages shared between
them (a ``node`` binary run twice, shared libraries) count once per process: an upper
bound of what the tree holds. :class:`PeakSampler` keeps the largest sum seen while it
runs, in a thread of its own so that the trio loop timing the turn is not held up.
A process that exits while it is read is skipped.
"""

from __future__ import annotations

import os
import threading
from typing import Final

__all__ = ["PeakSampler", "tree_pids", "tree_rss"]

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


def tree_rss(pids: list[int]) -> int:
    """The summed resident bytes of ``pids`` (those gone count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as file:
                total += int(file.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


class PeakSampler:
    """Samples :func:`tree_rss` of ``root`` every ``interval`` seconds until
    :meth:`stop`, which returns the peak in bytes and the number of processes then."""

    def __init__(self, root: int, interval: float = 0.02) -> None:
        self._root = root
        self._interval = interval
        self._stopped = threading.Event()
        self.peak = 0
        self.processes = 0
        self._thread = threading.Thread(target=self._run, name="tree-rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        """Take one sample now."""
        pids = tree_pids(self._root)
        rss = tree_rss(pids)
        if rss > self.peak:
            self.peak, self.processes = rss, len(pids)

    def stop(self) -> int:
        """Stop sampling (one last sample first); the peak in bytes."""
        self._stopped.set()
        self._thread.join()
        self.sample()
        return self.peak
