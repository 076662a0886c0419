"""What every dispatch to a runner shares: where it goes, where its sandbox calls back,
its one-time tokens, and whether new ones are taken at all.

:class:`Dispatcher` is used by the chat turn and the Agents-block run alike. A runner
URL that is malformed or not allowed raises :class:`~sandstream.server.chat.model.TargetError`; a
server that is shutting down refuses new dispatches with
:class:`~sandstream.server.runner.ShuttingDownError`. Nothing here blocks but
the workflow environment's lookup in the store.
"""

from __future__ import annotations

from typing import Any, Final

from sandstream.core import ChatTurn, Dispatch, TokenBudget
from sandstream.server.chat.config import ChatSettings
from sandstream.server.chat.credentials import MintedTokens, mint_tokens
from sandstream.server.chat.model import Target, resolve_target
from sandstream.server.chat.store import EnvironmentStore
from sandstream.server.runner import ShuttingDownError

__all__ = ["CALLBACK_PREFIX", "Dispatcher"]

CALLBACK_PREFIX: Final = "/api/sandbox"


class Dispatcher:
    """The dispatches of one chat backend. ``embedded``: an in-process runner takes
    turns no URL names. ``bound_url`` is set once the server is bound (the callback base
    when ``settings.public_url`` is not set); ``draining`` once it shuts down."""

    def __init__(self, settings: ChatSettings, store: EnvironmentStore, *, embedded: bool) -> None:
        self.settings = settings
        self.store = store
        self.embedded = embedded
        self.bound_url: str | None = None
        self.draining = False

    def admit(self) -> None:
        """Raise :class:`ShuttingDownError` once the server is draining."""
        if self.draining:
            raise ShuttingDownError("the server is shutting down", 5)

    async def target(
        self, workspace_id: str, workflow_id: str | None, request_url: str | None
    ) -> Target:
        """The runner: the request's URL, the workflow environment's ``SANDBOX_URL``, the
        server's, or the embedded runner. Raises
        :class:`~sandstream.server.chat.model.TargetError`."""
        workflow_url = None
        if workflow_id is not None:
            environment = await self.store.get_environment(workspace_id, workflow_id)
            if environment is not None:
                workflow_url = environment.vars.get("SANDBOX_URL")
        return resolve_target(
            request_url=request_url,
            workflow_url=workflow_url,
            server_url=self.settings.sandbox_url,
            allowed=self.settings.allowed_sandbox_urls,
            embedded=self.embedded,
        )

    async def providers(self, workspace_id: str, workflow_id: str | None) -> dict[str, str]:
        """The provider variables a dispatch carries to the runner (the agent's and the
        workflow environment's: :meth:`~sandstream.server.chat.model.AgentProfile.provider_env`)."""
        environment = None
        if workflow_id is not None:
            environment = await self.store.get_environment(workspace_id, workflow_id)
        return self.settings.agent.provider_env(environment)

    def mint(self, now: int) -> MintedTokens:
        """A dispatch's three one-time tokens, valid from ``now`` (epoch ms)."""
        return mint_tokens(now, self.settings.token_lifetimes)

    def dispatch(
        self,
        session_id: str,
        tokens: MintedTokens,
        prompt: str,
        conversation: list[ChatTurn],
        scope: dict[str, Any],
        *,
        extensions: tuple[str, ...] = (),
        providers: dict[str, str] | None = None,
        budget: TokenBudget | None = None,
    ) -> Dispatch:
        """The dispatch of the sandbox session ``session_id``, for the request ``scope``,
        asking for the envelope ``extensions``, with the turn's provider variables
        (:meth:`providers`; the runner's model gateway keeps them) and token ``budget``."""
        return Dispatch(
            agent_url=f"{self.callback_base(scope)}{CALLBACK_PREFIX}/{session_id}",
            otp_setup=tokens.setup,
            otp_run=tokens.run,
            otp_upload=tokens.upload,
            prompt=prompt,
            conversation=conversation,
            extensions=list(extensions),
            providers=providers or {},
            budget=budget,
        )

    def callback_base(self, scope: dict[str, Any]) -> str:
        """The base URL sandboxes call back: configured, else bound, else this request's."""
        if self.settings.public_url:
            return self.settings.public_url
        if self.bound_url:
            return self.bound_url
        host, port = scope.get("server") or ("127.0.0.1", 80)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{scope.get('scheme', 'http')}://{host}:{port}"
