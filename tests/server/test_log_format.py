"""The log's one format (``sandstream.server.cli.logs``) and the flags that choose it and
the metrics' address: every record one JSON line or one text line, whatever its fields;
a bad value a usage error."""

from __future__ import annotations

import argparse
import io
import logging
from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandstream.server.cli.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    parse_log_format,
    record_fields,
)
from sandstream.server.cli.options import host_port
from sandstream.server.http.metrics import route_template
from sandstream.server.runner.access_log import ACCESS_LOGGER

FIELD = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
    lambda name: name not in vars(logging.makeLogRecord({}))
)
VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The process's logging as it was before the test configured it."""
    root, access = logging.getLogger(), logging.getLogger(ACCESS_LOGGER)
    handlers, level, access_level = root.handlers[:], root.level, access.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    access.setLevel(access_level)
    logging.captureWarnings(False)


def record(message: str, fields: dict[str, object]) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "sandstream.test", "levelno": 20, "levelname": "INFO", "msg": message, **fields}
    )


@given(st.text(max_size=80), st.dictionaries(FIELD, VALUE, max_size=5))
def test_every_record_is_one_json_line_with_its_fields(
    message: str, fields: dict[str, object]
) -> None:
    line = JsonFormatter().format(record(message, fields))
    assert "\n" not in line
    decoded = msgspec.json.decode(line)
    assert decoded["message"] == message
    assert (decoded["level"], decoded["logger"]) == ("info", "sandstream.test")
    assert decoded["ts"].endswith("Z")
    for name, value in fields.items():
        if name not in ("ts", "level", "logger", "message"):
            assert decoded[name] == value


@given(st.text(max_size=80), st.dictionaries(FIELD, VALUE, max_size=5))
def test_a_text_line_ends_with_its_fields(message: str, fields: dict[str, object]) -> None:
    logged = record(message, fields)
    line = TextFormatter().format(logged)
    assert f" INFO sandstream.test: {message}" in line
    assert record_fields(logged) == fields
    for name in fields:
        assert f" {name}=" in line


@pytest.mark.usefixtures("restored_logging")
def test_an_exception_is_one_field_of_its_line() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("sandstream.test").exception("failed", extra={"turn_id": "t1"})
    (line,) = stream.getvalue().splitlines()
    decoded = msgspec.json.decode(line)
    assert (decoded["message"], decoded["turn_id"], decoded["level"]) == ("failed", "t1", "error")
    assert "ValueError: boom" in decoded["exception"]


@pytest.mark.usefixtures("restored_logging")
def test_auto_is_text_on_a_terminal_and_json_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, expected in ((Terminal(), TextFormatter), (io.StringIO(), JsonFormatter)):
        handler = configure_logging("info", "auto", stream)
        assert isinstance(handler.formatter, expected)


@given(st.text(max_size=20))
def test_a_log_format_is_one_of_three_or_a_value_error(text: str) -> None:
    try:
        chosen = parse_log_format(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert chosen == text.strip().lower()


@given(st.text(max_size=30))
def test_a_metrics_address_is_host_and_port_or_a_usage_error(text: str) -> None:
    try:
        host, port = host_port(text)
    except argparse.ArgumentTypeError:
        return
    assert host and 0 <= port <= 65535
    assert text.endswith(str(port))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9100", ("127.0.0.1", 9100)), ("[::1]:0", ("::1", 0)), ("a:1", ("a", 1))],
)
def test_metrics_addresses(text: str, expected: tuple[str, int]) -> None:
    assert host_port(text) == expected


@given(st.lists(st.sampled_from(["sessions", "<session_id>", "<int:n>", "ws", "x"]), max_size=5))
def test_a_route_label_has_no_placeholder_left(parts: list[str]) -> None:
    label = route_template("/" + "/".join(parts))
    assert "<" not in label and ">" not in label
    assert label.count("{") == sum(part.startswith("<") for part in parts)
