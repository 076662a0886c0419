"""``python -m sandstream.container``: see :mod:`sandstream.container.cli`."""

from __future__ import annotations

import os
import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    code = main()
    # By now the terminal line is written, tools are reaped and the work dir is
    # gone; interpreter finalization would only delay the moment a runner can reap
    # this process. Flush what Python still buffers and leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
