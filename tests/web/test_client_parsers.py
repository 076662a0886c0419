"""The app's own parsers, run in Chromium, checked against the core (Hypothesis).

- ``sse.js`` gives the events the core's :class:`SSEParser` gives, for any stream and
  any chunking of its bytes;
- ``fold.js`` folds the frames the core writes for any turn into exactly the
  message :func:`assistant_message` stores (payload bounds, closed steps, live text,
  reasoning and permission requests included),
  whatever the chunking: the property behind "history renders what live rendered".
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Browser, Page

from sandstream.core import StreamProcessor
from sandstream.core.envelope import LIVE_EXTENSION, USAGE_EXTENSION
from sandstream.core.persistence import DEFAULT_DISPLAY_BYTES, assistant_message
from sandstream.core.sse_parser import ServerSentEvent, SSEParser
from tests.web.harness import WAIT_MS, ServerThread

FEED_SSE = """async ([chunks]) => {
  const { SSEParser } = await import("/web/sse.js");
  const parser = new SSEParser();
  const events = [];
  for (const chunk of chunks) events.push(...parser.feed(new Uint8Array(chunk)));
  events.push(...parser.close());
  return events;
}"""

FOLD = """async ([chunks]) => {
  const { SSEParser } = await import("/web/sse.js");
  const { LiveTurn } = await import("/web/fold.js");
  const parser = new SSEParser();
  const turn = new LiveTurn("m");
  const fold = (events) => {
    for (const e of events) {
      turn.fold({ type: e.type, id: e.id, raw: e.data, data: JSON.parse(e.data) });
    }
  };
  for (const chunk of chunks) fold(parser.feed(new Uint8Array(chunk)));
  fold(parser.close());
  return turn.message();
}"""


@pytest.fixture(scope="module")
def page(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """A page of the app's origin, where its modules can be imported."""
    with ServerThread(tmp_path_factory.mktemp("parsers") / "data") as server:
        context = browser.new_context()
        try:
            opened = context.new_page()
            opened.set_default_timeout(WAIT_MS)
            opened.goto(server.url + "/")
            yield opened
        finally:
            context.close()


