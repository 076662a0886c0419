"""The turn machinery without HTTP: what the chat backend uses in-process."""

from __future__ import annotations

import msgspec
import pytest
import trio

from benchmarks.support.workspace import WorkspaceServer
from sandstream.core.schemas import Dispatch
from sandstream.server import (
    AtCapacityError,
    LocalContainer,
    LocalSubprocessLauncher,
    Runner,
    ShuttingDownError,
    TurnStateError,
)
from tests.server.harness import descendants, scripted, settings, shell, wait_gone


def _runner(**overrides: object) -> Runner:
    return Runner(settings(**overrides), LocalSubprocessLauncher(stderr="discard"))


def _dispatch(workspace: WorkspaceServer, prompt: str = "hello") -> Dispatch:
    return msgspec.convert(workspace.mint_dispatch(prompt), Dispatch)


async def test_an_sse_turn_in_process(workspace: WorkspaceServer) -> None:
    workspace.config = scripted(shell("echo hi"), message="ok {prompt}")
    runner = _runner()
    turn = runner.open_turn(_dispatch(workspace, "there"), mode="sse")
    async with turn:
        assert isinstance(turn.container, LocalContainer)
        body = b"".join([chunk async for chunk in turn])
    frames = body.decode().split("\n\n")[:-1]
    events = [
        line.split(": ", 1)[1]
        for f in frames
        for line in f.split("\n")
        if line.startswith("event:")
    ]
    assert events == ["step", "step", "result", "done"]  # logs are filtered in chat mode
    assert turn.processor.turn.result is not None
    assert turn.processor.turn.result.message == "ok there"
    assert [row.status for row in turn.processor.turn.steps] == ["succeeded"]
    assert turn.record is not None and turn.record.outcome == "result"
    assert turn.record.lines == turn.processor.last_event_id
    assert runner.live == 0 and runner.turns() == []


async def test_leaving_early_stops_the_container(workspace: WorkspaceServer) -> None:
    workspace.config = scripted(shell("sleep 310"))
    runner = _runner()
    turn = runner.open_turn(_dispatch(workspace))
    with trio.move_on_after(30) as timeout:
        async with turn:
            async for chunk in turn:
                if b'"running"' in chunk:
                    break
            assert isinstance(turn.container, LocalContainer)
            pid = turn.container.pid
            with trio.fail_after(20):
                while not any("sleep 310" in str(c) for c in _cmdlines(pid)):
                    await trio.sleep(0.01)
            pids = [pid, *descendants(pid)]
    assert not timeout.cancelled_caught
    await wait_gone(pid, pids)
    assert turn.record is not None and turn.record.outcome == "cancelled"
    assert turn.container_gone.is_set()


async def test_cancelling_the_caller_stops_the_container(workspace: WorkspaceServer) -> None:
    workspace.config = scripted(shell("sleep 311"))
    runner = _runner()
    turn = runner.open_turn(_dispatch(workspace))
    with trio.move_on_after(1.5):
        async with turn:
            async for _ in turn:
                pass
    assert turn.closed.is_set()
    assert turn.record is not None and turn.record.outcome == "cancelled"
    handle = turn.container
    assert isinstance(handle, LocalContainer)
    await wait_gone(handle.pgid, [handle.pid])


async def test_capacity_discard_and_shutdown_before_start(workspace: WorkspaceServer) -> None:
    runner = _runner(max_live=1, retry_after=3)
    first = runner.open_turn(_dispatch(workspace))
    with pytest.raises(AtCapacityError) as refused:
        runner.open_turn(_dispatch(workspace))
    assert refused.value.retry_after == 3
    first.discard()
    assert first.record is not None and first.record.outcome == "not_started"
    assert runner.live == 0

    second = runner.open_turn(_dispatch(workspace))
    second.end("shutdown", "going away")  # before it is entered: no container ever starts
    async with second:
        body = b"".join([chunk async for chunk in second])
    assert second.container is None
    line = msgspec.json.decode(body)
    assert (line["type"], line["code"], line["message"]) == ("error", "shutdown", "going away")
    with pytest.raises(TurnStateError):
        async with second:
            pass

    await runner.shutdown()
    with pytest.raises(ShuttingDownError):
        runner.open_turn(_dispatch(workspace))


async def test_iterating_outside_async_with_is_an_error(workspace: WorkspaceServer) -> None:
    turn = _runner().open_turn(_dispatch(workspace))
    with pytest.raises(TurnStateError):
        await turn.__anext__()
    turn.discard()


def _cmdlines(pid: int) -> list[str]:
    import psutil

    try:
        return [" ".join(c.cmdline()) for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []
