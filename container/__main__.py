"""``python -m sandstream.container``: see :mod:`sandstream.container.cli`."""

from __future__ import annotations

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
