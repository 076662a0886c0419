"""Output discipline: whole lines, bounded size, exactly one terminal."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest

from sandstream.container.errors import OutputClosedError
from sandstream.container.output import Emitter, FdSink
from sandstream.core.envelope import Error, Log, Result, Step
from tests.support.container import check_stream


def _emitter(max_line_bytes: int = 64 * 1024) -> tuple[Emitter, bytearray]:
    out = bytearray()
    return Emitter(out.extend, max_line_bytes=max_line_bytes, clock=lambda: 42), out


def test_exactly_one_terminal() -> None:
    emitter, out = _emitter()
    emitter.log("info", "hello")
    assert emitter.finish(Result(message="first")) is True
    assert emitter.finish(Error(code="late", message="second")) is False
    emitter.log("info", "after the end")
    turn = check_stream(bytes(out))
    assert turn.result is not None and turn.result.message == "first"
    assert out.count(b"\n") == 2
    assert emitter.terminal == Result(message="first")


def test_terminal_only_through_finish() -> None:
    emitter, _ = _emitter()
    with pytest.raises(TypeError):
        emitter.emit(Result(message="x"))


def test_lines_are_stamped_unless_stamped() -> None:
    emitter, out = _emitter()
    emitter.emit_many([Log(level="info", message="a"), Log(level="info", message="b", ts=7)])
    assert bytes(out) == (
        b'{"type":"log","level":"info","message":"a","ts":42}\n'
        b'{"type":"log","level":"info","message":"b","ts":7}\n'
    )


@pytest.mark.parametrize(
    "envelope",
    [
        Step(id="s1", name="read_file", status="succeeded", result={"content": "y" * 500_000}),
        Step(id="s1", name="t", status="running", args=["\x01" * 200_000]),
        Step(id="s1", name="t", status="failed", error="\x02" * 200_000),
        Log(level="info", message="\x1f" * 200_000),
        Error(code="boom", message="z" * 1_000_000),
    ],
)
def test_oversized_lines_are_shrunk_below_the_bound(envelope: Log | Step[object] | Error) -> None:
    emitter, out = _emitter(max_line_bytes=64 * 1024)
    if isinstance(envelope, Error):
        emitter.finish(envelope)
    else:
        emitter.emit(envelope)
        emitter.finish(Result(message="ok"))
    lines = bytes(out).splitlines(keepends=True)
    assert all(len(line) <= 64 * 1024 for line in lines)
    check_stream(bytes(out))


def _drain(fd: int, sink: bytearray) -> None:
    while chunk := os.read(fd, 65536):
        sink += chunk


@pytest.mark.parametrize("nonblocking", [False, True])
def test_fd_sink_writes_everything_through_a_pipe(nonblocking: bool) -> None:
    read_fd, write_fd = os.pipe()
    if nonblocking:
        flags = fcntl.fcntl(write_fd, fcntl.F_GETFL)
        fcntl.fcntl(write_fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    received = bytearray()
    reader = threading.Thread(target=_drain, args=(read_fd, received))
    reader.start()
    data = b"".join(b'{"type":"log","level":"info","message":"%d"}\n' % i for i in range(50_000))
    FdSink(write_fd)(data)
    os.close(write_fd)
    reader.join()
    os.close(read_fd)
    assert bytes(received) == data


def test_fd_sink_reports_a_closed_reader() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    with pytest.raises(OutputClosedError):
        FdSink(write_fd)(b'{"type":"result","message":"x"}\n')
    os.close(write_fd)
