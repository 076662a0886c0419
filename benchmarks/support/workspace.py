"""A stand-in workspace API for tests and benchmarks: ``/env``, ``/config``, ``/results``
over real HTTP.

It enforces the token rules of the real workspace API: each token is minted for one
purpose (``setup`` → ``GET /env``, ``run`` → ``GET /config``, ``upload`` →
``POST /results``), stored hashed, expires, and is single-use (redeemed on first
presentation, even if the request then fails). A wrong, expired, replayed or
wrong-purpose token gets 401 with a problem+json body. A redeemed token is accepted
again with the ``Idempotency-Key`` of its redemption (a retried callback); a repeated
``/results`` answers the first upload's receipt and stores nothing more.

Usage (in a trio nursery, e.g. a pytest-trio test)::

    ws = await start_workspace(nursery, config=ConfigResponse(agent=ScriptedAgent()))
    dispatch = ws.mint_dispatch("hello")       # the JSON dict the runner would send
    ...
    assert ws.uploads[0].path == "report.md"
    assert ws.redeemed("results") is False    # e.g. after a cancelled run

Routes live under :attr:`WorkspaceServer.prefix` (``/api/sandbox/<session>``), so
``agent_url`` has a path, as in production.

By hand (dev checkout), to run containers against it from another terminal::

    .venv/bin/python -m benchmarks.support.workspace --config config.json \\
        --dispatches 3 > dispatches.ndjson
    head -1 dispatches.ndjson | .venv/bin/python -m sandstream.container
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio

from sandstream.core.schemas import (
    ChatTurn,
    ConfigResponse,
    EnvResponse,
    ResultFile,
    ResultsReceipt,
)

from .servers import serve_app

__all__ = [
    "LIFETIMES",
    "Purpose",
    "Redemption",
    "TokenStore",
    "Upload",
    "WorkspaceServer",
    "start_workspace",
]

Purpose = Literal["setup", "run", "upload"]

LIFETIMES: dict[Purpose, float] = {"setup": 600.0, "run": 600.0, "upload": 3600.0}
"""Token lifetimes in seconds (seed 003: 10 min / 10 min / 60 min)."""

_ROUTE_PURPOSE: dict[str, Purpose] = {"env": "setup", "config": "run", "results": "upload"}


@dataclass
class _Token:
    purpose: Purpose
    expires_at: float
    used: bool = False
    key: str | None = None


class TokenStore:
    """One-time tokens, stored as SHA-256 hashes, with expiry and single use."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tokens: dict[str, _Token] = {}

    @staticmethod
    def _hash(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def mint(self, purpose: Purpose, ttl: float | None = None) -> str:
        """A new plaintext token for ``purpose``, valid ``ttl`` seconds (default lifetime)."""
        token = f"otp_{purpose}_{secrets.token_urlsafe(24)}"
        lifetime = LIFETIMES[purpose] if ttl is None else ttl
        self._tokens[self._hash(token)] = _Token(purpose, self._clock() + lifetime)
        return token

    def expire(self, token: str) -> None:
        """Make ``token`` expired now."""
        self._tokens[self._hash(token)].expires_at = self._clock() - 1

    def check(self, token: str | None, purpose: Purpose) -> str | None:
        """Check ``token`` for ``purpose`` without consuming it (used or not, unexpired);
        return ``None`` if valid, else the reason."""
        entry = self._tokens.get(self._hash(token)) if token else None
        if entry is None:
            return "unknown token"
        if entry.purpose != purpose:
            return f"token is for {entry.purpose}, not {purpose}"
        if self._clock() >= entry.expires_at:
            return "token expired"
        return None

    def redeem(self, token: str | None, purpose: Purpose, key: str | None = None) -> str | None:
        """Consume ``token`` for ``purpose`` (or accept it again with the idempotency
        ``key`` it was redeemed with); return ``None`` if valid, else the reason."""
        if not token:
            return "missing token"
        entry = self._tokens.get(self._hash(token))
        if entry is None:
            return "unknown token"
        if entry.purpose != purpose:
            return f"token is for {entry.purpose}, not {purpose}"
        if entry.used and (key is None or key != entry.key):
            return "token already used"
        entry.used, entry.key = True, key
        if self._clock() >= entry.expires_at:
            return "token expired"
        return None


@dataclass(frozen=True)
class Upload:
    """One file received on ``POST /results``."""

    path: str
    content: bytes
    content_type: str


@dataclass(frozen=True)
class Redemption:
    """One callback request: the route, the HTTP status answered and why if refused."""

    route: str
    status: int
    reason: str | None = None


Payload = EnvResponse | ConfigResponse | Mapping[str, Any] | bytes


@dataclass
class WorkspaceServer:
    """The callback API of one workspace; the attributes are what tests set and read.

    ``env`` and ``config`` are served as JSON (a msgspec Struct, a mapping, or raw
    bytes for malformed-body tests). ``status`` forces a route's status after the
    token is redeemed (e.g. ``{"env": 500}``); ``hang`` lists routes that never
    answer. ``attachments`` maps attachment ids to the bytes ``GET …/attachments/{id}``
    serves to a run token (checked, not consumed). ``uploads`` and ``redemptions``
    record what happened.
    """

    env: Payload = field(default_factory=EnvResponse)
    config: Payload = field(default_factory=ConfigResponse)
    prefix: str = "/api/sandbox/test-session"
    status: dict[str, int] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    tokens: TokenStore = field(default_factory=TokenStore)
    uploads: list[Upload] = field(default_factory=list)
    redemptions: list[Redemption] = field(default_factory=list)
    base_url: str = ""
    echo: bool = False
    attachments: dict[str, bytes] = field(default_factory=dict)
    _receipts: dict[str, ResultsReceipt] = field(default_factory=dict, init=False, repr=False)

    @property
    def url(self) -> str:
        """The ``agent_url`` to dispatch with (base URL plus the session prefix)."""
        if not self.base_url:
            raise RuntimeError("the workspace server is not started")
        return self.base_url + self.prefix

    def mint_dispatch(
        self,
        prompt: str = "hello",
        *,
        upload: bool = True,
        conversation: list[ChatTurn] | None = None,
        ttl: Mapping[Purpose, float] | None = None,
    ) -> dict[str, Any]:
        """Mint fresh tokens and return the dispatch JSON object for this workspace."""
        ttl = ttl or {}
        dispatch: dict[str, Any] = {
            "agent_url": self.url,
            "otp_setup": self.tokens.mint("setup", ttl.get("setup")),
            "otp_run": self.tokens.mint("run", ttl.get("run")),
            "prompt": prompt,
        }
        if upload:
            dispatch["otp_upload"] = self.tokens.mint("upload", ttl.get("upload"))
        if conversation is not None:
            dispatch["conversation"] = msgspec.to_builtins(conversation)
        return dispatch

    def redeemed(self, route: str) -> bool:
        """Whether a valid token was presented on ``route`` (``env``/``config``/``results``)."""
        return any(r.route == route and r.reason is None for r in self.redemptions)

    def requests(self, route: str) -> list[Redemption]:
        """Every request made to ``route``."""
        return [r for r in self.redemptions if r.route == route]

    def app(self) -> QuartTrio:
        """The Quart-Trio application serving this workspace."""
        app = QuartTrio(__name__)
        app.config["MAX_CONTENT_LENGTH"] = 64 * 1024 * 1024

        @app.get(f"{self.prefix}/env")
        async def env() -> Response:
            return await self._serve("env", self.env)

        @app.get(f"{self.prefix}/config")
        async def config() -> Response:
            return await self._serve("config", self.config)

        @app.get(f"{self.prefix}/attachments/<file_id>")
        async def attachment(file_id: str) -> Response:
            header = request.headers.get("Authorization", "")
            reason = self.tokens.check(header[7:] if header.startswith("Bearer ") else None, "run")
            self.redemptions.append(Redemption("attachments", 401 if reason else 200, reason))
            if reason is not None:
                return _problem(401, "Unauthorized", reason)
            if file_id not in self.attachments:
                return _problem(404, "Not found", f"no attachment {file_id}")
            return Response(self.attachments[file_id], content_type="application/octet-stream")

        @app.post(f"{self.prefix}/results")
        async def results() -> Response:
            refused = await self._check("results")
            if refused is not None:
                return refused
            key = request.headers.get("Idempotency-Key")
            if key is not None and key in self._receipts:
                return _json(msgspec.to_builtins(self._receipts[key]), 201)
            files = await request.files
            stored: list[Upload] = []
            for item in files.getlist("files"):
                stored.append(
                    Upload(
                        path=item.filename or "",
                        content=item.read(),
                        content_type=item.content_type or "",
                    )
                )
            self.uploads.extend(stored)
            for upload in stored:
                self._echo(f"stored {upload.path} ({len(upload.content)} bytes)")
            receipt = ResultsReceipt(
                files=[ResultFile(path=u.path, size=len(u.content)) for u in stored]
            )
            if key is not None:
                self._receipts[key] = receipt
            return _json(msgspec.to_builtins(receipt), 201)

        return app

    async def _check(self, route: str) -> Response | None:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else None
        key = request.headers.get("Idempotency-Key")
        reason = self.tokens.redeem(token, _ROUTE_PURPOSE[route], key)
        if reason is not None:
            self.redemptions.append(Redemption(route, 401, reason))
            self._echo(f"/{route}: 401 ({reason})")
            return _problem(401, "Unauthorized", reason)
        forced = self.status.get(route)
        self.redemptions.append(Redemption(route, forced or 200))
        self._echo(f"/{route}: token redeemed")
        if route in self.hang:
            await trio.sleep_forever()
        if forced is not None:
            return _problem(forced, "Forced failure", f"test forced {forced} on /{route}")
        return None

    def _echo(self, message: str) -> None:
        if self.echo:
            print(f"workspace: {message}", file=sys.stderr, flush=True)

    async def _serve(self, route: str, payload: Payload) -> Response:
        refused = await self._check(route)
        if refused is not None:
            return refused
        if isinstance(payload, bytes):
            return Response(payload, status=200, content_type="application/json")
        return _json(msgspec.to_builtins(payload), 200)


def _json(value: Any, status: int) -> Response:
    return Response(msgspec.json.encode(value), status=status, content_type="application/json")


def _problem(status: int, title: str, detail: str) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Response(
        msgspec.json.encode(body), status=status, content_type="application/problem+json"
    )


async def start_workspace(
    nursery: trio.Nursery,
    *,
    env: Payload | None = None,
    config: Payload | None = None,
    **options: Any,
) -> WorkspaceServer:
    """Start a :class:`WorkspaceServer` on ``127.0.0.1:0`` in ``nursery``; return it."""
    server = WorkspaceServer(**options)
    if env is not None:
        server.env = env
    if config is not None:
        server.config = config
    server.base_url = await serve_app(nursery, server.app())
    return server


def _load(path: str | None, schema: type[EnvResponse] | type[ConfigResponse]) -> Payload:
    if path is None:
        return schema()
    with open(path, "rb") as handle:
        return msgspec.json.decode(handle.read(), type=schema)


def main(argv: list[str] | None = None) -> None:
    """Serve a workspace until interrupted; print fresh dispatches, one JSON per line."""
    parser = argparse.ArgumentParser(prog=".venv/bin/python -m benchmarks.support.workspace")
    parser.add_argument("--env", metavar="FILE", help="the /env answer (EnvResponse JSON)")
    parser.add_argument("--config", metavar="FILE", help="the /config answer (ConfigResponse)")
    parser.add_argument("--prompt", default="hello", help="the dispatches' prompt")
    parser.add_argument("--dispatches", type=int, default=1, help="how many to mint")
    args = parser.parse_args(argv)
    env = _load(args.env, EnvResponse)
    config = _load(args.config, ConfigResponse)

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            server = await start_workspace(nursery, env=env, config=config, echo=True)
            for _ in range(args.dispatches):
                print(json.dumps(server.mint_dispatch(args.prompt)), flush=True)
            print(f"workspace: serving {server.url} (Ctrl-C to stop)", file=sys.stderr)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve)


if __name__ == "__main__":
    main()
