"""The ``live`` envelope extension through the façade: its lines accepted, folded and
framed when the reader asks for it, rejected exactly as before when it does not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstream.core import Mode, StreamProcessor
from tests.core.helpers import events, line, run, step

LIVE = ("live",)
OPTIONS = [
    {"id": "opt-1", "kind": "allow_once", "name": "Allow once"},
    {"id": "opt-2", "kind": "allow_always", "name": "Always allow"},
    {"id": "opt-3", "kind": "reject_once", "name": "Reject"},
]
RESULT = line(type="result", message="Hello world")


def delta(message_id: str, text: str, kind: str = "text", **extra: Any) -> bytes:
    return line(type="delta", id=message_id, kind=kind, text=text, **extra)


def pending(request_id: str, **extra: Any) -> bytes:
    fields: dict[str, Any] = {"step": "s1", "title": "Run ls", "options": OPTIONS, **extra}
    return line(type="permission", id=request_id, status="pending", **fields)


def resolved(request_id: str, reply: str = "once", **extra: Any) -> bytes:
    return line(type="permission", id=request_id, status="resolved", reply=reply, **extra)


TURN = (
    delta("m1", "Let me look", "reasoning", ts=1)
    + delta("m1", "Hello ")
    + step("s1", "running", name="shell", args={"cmd": "ls"})
    + pending("p1", ts=2)
    + resolved("p1", ts=3)
    + step("s1", "succeeded", name="shell", result="a.txt")
    + delta("m2", "wor")
    + delta("m2", "ld")
    + RESULT
)


def same_but_the_type_named(out: bytes, out_unknown: bytes) -> bool:
    """The outputs are equal once the rejected type's name, quoted in a strict turn's
    ``protocol_error`` message, is the same in both."""
    named = out.replace(b"'delta'", b"'x'").replace(b"'permission'", b"'x'")
    return named == out_unknown.replace(b"'other'", b"'x'")


def test_the_live_lines_are_folded() -> None:
    _, proc = run(TURN, extensions=LIVE)
    turn = proc.turn
    assert proc.diagnostics == []
    assert turn.text == "Hello world" == turn.result.message  # type: ignore[union-attr]
    assert turn.reasoning == "Let me look"
    assert [(p.id, p.kind, p.text) for p in turn.parts] == [
        ("m1", "reasoning", "Let me look"),
        ("m1", "text", "Hello "),
        ("m2", "text", "world"),
    ]
    (row,) = turn.permissions.values()
    assert (row.id, row.status, row.step, row.title, row.reply) == (
        "p1",
        "resolved",
        "s1",
        "Run ls",
        "once",
    )
    assert [o.kind for o in row.options] == ["allow_once", "allow_always", "reject_once"]
    assert (row.first_ts, row.last_ts) == (2, 3)


def test_sse_frames_carry_each_live_line_as_its_own_event() -> None:
    out, _ = run(TURN, extensions=LIVE)
    parsed = events(out)
    assert [e.event for e in parsed] == [
        "delta",
        "delta",
        "step",
        "permission",
        "permission",
        "step",
        "delta",
        "delta",
        "result",
        "done",
    ]
    assert [e.id for e in parsed] == [str(n) for n in range(1, 11)]
    lines = [raw for raw in TURN.splitlines()]
    assert [e.data.encode() for e in parsed[:-1]] == lines
    assert json.loads(parsed[-1].data) == {"terminal": "result", "diagnostics": 0}


@pytest.mark.parametrize("mode", ["trace", "sse"])
def test_live_events_share_the_id_sequence_with_caller_events(mode: Mode) -> None:
    proc = StreamProcessor(mode, extensions=LIVE)
    out = proc.start({"turn": "t"}) + proc.feed(delta("m", "hi")) + proc.event("files", b"{}")
    assert [(e.id, e.event) for e in events(out)] == [
        ("1", "start"),
        ("2", "delta"),
        ("3", "files"),
    ]


def test_ndjson_passes_the_live_lines_through() -> None:
    out, proc = run(TURN, "ndjson", extensions=LIVE)
    assert out == TURN
    assert proc.written == TURN.count(b"\n")


@pytest.mark.parametrize("mode", ["sse", "trace", "ndjson"])
@pytest.mark.parametrize("strict", [False, True])
def test_without_the_extension_the_output_is_todays(mode: Mode, strict: bool) -> None:
    """A reader that did not ask sees the live lines rejected as unknown line types:
    the same output as with lines of any other unknown type."""
    unknown = b"".join(
        raw.replace(b'"type":"delta"', b'"type":"other"').replace(
            b'"type":"permission"', b'"type":"other"'
        )
        + b"\n"
        for raw in TURN.splitlines()
    )
    out, proc = run(TURN, mode, strict=strict)
    out_unknown, proc_unknown = run(unknown, mode, strict=strict)
    assert same_but_the_type_named(out, out_unknown)
    assert [(d.line, d.code) for d in proc.diagnostics] == [
        (d.line, d.code) for d in proc_unknown.diagnostics
    ]
    assert proc.diagnostics[0].code == "invalid_line"
    assert {d.code for d in proc.diagnostics} <= {"invalid_line", "after_terminal"}
    assert proc.turn.parts == [] and proc.turn.permissions == {}
    if strict:
        assert proc.turn.error is not None and proc.turn.error.code == "protocol_error"
        assert "Invalid value 'delta'" in proc.turn.error.message
    else:
        assert proc.turn.result is not None


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        (resolved("nope"), "permission_unknown"),
        (pending("p1") + resolved("p1") + resolved("p1", "reject"), "permission_resolved"),
        (pending("p1") + resolved("p1") + pending("p1"), "permission_resolved"),
        (pending("p1") + pending("p1"), "permission_pending"),
        (pending("p1") + line(type="permission", id="p1", status="resolved"), "permission_invalid"),
        (pending("p1") + resolved("p1", options=OPTIONS), "permission_invalid"),
        (pending("p1", options=None), "permission_invalid"),
        (pending("p1", options=[]), "permission_invalid"),
        (pending("p1", reply="once"), "permission_invalid"),
    ],
)
@pytest.mark.parametrize("strict", [False, True])
def test_a_permission_line_breaking_a_rule_is_diagnosed_and_changes_nothing(
    lines: bytes, code: str, strict: bool
) -> None:
    data = lines + RESULT
    out, proc = run(data, extensions=LIVE, strict=strict)
    diagnostic, *after = proc.diagnostics
    assert [d.code for d in after] == (["after_terminal"] if strict else [])
    assert diagnostic.code == code
    assert diagnostic.line == lines.count(b"\n")
    accepted, _ = run(data, extensions=LIVE, strict=False)
    kept = lines[: lines.rstrip(b"\n").rfind(b"\n") + 1] if lines.count(b"\n") > 1 else b""
    _, before_proc = run(kept, extensions=LIVE)
    assert {k: (r.status, r.reply) for k, r in proc.turn.permissions.items()} == {
        k: (r.status, r.reply) for k, r in before_proc.turn.permissions.items()
    }
    forwarded = [e.event for e in events(out)]
    assert forwarded.count("permission") == kept.count(b"\n")
    if strict:
        assert proc.turn.error is not None and proc.turn.error.code == "protocol_error"
        assert code in proc.turn.error.message
    else:
        assert proc.turn.result is not None
        assert accepted == out


@pytest.mark.parametrize(
    "bad",
    [
        b'{"type":"delta","id":"m","kind":"text","text":""}\n',
        b'{"type":"delta","id":"","kind":"text","text":"x"}\n',
        b'{"type":"delta","id":"m","kind":"speech","text":"x"}\n',
        b'{"type":"delta","id":"m","kind":"text"}\n',
        b'{"type":"permission","id":"p","status":"asked"}\n',
        b'{"type":"permission","id":"p","status":"resolved","reply":"maybe"}\n',
        b'{"type":"permission","id":"p","status":"pending","options":[{"id":"o","kind":"yes"}]}\n',
        b'{"type":"permission","id":"p","status":"pending","step":"","options":[]}\n',
    ],
)
def test_a_malformed_live_line_is_an_invalid_line(bad: bytes) -> None:
    out, proc = run(bad + RESULT, extensions=LIVE)
    assert [d.code for d in proc.diagnostics] == ["invalid_line"]
    assert [e.event for e in events(out)] == ["result", "done"]


def test_live_lines_after_the_terminal_are_diagnosed() -> None:
    out, proc = run(RESULT + delta("m", "late") + pending("p"), extensions=LIVE)
    assert [d.code for d in proc.diagnostics] == ["after_terminal", "after_terminal"]
    assert proc.turn.parts == [] and proc.turn.permissions == {}
    assert [e.event for e in events(out)] == ["result", "done"]


def test_text_beyond_the_bound_is_counted_not_kept() -> None:
    data = delta("m", "abcd") + delta("m", "efgh", "reasoning") + delta("m", "ij") + RESULT
    out, proc = run(data, extensions=LIVE, max_text_chars=6)
    turn = proc.turn
    assert (turn.text, turn.reasoning) == ("abcd", "ef")
    assert (turn.live.text_chars, turn.live.omitted_text_chars) == (6, 4)
    assert [e.event for e in events(out)].count("delta") == 3  # forwarded all the same


def test_requests_beyond_the_bound_are_rejected() -> None:
    data = pending("p1") + pending("p2") + resolved("p2") + resolved("p1") + RESULT
    _, proc = run(data, extensions=LIVE, max_permissions=1)
    assert [(d.line, d.code) for d in proc.diagnostics] == [
        (2, "permission_limit"),
        (3, "permission_unknown"),
    ]
    assert list(proc.turn.permissions) == ["p1"]
    assert proc.turn.permissions["p1"].reply == "once"


def test_extensions_must_be_a_collection_of_names() -> None:
    with pytest.raises(TypeError):
        StreamProcessor(extensions="live")
    assert StreamProcessor(extensions=["live", "unknown"]).live


# -- properties -----------------------------------------------------------------------

_message_ids = st.sampled_from(["m1", "m2"])
_request_ids = st.sampled_from(["p1", "p2", "p3"])
_texts = st.text(min_size=1, max_size=6)
_live_lines = st.one_of(
    st.builds(delta, _message_ids, _texts, st.sampled_from(["text", "reasoning"])),
    st.builds(pending, _request_ids),
    st.builds(resolved, _request_ids, st.sampled_from(["once", "always", "reject", "cancelled"])),
    st.builds(
        lambda i, s: step(i, s, name="shell"),
        st.sampled_from(["s1", "s2"]),
        st.sampled_from(["running", "succeeded"]),
    ),
    st.just(line(type="log", level="info", message="x")),
    st.just(b'{"type":"delta","id":"m1"\n'),
)
_live_streams = st.tuples(
    st.lists(_live_lines, max_size=20).map(b"".join),
    st.sampled_from([RESULT, line(type="error", code="x", message="y"), b""]),
).map(lambda parts: parts[0] + parts[1])


def _fold(proc: StreamProcessor) -> Any:
    turn = proc.turn
    return (
        [(p.id, p.kind, p.text) for p in turn.parts],
        {k: (r.status, r.reply, r.step, len(r.options)) for k, r in turn.permissions.items()},
        [(s.id, s.status) for s in turn.steps],
        turn.diagnostics,
        turn.terminal,
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_live_streams,
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
    mode=st.sampled_from(["sse", "trace", "ndjson"]),
    strict=st.booleans(),
)
def test_every_chunking_gives_the_same_fold_and_frames(
    data: bytes, cuts: list[int], mode: Mode, strict: bool
) -> None:
    whole, whole_proc = run(data, mode, extensions=LIVE, strict=strict)
    proc = StreamProcessor(mode, extensions=LIVE, strict=strict)
    out = b""
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out += proc.feed(data[start:cut])
        start = cut
    out += proc.feed(data[start:]) + proc.close()
    assert out == whole
    assert _fold(proc) == _fold(whole_proc)


@settings(max_examples=200)
@given(pieces=st.lists(st.tuples(_message_ids, _texts), max_size=30))
def test_the_folded_text_is_the_concatenated_deltas(pieces: list[tuple[str, str]]) -> None:
    data = b"".join(delta(m, t) for m, t in pieces)
    _, proc = run(data, extensions=LIVE)
    assert proc.turn.text == "".join(t for _, t in pieces)
    assert "".join(p.text for p in proc.turn.parts) == proc.turn.text
    assert all(
        a.id != b.id for a, b in zip(proc.turn.parts, proc.turn.parts[1:], strict=False)
    )  # one part per run of one message


@settings(max_examples=200)
@given(data=_live_streams, mode=st.sampled_from(["sse", "trace", "ndjson"]), strict=st.booleans())
def test_strict_consumers_see_the_live_lines_as_unknown_lines(
    data: bytes, mode: Mode, strict: bool
) -> None:
    unknown = data.replace(b'"type":"delta"', b'"type":"x"').replace(
        b'"type":"permission"', b'"type":"x"'
    )
    out, proc = run(data, mode, strict=strict)
    out_unknown, proc_unknown = run(unknown, mode, strict=strict)
    assert same_but_the_type_named(out, out_unknown)
    assert [(d.line, d.code) for d in proc.diagnostics] == [
        (d.line, d.code) for d in proc_unknown.diagnostics
    ]
