"""What a bubblewrap sandbox's network reaches: ``--sandbox-network`` and its helper.

Four modes (:data:`NETWORK_MODES`): ``isolated``, a network namespace of the sandbox's
own connected to the outside world by ``pasta`` (Debian's ``passt``), which reaches none
of the host's loopback services except the ports forwarded to it (the turn's callback,
``--sandbox-allow`` and the runner's own, :func:`forwarded_ports`); ``sealed``, the same
forwarded ports and nothing else: no outside world, no route at all; ``host``, the
host's network; ``none``, loopback only.

:func:`start_pasta` attaches one ``pasta`` to a sandbox's network namespace before the
sandbox's command runs and returns once it is configured (``isolated``: addresses and
routes; ``sealed``: the forwards alone); :func:`stop_pasta` ends it.
The pasta process is the runner's child, dies with the runner (``PR_SET_PDEATHSIG``)
and is killed when its turn ends, cancelled or not. Bad input (an endpoint that is no
``HOST:PORT``, a mode that does not exist) is a :class:`ValueError`; a pasta that
cannot start is a :class:`LaunchError`.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

import msgspec
import trio

from sandstream.core import Dispatch

from .errors import LaunchError
from .procs import signal_group
from .spawn import SpawnedProcess, spawn

__all__ = [
    "NETWORK_ALIASES",
    "NETWORK_MODES",
    "PASTA_NETWORKS",
    "Endpoint",
    "NetworkMode",
    "dispatch_endpoints",
    "forwarded_ports",
    "is_forward_address",
    "network_mode",
    "open_namespaces",
    "parse_endpoint",
    "start_pasta",
    "stop_pasta",
]

NetworkMode: TypeAlias = Literal["isolated", "sealed", "host", "none"]
NETWORK_MODES: Final[tuple[NetworkMode, ...]] = ("isolated", "sealed", "host", "none")
NETWORK_ALIASES: Final[dict[str, NetworkMode]] = {"on": "host", "off": "none"}
"""The names of earlier versions, still accepted."""
PASTA_NETWORKS: Final[frozenset[NetworkMode]] = frozenset({"isolated", "sealed"})
"""The modes whose sandboxes a pasta of their turn connects."""

LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
FORWARD_ADDRESSES: Final = frozenset(map(ipaddress.ip_address, ("127.0.0.1", "::1")))

_STARTUP_TIMEOUT: Final = 10.0
_STDERR_LIMIT: Final = 4096


def network_mode(text: str) -> NetworkMode:
    """``isolated``, ``sealed``, ``host`` or ``none`` (or an alias); :class:`ValueError`
    otherwise."""
    name = text.strip().lower()
    name = NETWORK_ALIASES.get(name, name)
    for mode in NETWORK_MODES:
        if mode == name:
            return mode
    names = ", ".join((*NETWORK_MODES, *NETWORK_ALIASES))
    raise ValueError(f"not a sandbox network: {text!r} (one of {names})")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A TCP service a sandbox may reach: ``host`` (a name or an IP address), ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address); :class:`ValueError` if not."""
    head, sep, port_text = text.strip().rpartition(":")
    if not sep or not head:
        raise ValueError(f"not HOST:PORT: {text!r}")
    if head.startswith("[") and head.endswith("]"):
        host = head[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address in brackets: {text!r}") from None
    elif ":" in head or "[" in head or "]" in head:
        raise ValueError(f"an IPv6 address goes in brackets, [::1]:PORT: {text!r}")
    else:
        host = head
        if any(c.isspace() or c in "/@?#" for c in host):
            raise ValueError(f"not a host name: {host!r} in {text!r}")
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not a port (1-65535): {port_text!r} in {text!r}")
    return Endpoint(host.lower(), int(port_text))


def dispatch_endpoints(dispatch: bytes) -> list[Endpoint]:
    """What the dispatch's sandbox calls: its callback (``agent_url``) and its model
    gateway (``gateway.url``), those it has."""
    try:
        decoded = msgspec.json.decode(dispatch, type=Dispatch)
    except msgspec.DecodeError:
        return []
    urls = [decoded.agent_url, *([decoded.gateway.url] if decoded.gateway else [])]
    return [endpoint for url in urls if (endpoint := _url_endpoint(url)) is not None]


def _url_endpoint(text: str) -> Endpoint | None:
    try:
        url = urllib.parse.urlsplit(text)
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None
    return Endpoint(url.hostname, port) if url.hostname else None


def is_forward_address(host: str) -> bool:
    """Where a sandbox reaches pasta's forwards: ``127.0.0.1``, ``::1`` (pasta listens
    on these in the namespace) or a loopback name (``localhost``, which ``/etc/hosts``
    gives those); told without resolving anything."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host) in FORWARD_ADDRESSES
    except ValueError:
        return False


async def forwarded_ports(endpoints: Iterable[Endpoint], ports: Iterable[int] = ()) -> list[int]:
    """The host loopback ports a sandbox's pasta forwards, sorted, each once: those of
    ``endpoints`` on this host (a loopback address, or one of the host's own; the turn's
    callback and model gateway: :func:`dispatch_endpoints`), which a sandbox of its own
    network reaches only through a port forwarded to the host's loopback, and ``ports``,
    more of the host's loopback (the runner's own services).
    Endpoints on other hosts are left out: an ``isolated`` sandbox reaches them as the
    outside world, a ``sealed`` one not at all."""
    forwarded = set(ports)
    for endpoint in endpoints:
        if endpoint.port not in forwarded and await _is_this_host(endpoint.host):
            forwarded.add(endpoint.port)
    return sorted(forwarded)


async def _is_this_host(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        infos = await trio.socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False  # unresolvable here: not this host
    return any(_is_local_address(str(info[4][0])) for info in infos)


def _is_local_address(address: str) -> bool:
    """Loopback, or an address of one of the host's interfaces (it can be bound)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


