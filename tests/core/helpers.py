"""Small builders shared by the core tests."""

from __future__ import annotations

import json
from typing import Any

from sandstream.core import StreamProcessor
from sandstream.core.sse_parser import ServerSentEvent, SSEParser


def line(**fields: Any) -> bytes:
    """One NDJSON line (with its newline) from keyword fields."""
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def step(id: str, status: str, name: str = "files/read", **extra: Any) -> bytes:
    return line(type="step", id=id, name=name, status=status, **extra)


def run(data: bytes, mode: str = "sse", **options: Any) -> tuple[bytes, StreamProcessor]:
    """Feed ``data`` in one chunk, close, and return (output, processor)."""
    proc = StreamProcessor(mode, **options)  # type: ignore[arg-type]
    out = proc.feed(data) + proc.close()
    return out, proc


def events(sse: bytes) -> list[ServerSentEvent]:
    parser = SSEParser()
    return parser.feed(sse) + parser.close()
