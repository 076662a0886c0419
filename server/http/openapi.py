"""The OpenAPI 3.1 description of an app, made from its URL map and its roles' tables.

Each role keeps one table next to its routes: an :class:`Operation` per endpoint and
method (``{("assistant.create_chat", "POST"): Operation(...)}``), naming the msgspec
types its route decodes and encodes. :func:`openapi_document` walks the app's real URL
map and describes every rule from the tables; a rule no table describes raises
:class:`UndescribedRouteError` when the app is made. Schemas come from
:func:`msgspec.json.schema_components` (JSON Schema 2020-12, the dialect of OpenAPI
3.1); every error answer is RFC 9457 problem JSON (:mod:`.problems`).
:func:`mount_openapi` serves the document as ``GET /openapi.json`` and a page rendering
it as ``GET /docs``, to anyone: the description holds no secret.
Nothing here blocks or holds a resource; cancellation has nothing to undo.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from typing import Any, Final

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST
from quart import Blueprint, Quart, Response, current_app
from werkzeug.routing import Rule

from sandstream.server.errors import ProblemError

from .errors import HTTPLayerError
from .metrics import package_version, route_template
from .problems import KNOWN_PROBLEM_TYPES, PROBLEM_CONTENT_TYPE

__all__ = [
    "API_TOKEN",
    "HTTP_OPERATIONS",
    "OPENAPI_EXTENSION",
    "RUNNER_TOKEN",
    "SECURITY_SCHEMES",
    "STREAM_TOKEN",
    "UPLOAD_TOKEN",
    "Content",
    "Operation",
    "Operations",
    "UndescribedRouteError",
    "described_methods",
    "json_content",
    "mount_openapi",
    "openapi_blueprint",
    "openapi_document",
    "shape",
]

OPENAPI_EXTENSION: Final = "sandstream.openapi"

RUNNER_TOKEN: Final = "runnerToken"
API_TOKEN: Final = "apiToken"
STREAM_TOKEN: Final = "streamToken"
UPLOAD_TOKEN: Final = "callbackToken"

SECURITY_SCHEMES: Final[Mapping[str, Mapping[str, str]]] = {
    RUNNER_TOKEN: {
        "type": "http",
        "scheme": "bearer",
        "description": "The runner token (--token, $SANDSTREAM_RUNNER_TOKEN).",
    },
    API_TOKEN: {
        "type": "http",
        "scheme": "bearer",
        "description": "The chat API token (--api-token).",
    },
    STREAM_TOKEN: {
        "type": "apiKey",
        "in": "query",
        "name": "token",
        "description": "A short-lived stream token minted for one chat (POST …/stream-token).",
    },
    UPLOAD_TOKEN: {
        "type": "http",
        "scheme": "bearer",
        "description": "A one-time token a sandbox's dispatch carries for its callbacks.",
    },
}


class UndescribedRouteError(HTTPLayerError):
    """A rule of the app's URL map no table describes."""


@dataclass(frozen=True)
class Content:
    """A body: its media type and its schema (a msgspec-describable type, a JSON Schema
    mapping, or ``None`` for bytes of any shape)."""

    media_type: str
    schema: Any = None


def json_content(schema: Any) -> Content:
    """An ``application/json`` body of ``schema``."""
    return Content("application/json", schema)


def shape(name: str, *, base: type[msgspec.Struct] | None = None, **members: Any) -> Any:
    """A named object type with ``members`` (name → type; after ``base``'s), for an
    answer a route builds as a dict (``{"chats": [...]}``) from types of its own."""
    bases = () if base is None else (base,)
    return msgspec.defstruct(name, list(members.items()), bases=bases, kw_only=True)


Answer = Content | tuple[Content, ...] | None
"""An answer's body: none, one, or one of several media types."""


