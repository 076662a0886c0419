"""The storage interface of the chat backend: one :class:`~typing.Protocol` per concern,
and :class:`ChatStore`, all of them.

- :class:`ChatMessageStore`: chats and their messages;
- :class:`TurnStore`: chat turns, the single-flight lock, lost turns;
- :class:`DispatchStore`: dispatch records and one-time tokens;
- :class:`BagFileStore`: the chat bag's files;
- :class:`EnvironmentStore`: workflow environments;
- :class:`PushSubscriptionStore`, :class:`PushAlertStore`, :class:`PushOutboxStore`:
  push subscriptions, the alerts events record, the outbox's claims and deliveries;
- :class:`SnapshotStore`: chats' workspace snapshots (their manifests; the blobs are
  the bag's blob store's);
- :class:`ForkStore`: a new chat from one assistant message of another;
- :class:`LogMoverTables`: the log mover's tables, handed to it whole.

Each consumer takes the parts it uses: the log mover's settler and its lock-keeping
lease a :class:`TurnStore`, the turn mover and the turn service the intersections
they declare, the dispatcher an :class:`EnvironmentStore`, the Agents-block runs a
:class:`DispatchStore`, the push outbox a :class:`PushOutboxStore`. The chat
service, which hands the parts out and which the routes reach
(``service.store``), holds a :class:`ChatStore`.

Implemented once, :class:`~.sql.SqlChatStore`, on either database:
:class:`~.sql.SQLiteChatStore` (embedded, the default) or
:class:`~.sql.PostgresChatStore` (``--database-url``: replicas on many machines); it
opens, gives the bag's blob store and closes, which only the code that opens it
needs. Every method is a coroutine that does its blocking work off the trio event
loop; every query is scoped by workspace where a workspace is named. Methods raise
the specific errors of :mod:`~sandstream.server.chat.model.errors`.

Cancellation: a store call runs to completion once started (a transaction is never
left half-way); a cancelled caller gets :class:`trio.Cancelled` after it returns, so
callers that must know the outcome (the turn's start and settle) shield the call.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from sandstream.core import MessageUsage, PermissionBlock, PersistedMessage, SnapshotManifest
from sandstream.server.chat.model import (
    BagFile,
    Chat,
    DeliveryOutcome,
    DispatchRecord,
    Environment,
    NewBlob,
    PendingPush,
    PermissionGrantRecord,
    Purpose,
    PushSubscription,
    SnapshotRecord,
    TokenMint,
    TurnFinish,
    TurnRecord,
    TurnRequest,
    TurnStart,
)
from sandstream.server.databases import OperationTimes

from .leases import DatabaseLease
from .moved_runs import MovedChunks

__all__ = [
    "BagFileStore",
    "ChatMessageStore",
    "ChatStore",
    "DispatchStore",
    "EnvironmentStore",
    "ForkStore",
    "GrantStore",
    "LogMoverTables",
    "PushAlertStore",
    "PushOutboxStore",
    "PushSubscriptionStore",
    "SnapshotStore",
    "TurnStore",
]


class ChatMessageStore(Protocol):
    """Chats and their messages."""

    async def create_chat(
        self, *, workspace_id: str, workflow_id: str | None, title: str | None, now: int
    ) -> Chat:
        """A new, empty chat (its first turn sets ``conversationId``)."""
        ...

    async def list_chats(self, workspace_id: str, *, limit: int, now: int) -> list[Chat]:
        """The workspace's chats, most recently updated first, deleted ones excluded."""
        ...

    async def get_chat(self, workspace_id: str, chat_id: str, *, now: int) -> Chat:
        """One chat. Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`."""
        ...

    async def get_messages(
        self, workspace_id: str, chat_id: str, *, limit: int | None = None
    ) -> list[PersistedMessage]:
        """The chat's messages in ``seq`` order (the last ``limit`` if given).

        Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`.
        """
        ...

    async def delete_chat(self, workspace_id: str, chat_id: str, *, now: int) -> None:
        """Soft-delete the chat and its bag files and delete its workspace snapshots, in
        one transaction.

        Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`, and
        :class:`~sandstream.server.chat.model.ChatBusyError` while a turn holds its lock.
        """
        ...

    async def append_user_message(
        self, workspace_id: str, chat_id: str, message: PersistedMessage, now: int
    ) -> None:
        """Append a user message (a follow-up given to the running turn).

        Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`."""
        ...


