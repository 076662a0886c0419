"""The chat backend's settings: :class:`ChatSettings`, validated on construction.

Each field that is a flag of ``sandstream serve`` declares it, with its environment
variable, default, help and check (:mod:`sandstream.server.settings_table`;
docs/configuration.md lists them all); the command builds the settings from those
flags. Times are seconds. A bad value raises :class:`~sandstream.server.chat.model.ChatConfigError`
(:class:`~sandstream.server.chat.model.PublicUrlError` for a missing ``--public-url``); a
``--database-url`` that is not a PostgreSQL URL, :class:`ValueError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from types import MappingProxyType

import psycopg

from sandstream.core import DEFAULT_MAX_STEP_BYTES, DEFAULT_MAX_STEPS
from sandstream.server.chat.credentials import DEFAULT_LIFETIMES, PURPOSES
from sandstream.server.chat.model import (
    AgentProfile,
    ChatConfigError,
    PublicUrlError,
    Purpose,
    load_agent_profile,
    normalize_url,
)
from sandstream.server.chat.mover import parse_redis_url, tls_context
from sandstream.server.chat.push import PushSettings
from sandstream.server.runner import SHUTDOWN_TIMEOUT, STALL_TIMEOUT
from sandstream.server.settings_table import (
    Setting,
    at_least,
    check_fields,
    finite_positive,
)

from .public_url import normalize_public_url, replicas_configured

__all__ = ["ChatSettings"]


def _not_blank(name: str, value: str) -> str | None:
    return None if value.strip() else "the chat API token must not be blank"


def _stripped(values: list[str]) -> frozenset[str]:
    return frozenset(value.strip() for value in values)


def _database_url(url: str | None) -> str | None:
    """``--database-url`` checked for its form (nothing connects yet). Raises
    :class:`ValueError` for one that is not a ``postgresql://`` URL."""
    if url is None:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError("--database-url must be a postgresql:// URL")
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ValueError(f"--database-url is malformed: {' '.join(str(exc).split())}") from None
    return url


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
    ``lock_heartbeat``: how often the replica that moves a running turn's session (the
    owner of its log mover lease) renews that lease and the chat's lock; also the log
    mover's sweep interval. ``lease_ttl``: the log mover's lease (a replica that stops
    renewing loses a session this long after its last renewal). ``runner_lost_timeout``:
    how long the log mover waits for a remote runner that no connection reaches before
    it settles the session's turn ``runner_lost``. ``keep_chunks``: the
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
    ``turn_token_budget`` and ``workspace_daily_token_budget``: the tokens a turn, and a
    workspace's turns in a UTC day, may spend (``None``: no bound).
    ``sweep_interval``: how often turns whose lock expired (their server died) are
    adopted (their session still runs, or ended: settled from its chunks) or settled
    as ``turn_lost``; also done once at start-up.

    ``snapshot_max_bytes``: the bytes of files a chat turn's workspace snapshot may
    hold (0: turns save none and restore none); ``snapshots_kept``: a chat's newest
    snapshots kept, older ones deleted as a new one is stored.

    ``cors_origins``: browser origins allowed to call the API (``*``: any; empty:
    none). ``stream_token_ttl``: how long a stream token (``EventSource`` auth) lives.
    ``push``: the push notifications' services and delay (:class:`PushSettings`).
    """

    data_dir: Path
    api_token: str = Setting(check=_not_blank).field(default=MISSING)
    agent: AgentProfile = field(default_factory=lambda: load_agent_profile({}))
    public_url: str | None = Setting(
        flag="--public-url",
        env="SANDSTREAM_PUBLIC_URL",
        shown="the bound address",
        help="base URL sandboxes call back, required with --redis-url or --database-url: "
        "the load balancer in front of the replicas",
    ).field()
    sandbox_url: str | None = Setting(
        flag="--sandbox-url",
        env="SANDBOX_URL",
        shown="embedded",
        help="a remote runner's base URL for every turn",
    ).field()
    runner_token: str | None = None
    allowed_sandbox_urls: frozenset[str] = Setting(
        flag="--allowed-sandbox-url",
        kind="repeated",
        env="SANDSTREAM_ALLOWED_SANDBOX_URLS",
        metavar="URL",
        help="a runner a request or workflow may name",
        convert=_stripped,
    ).field(default=frozenset())
    embedded_runner: bool = Setting(
        flag="--no-embedded-runner",
        kind="switch",
        default=False,
        help="do not run containers here (then --sandbox-url is required)",
        convert=lambda off: not off,
    ).field(default=True)
    lock_lease: float = Setting(
        flag="--lock-lease",
        default=30.0,
        parse=float,
        env="SANDSTREAM_LOCK_LEASE",
        help="seconds a chat lock lives without a heartbeat",
        check=finite_positive,
    ).field()
    lock_heartbeat: float = Setting(
        flag="--lock-heartbeat",
        default=10.0,
        parse=float,
        env="SANDSTREAM_LOCK_HEARTBEAT",
        help="seconds between renewals of the log mover's leases and the chat locks; "
        "also the mover's sweep interval",
        check=finite_positive,
    ).field()
    lease_ttl: float = Setting(
        flag="--lease-ttl",
        default=30.0,
        parse=float,
        env="SANDSTREAM_LEASE_TTL",
        help="seconds a replica's log mover lease on a session lives without renewal: "
        "another replica takes the session over after it",
        check=finite_positive,
    ).field()
    runner_lost_timeout: float = Setting(
        flag="--runner-lost-timeout",
        default=120.0,
        parse=float,
        env="SANDSTREAM_RUNNER_LOST_TIMEOUT",
        help="seconds a remote runner may stay unreachable before its running turns are "
        "settled as runner_lost (with what was moved) and their chats freed",
        check=finite_positive,
    ).field()
    keep_chunks: bool = Setting(
        flag="--keep-chunks",
        kind="switch",
        default=False,
        env="SANDSTREAM_KEEP_CHUNKS",
        help="also keep a copy of every chunk of a chat turn in the chat database (a turn "
        "then settles even if its runner dropped its chunks before; default: only the "
        "settled message, folded as the turn runs)",
    ).field()
    redis_url: str | None = Setting(
        flag="--redis-url",
        env="SANDSTREAM_REDIS_URL",
        metavar="URL",
        shown="in the chat database",
        help="keep the log mover's leases in Redis (6 or newer), for several replicas: "
        "redis://[[user]:password@]host[:port][/db], or rediss://… for TLS",
    ).field()
    database_url: str | None = Setting(
        flag="--database-url",
        env="SANDSTREAM_DATABASE_URL",
        metavar="URL",
        shown="SQLite in the data dir",
        help="keep the chat store in PostgreSQL, e.g. postgresql://user@host/db, shared by "
        "replicas on many machines; the bag's files are kept there too",
        convert=_database_url,
    ).field()
    ping_interval: float = Setting(
        flag="--ping-interval",
        default=15.0,
        parse=float,
        env="SANDSTREAM_PING_INTERVAL",
        help="idle seconds before an SSE ': ping'",
        check=finite_positive,
    ).field()
    stall_timeout: float | None = STALL_TIMEOUT.field()
    replay_limit: int = Setting(
        flag="--replay-limit",
        default=20,
        parse=int,
        help="past messages sent to the sandbox",
        check=at_least(0),
    ).field()
    max_turn_steps: int = Setting(
        flag="--max-turn-steps",
        default=DEFAULT_MAX_STEPS,
        parse=int,
        env="SANDSTREAM_MAX_TURN_STEPS",
        help="steps a turn keeps and stores; later ones stream and are counted",
        check=at_least(1),
    ).field()
    max_turn_bytes: int = Setting(
        flag="--max-turn-bytes",
        default=DEFAULT_MAX_STEP_BYTES,
        parse=int,
        env="SANDSTREAM_MAX_TURN_BYTES",
        shown=f"{DEFAULT_MAX_STEP_BYTES // (1024 * 1024)} MiB",
        help="bytes of step lines a turn keeps and stores",
        check=at_least(1),
    ).field()
    turn_token_budget: int | None = Setting(
        flag="--turn-token-budget",
        parse=int,
        env="SANDSTREAM_TURN_TOKEN_BUDGET",
        metavar="TOKENS",
        shown="none",
        help="tokens a turn's model calls may spend; past them its next call is refused "
        "and the turn ends budget_reached (needs the runner's model gateway)",
        check=at_least(1),
    ).field()
    workspace_daily_token_budget: int | None = Setting(
        flag="--workspace-daily-token-budget",
        parse=int,
        env="SANDSTREAM_WORKSPACE_DAILY_TOKEN_BUDGET",
        metavar="TOKENS",
        shown="none",
        help="tokens a workspace's turns may spend per UTC day; a turn gets what is left, "
        "and none starts once it is spent (429 token-budget-spent)",
        check=at_least(1),
    ).field()
    sweep_interval: float = Setting(
        flag="--sweep-interval",
        default=30.0,
        parse=float,
        env="SANDSTREAM_SWEEP_INTERVAL",
        help="seconds between sweeps settling turns whose lock expired",
        check=finite_positive,
    ).field()
    token_lifetimes: Mapping[Purpose, float] = field(
        default_factory=lambda: dict(DEFAULT_LIFETIMES)
    )
    max_message_chars: int = Setting(default=100_000, check=at_least(1)).field()
    max_json_bytes: int = Setting(default=1024 * 1024, check=at_least(1)).field()
    max_upload_bytes: int = Setting(
        flag="--max-upload-bytes",
        default=32 * 1024 * 1024,
        parse=int,
        shown="32 MiB",
        help="bytes of files in one upload to a chat bag",
        check=at_least(1),
    ).field()
    max_upload_files: int = Setting(default=20, check=at_least(1)).field()
    max_results_bytes: int = Setting(
        flag="--max-results-bytes",
        default=128 * 1024 * 1024,
        parse=int,
        shown="128 MiB",
        help="bytes of files one run may write back",
        check=at_least(1),
    ).field()
    max_results_files: int = Setting(default=1000, check=at_least(1)).field()
    snapshot_max_bytes: int = Setting(
        flag="--snapshot-max-bytes",
        default=1024 * 1024 * 1024,
        parse=int,
        env="SANDSTREAM_SNAPSHOT_MAX_BYTES",
        shown="1 GiB",
        help="bytes of files a chat turn may save of its workspace for the chat's next "
        "turn; 0 turns workspace snapshots off",
        check=at_least(0),
    ).field()
    snapshots_kept: int = Setting(
        flag="--snapshots-kept",
        default=10,
        parse=int,
        env="SANDSTREAM_SNAPSHOTS_KEPT",
        help="workspace snapshots kept per chat: the newest; older ones are deleted",
        check=at_least(1),
    ).field()
    max_chats_listed: int = Setting(default=500, check=at_least(1)).field()
    remote_connect_timeout: float = Setting(default=10.0, check=finite_positive).field()
    shutdown_timeout: float = SHUTDOWN_TIMEOUT.field()
    cors_origins: frozenset[str] = Setting(
        flag="--cors-origin",
        kind="repeated",
        env="SANDSTREAM_CORS_ORIGINS",
        metavar="ORIGIN",
        shown="none",
        help="a browser origin allowed to call the API, e.g. https://app.example.com, or *",
        convert=_stripped,
    ).field(default=frozenset())
    stream_token_ttl: float = Setting(
        flag="--stream-token-ttl",
        default=300.0,
        parse=float,
        env="SANDSTREAM_STREAM_TOKEN_TTL",
        help="seconds a stream token (EventSource auth) is valid",
        check=finite_positive,
    ).field()
    push: PushSettings = field(default_factory=PushSettings)

    def __post_init__(self) -> None:
        check_fields(self, ChatConfigError)
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
        self._freeze_token_lifetimes()
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
        self._normalize_cors_origins()
        if not self.embedded_runner and self.sandbox_url is None:
            raise ChatConfigError(
                "the Assistant has no runner: set SANDBOX_URL (--sandbox-url) to a "
                "runner's base URL, or run the embedded runner (drop --no-embedded-runner)"
            )

    def _freeze_token_lifetimes(self) -> None:
        """Check that every purpose has a finite positive token lifetime, then make the
        mapping read-only. Raises :class:`ChatConfigError`."""
        missing = [p for p in PURPOSES if p not in self.token_lifetimes]
        if missing:
            raise ChatConfigError(f"token_lifetimes lacks {missing}")
        for purpose in PURPOSES:
            wrong = finite_positive(f"token lifetime ({purpose})", self.token_lifetimes[purpose])
            if wrong is not None:
                raise ChatConfigError(wrong)
        object.__setattr__(self, "token_lifetimes", MappingProxyType(dict(self.token_lifetimes)))

    def _normalize_cors_origins(self) -> None:
        """Check that each CORS origin is ``*`` or an http(s) origin, then drop their
        trailing slashes. Raises :class:`ChatConfigError`."""
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ChatConfigError(
                    f"a CORS origin is * or http(s)://host[:port], got {origin!r}"
                )
        object.__setattr__(
            self, "cors_origins", frozenset(o.rstrip("/") for o in self.cors_origins)
        )
