"""Metering one model call: the answer's bytes in, the tokens its provider counted out.

In the manner of h11, :class:`UsageMeter` does no I/O: a model gateway feeds it the
bytes of one answer as they pass, in any chunking, and reads :class:`Usage`, the model
and whether the answer carried its final usage at the end::

    meter = UsageMeter("anthropic", content_type=response.headers.get("content-type"))
    for chunk in body:
        meter.feed(chunk)             # never raises, whatever the bytes
    usage = meter.close()             # Usage(input_tokens=..., output_tokens=..., ...)
    meter.model, meter.complete       # "claude-sonnet-4-5", True

An answer is Server-Sent Events when its content type is ``text/event-stream`` (read
with :class:`~sandstream.core.sse_parser.SSEParser`), else one JSON body (Gemini's
``streamGenerateContent`` without ``alt=sse``: a JSON array of responses). How each
protocol counts is in docs/protocol.md, "Metering model calls". Of an SSE answer only
the events holding one of the protocol's markers (the fields it reads, quoted) are
parsed; byte searches skip the others, so a long answer costs little more than a
``memchr`` per piece. Bad input never raises:
bytes that are not the protocol's events or body count nothing; a stream cut
mid-event counts what its complete events said; past the bounds (an SSE line or an
event's data over ``max_event_chars``, a JSON body over ``max_body_bytes``) the meter
reads nothing more. Nothing here blocks or can be cancelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Final, TypeAlias, TypeVar

import msgspec

from .envelope import ModelProtocol, ModelUsage
from .errors import SSEParseError
from .sse_parser import ServerSentEvent, SSEParser

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_EVENT_CHARS",
    "ModelProtocol",
    "Usage",
    "UsageMeter",
]

DEFAULT_MAX_BODY_BYTES: Final = 64 << 20
"""The largest JSON answer a meter reads; a longer one counts nothing."""
DEFAULT_MAX_EVENT_CHARS: Final = 32 << 20
"""The longest SSE line, and event data, a meter reads; past it the meter stops reading."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call (or a sum of calls), split as billing splits them.

    ``input_tokens``: input not read from a cache; ``cached_input_tokens``: input read
    from the provider's cache; ``cache_write_tokens``: input written to the cache
    (Anthropic's ``cache_creation_input_tokens``; 0 elsewhere, where writing costs
    nothing extra); ``output_tokens``: output, reasoning or thinking included. The
    four never overlap: :attr:`total` is their sum.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total(self) -> int:
        """Every token counted: input (uncached, cached, written to cache) and output."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cached_input_tokens
            + self.cache_write_tokens
        )


_Count: TypeAlias = Annotated[int, msgspec.Meta(ge=0)] | None
_Doc = TypeVar("_Doc")
_EVENT_STREAM: Final = re.compile(r"\s*text/event-stream\s*(;|$)", re.IGNORECASE)
# One JSON token that matters to the top level of an array: a string (also one cut
# short by the end of the input, whose brackets are not brackets), a bracket, a comma.
_ARRAY_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[\]{},]', re.DOTALL)
_ARRAY_START: Final = re.compile(rb"\s*\[")


def _decoder(kind: type[_Doc]) -> Callable[[bytes | str], _Doc | None]:
    """A decode of ``kind`` that gives ``None`` for anything else."""
    decode = msgspec.json.Decoder(kind).decode

    def read(data: bytes | str) -> _Doc | None:
        try:
            return decode(data)
        except (msgspec.DecodeError, ValueError, RecursionError):  # incl. UnicodeDecodeError
            return None

    return read


class _Reader:
    """One protocol's fold of an answer's events (or body) into the call's usage.

    ``MARKERS``: an SSE event whose bytes hold none of them cannot change the fold (it
    names none of the fields the fold reads, nor the event types it folds), so it is
    never parsed. Each begins with ``"``: bytes without one are skipped at once."""

    __slots__ = ("complete", "model", "usage")
    MARKERS: tuple[bytes, ...] = ()

    def __init__(self) -> None:
        self.usage = Usage()
        self.model: str | None = None
        self.complete = False

    def event(self, data: str) -> None:
        """Fold the data of one SSE event."""
        raise NotImplementedError

    def body(self, data: bytes) -> None:
        """Fold a whole JSON answer (or as much of it as came)."""
        raise NotImplementedError

    def _name(self, model: str | None) -> None:
        if model:
            self.model = model


# -- anthropic: Messages ------------------------------------------------------------


