"""Where a Web Push message may go: a subscription's endpoint is an ``https`` URL of a
public host, and the address a message is sent to is one that was checked.

:class:`EndpointPolicy` checks an endpoint twice. When a subscription is registered
(and again before each send), :meth:`EndpointPolicy.check` reads its URL: ``https``, no
``user:password@``, a host that is a dotted name outside the special-use domains
(``localhost``, ``.internal``, ``.local``…) or an IP address written canonically and
public. When a message is sent, :meth:`EndpointPolicy.resolve` looks the name up once
and requires every address it has to be public (:func:`is_public`); the sender then
connects to that address (:func:`pinned_request`), so no second lookup can move it.
The operator's allow-list (``host`` or ``host:port`` entries) lets a private push
service through: an endpoint on an allowed host may be ``http`` and may resolve to any
address.

Bad input: an endpoint that breaks a rule raises :class:`PushEndpointRefusedError`
naming the rule (:attr:`~PushEndpointRefusedError.reason`); an allow-list entry that is
not ``host[:port]`` raises :class:`ValueError`. A name that cannot be looked up raises
:class:`~.errors.PushUnavailableError`. Cancellation: a lookup under way is abandoned.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import httpx
import trio

from .errors import PushEndpointRefusedError, PushUnavailableError

__all__ = [
    "SPECIAL_USE_DOMAINS",
    "AllowedHost",
    "CheckedEndpoint",
    "EndpointPolicy",
    "IPAddress",
    "is_public",
    "pinned_request",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SPECIAL_USE_DOMAINS: Final = frozenset(
    {"localhost", "local", "internal", "intranet", "lan", "home", "corp", "private",
     "invalid", "test", "example", "onion", "alt", "home.arpa", "in-addr.arpa",
     "ip6.arpa"}
)  # fmt: skip
"""Domains no public push service is under (RFC 6761, RFC 6762, RFC 8375, ICANN's
``.internal``, and the names intranets use): a name in one is refused."""

_HOST_NAME: Final = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")
_NUMERIC_LABEL: Final = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.IGNORECASE)
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a public unicast address: not loopback, private
    (RFC 1918, ``fc00::/7``), link-local, shared (``100.64.0.0/10``), multicast,
    unspecified, reserved, documentation…, nor an IPv6 form of an IPv4 address
    (mapped, 6to4, NAT64) that is not public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return False
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
        if address.teredo is not None or address.is_site_local:
            return False
    return address.is_global and not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def _host_key(host: str) -> str:
    """``host`` as an allow-list compares it: lower case, without a final dot or IPv6
    brackets, an address in its canonical form."""
    bare = host.strip().lower().removesuffix(".")
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return bare


@dataclass(frozen=True)
class AllowedHost:
    """One allow-list entry: a host, and the one port it allows (``None``: any)."""

    host: str
    port: int | None

    @classmethod
    def parse(cls, entry: str) -> AllowedHost:
        """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; :class:`ValueError`
        for anything else."""
        text = entry.strip()
        port_text: str | None = None
        if text.startswith("["):
            host, bracket, rest = text[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ValueError(f"{entry!r} is not host[:port]")
            port_text = rest[1:] if rest else None
            if _parsed_address(host) is None:
                raise ValueError(f"{entry!r}: [{host}] is not an IPv6 address")
        elif text.count(":") > 1 and _parsed_address(text) is not None:
            host = text  # an IPv6 address without a port
        else:
            host, colon, port_text_or_empty = text.partition(":")
            port_text = port_text_or_empty if colon else None
            if not _HOST_NAME.fullmatch(host):
                raise ValueError(f"{entry!r} is not host[:port] (an IDN is written in punycode)")
        port: int | None = None
        if port_text is not None:
            if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
                raise ValueError(f"{entry!r}: the port is a number from 1 to 65535")
            port = int(port_text)
        return cls(_host_key(host), port)

    def allows(self, host: str, port: int) -> bool:
        return self.host == _host_key(host) and self.port in (None, port)


@dataclass(frozen=True)
class CheckedEndpoint:
    """An endpoint :meth:`EndpointPolicy.check` accepted: its URL, host (IDNA, an
    IPv6 address without brackets), port, whether the allow-list let it through, and
    its address when the host is one."""

    url: httpx.URL
    host: str
    port: int
    allowed: bool
    address: IPAddress | None


def _refuse(reason: str, detail: str) -> PushEndpointRefusedError:
    return PushEndpointRefusedError(reason, detail)


def _literal(host: str) -> IPAddress | None:
    """The address ``host`` is, or ``None`` for a name; refuses a host that reads as
    a number without being an address written the canonical way (``127.1``,
    ``2130706433``, ``0x7f000001``, ``0177.0.0.1``), since resolvers read those as
    addresses too."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    last = host.removesuffix(".").rsplit(".", 1)[-1]
    if _NUMERIC_LABEL.fullmatch(last):
        raise _refuse(
            "non-canonical-address",
            f"the host {host!r} reads as a number but is not an IP address in canonical form",
        )
    return None