class TurnStore(Protocol):
    """Chat turns: their start and settling, the chat's single-flight lock, lost turns."""

    async def begin_turn(self, request: TurnRequest) -> TurnStart:
        """In one transaction: create or load the chat, take its lock, resolve the
        attachments, append the user message, record the session and its tokens.

        A lock whose lease has expired is taken over; the assistant message of the
        turn that held it is written as failed (``turn_lost``) if it is missing.
        Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`,
        :class:`~sandstream.server.chat.model.ChatBusyError` or
        :class:`~sandstream.server.chat.model.AttachmentError`, having written nothing.
        """
        ...

    async def abort_turn(self, start: TurnStart) -> None:
        """Undo :meth:`begin_turn` for a turn that was never dispatched (runner full)."""
        ...

    async def renew_lock(self, chat_id: str, holder: str, expires_at: int) -> bool:
        """Extend the lease of a lock ``holder`` holds; False if it no longer does."""
        ...

    async def finish_turn(self, finish: TurnFinish) -> PersistedMessage:
        """In one transaction: append the assistant message with the files the run
        wrote back as its attachments, close the dispatch (its unused tokens die),
        and release the lock if ``holder`` still holds it. Returns the message stored.
        """
        ...

    async def attach_runner_session(self, turn_id: str, session_id: str) -> None:
        """Record the runner session of turn ``turn_id`` (it is now ``running``)."""
        ...

    async def get_turn(self, session_id: str) -> TurnRecord | None:
        """The chat turn of runner session ``session_id``, if any."""
        ...

    async def latest_turn(self, workspace_id: str, chat_id: str) -> TurnRecord | None:
        """The chat's most recent turn (settled or not), if any. Raises ChatNotFoundError."""
        ...

    async def running_turns(self) -> list[TurnRecord]:
        """Every turn whose runner session runs and that has not settled."""
        ...

    async def hold_turn_lock(self, session_id: str, holder: str, expires_at: int) -> bool:
        """Make ``holder`` the holder of the chat lock of the running turn whose runner
        session is ``session_id``, until ``expires_at`` (the log mover's lease owner
        does it as it claims and renews). False if no running turn holds a lock."""
        ...

    async def turn_result_files(self, turn_id: str) -> list[BagFile]:
        """The files the run of turn ``turn_id`` wrote back so far, oldest first."""
        ...

    async def settle_turn(
        self, turn_id: str, message: PersistedMessage, now: int, *, generation: int | None = None
    ) -> bool:
        """In one transaction: the assistant message of turn ``turn_id`` written (with
        the files its run wrote back, and the chat's grants its ``always`` answers give:
        :class:`GrantStore`), its session settled, the chat's lock released
        (whoever holds it for this turn), the turn marked settled. False (nothing
        written) when it had settled already. With ``generation`` (the log mover's
        lease), raises :class:`~sandstream.server.chat.model.FencedError` (nothing written) if a
        newer generation has claimed the turn's session."""
        ...

    async def sweep_lost_turns(self, *, now: int, spare: Collection[str] = ()) -> list[str]:
        """Settle every turn whose lock expired at ``now``, except the turns ``spare``
        (ids: the log mover's, which settles them): in one transaction, its
        assistant message is written as failed (``turn_lost``, with the files its run
        wrote back) unless it exists, its session settles (unused tokens die) and the
        lock is released. Returns the ids of the chats it freed."""
        ...


class DispatchStore(Protocol):
    """Dispatch records (sessions) and their one-time tokens."""

    async def record_dispatch(self, session: DispatchRecord, tokens: list[TokenMint]) -> None:
        """Record a session without a chat (an Agents-block run) and its tokens."""
        ...

    async def close_dispatch(self, session_id: str, *, now: int) -> None:
        """Mark a session settled; its unused tokens can no longer be redeemed."""
        ...

    async def consume_token(
        self,
        token_hash: str,
        *,
        purpose: Purpose,
        session_id: str,
        now: int,
        idempotency_key: str | None = None,
    ) -> DispatchRecord:
        """Redeem a one-time token atomically and return its session.

        The token must exist with this hash, purpose and session and be unexpired, and
        either be unused (it is then marked used, with ``idempotency_key``) or have been
        redeemed with this same, non-``None`` ``idempotency_key`` while its session is
        unsettled (a retried callback: nothing changes). Raises
        :class:`~sandstream.server.chat.model.TokenRejectedError` otherwise, having changed nothing.
        """
        ...

    async def check_token(
        self, token_hash: str, *, purpose: Purpose, session_id: str, now: int
    ) -> DispatchRecord:
        """Check a token without consuming it: it must exist with this hash, purpose
        and session and be unexpired (redeemed or not), and its session unsettled.
        Raises :class:`~sandstream.server.chat.model.TokenRejectedError` otherwise."""
        ...


