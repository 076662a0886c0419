""":class:`~benchmarks.support.server_process.ServerProcess`: real Python children that
say where they listen, exit early, or take their time to stop."""

from __future__ import annotations

import signal
import sys

import pytest
import trio

from benchmarks.chat.serving import LISTENING
from benchmarks.support.server_process import ProcessExited, ServerProcess

LISTENS = 'print("serving: listening on http://127.0.0.1:9/ (more)", flush=True)\n'
WAITS = "import signal\nwhile True:\n    signal.pause()\n"


def _python(source: str) -> list[str]:
    return [sys.executable, "-c", source]


async def test_it_returns_once_it_listens_with_its_lines_and_stops_with_its_nursery() -> None:
    source = f'import sys\nprint("starting", file=sys.stderr, flush=True)\n{LISTENS}{WAITS}'
    async with trio.open_nursery() as nursery:
        server = await ServerProcess.start(
            nursery, _python(source), listening=LISTENING, capture="both"
        )
        assert server.url == "http://127.0.0.1:9"
        assert server.stderr == ["starting"]
        assert server.stdout == ["serving: listening on http://127.0.0.1:9/ (more)"]
        nursery.cancel_scope.cancel()
    assert server.exited.is_set()
    assert server.process.returncode == -signal.SIGTERM


async def test_merged_output_is_read_as_stdout() -> None:
    source = f'import sys\nprint("to stderr", file=sys.stderr, flush=True)\n{LISTENS}{WAITS}'
    async with trio.open_nursery() as nursery:
        server = await ServerProcess.start(
            nursery, _python(source), listening=LISTENING, capture="merged"
        )
        nursery.cancel_scope.cancel()
    assert server.stdout[0] == "to stderr" and server.stderr == []


async def test_it_is_read_while_it_stops() -> None:
    """A child that writes far more than a pipe holds once asked to stop, then exits 0:
    its output is read meanwhile, or it would block until SIGKILL."""
    source = (
        "import signal, sys\n"
        "def stop(*_):\n"
        "    for n in range(20_000):\n"
        '        print("x" * 100, n, file=sys.stderr)\n'
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"{LISTENS}{WAITS}"
    )
    async with trio.open_nursery() as nursery:
        server = await ServerProcess.start(
            nursery, _python(source), listening=LISTENING, capture="both"
        )
        nursery.cancel_scope.cancel()
    assert server.process.returncode == 0


async def test_one_that_ignores_the_stop_signal_is_killed_after_the_grace() -> None:
    source = f"import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n{LISTENS}{WAITS}"
    async with trio.open_nursery() as nursery:
        server = await ServerProcess.start(
            nursery, _python(source), listening=LISTENING, capture="stdout", grace=0.2
        )
        assert await server.stop() == -signal.SIGKILL
    assert server.exited.is_set()


async def test_exiting_before_it_listens_is_an_error_with_its_last_lines(
    nursery: trio.Nursery,
) -> None:
    source = 'import sys\nfor n in range(30):\n    print("line", n, file=sys.stderr)\nsys.exit(3)'
    with pytest.raises(ProcessExited) as raised:
        await ServerProcess.start(nursery, _python(source), listening=LISTENING)
    told = str(raised.value)
    assert "exited (3) before where it listens" in told
    assert "line 29" in told and "line 10" in told and "line 9\n" not in told


async def test_no_line_within_the_deadline_is_too_slow_and_stops_it() -> None:
    with trio.fail_after(30):  # the nursery ends only once the process is gone
        async with trio.open_nursery() as nursery:
            with pytest.raises(trio.TooSlowError, match=r"waited 0\.2 s for where it listens"):
                await ServerProcess.start(
                    nursery,
                    _python('print("not yet", flush=True)\n' + WAITS),
                    listening=LISTENING,
                    capture="stdout",
                    deadline=0.2,
                )
