"""``python -m sandstream.server.cli runner|serve ...``: see :func:`sandstream.server.cli.main`."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
