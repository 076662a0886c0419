"""What the gateway tests share: a runner whose turns get a model gateway, a dispatch
carrying the stand-in model server's keys, and a turn held open while a test calls its
gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import msgspec

from benchmarks.support.model_server import ModelServer
from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import Dispatch
from sandstream.server import LocalSubprocessLauncher, Runner, TurnStream
from tests.server.harness import settings

REAL_KEY: Final = "sk-real-provider-key"


def runner(**overrides: Any) -> Runner:
    """A runner of local containers, a model gateway for each turn with keys."""
    return Runner(settings(**overrides), LocalSubprocessLauncher(stderr="discard"))


def provider_dispatch(workspace: WorkspaceServer, model: ModelServer) -> Dispatch:
    """A dispatch whose provider variables point every provider at ``model``."""
    env = model.provider_env()
    providers = {name: value for name, value in env.items() if not name.endswith("_MODEL")}
    return msgspec.convert({**workspace.mint_dispatch("go"), "providers": providers}, Dispatch)


@asynccontextmanager
async def open_turn(runner: Runner, dispatch: Dispatch) -> AsyncIterator[TurnStream]:
    """A turn entered (its gateway serving), left when the block ends."""
    turn = runner.open_turn(dispatch)
    async with turn:
        assert turn.gateway is not None and turn.gateway.access is not None
        yield turn
