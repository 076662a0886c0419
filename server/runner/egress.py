"""What an ``isolated`` sandbox may not reach beyond this host: the non-public ranges.

pasta relays a sandbox's connections to any address as the host, so, left alone, a
sandbox would reach the host's local network, its cloud's metadata service
(169.254.169.254) and whatever the host reaches on a private range. Once its pasta has
configured the namespace, and before the container gets its dispatch,
:func:`refuse_ranges` adds policy-routing rules there that refuse every destination in
:data:`REFUSED_RANGES` (``prohibit``: ``connect`` and ``send`` fail with ``EACCES``
inside the namespace, no packet reaches pasta), except, by rules looked up before
them, the :class:`Opening` s of :func:`openings`: the operator's
``--sandbox-allow-range`` s, the resolvers of ``/etc/resolv.conf`` (port 53) and the
services a turn must reach on another host (its callback, its model gateway,
``--sandbox-allow``: their addresses, TCP, their port). The namespace's own addresses
and loopback (where pasta's forwards listen) are looked up before any rule (the
``local`` table) and stay reachable. The rules come after pasta because the kernel
checks a new route's gateway through them: pasta's default route, whose gateway is on
a private range, would be refused. The sandbox has no capability to change them; they
go with its namespace.

Bad input: a range that is no CIDR is a :class:`ValueError`; ``ip`` failing is a
:class:`LaunchError`. Cancellation: ``ip`` is killed and reaped before this raises.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias

import trio

from .errors import LaunchError
from .network import Endpoint, open_namespaces

__all__ = [
    "REFUSED_RANGES",
    "AddressRange",
    "Opening",
    "openings",
    "parse_range",
    "refuse_ranges",
    "resolvers",
    "rule_batches",
]

AddressRange: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

REFUSED_RANGES: Final[tuple[AddressRange, ...]] = tuple(
    ipaddress.ip_network(text)
    for text in (
        "0.0.0.0/8",  # this network
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # the host's loopback
        "169.254.0.0/16",  # link-local: cloud metadata services
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "240.0.0.0/4",  # reserved, and the limited broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::ffff:0:0/96",  # IPv4-mapped (the IPv4 rules hold too)
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4, which carries IPv4 addresses
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
    )
)
"""What no ``isolated`` sandbox reaches unless opened: every IANA special-purpose range
that is not globally reachable (a superset of what :attr:`ipaddress.IPv4Address.is_global`
calls not global), the private and link-local ones first among them."""

OPEN_PRIORITY: Final = 9000
"""The rules of the openings; the refusals follow at ``OPEN_PRIORITY + 1``."""
RESOLVER_PORT: Final = 53
RESOLV_CONF: Final = Path("/etc/resolv.conf")
"""The resolvers a sandbox uses (it sees this file)."""
IPV6_ADDRESSES: Final = Path("/proc/net/if_inet6")
"""Absent where the kernel has no IPv6 (``ipv6.disable=1``): no IPv6 rule to add."""


def parse_range(text: str) -> AddressRange:
    """A CIDR (``10.1.0.0/16``, ``fd00::/8``) or one address; :class:`ValueError` if not,
    or if it has host bits set (``10.1.2.3/16``)."""
    try:
        return ipaddress.ip_network(text.strip())
    except ValueError as exc:
        raise ValueError(f"not an address range (CIDR, e.g. 10.1.0.0/16): {text!r}") from exc


@dataclass(frozen=True, slots=True)
class Opening:
    """Destinations let through the refusals: ``network``, and only ``protocol`` to
    ``port`` when they are given."""

    network: AddressRange
    protocol: Literal["tcp", "udp"] | None = None
    port: int | None = None

    def rule(self) -> str:
        """The ``ip rule`` command (without ``ip``) that lets it through."""
        words = ["rule", "add", "to", str(self.network)]
        if self.protocol is not None:
            words += ["ipproto", self.protocol]
        if self.port is not None:
            words += ["dport", str(self.port)]
        return " ".join([*words, "lookup", "main", "priority", str(OPEN_PRIORITY)])


def resolvers(text: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The ``nameserver`` addresses of a ``resolv.conf`` (zones dropped, bad ones skipped)."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                found.append(ipaddress.ip_address(words[1].split("%", 1)[0]))
            except ValueError:
                continue
    return found


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(address in network for network in REFUSED_RANGES)


async def openings(
    endpoints: Iterable[Endpoint], allowed_ranges: Sequence[AddressRange]
) -> list[Opening]:
    """What an ``isolated`` sandbox reaches in :data:`REFUSED_RANGES`: ``allowed_ranges``
    whole, the resolvers of ``/etc/resolv.conf`` on port 53 (UDP and TCP) and each
    address of ``endpoints`` (resolved now; a name that does not resolve opens nothing)
    on its TCP port; each once. Loopback addresses open nothing: a sandbox reaches this host's
    loopback through pasta's forwards alone. Cancellation: raises, nothing to undo."""
    opened = [Opening(network) for network in allowed_ranges]
    try:
        conf = RESOLV_CONF.read_text(encoding="utf-8", errors="replace")
    except OSError:
        conf = ""
    for address in resolvers(conf):
        if _refused(address) and not address.is_loopback:
            network = ipaddress.ip_network(address)
            opened += [Opening(network, kind, RESOLVER_PORT) for kind in ("udp", "tcp")]
    for endpoint in endpoints:
        try:
            infos = await trio.socket.getaddrinfo(endpoint.host, None, type=socket.SOCK_STREAM)
        except OSError:
            continue
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if _refused(address) and not address.is_loopback:
                opening = Opening(ipaddress.ip_network(address), "tcp", endpoint.port)
                opened.append(opening)
    return list(dict.fromkeys(opened))  # the kernel refuses a rule twice


