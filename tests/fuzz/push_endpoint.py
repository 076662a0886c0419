"""Coverage-guided fuzzing of the Web Push endpoint check (server/chat/push/endpoints.py).

    python -m tests.fuzz.push_endpoint [CORPUS_DIR ...] [libFuzzer flags]

An input (:class:`~tests.fuzz.harness.Input`, one option byte; no cut points): byte 0
bit 0 says whether the stream is the endpoint itself (UTF-8, errors replaced, as a
subscription's JSON carries it) or a recipe (:class:`~tests.fuzz.values.Recipe`) that
builds one from the pieces the tricks are made of: schemes, ``user:pass@``, hosts
(IPv4 in dotted, decimal, hex, octal and short forms, IPv6 with IPv4 inside, zones,
names under special-use domains, single labels, IDNs, the allow-list's hosts), ports
and paths. :func:`check` asserts that :meth:`EndpointPolicy.check` raises
:class:`PushEndpointRefusedError` with a known reason and nothing else, and that what it
accepts keeps the rules by a reference of its own: ``https`` unless allowed, no user
information, a host that is an allowed one, a public address (the IANA special-purpose
registries' ranges, :data:`INNER`) or a dotted name outside the special-use domains that
no resolver reads as an address (``inet_aton``); that checking its URL again gives the
same endpoint; and that the request pinned to an address goes to that address with the
name as its ``Host`` and TLS server name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterator
from typing import Final

import atheris
import httpx

with atheris.instrument_imports(include=["sandstream.server.chat.push.endpoints"]):
    from sandstream.server.chat.push.endpoints import (
        SPECIAL_USE_DOMAINS,
        CheckedEndpoint,
        EndpointPolicy,
        pinned_request,
    )
    from sandstream.server.chat.push.errors import PushEndpointRefusedError

from tests.fuzz.harness import Input, fuzz
from tests.fuzz.values import Recipe

__all__ = ["INNER", "EndpointMismatch", "check", "generate"]

ALLOWED: Final = ("push.corp.example:8443", "10.9.8.7", "[fd00::7]:9000")
POLICY: Final = EndpointPolicy(ALLOWED)
REASONS: Final = frozenset(
    {"not-a-url", "not-https", "userinfo", "non-canonical-address", "single-label-name",
     "invalid-host-name",
     "special-use-name", "not-public"}
)  # fmt: skip
INNER: Final = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "::/96", "64:ff9b:1::/48",
        "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10",
        "fec0::/10", "ff00::/8",
    )
)  # fmt: skip
"""The ranges no push may reach, from the IANA special-purpose address registries (and
multicast): the reference :func:`check` holds accepted addresses to. An IPv6 address
with an IPv4 address inside (mapped ``::ffff:0:0/96``, NAT64 ``64:ff9b::/96``, 6to4
``2002::/16``) is held to the IPv4 address's range."""
_EMBEDDING: Final = {
    ipaddress.IPv6Network("::ffff:0:0/96"): 0,
    ipaddress.IPv6Network("64:ff9b::/96"): 0,
    ipaddress.IPv6Network("2002::/16"): 80,
}
"""IPv6 ranges that carry an IPv4 address, and its bit offset from the right."""
_CLIENT: Final = httpx.AsyncClient()
_PUBLIC: Final = ipaddress.ip_address("192.0.2.1")  # any address: the pin is what is checked


class EndpointMismatch(AssertionError):
    """The check accepted an endpoint that breaks a rule, or failed in another way."""