class _AnthropicUsage(msgspec.Struct):
    input_tokens: _Count = None
    output_tokens: _Count = None
    cache_creation_input_tokens: _Count = None
    cache_read_input_tokens: _Count = None


class _AnthropicMessage(msgspec.Struct):
    model: str | None = None
    usage: _AnthropicUsage | None = None


class _AnthropicDocument(msgspec.Struct):
    """A Message (the JSON answer) or a stream event (``message_start``: a Message;
    ``message_delta``: the usage so far)."""

    type: str = ""
    model: str | None = None
    message: _AnthropicMessage | None = None
    usage: _AnthropicUsage | None = None


_read_anthropic: Final = _decoder(_AnthropicDocument)


class _AnthropicReader(_Reader):
    """``message_start`` holds the input and cache counts and a first output count;
    every ``message_delta`` holds the output so far, and, where the API sends them, the
    input and cache counts so far: each count present replaces the one before."""

    __slots__ = ("_counts",)
    MARKERS = (b'"message_start"', b'"message_delta"')

    def __init__(self) -> None:
        super().__init__()
        self._counts = _AnthropicUsage(0, 0, 0, 0)

    def event(self, data: str) -> None:
        document = _read_anthropic(data)
        if document is None:
            return
        if document.type == "message_start" and document.message is not None:
            self._name(document.message.model)
            if document.message.usage is not None:
                self._update(document.message.usage)
        elif document.type == "message_delta" and document.usage is not None:
            self._update(document.usage)
            self.complete = self.complete or document.usage.output_tokens is not None

    def body(self, data: bytes) -> None:
        document = _read_anthropic(data)
        if document is None or document.type != "message":
            return
        self._name(document.model)
        if document.usage is not None:
            self._update(document.usage)
            self.complete = document.usage.output_tokens is not None

    def _update(self, usage: _AnthropicUsage) -> None:
        counts = self._counts
        for field in usage.__struct_fields__:
            value = getattr(usage, field)
            if value is not None:
                setattr(counts, field, value)
        self.usage = Usage(
            counts.input_tokens or 0,
            counts.output_tokens or 0,
            counts.cache_read_input_tokens or 0,
            counts.cache_creation_input_tokens or 0,
        )


# -- chat: OpenAI Chat Completions --------------------------------------------------


class _PromptDetails(msgspec.Struct):
    cached_tokens: _Count = None


class _ChatUsage(msgspec.Struct):
    prompt_tokens: _Count = None
    completion_tokens: _Count = None
    prompt_tokens_details: _PromptDetails | None = None


class _ChatChoice(msgspec.Struct):
    finish_reason: str | None = None


class _ChatDocument(msgspec.Struct):
    """A ``chat.completion`` (the JSON answer) or a ``chat.completion.chunk``."""

    model: str | None = None
    choices: list[_ChatChoice] | None = None
    usage: _ChatUsage | None = None


_read_chat: Final = _decoder(_ChatDocument)


def _split_cached(whole: int | None, cached: int | None) -> tuple[int, int]:
    """(uncached, cached) of an input count that includes its cached part."""
    cached = cached or 0
    return max((whole or 0) - cached, 0), cached


class _ChatReader(_Reader):
    """The usage is the last chunk's (with ``stream_options.include_usage``; a chunk
    with no choices after the one with the ``finish_reason``); providers that send it
    in every chunk send it so far, so the last one counts. ``prompt_tokens`` includes
    ``prompt_tokens_details.cached_tokens``; ``completion_tokens`` includes reasoning."""

    __slots__ = ("_finished",)
    MARKERS = (b'"model"', b'"usage"', b'"finish_reason"')

    def __init__(self) -> None:
        super().__init__()
        self._finished = False

    def event(self, data: str) -> None:
        document = _read_chat(data)  # "[DONE]" is no JSON: nothing
        if document is None:
            return
        self._name(document.model)
        choices = document.choices or ()
        if any(choice.finish_reason is not None for choice in choices):
            self._finished = True
        if document.usage is not None:
            self._take(document.usage)
            self.complete = self._finished or not choices

    def body(self, data: bytes) -> None:
        document = _read_chat(data)
        if document is None:
            return
        self._name(document.model)
        if document.usage is not None:
            self._take(document.usage)
            self.complete = True

    def _take(self, usage: _ChatUsage) -> None:
        details = usage.prompt_tokens_details
        uncached, cached = _split_cached(
            usage.prompt_tokens, None if details is None else details.cached_tokens
        )
        self.usage = Usage(uncached, usage.completion_tokens or 0, cached)


