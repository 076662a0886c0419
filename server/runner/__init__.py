"""The runner role: ``POST /stream``, one nursery per turn.

- :class:`Runner` (:mod:`.admission`) admits turns against a capacity limit and shuts
  them all down;
- :class:`TurnStream` (:mod:`.turn`) is one turn: a container, its stdout through the
  core, bytes out, and its model gateway (:mod:`sandstream.server.gateway`: the
  provider keys stay here), all owned by one nursery (usable in-process as well as
  over HTTP);
- :mod:`.launcher` (the interface, ``local``), :mod:`.bwrap` (bubblewrap sandboxes),
  :mod:`.limits` (resource limits) and :mod:`.procs` start containers and end them;
- :mod:`.routes` mounts ``POST /stream`` and ``GET /healthz``; :mod:`.access_log`
  writes one record per turn.
"""

from .access_log import ACCESS_LOGGER, AccessLog
from .admission import Runner, default_launcher
from .api_description import RUNNER_OPERATIONS
from .bwrap import BwrapContainer, BwrapLauncher, bwrap_available
from .egress import REFUSED_RANGES, AddressRange, parse_range
from .errors import (
    AtCapacityError,
    LaunchError,
    RunnerUnavailableError,
    ShuttingDownError,
    TurnStateError,
)
from .launcher import (
    DEFAULT_CONTAINER_ARGV,
    DEFAULT_KILL_GRACE,
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LocalContainer,
    LocalSubprocessLauncher,
)
from .limits import LimitExceeded, ResourceLimits, parse_size
from .metrics import RunnerCollector, TurnTimes
from .network import NETWORK_MODES, Endpoint, NetworkMode, network_mode, parse_endpoint
from .routes import (
    NDJSON_CONTENT_TYPE,
    TurnAwareHTTPConnection,
    get_runner,
    install_runner,
    runner_blueprint,
)
from .settings import SHUTDOWN_TIMEOUT, STALL_TIMEOUT, RunnerSettings
from .turn import END_GRACE, AccessRecord, TurnOutcome, TurnStream

__all__ = [
    "ACCESS_LOGGER",
    "DEFAULT_CONTAINER_ARGV",
    "DEFAULT_KILL_GRACE",
    "END_GRACE",
    "NDJSON_CONTENT_TYPE",
    "NETWORK_MODES",
    "REFUSED_RANGES",
    "RUNNER_OPERATIONS",
    "SHUTDOWN_TIMEOUT",
    "STALL_TIMEOUT",
    "AccessLog",
    "AccessRecord",
    "AddressRange",
    "AtCapacityError",
    "BwrapContainer",
    "BwrapLauncher",
    "ContainerExit",
    "ContainerHandle",
    "ContainerLauncher",
    "Endpoint",
    "LaunchError",
    "LimitExceeded",
    "LocalContainer",
    "LocalSubprocessLauncher",
    "NetworkMode",
    "ResourceLimits",
    "Runner",
    "RunnerCollector",
    "RunnerSettings",
    "RunnerUnavailableError",
    "ShuttingDownError",
    "TurnAwareHTTPConnection",
    "TurnOutcome",
    "TurnStateError",
    "TurnStream",
    "TurnTimes",
    "bwrap_available",
    "default_launcher",
    "get_runner",
    "install_runner",
    "network_mode",
    "parse_endpoint",
    "parse_range",
    "parse_size",
    "runner_blueprint",
]