class BagFileStore(Protocol):
    """The chat bag's files (their metadata), and the files Agents-block runs wrote
    back."""

    async def add_uploads(
        self, workspace_id: str, chat_id: str, blobs: list[NewBlob], *, now: int
    ) -> list[BagFile]:
        """Record user uploads in a chat's bag. Raises ChatNotFoundError."""
        ...

    async def add_results(
        self, session: DispatchRecord, blobs: list[NewBlob], *, now: int
    ) -> list[BagFile]:
        """Record the files a run wrote back (the chat's bag, or the workspace's).

        Once per session: when the session's results are already recorded (a retried
        upload whose first attempt was committed), records nothing and returns those.
        """
        ...

    async def list_files(self, workspace_id: str, chat_id: str) -> list[BagFile]:
        """The chat's bag files, oldest first. Raises ChatNotFoundError."""
        ...

    async def get_file(self, workspace_id: str, chat_id: str, file_id: str) -> BagFile:
        """One bag file. Raises ChatNotFoundError or FileNotFoundInBagError."""
        ...

    async def list_run_files(self, workspace_id: str, session_id: str) -> list[BagFile]:
        """The files an Agents-block run wrote back, oldest first.

        Raises :class:`~sandstream.server.chat.model.RunNotFoundError` (no such run in the
        workspace).
        """
        ...

    async def get_run_file(self, workspace_id: str, session_id: str, file_id: str) -> BagFile:
        """One file an Agents-block run wrote back. Raises RunNotFoundError or
        FileNotFoundInBagError."""
        ...

    async def turn_attachments(self, session: DispatchRecord) -> list[BagFile]:
        """The files attached to a chat turn's user message, in the message's order
        (none for an Agents-block run, or once the chat was deleted)."""
        ...


class EnvironmentStore(Protocol):
    """Workflow environments."""

    async def get_environment(self, workspace_id: str, workflow_id: str) -> Environment | None:
        """The workflow's named environment, if one was set."""
        ...

    async def put_environment(self, environment: Environment) -> None:
        """Create or replace a workflow's named environment."""
        ...


class PushSubscriptionStore(Protocol):
    """The devices a workspace's push notifications go to."""

    async def add_push_subscription(
        self, subscription: PushSubscription, *, limit: int | None = None
    ) -> PushSubscription:
        """Store a device's subscription; the same address again in the workspace keeps
        its id (its keys replaced). Returns the stored one. A new address in a workspace
        that holds ``limit`` subscriptions already raises
        :class:`~sandstream.server.chat.model.PushSubscriptionLimitError` (nothing
        written)."""
        ...

    async def list_push_subscriptions(self, workspace_id: str) -> list[PushSubscription]:
        """The workspace's subscriptions, oldest first."""
        ...

    async def delete_push_subscription(self, workspace_id: str, subscription_id: str) -> bool:
        """Delete a subscription of the workspace; False if there was none."""
        ...


class PushAlertStore(Protocol):
    """Push alerts: the permission requests the log mover folds recorded (a settling
    turn records its own), and alerts seen, moot or acknowledged."""

    async def mark_push_seen(self, chat_id: str, now: int) -> int:
        """A device saw the chat's latest events: its waiting alerts push nobody.
        Returns how many were waiting."""
        ...

    async def mark_permissions_seen(
        self, turn_id: str, permission_ids: Sequence[str], now: int
    ) -> None:
        """A viewer handed out the permission requests ``permission_ids`` of the running
        turn ``turn_id``: their alerts, recorded or still to be, push nobody."""
        ...

    async def record_permission_news(
        self,
        session_id: str,
        *,
        generation: int,
        asked: str | None,
        resolved: Sequence[str],
        now: int,
    ) -> None:
        """The log mover folded permission requests of the running turn of runner
        session ``session_id``: those ``resolved`` are moot (a waiting alert dropped, a
        delivered one dismissed); ``asked``, the newest still pending, gets an alert
        (once), which replaces the chat's permission alert still waiting. Under the
        mover's lease ``generation`` (:class:`FencedError` if a newer one fenced it)."""
        ...

    async def permission_answered(self, turn_id: str, permission_id: str, now: int) -> None:
        """The user answered the permission request: its alert is moot."""
        ...

    async def ack_push(
        self,
        workspace_id: str,
        push_id: str,
        *,
        subscription_id: str | None,
        opened: bool,
        now: int,
    ) -> bool:
        """A device acknowledged the alert ``push_id``: it is seen; ``opened`` (on the
        device ``subscription_id``) also records a dismiss push to the workspace's
        other devices if a device had the alert. False for an unknown alert."""
        ...


