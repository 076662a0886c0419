"""``benchmarks.streams`` at tiny sizes, so that it keeps running: every part against the
real servers, each checking what it measured; and its wire parsing, fed byte by byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.streams.table import render
from benchmarks.streams.wire import (
    Body,
    End,
    Head,
    ResponseParser,
    SSESplitter,
    WireError,
    payload,
    payload_fields,
)

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["reference", "sandstream"]


def test_every_part_runs_against_every_server(node: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.streams", "--targets", ",".join(TARGETS)]
    tiny = [
        "--json", "--repeat", "1", "--streams", "3", "--duration", "0.5", "--warmup", "0.2",
        "--ladder", "1,4", "--rate", "20", "--fanout-duration", "0.5",
        "--fanout-warmup", "0.2", "--subscriber-procs", "2", "--catchup-mb", "0.5",
        "--idle", "5", "--settle", "0",
    ]  # fmt: skip
    done = subprocess.run(
        [*command, *tiny],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "... append round 1/1: reference, plain, 3 streams" in done.stderr
    result = json.loads(done.stdout)
    for name in TARGETS:
        for mode in ("plain", "producer"):
            appended = result["append"][mode][name]
            assert appended["appends"] > 0 and appended["appends_per_s"] >= 0
        for level in ("1", "4"):
            fanout = result["fanout"]["levels"][level][name]
            assert 0 < fanout["p50_ms"] <= fanout["p99_ms"] <= fanout["max_ms"]
        assert result["catchup"]["read"][name]["mb_per_s"] > 0
        assert result["memory"][name]["subscribers"] == 5
    table = render(result, TARGETS).splitlines()
    assert table[0] == "| measure | reference | sandstream | sandstream ÷ reference |"
    assert any(line.startswith("| fan-out to 4 SSE subscribers: p99 ms |") for line in table)


def _feed_bytewise(parser: ResponseParser, data: bytes) -> list[Head | Body | End]:
    events = []
    for i in range(len(data)):
        events += parser.feed(data[i : i + 1])
    return events


def test_responses_on_one_connection_are_read_whatever_their_framing() -> None:
    wire = (
        b"HTTP/1.1 204 No Content\r\nStream-Next-Offset: 7\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
    )
    for events in (ResponseParser().feed(wire), _feed_bytewise(ResponseParser(), wire)):
        heads = [e for e in events if isinstance(e, Head)]
        assert [h.status for h in heads] == [204, 200, 200]
        assert heads[0].headers == {"stream-next-offset": "7"}
        assert b"".join(e.data for e in events if isinstance(e, Body)) == b"helloabcde"
        assert sum(isinstance(e, End) for e in events) == 3


def test_a_body_until_close_ends_at_eof_and_a_cut_response_raises() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\n\r\nab")[1:] == [Body(b"ab")]
    assert parser.eof() == [End()]
    cut = ResponseParser()
    cut.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab")
    with pytest.raises(WireError):
        cut.eof()


def test_events_are_cut_at_blank_lines_wherever_the_pieces_end() -> None:
    stream = b": hi\n\nevent: data\ndata: a\ndata:b\n\nevent: control\ndata: {}\n\nid: 1\n\n"
    for size in (1, 3, len(stream)):
        splitter = SSESplitter()
        events = []
        for i in range(0, len(stream), size):
            events += splitter.feed(stream[i : i + size])
        assert [(e.name, e.data) for e in events] == [(b"data", b"a\nb"), (b"control", b"{}")]
    with pytest.raises(WireError):
        SSESplitter().feed(b"data: a\r\n\r\n")


def test_a_payload_carries_its_stream_sequence_and_send_time() -> None:
    data = payload(12, 345, 256, 6789)
    assert len(data) == 256 and b"\n" not in data
    assert payload_fields(data) == (12, 345, 6789)
