"""Web Push cannot be aimed inward: every trick to make the server send to a loopback
listener (an address in any spelling, a name that resolves to it, link-local and cloud
metadata hosts, credentials in the URL, a redirect from an allowed push service) is
refused with a clear outcome and the listener is never reached; an endless answer is
read to its bound; a workspace holds a bounded number of subscriptions. Real sockets:
a real chat server (the chat test harness) on SQLite and PostgreSQL, the loopback push
service as the operator's allow-listed private push service."""

from __future__ import annotations

import base64
import dataclasses
import functools
import ipaddress
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st
from quart import Response
from quart_trio import QuartTrio

from benchmarks.support.redis_server import TlsFiles
from benchmarks.support.servers import serve_app
from sandstream.server.chat.model.ids import now_ms
from sandstream.server.chat.model.records import PushSubscription
from sandstream.server.chat.push.client import ANSWER_LIMIT, bounded_send
from sandstream.server.chat.push.endpoints import CheckedEndpoint, EndpointPolicy, is_public
from sandstream.server.chat.push.errors import (
    PushEndpointRefusedError,
    PushRejectedError,
    PushUnavailableError,
)
from sandstream.server.chat.push.settings import PushSettings
from sandstream.server.chat.push.webpush import VapidKey, WebPushSender, WebPushSubscription
from sandstream.server.chat.store.sql.push import record_turn_push
from tests.chat.harness import WORKSPACE, ChatServer, plans, sleeping, start_chat_server
from tests.chat.push.conftest import QUICK
from tests.chat.push.devices import pushes_ended, subscribe
from tests.support.push_services import LoopbackPushService, start_push_service

pytestmark = pytest.mark.usefixtures("chat_database")

KEY = VapidKey.generate()
CONTACT = "mailto:ops@example.org"
_P256DH = base64.urlsafe_b64encode(
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
).decode()
_AUTH = base64.urlsafe_b64encode(b"0123456789abcdef").decode()


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


@pytest.fixture
async def listener(nursery: trio.Nursery) -> Listener:
    """What the server must never reach: a listener on 127.0.0.1 and [::1], one port."""
    found = Listener()
    found.port = await _listen(nursery, "127.0.0.1", 0, found)
    await _listen(nursery, "::1", found.port, found)
    return found


@pytest.fixture
async def server(
    nursery: trio.Nursery, tmp_path: Path, push_service: LoopbackPushService
) -> ChatServer:
    key_file = tmp_path / "vapid.pem"
    key_file.write_bytes(KEY.private_pem())
    settings = PushSettings(
        vapid_key_file=key_file,
        delay=0.0,
        poll_interval=0.05,
        allow_hosts=frozenset({push_service.host}),
    )
    return await start_chat_server(
        nursery, tmp_path / "data", agent=plans(slow=sleeping(0.5)), push=settings
    )


