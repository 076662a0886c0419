"""The Web Push sender's guard, on real sockets: a name that resolves to loopback is
refused at send time; a redirect from an allowed push service is refused, not followed,
even by a client that follows redirects; an endless answer is read to its bound and its
connection closed; a send to an allowed push service by name over HTTPS connects to the
address looked up while TLS and ``Host`` keep the name. And the rules themselves: every
spelling of an IPv4 address (hypothesis), the public and inner ranges, the allow-list."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import socket

import httpx
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from quart import Response
from quart_trio import QuartTrio

from benchmarks.support.redis_server import TlsFiles
from benchmarks.support.servers import serve_app
from sandstream.server.chat.push.client import ANSWER_LIMIT, bounded_send
from sandstream.server.chat.push.endpoints import CheckedEndpoint, EndpointPolicy, is_public
from sandstream.server.chat.push.errors import (
    PushEndpointRefusedError,
    PushRejectedError,
    PushUnavailableError,
)
from sandstream.server.chat.push.webpush import VapidKey, WebPushSender, WebPushSubscription
from tests.chat.push.conftest import QUICK
from tests.chat.push.inner_hosts import AUTH, P256DH, Listener, loopback_names
from tests.support.push_services import start_push_service

KEY = VapidKey.generate()
CONTACT = "mailto:ops@example.org"


async def test_a_name_that_resolves_to_loopback_is_refused_at_send_time() -> None:
    """The lookup at send time: every address of the name must be public."""
    names = loopback_names()
    assert names  # localhost resolves here
    policy = EndpointPolicy()
    template = policy.check("https://push.example.com/push/x")
    for name in names:
        endpoint = dataclasses.replace(template, host=name)
        with pytest.raises(PushEndpointRefusedError) as refused:
            await policy.resolve(endpoint)
        assert refused.value.reason == "not-public"
        assert "127.0.0.1" in str(refused.value) or "::1" in str(refused.value)
    missing = dataclasses.replace(template, host="no-such-host.invalid")
    with pytest.raises(PushUnavailableError):
        await policy.resolve(missing)


async def test_a_redirect_from_an_allowed_push_service_is_not_followed(
    nursery: trio.Nursery, listener: Listener
) -> None:
    app = QuartTrio(__name__)

    @app.post("/push/<token>")
    async def redirect(token: str) -> Response:
        return Response("", 307, {"Location": f"http://127.0.0.1:{listener.port}/push/{token}"})

    origin = await serve_app(nursery, app)
    host = origin.removeprefix("http://")
    subscription = WebPushSubscription(f"{origin}/push/x", P256DH, AUTH)
    async with httpx.AsyncClient(timeout=10.0, follow_redirects=True) as client:
        sender = WebPushSender(client, KEY, CONTACT, policy=QUICK, endpoints=EndpointPolicy([host]))
        with pytest.raises(PushEndpointRefusedError) as refused:
            await sender.send(subscription, b"hello", ttl=60)
    assert refused.value.reason == "redirect"
    assert "307" in str(refused.value)
    assert listener.connections == 0


@dataclasses.dataclass
class EndlessAnswer:
    """A push service answering 400 with a 1 GiB body it streams until the client
    hangs up: how much it wrote then."""

    port: int = 0
    written: int = 0
    hung_up: trio.Event = dataclasses.field(default_factory=trio.Event)


GIB = 1 << 30


async def _serve_endless(nursery: trio.Nursery) -> EndlessAnswer:
    answer = EndlessAnswer()
    chunk = b"x" * 65536

    async def serve(stream: trio.SocketStream) -> None:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n" % GIB
        )
        try:
            while answer.written < GIB:
                await stream.send_all(chunk)
                answer.written += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            answer.hung_up.set()

    [bound] = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    answer.port = bound.socket.getsockname()[1]
    return answer


async def test_an_endless_answer_is_read_to_its_bound(nursery: trio.Nursery) -> None:
    endless = await _serve_endless(nursery)
    origin = f"http://127.0.0.1:{endless.port}"
    async with httpx.AsyncClient(timeout=10.0) as client:
        request = client.build_request("POST", f"{origin}/push/x", content=b"")
        response = await bounded_send(client, request)
        assert response.status_code == 400
        assert len(response.content) == ANSWER_LIMIT  # read to the bound, no further
        with trio.fail_after(30):
            await endless.hung_up.wait()  # and the connection closed
        sender = WebPushSender(
            client,
            KEY,
            CONTACT,
            policy=QUICK,
            endpoints=EndpointPolicy([f"127.0.0.1:{endless.port}"]),
        )
        subscription = WebPushSubscription(f"{origin}/push/x", P256DH, AUTH)
        with pytest.raises(PushRejectedError) as refused:
            await sender.send(subscription, b"hello", ttl=60)
    assert refused.value.status == 400
    assert refused.value.reason == "x" * 500
    assert endless.written < GIB // 16  # the socket buffers' worth, never the body


async def test_a_pinned_https_send_keeps_the_name_for_tls_and_host(
    nursery: trio.Nursery, localhost_tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An allowed push service by name over HTTPS: the sender connects to the address
    it looked up, and the certificate is checked against the name (SNI), which the
    ``Host`` and the VAPID audience carry."""
    tls_files = localhost_tls_files
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))
    service = await start_push_service(
        nursery, tls=(tls_files.server_cert, tls_files.server_key), name="localhost"
    )
    browser = service.subscribe(KEY.application_server_key)
    async with httpx.AsyncClient(timeout=10.0) as client:
        sender = WebPushSender(
            client, KEY, CONTACT, policy=QUICK, endpoints=EndpointPolicy([service.host])
        )
        await sender.send(browser.subscription, b"hello", ttl=60)
    [delivery] = service.delivered_to(browser)
    assert delivery.plaintext == b"hello"


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_an_ipv4_address_is_refused_in_every_spelling_unless_public(value: int) -> None:
    address = ipaddress.IPv4Address(value)
    policy = EndpointPolicy()

    def verdict(host: str) -> str:
        try:
            policy.check(f"https://{host}/push/x")
        except PushEndpointRefusedError as refused:
            return refused.reason
        return "accepted"

    expected = "accepted" if is_public(address) else "not-public"
    assert verdict(str(address)) == expected
    assert verdict(f"[::ffff:{address}]") == expected  # the IPv4-mapped form
    for spelled in (str(value), hex(value), f"{value >> 24}.{value & 0xFFFFFF}"):
        assert verdict(spelled) == "non-canonical-address"