# -- responses: OpenAI Responses ----------------------------------------------------


class _InputDetails(msgspec.Struct):
    cached_tokens: _Count = None


class _ResponsesUsage(msgspec.Struct):
    input_tokens: _Count = None
    output_tokens: _Count = None
    input_tokens_details: _InputDetails | None = None


class _Response(msgspec.Struct):
    model: str | None = None
    usage: _ResponsesUsage | None = None


class _ResponsesEvent(msgspec.Struct):
    type: str = ""
    response: _Response | None = None


_read_responses_event: Final = _decoder(_ResponsesEvent)
_read_response: Final = _decoder(_Response)
_RESPONSE_ENDS: Final = frozenset(("response.completed", "response.incomplete", "response.failed"))


class _ResponsesReader(_Reader):
    """The usage is the ``response`` of the event that ends the stream
    (``response.completed``, ``.incomplete`` or ``.failed``); ``input_tokens``
    includes ``input_tokens_details.cached_tokens``, ``output_tokens`` includes
    ``output_tokens_details.reasoning_tokens``."""

    __slots__ = ()
    MARKERS = (b'"response"',)

    def event(self, data: str) -> None:
        document = _read_responses_event(data)
        if document is None or document.response is None:
            return
        self._fold(document.response)
        if document.type in _RESPONSE_ENDS and document.response.usage is not None:
            self.complete = True

    def body(self, data: bytes) -> None:
        response = _read_response(data)
        if response is not None:
            self._fold(response)
            self.complete = response.usage is not None

    def _fold(self, response: _Response) -> None:
        self._name(response.model)
        usage = response.usage
        if usage is not None:
            details = usage.input_tokens_details
            uncached, cached = _split_cached(
                usage.input_tokens, None if details is None else details.cached_tokens
            )
            self.usage = Usage(uncached, usage.output_tokens or 0, cached)


# -- gemini: generateContent / streamGenerateContent --------------------------------


class _GeminiUsage(msgspec.Struct, rename="camel"):
    prompt_token_count: _Count = None
    cached_content_token_count: _Count = None
    tool_use_prompt_token_count: _Count = None
    candidates_token_count: _Count = None
    thoughts_token_count: _Count = None


class _GeminiCandidate(msgspec.Struct, rename="camel"):
    finish_reason: str | None = None


class _PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None


class _GeminiResponse(msgspec.Struct, rename="camel"):
    """A ``GenerateContentResponse``: the JSON answer, or one of a stream."""

    candidates: list[_GeminiCandidate] | None = None
    prompt_feedback: _PromptFeedback | None = None
    usage_metadata: _GeminiUsage | None = None
    model_version: str | None = None


_read_gemini: Final = _decoder(_GeminiResponse)
_read_gemini_body: Final = _decoder(list[_GeminiResponse] | _GeminiResponse)  # type: ignore[arg-type]


class _GeminiReader(_Reader):
    """Every response of a stream may carry ``usageMetadata``, each time the counts so
    far: the last one counts, final once a response ended the answer (a candidate's
    ``finishReason``, or the prompt's ``blockReason``). ``promptTokenCount`` includes
    ``cachedContentTokenCount``; ``toolUsePromptTokenCount`` is input besides it;
    ``thoughtsTokenCount`` is output besides ``candidatesTokenCount``."""

    __slots__ = ("_finished",)

    MARKERS = (b'"usageMetadata"', b'"modelVersion"', b'"finishReason"', b'"promptFeedback"')

    def __init__(self) -> None:
        super().__init__()
        self._finished = False

    def event(self, data: str) -> None:
        response = _read_gemini(data)
        if response is not None:
            self._fold(response)

    def body(self, data: bytes) -> None:
        read = _read_gemini_body(data)
        if read is None and _ARRAY_START.match(data):  # a stream cut short
            read = _read_gemini_body(_complete_elements(data))
        for response in read if isinstance(read, list) else [read] if read is not None else []:
            self._fold(response)

    def _fold(self, response: _GeminiResponse) -> None:
        self._name(response.model_version)
        feedback = response.prompt_feedback
        if (feedback is not None and feedback.block_reason is not None) or any(
            candidate.finish_reason is not None for candidate in response.candidates or ()
        ):
            self._finished = True
        usage = response.usage_metadata
        if usage is not None:
            uncached, cached = _split_cached(
                (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0),
                usage.cached_content_token_count,
            )
            output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
            self.usage = Usage(uncached, output, cached)
            self.complete = self._finished


