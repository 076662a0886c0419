"""The chat backend's records: what the store keeps and what the API returns.

JSON field names are camelCase (the browser's side, as in
:class:`~sandstream.core.persistence.PersistedMessage`); the store's columns are
snake_case. Times are Unix epoch milliseconds.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from sandstream.core import ChatTurn, PersistedFileAttachment, PersistedMessage, SnapshotManifest

__all__ = [
    "BagFile",
    "BagSource",
    "Chat",
    "DeliveryOutcome",
    "DispatchKind",
    "DispatchRecord",
    "Environment",
    "NewBlob",
    "OnDisconnect",
    "PendingPush",
    "PermissionGrantRecord",
    "Purpose",
    "PushKind",
    "PushSubscription",
    "SnapshotRecord",
    "TokenMint",
    "TurnFinish",
    "TurnRecord",
    "TurnRequest",
    "TurnStart",
    "TurnState",
]

OnDisconnect: TypeAlias = Literal["continue", "cancel"]
"""What a client leaving ``POST /chat/stream`` does to its turn: nothing, or interrupt it."""
TurnState: TypeAlias = Literal["starting", "running", "settled"]

Purpose: TypeAlias = Literal["setup", "run", "upload"]
"""What a one-time token redeems: ``GET /env``, ``GET /config``, ``POST /results``."""

DispatchKind: TypeAlias = Literal["chat", "agents"]
BagSource: TypeAlias = Literal["upload", "result"]


class Chat(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A conversation (its ``type`` in the store: ``assistant_sandbox``).

    ``conversation_id`` is the first user message's id. ``active_message_id`` is set
    while a turn holds the chat's lock, until the turn settles (also while its lease
    has lapsed and another replica takes it over): the assistant message being produced.
    """

    id: str
    workspace_id: str
    created_at: int
    updated_at: int
    workflow_id: str | None = None
    title: str | None = None
    conversation_id: str | None = None
    message_count: int = 0
    active_message_id: str | None = None
    active_user_message_id: str | None = None
    lock_expires_at: int | None = None