def chunked(data: bytes, cuts: list[int]) -> list[list[int]]:
    """``data`` cut at ``cuts`` (positions, any order), as lists of byte values."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [list(data[a:b]) for a, b in itertools.pairwise(points)]


# -- the event-stream parser ----------------------------------------------------------------

line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=12)
newline = st.sampled_from(["\n", "\r", "\r\n"])
field_line = st.one_of(
    st.tuples(st.sampled_from(["data", "event", "id", ": comment", "retry", "other"]), line_text),
    st.just(("", "")),  # a blank line: dispatch
)


@st.composite
def event_streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(field_line, newline), max_size=30))
    text = "".join(
        (f"{name}:{value}" if name and not name.startswith(":") else name + value) + end
        for (name, value), end in lines
    )
    return text.encode()


@settings(max_examples=150)
@given(stream=event_streams(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_sse_js_reads_what_the_core_reads_under_any_chunking(
    page: Page, stream: bytes, cuts: list[int]
) -> None:
    core = SSEParser()
    expected = core.feed(stream) + core.close()
    got = page.evaluate(FEED_SSE, [chunked(stream, cuts)])
    events = [e for e in expected if isinstance(e, ServerSentEvent)]
    assert got == [{"type": e.event, "data": e.data, "id": e.id} for e in events]


# -- the live fold --------------------------------------------------------------------------

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
big_string = st.builds(
    lambda unit, n: unit * n,
    st.sampled_from(["x", "é", "€", "𝄞", 'a\\"b']),
    st.integers(DEFAULT_DISPLAY_BYTES // 4, DEFAULT_DISPLAY_BYTES // 2 + 10),
)
payload = st.one_of(json_value, big_string)


@st.composite
def step_lines(draw: st.DrawFn) -> dict[str, Any]:
    step_id = draw(st.sampled_from(["s1", "s2", "s3"]))
    line: dict[str, Any] = {
        "type": "step",
        "id": step_id,
        "name": draw(st.sampled_from([f"tool_{step_id}", "renamed"])),
        "status": draw(st.sampled_from(["running", "running", "succeeded", "failed"])),
    }
    for key, values in [
        ("args", payload),
        ("result", payload),
        ("error", st.text(max_size=20)),
        ("durationMs", st.integers(0, 10**6) | st.floats(0, 1e6, allow_nan=False)),
        ("ts", st.integers(0, 2**40)),
    ]:
        if draw(st.booleans()):
            line[key] = draw(values)
    return line


@st.composite
def live_lines(draw: st.DrawFn) -> dict[str, Any]:
    """A ``delta`` or ``permission`` line (the ``live`` extension), valid or not."""
    if draw(st.booleans()):
        return {
            "type": "delta",
            "id": draw(st.sampled_from(["m1", "m2"])),
            "kind": draw(st.sampled_from(["text", "reasoning"])),
            "text": draw(st.text(min_size=1, max_size=8)),
        }
    line: dict[str, Any] = {
        "type": "permission",
        "id": draw(st.sampled_from(["p1", "p2"])),
        "status": draw(st.sampled_from(["pending", "resolved"])),
    }
    if line["status"] == "pending":
        line["options"] = [{"id": "o1", "kind": "allow_once", "name": "Allow"}]
        if draw(st.booleans()):
            line["step"] = draw(st.sampled_from(["s1", "s2"]))
        if draw(st.booleans()):
            line["title"] = draw(st.text(max_size=10))
    else:
        line["reply"] = draw(st.sampled_from(["once", "always", "reject", "cancelled"]))
    return line


@st.composite
def usage_lines(draw: st.DrawFn) -> dict[str, Any]:
    """A ``usage`` line (the ``usage`` extension): one model call's tokens."""
    counts = st.integers(0, 10**6)
    line: dict[str, Any] = {
        "type": "usage",
        "protocol": draw(st.sampled_from(["anthropic", "chat", "responses", "gemini"])),
        "input_tokens": draw(counts),
        "output_tokens": draw(counts),
        "cached_input_tokens": draw(counts),
        "cache_write_tokens": draw(counts),
    }
    if draw(st.booleans()):
        line["status"] = draw(st.sampled_from([200, 429, 503]))
        if line["status"] != 200:
            line["error"] = "overloaded"
    return line


terminals = st.sampled_from(["result", "error", "none", "cancel", "interrupt"])


def encode(line: dict[str, Any], spaced: bool) -> bytes:
    """A line as a sandbox might write it: compact, or with spaces (sizes differ)."""
    if spaced:
        return json.dumps(line, ensure_ascii=False).encode()
    return msgspec.json.encode(line)


@settings(max_examples=120)
@given(
    lines=st.lists(st.one_of(step_lines(), live_lines(), usage_lines()), max_size=10),
    terminal=terminals,
    spaced=st.booleans(),
    cuts=st.lists(st.integers(0, 200_000), max_size=6),
)
def test_the_live_fold_builds_the_message_history_stores(
    page: Page, lines: list[dict[str, Any]], terminal: str, spaced: bool, cuts: list[int]
) -> None:
    processor = StreamProcessor("sse", extensions=(LIVE_EXTENSION, USAGE_EXTENSION))
    frames = processor.start({"assistantMessageId": "m"})
    frames += processor.feed(b"".join(encode(line, spaced) + b"\n" for line in lines))
    if terminal == "result":
        frames += processor.feed(b'{"type":"result","message":"**done**"}\n')
    elif terminal == "error":
        frames += processor.feed(b'{"type":"error","code":"boom","message":"it broke"}\n')
    elif terminal == "cancel":
        frames += processor.cancel("the client disconnected")
    elif terminal == "interrupt":  # a durable session's interrupt (the stop button)
        frames += processor.fail("interrupted", "the session was interrupted")
    frames += processor.close()
    stored = assistant_message(processor.turn, message_id="m", created_at=0)
    expected = msgspec.json.decode(msgspec.json.encode(stored))

    got = page.evaluate(FOLD, [chunked(frames, cuts)])
    got.pop("createdAt")
    expected.pop("createdAt")
    assert got == expected


