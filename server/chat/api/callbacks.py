"""The sandbox callbacks: ``GET /api/sandbox/{sessionId}/env``, ``…/config``,
``…/attachments/{fileId}``, ``POST …/results``; and ``GET /api/sandbox/healthz``, which
the public URL probe calls.

The container redeems each of its one-time tokens here (``Authorization: Bearer <otp>``);
the answers are the schemas of :mod:`sandstream.core.schemas` (the workspace snapshot
callbacks are :mod:`.snapshots`). Bad input: a wrong, expired, replayed or
other-purpose token is 401 and nothing is written (for ``/results`` the body is not
even read); an upload over the limits is refused whole (413); a
malformed ``Idempotency-Key`` is 422. A redeemed token is answered again when it comes
back with the ``Idempotency-Key`` of its redemption (a retried callback); a retried
upload whose first attempt was stored gets the same files back and stores nothing.
Written-back files land in the chat bag (docs/chat.md, "The sandbox callbacks").
"""

from __future__ import annotations

from quart import Blueprint, Response, request

from sandstream.core import ResultFile, ResultsReceipt
from sandstream.server.chat.config import CALLBACKS_SERVICE
from sandstream.server.chat.credentials import bearer_token, hash_token, idempotency_key
from sandstream.server.chat.model import (
    DispatchRecord,
    FileNotFoundInBagError,
    Purpose,
    TokenRejectedError,
    now_ms,
    with_attachments,
    with_grants,
    with_snapshot,
)
from sandstream.server.http import json_response

from .downloads import file_response
from .guard import checked_dispatch, get_service
from .multipart import UploadLimits, receive_files

__all__ = ["callbacks_blueprint"]

callbacks_blueprint = Blueprint("sandbox_callbacks", __name__, url_prefix="/api/sandbox")


async def _redeem(purpose: Purpose, session_id: str) -> DispatchRecord:
    """Consume the request's bearer token for ``purpose`` on ``session_id`` (or
    accept it again with the ``Idempotency-Key`` of its redemption)."""
    token = bearer_token(request.headers.get("Authorization"))
    if token is None:
        raise TokenRejectedError(f"no bearer token on /{purpose}")
    key = idempotency_key(request.headers.get("Idempotency-Key"))
    service = get_service()
    return await service.store.consume_token(
        hash_token(token),
        purpose=purpose,
        session_id=session_id,
        now=now_ms(),
        idempotency_key=key,
    )


@callbacks_blueprint.get("/healthz")
async def healthz() -> Response:
    """Unauthenticated: ``{"status": "ok", "service": "sandstream-chat"}``, so that the
    public URL can be checked to reach a chat backend
    (:mod:`~sandstream.server.chat.config.public_url`)."""
    return json_response({"status": "ok", "service": CALLBACKS_SERVICE})


@callbacks_blueprint.get("/<session_id>/env")
async def env(session_id: str) -> Response:
    """The named environment (setup token): ``EnvResponse``."""
    session = await _redeem("setup", session_id)
    service = get_service()
    environment = None
    if session.workflow_id is not None:
        environment = await service.store.get_environment(session.workspace_id, session.workflow_id)
    return json_response(service.settings.agent.env_for(environment))


@callbacks_blueprint.get("/<session_id>/config")
async def config(session_id: str) -> Response:
    """The agent and the turn (run token): ``ConfigResponse``, naming the turn's
    attachments and, for a chat's turn, the chat's permission grants, its latest
    workspace snapshot and the bound of the one to save (``--snapshot-max-bytes``; 0,
    and no snapshot, for an Agents-block run or with snapshots off)."""
    session = await _redeem("run", session_id)
    service = get_service()
    answer = service.settings.agent.config_for(session)
    files = await service.store.turn_attachments(session)
    if session.chat_id is not None:
        grants = await service.store.list_grants(session.workspace_id, session.chat_id)
        answer = with_grants(answer, grants)
    bound, snapshot = 0, None
    if session.chat_id is not None and service.settings.snapshot_max_bytes:
        bound = service.settings.snapshot_max_bytes
        latest = await service.store.latest_snapshot(session.workspace_id, session.chat_id)
        snapshot = None if latest is None else latest.manifest
    return json_response(with_snapshot(with_attachments(answer, files), snapshot, bound))


@callbacks_blueprint.get("/<session_id>/attachments/<file_id>")
async def attachment(session_id: str, file_id: str) -> Response:
    """One of the turn's attached files (run token, not consumed: valid for exactly
    this turn's attachments until it expires or the turn settles) → its bytes."""
    session = await checked_dispatch("run", session_id)
    service = get_service()
    files = await service.store.turn_attachments(session)
    bag_file = next((f for f in files if f.id == file_id), None)
    if bag_file is None:
        raise FileNotFoundInBagError(file_id, "this turn's attachments")
    return await file_response(bag_file, service.blobs)


@callbacks_blueprint.post("/<session_id>/results")
async def results(session_id: str) -> Response:
    """Files written back (upload token) → 201 ``ResultsReceipt``."""
    session = await _redeem("upload", session_id)
    service = get_service()
    settings = service.settings
    received = await receive_files(
        request.body,
        request.headers.get("Content-Type"),
        blobs=service.blobs,
        content_length=request.content_length,
        limits=UploadLimits(settings.max_results_bytes, settings.max_results_files),
        keep_dirs=True,
    )
    files = await service.store.add_results(session, [r.blob for r in received], now=now_ms())
    receipt = ResultsReceipt(files=[ResultFile(path=f.name, size=f.size) for f in files])
    return json_response(receipt, 201)
