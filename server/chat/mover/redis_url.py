"""The ``--redis-url`` of the log mover's lease: parsed strictly, and its TLS settings.

:func:`parse_redis_url` turns ``redis://[[user]:password@]host[:port][/db]`` or
``rediss://…?ssl_ca_certs=/path/ca.pem&…`` into a :class:`RedisAddress`; anything else
(another scheme, no host, a bad port or db, an unknown or repeated query parameter, TLS
parameters on a plain ``redis://`` URL) raises :class:`ValueError` with one line for
the user. The TLS parameters carry coredis's names (its ``rediss://`` query
parameters); unlike coredis's own URL parsing the server's certificate and host name
are verified unless the URL says otherwise. :func:`tls_context` reads the files it
names (blocking: run it in a worker thread); parsing reads nothing.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["RedisAddress", "TlsSettings", "parse_redis_url", "tls_context"]

_CERT_REQS: Final[dict[str, ssl.VerifyMode]] = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
_BOOLEANS: Final = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_TLS_PARAMETERS: Final = frozenset(
    {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"}
)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """How a ``rediss://`` connection is secured: the CA file or directory that
    verifies the server (``None``: the system's), this client's certificate and key
    (both or neither), whether the server's certificate is required and its host name
    checked (both by default)."""

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cert_reqs: ssl.VerifyMode = ssl.CERT_REQUIRED
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where a Redis server is and how to log in: from :func:`parse_redis_url`.
    ``tls`` is ``None`` for a plain ``redis://`` URL."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: TlsSettings | None = None

    def __str__(self) -> str:
        """``host:port`` (never the password), for messages."""
        return f"{self.host}:{self.port}"


def parse_redis_url(url: str) -> RedisAddress:
    """``url`` as a :class:`RedisAddress`; see the module docstring. Raises
    :class:`ValueError` with a message that names what is wrong (never the password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(
            f"a Redis URL starts with redis:// or rediss:// (TLS), got {parts.scheme}://…"
        )
    if not parts.hostname:
        raise ValueError("the Redis URL names no host")
    if parts.fragment:
        raise ValueError("a Redis URL has no #fragment")
    path = parts.path.strip("/")
    if path and not (path.isascii() and path.isdigit()):
        raise ValueError(f"the Redis URL's database must be a number, got {path!r}")
    try:
        port = 6379 if parts.port is None else parts.port
    except ValueError as exc:
        raise ValueError(f"the Redis URL has a bad port: {exc}") from None
    if port == 0:
        raise ValueError("the Redis URL's port must be 1-65535, got 0")
    query = _query(parts.query)
    if query and parts.scheme == "redis":
        raise ValueError(f"TLS settings ({', '.join(sorted(query))}) need a rediss:// URL")
    return RedisAddress(
        host=parts.hostname,
        port=port,
        db=int(path or 0),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=_tls(query) if parts.scheme == "rediss" else None,
    )


def _query(query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"the Redis URL's query is not name=value pairs: {query!r}") from None
    settings: dict[str, str] = {}
    for name, value in pairs:
        if name not in _TLS_PARAMETERS:
            raise ValueError(
                f"the Redis URL has an unknown parameter {name!r} "
                f"(known: {', '.join(sorted(_TLS_PARAMETERS))})"
            )
        if name in settings:
            raise ValueError(f"the Redis URL gives {name} twice")
        if not value:
            raise ValueError(f"the Redis URL's {name} is empty")
        settings[name] = value
    return settings


def _tls(query: dict[str, str]) -> TlsSettings:
    cert_reqs = query.get("ssl_cert_reqs", "required")
    if cert_reqs not in _CERT_REQS:
        raise ValueError(f"ssl_cert_reqs is required, optional or none, got {cert_reqs!r}")
    check = query.get("ssl_check_hostname", "true")
    if check.lower() not in _BOOLEANS:
        raise ValueError(f"ssl_check_hostname is true or false, got {check!r}")
    check_hostname = _BOOLEANS[check.lower()]
    if check_hostname and _CERT_REQS[cert_reqs] == ssl.CERT_NONE:
        raise ValueError("ssl_cert_reqs=none needs ssl_check_hostname=false")
    certfile, keyfile = query.get("ssl_certfile"), query.get("ssl_keyfile")
    if (certfile is None) != (keyfile is None):
        raise ValueError("the Redis URL needs both ssl_certfile and ssl_keyfile, or neither")
    return TlsSettings(
        ca_certs=query.get("ssl_ca_certs"),
        certfile=certfile,
        keyfile=keyfile,
        cert_reqs=_CERT_REQS[cert_reqs],
        check_hostname=check_hostname,
    )


def tls_context(settings: TlsSettings) -> ssl.SSLContext:
    """The client :class:`ssl.SSLContext` of ``settings``, its files read (blocking).
    Raises :class:`ValueError` naming the file that cannot be read or used."""
    ca = settings.ca_certs
    try:
        if ca is not None and Path(ca).is_dir():
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"the Redis CA certificates ({ca}) cannot be used: {exc}") from None
    if settings.certfile is not None:
        try:
            context.load_cert_chain(settings.certfile, settings.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"the Redis client certificate ({settings.certfile}, key {settings.keyfile}) "
                f"cannot be used: {exc}"
            ) from None
    context.check_hostname = settings.check_hostname
    context.verify_mode = settings.cert_reqs
    return context
