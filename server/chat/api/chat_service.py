"""The chat backend's service: one object the routes reach, holding its parts.

:class:`ChatService` composes the chat turns (:class:`~sandstream.server.chat.turns.ChatTurns`), the
Agents-block runs (:class:`~sandstream.server.chat.agents.AgentsRuns`), the push notifications
(:mod:`.push`) and what they share: the
settings, the store, the blobs, the embedded runner and the
:class:`~sandstream.server.chat.turns.Dispatcher`. Routes are thin; the parts do the work.
:meth:`ChatService.shutdown` refuses new work, then ends the turns, then the runs.
"""

from __future__ import annotations

import trio

from sandstream.core import DEFAULT_MAX_LINE_BYTES
from sandstream.server.chat.agents import AgentsRuns
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.credentials import StreamTokens
from sandstream.server.chat.model import new_id
from sandstream.server.chat.push import PushOutbox, PushSenders
from sandstream.server.chat.store import BlobStore, ChatStore
from sandstream.server.chat.turns import ChatTurns, Dispatcher
from sandstream.server.runner import Runner
from sandstream.server.sessions import SessionService

__all__ = ["ChatService"]


class ChatService:
    """The chat backend's state: settings, store, blobs, the runner, turns and runs.

    ``runner`` is the embedded runner (``None`` when every turn goes to a remote
    runner); :attr:`sessions` its session service, set by
    :func:`~sandstream.server.create_chat_app`. :attr:`bound_url` is set once the
    server is bound (the default callback base when ``settings.public_url`` is not set).
    """

    def __init__(
        self,
        settings: ChatSettings,
        store: ChatStore,
        blobs: BlobStore,
        runner: Runner | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.blobs = blobs
        self.runner = runner
        self.instance_id = new_id("srv")
        """This process's identity in lock holder ids."""
        max_line_bytes = runner.settings.max_line_bytes if runner else DEFAULT_MAX_LINE_BYTES
        self.dispatcher = Dispatcher(settings, store, embedded=runner is not None)
        self.turns = ChatTurns(
            settings,
            store,
            self.dispatcher,
            instance_id=self.instance_id,
            max_line_bytes=max_line_bytes,
        )
        self.agents = AgentsRuns(
            settings, store, self.dispatcher, runner, max_line_bytes=max_line_bytes
        )
        self.stream_tokens = StreamTokens(settings.api_token)
        self.push_senders: PushSenders | None = None
        """The open push senders, while :meth:`run` runs."""
        self.readiness: dict[str, str | None] = {}
        """Each part's state at the last readiness check (why it was not ready, or
        ``None``), so that only changes are logged (:mod:`.readiness`)."""

    @property
    def sessions(self) -> SessionService | None:
        """The embedded runner's session service."""
        return self.turns.sessions

    @sessions.setter
    def sessions(self, sessions: SessionService | None) -> None:
        self.turns.sessions = sessions

    @property
    def bound_url(self) -> str | None:
        """The address the server is bound to, as a URL sandboxes here can call."""
        return self.dispatcher.bound_url

    @bound_url.setter
    def bound_url(self, url: str | None) -> None:
        self.dispatcher.bound_url = url

    @property
    def draining(self) -> bool:
        """True once :meth:`shutdown` began: new turns and runs are refused."""
        return self.dispatcher.draining

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the log mover, and the push outbox if a push service is configured, until
        cancelled (the push senders are open meanwhile: :attr:`push_senders`).

        Raises :class:`~sandstream.server.chat.model.ChatConfigError` at once for unreadable push
        credentials."""
        push = self.settings.push
        async with PushSenders.open(push) as senders, trio.open_nursery() as nursery:
            self.push_senders = senders
            try:
                if push.enabled:
                    outbox = PushOutbox(
                        self.store, push, senders, self.stream_tokens, owner=self.instance_id
                    )
                    await nursery.start(outbox.run)
                await nursery.start(self.turns.run)
                task_status.started()
                await trio.sleep_forever()
            finally:
                self.push_senders = None

    async def shutdown(self) -> None:
        """Refuse new work, end every running turn and wait for it to settle, then end every
        Agents-block run (each waits at most ``settings.shutdown_timeout`` s)."""
        self.dispatcher.draining = True
        await self.turns.shutdown()
        await self.agents.shutdown()
