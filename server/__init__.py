"""sandstream's server: a Quart-Trio application on Hypercorn, one subpackage per role.

:mod:`~sandstream.server.runner` (``POST /stream``), :mod:`~sandstream.server.sessions`
(durable sessions), :mod:`~sandstream.server.chat` (the chat backend),
:mod:`~sandstream.server.web` (the browser app) and :mod:`~sandstream.server.http` (the
HTTP plumbing they share); :mod:`~sandstream.server.app` composes them, and
:mod:`~sandstream.server.cli` runs ``sandstream runner`` and ``sandstream serve``.
The runner's public API is re-exported here, with the app factories and :func:`serve`.
"""

from sandstream.server.app import create_chat_app, create_runner_app
from sandstream.server.http import serve
from sandstream.server.runner import *  # noqa: F403 (the runner's public API, as listed by the runner)

from . import runner

__all__ = [*runner.__all__, "create_chat_app", "create_runner_app", "serve"]
