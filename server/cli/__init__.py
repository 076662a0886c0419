"""The server's command lines, ``sandstream runner`` and ``sandstream serve``, in one place.

- :mod:`.options`: the flags both share (sandbox and container, sessions, body timeout)
  and the launcher and settings they build; every flag is a
  :class:`~sandstream.server.settings_table.Setting`, most of them a role's settings'
  fields;
- :mod:`.running`: logging, Hypercorn's config, and running the server with an
  ``OSError`` (a port in use) as one line and exit status 1;
- :mod:`.runner`, :mod:`.serve`: each command's flags and ``main``.

The ``sandstream`` script finds both through the ``sandstream.commands`` entry points;
``python -m sandstream.server.cli runner|serve ...`` runs them without it (:func:`main`).
Flags and environment variables: docs/configuration.md.
"""

from .commands import main
from .options import (
    CONTAINER_SETTINGS,
    SESSION_SETTINGS,
    launcher_from_args,
    session_settings,
)
from .runner import build_runner_parser, runner_main
from .running import hypercorn_config
from .serve import build_serve_parser, serve_main

__all__ = [
    "CONTAINER_SETTINGS",
    "SESSION_SETTINGS",
    "build_runner_parser",
    "build_serve_parser",
    "hypercorn_config",
    "launcher_from_args",
    "main",
    "runner_main",
    "serve_main",
    "session_settings",
]