@dataclass(frozen=True)
class Operation:
    """One method of one route: what it does, who may call it (names of
    :data:`SECURITY_SCHEMES`; any of them opens it), its body, its answers by status,
    the statuses it answers with problem JSON, its query parameters (name →
    description) and whether it upgrades to a WebSocket."""

    summary: str
    answers: Mapping[int, Answer]
    security: tuple[str, ...] = ()
    body: Content | None = None
    problems: tuple[int, ...] = ()
    query: Mapping[str, str] = field(default_factory=dict)
    websocket: bool = False


Operations = Mapping[tuple[str, str], Operation]
"""A role's table: (endpoint, method) → :class:`Operation`."""


def _problem_schema() -> dict[str, Any]:
    """RFC 9457 problem JSON; its ``type`` examples are every type this package and
    the roles' errors (:class:`~sandstream.server.errors.ProblemError`) name."""
    return {
        "type": "object",
        "description": "RFC 9457 problem details; extension members may follow.",
        "required": ["type", "title", "status"],
        "properties": {
            "type": {
                "type": "string",
                "description": "A URN naming the kind of problem.",
                "examples": sorted(KNOWN_PROBLEM_TYPES | _error_types(ProblemError)),
            },
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
        },
        "additionalProperties": True,
    }


def _error_types(root: type[ProblemError]) -> set[str]:
    """The problem types ``root`` and its subclasses name (those that name one)."""
    found = set()
    for cls in (root, *root.__subclasses__()):
        kind = cls.__dict__.get("type")
        if isinstance(kind, str):
            found.add(kind)
    for sub in root.__subclasses__():
        found |= _error_types(sub)
    return found


def described_methods(rule: Rule, operations: Operations | None = None) -> list[str]:
    """The methods of ``rule`` a table must describe: all but ``OPTIONS`` and the
    ``HEAD`` Werkzeug adds to a ``GET`` rule, and that ``HEAD`` too where ``operations``
    describe it."""
    methods = set(rule.methods or ()) - {"OPTIONS"}
    if "GET" in methods and (operations is None or (rule.endpoint, "HEAD") not in operations):
        methods.discard("HEAD")
    return sorted(methods)


def openapi_document(
    app: Quart, operations: Operations, *, title: str, version: str
) -> dict[str, Any]:
    """The OpenAPI 3.1 description of every rule of ``app``'s URL map, from
    ``operations`` (entries for rules ``app`` lacks are left out). Raises
    :class:`UndescribedRouteError` for a rule (endpoint and method) it lacks."""
    wanted: dict[tuple[str, str], Rule] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        for method in described_methods(rule, operations):
            wanted[(rule.endpoint, method)] = rule
    missing = sorted(set(wanted) - set(operations))
    if missing:
        raise UndescribedRouteError(f"routes without an OpenAPI description: {missing}")
    types = _schema_types(operations[key] for key in wanted)
    schemas, components = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}"
    )
    by_type = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for (endpoint, method), rule in sorted(wanted.items(), key=lambda item: item[1].rule):
        path = paths.setdefault(route_template(rule.rule), {})
        path[method.lower()] = _operation(endpoint, method, rule, operations, by_type)
    components["Problem"] = _problem_schema()
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {name: dict(scheme) for name, scheme in SECURITY_SCHEMES.items()},
        },
    }


def _schema_types(operations: Iterable[Operation]) -> tuple[Any, ...]:
    """Every msgspec type the operations name, once each, in first-seen order."""
    seen: dict[Any, None] = {}
    for operation in operations:
        for content in (operation.body, *_contents(operation.answers.values())):
            if content is not None and _is_type(content.schema):
                seen.setdefault(content.schema, None)
    return tuple(seen)


def _contents(answers: Iterable[Answer]) -> Iterator[Content]:
    for answer in answers:
        if isinstance(answer, Content):
            yield answer
        elif answer is not None:
            yield from answer


def _is_type(schema: Any) -> bool:
    return schema is not None and not isinstance(schema, Mapping)


def _schema(content: Content, by_type: Mapping[Any, Any]) -> dict[str, Any]:
    if content.schema is None:
        return {}
    if isinstance(content.schema, Mapping):
        return dict(content.schema)
    schema: dict[str, Any] = by_type[content.schema]
    return schema


