"""What a bubblewrap sandbox's network reaches, tried from inside real turns.

A probe runs in the sandbox (as the container itself, or through the real container's
``run_shell`` skill) and connects to what runs on the host's loopback: the runner
that started it, an unauthenticated redis-server, two stand-in model providers (one
allowed with ``--sandbox-allow``) and the turn's own callback; and, for ``sealed``,
beyond it: another machine made for the test (a network namespace behind a veth,
:mod:`tests.support.outside_host`) over TCP and UDP, IPv4 and IPv6, a service of this
host on its address on that link, the resolver of ``/etc/resolv.conf`` and a name.
``isolated`` reaches the callback and the allowed provider of this host and the
resolver, but not the other machine, on a non-public range like a cloud's metadata
service (refused in the sandbox, ``EACCES``: nothing leaves it), unless its range is
allowed (``--sandbox-allow-range``); ``sealed`` the same ports of this host and nothing
else, every other attempt failing at once (refused or unreachable, never a timeout);
``none`` nothing, ``host`` everything; no pasta is left once a turn is over, however it
ended.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shlex
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import psutil
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.support.model_server import ModelServer, start_model_server
from benchmarks.support.redis_server import RedisServer, open_redis_server
from benchmarks.support.runner_process import start_runner_process
from benchmarks.support.workspace import WorkspaceServer
from sandstream.server.runner.egress import AddressRange, parse_range
from sandstream.server.runner.network import (
    Endpoint,
    NetworkMode,
    dispatch_endpoints,
    forwarded_ports,
    is_forward_address,
    network_mode,
    parse_endpoint,
)
from tests.chat.harness import RUNNER_TOKEN
from tests.server.harness import (
    RunnerServer,
    bwrap_launcher,
    parse_stream,
    scripted,
    shell,
    start_runner,
)
from tests.support.outside_host import OutsideHost, open_outside_host

PROBE: Final = r"""
import errno, json, socket, sys, urllib.parse

QUERY = bytes.fromhex("5a5a01000001000000000000076578616d706c6503636f6d0000010001")

def attempt(host, port, kind):
    try:
        if kind == "name":
            socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            return "answered resolved"
        if kind == "udp":
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.settimeout(5)
                sock.connect((host, int(port)))
                sock.send(QUERY)
                return "answered " + sock.recv(512)[:2].decode("ascii", "replace")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"PING\r\n" if kind == "redis" else b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            return "answered " + sock.recv(64).split(b"\r\n")[0].decode("ascii", "replace")
    except OSError as exc:
        return "failed " + (errno.errorcode.get(exc.errno or 0) or type(exc).__name__)

as_container = sys.argv[1] == "--container"
targets = dict(line.split("=", 1) for line in open(sys.argv[-1]).read().split())
if as_container:
    url = urllib.parse.urlsplit(json.loads(sys.stdin.readline())["agent_url"])
    targets["callback"] = f"{url.hostname}:{url.port}:http"
