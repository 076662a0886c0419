"""The rules an ``isolated`` sandbox's namespace gets (:mod:`sandstream.server.runner.egress`):
which ranges are refused, what is opened, the ``ip`` batches; the turns that try them
are in ``test_sandbox_network.py``."""

from __future__ import annotations

import errno
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.runner import LaunchError
from sandstream.server.runner.egress import (
    OPEN_PRIORITY,
    REFUSED_RANGES,
    Opening,
    openings,
    parse_range,
    refuse_ranges,
    resolvers,
    rule_batches,
)
from sandstream.server.runner.network import Endpoint


@given(st.ip_addresses())
def test_every_address_that_is_not_global_is_refused(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    refused = any(address in network for network in REFUSED_RANGES)
    if not address.is_global and not address.is_multicast:
        assert refused, address
    if address.is_private or address.is_link_local or address.is_loopback:
        assert refused, address


@pytest.mark.parametrize(
    "text",
    [
        *("169.254.169.254", "10.1.2.3", "172.31.0.1", "192.168.1.1", "100.64.0.1"),
        *("127.0.0.1", "fd00::1", "fe80::1", "::1", "::ffff:10.0.0.1", "0.0.0.0"),
    ],
)
def test_the_red_teams_addresses_are_refused(text: str) -> None:
    address = ipaddress.ip_address(text)
    assert any(address in network for network in REFUSED_RANGES)


@pytest.mark.parametrize("text", ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "100.128.0.1"])
def test_public_addresses_are_not_refused(text: str) -> None:
    address = ipaddress.ip_address(text)
    assert not any(address in network for network in REFUSED_RANGES)


def test_a_range_is_a_cidr_or_an_address() -> None:
    assert parse_range(" 10.20.0.0/16 ") == ipaddress.ip_network("10.20.0.0/16")
    assert parse_range("fd00::5") == ipaddress.ip_network("fd00::5/128")
    for bad in ("10.20.0.1/16", "10.0.0.0/33", "example.com", "", "10.0.0.0/8,"):
        with pytest.raises(ValueError, match="not an address range"):
            parse_range(bad)


@given(st.text(max_size=60))
def test_any_text_is_a_range_or_a_value_error(text: str) -> None:
    try:
        network = parse_range(text)
    except ValueError:
        return
    assert parse_range(str(network)) == network


@given(st.text(max_size=200))
def test_the_resolvers_of_any_text_are_addresses(text: str) -> None:
    for address in resolvers(text):
        assert isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)


def test_the_resolvers_of_a_resolv_conf() -> None:
    conf = "# c\nnameserver 10.0.0.2\nsearch x\nnameserver fe80::1%eth0\nnameserver bad\n"
    assert [str(a) for a in resolvers(conf)] == ["10.0.0.2", "fe80::1"]


def test_an_opening_is_one_rule_before_the_refusals() -> None:
    opening = Opening(ipaddress.ip_network("10.0.0.5/32"), "tcp", 8080)
    assert opening.rule() == (
        f"rule add to 10.0.0.5/32 ipproto tcp dport 8080 lookup main priority {OPEN_PRIORITY}"
    )
    whole = Opening(ipaddress.ip_network("fd00::/8"))
    batches = rule_batches([opening, whole])
    four, six = batches[4].splitlines(), batches[6].splitlines()
    assert four[0] == opening.rule() and six[0] == whole.rule()
    assert all(line.endswith(f"prohibit priority {OPEN_PRIORITY + 1}") for line in four[1:])
    assert len(four[1:]) + len(six[1:]) == len(REFUSED_RANGES)
    assert list(rule_batches([opening, whole], ipv6=False)) == [4]


async def test_what_is_opened() -> None:
    """The allowed ranges whole; this host's resolvers on a refused range, port 53;
    an endpoint on a refused range, its port; loopback and public ones nothing."""
    allowed = [parse_range("192.168.7.0/24"), parse_range("192.168.7.0/24")]
    endpoints = [
        Endpoint("10.9.8.7", 8443),
        Endpoint("127.0.0.1", 80),
        Endpoint("1.1.1.1", 443),
        Endpoint("10.9.8.7", 8443),
        Endpoint("no-such-name.invalid", 80),
    ]
    opened = await openings(endpoints, allowed)
    assert len(set(opened)) == len(opened)  # each once: the kernel refuses a rule twice
    assert opened[0] == Opening(allowed[0])
    assert opened[-1] == Opening(ipaddress.ip_network("10.9.8.7/32"), "tcp", 8443)
    conf = Path("/etc/resolv.conf").read_text()
    expected = [
        Opening(ipaddress.ip_network(address), kind, 53)
        for address in resolvers(conf)
        if not address.is_global and not address.is_loopback
        for kind in ("udp", "tcp")
    ]
    assert opened[1:-1] == list(dict.fromkeys(expected))


async def test_the_rules_go_into_the_namespace_and_refuse_there() -> None:
    """In a network namespace of its own (here ``unshare --net``'s): the openings before
    the refusals; a connect to a refused range fails there with ``EACCES``, one to the
    opened address and port does not; ``ip`` failing (``false`` in its place, or
    missing) is a :class:`LaunchError`, the namespace's fds closed."""
    probe = (
        "import socket\n"
        "for port in (80, 8443):\n"
        "    try: socket.create_connection(('10.9.8.7', port), timeout=1)\n"
        "    except OSError as e: print(port, e.errno)\n"
    )
    sleeper = subprocess.Popen(["unshare", "--net", "sleep", "30"])
    try:
        with trio.fail_after(10):
            while os.readlink(f"/proc/{sleeper.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
                await trio.sleep(0.01)
        opened = [Opening(ipaddress.ip_network("10.9.8.7/32"), "tcp", 8443)]
        await refuse_ranges(sleeper.pid, opened)
        inside = ["nsenter", f"--net=/proc/{sleeper.pid}/ns/net"]
        # the main table's route for it: "unreachable", which a lookup that gets there
        # answers EHOSTUNREACH (without a route, the lookup would go on to the refusals)
        await trio.run_process([*inside, "ip", "route", "add", "unreachable", "10.9.8.7/32"])
        rules = await trio.run_process([*inside, "ip", "-4", "rule"], capture_stdout=True)
        lines = rules.stdout.decode().splitlines()
        assert f"{OPEN_PRIORITY}:\tfrom all to 10.9.8.7 ipproto tcp dport 8443 lookup main" in lines
        assert f"{OPEN_PRIORITY + 1}:\tfrom all to 169.254.0.0/16 prohibit" in lines
        tried = await trio.run_process([*inside, sys.executable, "-c", probe], capture_stdout=True)
        assert tried.stdout.decode().split("\n")[:2] == [
            f"80 {errno.EACCES}",  # refused by its rule
            f"8443 {errno.EHOSTUNREACH}",  # let through to the main table's route
        ]
        before = len(os.listdir("/proc/self/fd"))
        for ip in ("false", "/nonexistent/ip"):
            with pytest.raises(LaunchError, match=r"cannot refuse the non-public ranges"):
                await refuse_ranges(sleeper.pid, [], ip=ip)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        sleeper.kill()
        sleeper.wait()
