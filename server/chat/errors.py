"""The chat backend's exception types. Routes turn each into one problem JSON answer."""

from __future__ import annotations

from sandstream.server.errors import ServerError

__all__ = [
    "AttachmentError",
    "ChatBusyError",
    "ChatConfigError",
    "ChatError",
    "ChatNotFoundError",
    "ChunkGapError",
    "ChunkShapeError",
    "FencedError",
    "FileNotFoundInBagError",
    "IdempotencyKeyError",
    "PublicUrlError",
    "RedisAuthError",
    "RedisConnectionError",
    "RedisLeaseError",
    "RedisReplyError",
    "RemoteRunnerError",
    "RunNotFoundError",
    "RunnerSessionGoneError",
    "SourceError",
    "SourceGoneError",
    "SourceRefusedError",
    "StoreError",
    "TargetError",
    "TokenRejectedError",
    "UnsupportedMediaTypeError",
    "UploadError",
    "UploadTooLargeError",
]


class ChatError(ServerError):
    """Base class of the chat backend's errors."""


class ChatConfigError(ChatError):
    """The server's configuration cannot work (raised at start-up, never per turn)."""


class PublicUrlError(ChatConfigError):
    """``--public-url`` is missing where replicas need it, or cannot be a callback base."""


class StoreError(ChatError):
    """The store cannot be opened or migrated (unknown schema version, bad data dir)."""


class ChatNotFoundError(ChatError):
    """No such chat in this workspace (or it was deleted)."""

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"no chat {chat_id!r} in this workspace")
        self.chat_id = chat_id


class ChatBusyError(ChatError):
    """The chat has a turn in flight: its lock is held and its lease has not expired.

    ``active_message_id`` is the assistant message being produced,
    ``active_user_message_id`` the user message that started it, ``expires_at`` the
    lease's expiry (Unix epoch ms). ``adoptable``: the lease expired but the turn's
    runner session may still run (its process died): a sweep adopts and settles it.
    """

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


class NoLiveTurnError(ChatError):
    """The chat has no running turn (to interrupt, or to give a message to)."""

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"chat {chat_id!r} has no running turn")
        self.chat_id = chat_id


class StreamTokenError(ChatError):
    """A stream token that is malformed, forged or expired (401)."""


class StreamTokenScopeError(ChatError):
    """A valid stream token for another chat or workspace (403)."""


class AttachmentError(ChatError):
    """Attachment ids that are unknown, deleted, or belong to another chat."""

    def __init__(self, unknown: list[str]) -> None:
        super().__init__(
            "unknown attachment id(s) for this chat: " + ", ".join(repr(i) for i in unknown)
        )
        self.unknown = unknown


class FileNotFoundInBagError(ChatError):
    """No such file in this chat's bag or this run's files (or it was deleted)."""

    def __init__(self, file_id: str, where: str = "this chat") -> None:
        super().__init__(f"no file {file_id!r} in {where}")
        self.file_id = file_id


class RunNotFoundError(ChatError):
    """No such Agents-block run in this workspace."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no agents run {session_id!r} in this workspace")
        self.session_id = session_id


class TokenRejectedError(ChatError):
    """A one-time token was missing, unknown, used, expired, or for another purpose/session."""


class IdempotencyKeyError(ChatError):
    """A sandbox callback's ``Idempotency-Key`` header is not 1-200 visible ASCII
    characters."""


class UploadError(ChatError):
    """An upload body could not be read: not multipart, malformed, or without files."""


class UnsupportedMediaTypeError(UploadError):
    """An upload that is not ``multipart/form-data`` (with a boundary)."""


class UploadTooLargeError(UploadError):
    """An upload exceeded a size or count limit; nothing was kept."""


class TargetError(ChatError, ValueError):
    """The requested runner URL is malformed or not allowed."""


class RunnerSessionGoneError(ChatError):
    """The runner no longer has the session (or cannot be reached)."""


class RemoteRunnerError(ChatError):
    """A remote runner refused or failed a session request (``502``)."""


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
