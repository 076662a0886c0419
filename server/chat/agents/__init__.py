"""The Agents-block run: one ``POST /stream`` dispatch streamed by its response.

- :mod:`.service` — :class:`~.service.AgentsRuns`: a run recorded and admitted;
- :mod:`.upstream` — the runner's NDJSON, embedded or remote;
- :mod:`.relay` — the response body: upstream through the core to the client, one
  nursery per run;
- :mod:`.live` — the runs in flight, each finished exactly once.
"""

from .live import LiveAgentsRun, LiveRun, LiveRuns
from .relay import RelayBody
from .service import PENDING_RUNS, AgentsRuns
from .upstream import EmbeddedUpstream, RemoteUpstream

__all__: list[str] = [
    "PENDING_RUNS",
    "AgentsRuns",
    "EmbeddedUpstream",
    "LiveAgentsRun",
    "LiveRun",
    "LiveRuns",
    "RelayBody",
    "RemoteUpstream",
]