SEALED_PASTA_OPTIONS: Final = (
    "--no-udp",
    "--no-icmp",
    "--no-dhcp",
    "--no-dhcpv6",
    "--no-ndp",
    "--no-ra",
)
"""What a ``sealed`` pasta turns off on its tap device besides leaving it down: every
handler but TCP's (which its ``-T`` forwards need)."""


def pasta_command(
    pasta: str,
    ports: Sequence[int],
    *,
    outside: bool,
    netns_fd: int,
    userns_fd: int | None,
    pid_fd: int,
) -> list[str]:
    """The ``pasta`` command that connects the network namespace open as ``netns_fd``
    (owned by the user namespace open as ``userns_fd``, which pasta joins too: a
    runner that is not root, whose bwrap made one; ``None``: the runner's own).

    No inbound forward (``-t none -u none``), no gateway mapped to the host
    (``--no-map-gw``), and from the namespace to the host's loopback only TCP
    ``ports`` (``-T``; none: ``-T none``), no UDP (``-U none``). ``outside``
    (``isolated``): pasta gives its tap device the host's addresses and routes
    (``--config-net``), through which the namespace reaches the outside world; not
    (``sealed``): the tap device stays down, so the namespace has no route and no
    address but its loopback, and its handlers are off (:data:`SEALED_PASTA_OPTIONS`);
    the forwards, spliced between the two loopbacks, work the same. ``pid_fd``: where
    pasta writes its pid once the namespace is configured. As root, pasta keeps
    root's identity (it joins a namespace of root's; it drops its capabilities).
    """
    tcp_ns = ",".join(str(port) for port in ports) or "none"
    argv = ["setpriv", "--pdeathsig", "KILL", "--", pasta]
    argv += ["--config-net"] if outside else list(SEALED_PASTA_OPTIONS)
    argv += ["--quiet", "--foreground", "--no-map-gw", "-t", "none", "-u", "none"]
    argv += ["-T", tcp_ns, "-U", "none", "--pid", f"/proc/self/fd/{pid_fd}"]
    if os.geteuid() == 0:
        argv += ["--runas", "0:0"]
    argv += ["--netns", f"/proc/self/fd/{netns_fd}"]
    if userns_fd is None:
        argv.append("--netns-only")
    else:
        argv += ["--userns", f"/proc/self/fd/{userns_fd}"]
    return argv


async def start_pasta(
    pasta: str, init_pid: int, ports: Sequence[int], *, outside: bool
) -> SpawnedProcess:
    """Connect the network namespace of ``init_pid`` (not yet running its command) to
    the host's loopback ``ports`` and, if ``outside``, to the outside world
    (:func:`pasta_command`); return the running pasta once the namespace is configured.

    Raises :class:`LaunchError` if pasta cannot start. Cancellation: pasta is killed
    and reaped before this returns.
    """
    namespaces = open_namespaces(init_pid)
    netns_fd, userns_fd = namespaces
    ready_r, ready_w = os.pipe()
    try:
        argv = pasta_command(
            pasta, ports, outside=outside, netns_fd=netns_fd, userns_fd=userns_fd, pid_fd=ready_w
        )
        process = await spawn(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(*(fd for fd in namespaces if fd is not None), ready_w),
        )
    except OSError as exc:
        os.close(ready_r)
        raise LaunchError(exc.errno, f"cannot start {pasta!r}: {exc.strerror or exc}") from exc
    finally:
        for fd in (*namespaces, ready_w):
            if fd is not None:
                os.close(fd)
    try:
        async with trio.lowlevel.FdStream(ready_r) as ready:
            with trio.move_on_after(_STARTUP_TIMEOUT):
                if await ready.receive_some(64):
                    return process
        raise LaunchError(0, await _failure(process))
    except BaseException:
        with trio.CancelScope(shield=True):
            await stop_pasta(process)
        raise


def open_namespaces(init_pid: int) -> tuple[int, int | None]:
    """The network namespace of ``init_pid``, and its user namespace where it is not
    ours. Raises :class:`LaunchError`."""
    opened: list[int] = []
    try:
        opened.append(os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        user = os.open(f"/proc/{init_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        opened.append(user)
        if os.fstat(user).st_ino == os.stat("/proc/self/ns/user").st_ino:
            os.close(opened.pop())
            return opened[0], None
        return opened[0], user
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        raise LaunchError(exc.errno, f"cannot open the sandbox's network: {exc}") from exc


async def stop_pasta(process: SpawnedProcess) -> None:
    """``SIGKILL`` pasta and reap it; its stderr pipe is closed. Call it shielded."""
    if process.returncode is None:
        signal_group(process.pid, signal.SIGKILL)
        await process.wait()
    if process.stderr is not None:
        await process.stderr.aclose()


async def _failure(process: SpawnedProcess) -> str:
    """Why pasta did not come up: its status and last stderr line (it is killed)."""
    signal_group(process.pid, signal.SIGKILL)
    data = b""
    if process.stderr is not None:
        with trio.move_on_after(_STARTUP_TIMEOUT):
            while chunk := await process.stderr.receive_some(65536):
                data = (data + chunk)[-_STDERR_LIMIT:]
    lines = data.decode("utf-8", "replace").strip().splitlines()
    returncode = await process.wait()
    last = f": {lines[-1]}" if lines else ""
    return f"pasta could not connect the sandbox's network (status {returncode}){last}"
