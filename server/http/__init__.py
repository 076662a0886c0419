"""HTTP plumbing shared by every role of the server; nothing here imports a role.

- :mod:`.problems`: RFC 9457 problem JSON for every error answer;
- :mod:`.auth`: bearer tokens, compared in constant time;
- :mod:`.requests`: bounded JSON bodies, query parameters, JSON answers;
- :mod:`.asgi`: the ASGI connection every app uses: idle connections close, request
  bodies have a deadline, a role may answer some requests below Quart;
- :mod:`.connection`: cutting a client's connection whose write can never finish;
- :mod:`.client_watch`: cutting off a client that stopped reading;
- :mod:`.fanout`: live writes, a stream's new runs written straight to the sockets of
  its caught-up readers, beside ASGI;
- :mod:`.protocol_errors`: problem JSON for the requests Hypercorn rejects itself;
- :mod:`.hypercorn_adapter`: every use of Hypercorn's internals, pinned to the version
  it was written for;
- :mod:`.serve`: Hypercorn's trio worker with a shutdown that drains the role first;
- :mod:`.malloc`: glibc's malloc settings for large buffers;
- :mod:`.errors`: :class:`~.errors.HTTPLayerError`, the root of this package's errors.

Roles (``runner``, ``sessions``, ``chat``) import from here; nothing here imports a role.
"""

__all__: list[str] = []