def _complete_elements(data: bytes) -> bytes:
    """The JSON array ``data`` cut short, closed after its last complete element."""
    depth = 0
    end = 0  # after the last complete element at depth 1
    for token in _ARRAY_TOKEN.finditer(data):
        first = token.group()[:1]
        if first in (b"[", b"{"):
            depth += 1
        elif first in (b"]", b"}"):
            depth -= 1
            if depth == 1:
                end = token.end()
            elif depth <= 0:
                break
    return data[:end] + b"]" if end else b"[]"


_BLANK_LINES: Final = (b"\n\n", b"\n\r\n")
"""The ends of an SSE event that are certain whatever follows: a line end, then an
empty line ended by LF (a CR might still be half of a CRLF)."""
MARKED_PENDING_BYTES: Final = 1 << 20
"""An event longer than this without an end makes the meter parse every byte from then on."""


class _MarkedEvents:
    """The bytes of the SSE events that hold one of ``markers``, found with byte
    searches; the events between are skipped unparsed. What it gives starts and ends
    at event ends, so a parser fed only it reads those events as it would in the whole
    stream. Bytes that may be past ``bound`` (the parser's, :data:`DEFAULT_MAX_EVENT_CHARS`)
    are given too, for the parser to refuse them as it would: skipped events longer in
    all than ``bound``, and, once an event runs past ``bound`` or
    :data:`MARKED_PENDING_BYTES` without an end (or the stream's events end in CR
    alone, or every event is marked), every byte from then on (:attr:`whole`)."""

    __slots__ = ("_bound", "_dense", "_markers", "_pending", "_pending_size", "_tail", "whole")

    def __init__(self, markers: tuple[bytes, ...], bound: int) -> None:
        self._markers = markers
        self._bound = bound
        self._pending: list[bytes] = []  # the pieces since the last event end
        self._pending_size = 0
        self._tail = b""  # the last two pending bytes: an event end may straddle
        self._dense = 0  # feeds in a row whose events were all marked
        self.whole = not markers

    def feed(self, data: bytes) -> list[bytes]:
        if self.whole:
            return [data]
        # the last event end in the new bytes, or across their junction with those pending
        found_end = _last_event_end(data, 0, len(data))
        if not found_end and self._pending:
            junction = self._tail + data[:2]
            found_end = max(_last_event_end(junction, 0, len(junction)) - len(self._tail), 0)
        if not found_end:
            self._pending.append(data)
            self._pending_size += len(data)
            self._tail = (self._tail + data)[-2:]
            if self._pending_size > min(self._bound, MARKED_PENDING_BYTES):
                self.whole = True
                return [self.rest()]
            return []
        text = b"".join([*self._pending, data])
        end = self._pending_size + found_end
        self._pending = [text[end:]] if end < len(text) else []
        self._pending_size = len(text) - end
        self._tail = text[-2:] if self._pending else b""
        spans: list[tuple[int, int]] = []
        at = 0
        quoted = text.find(b'"', 0, end) >= 0  # every marker is quoted: a memchr first
        hits = {marker: text.find(marker, 0, end) if quoted else -1 for marker in self._markers}
        while at < end:
            for marker, hit in hits.items():
                if 0 <= hit < at:
                    hits[marker] = text.find(marker, at, end)
            found = [hit for hit in hits.values() if hit >= 0]
            start = _last_event_end(text, at, min(found)) if found else end
            if start - at > self._bound:  # skipped events the parser must see
                start = at
            if not found and start == end:
                break
            stop = _next_event_end(text, max(start, min(found, default=start)), end)
            if spans and spans[-1][1] == start:  # right after the last one: one piece
                spans[-1] = (spans[-1][0], stop)
            else:
                spans.append((start, stop))
            at = stop
        self._dense = self._dense + 1 if spans == [(0, end)] and end else 0
        if self._dense >= 2:  # every event is marked: no search is worth its cost
            self.whole = True
            self._pending, self._pending_size, self._tail = [], 0, b""
            return [text]
        return [text[start:stop] for start, stop in spans]

    def rest(self) -> bytes:
        """The bytes after the last certain event end (events ended by CR alone, an
        event cut short): the stream's end decides what they are."""
        rest = b"".join(self._pending)
        self._pending, self._pending_size, self._tail = [], 0, b""
        return rest