class BagFile(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A chat-bag file: bytes on disk under their SHA-256, metadata in the database.

    ``source`` is ``upload`` (the user's) or ``result`` (written back by a run, then
    attached to that turn's assistant message). ``chat_id`` is ``None`` for files of
    an Agents-block run (the workspace's bag).
    """

    id: str
    workspace_id: str
    name: str
    size: int
    content_type: str
    sha256: str
    source: BagSource
    created_at: int
    chat_id: str | None = None
    session_id: str | None = None
    message_id: str | None = None

    def attachment(self) -> PersistedFileAttachment:
        """The reference a message holds to this file."""
        return PersistedFileAttachment(
            id=self.id,
            name=self.name,
            size=self.size,
            content_type=self.content_type,
            sha256=self.sha256,
        )


class DispatchRecord(msgspec.Struct, kw_only=True):
    """One dispatch: what the container's callbacks are answered from.

    A chat turn's session names its chat and messages; an Agents-block run's has no
    chat. ``conversation`` is what was replayed to the sandbox.
    """

    id: str
    kind: DispatchKind
    workspace_id: str
    prompt: str
    created_at: int
    conversation: list[ChatTurn] = msgspec.field(default_factory=list)
    chat_id: str | None = None
    workflow_id: str | None = None
    user_message_id: str | None = None
    assistant_message_id: str | None = None
    settled_at: int | None = None


class SnapshotRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A chat's workspace snapshot (``chat_snapshots``): what the turn of dispatch
    ``dispatch_id`` (its assistant message ``assistant_message_id``) saved of its
    sandbox for the chat's next turn. ``files`` and ``total_bytes``: the manifest's
    regular files and their bytes."""

    id: str
    workspace_id: str
    chat_id: str
    dispatch_id: str
    assistant_message_id: str | None
    manifest: SnapshotManifest
    files: int
    total_bytes: int
    created_at: int


class PermissionGrantRecord(msgspec.Struct, frozen=True, rename="camel", kw_only=True):
    """A chat's permission grant (``permission_grants``): the user answered ``always``
    to a request about a tool call of ``kind`` titled ``title`` in the turn of assistant
    message ``message_id``; the chat's later turns answer such a request without asking."""

    id: str
    kind: str
    title: str
    created_at: int
    message_id: str


class TokenMint(msgspec.Struct, frozen=True, kw_only=True):
    """A one-time token as stored: its SHA-256 (hex), purpose and expiry."""

    hash: str
    purpose: Purpose
    expires_at: int


class NewBlob(msgspec.Struct, frozen=True, kw_only=True):
    """A file already stored in the blob store, to be recorded in the bag."""

    name: str
    size: int
    content_type: str
    sha256: str


class Environment(msgspec.Struct, rename="camel", kw_only=True):
    """A workflow's named environment: variables and a setup script.

    Served to the sandbox by ``GET /env``; its ``SANDBOX_URL`` variable, if any,
    picks the runner for the workflow's turns.
    """

    workspace_id: str
    workflow_id: str
    vars: dict[str, str] = msgspec.field(default_factory=dict)
    setup_script: str = ""
    updated_at: int = 0


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything :meth:`TurnStore.begin_turn` writes, with ids chosen by the caller.

    ``chat_id`` ``None`` creates the chat. ``holder`` and ``lease_expires_at`` are the
    lock's lease; ``tokens`` the session's hashed one-time tokens.
    """

    workspace_id: str
    chat_id: str | None
    workflow_id: str | None
    text: str
    attachment_ids: list[str]
    user_message_id: str
    assistant_message_id: str
    session_id: str
    holder: str
    lease_expires_at: int
    tokens: list[TokenMint]
    now: int
    replay_limit: int
    runner_url: str | None = None
    on_disconnect: OnDisconnect = "continue"


class TurnStart(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`TurnStore.begin_turn` wrote: the chat, the user message, the session.

    ``created`` is true when this turn created the chat. ``session.conversation`` is
    the replay window (the messages before this one, at most ``replay_limit``).
    ``recovered_message_id`` names an assistant message written for a turn whose
    server died (its lock had expired), if this turn took such a lock over.
    """

    chat: Chat
    created: bool
    user_message: PersistedMessage
    session: DispatchRecord
    holder: str
    recovered_message_id: str | None = None


class TurnFinish(msgspec.Struct, frozen=True, kw_only=True):
    """The settled turn: the assistant message (attachments are added by the store)."""

    chat_id: str
    session_id: str
    holder: str
    message: PersistedMessage
    now: int


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A chat turn and its runner session (``chat_turns``).

    ``id`` is the chat's session id (the sandbox callbacks and tokens use it);
    ``session_id`` the runner session's (``None`` until the runner created it);
    ``runner_url`` ``None`` for the embedded runner.
    """

    id: str
    chat_id: str
    workspace_id: str
    session_id: str | None
    runner_url: str | None
    assistant_message_id: str
    user_message_id: str
    on_disconnect: OnDisconnect
    state: TurnState
    created_at: int


DeliveryOutcome: TypeAlias = Literal["sent", "retry", "failed", "unknown"]
"""How a push's send to one device ended: taken; to be tried again at the push's next
attempt; refused, or the device is gone; the service may have taken it (never sent
again)."""

PushKind: TypeAlias = Literal["webpush", "apns", "fcm"]
"""The push service a subscription is on: Web Push, Apple's APNs, Firebase's FCM."""


class PushSubscription(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A device's push endpoint in a workspace (``push_subscriptions``): a Web Push
    subscription (``address`` its endpoint URL, with ``p256dh`` and ``auth``), an APNs
    device token or an FCM registration token (``address``)."""

    id: str
    workspace_id: str
    kind: PushKind
    address: str
    p256dh: str | None = None
    auth: str | None = None
    created_at: int


class PendingPush(msgspec.Struct, frozen=True, kw_only=True):
    """A push waiting out its delay, claimed by one replica (``pending_pushes``).

    ``kind``: ``alert`` (a turn ended, or, with ``permission_id``, the agent asks the
    user) or ``dismiss`` (a silent push telling the devices to close the alert of
    ``collapse_key``: one opened it, or its question was answered; not to
    ``except_subscription``). ``seen_at``: when a device saw the event (a viewer had it,
    or an ack): then nobody is pushed. ``attempts``: the earlier rounds that left a
    device to try again. ``generation``: the claim's fence.
    """

    id: str
    workspace_id: str
    chat_id: str
    kind: Literal["alert", "dismiss"]
    collapse_key: str
    title: str
    body: str
    except_subscription: str | None
    created_at: int
    seen_at: int | None
    permission_id: str | None = None
    attempts: int = 0
    generation: int
