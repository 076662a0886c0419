"""The structured access log: one JSON record per turn, on the ``sandstream.access`` logger.

Each record is one line of JSON (see :class:`~sandstream.server.runner.turn.AccessRecord`)::

    {"event":"turn","turn_id":"turn_…","outcome":"client_disconnected","terminal":null,
     "duration_ms":812.4,"lines":37,"bytes":5120,"writes":9,"diagnostics":0,
     "container":"pid:4242","returncode":-15,"escalated":false,"stragglers":0,
     "teardown_ms":6.1}

The record is the log message itself, so a handler with ``"%(message)s"`` writes
plain JSON lines; :func:`configure_access_log` installs one on a stream.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from .turn import AccessRecord

__all__ = ["ACCESS_LOGGER", "AccessLog", "configure_access_log"]

ACCESS_LOGGER = "sandstream.access"


class AccessLog:
    """Writes turn records to a logger (default ``sandstream.access``) at INFO."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)

    def write(self, record: AccessRecord) -> None:
        """Log one record. Never raises for a logging failure (logging handles it)."""
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(record.to_json())


def configure_access_log(stream: TextIO | None = None) -> logging.Handler:
    """Send the access log, as bare JSON lines, to ``stream`` (default stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler
