"""The runner role: ``POST /stream``, one nursery per turn.

- :class:`Runner` (:mod:`.service`) admits turns against a capacity limit and shuts
  them all down;
- :class:`TurnStream` (:mod:`.turn`) is one turn: a container, its stdout through the
  core, bytes out, all owned by one nursery (usable in-process as well as over HTTP);
- :mod:`.launcher` (the interface, ``local``), :mod:`.bwrap` (bubblewrap sandboxes),
  :mod:`.limits` (resource limits) and :mod:`.procs` start containers and end them;
- :mod:`.routes` mounts ``POST /stream`` and ``GET /healthz``; :mod:`.access_log`
  writes one record per turn.
"""

from .access_log import AccessLog
from .bwrap import BwrapContainer, BwrapLauncher
from .errors import (
    AtCapacityError,
    LaunchError,
    RunnerUnavailableError,
    ShuttingDownError,
    TurnStateError,
)
from .launcher import (
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LocalContainer,
    LocalSubprocessLauncher,
)
from .limits import LimitExceeded, ResourceLimits
from .routes import get_runner, install_runner, runner_blueprint
from .service import Runner, default_launcher
from .settings import RunnerSettings
from .turn import AccessRecord, TurnOutcome, TurnStream

__all__ = [
    "AccessLog",
    "AccessRecord",
    "AtCapacityError",
    "BwrapContainer",
    "BwrapLauncher",
    "ContainerExit",
    "ContainerHandle",
    "ContainerLauncher",
    "LaunchError",
    "LimitExceeded",
    "LocalContainer",
    "LocalSubprocessLauncher",
    "ResourceLimits",
    "Runner",
    "RunnerSettings",
    "RunnerUnavailableError",
    "ShuttingDownError",
    "TurnOutcome",
    "TurnStateError",
    "TurnStream",
    "default_launcher",
    "get_runner",
    "install_runner",
    "runner_blueprint",
]
