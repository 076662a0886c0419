"""The chat web app: ``GET /`` and its static files under ``/web/``, from the package.

The files (``web/static/``: ``index.html``, ES modules, a stylesheet) are read once
when this module is imported and served from memory, so no request touches the
disk. Every answer carries a strict Content-Security-Policy (scripts, styles and
connections of this origin only; no inline code, no framing), ``nosniff`` and
``no-referrer``; files are revalidated on every load (``Cache-Control: no-cache``
with a content ``ETag``, ``304`` on a match), so an upgraded server is never shown
with stale modules. The service worker (``sw.js``, push notifications) is also served at
``/sw.js``, so that its scope is the whole app. A name that is not one of the files is
a ``404`` problem. No
token is needed: the page holds no data; the API calls it makes carry the token.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

from quart import Blueprint, Response, request

from sandstream.server.http import NOT_FOUND, problem

__all__ = ["CONTENT_SECURITY_POLICY", "web_blueprint"]

STATIC_DIR: Final = Path(__file__).parent / "static"

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


class StaticFile:
    """One file of the app: its bytes, content type and strong ETag."""

    __slots__ = ("body", "content_type", "etag")

    def __init__(self, body: bytes, content_type: str) -> None:
        self.body = body
        self.content_type = content_type
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _load(folder: Path) -> dict[str, StaticFile]:
    """The served files of ``folder`` by name (only the known content types)."""
    return {
        path.name: StaticFile(path.read_bytes(), _CONTENT_TYPES[path.suffix])
        for path in sorted(folder.iterdir())
        if path.is_file() and path.suffix in _CONTENT_TYPES
    }


_FILES: Final = _load(STATIC_DIR)

web_blueprint = Blueprint("web", __name__)


@web_blueprint.get("/")
async def index() -> Response:
    """The app's page."""
    return _serve(_FILES["index.html"])


@web_blueprint.get("/sw.js")
async def service_worker() -> Response:
    """The service worker, at the root so that its scope is the whole app."""
    return _serve(_FILES["sw.js"])


@web_blueprint.get("/web/<name>")
async def static_file(name: str) -> Response:
    """One of the app's files; ``404`` for any other name."""
    found = _FILES.get(name)
    if found is None:
        return problem(404, "Not found", f"no web app file {name!r}", type=NOT_FOUND)
    return _serve(found)


def _serve(found: StaticFile) -> Response:
    if found.etag in _etags(request.headers.get("If-None-Match", "")):
        response = Response(b"", status=304)
    else:
        response = Response(found.body, status=200, content_type=found.content_type)
    headers = response.headers
    headers["ETag"] = found.etag
    headers["Cache-Control"] = "no-cache"
    headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Frame-Options"] = "DENY"
    return response


def _etags(header: str) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (weak ones compared as strong)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
