"""A Landlock domain of its own for a process the container starts (Linux >= 6.12).

:func:`own_domain` makes a ``preexec_fn`` that puts the child, between ``fork`` and
``execve``, into a new Landlock domain that restricts no file or network access but
scopes signals (``LANDLOCK_SCOPE_SIGNAL``): the child and everything it starts,
daemons it leaves included, can signal only processes of that domain, and, as in any
Landlock domain, can ``ptrace`` (and open ``/proc/<pid>/{fd,mem,environ}`` of) only
those. The container and the agent, outside it, are out of its reach.

A kernel without Landlock signal scoping (ABI < 6) gives ``None`` (nothing to do; the
other protections stay). The child that cannot enter the domain is not started: the
``preexec_fn`` raises, and so does the start (:class:`subprocess.SubprocessError`).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Final

__all__ = ["SIGNAL_SCOPE_ABI", "DomainEntry", "landlock_abi", "own_domain"]

SIGNAL_SCOPE_ABI: Final = 6
"""The first Landlock ABI that scopes signals."""

_SYS_CREATE_RULESET: Final = 444  # the same number on every architecture
_SYS_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_SCOPE_SIGNAL: Final = 2
_PR_SET_NO_NEW_PRIVS: Final = 38


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to ask: not Linux
        return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled)."""
    libc = _libc()
    if libc is None:
        return 0
    version = libc.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


@dataclass
class DomainEntry:
    """A ruleset ready to be entered: call it in the child (``preexec_fn``), then
    :meth:`close` it in the parent once the child is started."""

    ruleset: int
    libc: ctypes.CDLL

    def __call__(self) -> None:
        if self.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
        if self.libc.syscall(_SYS_RESTRICT_SELF, self.ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot enter the Landlock domain")

    def close(self) -> None:
        os.close(self.ruleset)


def own_domain() -> DomainEntry | None:
    """A domain that scopes signals (see the module doc); ``None`` when the kernel
    cannot. Raises :class:`OSError` when it can but the ruleset is refused."""
    libc = _libc()
    if libc is None or landlock_abi() < SIGNAL_SCOPE_ABI:
        return None
    attr = _RulesetAttr(0, 0, _SCOPE_SIGNAL)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "cannot create a Landlock ruleset")
    return DomainEntry(int(ruleset), libc)