report = json.dumps({name: attempt(*t.rsplit(":", 2)) for name, t in targets.items()})
print(json.dumps({"type": "result", "message": report}) if as_container else report)
"""
"""Connects to each ``name=host:port:kind`` of the file it names (``kind``: ``http``,
``redis``, ``udp``: a DNS query sent as one datagram, or ``name``: resolves ``host``)
and reports ``answered <first line>`` (``udp``: the answer's first two bytes) or
``failed <errno name>`` (``failed TimeoutError`` after 5 s without an answer, ``failed
gaierror`` for a name that does not resolve); as the container (``--container``), it
reads the dispatch, tries its callback too and answers with a ``result`` line."""


@dataclass
class Host:
    """What runs on the host's loopback for the probe to try."""

    redis: RedisServer
    allowed: ModelServer
    other: ModelServer

    def targets(self, runner: RunnerServer) -> list[str]:
        return [
            f"runner={_host_port(runner.url)}:http",
            f"redis=127.0.0.1:{self.redis.port}:redis",
            f"allowed={_host_port(self.allowed.base_url)}:http",
            f"other={_host_port(self.other.base_url)}:http",
        ]

    def allow(self) -> list[Endpoint]:
        return [parse_endpoint(_host_port(self.allowed.base_url))]


def _host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


@pytest.fixture
async def host(nursery: trio.Nursery) -> AsyncIterator[Host]:
    async with open_redis_server() as redis:
        yield Host(redis, await start_model_server(nursery), await start_model_server(nursery))


@pytest.fixture
async def outside() -> AsyncIterator[OutsideHost]:
    async with open_outside_host() as machine:
        yield machine


OUTSIDE_NAMES: Final = (
    "outside_tcp4",
    "outside_tcp6",
    "outside_udp4",
    "outside_udp6",
    "outside_link_local",
    "metadata",
    "host_address",
    "resolver",
    "name",
)
NON_PUBLIC_NAMES: Final = OUTSIDE_NAMES[:-2]
"""The targets on a non-public range (all but the resolver and a name)."""
METADATA: Final = "169.254.169.254"
"""Where clouds serve an instance's metadata and credentials."""


def _outside_targets(outside: OutsideHost) -> list[str]:
    """The probe's targets beyond this host's loopback (:data:`OUTSIDE_NAMES`)."""
    return [
        f"outside_tcp4={outside.ipv4}:{outside.port}:http",
        f"outside_tcp6={outside.ipv6}:{outside.port}:http",
        f"outside_udp4={outside.ipv4}:53:udp",
        f"outside_udp6={outside.ipv6}:53:udp",
        f"outside_link_local={outside.link_local}:{outside.port}:http",
        f"metadata={METADATA}:80:http",
        f"host_address={outside.host_ipv4}:{outside.host_port}:http",
        f"resolver={_resolver()}:53:udp",
        "name=pypi.org:443:name",
    ]


def _resolver() -> str:
    """The first resolver of ``/etc/resolv.conf`` (which sandboxes see), as glibc picks."""
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            return words[1]
    return "127.0.0.1"


def _assert_sealed(report: dict[str, str]) -> None:
    """Nothing beyond the forwarded ports answered, and each attempt failed at once:
    unreachable (no route), or refused (a loopback resolver)."""
    for name in OUTSIDE_NAMES:
        if name == "name":
            assert report[name] == "failed gaierror", report
        elif name == "resolver" and ipaddress.ip_address(_resolver()).is_loopback:
            assert report[name] == "failed ECONNREFUSED", report
        else:
            assert report[name] == "failed ENETUNREACH", report


def _assert_non_public_refused(report: dict[str, str]) -> None:
    """Every non-public target failed inside the sandbox (``EACCES``: a rule of its
    namespace, before pasta), its resolver answered (port 53 is opened to it)."""
    for name in NON_PUBLIC_NAMES:
        assert report[name] == "failed EACCES", report
    assert report["resolver"].startswith("answered"), report


def _pastas(parent: psutil.Process | None = None) -> list[psutil.Process]:
    """The pasta processes this test process (or ``parent``) started."""
    found = []
    for process in (parent or psutil.Process()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if process.cmdline()[:1] == ["pasta"]:  # it runs as passt or passt.avx2
                found.append(process)
    return found


async def _probe_as_container(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    host: Host,
    tmp_path: Path,
    network: NetworkMode,
    *,
    more: list[str] | None = None,
    host_ports: list[int] | None = None,
    allowed_ranges: list[AddressRange] | None = None,
) -> dict[str, str]:
    """Run the probe as the container of one turn; its report. ``more``: targets
    besides the host's; ``host_ports``, ``allowed_ranges``: the launcher's."""
    script, targets = tmp_path / "probe.py", tmp_path / "targets"
    script.write_text(PROBE)
    targets.write_text("")
    launcher = bwrap_launcher(
        argv=[sys.executable, str(script), "--container", str(targets)],
        network=network,
        allowed=host.allow(),
        host_ports=host_ports or [],
        allowed_ranges=allowed_ranges or [],
    )
    server = await start_runner(nursery, launcher=launcher)
    targets.write_text("\n".join([*host.targets(server), *(more or [])]))
    async with server.stream(workspace.mint_dispatch()) as response:
        lines = parse_stream(await response.aread())
    await server.wait_records(1)
    assert _pastas() == []
    assert lines[-1]["type"] == "result", lines
    report: dict[str, str] = json.loads(lines[-1]["message"])
    return report


async def test_an_isolated_sandbox_reaches_its_callback_and_what_is_allowed_only(
    nursery: trio.Nursery, workspace: WorkspaceServer, host: Host, tmp_path: Path
) -> None:
    report = await _probe_as_container(nursery, workspace, host, tmp_path, "isolated")
    assert report["callback"].startswith("answered HTTP/1.1"), report
    assert report["allowed"].startswith("answered HTTP/1.1"), report
    for refused in ("runner", "redis", "other"):
        assert report[refused] == "failed ECONNREFUSED", report


async def test_a_sealed_sandbox_reaches_its_callback_and_what_is_allowed_and_nothing_else(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    host: Host,
    outside: OutsideHost,
    tmp_path: Path,
) -> None:
    more = _outside_targets(outside)
    report = await _probe_as_container(nursery, workspace, host, tmp_path, "sealed", more=more)
    assert report["callback"].startswith("answered HTTP/1.1"), report
    assert report["allowed"].startswith("answered HTTP/1.1"), report
    for refused in ("runner", "redis", "other"):
        assert report[refused] == "failed ECONNREFUSED", report
    _assert_sealed(report)


async def test_an_isolated_sandbox_is_refused_the_non_public_ranges_but_those_allowed(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    host: Host,
    outside: OutsideHost,
    tmp_path: Path,
) -> None:
    """The other machine on 198.18.0.0/15 (benchmarking) and link-local 169.254.0.0/16,
    and this host's service on the link, are refused; allowed, they answer, but the
    metadata address, outside the allowed ranges, is still refused."""
    more = _outside_targets(outside)
    report = await _probe_as_container(nursery, workspace, host, tmp_path, "isolated", more=more)
    assert report["callback"].startswith("answered HTTP/1.1"), report
    _assert_non_public_refused(report)
    allowed = [parse_range("198.18.0.0/15"), parse_range(f"{outside.link_local}/32")]
    report = await _probe_as_container(
        nursery, workspace, host, tmp_path, "isolated", more=more, allowed_ranges=allowed
    )
    assert report["callback"].startswith("answered HTTP/1.1"), report
    assert report["outside_tcp4"] == "answered HTTP/1.0 200 outside", report
    assert report["outside_udp4"] == "answered ZZ", report  # the query's id, echoed
    assert report["outside_link_local"] == "answered HTTP/1.0 200 outside", report
    assert report["host_address"] == "answered HTTP/1.0 200 host", report
    assert report["metadata"] == "failed EACCES", report


async def test_the_runners_own_ports_join_the_forwarded_ones(
    nursery: trio.Nursery, workspace: WorkspaceServer, host: Host, tmp_path: Path
) -> None:
    """``host_ports``: a service of the runner's (here the other provider) every sandbox
    reaches, sealed as it is."""
    other_port = parse_endpoint(_host_port(host.other.base_url)).port
    report = await _probe_as_container(
        nursery, workspace, host, tmp_path, "sealed", host_ports=[other_port]
    )
    for answered in ("callback", "allowed", "other"):
        assert report[answered].startswith("answered HTTP/1.1"), report
    assert report["redis"] == "failed ECONNREFUSED", report


async def test_a_sealed_turn_whose_callback_is_on_another_host_fails_to_launch(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """Even when an allowed service on this host has the callback's port."""
    allowed = [Endpoint("127.0.0.1", 8080)]
    launcher = bwrap_launcher(network="sealed", allowed=allowed)
    server = await start_runner(nursery, launcher=launcher)
    dispatch = workspace.mint_dispatch()
    dispatch["agent_url"] = "http://198.51.100.7:8080/api/sandbox/s"  # a documentation address
    async with server.stream(dispatch) as response:
        line = parse_stream(await response.aread())[-1]
    assert line["type"] == "error", line
    assert (
        "198.51.100.7:8080 (its callback or model gateway) is not on this host" in line["message"]
    ), line
    (record,) = await server.wait_records(1)
    assert record.outcome == "launch_failed", record
    assert server.runner.live == 0 and _pastas() == []


async def test_a_sandbox_without_network_reaches_nothing(
    nursery: trio.Nursery, workspace: WorkspaceServer, host: Host, tmp_path: Path
) -> None:
    report = await _probe_as_container(nursery, workspace, host, tmp_path, "none")
    assert set(report) == {"callback", "allowed", "runner", "redis", "other"}
    assert all(outcome.startswith("failed") for outcome in report.values()), report


async def test_a_sandbox_on_the_hosts_network_reaches_every_loopback_service(
    nursery: trio.Nursery, workspace: WorkspaceServer, host: Host, tmp_path: Path
) -> None:
    report = await _probe_as_container(nursery, workspace, host, tmp_path, "host")
    assert report["redis"] == "answered +PONG", report
    for name in ("callback", "allowed", "runner", "other"):
        assert report[name].startswith("answered HTTP/1.1"), report


@pytest.mark.parametrize("network", ["isolated", "sealed"])
async def test_the_run_shell_skill_of_a_turn_of_its_own_network_cannot_reach_the_host(
    nursery: trio.Nursery,
    workspace: WorkspaceServer,
    host: Host,
    outside: OutsideHost,
    tmp_path: Path,
    network: NetworkMode,
) -> None:
    """The real container bootstraps through its callbacks, then its skill probes: of
    this host only what is allowed; beyond it, nothing on a non-public range but the
    resolver (``isolated``) or nothing at all (``sealed``)."""
    script, targets = tmp_path / "probe.py", tmp_path / "targets"
    script.write_text(PROBE)
    launcher = bwrap_launcher(extra_paths=[str(tmp_path)], network=network, allowed=host.allow())
    server = await start_runner(nursery, launcher=launcher)
    targets.write_text("\n".join([*host.targets(server), *_outside_targets(outside)]))
    workspace.config = scripted(shell(f"python3 {script} {targets}"))
    async with server.stream(workspace.mint_dispatch()) as response:
        lines = parse_stream(await response.aread())
    await server.wait_records(1)
    assert workspace.redeemed("env") and workspace.redeemed("config")
    (step,) = [line for line in lines if line["type"] == "step" and line["status"] == "succeeded"]
    report = json.loads(step["result"]["stdout"])
    assert report["allowed"].startswith("answered HTTP/1.1"), report
    for refused in ("runner", "redis", "other"):
        assert report[refused] == "failed ECONNREFUSED", report
    if network == "sealed":
        _assert_sealed(report)
    else:
        _assert_non_public_refused(report)
    assert lines[-1]["type"] == "result", lines[-1]
    assert _pastas() == []


async def test_the_pasta_of_a_turn_ends_with_it_when_the_client_goes(
    nursery: trio.Nursery, workspace: WorkspaceServer, tmp_path: Path
) -> None:
    script = tmp_path / "container.sh"
    step = '{"type":"step","id":"s","name":"wait","status":"running"}'
    script.write_text(f"#!/bin/sh\necho '{step}'\nexec sleep 1005\n")
    script.chmod(0o755)
    server = await start_runner(nursery, launcher=bwrap_launcher(argv=[str(script)]))
    async with server.stream(workspace.mint_dispatch()) as response:
        async for _ in response.aiter_lines():
            break
        (pasta,) = _pastas()
    await server.wait_records(1)
    assert not pasta.is_running()
    assert _pastas() == []


async def test_the_pasta_of_a_turn_dies_with_a_killed_runner(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """``sandstream runner`` killed with ``SIGKILL`` mid-turn: its pasta and sandbox go too."""
    step = '{"type":"step","id":"s","name":"wait","status":"running"}'
    command = shlex.join(["sh", "-c", f"cat >/dev/null; echo {shlex.quote(step)}; exec sleep 1008"])
    runner = await start_runner_process(nursery, "--container-cmd", command, token=RUNNER_TOKEN)
    headers = {"Authorization": f"Bearer {RUNNER_TOKEN}"}
    async with (
        httpx.AsyncClient(base_url=runner.url, headers=headers, timeout=30) as client,
        client.stream("POST", "/stream", json=workspace.mint_dispatch()) as response,
    ):
        async for _ in response.aiter_lines():
            break
        parent = psutil.Process(runner.pid)
        (pasta,) = _pastas(parent)
        with trio.fail_after(10):  # the step is out: its shell is becoming `sleep`
            while not any(p.name() == "sleep" for p in _sandboxed(parent, pasta)):
                await trio.sleep(0.01)
        left = _sandboxed(parent, pasta)
        runner.process.kill()
    await runner.process.wait()
    with trio.fail_after(10):
        while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in [pasta, *left]):
            await trio.sleep(0.01)


def _sandboxed(runner: psutil.Process, pasta: psutil.Process) -> list[psutil.Process]:
    """The runner's descendants but its pasta: the sandbox and what runs in it."""
    return [p for p in runner.children(recursive=True) if p.pid != pasta.pid]


# -- the pieces --------------------------------------------------------------------------------


def test_the_network_modes_and_their_old_names() -> None:
    names = ("isolated", "Sealed", "HOST", "none", "on", "off")
    assert [network_mode(name) for name in names] == [
        "isolated",
        "sealed",
        "host",
        "none",
        "host",
        "none",
    ]
    with pytest.raises(ValueError, match="not a sandbox network: 'open'"):
        network_mode("open")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", Endpoint("127.0.0.1", 8080)),
        ("LocalHost:1", Endpoint("localhost", 1)),
        ("[::1]:65535", Endpoint("::1", 65535)),
        ("models.internal:11434", Endpoint("models.internal", 11434)),
    ],
)
def test_an_endpoint_is_host_and_port(text: str, expected: Endpoint) -> None:
    assert parse_endpoint(text) == expected
    assert parse_endpoint(str(expected)) == expected


@pytest.mark.parametrize(
    "text", ["8080", ":8080", "host:", "host:0", "host:65536", "::1:80", "[x]:80", "a b:1", "h:1e3"]
)
def test_a_bad_endpoint_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"HOST:PORT|port|brackets|host name"):
        parse_endpoint(text)