class PushOutboxStore(Protocol):
    """The push outbox's claims, each device's delivery, and the devices found gone."""

    async def claim_due_pushes(
        self, owner: str, *, now: int, delay_ms: int, lease_ms: int, limit: int = 32
    ) -> list[PendingPush]:
        """Claim for ``lease_ms`` the waiting pushes older than ``delay_ms`` (dismisses
        at once) whose next attempt is due and that no live claim holds, each under a
        new generation; a device whose send was under way when the claim before ended
        is never sent to again."""
        ...

    async def push_targets(self, push: PendingPush) -> list[PushSubscription]:
        """The subscriptions ``push`` goes to now: not tried yet, or to try again."""
        ...

    async def begin_push_delivery(
        self, push_id: str, subscription_id: str, *, generation: int, now: int, lease_ms: int
    ) -> None:
        """Record, before it is made, the send of a claimed push to a device, and hold
        the claim ``lease_ms`` more (:class:`FencedError` if it was lost)."""
        ...

    async def finish_push_delivery(
        self, push_id: str, subscription_id: str, outcome: DeliveryOutcome, *, generation: int
    ) -> None:
        """Record how the send to a device ended (:class:`FencedError` if the claim
        was lost)."""
        ...

    async def postpone_push(self, push_id: str, *, generation: int, next_attempt_at: int) -> None:
        """Count an attempt of a claimed push and leave it waiting until
        ``next_attempt_at`` (:class:`FencedError` if the claim was lost)."""
        ...

    async def end_push(self, push_id: str, *, generation: int, now: int) -> str:
        """End a claimed push: ``sent`` if a device had it (or may have), else
        ``dropped``, which is returned; devices left to try again are given up
        (:class:`FencedError` if the claim was lost)."""
        ...

    async def release_push(self, push_id: str, *, generation: int) -> None:
        """Give up the claim ``generation`` of a push still waiting (another replica
        takes it at once)."""
        ...

    async def remove_gone_subscription(self, subscription_id: str) -> None:
        """Delete a subscription its push service said is gone."""
        ...


class SnapshotStore(Protocol):
    """Chats' workspace snapshots: what a chat turn's sandbox saved for the chat's next
    turn. A chat keeps its ``keep`` newest; their blobs are never deleted here."""

    async def add_snapshot(
        self, session: DispatchRecord, manifest: SnapshotManifest, *, keep: int, now: int
    ) -> SnapshotRecord:
        """In one transaction: store ``manifest`` as the newest snapshot of the chat of
        dispatch ``session`` and delete that chat's snapshots older than its ``keep``
        newest. The same manifest again from the same dispatch (the same
        :func:`~sandstream.core.manifest_digest`) stores nothing and returns the snapshot
        stored. Raises :class:`~sandstream.server.chat.model.NoChatError` (a dispatch
        without a chat) or :class:`~sandstream.server.chat.model.ChatNotFoundError`
        (the chat was deleted), having written nothing."""
        ...

    async def latest_snapshot(self, workspace_id: str, chat_id: str) -> SnapshotRecord | None:
        """The chat's newest snapshot, if it has one."""
        ...

    async def unkept_hashes(
        self, workspace_id: str, chat_id: str, hashes: Collection[str]
    ) -> list[str]:
        """Those of ``hashes`` (each once, in their order) that no kept snapshot of the
        chat lists: none when a restore may read them all."""
        ...

    async def add_workspace_blobs(self, workspace_id: str, hashes: Collection[str]) -> None:
        """Record that a sandbox of the workspace sent the blobs ``hashes`` (their bytes,
        checked): its snapshots may list them."""
        ...

    async def unsent_hashes(self, workspace_id: str, hashes: Collection[str]) -> list[str]:
        """Those of ``hashes`` (each once, in their order) no sandbox of the workspace
        sent: a manifest listing one is refused, whoever stored the bytes."""
        ...


