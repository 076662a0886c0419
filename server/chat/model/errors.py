"""The chat backend's exception types. Those a route lets out are each one problem JSON
answer, which the error states itself (its status, type and title; its detail, members
and headers): :class:`~sandstream.server.errors.ProblemError`."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Final

from sandstream.server.errors import ProblemError, ServerError
from sandstream.server.http import (
    INVALID_BODY,
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED_MEDIA_TYPE,
)

__all__ = [
    "BAD_RUNNER",
    "BUSY_RETRY_AFTER",
    "CHAT_BUSY",
    "FORK_POINT",
    "FORK_POINT_RUNNING",
    "NO_CHAT",
    "NO_LIVE_TURN",
    "PUSH_SUBSCRIPTION_LIMIT",
    "RUNNER_FAILED",
    "SNAPSHOT_INCOMPLETE",
    "STREAM_TOKEN_SCOPE",
    "TOKEN_BUDGET_SPENT",
    "UNKNOWN_ATTACHMENT",
    "AttachmentError",
    "ChatBusyError",
    "ChatConfigError",
    "ChatError",
    "ChatNotFoundError",
    "ChunkGapError",
    "ChunkShapeError",
    "FencedError",
    "FileNotFoundInBagError",
    "ForkPointError",
    "ForkPointRunningError",
    "GrantNotFoundError",
    "IdempotencyKeyError",
    "NoChatError",
    "PublicUrlError",
    "PushSubscriptionLimitError",
    "RedisAuthError",
    "RedisConnectionError",
    "RedisLeaseError",
    "RedisReplyError",
    "RemoteRunnerError",
    "RunNotFoundError",
    "RunnerLostError",
    "RunnerSessionGoneError",
    "SnapshotBlobNotFoundError",
    "SnapshotIncompleteError",
    "SnapshotTooLargeError",
    "SourceError",
    "SourceGoneError",
    "SourceRefusedError",
    "StoreError",
    "TargetError",
    "TokenBudgetSpentError",
    "TokenRejectedError",
    "UnsupportedMediaTypeError",
    "UploadError",
    "UploadTooLargeError",
    "WorkspaceFileNotFoundError",
]

CHAT_BUSY: Final = "urn:sandstream:problem:chat-busy"
UNKNOWN_ATTACHMENT: Final = "urn:sandstream:problem:unknown-attachment"
BAD_RUNNER: Final = "urn:sandstream:problem:bad-runner"
NO_LIVE_TURN: Final = "urn:sandstream:problem:no-live-turn"
TOKEN_BUDGET_SPENT: Final = "urn:sandstream:problem:token-budget-spent"
RUNNER_FAILED: Final = "urn:sandstream:problem:runner-failed"
STREAM_TOKEN_SCOPE: Final = "urn:sandstream:problem:stream-token-scope"
NO_CHAT: Final = "urn:sandstream:problem:no-chat"
SNAPSHOT_INCOMPLETE: Final = "urn:sandstream:problem:snapshot-incomplete"
FORK_POINT: Final = "urn:sandstream:problem:fork-point"
FORK_POINT_RUNNING: Final = "urn:sandstream:problem:fork-point-running"
PUSH_SUBSCRIPTION_LIMIT: Final = "urn:sandstream:problem:push-subscription-limit"
BUSY_RETRY_AFTER: Final = 2
"""Seconds a ``409 chat busy`` asks the client to wait (or join the turn's stream)."""


class ChatError(ServerError):
    """Base class of the chat backend's errors."""


class ChatConfigError(ChatError):
    """The server's configuration cannot work (raised at start-up, never per turn)."""


class PublicUrlError(ChatConfigError):
    """``--public-url`` is missing where replicas need it, or cannot be a callback base."""


class StoreError(ChatError):
    """The store cannot be opened or migrated (unknown schema version, bad data dir)."""


class ChatNotFoundError(ChatError, ProblemError):
    """No such chat in this workspace (or it was deleted) (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "Chat not found"

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"no chat {chat_id!r} in this workspace")
        self.chat_id = chat_id

    def extensions(self) -> dict[str, Any]:
        return {"chatId": self.chat_id}


class ChatBusyError(ChatError, ProblemError):
    """The chat has a turn in flight: its lock is held and its lease has not expired
    (409, ``Retry-After``).

    ``active_message_id`` is the assistant message being produced,
    ``active_user_message_id`` the user message that started it, ``expires_at`` the
    lease's expiry (Unix epoch ms). ``adoptable``: the lease expired but the turn's
    runner session may still run (its process died): a sweep adopts and settles it.
    """

    status: ClassVar[int] = 409
    type: ClassVar[str] = CHAT_BUSY
    title: ClassVar[str] = "Chat busy"

    def __init__(
        self,
        chat_id: str,
        active_message_id: str | None,
        active_user_message_id: str | None,
        expires_at: int | None,
        *,
        adoptable: bool = False,
    ) -> None:
        super().__init__(f"chat {chat_id!r} has a turn in flight")
        self.chat_id = chat_id
        self.active_message_id = active_message_id
        self.active_user_message_id = active_user_message_id
        self.expires_at = expires_at
        self.adoptable = adoptable

    def detail(self) -> str:
        return (
            "a turn is in flight on this chat; join it (GET /api/assistant/chats/{chatId}"
            "/stream), stop it (POST …/interrupt) or wait for it to settle"
        )

    def extensions(self) -> dict[str, Any]:
        return {
            "chatId": self.chat_id,
            "activeMessageId": self.active_message_id,
            "activeUserMessageId": self.active_user_message_id,
            "lockExpiresAt": self.expires_at,
        }

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(BUSY_RETRY_AFTER)}


class TokenBudgetSpentError(ChatError, ProblemError):
    """The workspace has spent its token budget for the UTC day: no turn starts (429,
    ``Retry-After``: the seconds until the next UTC day)."""

    status: ClassVar[int] = 429
    type: ClassVar[str] = TOKEN_BUDGET_SPENT
    title: ClassVar[str] = "Token budget spent"

    def __init__(self, workspace_id: str, used: int, budget: int, retry_after: int) -> None:
        super().__init__(
            f"workspace {workspace_id!r} has spent its budget for today: {used} of "
            f"{budget} tokens (the day is UTC's)"
        )
        self.used = used
        self.budget = budget
        self.retry_after = retry_after

    def extensions(self) -> dict[str, Any]:
        return {"usedTokens": self.used, "budgetTokens": self.budget}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class NoRunningTurnError(ChatError, ProblemError):
    """The chat has no running turn (to interrupt, or to give a message to) (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = NO_LIVE_TURN
    title: ClassVar[str] = "No running turn"

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"chat {chat_id!r} has no running turn")
        self.chat_id = chat_id

    def detail(self) -> str:
        return f"{self}; start one with POST /api/assistant/chat/stream"

    def extensions(self) -> dict[str, Any]:
        return {"chatId": self.chat_id}


class ForkPointError(ChatError, ProblemError):
    """A fork's ``messageId`` is not a stored assistant message of the chat: no message
    of it, or a user message (422)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = FORK_POINT
    title: ClassVar[str] = "Not a fork point"

    def __init__(self, chat_id: str, message_id: str, reason: str) -> None:
        super().__init__(f"message {message_id!r} {reason}")
        self.chat_id = chat_id
        self.message_id = message_id

    def detail(self) -> str:
        return f"{self}; a fork starts from an assistant message of the chat"

    def extensions(self) -> dict[str, Any]:
        return {"chatId": self.chat_id, "messageId": self.message_id}


class ForkPointRunningError(ForkPointError):
    """A fork's ``messageId`` is the assistant message of the chat's running turn: it has
    not settled, so there is nothing to fork from yet (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = FORK_POINT_RUNNING
    title: ClassVar[str] = "Fork point still running"

    def __init__(self, chat_id: str, message_id: str) -> None:
        super().__init__(chat_id, message_id, "is the answer of the chat's running turn")

    def detail(self) -> str:
        return f"{self}; fork from it once the turn settles, or from an earlier answer"


class StreamTokenError(ChatError, ProblemError):
    """A stream token that is malformed, forged or expired (401)."""

    status: ClassVar[int] = 401
    type: ClassVar[str] = UNAUTHORIZED
    title: ClassVar[str] = "Unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="sandstream"'}


class StreamTokenScopeError(ChatError, ProblemError):
    """A valid stream token for another chat or workspace (403)."""

    status: ClassVar[int] = 403
    type: ClassVar[str] = STREAM_TOKEN_SCOPE
    title: ClassVar[str] = "Stream token for another chat"


class AttachmentError(ChatError, ProblemError):
    """Attachment ids that are unknown, deleted, or belong to another chat (422)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = UNKNOWN_ATTACHMENT
    title: ClassVar[str] = "Unknown attachment"

    def __init__(self, unknown: list[str]) -> None:
        super().__init__(
            "unknown attachment id(s) for this chat: " + ", ".join(repr(i) for i in unknown)
        )
        self.unknown = unknown

    def extensions(self) -> dict[str, Any]:
        return {"unknownIds": self.unknown}


class FileNotFoundInBagError(ChatError, ProblemError):
    """No such file in this chat's bag or this run's files (or it was deleted) (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "File not found"

    def __init__(self, file_id: str, where: str = "this chat") -> None:
        super().__init__(f"no file {file_id!r} in {where}")
        self.file_id = file_id

    def extensions(self) -> dict[str, Any]:
        return {"fileId": self.file_id}


class GrantNotFoundError(ChatError, ProblemError):
    """No such permission grant in this chat (or it was revoked) (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "Grant not found"

    def __init__(self, grant_id: str) -> None:
        super().__init__(f"no grant {grant_id!r} in this chat")
        self.grant_id = grant_id

    def extensions(self) -> dict[str, Any]:
        return {"grantId": self.grant_id}


class WorkspaceFileNotFoundError(ChatError, ProblemError):
    """No regular file at this path of the work dir in the chat's latest workspace
    snapshot (none there, a directory or a link, or the chat has no snapshot) (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "File not found"

    def __init__(self, path: str) -> None:
        super().__init__(f"no file {path!r} in the chat's workspace")
        self.path = path

    def extensions(self) -> dict[str, Any]:
        return {"path": self.path}


class RunNotFoundError(ChatError, ProblemError):
    """No such Agents-block run in this workspace (404)."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "Run not found"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no agents run {session_id!r} in this workspace")
        self.session_id = session_id

    def extensions(self) -> dict[str, Any]:
        return {"sessionId": self.session_id}


class TokenRejectedError(ChatError, ProblemError):
    """A one-time token was missing, unknown, used, expired, or for another
    purpose/session (401; why is logged, never answered)."""

    status: ClassVar[int] = 401
    type: ClassVar[str] = UNAUTHORIZED
    title: ClassVar[str] = "Unauthorized"

    def detail(self) -> str:
        return "the one-time token is invalid, expired or already used"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="sandbox"'}

    def answered(self) -> None:
        logging.getLogger("sandstream.chat").warning("sandbox callback refused: %s", self)


class IdempotencyKeyError(ChatError, ProblemError):
    """A sandbox callback's ``Idempotency-Key`` header is not 1-200 visible ASCII
    characters (422)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = INVALID_BODY
    title: ClassVar[str] = "Invalid request"


class UploadError(ChatError, ProblemError):
    """An upload body could not be read: not multipart, malformed, or without files
    (422)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = INVALID_BODY
    title: ClassVar[str] = "Invalid request"


class UnsupportedMediaTypeError(UploadError):
    """An upload that is not ``multipart/form-data`` (with a boundary) (415)."""

    status: ClassVar[int] = 415
    type: ClassVar[str] = UNSUPPORTED_MEDIA_TYPE
    title: ClassVar[str] = "Unsupported Media Type"


class UploadTooLargeError(UploadError):
    """An upload exceeded a size or count limit; nothing was kept (413)."""

    status: ClassVar[int] = 413
    type: ClassVar[str] = PAYLOAD_TOO_LARGE
    title: ClassVar[str] = "Payload Too Large"


class NoChatError(ChatError, ProblemError):
    """A workspace snapshot callback of a dispatch that has no chat, an Agents-block
    run: it has no snapshots to save or restore (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = NO_CHAT
    title: ClassVar[str] = "No chat"

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"dispatch {session_id!r} has no chat (an Agents-block run): workspace snapshots "
            "are kept for a chat's turns only"
        )
        self.session_id = session_id

    def extensions(self) -> dict[str, Any]:
        return {"sessionId": self.session_id}


class SnapshotTooLargeError(ChatError, ProblemError):
    """A workspace snapshot, or a blob pack, over ``--snapshot-max-bytes``, or any while
    snapshots are off (413)."""

    status: ClassVar[int] = 413
    type: ClassVar[str] = PAYLOAD_TOO_LARGE
    title: ClassVar[str] = "Payload Too Large"


class SnapshotIncompleteError(ChatError, ProblemError):
    """A snapshot manifest lists blobs the blob store does not hold; nothing was stored
    (409)."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = SNAPSHOT_INCOMPLETE
    title: ClassVar[str] = "Snapshot blobs missing"

    def __init__(self, missing: int) -> None:
        super().__init__(f"{missing} blob(s) the manifest lists are not stored")
        self.missing = missing

    def detail(self) -> str:
        return f"{self}: send them first (POST …/snapshot/blobs), then the manifest again"

    def extensions(self) -> dict[str, Any]:
        return {"missingCount": self.missing}


class SnapshotBlobNotFoundError(ChatError, ProblemError):
    """A blob asked for restore that no kept snapshot of the dispatch's chat lists (or
    that is no longer stored) (404). ``count``: how many of those asked are so."""

    status: ClassVar[int] = 404
    type: ClassVar[str] = NOT_FOUND
    title: ClassVar[str] = "Blob not found"

    def __init__(self, sha256: str, count: int) -> None:
        more = f" ({count - 1} more of those asked are not either)" if count > 1 else ""
        super().__init__(f"no kept snapshot of this chat has the blob {sha256}{more}")
        self.sha256 = sha256
        self.count = count

    def extensions(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "notFoundCount": self.count}


class TargetError(ChatError, ProblemError, ValueError):
    """The requested runner URL is malformed or not allowed (422)."""

    status: ClassVar[int] = 422
    type: ClassVar[str] = BAD_RUNNER
    title: ClassVar[str] = "Runner not usable"


class RunnerSessionGoneError(ChatError):
    """The runner no longer has the session (or cannot be reached)."""


class RemoteRunnerError(ChatError, ProblemError):
    """A remote runner refused or failed a session request (502)."""

    status: ClassVar[int] = 502
    type: ClassVar[str] = RUNNER_FAILED
    title: ClassVar[str] = "Runner failed"


class FencedError(ChatError):
    """A write under ``generation`` was refused: ``fence``, a newer generation, owns
    the session now. Nothing of the batch was written."""

    def __init__(self, session_id: str, generation: int, fence: int) -> None:
        super().__init__(
            f"session {session_id}: generation {generation} is fenced off by generation {fence}"
        )
        self.session_id = session_id
        self.generation = generation
        self.fence = fence


class ChunkGapError(ChatError, ValueError):
    """A batch does not follow the stored chunks (its first cursor is past the last
    stored one + 1, or below 1). Nothing of it was written."""


class ChunkShapeError(ChatError, ValueError):
    """A batch's data is not ``count`` whole lines. Nothing of it was written."""


class SourceError(ChatError):
    """A session's chunks cannot be read from its source."""


class SourceGoneError(SourceError):
    """The session, or its chunks after the cursor asked for, are no longer there."""


class RunnerLostError(SourceGoneError):
    """The session's runner has not answered for longer than the chat waits for a
    runner to come back (``--runner-lost-timeout``): its chunks are taken as gone."""


class SourceRefusedError(SourceError):
    """The runner refuses the read, and asking again will not change that."""


class RedisLeaseError(ChatError):
    """A call of the log mover's Redis lease failed: its outcome is unknown (the next
    heartbeat or sweep calls again)."""


class RedisConnectionError(RedisLeaseError):
    """Redis could not be reached, the connection broke or a reply did not come in time."""


class RedisAuthError(RedisLeaseError):
    """Redis refused the Redis URL's credentials (a wrong password or user, or none
    given to a server that requires one)."""


class RedisReplyError(RedisLeaseError):
    """Redis answered with an error, or with a reply the lease cannot use."""


class PushSubscriptionLimitError(ChatError, ProblemError):
    """The workspace already has as many push subscriptions as a workspace may hold
    (``--push-max-subscriptions``): a new device is refused until one is deleted (409).
    Registering a device it holds again is not refused."""

    status: ClassVar[int] = 409
    type: ClassVar[str] = PUSH_SUBSCRIPTION_LIMIT
    title: ClassVar[str] = "Too many push subscriptions"

    def __init__(self, workspace_id: str, limit: int) -> None:
        super().__init__(
            f"workspace {workspace_id!r} has {limit} push subscriptions, the most it may "
            "hold: delete one to register another"
        )
        self.workspace_id = workspace_id
        self.limit = limit

    def extensions(self) -> dict[str, Any]:
        return {"workspaceId": self.workspace_id, "limit": self.limit}
