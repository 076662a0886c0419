"""The runner passes on the envelope extensions a dispatch asks for, and takes ``usage``
lines only from itself: the container's are rejected whatever the dispatch asked."""

from __future__ import annotations

import msgspec
import pytest

from sandstream.core import Dispatch, ModelUsage, encode_line
from sandstream.server.runner import LocalSubprocessLauncher, Runner, RunnerSettings

USAGE_LINE = encode_line(
    ModelUsage(
        protocol="chat",
        input_tokens=3,
        output_tokens=4,
        cached_input_tokens=0,
        cache_write_tokens=0,
    )
)


def dispatch(*extensions: str) -> Dispatch:
    return Dispatch(
        agent_url="http://127.0.0.1:9/agent",
        otp_setup="s",
        otp_run="r",
        prompt="hi",
        extensions=list(extensions),
    )


@pytest.mark.parametrize("encoded", [False, True])
@pytest.mark.parametrize(
    ("asked", "live", "usage"),
    [((), False, False), (("live",), True, False), (("usage", "other"), False, True),
     (("live", "usage"), True, True)],
)  # fmt: skip
async def test_the_dispatch_s_extensions_reach_the_processor(
    asked: tuple[str, ...], live: bool, usage: bool, encoded: bool
) -> None:
    runner = Runner(RunnerSettings(token="t"), LocalSubprocessLauncher())
    given = dispatch(*asked)
    turn = runner.open_turn(msgspec.json.encode(given) if encoded else given)
    try:
        processor = turn.processor
        assert (processor.live, processor.usage_extension) == (live, usage)
        assert processor.feed(USAGE_LINE) == b""
        assert [d.code for d in processor.diagnostics] == ["invalid_line"]
        call = msgspec.json.decode(USAGE_LINE, type=ModelUsage)
        assert processor.add_usage(call) == (USAGE_LINE if usage else b"")
        assert processor.turn.model_calls == 1
    finally:
        turn.discard()
