"""The README's examples, pasted in order into one shell on a fresh data dir: a turn
left with ^C after a few frames, its chat taken from what came, a second device, a
resume exactly after the last frame seen, then a follow-up stopped by the stop button.

The server is ``sandstream serve`` with its default agent (the paced demo) on a free
port instead of 8080; the shell runs in a temporary directory, as in a checkout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SCRIPT = str(Path(sys.executable).parent / "sandstream")
DEADLINE = 60.0


def _blocks() -> list[str]:
    """The ``sh`` blocks of "Run it" after the first (``.dev/serve``, ``.dev/test``)."""
    start = README.index("\n## Run it\n")
    section = README[start : README.index("\n## ", start + 1)]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)[1:]


@contextmanager
def _serve(cwd: Path) -> Iterator[str]:
    """``sandstream serve --port 0`` in ``cwd`` on its defaults; yields its URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDSTREAM_", "OPENAI_"))}
    process = subprocess.Popen(
        [SCRIPT, "serve", "--port", "0"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        for text in process.stdout:
            if match := re.search(r"listening on (http://\S+)", text):
                yield match.group(1)
                break
        else:
            raise AssertionError("sandstream serve ended before it listened")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(DEADLINE)


def _wait_for(path: Path, text: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never came into {path}"
        time.sleep(0.05)


def _paste(shell: subprocess.Popen[str], block: str, url: str) -> None:
    assert shell.stdin is not None
    shell.stdin.write(block.replace("http://127.0.0.1:8080", url) + "\n")
    shell.stdin.flush()


def test_the_readme_examples_work_pasted_in_order(tmp_path: Path) -> None:
    first, resume, stop = _blocks()
    with _serve(tmp_path) as url:
        # One interactive-like shell: its variables carry from block to block. The first
        # block runs as its own process group, so that ^C reaches only its pipeline.
        shell = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_as_a_terminal_would,
        )
        try:
            auth, pipeline = first.split("\n", 1)
            _paste(shell, auth, url)
            _paste(shell, f"set -m; {pipeline.strip()} & jobs -p > pipeline.pid; set +m", url)
            _wait_for(tmp_path / "turn.sse", "event: step")
            _wait_for(tmp_path / "pipeline.pid", "\n")
            os.killpg(int((tmp_path / "pipeline.pid").read_text()), signal.SIGINT)  # ^C
            # Each block's output into a file of its own, the blocks pasted as they are.
            _paste(shell, "wait; exec > resumed.out", url)
            _paste(shell, resume.strip() + "\nwait; echo resumed > resumed.done", url)
            _wait_for(tmp_path / "resumed.done", "resumed")
            _paste(shell, "exec > stopped.out", url)
            _paste(shell, stop.strip() + "\nwait; echo stopped > stopped.done", url)
            _wait_for(tmp_path / "stopped.done", "stopped")
        finally:
            assert shell.stdin is not None
            shell.stdin.close()
            shell.wait(DEADLINE)
    seen = _ids(tmp_path / "turn.sse")
    resumed = _ids(tmp_path / "resumed.out")
    second = _ids(tmp_path / "second.sse")
    assert "event: done" not in (tmp_path / "turn.sse").read_text()  # left mid-turn
    assert resumed and resumed[0] > seen[-1] and second[: len(seen)] == seen, (seen, resumed)
    assert second == seen + resumed  # exactly the frames after the last one seen
    assert "event: done" in (tmp_path / "resumed.out").read_text()
    stopped = msgspec.json.decode((tmp_path / "stopped.out").read_bytes())
    assert stopped["message"]["status"] == "interrupted", stopped


def _as_a_terminal_would() -> None:
    """In the shell's process: ^C with its default action, as a terminal's shell has it,
    whatever this test process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ids(path: Path) -> list[int]:
    return [int(n) for n in re.findall(r"^id: (\d+)$", path.read_text(), flags=re.MULTILINE)]
