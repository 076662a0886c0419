"""The container's heap in transparent huge pages, where the kernel gives them.

When a sandbox is killed, the kernel frees the container's memory page by page, and
that is most of a teardown: ~26 MiB of anonymous memory in 4 KiB pages, against a few
2 MiB pages for the same memory in huge pages. A launcher asks for them by starting
our container with :data:`HEAP_TUNABLES` (:func:`heap_env`: only where the host's
transparent huge pages are ``madvise`` or ``always``):

- glibc's ``malloc`` then asks for huge pages for its heap from the start (Python's
  large objects, OpenSSL's certificates). Python keeps its own small-object allocator:
  ``PYTHONMALLOC=malloc`` would put every object there too, but makes
  allocation-heavy Python code ~40% slower and the start-up ~5% (measured on 3.11);
- the container, seeing the tunables (:func:`forget_heap_tunables`), calls
  :func:`collapse_heap` once it has imported what it runs with: the densely used
  2 MiB-aligned stretches of its anonymous memory (Python's arenas, the start of the
  heap) are merged into huge pages with ``madvise(MADV_COLLAPSE)`` (Linux >= 6.1),
  again only where the setting allows. A stretch must lie within one mapping, so the
  whole heap is advised first (``MADV_HUGEPAGE``), which joins its parts where the
  kernel can; an arena mapping's unaligned ends stay in small pages.

Any failure (an old kernel or glibc, no huge page free, no setting to read, not Linux)
means no gain and no error. The tunables are removed from the container's environment
so that the processes it starts (setup script, skills, tools: the user's programs) run
with their usual allocator.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Final

__all__ = [
    "HEAP_TUNABLES",
    "THP_SETTING",
    "collapse_heap",
    "forget_heap_tunables",
    "heap_env",
    "huge_page_size",
    "huge_pages_allowed",
]

HEAP_TUNABLES: Final = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
"""glibc (>= 2.35; older ones ignore it): ``madvise(MADV_HUGEPAGE)`` its heap."""

THP_SETTING: Final = "/sys/kernel/mm/transparent_hugepage/enabled"

_MADV_HUGEPAGE: Final = 14
_MADV_COLLAPSE: Final = 25
_DENSE: Final = 0.5
"""A 2 MiB stretch is collapsed when at least this share of it is in memory already."""


def huge_pages_allowed(setting_path: str = THP_SETTING) -> bool:
    """Whether the kernel gives huge pages on request: ``setting_path`` (``always
    [madvise] never``) says ``always`` or ``madvise``; unreadable means no."""
    try:
        with open(setting_path, encoding="ascii") as file:
            setting = file.read()
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def heap_env(setting_path: str = THP_SETTING) -> dict[str, str]:
    """:data:`HEAP_TUNABLES` where :func:`huge_pages_allowed`, else ``{}``."""
    return dict(HEAP_TUNABLES) if huge_pages_allowed(setting_path) else {}


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

    Only where :func:`huge_pages_allowed`. Returns the bytes this call put in huge
    pages (0 when none: never an error). Takes ~0.3 ms per 2 MiB; a signal arriving
    meanwhile is handled once it returns.
    """
    if not sys.platform.startswith("linux") or not huge_pages_allowed():
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
