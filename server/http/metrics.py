"""Prometheus metrics of one app: its registry, its requests timed, ``GET /metrics``.

Each app has an :class:`AppMetrics` of its own (:func:`install_metrics`): a registry
that is never the process's global one, so that several apps in one process do not
collide. It holds the process's own metrics too (CPU, memory, descriptors, the Python
runtime and its garbage collector, ``sandstream_build_info``). The roles register
collectors on it that read the plain counters they keep as they go
(``sandstream.server.runner.metrics`` and the like): nothing is counted per line or per
chunk, the values are gathered when the registry is scraped.

:func:`install_metrics` also times every HTTP request by its route's template (``/sessions/
{session_id}/stream``, never the path itself: the label's values stay few) and its
status class, up to the response's head (a streamed body is not in it); WebSockets are
not timed. :func:`mount_metrics_route` serves ``GET /metrics``, the Prometheus text
exposition of the registry, to a request with one of the tokens (``Authorization:
Bearer <token>``; a 401 problem without one). Scraping runs on the event loop and
never blocks; it takes no input beyond the header.
"""

from __future__ import annotations

import platform
import re
import time
from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    Info,
    generate_latest,
)
from quart import Blueprint, Quart, Response, current_app, g, request

from .auth import check_bearer
from .problems import unauthorized

__all__ = [
    "METRICS_EXTENSION",
    "AppMetrics",
    "get_metrics",
    "install_metrics",
    "metrics_blueprint",
    "mount_metrics_route",
    "route_template",
]

METRICS_EXTENSION: Final = "sandstream.metrics"
UNMATCHED_ROUTE: Final = "unmatched"
"""The route label of a request no route matched (404, 405)."""
_REALM: Final = "sandstream-metrics"
_STARTED: Final = "sandstream_request_started"
_PLACEHOLDER: Final = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")

metrics_blueprint = Blueprint("metrics", __name__)


class AppMetrics:
    """One app's registry and its request timing; ``tokens`` guard ``GET /metrics``
    (``None``: no token needed)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "sandstream_http_request_duration_seconds",
            "Seconds from a request's arrival to its response's head, by route template "
            "and status class",
            ("route", "status"),
            registry=self.registry,
        )
        for process_metrics in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(process_metrics)
        Info("sandstream_build", "This build of sandstream", registry=self.registry).info(
            {"version": package_version(), "python": platform.python_version()}
        )
        self.tokens: tuple[str, ...] | None = None

    def authorized(self, authorization: str | None) -> bool:
        """Whether the ``Authorization`` header carries one of the tokens."""
        tokens = self.tokens
        return tokens is None or any(check_bearer(authorization, token) for token in tokens)

    def exposition(self) -> Response:
        """The registry in Prometheus text exposition format."""
        return Response(generate_latest(self.registry), content_type=CONTENT_TYPE_LATEST)


def package_version() -> str:
    """This installation's version, or ``unknown`` for a checkout never installed."""
    try:
        return version("sandstream")
    except PackageNotFoundError:
        return "unknown"


def route_template(rule: str) -> str:
    """A Werkzeug rule as a route label: ``/sessions/<session_id>/ws`` becomes
    ``/sessions/{session_id}/ws``."""
    return _PLACEHOLDER.sub(r"{\1}", rule)


def get_metrics(app: Quart | None = None) -> AppMetrics:
    """The :class:`AppMetrics` installed on ``app`` (default: the current app)."""
    target = app if app is not None else current_app
    metrics: AppMetrics = target.extensions[METRICS_EXTENSION]
    return metrics


def install_metrics(app: Quart) -> AppMetrics:
    """Give ``app`` its :class:`AppMetrics` and time its HTTP requests (install it
    before any other ``before_request`` hook, which may answer in its place)."""
    metrics = AppMetrics()
    app.extensions[METRICS_EXTENSION] = metrics

    @app.before_request
    async def _start_timing() -> None:
        setattr(g, _STARTED, time.perf_counter())

    @app.after_request
    async def _observe(response: Response) -> Response:
        started: float | None = getattr(g, _STARTED, None)
        if started is not None:
            rule = request.url_rule
            route = UNMATCHED_ROUTE if rule is None else route_template(rule.rule)
            metrics.request_seconds.labels(route, f"{response.status_code // 100}xx").observe(
                time.perf_counter() - started
            )
        return response

    return metrics


def mount_metrics_route(app: Quart, metrics: AppMetrics, tokens: Collection[str] | None) -> None:
    """Serve ``metrics`` on ``app`` as ``GET /metrics`` to a request with one of
    ``tokens`` (``None``: to anyone)."""
    metrics.tokens = None if tokens is None else tuple(tokens)
    app.extensions[METRICS_EXTENSION] = metrics
    app.register_blueprint(metrics_blueprint)


@metrics_blueprint.get("/metrics")
async def metrics_route() -> Response:
    """The Prometheus text exposition; 401 problem JSON without a token."""
    metrics = get_metrics()
    if not metrics.authorized(request.headers.get("Authorization")):
        return unauthorized(
            "GET /metrics needs a token of this server: Authorization: Bearer <token>", _REALM
        )
    return metrics.exposition()
