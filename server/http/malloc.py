"""glibc's malloc set for a streaming server: large buffers from the heap, kept there.

:func:`keep_large_buffers` sets the mmap threshold to :data:`MMAP_THRESHOLD` (buffers up
to it come from the heap) and the trim threshold to :data:`TRIM_THRESHOLD` (up to that
much freed memory stays with the process, per arena), so a turn's buffers of 128 KiB to
a few MiB do not fault their pages in afresh. Why: docs/architecture.md, "Connections".
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping
from typing import Final

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_large_buffers"]

MMAP_THRESHOLD: Final = 4 * 1024 * 1024
TRIM_THRESHOLD: Final = 16 * 1024 * 1024

_M_TRIM_THRESHOLD: Final = -1  # malloc.h
_M_MMAP_THRESHOLD: Final = -3
_USER_SETTINGS: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

log = logging.getLogger("sandstream.server")


def keep_large_buffers(environ: Mapping[str, str] = os.environ) -> bool:
    """Set glibc's mmap and trim thresholds for this process (module docstring).

    Returns True when both are set. Does nothing (False) off glibc, or when the
    environment sets either threshold already (``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_``, or ``glibc.malloc.*_threshold`` in
    ``GLIBC_TUNABLES``): the user's choice wins. Call it once, at start-up.
    """
    if any(name in environ for name in _USER_SETTINGS):
        return False
    if "_threshold" in environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    done = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and done
    if not done:
        log.warning("glibc refused the malloc thresholds: large buffers stay mappings")
    return done
