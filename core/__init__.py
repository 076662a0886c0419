"""sandstream's sans-IO core: NDJSON from agent sandboxes folded into steps and SSE.

Pure functions and state machines over bytes; no sockets, threads, async runtime or
clock. Depends on msgspec alone.
"""

from .envelope import (
    LIVE_EXTENSION,
    Delta,
    Envelope,
    Error,
    Log,
    LogLevel,
    Permission,
    Result,
    Step,
    StepStatus,
    encode_line,
)
from .errors import (
    ProcessorClosedError,
    SandstreamError,
    SplitterClosedError,
    SSEParseError,
    UIMessageStreamError,
)
from .persistence import PersistedMessage, assistant_message, replay_window, user_message
from .processor import Mode, StreamProcessor
from .schemas import ChatTurn
from .splitter import DEFAULT_MAX_LINE_BYTES, NDJSONSplitter
from .sse import PING, format_comment, format_event
from .sse_parser import ServerSentEvent, SSEParser
from .turn import (
    DEFAULT_MAX_STEP_BYTES,
    DEFAULT_MAX_STEPS,
    Diagnostic,
    DiagnosticCode,
    MessagePart,
    PermissionRow,
    StepRow,
    Turn,
    decode_payload,
)
from .ui_message_stream import UI_MESSAGE_STREAM_HEADERS, UIMessageStream

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_STEP_BYTES",
    "LIVE_EXTENSION",
    "PING",
    "UI_MESSAGE_STREAM_HEADERS",
    "ChatTurn",
    "Delta",
    "Diagnostic",
    "DiagnosticCode",
    "Envelope",
    "Error",
    "Log",
    "LogLevel",
    "MessagePart",
    "Mode",
    "NDJSONSplitter",
    "Permission",
    "PermissionRow",
    "PersistedMessage",
    "ProcessorClosedError",
    "Result",
    "SSEParseError",
    "SSEParser",
    "SandstreamError",
    "ServerSentEvent",
    "SplitterClosedError",
    "Step",
    "StepRow",
    "StepStatus",
    "StreamProcessor",
    "Turn",
    "UIMessageStream",
    "UIMessageStreamError",
    "assistant_message",
    "decode_payload",
    "encode_line",
    "format_comment",
    "format_event",
    "replay_window",
    "user_message",
]
