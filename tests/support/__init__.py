"""Shared test servers and helpers for the container, runner and chat backend tests.

- :mod:`.workspace` — the workspace callback API (``/env``, ``/config``,
  ``/results``) with single-use, expiring, hashed tokens;
- :mod:`.model_server` — a scriptable OpenAI-compatible Chat Completions server;
- :mod:`.fake_claude` — a fake ``claude`` CLI replaying ``transcripts/*.jsonl``;
- :mod:`.container` — run the container as a subprocess, validate its stdout;
- :mod:`.servers` — serve any Quart-Trio app on ``127.0.0.1:0`` in a nursery.
- :mod:`.processes` — find processes by an environment marker, even orphaned, and kill them.
"""

from __future__ import annotations

from pathlib import Path

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
"""Recorded Claude Code ``stream-json`` transcripts for :mod:`.fake_claude`."""
