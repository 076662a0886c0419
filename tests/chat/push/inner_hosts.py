"""The inner hosts a push endpoint may try to reach, for the endpoint guard's tests: a
loopback listener that counts what reaches it, the names that resolve to loopback
here, and every spelling of an inner host with the rule that refuses it."""

from __future__ import annotations

import base64
import dataclasses
import functools
import ipaddress
import socket

import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["AUTH", "P256DH", "Listener", "loopback_names", "start_listener", "tricks"]

P256DH = base64.urlsafe_b64encode(
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
).decode()
"""A browser's public key, for subscriptions never pushed to."""
AUTH = base64.urlsafe_b64encode(b"0123456789abcdef").decode()


@dataclasses.dataclass
class Listener:
    """A loopback TCP listener that counts the connections it was sent."""

    port: int = 0
    connections: int = 0


async def _listen(nursery: trio.Nursery, host: str, port: int, listener: Listener) -> int:
    async def count(stream: trio.SocketStream) -> None:
        listener.connections += 1
        await stream.aclose()

    [bound] = await nursery.start(functools.partial(trio.serve_tcp, count, port, host=host))
    sockname: tuple[str, int] = bound.socket.getsockname()[:2]
    return sockname[1]


async def start_listener(nursery: trio.Nursery) -> Listener:
    """A listener on 127.0.0.1 and [::1], the same port, serving in ``nursery``."""
    found = Listener()
    found.port = await _listen(nursery, "127.0.0.1", 0, found)
    await _listen(nursery, "::1", found.port, found)
    return found


def loopback_names() -> list[str]:
    """Names that resolve to a loopback address here (``localhost``, this host's)."""
    names = []
    for name in ("localhost", socket.gethostname()):
        try:
            found = socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
        except socket.gaierror:
            continue
        if all(ipaddress.ip_address(info[4][0]).is_loopback for info in found):
            names.append(name)
    return names


def tricks(port: int) -> dict[str, str]:
    """Each way to name the loopback listener (or an inner host), and the rule that
    refuses it."""
    tricks = {
        f"http://127.0.0.1:{port}/push/x": "not-https",
        f"https://127.0.0.1:{port}/push/x": "not-public",
        f"https://localhost:{port}/push/x": "single-label-name",
        f"https://localhost.:{port}/push/x": "single-label-name",
        f"https://[::1]:{port}/push/x": "not-public",
        f"https://0x7f000001:{port}/push/x": "non-canonical-address",
        f"https://2130706433:{port}/push/x": "non-canonical-address",
        f"https://127.1:{port}/push/x": "non-canonical-address",
        f"https://[::ffff:127.0.0.1]:{port}/push/x": "not-public",
        f"https://[::ffff:7f00:1]:{port}/push/x": "not-public",
        f"https://127.0.0.1.:{port}/push/x": "non-canonical-address",
        "https://169.254.169.254/latest/meta-data/": "not-public",
        "https://[fe80::a9fe:a9fe]/": "not-public",
        "https://metadata.google.internal/computeMetadata/v1/": "special-use-name",
        "https://push.localhost/push/x": "special-use-name",
        "https://10.0.0.1/push/x": "not-public",
        "https://100.64.0.1/push/x": "not-public",
        "https://user:pass@push.example.com/push/x": "userinfo",
        f"ftp://127.0.0.1:{port}/push/x": "not-https",
    }
    for name in loopback_names():
        tricks[f"https://{name}:{port}/push/x"] = "single-label-name"
    return tricks
