"""The OpenAPI description of the web app's routes (:mod:`.routes`)."""

from __future__ import annotations

from typing import Final

from sandstream.server.http import Content, Operation, Operations

__all__ = ["WEB_OPERATIONS"]

WEB_OPERATIONS: Final[Operations] = {
    ("web.index", "GET"): Operation(
        "The web app's page.", {200: Content("text/html; charset=utf-8")}
    ),
    ("web.service_worker", "GET"): Operation(
        "The web app's service worker.", {200: Content("text/javascript; charset=utf-8")}
    ),
    ("web.static_file", "GET"): Operation(
        "One of the web app's files.", {200: Content("*/*")}, problems=(404,)
    ),
}
