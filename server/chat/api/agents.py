"""The Agents block and workflow environments.

``POST /api/agents/run`` dispatches a workflow's agent run and forwards the runner's
NDJSON, validated by the core, ending with exactly one terminal line; the client closing
the response (cancellation) stops the container. ``GET /api/agents/runs/{sessionId}/files``
lists (and ``…/{fileId}`` downloads) the files a run wrote back. ``PUT``/``GET
/api/workflows/{workflowId}/environment`` hold a workflow's environment. All need the
chat API token; bad input is problem JSON (docs/chat.md, "The Agents block").
"""

from __future__ import annotations

from functools import partial
from typing import Any

from quart import Blueprint, Response, request

from sandstream.server.chat.agents import RelayBody
from sandstream.server.chat.model import AgentsRunRequest, Environment, now_ms
from sandstream.server.http import (
    NOT_FOUND,
    abort_scope_connection,
    invalid,
    json_response,
    problem,
    read_json,
)
from sandstream.server.runner import NDJSON_CONTENT_TYPE

from .bodies import EnvironmentRequest, check_id, workspace_query
from .downloads import file_response
from .guard import get_service, require_api_token

__all__ = ["agents_blueprint"]

agents_blueprint = Blueprint("agents", __name__, url_prefix="/api")
require_api_token(agents_blueprint)


@agents_blueprint.post("/agents/run")
async def agents_run() -> Response:
    """One Agents-block run → ``200 application/x-ndjson`` (validated, one terminal)."""
    service = get_service()
    settings = service.settings
    body = await read_json(AgentsRunRequest, settings.max_json_bytes)
    if len(body.prompt) > settings.max_message_chars:
        return invalid(f"prompt is limited to {settings.max_message_chars} characters")
    scope: dict[str, Any] = request.scope  # type: ignore[assignment]
    run = await service.agents.start(body, scope)
    relay = RelayBody(
        run,
        ping_interval=None,
        stall_timeout=settings.stall_timeout,
        abort_client=partial(abort_scope_connection, scope),
    )
    response = Response(relay, status=200, content_type=NDJSON_CONTENT_TYPE)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.headers["X-Session-Id"] = run.session_id
    response.timeout = None
    return response


@agents_blueprint.get("/agents/runs/<session_id>/files")
async def list_run_files(session_id: str) -> Response:
    """``{"files": [...]}``: the files the run wrote back, oldest first (404: no such run)."""
    service = get_service()
    workspace_id = workspace_query()
    files = await service.store.list_run_files(workspace_id, session_id)
    return json_response({"files": files})


@agents_blueprint.get("/agents/runs/<session_id>/files/<file_id>")
async def download_run_file(session_id: str, file_id: str) -> Response:
    """One written-back file's bytes, as a download (``Content-Disposition: attachment``)."""
    service = get_service()
    workspace_id = workspace_query()
    bag_file = await service.store.get_run_file(workspace_id, session_id, file_id)
    return await file_response(bag_file, service.blobs)


@agents_blueprint.put("/workflows/<workflow_id>/environment")
async def put_environment(workflow_id: str) -> Response:
    """Create or replace the workflow's environment → 200 with it."""
    service = get_service()
    body = await read_json(EnvironmentRequest, service.settings.max_json_bytes)
    environment = Environment(
        workspace_id=body.workspace_id,
        workflow_id=check_id(workflow_id, "workflowId"),
        vars=body.vars,
        setup_script=body.setup_script,
        updated_at=now_ms(),
    )
    await service.store.put_environment(environment)
    return json_response(environment)


@agents_blueprint.get("/workflows/<workflow_id>/environment")
async def get_environment(workflow_id: str) -> Response:
    """The workflow's environment, or 404."""
    service = get_service()
    workspace_id = workspace_query()
    environment = await service.store.get_environment(
        workspace_id, check_id(workflow_id, "workflowId")
    )
    if environment is None:
        return problem(
            404, "Environment not found", "this workflow has no environment", type=NOT_FOUND
        )
    return json_response(environment)
