"""The core's command line, run as a real subprocess; the commands packages plug in."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandstream.core.sse_parser import SSEParser
from sandstream.core.turn import DEFAULT_MAX_DIAGNOSTICS
from tests.core.helpers import line, step

SANDSTREAM = [sys.executable, "-m", "sandstream.core.cli"]
SCRIPT = str(Path(sys.executable).parent / "sandstream")
"""The installed ``sandstream`` script: it finds commands through installed metadata."""
CHECKOUT = Path(__file__).resolve().parents[2]
needs_the_extras = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("trio", "httpx", "quart_trio")),
    reason="a core-only install (its listing is tests/core/test_isolation.py's)",
)
"""For the tests of the commands the server and container extras add."""
TURN = step("s", "running") + b"oops\n" + step("s", "succeeded") + line(type="result", message="hi")


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SANDSTREAM, *args], input=stdin, capture_output=True, timeout=60)


def test_convert_writes_sse_frames() -> None:
    done = _run("convert", stdin=TURN)
    assert done.returncode == 0
    events = SSEParser().feed(done.stdout)
    assert [e.event for e in events] == ["step", "step", "result", "done"]


def test_convert_ndjson_mode_forwards_only_valid_lines_and_a_terminal() -> None:
    done = _run("convert", "--mode", "ndjson", stdin=step("s", "running") + b"junk\n")
    assert done.returncode == 1
    lines = [json.loads(raw) for raw in done.stdout.splitlines()]
    assert [entry["type"] for entry in lines] == ["step", "error"]
    assert lines[-1]["code"] == "upstream_closed"


def test_convert_strict_ends_at_the_first_bad_line() -> None:
    done = _run("convert", "--mode", "ndjson", "--strict", stdin=TURN)
    lines = [json.loads(raw) for raw in done.stdout.splitlines()]
    assert lines[-1]["code"] == "protocol_error"
    assert len(lines) == 2


LIVE_TURN = (
    line(type="delta", id="m1", kind="text", text="Hel")
    + line(type="delta", id="m1", kind="text", text="lo")
    + line(type="result", message="Hello")
)


def test_live_lines_are_violations_unless_live_is_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "live.ndjson"
    path.write_bytes(LIVE_TURN)
    strict_reader = _run("validate", str(path))
    assert strict_reader.returncode == 1
    assert "line 1: invalid_line" in strict_reader.stdout.decode()
    assert _run("validate", "--live", str(path)).returncode == 0
    done = _run("convert", "--live", stdin=LIVE_TURN)
    events = SSEParser().feed(done.stdout)
    assert [e.event for e in events] == ["delta", "delta", "result", "done"]


def test_validate_reports_each_violation_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.ndjson"
    path.write_bytes(TURN)
    done = _run("validate", str(path))
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "4 lines, 1 step (1 succeeded)" in out
    assert "line 2: invalid_json" in out
    assert "terminal: result at line 4" in out


def test_validate_accepts_a_clean_run_and_flags_a_missing_terminal(tmp_path: Path) -> None:
    clean = tmp_path / "clean.ndjson"
    clean.write_bytes(step("s", "succeeded") + line(type="result", message="ok"))
    assert _run("validate", str(clean)).returncode == 0
    open_ended = tmp_path / "open.ndjson"
    open_ended.write_bytes(step("s", "running"))
    done = _run("validate", str(open_ended))
    assert done.returncode == 1
    assert "no terminal" in done.stdout.decode()


def test_validate_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    done = _run("validate", str(tmp_path / "nope.ndjson"))
    assert done.returncode == 2
    assert "No such file" in done.stderr.decode()


def test_bad_arguments_exit_2() -> None:
    assert _run("convert", "--mode", "xml").returncode == 2
    assert _run("convert", "--max-line-bytes", "0").returncode == 2


def test_convert_reports_each_bad_line_on_stderr() -> None:
    done = _run("convert", stdin=TURN + b"\xff\n")
    assert done.returncode == 0  # the turn still ended with its result
    assert [e.event for e in SSEParser().feed(done.stdout)] == ["step", "step", "result", "done"]
    report = done.stderr.decode().splitlines()
    assert [line.split(":")[:3] for line in report] == [
        ["sandstream convert", " line 2", " invalid_json"],
        ["sandstream convert", " line 5", " after_terminal"],
    ]


def test_convert_counts_the_bad_lines_past_the_kept_ones() -> None:
    done = _run("convert", "--mode", "ndjson", stdin=b"junk\n" * (DEFAULT_MAX_DIAGNOSTICS + 7))
    report = done.stderr.decode().splitlines()
    assert len(report) == DEFAULT_MAX_DIAGNOSTICS + 1
    assert report[-1] == "sandstream convert: ... and 7 more bad line(s)"


@pytest.mark.parametrize("command", ["validate", "convert"])
def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path, command: str) -> None:
    path = tmp_path / "run.ndjson"
    path.write_bytes(b"junk\n" * 50_000 + TURN)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, as `| head -0`
    try:
        args = [str(path)] if command == "validate" else []
        with path.open("rb") as stdin:
            done = subprocess.run(
                [*SANDSTREAM, command, *args],
                stdin=stdin,
                stdout=write_end,
                stderr=subprocess.PIPE,
                timeout=60,
            )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr.decode()
    assert "Broken pipe" not in done.stderr.decode()
    assert done.returncode == 128 + signal.SIGPIPE


# -- commands plugged in through the sandstream.commands entry points ---------------------


def test_the_core_names_neither_the_server_nor_the_container() -> None:
    for path in sorted((CHECKOUT / "core").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for package in ("sandstream.server", "sandstream.container"):
            assert package not in source, f"{path.relative_to(CHECKOUT)} names {package}"


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose ``PYTHONPATH`` holds a distribution adding five commands:
    ``hello`` (its module is there), ``absent`` (its module is not, and its extra
    requires a distribution that is not installed), ``broken`` (its extra's requirement
    is installed, but its module imports one that is not), ``flood`` (writes until
    stdout fails) and ``convert`` (ignored: the core's own)."""
    root = tmp_path_factory.mktemp("plugins")
    info = root / "sandstream_fake-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sandstream-fake\nVersion: 0\n"
        'Requires-Dist: sandstream-fake-dependency>=1; extra == "fake"\n'
        'Requires-Dist: msgspec; extra == "present"\n'
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [sandstream.commands]
            hello = sandstream_fake_hello:main [fake]
            absent = sandstream_fake_absent:main [fake]
            broken = sandstream_fake_broken:main [present]
            flood = sandstream_fake_hello:flood
            convert = sandstream_fake_hello:main
            """
        )
    )
    (root / "sandstream_fake_hello.py").write_text(
        textwrap.dedent(
            """\
            HELP = "greet the arguments"

            def main(argv):
                print("hello", *argv)
                return 3

            def flood(argv):
                while True:
                    print("x" * 1000)
            """
        )
    )
    (root / "sandstream_fake_broken.py").write_text("import sandstream_fake_nowhere\n")
    return dict(os.environ, PYTHONPATH=str(root), COLUMNS="200")


def _script(
    env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], input=stdin.decode(), env=env, capture_output=True, text=True, timeout=60
    )


def test_a_plugged_command_gets_its_arguments_and_gives_its_status(
    plugins: dict[str, str],
) -> None:
    done = _script(plugins, "hello", "a", "--b")
    assert (done.returncode, done.stdout, done.stderr) == (3, "hello a --b\n", "")
    # A plugged command of the core's own name changes nothing.
    converted = _script(plugins, "convert", stdin=TURN)
    assert converted.returncode == 0 and converted.stdout.startswith("id: ")


def test_a_command_whose_module_is_missing_names_its_extra_in_one_line(
    plugins: dict[str, str],
) -> None:
    done = _script(plugins, "absent", "--help")
    assert done.returncode == 2
    assert done.stdout == ""
    [message] = done.stderr.splitlines()
    assert message.startswith("sandstream absent: needs the 'fake' extra")
    assert "No module named 'sandstream_fake_absent'" in message
    assert "sandstream-fake-dependency not installed" in message
    assert "pip install '/path/to/sandstream[fake]'" in message


def test_a_command_whose_extra_is_installed_says_its_real_import_failure(
    plugins: dict[str, str],
) -> None:
    done = _script(plugins, "broken")
    assert done.returncode == 2
    [message] = done.stderr.splitlines()
    assert message == (
        "sandstream broken: cannot be loaded: "
        "ModuleNotFoundError: No module named 'sandstream_fake_nowhere'"
    )
    listing = " ".join(_script(plugins, "--help").stdout.split())
    assert "broken cannot be loaded (No module named 'sandstream_fake_nowhere')" in listing


@needs_the_extras
def test_help_lists_every_command_with_its_line(plugins: dict[str, str]) -> None:
    from sandstream.container.cli import HELP as CONTAINER_HELP
    from sandstream.server.cli.runner import HELP as RUNNER_HELP
    from sandstream.server.cli.serve import HELP as SERVE_HELP

    done = _script(plugins, "--help")
    assert done.returncode == 0, done.stderr
    listing = " ".join(done.stdout.split())
    for expected in (
        "convert stdin NDJSON -> stdout SSE",
        "validate check an NDJSON run",
        f"container {CONTAINER_HELP} (needs sandstream[container])",
        f"runner {RUNNER_HELP} (needs sandstream[server])",
        f"serve {SERVE_HELP} (needs sandstream[server])",
        "hello greet the arguments (needs sandstream[fake])",
        "absent not installed: needs sandstream[fake]",
    ):
        assert expected in listing


@pytest.mark.slow
@needs_the_extras
@pytest.mark.parametrize("command", ["container", "runner", "serve"])
def test_each_extra_command_answers_help_through_the_script(command: str) -> None:
    done = subprocess.run([SCRIPT, command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: sandstream {command} ")


def test_a_plugged_command_whose_reader_leaves_ends_quietly(plugins: dict[str, str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [SCRIPT, "flood"], stdout=write_end, stderr=subprocess.PIPE, env=plugins, timeout=60
        )
    finally:
        os.close(write_end)
    assert b"Traceback" not in done.stderr and b"Broken pipe" not in done.stderr
    assert done.returncode == 128 + signal.SIGPIPE
