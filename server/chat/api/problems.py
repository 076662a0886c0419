"""The chat backend's exceptions as problem JSON (RFC 9457), one handler per type."""

from __future__ import annotations

import logging
from typing import Final

from quart import Quart, Response

from sandstream.server.http.problems import (
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    invalid,
    problem,
    unauthorized,
)
from sandstream.server.runner.errors import RunnerUnavailableError
from sandstream.server.runner.refusals import unavailable
from sandstream.server.sessions import (
    PERMISSION_ANSWERED,
    PERMISSION_NOT_FOUND,
    PermissionAnsweredError,
    PermissionNotFoundError,
)

from ..errors import (
    AttachmentError,
    ChatBusyError,
    ChatNotFoundError,
    FileNotFoundInBagError,
    IdempotencyKeyError,
    NoLiveTurnError,
    RemoteRunnerError,
    RunNotFoundError,
    StreamTokenError,
    StreamTokenScopeError,
    TargetError,
    TokenRejectedError,
    UnsupportedMediaTypeError,
    UploadError,
    UploadTooLargeError,
)

__all__ = ["install_chat_error_handlers"]

CHAT_BUSY: Final = "urn:sandstream:problem:chat-busy"
UNKNOWN_ATTACHMENT: Final = "urn:sandstream:problem:unknown-attachment"
BAD_RUNNER: Final = "urn:sandstream:problem:bad-runner"
NO_LIVE_TURN: Final = "urn:sandstream:problem:no-live-turn"
RUNNER_FAILED: Final = "urn:sandstream:problem:runner-failed"
STREAM_TOKEN_SCOPE: Final = "urn:sandstream:problem:stream-token-scope"
BUSY_RETRY_AFTER: Final = 2
"""Seconds a ``409 chat busy`` asks the client to wait (or join the turn's stream)."""

log = logging.getLogger("sandstream.chat")


def install_chat_error_handlers(app: Quart) -> None:
    """Register a problem answer for each chat exception on ``app``."""

    @app.errorhandler(ChatNotFoundError)
    async def _chat_not_found(error: ChatNotFoundError) -> Response:
        return problem(404, "Chat not found", str(error), type=NOT_FOUND, chatId=error.chat_id)

    @app.errorhandler(FileNotFoundInBagError)
    async def _file_not_found(error: FileNotFoundInBagError) -> Response:
        return problem(404, "File not found", str(error), type=NOT_FOUND, fileId=error.file_id)

    @app.errorhandler(RunNotFoundError)
    async def _run_not_found(error: RunNotFoundError) -> Response:
        return problem(404, "Run not found", str(error), type=NOT_FOUND, sessionId=error.session_id)

    @app.errorhandler(ChatBusyError)
    async def _busy(error: ChatBusyError) -> Response:
        return problem(
            409,
            "Chat busy",
            "a turn is in flight on this chat; join it (GET /api/assistant/chats/{chatId}"
            "/stream), stop it (POST …/interrupt) or wait for it to settle",
            type=CHAT_BUSY,
            headers={"Retry-After": str(BUSY_RETRY_AFTER)},
            chatId=error.chat_id,
            activeMessageId=error.active_message_id,
            activeUserMessageId=error.active_user_message_id,
            lockExpiresAt=error.expires_at,
        )

    @app.errorhandler(NoLiveTurnError)
    async def _no_live_turn(error: NoLiveTurnError) -> Response:
        return problem(
            409,
            "No running turn",
            f"{error}; start one with POST /api/assistant/chat/stream",
            type=NO_LIVE_TURN,
            chatId=error.chat_id,
        )

    @app.errorhandler(PermissionNotFoundError)
    async def _permission_not_found(error: PermissionNotFoundError) -> Response:
        return problem(
            404,
            "Permission request not found",
            f"the running turn has no permission request {error.request_id!r}",
            type=PERMISSION_NOT_FOUND,
            requestId=error.request_id,
        )

    @app.errorhandler(PermissionAnsweredError)
    async def _permission_answered(error: PermissionAnsweredError) -> Response:
        return problem(
            409,
            "Permission request answered",
            f"{error}: the first answer wins",
            type=PERMISSION_ANSWERED,
            requestId=error.request_id,
            reply=error.reply,
        )

    @app.errorhandler(RemoteRunnerError)
    async def _runner_failed(error: RemoteRunnerError) -> Response:
        return problem(502, "Runner failed", str(error), type=RUNNER_FAILED)

    @app.errorhandler(StreamTokenError)
    async def _stream_token(error: StreamTokenError) -> Response:
        return unauthorized(str(error), "sandstream")

    @app.errorhandler(StreamTokenScopeError)
    async def _stream_token_scope(error: StreamTokenScopeError) -> Response:
        return problem(403, "Stream token for another chat", str(error), type=STREAM_TOKEN_SCOPE)

    @app.errorhandler(AttachmentError)
    async def _attachment(error: AttachmentError) -> Response:
        return problem(
            422, "Unknown attachment", str(error), type=UNKNOWN_ATTACHMENT, unknownIds=error.unknown
        )

    @app.errorhandler(TargetError)
    async def _target(error: TargetError) -> Response:
        return problem(422, "Runner not usable", str(error), type=BAD_RUNNER)

    @app.errorhandler(RunnerUnavailableError)
    async def _unavailable(error: RunnerUnavailableError) -> Response:
        return unavailable(error)

    @app.errorhandler(TokenRejectedError)
    async def _token(error: TokenRejectedError) -> Response:
        log.warning("sandbox callback refused: %s", error)
        return unauthorized("the one-time token is invalid, expired or already used", "sandbox")

    @app.errorhandler(UploadTooLargeError)
    async def _too_large(error: UploadTooLargeError) -> Response:
        return problem(413, "Payload Too Large", str(error), type=PAYLOAD_TOO_LARGE)

    @app.errorhandler(UnsupportedMediaTypeError)
    async def _media_type(error: UnsupportedMediaTypeError) -> Response:
        return problem(415, "Unsupported Media Type", str(error), type=UNSUPPORTED_MEDIA_TYPE)

    @app.errorhandler(UploadError)
    async def _upload(error: UploadError) -> Response:
        return invalid(str(error))

    @app.errorhandler(IdempotencyKeyError)
    async def _idempotency_key(error: IdempotencyKeyError) -> Response:
        return invalid(str(error))
