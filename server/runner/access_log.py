"""The access log: one record per turn, on the ``sandstream.access`` logger.

Each record's message is ``turn`` and its fields (``extra=``) are the turn's
:class:`~sandstream.server.runner.turn.AccessRecord`, with ``event`` ``"turn"``; the
servers write it like any other record (``sandstream.server.cli.logs``), so as a JSON
line it reads::

    {"ts":"2026-01-01T12:00:00.000Z","level":"info","logger":"sandstream.access",
     "message":"turn","event":"turn","turn_id":"turn_…","outcome":"client_disconnected",
     "terminal":null,"duration_ms":812.4,"lines":37,"bytes":5120,"writes":9,
     "diagnostics":0,"container":"pid:4242","returncode":-15,"escalated":false,
     "stragglers":0,"teardown_ms":6.1}
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .turn import AccessRecord

__all__ = ["ACCESS_LOGGER", "AccessLog"]

ACCESS_LOGGER = "sandstream.access"


class AccessLog:
    """Writes turn records to a logger (default ``sandstream.access``) at INFO."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)

    def write(self, record: AccessRecord) -> None:
        """Log one record. Never raises for a logging failure (logging handles it)."""
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info("turn", extra={"event": "turn", **asdict(record)})
