"""The permission desk's grants: a request whose tool kind and title a grant of the chat
names exactly is answered ``always`` at once (the agent's ``allow_always``, else its
``allow_once``), shown pending then resolved ``by: "grant"``; any other request waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import msgspec
from acp.schema import PermissionOption as AcpOption

from sandstream.container.agents.acp.permissions import PermissionDesk
from sandstream.container.context import RunContext
from sandstream.container.http import HttpSettings
from sandstream.container.output import Emitter
from sandstream.container.tools import Toolbox
from sandstream.core import LIVE_EXTENSION, ConfigResponse, Dispatch, PermissionGrant

GRANTS = [PermissionGrant(kind="execute", title="ls -la")]
OPTIONS = [
    AcpOption(option_id="a1", kind="allow_once", name="Allow"),
    AcpOption(option_id="a2", kind="allow_always", name="Always"),
    AcpOption(option_id="r1", kind="reject_once", name="Reject"),
]


def _desk(*, live: bool = True) -> tuple[PermissionDesk, list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []

    def sink(data: bytes) -> None:
        lines.extend(msgspec.json.decode(line) for line in data.splitlines())

    emitter = Emitter(sink)
    dispatch = Dispatch(
        agent_url="http://127.0.0.1:1",
        otp_setup="s",
        otp_run="r",
        prompt="p",
        extensions=[LIVE_EXTENSION] if live else [],
    )
    ctx = RunContext(
        dispatch=dispatch,
        config=ConfigResponse(grants=GRANTS),
        env={},
        work_dir=Path("/nonexistent"),
        output_dir=Path("/nonexistent"),
        state_dir=Path("/nonexistent"),
        home_dir=Path("/nonexistent"),
        emitter=emitter,
        toolbox=Toolbox(cast(Any, None), emitter),
        http=HttpSettings(),
    )
    return PermissionDesk(ctx, timeout=0.01), lines


async def test_a_matching_request_is_answered_always_without_asking() -> None:
    desk, lines = _desk()
    request_id = desk.announce("step_1", "execute", "ls -la", OPTIONS)
    assert not desk.waiting
    answer = await desk.answer(request_id, OPTIONS)
    assert answer == {"outcome": {"outcome": "selected", "optionId": "a2"}}
    pending, resolved = lines
    assert pending["status"] == "pending" and pending["tool_kind"] == "execute"
    assert {k: resolved[k] for k in ("id", "status", "reply", "by")} == {
        "id": request_id, "status": "resolved", "reply": "always", "by": "grant",
    }  # fmt: skip


async def test_without_allow_always_the_grant_falls_back_to_allow_once() -> None:
    desk, _ = _desk()
    once_only = [OPTIONS[0], OPTIONS[2]]
    request_id = desk.announce("step_1", "execute", "ls -la", once_only)
    answer = await desk.answer(request_id, once_only)
    assert answer == {"outcome": {"outcome": "selected", "optionId": "a1"}}


async def test_anything_but_the_same_kind_and_title_asks() -> None:
    for kind, title in [("edit", "ls -la"), ("execute", "ls -l"), ("execute", "LS -LA"),
                        ("execute", "ls -la "), ("execute", None)]:  # fmt: skip
        desk, lines = _desk()
        request_id = desk.announce("step_1", kind, title, OPTIONS)
        assert desk.waiting
        answer = await desk.answer(request_id, OPTIONS)  # nobody answers: timed out
        assert answer == {"outcome": {"outcome": "selected", "optionId": "r1"}}
        assert "by" not in lines[-1] and lines[-1]["reply"] == "reject"


async def test_without_live_nothing_is_shown_and_no_grant_answers() -> None:
    desk, lines = _desk(live=False)
    assert desk.announce("step_1", "execute", "ls -la", OPTIONS) is None
    assert [line["type"] for line in lines] == ["log"]
