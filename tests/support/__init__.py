"""Shared test servers and helpers for the container, runner and chat backend tests.

The servers and clients the benchmarks drive too (the stand-in workspace API, serving
an app on loopback, the session readers, ``redis-server``) are in
:mod:`benchmarks.support`; the tests import them from there.

- :mod:`.model_server` — a scriptable OpenAI-compatible Chat Completions server;
- :mod:`.fake_claude` — a fake ``claude`` CLI replaying ``transcripts/*.jsonl``;
- :mod:`.container` — run the container as a subprocess, validate its stdout;
- :mod:`.processes` — find processes by an environment marker, even orphaned, and kill them.
- :mod:`.push_services` — a loopback Web Push service, and the browsers subscribed to it.
- :mod:`.apns_fcm_services` — loopback APNs (HTTP/2, TLS) and FCM (OAuth) services.
"""

from __future__ import annotations

from pathlib import Path

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
"""Recorded Claude Code ``stream-json`` transcripts for :mod:`.fake_claude`."""
