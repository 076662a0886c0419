"""sandstream's server: a Quart-Trio application on Hypercorn, one subpackage per role.

- :mod:`sandstream.server.runner`: ``POST /stream``, one nursery per turn ties the
  container, the upstream read and the client write;
- :mod:`sandstream.server.chat`: the chat backend (persisted conversations, one-time
  tokens, the sandbox callbacks, SSE to the browser);
- :mod:`sandstream.server.http`: the HTTP plumbing both share;
- :mod:`sandstream.server.cli`: ``sandstream runner`` and ``sandstream serve``.

The runner's public API is re-exported here, with :func:`serve`.
"""

from .http.serve import serve
from .runner.access_log import AccessLog, configure_access_log
from .runner.app import create_app
from .runner.bwrap import BwrapContainer, BwrapLauncher
from .runner.launcher import (
    ContainerExit,
    ContainerHandle,
    ContainerLauncher,
    LaunchError,
    LocalContainer,
    LocalSubprocessLauncher,
)
from .runner.limits import LimitExceeded, ResourceLimits
from .runner.routes import get_runner, install_runner, runner_blueprint
from .runner.service import AtCapacityError, Runner, RunnerUnavailableError, ShuttingDownError
from .runner.settings import RunnerSettings
from .runner.turn import TurnOutcome, TurnRecord, TurnStateError, TurnStream

__all__ = [
    "AccessLog",
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