@given(st.text(max_size=40))
def test_parsing_any_text_gives_an_endpoint_or_a_value_error(text: str) -> None:
    try:
        endpoint = parse_endpoint(text)
    except ValueError:
        return
    assert 0 < endpoint.port < 65536 and endpoint.host
    assert parse_endpoint(str(endpoint)) == endpoint


@given(st.binary(max_size=200))
def test_the_endpoints_of_any_bytes_are_endpoints(data: bytes) -> None:
    for endpoint in dispatch_endpoints(data):
        assert 0 < endpoint.port < 65536


def test_the_callback_of_a_dispatch() -> None:
    dispatch = b'{"agent_url":"https://chat.example:8443/api/sandbox/s","otp_setup":"a",'
    dispatch += b'"otp_run":"b","prompt":"p"}'
    assert dispatch_endpoints(dispatch) == [Endpoint("chat.example", 8443)]
    assert dispatch_endpoints(dispatch.replace(b":8443", b"")) == [Endpoint("chat.example", 443)]


async def test_only_this_hosts_ports_are_forwarded() -> None:
    endpoints = [
        Endpoint("127.0.0.1", 8080),
        Endpoint("localhost", 8080),
        Endpoint("::1", 9000),
        Endpoint("127.0.0.2", 7000),
        Endpoint("192.0.2.200", 6000),  # a documentation address: nobody's
        Endpoint("no-such-host.invalid", 5000),
    ]
    assert await forwarded_ports(endpoints) == [7000, 8080, 9000]
    assert await forwarded_ports(endpoints, [9000, 4000]) == [4000, 7000, 8080, 9000]
    assert await forwarded_ports([], [4000]) == [4000]


def test_the_forward_addresses_are_told_without_resolving() -> None:
    forward = ["localhost", "127.0.0.1", "::1", "0:0::1", "ip6-localhost"]
    assert all(is_forward_address(host) for host in forward)
    others = ["127.0.0.2", "192.0.2.1", "::", "models.internal", "fe80::1"]
    assert not any(is_forward_address(host) for host in others)


def test_a_sealed_launcher_takes_only_loopback_endpoints_and_real_ports() -> None:
    allowed = [Endpoint("localhost", 11434), Endpoint("::1", 8081)]
    assert bwrap_launcher(network="sealed", allowed=allowed).network == "sealed"
    with pytest.raises(ValueError, match=r"sealed reaches only .*models.internal:11434"):
        bwrap_launcher(network="sealed", allowed=[Endpoint("models.internal", 11434)])
    with pytest.raises(ValueError, match=r"host_ports: not a port .*: 0"):
        bwrap_launcher(network="sealed", host_ports=[0])


def test_a_network_of_its_own_without_pasta_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"isolated needs pasta .* apt-get install passt"):
        bwrap_launcher(pasta="/nonexistent/pasta")
    with pytest.raises(ValueError, match=r"sealed needs pasta"):
        bwrap_launcher(network="sealed", pasta="/nonexistent/pasta")
    assert bwrap_launcher(network="host", pasta="/nonexistent/pasta").network == "host"


async def test_a_pasta_that_cannot_start_fails_the_launch_and_leaves_nothing(
    nursery: trio.Nursery, workspace: WorkspaceServer
) -> None:
    """``false`` in pasta's place exits at once without configuring anything."""
    server = await start_runner(nursery, launcher=bwrap_launcher(pasta="false"))
    async with server.stream(workspace.mint_dispatch()) as response:
        line = parse_stream(await response.aread())[-1]
    assert line["type"] == "error" and "pasta could not connect" in line["message"], line
    (record,) = await server.wait_records(1)
    assert record.outcome == "launch_failed", record
    assert server.runner.live == 0 and _pastas() == []
