"""Another machine for network tests, made on this one: a network namespace behind a veth.

:func:`open_outside_host` starts a server in a network namespace of its own
(``unshare --net``) and links it to the host's by a veth pair with an IPv4 ``/30`` of
198.18.0.0/15 (the benchmarking range), a link-local IPv4 ``/30`` of 169.254.0.0/16
(where cloud metadata services answer; never 169.254.169.0/24) and an IPv6 ``/64`` of
``fdd5:7a1e::/32``, drawn at random so parallel tests do not collide. The host reaches
it as it would reach another machine on its LAN (a route of the pair's link), and so
does whatever the host relays, such as pasta; the internet is never needed. The server answers an
HTTP request's head on :attr:`OutsideHost.port` (``HTTP/1.0 200 outside``, read whole
first, so closing resets nothing) and echoes UDP datagrams on
port 53 (as a DNS server would answer a query), on IPv4 and IPv6. The host's end of
the pair also serves TCP (``HTTP/1.0 200 host``, :attr:`OutsideHost.host_port`): a
service of this host on an address that is not its loopback.

Needs root (a veth pair) and ``ip`` (iproute2). Leaving the block, cancelled or not,
deletes the pair and kills the server, whose namespace goes with it: nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import trio

__all__ = ["OutsideHost", "open_outside_host"]

_SERVER: Final = r"""
import selectors, socket, sys
tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
tcp.bind(("::", 0))
tcp.listen(16)
udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
udp.bind(("::", 53))
print(tcp.getsockname()[1], flush=True)
selector = selectors.DefaultSelector()
selector.register(tcp, selectors.EVENT_READ)
selector.register(udp, selectors.EVENT_READ)
while True:
    for key, _ in selector.select():
        if key.fileobj is udp:
            data, peer = udp.recvfrom(512)
            udp.sendto(data, peer)
        else:
            connection, _ = tcp.accept()
            with connection:
                connection.settimeout(5)
                request = b""
                try:
                    while b"\r\n\r\n" not in request and (chunk := connection.recv(4096)):
                        request += chunk
                    connection.sendall(b"HTTP/1.0 200 outside\r\n\r\n")
                except OSError:
                    pass
"""
"""The outside host's server: prints its TCP port once it listens."""


@dataclass(frozen=True)
class OutsideHost:
    """Where the outside host answers, and this host's end of the link."""

    ipv4: str
    ipv6: str
    link_local: str
    """Its link-local IPv4 address."""
    port: int
    """Its TCP port (IPv4 and IPv6); UDP is port 53."""
    host_ipv4: str
    """This host's address on the link."""
    host_port: int
    """A TCP service of this host on :attr:`host_ipv4`, not on its loopback."""


async def _serve_on_host(ipv4: str, task_status: trio.TaskStatus[int]) -> None:
    """Serve ``HTTP/1.0 200 host`` on ``ipv4`` (any port, handed to ``task_status``)."""

    async def answer(stream: trio.SocketStream) -> None:
        request = b""
        with contextlib.suppress(trio.BrokenResourceError), trio.move_on_after(5):
            while b"\r\n\r\n" not in request and (chunk := await stream.receive_some(4096)):
                request += chunk
            await stream.send_all(b"HTTP/1.0 200 host\r\n\r\n")
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host=ipv4)
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(answer, listeners)


@contextlib.asynccontextmanager
async def open_outside_host() -> AsyncIterator[OutsideHost]:
    """The outside host and its link, for the block's duration (see the module)."""
    if os.geteuid() != 0:
        raise PermissionError("an outside host needs root (a veth pair)")
    block = random.randrange(1 << 15)  # a /30 of 198.18.0.0/15
    base = (198 << 24) | (18 << 16) | (block << 2)
    ipv4, host_ipv4 = _dotted(base + 2), _dotted(base + 1)
    third = random.choice([n for n in range(1, 255) if n != 169])
    link_base = (169 << 24) | (254 << 16) | (third << 8) | (random.randrange(64) << 2)
    link_local, host_link_local = _dotted(link_base + 2), _dotted(link_base + 1)
    prefix = f"fdd5:7a1e:{random.randrange(1 << 16):x}"
    link = f"ssout{os.getpid() % 100000}{random.randrange(1000)}"[:15]
    server = await trio.lowlevel.open_process(
        ["unshare", "--net", "--", sys.executable, "-c", _SERVER],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        with trio.fail_after(10):
            port = int(await _read_line(server.stdout))
        await _ip("link", "add", link, "type", "veth", "peer", "name", "outside0")
        await _ip("link", "set", "outside0", "netns", str(server.pid))
        await _ip("address", "add", f"{host_ipv4}/30", "dev", link)
        await _ip("address", "add", f"{host_link_local}/30", "dev", link)
        await _ip("-6", "address", "add", f"{prefix}::1/64", "dev", link, "nodad")
        await _ip("link", "set", link, "up")
        inside = ["nsenter", "--target", str(server.pid), "--net", "--", "ip"]
        await _run([*inside, "address", "add", f"{ipv4}/30", "dev", "outside0"])
        await _run([*inside, "address", "add", f"{link_local}/30", "dev", "outside0"])
        await _run([*inside, "-6", "address", "add", f"{prefix}::2/64", "dev", "outside0", "nodad"])
        await _run([*inside, "link", "set", "outside0", "up"])
        async with trio.open_nursery() as nursery:
            host_port = await nursery.start(_serve_on_host, host_ipv4)
            yield OutsideHost(ipv4, f"{prefix}::2", link_local, port, host_ipv4, host_port)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await _run(["ip", "link", "delete", link], check=False)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            await server.wait()
            if server.stdout is not None:
                await server.stdout.aclose()


def _dotted(address: int) -> str:
    return ".".join(str((address >> shift) & 0xFF) for shift in (24, 16, 8, 0))


async def _read_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(64)
        if not chunk:
            raise RuntimeError(f"the outside host's server ended before it listened: {data!r}")
        data += chunk
    return data.decode("ascii").strip()


async def _ip(*args: str) -> None:
    await _run(["ip", *args])


async def _run(argv: list[str], *, check: bool = True) -> None:
    result = await trio.run_process(argv, capture_stderr=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{argv}: {result.stderr.decode(errors='replace').strip()}")