@pytest.fixture
async def api(server: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as client:
        yield client


def _loopback_names() -> list[str]:
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


def _tricks(port: int) -> dict[str, str]:
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
    for name in _loopback_names():
        tricks[f"https://{name}:{port}/push/x"] = "single-label-name"
    return tricks


def _web_push(endpoint: str) -> dict[str, object]:
    return {
        "workspaceId": WORKSPACE,
        "webPush": {"endpoint": endpoint, "keys": {"p256dh": _P256DH, "auth": _AUTH}},
    }


async def test_every_way_to_name_an_inner_host_is_refused_when_registered(
    api: httpx.AsyncClient, listener: Listener
) -> None:
    for endpoint, reason in _tricks(listener.port).items():
        answer = await api.post("/api/assistant/push/subscriptions", json=_web_push(endpoint))
        assert answer.status_code == 422, (endpoint, answer.text)
        problem = answer.json()
        assert problem["type"] == "urn:sandstream:problem:invalid-body"
        assert problem.get("reason") == reason, (endpoint, problem)
        assert reason in problem["detail"]
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert listed.json() == {"subscriptions": []}
    assert listener.connections == 0


async def test_subscriptions_stored_before_are_checked_again_when_pushed(
    server: ChatServer,
    api: httpx.AsyncClient,
    push_service: LoopbackPushService,
    listener: Listener,
) -> None:
    """Subscriptions already in the store (registered before the rules, or by another
    replica's allow-list) are checked again at each send: refused, not removed, and
    the allowed device still gets its push."""
    browser, _ = await subscribe(api, push_service)
    tricks = list(_tricks(listener.port))
    for n, endpoint in enumerate(tricks):
        await server.store.add_push_subscription(
            PushSubscription(
                id=f"dev_old{n}",
                workspace_id=WORKSPACE,
                kind="webpush",
                address=endpoint,
                p256dh=_P256DH,
                auth=_AUTH,
                created_at=now_ms(),
            )
        )
    chat = await server.store.create_chat(
        workspace_id=WORKSPACE, workflow_id=None, title="task", now=now_ms()
    )
    ended = functools.partial(
        record_turn_push, chat_id=chat.id, turn_id=None, status="complete", now=now_ms()
    )
    await server.store.db.write(ended)  # the alert of a turn that ended
    assert await pushes_ended(server.store, 1) == [("alert", "sent")]
    assert len(push_service.delivered_to(browser)) == 1
    states = await server.store.db.read(
        lambda conn: dict(
            conn.execute("SELECT subscription_id, state FROM push_deliveries").fetchall()
        )
    )
    assert {states[f"dev_old{n}"] for n in range(len(tricks))} == {"failed"}
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert len(listed.json()["subscriptions"]) == len(tricks) + 1  # refused, not removed
    assert listener.connections == 0


async def test_a_name_that_resolves_to_loopback_is_refused_at_send_time() -> None:
    """The lookup at send time: every address of the name must be public."""
    names = _loopback_names()
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
    subscription = WebPushSubscription(f"{origin}/push/x", _P256DH, _AUTH)
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
        subscription = WebPushSubscription(f"{origin}/push/x", _P256DH, _AUTH)
        with pytest.raises(PushRejectedError) as refused:
            await sender.send(subscription, b"hello", ttl=60)
    assert refused.value.status == 400
    assert refused.value.reason == "x" * 500
    assert endless.written < GIB // 16  # the socket buffers' worth, never the body


async def test_a_workspace_holds_at_most_its_subscriptions(
    api: httpx.AsyncClient, server: ChatServer
) -> None:
    cap = server.service.settings.push.max_subscriptions
    statuses: dict[int, int] = {}
    problem: dict[str, object] = {}
    for n in range(2000):
        endpoint = f"https://push.example.com/push/{n}"
        answer = await api.post("/api/assistant/push/subscriptions", json=_web_push(endpoint))
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        if answer.status_code == 409:
            problem = answer.json()
    assert statuses == {201: cap, 409: 2000 - cap}
    assert problem["type"] == "urn:sandstream:problem:push-subscription-limit"
    assert problem["limit"] == cap
    again = await api.post(
        "/api/assistant/push/subscriptions", json=_web_push("https://push.example.com/push/0")
    )
    assert again.status_code == 201  # a device it holds registers again
    listed = await api.get("/api/assistant/push/subscriptions", params={"workspaceId": WORKSPACE})
    assert len(listed.json()["subscriptions"]) == cap
    other = await api.post(
        "/api/assistant/push/subscriptions",
        json={**_web_push("https://push.example.com/push/x"), "workspaceId": "ws_other"},
    )
    assert other.status_code == 201  # another workspace has its own


async def test_a_pinned_https_send_keeps_the_name_for_tls_and_host(
    nursery: trio.Nursery, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An allowed push service by name over HTTPS: the sender connects to the address
    it looked up, and the certificate is checked against the name (SNI), which the
    ``Host`` and the VAPID audience carry."""
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
