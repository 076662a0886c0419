"""The façade: NDJSON from a sandbox in, SSE frames or validated NDJSON out.

In the manner of h11's ``Connection``, :class:`StreamProcessor` does no I/O. Feed it
bytes as they arrive, in any chunking; write out what it returns::

    proc = StreamProcessor()          # chat mode: NDJSON in, SSE out, logs filtered
    out = proc.feed(chunk)            # bytes -> bytes of SSE frames
    out += proc.close()               # end of upstream: exactly one terminal event
    proc.turn                         # the folded state: steps, result or error

With ``extensions=["live"]`` it also accepts, folds and forwards the ``live``
extension's ``delta`` and ``permission`` lines, with ``extensions=["usage"]`` the
``usage`` lines (summed in ``turn.usage``); without them they are rejected like any
line of an unknown type (docs/protocol.md, "The live extension", "The usage
extension"). A caller that meters the model calls itself adds their lines with
:meth:`~StreamProcessor.add_usage`.

Bad input never raises: a rejected line becomes a diagnostic and is not forwarded
(``strict=True`` instead ends the turn with ``error{code:"protocol_error"}``).
Every turn ends with exactly one terminal event, sent upstream or synthesized by
:meth:`~StreamProcessor.close`, :meth:`~StreamProcessor.cancel` or
:meth:`~StreamProcessor.fail`. Each forwarded frame reuses the line's own bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from itertools import count, filterfalse
from typing import Any, Final, Literal, TypeAlias

import msgspec

from .envelope import (
    LIVE_EXTENSION,
    USAGE_EXTENSION,
    Delta,
    Error,
    LiveWireEnvelope,
    Log,
    ModelUsage,
    Permission,
    Result,
    Step,
    WireEnvelope,
    encode_line,
    new_live_wire_decoder,
    new_usage_wire_decoder,
    new_wire_decoder,
)
from .errors import ProcessorClosedError
from .splitter import DEFAULT_MAX_LINE_BYTES, NDJSONSplitter
from .sse import PING, SINGLE_LINE_FRAME, data_fields, event_field, line_frames
from .turn import (
    DEFAULT_MAX_DIAGNOSTICS,
    DEFAULT_MAX_PERMISSIONS,
    DEFAULT_MAX_STEP_BYTES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TEXT_CHARS,
    Diagnostic,
    Turn,
)

__all__ = ["Mode", "StreamProcessor"]

Mode: TypeAlias = Literal["sse", "ndjson", "trace"]
"""``sse``: SSE without logs (chat). ``trace``: SSE with logs. ``ndjson``: passthrough."""

_MODES: Final = ("sse", "ndjson", "trace")
# Decoders are immutable and thread-safe: one of each serves all. By (live, usage):
_DECODERS: Final[dict[tuple[bool, bool], Callable[[bytes], LiveWireEnvelope | ModelUsage]]] = {
    (False, False): new_wire_decoder().decode,
    (True, False): new_live_wire_decoder().decode,
    (False, True): new_usage_wire_decoder(live=False).decode,
    (True, True): new_usage_wire_decoder(live=True).decode,
}
_Decoded: TypeAlias = WireEnvelope | Delta | Permission | ModelUsage | Diagnostic | None
_json_encoder: Final = msgspec.json.Encoder()


class StreamProcessor:
    """Fold one turn's NDJSON into step state and output frames. Not thread-safe.

    ``max_line_bytes`` bounds a line (and so the memory held between feeds);
    ``max_steps`` and ``max_step_bytes`` bound the step rows the turn keeps (later
    steps are still forwarded, and counted: :class:`~.turn.Turn`). ``extensions``
    names the envelope extensions the reader asked for (``"live"``, ``"usage"``; other
    names are ignored); ``max_text_chars`` and ``max_permissions`` bound what the turn
    keeps of the ``live`` lines (:class:`~.live.LiveFold`), which are forwarded all the
    same. ``usage_from_upstream=False`` is for a caller that meters the model calls
    itself (the runner, with its model gateway): ``usage`` lines from upstream are then
    rejected, so that a sandbox cannot forge its counts, and only
    :meth:`add_usage` adds to ``turn.usage``.
    """

    __slots__ = (
        "_closed",
        "_decode",
        "_diagnostics_at_terminal",
        "_done_sent",
        "_frame_heads",
        "_seq",
        "_splitter",
        "live",
        "mode",
        "strict",
        "turn",
        "usage_extension",
    )

    def __init__(
        self,
        mode: Mode = "sse",
        *,
        strict: bool = False,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_diagnostics: int = DEFAULT_MAX_DIAGNOSTICS,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_step_bytes: int = DEFAULT_MAX_STEP_BYTES,
        extensions: Collection[str] = (),
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_permissions: int = DEFAULT_MAX_PERMISSIONS,
        usage_from_upstream: bool = True,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if isinstance(extensions, str):
            raise TypeError("extensions must be a collection of names, not one string")
        self.mode: Mode = mode
        self.strict = strict
        self.live = LIVE_EXTENSION in extensions
        """True when the ``live`` extension's lines are accepted."""
        self.usage_extension = USAGE_EXTENSION in extensions
        """True when the reader asked for the ``usage`` extension's lines."""
        self.turn = Turn(
            max_diagnostics,
            max_steps=max_steps,
            max_step_bytes=max_step_bytes,
            max_text_chars=max_text_chars,
            max_permissions=max_permissions,
        )
        self._decode = _DECODERS[self.live, self.usage_extension and usage_from_upstream]
        self._splitter = NDJSONSplitter(max_line_bytes)
        self._closed = False
        self._done_sent = False
        self._diagnostics_at_terminal = 0
        self._seq = 0
        # Per line type, the bytes that precede its data in an output frame;
        # None where the type is not forwarded (logs in chat mode).
        heads: dict[type, bytes | None]
        if mode == "ndjson":
            heads = dict.fromkeys((Log, Step, Result, Error, Delta, Permission, ModelUsage), b"")
        else:
            heads = {
                Log: event_field("log") if mode == "trace" else None,
                Step: event_field("step"),
                Result: event_field("result"),
                Error: event_field("error"),
                Delta: event_field("delta"),
                Permission: event_field("permission"),
                ModelUsage: event_field("usage"),
            }
        self._frame_heads = heads

    # -- state ---------------------------------------------------------------

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Rejected lines, with line numbers and reasons (the first ``max_diagnostics``)."""
        return self.turn.diagnostics

    @property
    def max_line_bytes(self) -> int:
        """The longest line accepted, in bytes (its ``\\n`` not counted)."""
        return self._splitter.max_line_bytes

    @property
    def ended(self) -> bool:
        """True once the turn has its terminal event."""
        return self.turn.terminal is not None

    @property
    def closed(self) -> bool:
        """True after :meth:`close`, :meth:`cancel` or :meth:`fail`: feeding is over."""
        return self._closed

    @property
    def last_event_id(self) -> int:
        """The ``id`` of the last SSE frame written (0 before the first)."""
        return self._seq

    @property
    def written(self) -> int:
        """How many lines (``ndjson`` mode) or frames (SSE modes) were returned so far:
        a caller learns how many a chunk of output holds without scanning it."""
        return self._seq

    # -- input ---------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Consume a chunk of upstream bytes; return the frames it completes.

        Raises :class:`ProcessorClosedError` after :meth:`close`, :meth:`cancel`
        or :meth:`fail`.
        """
        if self._closed:
            raise ProcessorClosedError("feed() after the turn was closed")
        lines = self._splitter.feed(data)
        if not lines:
            return b""
        return self._process(lines)

    def insert(self, line: bytes) -> bytes:
        """Process one whole line of the caller's own (no ``\\n``) as if upstream had
        sent it between two of its lines; return its frames.

        For lines only the caller knows (the runner's note of a failed model call): a
        line upstream has only begun to send stays pending, untouched. The line is
        checked like any other (an invalid one is a diagnostic). Raises
        :class:`ProcessorClosedError` after :meth:`close`, :meth:`cancel` or :meth:`fail`.
        """
        if self._closed:
            raise ProcessorClosedError("insert() after the turn was closed")
        return self._process([line])

    def close(self, message: str = "upstream ended without a result or error") -> bytes:
        """End of upstream: flush a final unterminated line, then guarantee a terminal.

        Without a terminal from upstream, synthesizes ``error{code:"upstream_closed"}``
        carrying ``message`` (e.g. the container's exit status). Idempotent: later
        calls return ``b""``.
        """
        if self._closed:
            return b""
        out = self._process(self._splitter.close())
        return out + self.fail("upstream_closed", message)

    def cancel(self, message: str = "the turn was cancelled") -> bytes:
        """End the turn with ``error{code:"cancelled"}`` unless it already ended."""
        return self.fail("cancelled", message)

    def fail(self, code: str, message: str) -> bytes:
        """End the turn with ``error{code, message}`` unless it already ended.

        For reasons only the caller knows: ``runtime_exceeded``, ``shutdown``, a
        container's exit status. Returns the terminal frames (``b""`` if the turn
        had already ended) and closes the processor for input.
        """
        self._closed = True
        if self.turn.terminal is not None:
            return b""
        head, line = self._synthesize_error(code, message, self.turn.lines)
        if self.mode == "ndjson":
            self._seq += 1
            return line + b"\n"
        return self._render([head], [line])

    def add_usage(self, line: ModelUsage) -> bytes:
        """A model call the caller metered itself (the runner's model gateway): add it
        to ``turn.usage`` and return its frame (in ``ndjson`` mode its line), numbered
        in the turn's sequence, when the reader asked for the ``usage`` extension.

        Returns ``b""`` when the reader did not ask, or once the turn has ended (the
        tokens were spent all the same: they are added). Never raises, also after
        :meth:`close`: a gateway's call may end after its turn.
        """
        self.turn.fold_usage(line)
        if not self.usage_extension or self.turn.terminal is not None:
            return b""
        data = encode_line(line)[:-1]
        if self.mode == "ndjson":
            self._seq += 1
            return data + b"\n"
        head = self._frame_heads[ModelUsage]
        assert head is not None
        return self._frame(head, data)

    # -- output helpers ---------------------------------------------------------

    def start(self, data: Mapping[str, Any] | bytes) -> bytes:
        """Return the ``start`` frame (SSE modes; ``b""`` in ndjson mode).

        ``data`` is a JSON object, given as a mapping or as encoded bytes.
        """
        return self.event("start", data)

    def event(self, name: str, data: Mapping[str, Any] | bytes) -> bytes:
        """Return a frame of the caller's own SSE event ``name`` (``b""`` in ndjson mode),
        numbered in the turn's ``id`` sequence like every other frame.

        For events only the caller knows, such as the chat backend's ``start`` and
        ``files``; they are not envelope lines and the turn does not fold them.
        ``data`` is a JSON object, given as a mapping or as encoded bytes. Raises
        ``ValueError`` for a name holding CR, LF or NUL.
        """
        if self.mode == "ndjson":
            return b""
        head = event_field(name)
        payload = data if isinstance(data, bytes) else _json_encoder.encode(data)
        return self._frame(head, payload)

    def ping(self) -> bytes:
        """Return the keep-alive comment line, ``: ping``, to send between frames.

        SSE modes only (``b""`` in ndjson mode). No blank line follows it, so no
        client turns it into an event (see :func:`~sandstream.core.sse.format_comment`).
        """
        return b"" if self.mode == "ndjson" else PING

    # -- internals -------------------------------------------------------------

    def _process(self, lines: list[bytes | None]) -> bytes:
        # The hot path, in three passes over the batch so that each stays in the CPU's
        # caches: decode every line (C speed), fold them in order (Python), render
        # the accepted ones (C speed, reusing each line's own bytes).
        turn = self.turn
        first = turn.lines + 1
        turn.lines += len(lines)
        decoded = self._decode_batch(lines, first)
        fold_step = turn.fold_step
        heads = self._frame_heads
        forwarded: list[bytes] = []
        forwarded_heads: list[bytes] = []
        forward = forwarded.append
        forward_head = forwarded_heads.append
        for lineno, line, item in zip(count(first), lines, decoded):
            if item is None:  # a blank line
                continue
            if turn.terminal is not None:
                turn.record(Diagnostic(lineno, "after_terminal", "line after the terminal event"))
                continue
            kind = type(item)
            if kind is Step:
                violation = fold_step(item, lineno, len(line))  # type: ignore[arg-type]
                if violation is not None:
                    self._reject(violation, forwarded, forwarded_heads)
                    continue
            elif kind is Delta:
                turn.fold_delta(item)  # type: ignore[arg-type]
            elif kind is Log:
                turn.logs += 1
            elif kind is Permission:
                violation = turn.fold_permission(item, lineno)  # type: ignore[arg-type]
                if violation is not None:
                    self._reject(violation, forwarded, forwarded_heads)
                    continue
            elif kind is ModelUsage:
                turn.fold_usage(item)  # type: ignore[arg-type]
            elif kind is Diagnostic:
                self._reject(item, forwarded, forwarded_heads)  # type: ignore[arg-type]
                continue
            else:
                turn.terminal = item  # type: ignore[assignment]
                turn.terminal_line = lineno
                self._diagnostics_at_terminal = turn.diagnostic_count
            head = heads[kind]
            if head is not None:
                forward(line)  # type: ignore[arg-type]
                forward_head(head)
        if not forwarded:
            return b""
        if self.mode == "ndjson":
            self._seq += len(forwarded)
            forwarded.append(b"")  # the last line's "\n", without copying the output again
            return b"\n".join(forwarded)
        return self._render(forwarded_heads, forwarded)

    def _decode_batch(self, lines: list[bytes | None], first: int) -> list[_Decoded]:
        """Each line's envelope, or the :class:`Diagnostic` rejecting it (None: blank)."""
        try:
            decoded: list[_Decoded] = list(map(self._decode, lines))  # type: ignore[arg-type]
            # Payloads are kept as raw JSON, which msgspec does not check for UTF-8.
            # Joined with "\n", two broken lines cannot pass for one valid sequence.
            b"\n".join(filterfalse(bytes.isascii, lines)).decode()  # type: ignore[arg-type]
            return decoded
        except (ValueError, TypeError, RecursionError):
            pass  # some line is blank, too long or bad: find out which, line by line
        return [self._decode_line(line, lineno) for lineno, line in enumerate(lines, first)]

    def _decode_line(self, line: bytes | None, lineno: int) -> _Decoded:
        if line is None:
            reason = f"line exceeds {self._splitter.max_line_bytes} bytes"
            return Diagnostic(lineno, "line_too_long", reason)
        if not line.isascii():
            # The core's own rule, first: a line that is not UTF-8 is invalid_utf8,
            # whatever msgspec (whose checks differ between versions) says of it.
            try:
                line.decode()
            except UnicodeDecodeError as exc:
                return Diagnostic(lineno, "invalid_utf8", str(exc))
        try:
            return self._decode(line)
        except msgspec.ValidationError as exc:
            return Diagnostic(lineno, "invalid_line", str(exc))
        except msgspec.DecodeError as exc:
            return Diagnostic(lineno, "invalid_json", str(exc)) if line.strip() else None
        except RecursionError:
            return Diagnostic(lineno, "invalid_json", "JSON nested too deeply")

    def _render(self, heads: list[bytes], lines: list[bytes]) -> bytes:
        """SSE frames for consecutive lines, then ``done`` if the last one ended the turn."""
        seq = self._seq
        self._seq += len(lines)
        if heads.count(heads[0]) == len(heads):  # one event name (steps): no step per line
            lines.append(b"")  # the last line's "\n"
            frames = b"\n".join(lines)
            lines.pop()
            if 13 not in frames:
                frames = line_frames(seq + 1, frames, len(lines), heads[0])
        else:
            frames = b"".join(map(SINGLE_LINE_FRAME.__mod__, zip(count(seq + 1), heads, lines)))
        if 13 in frames:  # a CR inside a line (JSON whitespace): one data: line per part
            frames = b"".join(
                [
                    b"id: %d\n%b%b\n" % (n, head, data_fields(line))
                    for n, head, line in zip(count(seq + 1), heads, lines)
                ]
            )
        if self.turn.terminal is not None and self._done_sent is False:
            self._done_sent = True
            frames += self._done()
        return frames

    def _reject(self, diagnostic: Diagnostic, lines: list[bytes], heads: list[bytes]) -> None:
        """Record a rejected line; in strict mode it also ends the turn there."""
        turn = self.turn
        turn.record(diagnostic)
        if self.strict and turn.terminal is None:
            head, line = self._synthesize_error("protocol_error", str(diagnostic), diagnostic.line)
            lines.append(line)
            heads.append(head)

    def _synthesize_error(self, code: str, message: str, line: int) -> tuple[bytes, bytes]:
        turn = self.turn
        error = Error(code=code, message=message)
        turn.terminal = error
        turn.terminal_line = line
        turn.synthesized = True
        self._diagnostics_at_terminal = turn.diagnostic_count
        head = self._frame_heads[Error]
        assert head is not None
        return head, encode_line(error)[:-1]

    def _frame(self, head: bytes, data: bytes) -> bytes:
        self._seq += 1
        return b"id: %d\n%b%b\n" % (self._seq, head, data_fields(data))

    def _done(self) -> bytes:
        if self.mode == "ndjson":
            return b""
        turn = self.turn
        kind = "result" if turn.result is not None else "error"
        payload = b'{"terminal":"%s","diagnostics":%d}' % (
            kind.encode(),
            self._diagnostics_at_terminal,
        )
        return self._frame(event_field("done"), payload)
