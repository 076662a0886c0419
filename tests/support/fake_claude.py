#!/usr/bin/env python3
"""A fake ``claude`` CLI: replays a recorded ``stream-json`` transcript on stdout.

Invoked like the real one in print mode, with its own options first::

    python fake_claude.py --transcript T.jsonl [--record R.json] \\
        -p --output-format stream-json --verbose [--model M] [...]

It checks the print-mode flags the container must pass (``-p``, ``--output-format
stream-json``, ``--verbose``; exit 2 otherwise, as the real CLI refuses stream-json
without ``--verbose``), reads the prompt from stdin, optionally records
``{argv, prompt, cwd, env}`` as JSON to ``--record``, then prints the transcript
line by line, flushing each. A line that is an object with a ``"_fake"`` key is a
directive instead of output:

- ``{"_fake": {"stderr": "text"}}`` — print text on stderr;
- ``{"_fake": {"exit": 3}}`` — exit now with that status;
- ``{"_fake": {"raw": "text"}}`` — print text verbatim (e.g. not JSON);
- ``{"_fake": {"write": {"path": "output/a.md", "content": "..."}}}`` — create a
  file relative to the cwd (the run's work dir), like a Write tool would;
- ``{"_fake": {"pidfile": "name"}}`` — start a grandchild ``sleep`` in the same
  process group and write ``"<own pid> <grandchild pid>"`` to that file in the cwd;
- ``{"_fake": {"sleep": 0.1}}`` / ``{"_fake": {"hang": true}}`` — pause / block forever.

Only the standard library is used, so any Python can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve()
"""This script's path, for building the ``command`` of a claude-code agent config."""


def command(
    transcript: str | os.PathLike[str], record: str | os.PathLike[str] | None = None
) -> list[str]:
    """The ``command`` for a ``claude-code`` agent config that runs this fake."""
    argv = [sys.executable, str(PATH), "--transcript", os.fspath(transcript)]
    if record is not None:
        argv += ["--record", os.fspath(record)]
    return argv


def _directive(spec: dict[str, Any]) -> None:
    if "stderr" in spec:
        sys.stderr.write(str(spec["stderr"]) + "\n")
        sys.stderr.flush()
    if "raw" in spec:
        sys.stdout.write(str(spec["raw"]) + "\n")
        sys.stdout.flush()
    if "write" in spec:
        target = Path(spec["write"]["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(spec["write"]["content"], encoding="utf-8")
    if "pidfile" in spec:
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
        Path(spec["pidfile"]).write_text(f"{os.getpid()} {child.pid}")
    if "sleep" in spec:
        time.sleep(float(spec["sleep"]))
    if spec.get("hang"):
        while True:
            time.sleep(3600)
    if "exit" in spec:
        sys.stdout.flush()
        raise SystemExit(int(spec["exit"]))


def main() -> int:
    parser = argparse.ArgumentParser(prog="fake-claude")
    parser.add_argument("--transcript", required=True)
    parser.add_argument("--record")
    parser.add_argument("-p", "--print", action="store_true", dest="print_mode")
    parser.add_argument("--output-format")
    parser.add_argument("--verbose", action="store_true")
    args, rest = parser.parse_known_args()
    if not args.print_mode:
        print("fake-claude: only print mode (-p) is supported", file=sys.stderr)
        return 2
    if args.output_format != "stream-json" or not args.verbose:
        print(
            "Error: When using --print, --output-format=stream-json requires --verbose",
            file=sys.stderr,
        )
        return 2
    prompt = sys.stdin.read()
    if args.record:
        Path(args.record).write_text(
            json.dumps(
                {
                    "argv": sys.argv[1:],
                    "rest": rest,
                    "prompt": prompt,
                    "cwd": os.getcwd(),
                    "env": dict(os.environ),
                }
            )
        )
    with open(args.transcript, encoding="utf-8") as transcript:
        for line in transcript:
            stripped = line.strip()
            if stripped.startswith("{") and '"_fake"' in stripped:
                obj = json.loads(stripped)
                if isinstance(obj, dict) and "_fake" in obj:
                    _directive(obj["_fake"])
                    continue
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