def rule_batches(opened: Sequence[Opening], *, ipv6: bool = True) -> dict[int, str]:
    """``ip -batch`` input per IP version (4, and 6 unless not ``ipv6``): the openings,
    then the refusals."""
    batches = {}
    for version in (4, 6) if ipv6 else (4,):
        lines = [o.rule() for o in opened if o.network.version == version]
        lines += [
            f"rule add to {network} prohibit priority {OPEN_PRIORITY + 1}"
            for network in REFUSED_RANGES
            if network.version == version
        ]
        batches[version] = "".join(f"{line}\n" for line in lines)
    return batches


async def refuse_ranges(init_pid: int, opened: Sequence[Opening], *, ip: str = "ip") -> None:
    """Add the rules of :func:`rule_batches` to the network namespace of ``init_pid``
    (joining its user namespace too where it is not ours: a runner that is not root;
    IPv6's only where the kernel has IPv6).
    Raises :class:`LaunchError` if ``ip`` (run through ``nsenter``) fails."""
    netns_fd, userns_fd = open_namespaces(init_pid)
    fds = [fd for fd in (netns_fd, userns_fd) if fd is not None]
    enter = ["nsenter", f"--net=/proc/self/fd/{netns_fd}"]
    if userns_fd is not None:
        enter += [f"--user=/proc/self/fd/{userns_fd}", "--preserve-credentials"]
    try:
        for version, batch in rule_batches(opened, ipv6=IPV6_ADDRESSES.exists()).items():
            try:
                done = await trio.run_process(
                    [*enter, ip, f"-{version}", "-batch", "-"],
                    stdin=batch.encode(),
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    pass_fds=fds,
                )
            except OSError as exc:
                message = f"cannot start nsenter/{ip}: {exc.strerror or exc}"
                raise LaunchError(exc.errno, message) from exc
            if done.returncode != 0:
                lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
                last = f": {lines[-1]}" if lines else ""
                raise LaunchError(
                    0,
                    f"cannot refuse the non-public ranges in the sandbox's network "
                    f"(ip -{version}, status {done.returncode}){last}",
                )
    finally:
        for fd in fds:
            os.close(fd)