class GrantStore(Protocol):
    """Chats' permission grants: the ``always`` answers a chat keeps for its next turns,
    one per tool kind and title. Recorded as the log mover folds them
    (:meth:`record_turn_grants`) and again as the turn settles
    (:meth:`TurnStore.settle_turn`), deleted with the chat."""

    async def record_turn_grants(
        self,
        session_id: str,
        *,
        generation: int,
        answered: Sequence[PermissionBlock],
        now: int,
    ) -> None:
        """The log mover folded the ``answered`` permission requests of the running
        turn of runner session ``session_id``: those resolved ``always`` by the user
        become the chat's grants (one it holds stays as it is), so a turn settled lost
        keeps them. Nothing for a turn settled already. Under the mover's lease
        ``generation`` (:class:`FencedError` if a newer one fenced it)."""
        ...

    async def list_grants(self, workspace_id: str, chat_id: str) -> list[PermissionGrantRecord]:
        """The chat's grants, oldest first. Raises
        :class:`~sandstream.server.chat.model.ChatNotFoundError` (no such chat in the
        workspace, or deleted)."""
        ...

    async def revoke_grant(self, workspace_id: str, chat_id: str, grant_id: str) -> None:
        """Delete grant ``grant_id`` of the chat: its later turns ask again. Raises
        :class:`~sandstream.server.chat.model.ChatNotFoundError` or
        :class:`~sandstream.server.chat.model.GrantNotFoundError`, having deleted nothing."""
        ...


class ForkStore(Protocol):
    """Forks: a new chat from one assistant message of another, so two lines of work go
    on from one point."""

    async def fork_chat(
        self, workspace_id: str, chat_id: str, message_id: str, *, now: int
    ) -> Chat:
        """In one transaction: a new chat (titled after the source, `` (fork)``) holding
        copies, under new ids, of the chat's messages up to and including the assistant
        message ``message_id``, of the bag files they attach, and of the workspace
        snapshot that message's turn saved (else the newest saved before it, else none):
        its next turn restores that and replays those. Returns the new chat.

        Raises :class:`~sandstream.server.chat.model.ChatNotFoundError`,
        :class:`~sandstream.server.chat.model.ForkPointError` (not a message of the
        chat, or a user message) or
        :class:`~sandstream.server.chat.model.ForkPointRunningError` (the running
        turn's), having written nothing.
        """
        ...


class UsageStore(Protocol):
    """The tokens spent: per chat, and per workspace and UTC day, the sums of the
    settled turns' usage (recorded by :meth:`TurnStore.settle_turn`)."""

    async def chat_usage(self, workspace_id: str, chat_id: str) -> MessageUsage:
        """The chat's total (zeros before its first metered turn). Raises
        :class:`~sandstream.server.chat.model.ChatNotFoundError`."""
        ...

    async def workspace_usage(self, workspace_id: str, day: str) -> MessageUsage:
        """The workspace's total on UTC day ``day`` (``YYYY-MM-DD``; zeros if none)."""
        ...


class LogMoverTables(Protocol):
    """The log mover's tables in the chat database."""

    moved_chunks: MovedChunks
    """The log mover's moved chunks and fences, in the chat database."""

    lease: DatabaseLease
    """The log mover's lease in the chat database (used when no Redis is configured)."""


class ChatStore(
    ChatMessageStore,
    TurnStore,
    DispatchStore,
    BagFileStore,
    EnvironmentStore,
    PushSubscriptionStore,
    PushAlertStore,
    PushOutboxStore,
    SnapshotStore,
    GrantStore,
    ForkStore,
    UsageStore,
    LogMoverTables,
    Protocol,
):
    """The whole store: every part above."""

    @property
    def operations(self) -> OperationTimes:
        """Its database's calls, timed (for /metrics)."""
        ...

    async def ping(self, timeout: float) -> None:
        """Return once the database answers a trivial query (``timeout``: seconds to
        wait for a connection); raise its error if it does not (:mod:`.faults`)."""
        ...
