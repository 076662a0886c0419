"""HTTP plumbing shared by every role of the server; nothing here imports a role.

:mod:`.problems` (RFC 9457 problem JSON), :mod:`.auth` (bearer tokens, constant time),
:mod:`.requests` (bounded JSON bodies, query parameters), :mod:`.asgi` (the ASGI
connection every app uses), :mod:`.connection` (cutting a connection whose write never
finishes), :mod:`.protocol_errors` (problem JSON for requests Hypercorn rejects),
:mod:`.serve` (Hypercorn, draining the role before it stops), :mod:`.client_watch`
(cutting off a client that stopped reading), :mod:`.raw_connection` (writing a body
straight to its socket), :mod:`.malloc` (glibc's malloc for large buffers).
"""

__all__: list[str] = []
