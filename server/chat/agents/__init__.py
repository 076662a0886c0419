"""The Agents-block run: one ``POST /stream`` dispatch streamed by its response.

- :mod:`.agents_runs` — :class:`~.agents_runs.AgentsRuns`: a run recorded and admitted;
- :mod:`.upstream` — the runner's NDJSON, embedded or remote;
- :mod:`.relay` — the response body: upstream through the core to the client, one
  nursery per run;
- :mod:`.running` — the runs in flight, each finished exactly once.
"""

from .agents_runs import PENDING_RUNS, AgentsRuns
from .relay import RelayBody
from .running import AgentsRun, RelayedRun, RunningRuns
from .upstream import EmbeddedUpstream, RemoteUpstream

__all__: list[str] = [
    "PENDING_RUNS",
    "AgentsRun",
    "AgentsRuns",
    "EmbeddedUpstream",
    "RelayBody",
    "RelayedRun",
    "RemoteUpstream",
    "RunningRuns",
]