def _last_event_end(text: bytes, low: int, high: int) -> int:
    """Where the last event ending in ``text[low:high]`` ends (``low``: none does)."""
    newline = text.rfind(b"\n", low, high)
    while newline >= low:
        if newline - 1 >= low and text[newline - 1] == 0x0A:
            return newline + 1
        if newline - 2 >= low and text[newline - 2 : newline] == b"\n\r":
            return newline + 1
        newline = text.rfind(b"\n", low, newline)
    return low


def _next_event_end(text: bytes, low: int, high: int) -> int:
    """Where the first event ending in ``text[low:high]`` ends (``high``: none does)."""
    newline = text.find(b"\n", low, high)
    while newline >= 0:
        if text[newline + 1 : newline + 2] == b"\n" and newline + 2 <= high:
            return newline + 2
        if text[newline + 1 : newline + 3] == b"\r\n" and newline + 3 <= high:
            return newline + 3
        newline = text.find(b"\n", newline + 1, high)
    return high


_READERS: Final[dict[str, type[_Reader]]] = {
    "anthropic": _AnthropicReader,
    "chat": _ChatReader,
    "responses": _ResponsesReader,
    "gemini": _GeminiReader,
}


class UsageMeter:
    """The usage of one model call of ``protocol``, read from its answer's bytes.

    ``content_type``: the answer's ``Content-Type`` (``text/event-stream``: SSE; else,
    or ``None``, one JSON body). ``feed`` takes any chunking and never raises;
    ``close`` returns the :class:`Usage` read (idempotent; ``feed`` after it is
    ignored). :attr:`model` is the model the provider named in its answer, if any;
    :attr:`complete` whether the answer carried its final usage (an error body, or a
    stream cut before its last usage, did not). Not thread-safe.
    """

    __slots__ = ("_body", "_closed", "_events", "_marked", "_max_body", "_reader", "protocol")

    def __init__(
        self,
        protocol: ModelProtocol,
        *,
        content_type: str | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_event_chars: int = DEFAULT_MAX_EVENT_CHARS,
    ) -> None:
        """Raise ``ValueError`` for an unknown protocol or a bound that is not positive."""
        if protocol not in _READERS:
            raise ValueError(f"protocol must be one of {tuple(_READERS)}, got {protocol!r}")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        self.protocol: ModelProtocol = protocol
        self._reader = _READERS[protocol]()
        self._events: SSEParser[ServerSentEvent] | None = None
        if content_type is not None and _EVENT_STREAM.match(content_type):
            self._events = SSEParser(max_line_chars=max_event_chars, max_data_chars=max_event_chars)
        self._marked = _MarkedEvents(self._reader.MARKERS, max_event_chars)
        self._body: bytearray | None = None if self._events is not None else bytearray()
        self._max_body = max_body_bytes
        self._closed = False

    @property
    def model(self) -> str | None:
        """The model the provider named in its answer so far (``None``: none yet)."""
        return self._reader.model

    @property
    def complete(self) -> bool:
        """Whether the answer carried its final usage (for JSON: once closed)."""
        return self._reader.complete

    @property
    def usage(self) -> Usage:
        """The usage read so far (for JSON: once closed)."""
        return self._reader.usage

    def feed(self, data: bytes) -> None:
        """Read the next bytes of the answer. Never raises."""
        if self._closed:
            return
        if self._events is not None:
            for marked in self._marked.feed(bytes(data)):
                self._read_events(marked)
        elif self._body is not None:
            self._body += data
            if len(self._body) > self._max_body:
                self._body = None  # past the bound: nothing to read

    def _read_events(self, data: bytes) -> None:
        assert self._events is not None
        if self._closed or not data:
            return
        try:
            events = self._events.feed(data)
        except SSEParseError:  # past the bound: read nothing more
            self._closed = True
            return
        for event in events:
            self._reader.event(event.data)

    def close(self) -> Usage:
        """End of the answer: the usage it said (a JSON body is read now). Idempotent."""
        if not self._closed:
            if self._events is not None:
                self._read_events(self._marked.rest())
            self._closed = True
            if self._body:
                self._reader.body(bytes(self._body))
            self._body = None
        return self._reader.usage

    def line(
        self, ts: int | None = None, *, status: int | None = None, error: str | None = None
    ) -> ModelUsage:
        """The ``usage`` envelope line of this call (closing the meter first), with the
        answer's HTTP ``status`` and, for a failed call, its ``error``."""
        usage = self.close()
        return ModelUsage(
            protocol=self.protocol,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            model=self.model,
            complete=self.complete,
            status=status,
            error=error,
            ts=ts,
        )
