"""The servers' log: every record in one format on stderr, JSON lines or text.

:func:`configure_logging` sends every logger (the server's, the access log's turn
records, Hypercorn's error log, Python's warnings) to one stderr handler. ``json``
writes each record as one line of JSON: ``ts`` (UTC, ISO 8601), ``level``,
``logger``, ``message``, then the structured fields the record was logged with
(``extra=``, such as a turn record's ``turn_id``, ``outcome``, ``duration_ms``), and
``exception`` with its traceback. ``text`` writes the same as a readable line, the
fields as ``key=value``. ``auto`` (the default) is ``text`` when stderr is a terminal,
else ``json``. A value that cannot be encoded as JSON is written as its ``str``.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Final, Literal, TextIO, TypeAlias

import msgspec

from sandstream.server.runner import ACCESS_LOGGER

__all__ = [
    "LOG_FORMATS",
    "LOG_FORMAT_ENV",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "configure_logging",
    "parse_log_format",
    "record_fields",
]

LogFormat: TypeAlias = Literal["auto", "json", "text"]
LOG_FORMATS: Final[tuple[LogFormat, ...]] = ("auto", "json", "text")
LOG_FORMAT_ENV: Final = "SANDSTREAM_LOG_FORMAT"

_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
"""The attributes every :class:`logging.LogRecord` has: what is not one is a field."""
_ENCODER: Final = msgspec.json.Encoder(enc_hook=str)


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields ``record`` was logged with (its ``extra=``)."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return _ENCODER.encode(line).decode()


class TextFormatter(logging.Formatter):
    """A record as a readable line: time, level, logger, message, ``key=value`` fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        text = super().formatMessage(record)
        return text + "".join(f" {key}={_text_value(value)}" for key, value in fields.items())


def _text_value(value: object) -> str:
    """A string as it is unless it needs quotes; anything else as JSON."""
    if isinstance(value, str) and value and not any(c in value for c in ' "='):
        return value
    return _ENCODER.encode(value).decode()


def parse_log_format(text: str) -> LogFormat:
    """``auto``, ``json`` or ``text`` (any case); :class:`ValueError` otherwise."""
    value = text.strip().lower()
    for known in LOG_FORMATS:
        if value == known:
            return known
    raise ValueError(f"not a log format: {text!r} (auto, json or text)")


def configure_logging(
    level: str, log_format: LogFormat = "auto", stream: TextIO | None = None
) -> logging.Handler:
    """Log records at ``level`` and up, and every turn record, to ``stream`` (stderr)
    in ``log_format``; return the handler. Replaces the handlers installed before."""
    out = stream or sys.stderr
    if log_format == "auto":
        log_format = "text" if out.isatty() else "json"
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)  # whatever --log-level says
    logging.captureWarnings(True)
    return handler