class EndpointPolicy:
    """The rules of the module docstring, with the operator's ``allow_hosts``
    (``host[:port]`` entries, :class:`AllowedHost`)."""

    def __init__(self, allow_hosts: Iterable[str] = ()) -> None:
        self.allow_hosts = tuple(AllowedHost.parse(entry) for entry in allow_hosts)

    def _allowed(self, host: str, port: int) -> bool:
        return any(entry.allows(host, port) for entry in self.allow_hosts)

    def check(self, endpoint: str) -> CheckedEndpoint:
        """The endpoint ``endpoint`` if its URL keeps the rules; raises
        :class:`PushEndpointRefusedError` naming the one it breaks."""
        try:
            url = httpx.URL(endpoint)
            raw_host = url.raw_host  # a host httpx took but cannot give as ASCII raises
        except (httpx.InvalidURL, UnicodeError) as error:
            raise _refuse("not-a-url", f"the endpoint is not a URL: {error}") from None
        if url.scheme not in _DEFAULT_PORTS or not raw_host:
            raise _refuse("not-https", "the endpoint is not an https URL with a host")
        if url.userinfo:
            raise _refuse("userinfo", "the endpoint carries a user name or password")
        host = raw_host.decode("ascii")
        port = url.port or _DEFAULT_PORTS[url.scheme]
        allowed = self._allowed(host, port)
        if url.scheme != "https" and not allowed:
            raise _refuse("not-https", "the endpoint is http, not https")
        address = None if allowed else _literal(host)
        if allowed:
            address = _parsed_address(host)
        elif address is not None:
            if not is_public(address):
                raise _refuse("not-public", f"the address {host} is not a public address")
        else:
            if not _HOST_NAME.fullmatch(host):
                raise _refuse(
                    "invalid-host-name",
                    f"the host {host!r} is not a host name (letters, digits, '-', '_')",
                )
            labels = host.lower().removesuffix(".").split(".")
            if len(labels) < 2 or not all(labels):
                raise _refuse(
                    "single-label-name", f"the host {host!r} is not a fully qualified name"
                )
            for size in (1, 2):
                if ".".join(labels[-size:]) in SPECIAL_USE_DOMAINS:
                    raise _refuse(
                        "special-use-name", f"the host {host!r} is under a special-use domain"
                    )
        return CheckedEndpoint(url, host, port, allowed, address)

    async def resolve(self, endpoint: CheckedEndpoint) -> IPAddress:
        """The address to send to: ``endpoint``'s, or the first its name resolves to,
        every one of which must be public unless its host is allowed. Raises
        :class:`PushEndpointRefusedError` (``not-public``) or, when the name cannot be
        looked up, :class:`~.errors.PushUnavailableError`."""
        if endpoint.address is not None:
            return endpoint.address
        try:
            found = await trio.socket.getaddrinfo(
                endpoint.host, endpoint.port, type=socket.SOCK_STREAM
            )
        except (socket.gaierror, UnicodeError) as error:
            raise PushUnavailableError(
                f"the push service's name {endpoint.host} could not be looked up: {error}"
            ) from None
        addresses = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found]
        if not addresses:
            raise PushUnavailableError(f"the push service's name {endpoint.host} has no address")
        if not endpoint.allowed:
            for address in addresses:
                if not is_public(address):
                    raise _refuse(
                        "not-public",
                        f"the host {endpoint.host} resolves to {address}, not a public address",
                    )
        return addresses[0]


def _parsed_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def pinned_request(
    client: httpx.AsyncClient,
    endpoint: CheckedEndpoint,
    address: IPAddress,
    *,
    content: bytes,
    headers: dict[str, str],
) -> httpx.Request:
    """A ``POST`` of ``content`` to ``endpoint`` that connects to ``address``: the URL
    names the address, the ``Host`` header and the TLS server name (SNI, and the name
    the certificate is checked against) the endpoint's host."""
    default = _DEFAULT_PORTS[endpoint.url.scheme]
    host_header = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    if endpoint.port != default:
        host_header = f"{host_header}:{endpoint.port}"
    extensions = {} if endpoint.address is not None else {"sni_hostname": endpoint.host}
    return client.build_request(
        "POST",
        endpoint.url.copy_with(host=str(address), port=endpoint.port),
        content=content,
        headers={**headers, "Host": host_header},
        extensions=extensions,
    )
