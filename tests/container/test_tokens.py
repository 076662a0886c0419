"""The one-time tokens leave the container's dispatch once redeemed."""

from __future__ import annotations

import msgspec

from benchmarks.support.workspace import WorkspaceServer
from sandstream.container.output import Emitter
from sandstream.container.run import EXIT_OK, RunOptions, run_container
from sandstream.core.schemas import ConfigResponse, Dispatch, ScriptedAgent, ScriptedStep


async def test_each_token_is_dropped_from_the_dispatch_once_redeemed(
    workspace: WorkspaceServer,
) -> None:
    write = ScriptedStep(tool="write_file", args={"path": "output/a.txt", "content": "a"})
    workspace.config = ConfigResponse(agent=ScriptedAgent(steps=[write], message="written"))
    minted = workspace.mint_dispatch("tokens")
    dispatch = msgspec.json.decode(msgspec.json.encode(minted), type=Dispatch)
    out = bytearray()
    code = await run_container(dispatch, Emitter(out.extend), RunOptions(handle_signals=False))
    assert code == EXIT_OK, bytes(out)
    assert [r.status for r in workspace.requests("results")] == [200]
    assert (dispatch.otp_setup, dispatch.otp_run, dispatch.otp_upload) == ("", "", None)
    assert (dispatch.agent_url, dispatch.prompt) == (minted["agent_url"], "tokens")
    for token in (minted["otp_setup"], minted["otp_run"], minted["otp_upload"]):
        assert token not in msgspec.json.encode(dispatch).decode()