def test_public_addresses_are_public_and_inner_ones_are_not() -> None:
    for text in ("8.8.8.8", "2001:4860:4860::8888", "142.250.0.1"):
        assert is_public(ipaddress.ip_address(text))
    for text in (
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1",
        "255.255.255.255", "192.0.2.1", "::1", "::", "fc00::1", "fd12::1", "fe80::1",
        "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::", "64:ff9b::a00:1",
        "2001::1", "fec0::1", "::127.0.0.1",
    ):  # fmt: skip
        assert not is_public(ipaddress.ip_address(text)), text


def test_an_allow_list_entry_lets_its_host_through_on_its_port_only() -> None:
    policy = EndpointPolicy(["push.corp.example:8443", "[fd00::5]", "10.0.0.7"])
    allowed = policy.check("http://push.corp.example:8443/p")
    assert (allowed.allowed, allowed.port) == (True, 8443)
    with pytest.raises(PushEndpointRefusedError):
        policy.check("http://push.corp.example:8444/p")
    assert policy.check("https://[fd00::5]:9/p").allowed
    assert policy.check("http://10.0.0.7/p").allowed
    assert isinstance(policy.check("https://push.example.com/p"), CheckedEndpoint)
    for bad in ("", "a b", "host:0", "host:65536", "[nope]", "http://host", "host/path"):
        with pytest.raises(ValueError):
            EndpointPolicy([bad])


def test_the_fuzzers_findings_are_refused_with_a_reason() -> None:
    """Found by tests/fuzz/push_endpoint.py: a host that is not a host name was
    accepted as one (``0.1]``); an IDNA host whose text httpx cannot decode raised
    idna's error instead of a refusal."""
    policy = EndpointPolicy()
    for endpoint in ("https://0.1]/", "https://xn--bcher-kva.de\\x", "https://a.b\\c.com/"):
        with pytest.raises(PushEndpointRefusedError) as refused:
            policy.check(endpoint)
        assert refused.value.reason == "invalid-host-name"
    # An IPv6 zone that is not ASCII: httpx takes the URL but cannot give its host.
    with pytest.raises(PushEndpointRefusedError) as refused:
        policy.check("https://[::fff%5b\ufffdd00f:127.0.0.1]/")
    assert refused.value.reason == "not-a-url"
