"""sandstream's server: the runner (``POST /stream``) on Quart-Trio and Hypercorn.

- :class:`Runner` admits turns against a capacity limit and shuts them down;
- :class:`TurnStream` is one turn: a container, its stdout through the core, bytes
  out, all owned by one nursery (usable in-process as well as behind HTTP);
- :func:`create_app` / :func:`install_runner` mount ``POST /stream`` and
  ``GET /healthz`` on a Quart-Trio app; :func:`serve` runs it on Hypercorn;
- :class:`ContainerLauncher` is the sandbox-backend interface,
  :class:`LocalSubprocessLauncher` the local-subprocess one.
"""

from .access_log import AccessLog, configure_access_log
from .app import create_app
from .launcher import (
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LaunchError,
    LocalContainer,
    LocalSubprocessLauncher,
)
from .runner import AtCapacityError, Runner, RunnerUnavailableError, ShuttingDownError
from .runner_routes import get_runner, install_runner, runner_blueprint
from .serve import serve
from .settings import RunnerSettings
from .turn import TurnOutcome, TurnRecord, TurnStateError, TurnStream

__all__ = [
    "AccessLog",
    "AtCapacityError",
    "ContainerExit",
    "ContainerHandle",
    "ContainerLauncher",
    "LaunchError",
    "LocalContainer",
    "LocalSubprocessLauncher",
    "Runner",
    "RunnerSettings",
    "RunnerUnavailableError",
    "ShuttingDownError",
    "TurnOutcome",
    "TurnRecord",
    "TurnStateError",
    "TurnStream",
    "configure_access_log",
    "create_app",
    "get_runner",
    "install_runner",
    "runner_blueprint",
    "serve",
]
