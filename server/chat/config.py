"""The chat backend's settings: :class:`ChatSettings`, validated on construction.

``sandstream serve`` builds them from flags and environment variables
(:mod:`sandstream.server.cli.serve`; docs/configuration.md lists them all). Times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from sandstream.core import DEFAULT_MAX_STEP_BYTES, DEFAULT_MAX_STEPS

from .agent_profile import AgentProfile, load_agent_profile
from .credentials.one_time import DEFAULT_LIFETIMES, PURPOSES
from .errors import ChatConfigError, PublicUrlError
from .mover.redis_url import parse_redis_url, tls_context
from .public_url import normalize_public_url, replicas_configured
from .push.settings import PushSettings
from .records import Purpose
from .targets import normalize_url

__all__ = ["ChatSettings"]


@dataclass(frozen=True, kw_only=True)
class ChatSettings:
    """How the chat backend stores, locks, dispatches and streams.

    ``data_dir``: the database and the bag's blobs. ``api_token``: the bearer the
    chat API requires. ``public_url``: the base URL sandboxes call back
    (``{public_url}/api/sandbox/{session}``); ``None`` derives it from the address
    the server is bound to, which only a single replica may do
    (:func:`~.public_url.replicas_configured`). ``sandbox_url``: the server's remote
    runner (``None``: the embedded runner); ``runner_token`` is sent to remote runners.
    ``allowed_sandbox_urls``: other runners a request or a workflow environment may
    name. ``embedded_runner``: whether this process runs turns itself.

    ``lock_lease``: how long a chat lock lives without a heartbeat;
    ``lock_heartbeat``: how often the replica that moves a live turn's session (the
    owner of its log mover lease) renews that lease and the chat's lock; also the log
    mover's sweep interval. ``lease_ttl``: the log mover's lease (a replica that stops
    renewing loses a session this long after its last renewal). ``keep_chunks``: the
    log mover also stores a copy of each turn's chunks (``moved_runs``), so that a new
    owner resumes from it and a turn settles even if its runner dropped the chunks
    (``False``: the turn's message is folded as it runs, and only it is stored; a new
    owner folds the session from its first chunk). ``redis_url``: the
    lease in Redis (scale-out; ``None``: in the chat database). ``database_url``: the
    chat store in PostgreSQL (``None``: SQLite in ``data_dir``). ``ping_interval``: an idle
    SSE stream gets ``: ping`` this often. ``stall_timeout``: a client that has not
    taken a chunk for this long is cut off (``None``: never). ``replay_limit``:
    past messages sent to the sandbox. ``token_lifetimes``: per purpose.

    ``max_turn_steps`` and ``max_turn_bytes`` bound what a turn keeps of its steps
    (the rows folded in memory and so the stored assistant message): later steps
    still stream live and are counted in the message (``steps_omitted``).
    ``sweep_interval``: how often turns whose lock expired (their server died) are
    adopted (their session still runs, or ended: settled from its chunks) or settled
    as ``turn_lost``; also done once at start-up.

    ``cors_origins``: browser origins allowed to call the API (``*``: any; empty:
    none). ``stream_token_ttl``: how long a stream token (``EventSource`` auth) lives.
    ``push``: the push notifications' services and delay (:class:`PushSettings`).
    """

    data_dir: Path
    api_token: str
    agent: AgentProfile = field(default_factory=lambda: load_agent_profile({}))
    public_url: str | None = None
    sandbox_url: str | None = None
    runner_token: str | None = None
    allowed_sandbox_urls: frozenset[str] = frozenset()
    embedded_runner: bool = True
    lock_lease: float = 30.0
    lock_heartbeat: float = 10.0
    lease_ttl: float = 30.0
    keep_chunks: bool = False
    redis_url: str | None = None
    database_url: str | None = None
    ping_interval: float = 15.0
    stall_timeout: float | None = 60.0
    replay_limit: int = 20
    max_turn_steps: int = DEFAULT_MAX_STEPS
    max_turn_bytes: int = DEFAULT_MAX_STEP_BYTES
    sweep_interval: float = 30.0
    token_lifetimes: Mapping[Purpose, float] = field(
        default_factory=lambda: dict(DEFAULT_LIFETIMES)
    )
    max_message_chars: int = 100_000
    max_json_bytes: int = 1024 * 1024
    max_upload_bytes: int = 32 * 1024 * 1024
    max_upload_files: int = 20
    max_results_bytes: int = 128 * 1024 * 1024
    max_results_files: int = 1000
    max_chats_listed: int = 500
    remote_connect_timeout: float = 10.0
    shutdown_timeout: float = 10.0
    cors_origins: frozenset[str] = frozenset()
    stream_token_ttl: float = 300.0
    push: PushSettings = field(default_factory=PushSettings)

    def __post_init__(self) -> None:
        if not self.api_token.strip():
            raise ChatConfigError("the chat API token must not be blank")
        for name in (
            "lock_lease",
            "lock_heartbeat",
            "lease_ttl",
            "ping_interval",
            "remote_connect_timeout",
            "shutdown_timeout",
            "sweep_interval",
            "stream_token_ttl",
        ):
            _positive(name, getattr(self, name))
        if self.stall_timeout is not None:
            _positive("stall_timeout", self.stall_timeout)
        if self.lock_heartbeat >= self.lock_lease:
            raise ChatConfigError(
                f"the lock heartbeat ({self.lock_heartbeat:g} s) must be shorter than "
                f"its lease ({self.lock_lease:g} s)"
            )
        if self.lock_heartbeat >= self.lease_ttl:
            raise ChatConfigError(
                f"the lock heartbeat ({self.lock_heartbeat:g} s) must be shorter than "
                f"the log mover's lease ttl ({self.lease_ttl:g} s)"
            )
        if self.redis_url is not None:
            try:
                address = parse_redis_url(self.redis_url)
                if address.tls is not None:
                    tls_context(address.tls)  # its files can be read and used
            except ValueError as exc:
                raise ChatConfigError(str(exc)) from None
        if self.replay_limit < 0:
            raise ChatConfigError(f"replay_limit must be >= 0, got {self.replay_limit}")
        for name in (
            "max_message_chars",
            "max_json_bytes",
            "max_upload_bytes",
            "max_upload_files",
            "max_results_bytes",
            "max_results_files",
            "max_chats_listed",
            "max_turn_steps",
            "max_turn_bytes",
        ):
            if getattr(self, name) < 1:
                raise ChatConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        missing = [p for p in PURPOSES if p not in self.token_lifetimes]
        if missing:
            raise ChatConfigError(f"token_lifetimes lacks {missing}")
        for purpose in PURPOSES:
            _positive(f"token lifetime ({purpose})", self.token_lifetimes[purpose])
        object.__setattr__(self, "token_lifetimes", MappingProxyType(dict(self.token_lifetimes)))
        if self.public_url is not None:
            object.__setattr__(self, "public_url", normalize_public_url(self.public_url))
        elif replicas_configured(self):
            raise PublicUrlError(
                "--public-url is required with several replicas (--redis-url, --database-url): "
                "sandboxes must call back through an address that outlives one replica, e.g. the "
                "load balancer in front of them"
            )
        try:
            if self.sandbox_url is not None:
                object.__setattr__(self, "sandbox_url", normalize_url(self.sandbox_url))
            allowed = frozenset(normalize_url(u) for u in self.allowed_sandbox_urls)
        except ValueError as exc:
            raise ChatConfigError(str(exc)) from exc
        object.__setattr__(self, "allowed_sandbox_urls", allowed)
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ChatConfigError(
                    f"a CORS origin is * or http(s)://host[:port], got {origin!r}"
                )
        object.__setattr__(
            self, "cors_origins", frozenset(o.rstrip("/") for o in self.cors_origins)
        )
        if not self.embedded_runner and self.sandbox_url is None:
            raise ChatConfigError(
                "the Assistant has no runner: set SANDBOX_URL (--sandbox-url) to a "
                "runner's base URL, or run the embedded runner (drop --no-embedded-runner)"
            )


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ChatConfigError(f"{name} must be a finite number > 0, got {value}")