def _inner(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return True
        for net, shift in _EMBEDDING.items():
            if address in net:
                return _inner(ipaddress.IPv4Address(int(address) >> shift & 0xFFFFFFFF))
    return any(address in net for net in INNER if net.version == address.version)


def _allowed(host: str, port: int) -> bool:
    """Whether :data:`ALLOWED` names ``host`` (any case, a final dot or not, an address
    however written) on ``port``."""
    bare = host.lower().removesuffix(".")
    with contextlib.suppress(ValueError):
        bare = str(ipaddress.ip_address(bare))
    return (bare, port) in {("push.corp.example", 8443), ("fd00::7", 9000)} or bare == "10.9.8.7"


def _reads_as_address(host: str) -> bool:
    """Whether a resolver (glibc's ``inet_aton``) reads ``host`` as an IPv4 address."""
    try:
        socket.inet_aton(host)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


def check(data: bytes) -> None:
    case = Input.decode(data, 1)
    endpoint = (
        generate(Recipe(case.stream))
        if case.options[0] & 1
        else case.stream.decode("utf-8", "replace")
    )
    try:
        checked = POLICY.check(endpoint)
    except PushEndpointRefusedError as refused:
        if refused.reason not in REASONS:
            raise EndpointMismatch(f"{endpoint!r}: unknown reason {refused.reason!r}") from None
        return
    _check_rules(endpoint, checked)
    _check_round_trip(endpoint, checked)


def _check_rules(endpoint: str, checked: CheckedEndpoint) -> None:
    """``checked`` keeps the rules, by the reference's reading."""
    url, host, port = checked.url, checked.host, checked.port
    allowed = _allowed(host, port)
    if checked.allowed != allowed:
        raise EndpointMismatch(f"{endpoint!r}: allowed is {checked.allowed}, want {allowed}")
    if url.userinfo:
        raise EndpointMismatch(f"{endpoint!r} accepted with user information")
    if url.scheme != "https" and not allowed:
        raise EndpointMismatch(f"{endpoint!r} accepted as {url.scheme}")
    if not allowed:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if not re.fullmatch(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?", host, re.IGNORECASE):
                raise EndpointMismatch(f"{endpoint!r}: {host!r} is not a host name") from None
            labels = host.lower().removesuffix(".").split(".")
            if len(labels) < 2 or any(".".join(labels[-n:]) in SPECIAL_USE_DOMAINS for n in (1, 2)):
                raise EndpointMismatch(f"{endpoint!r}: the name {host!r} is refused") from None
            if _reads_as_address(host.removesuffix(".")):
                raise EndpointMismatch(f"{endpoint!r}: {host!r} reads as an address") from None
        else:
            if _inner(address):
                raise EndpointMismatch(f"{endpoint!r}: {address} is an inner address")


def _check_round_trip(endpoint: str, checked: CheckedEndpoint) -> None:
    """Its URL checks the same again; the request pinned to an address goes there,
    naming the host."""
    url, host, port = checked.url, checked.host, checked.port
    again = POLICY.check(str(url))
    if (again.host, again.port, again.allowed) != (host, port, checked.allowed):
        raise EndpointMismatch(f"{endpoint!r} checks differently written back as {url}")
    pin = checked.address or _PUBLIC
    request = pinned_request(_CLIENT, checked, pin, content=b"", headers={})
    if ipaddress.ip_address(request.url.host) != pin:
        raise EndpointMismatch(f"{endpoint!r}: the request goes to {request.url.host}, not {pin}")
    named = f"[{host}]" if ":" in host else host
    expected = named if port == {"https": 443, "http": 80}[url.scheme] else f"{named}:{port}"
    if request.headers["Host"] != expected:
        raise EndpointMismatch(
            f"{endpoint!r}: Host {request.headers['Host']!r} is not {expected!r}"
        )
    if checked.address is None and request.extensions.get("sni_hostname") != host:
        raise EndpointMismatch(f"{endpoint!r}: the TLS server name is not {host!r}")


_V4: Final = ("127.0.0.1", "10.0.0.1", "169.254.169.254", "100.64.0.1", "8.8.8.8", "0.0.0.0",
              "224.0.0.1", "192.168.1.1", "172.16.0.1", "255.255.255.255", "10.9.8.7")  # fmt: skip
_NAMES: Final = (
    "localhost", "push.example.com", "fcm.googleapis.com", "metadata.google.internal",
    "a.local", "x.home.arpa", "push.corp.example", "bücher.de", "xn--bcher-kva.de",
    "metadata", "a..b", "EXAMPLE.COM.", "1.2.3.4.nip.io", "a.test", "b.onion",
)  # fmt: skip
_V6: Final = (
    "::1", "::", "fe80::1", "fd00::7", "fc00::1", "2001:db8::1", "2001:4860:4860::8888",
    "64:ff9b::7f00:1", "64:ff9b::808:808", "::127.0.0.1", "ff02::1", "FD00:0::7",
)  # fmt: skip


def _ipv4(recipe: Recipe) -> str:
    text = str(recipe.pick(*_V4)) if recipe.flag() else str(recipe.number(0, 2**32 - 1))
    address = ipaddress.IPv4Address(int(text) if text.isdigit() else text)
    value, octets = int(address), address.packed
    form = recipe.number(0, 7)
    if form == 0:
        return str(address)
    if form == 1:
        return str(value)
    if form == 2:
        return hex(value)
    if form == 3:
        return ".".join(f"0{o:o}" for o in octets)
    if form == 4:
        return f"{octets[0]}.{value & 0xFFFFFF}"
    if form == 5:
        return f"{octets[0]}.{octets[1]}.{value & 0xFFFF}"
    if form == 6:
        return f"[::ffff:{address}]"
    return f"[{ipaddress.IPv6Address(0x20020000 << 96 | value << 80)}]"  # 6to4


def _host(recipe: Recipe) -> str:
    kind = recipe.number(0, 4)
    if kind == 0:
        return _ipv4(recipe)
    if kind == 1:
        six = recipe.pick(*_V6)
        zone = recipe.pick("", "%25eth0", "%251")
        return f"[{six}{zone}]"
    if kind == 2:
        return str(recipe.pick(*_NAMES))
    if kind == 3:
        return recipe.text(16)
    labels = [recipe.pick("a", "push", "0x7f", "127", "1", "localhost", "internal", "com", "")
              for _ in range(recipe.number(1, 4))]  # fmt: skip
    return ".".join(labels) + str(recipe.pick("", "."))


def generate(recipe: Recipe) -> str:
    """An endpoint URL built from the pieces the tricks are made of."""
    scheme = recipe.pick("https", "http", "HTTPS", "ftp", "", "https:")
    userinfo = recipe.pick("", "", "user:pass@", "u@", "@", ":@")
    host = _host(recipe)
    port = recipe.pick("", "", ":443", ":8443", ":9000", ":80", ":0", ":65536", ":x", ":")
    path = recipe.pick("/push/abc", "", "/", "?q=1", "#f", "/a/../b", "\\x")
    return f"{scheme}://{userinfo}{host}{port}{path}"


def test_one_input(data: bytes) -> None:
    check(data)


def seeds() -> Iterator[bytes]:
    for endpoint in (
        "https://fcm.googleapis.com/fcm/send/abc",
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAA",
        "http://127.0.0.1:8080/push",
        "https://0x7f000001/",
        "https://2130706433/",
        "https://127.1/",
        "https://[::ffff:127.0.0.1]/",
        "https://localhost./",
        "https://169.254.169.254/latest/meta-data/",
        "https://metadata.google.internal/",
        "https://user:pass@push.example.com/",
        "http://push.corp.example:8443/p",
        "https://[fd00::7]:9000/p",
        "https://[fe80::1%25eth0]/",
    ):
        yield Input(b"\0", (), endpoint.encode()).encode()
    for recipe in (b"\0" * 8, b"\x01\x02\x03\x04\x05\x06\x07\x08", bytes(range(40))):
        yield Input(b"\1", (), recipe).encode()


def main() -> None:
    fuzz(test_one_input, seeds)


if __name__ == "__main__":
    main()
