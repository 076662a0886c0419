"""The container's heap in transparent huge pages, where the launcher asked for them.

A launcher that finds huge pages allowed starts the container with
:data:`~sandstream.core.schemas.HEAP_TUNABLES` (glibc then advises its heap). The
container, seeing them (:func:`forget_heap_tunables`, which also removes them so that
the user's programs run with their usual allocator), calls :func:`collapse_heap` once it
has imported what it runs with. Fewer, larger pages make a killed sandbox's memory
faster to free (docs/container.md, "The sandbox"). Any failure means no gain and no
error; nothing here blocks or can be cancelled.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Final

from sandstream.core import HEAP_TUNABLES

__all__ = [
    "collapse_heap",
    "forget_heap_tunables",
    "huge_page_size",
]

_MADV_HUGEPAGE: Final = 14
_MADV_COLLAPSE: Final = 25
_DENSE: Final = 0.5
"""A 2 MiB stretch is collapsed when at least this share of it is in memory already."""


def forget_heap_tunables(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Remove :data:`HEAP_TUNABLES` from ``environ`` where they hold exactly our values;
    True if they were all there (the launcher asked for huge pages)."""
    asked = all(environ.get(name) == value for name, value in HEAP_TUNABLES.items())
    for name, value in HEAP_TUNABLES.items():
        if environ.get(name) == value:
            del environ[name]
    return asked


def huge_page_size() -> int:
    """The PMD-sized huge page: one page table's worth of pages (2 MiB with 4 KiB)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return page * (page // 8)


def collapse_heap() -> int:
    """Collapse this process's densely used anonymous memory into huge pages.

    Called where the launcher asked for huge pages (it does only where the kernel's
    setting allows them). Returns the bytes this call put in huge
    pages (0 when none: never an error). A signal arriving meanwhile is handled once
    it returns.
    """
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes  # here: the CLI imports this module before its signal handlers

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise, mincore = libc.madvise, libc.mincore
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = huge_page_size()
    pages = ctypes.create_string_buffer(size // os.sysconf("SC_PAGE_SIZE"))

    def resident(address: int) -> float:
        """The share of the ``size`` bytes at ``address`` that is in memory."""
        if mincore(address, size, pages) != 0:
            return 0.0
        return sum(byte & 1 for byte in pages.raw) / len(pages)

    for start, end, name in _anonymous_ranges():
        if name == "[heap]":  # one mapping again, where glibc advised only a part
            madvise(start, end - start, _MADV_HUGEPAGE)
    collapsed = 0
    for start, end, _ in _anonymous_ranges():
        for run_start, run_end in _dense_runs(start, end, size, resident):
            if madvise(run_start, run_end - run_start, _MADV_COLLAPSE) == 0:
                collapsed += run_end - run_start
    return collapsed


def _anonymous_ranges() -> Iterator[tuple[int, int, str]]:
    """(start, end, name) of the private writable anonymous mappings: the brk heap
    (``[heap]``), mmap-ed arenas (no name)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as file:
            lines = file.readlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or fields[1] != "rw-p":
            continue
        name = fields[5] if len(fields) > 5 else ""
        if name not in ("", "[heap]"):
            continue  # a file's data, the stack, vdso...
        low, _, high = fields[0].partition("-")
        yield int(low, 16), int(high, 16), name


def _dense_runs(
    start: int, end: int, size: int, resident: Callable[[int], float]
) -> Iterator[tuple[int, int]]:
    """Runs of aligned ``size`` stretches of [start, end) at least :data:`_DENSE` resident."""
    run_start: int | None = None
    chunk = -(-start // size) * size
    while chunk + size <= end:
        dense = resident(chunk) >= _DENSE
        if dense and run_start is None:
            run_start = chunk
        elif not dense and run_start is not None:
            yield run_start, chunk
            run_start = None
        chunk += size
    if run_start is not None:
        yield run_start, chunk