def _operation(
    endpoint: str, method: str, rule: Rule, operations: Operations, by_type: Mapping[Any, Any]
) -> dict[str, Any]:
    """One operation object; a WebSocket route is described as the ``GET`` it upgrades."""
    operation = operations[(endpoint, method)]
    described: dict[str, Any] = {
        "operationId": _operation_id(endpoint, method, described_methods(rule, operations)),
        "summary": operation.summary,
        "tags": [endpoint.partition(".")[0]],
        "security": [{name: []} for name in operation.security],
        "parameters": _parameters(rule, operation),
        "responses": _responses(operation, by_type),
    }
    if operation.websocket:
        described["description"] = "Upgrades to a WebSocket (RFC 6455); 101 once accepted."
    if operation.body is not None:
        described["requestBody"] = {
            "required": True,
            "content": {operation.body.media_type: {"schema": _schema(operation.body, by_type)}},
        }
    return described


def _operation_id(endpoint: str, method: str, methods: list[str]) -> str:
    if len(methods) == 1:
        return endpoint
    return f"{endpoint}.{method.lower()}"


def _parameters(rule: Rule, operation: Operation) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in sorted(rule.arguments)
    ]
    parameters += [
        {"name": name, "in": "query", "description": text, "schema": {"type": "string"}}
        for name, text in operation.query.items()
    ]
    return parameters


def _responses(operation: Operation, by_type: Mapping[Any, Any]) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status, content in sorted(operation.answers.items()):
        answer: dict[str, Any] = {"description": _phrase(status)}
        media = {
            each.media_type: {"schema": _schema(each, by_type)} for each in _contents([content])
        }
        if media:
            answer["content"] = media
        responses[str(status)] = answer
    problems = set(operation.problems)
    if operation.security:
        problems.add(401)
    if operation.body is not None and operation.body.media_type == "application/json":
        problems |= {413, 422}
    for status in sorted(problems):
        responses[str(status)] = {
            "description": _phrase(status),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    return responses


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return str(status)


openapi_blueprint = Blueprint("openapi", __name__)


def mount_openapi(app: Quart, operations: Operations, *, title: str) -> None:
    """Serve ``app``'s description as ``GET /openapi.json`` and a page rendering it as
    ``GET /docs``, to anyone. Mount it last: the document is made now, from the URL map
    as it is, and ``operations`` (every role's table; this package's own are added)
    must describe every rule, or :class:`UndescribedRouteError` is raised."""
    app.register_blueprint(openapi_blueprint)
    document = openapi_document(
        app, {**operations, **HTTP_OPERATIONS}, title=title, version=package_version()
    )
    app.extensions[OPENAPI_EXTENSION] = msgspec.json.encode(document)


@openapi_blueprint.get("/openapi.json")
async def openapi_json() -> Response:
    """The app's OpenAPI 3.1 document."""
    document: bytes = current_app.extensions[OPENAPI_EXTENSION]
    response = Response(document, content_type="application/json")
    response.headers["Cache-Control"] = "no-cache"
    return response


@openapi_blueprint.get("/docs")
async def openapi_page() -> Response:
    """A page listing the operations and schemas of ``/openapi.json`` (no outside script)."""
    page = resources.files(__package__).joinpath("openapi_page.html").read_bytes()
    response = Response(page, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'"
    )
    return response


_TEXT: Final = Content(CONTENT_TYPE_LATEST)

HTTP_OPERATIONS: Final[Operations] = {
    ("openapi.openapi_json", "GET"): Operation(
        "This OpenAPI 3.1 document.",
        {200: json_content({"type": "object", "required": ["openapi", "paths"]})},
    ),
    ("openapi.openapi_page", "GET"): Operation(
        "A page rendering this document.", {200: Content("text/html; charset=utf-8")}
    ),
    ("metrics.metrics_route", "GET"): Operation(
        "The Prometheus text exposition (the server's tokens, or none on --metrics-bind).",
        {200: _TEXT},
        security=(RUNNER_TOKEN, API_TOKEN),
    ),
}
"""This package's own routes: the metrics and this description."""
