"""sandstream's server: a Quart-Trio application on Hypercorn, one subpackage per role.

- :mod:`sandstream.server.runner`: ``POST /stream``, one nursery per turn ties the
  container, the upstream read and the client write;
- :mod:`sandstream.server.chat`: the chat backend (persisted conversations, one-time
  tokens, the sandbox callbacks, SSE to the browser);
- :mod:`sandstream.server.http`: the HTTP plumbing both share;
- :mod:`sandstream.server.cli`: ``sandstream runner`` and ``sandstream serve``.

The runner's public API is re-exported here, with :func:`serve`.
"""

from sandstream.server import runner
from sandstream.server.http.serve import serve
from sandstream.server.runner import *  # noqa: F403 (the runner's public API, as listed by the runner)

__all__ = [*runner.__all__, "serve"]
