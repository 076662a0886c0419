"""Whether a launcher asks the container for huge pages (:func:`heap_env`).

The container is started with :data:`~sandstream.core.schemas.HEAP_TUNABLES` only where
the host's transparent huge pages are ``madvise`` or ``always``; an unreadable setting
means no. Reads one sysfs file; nothing to cancel.
"""

from __future__ import annotations

from typing import Final

from sandstream.core import HEAP_TUNABLES

__all__ = ["THP_SETTING", "heap_env", "huge_pages_allowed"]

THP_SETTING: Final = "/sys/kernel/mm/transparent_hugepage/enabled"


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
    """:data:`~sandstream.core.schemas.HEAP_TUNABLES` where :func:`huge_pages_allowed`,
    else ``{}``."""
    return dict(HEAP_TUNABLES) if huge_pages_allowed(setting_path) else {}
