"""HTTP plumbing shared by every role of the server; nothing here imports a role.

- :mod:`.problems`: RFC 9457 problem JSON for every error answer;
- :mod:`.auth`: bearer tokens, compared in constant time;
- :mod:`.requests`: bounded JSON bodies, query parameters, JSON answers;
- :mod:`.asgi`: the ASGI connection every app uses: idle connections close, request
  bodies have a deadline, a role may answer some requests below Quart;
- :mod:`.connection`: cutting a client's connection whose write can never finish;
- :mod:`.client_watch`: cutting off a client that stopped reading;
- :mod:`.fanout`: live writes, a stream's new runs written straight to the sockets of
  its caught-up readers, beside ASGI;
- :mod:`.protocol_errors`: problem JSON for the requests Hypercorn rejects itself;
- :mod:`.hypercorn_adapter`: every use of Hypercorn's internals, pinned to the version
  it was written for;
- :mod:`.serve`: Hypercorn's trio worker with a shutdown that drains the role first;
- :mod:`.openapi`: the OpenAPI 3.1 description of an app from its roles' tables, served
  as ``/openapi.json`` and ``/docs``;
- :mod:`.malloc`: glibc's malloc settings for large buffers;
- :mod:`.errors`: :class:`~.errors.HTTPLayerError`, the root of this package's errors.

Roles (``runner``, ``sessions``, ``chat``) import from here; nothing here imports a role.
"""

from .asgi import BODY_LIMITS, RAW_ROUTES, HTTPConnection
from .auth import RUNNER_REALM, TOKEN_ENV, check_bearer, resolve_token
from .client_watch import ClientWatch
from .connection import abort_scope_connection
from .errors import BadRequestError, MissingTokenError
from .fanout import LiveConnection, LiveFraming, Offered, Run, RunFraming, live_connection
from .malloc import keep_large_buffers
from .metrics import (
    METRICS_EXTENSION,
    AppMetrics,
    get_metrics,
    install_metrics,
    mount_metrics_route,
    route_template,
)
from .openapi import (
    API_TOKEN,
    HTTP_OPERATIONS,
    OPENAPI_EXTENSION,
    RUNNER_TOKEN,
    SECURITY_SCHEMES,
    STREAM_TOKEN,
    UPLOAD_TOKEN,
    Content,
    Operation,
    Operations,
    UndescribedRouteError,
    described_methods,
    json_content,
    mount_openapi,
    openapi_document,
    shape,
)
from .problems import (
    AT_CAPACITY,
    INVALID_BODY,
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    SHUTTING_DOWN,
    UNAUTHORIZED,
    UNSUPPORTED_MEDIA_TYPE,
    answer_in_snake_case,
    error_problem,
    http_problem,
    install_problem_handlers,
    invalid,
    problem,
    snake_case,
    status_type,
    unauthorized,
    unexpected_problem,
)
from .requests import int_query, json_response, read_json, require_query
from .serve import raise_open_file_limit, serve, shutdown_signals

__all__: list[str] = [
    "API_TOKEN",
    "AT_CAPACITY",
    "BODY_LIMITS",
    "HTTP_OPERATIONS",
    "INVALID_BODY",
    "METRICS_EXTENSION",
    "NOT_FOUND",
    "OPENAPI_EXTENSION",
    "PAYLOAD_TOO_LARGE",
    "RAW_ROUTES",
    "RUNNER_REALM",
    "RUNNER_TOKEN",
    "SECURITY_SCHEMES",
    "SHUTTING_DOWN",
    "STREAM_TOKEN",
    "TOKEN_ENV",
    "UNAUTHORIZED",
    "UNSUPPORTED_MEDIA_TYPE",
    "UPLOAD_TOKEN",
    "AppMetrics",
    "BadRequestError",
    "ClientWatch",
    "Content",
    "HTTPConnection",
    "LiveConnection",
    "LiveFraming",
    "MissingTokenError",
    "Offered",
    "Operation",
    "Operations",
    "Run",
    "RunFraming",
    "UndescribedRouteError",
    "abort_scope_connection",
    "answer_in_snake_case",
    "check_bearer",
    "described_methods",
    "error_problem",
    "get_metrics",
    "http_problem",
    "install_metrics",
    "install_problem_handlers",
    "int_query",
    "invalid",
    "json_content",
    "json_response",
    "keep_large_buffers",
    "live_connection",
    "mount_metrics_route",
    "mount_openapi",
    "openapi_document",
    "problem",
    "raise_open_file_limit",
    "read_json",
    "require_query",
    "resolve_token",
    "route_template",
    "serve",
    "shape",
    "shutdown_signals",
    "snake_case",
    "status_type",
    "unauthorized",
    "unexpected_problem",
]
