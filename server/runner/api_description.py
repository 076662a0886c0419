"""The OpenAPI description of the runner's routes (:mod:`.routes`): one
:class:`~sandstream.server.http.openapi.Operation` per endpoint and method."""

from __future__ import annotations

from typing import Final

from sandstream.core import Dispatch
from sandstream.server.http import (
    RUNNER_TOKEN,
    Content,
    Operation,
    Operations,
    json_content,
    shape,
)

from .routes import NDJSON_CONTENT_TYPE

__all__ = ["RUNNER_OPERATIONS"]

RunnerHealth = shape("RunnerHealth", status=str, live=int, max_live=int)

RUNNER_OPERATIONS: Final[Operations] = {
    ("runner.stream", "POST"): Operation(
        "Run one turn in a fresh container; its envelope streams as NDJSON.",
        {200: Content(NDJSON_CONTENT_TYPE, {"type": "string"})},
        security=(RUNNER_TOKEN,),
        body=json_content(Dispatch),
        problems=(503,),
    ),
    ("runner.healthz", "GET"): Operation(
        "Liveness: the turns running and the bound on them.",
        {200: json_content(RunnerHealth)},
        problems=(503,),
    ),
}