def test_a_payload_just_over_the_bound_keeps_whole_characters_only(page: Page) -> None:
    """The preview is cut before a character the bound would split, as the core's is."""
    text = "a" + "€" * (DEFAULT_DISPLAY_BYTES // 3)  # "€" is 3 bytes: the bound splits one
    line = {"type": "step", "id": "s", "name": "t", "status": "succeeded", "result": text}
    processor = StreamProcessor("sse")
    frames = processor.feed(msgspec.json.encode(line) + b"\n") + processor.close()
    stored = msgspec.json.decode(
        msgspec.json.encode(assistant_message(processor.turn, message_id="m", created_at=0))
    )
    got = page.evaluate(FOLD, [chunked(frames, [])])
    output = got["content"][1]
    assert output == stored["content"][1]
    assert output["truncated"] is True
    assert len(output["output"].encode()) <= DEFAULT_DISPLAY_BYTES


# -- the Markdown renderer ------------------------------------------------------------------

RENDER_MARKDOWN = """async ([source]) => {
  const { renderMarkdown } = await import("/web/markdown.js");
  const box = document.createElement("div");
  box.append(renderMarkdown(source));
  const elements = [...box.querySelectorAll("*")].map((node) => ({
    tag: node.tagName.toLowerCase(),
    attributes: Object.fromEntries([...node.attributes].map((a) => [a.name, a.value])),
  }));
  const attributes = elements.flatMap((e) => Object.values(e.attributes)).join(" ");
  return { elements, text: box.textContent + " " + attributes };
}"""

ALLOWED_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "code", "blockquote", "ul", "ol"}
ALLOWED_TAGS |= {"li", "hr", "strong", "em", "a", "br"}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "target", "rel", "referrerpolicy"},
    "ol": {"start"},
    "code": {"data-lang"},
}
markdown_source = st.lists(
    st.sampled_from(
        [
            "# ",
            "## ",
            "- ",
            "1. ",
            "> ",
            "```",
            "~~~",
            "`",
            "**",
            "*",
            "_",
            "[",
            "](",
            ")",
            "---",
            "  \n",
            "\\\n",
            "\n",
            "\n\n",
            " ",
            "text",
            "<script>alert(1)</script>",
            '<img src=x onerror="alert(1)">',
            "javascript:alert(1)",
            "http://example.com/a?b=c",
            "mailto:x@example.com",
            "data:text/html,<b>x</b>",
            "&amp;",
            "é€𝄞",
        ]
    )
    | st.text(max_size=8),
    max_size=40,
).map("".join)


@settings(max_examples=200)
@given(source=markdown_source)
@example(source="```  \n```<script>alert(1)</script>")  # not a closing fence: it stays code
def test_markdown_makes_only_safe_elements_and_keeps_every_tag_as_text_or_attribute_value(
    page: Page, source: str
) -> None:
    rendered = page.evaluate(RENDER_MARKDOWN, [source])
    for element in rendered["elements"]:
        assert element["tag"] in ALLOWED_TAGS, element
        allowed = ALLOWED_ATTRIBUTES.get(element["tag"], set())
        assert set(element["attributes"]) <= allowed, element
        if element["tag"] == "a":
            assert element["attributes"]["href"].startswith(("http:", "https:", "mailto:"))
            assert element["attributes"]["rel"] == "noopener noreferrer"
    for dangerous in ("<script>", "<img src=x"):
        assert (dangerous in source) <= (dangerous in rendered["text"])


RENDER_CODE = """async ([source]) => {
  const { renderMarkdown } = await import("/web/markdown.js");
  const box = document.createElement("div");
  box.append(renderMarkdown(source));
  return [...box.querySelectorAll("pre > code")].map((code) => code.textContent);
}"""


def test_a_fence_closes_only_on_its_own_character_as_long_or_longer_and_nothing_after(
    page: Page,
) -> None:
    source = "```\n```x\n~~~\n``\n````\nafter\n~~~~\nin tilde\n```\n~~~~~  \n"
    assert page.evaluate(RENDER_CODE, [source]) == ["```x\n~~~\n``", "in tilde\n```"]
