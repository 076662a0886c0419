"""The real servers and clients the benchmarks drive, which the tests drive too.

- :mod:`.workspace` — the stand-in workspace API (``/env``, ``/config``, ``/results``)
  with single-use, expiring, hashed tokens; also runnable
  (``.venv/bin/python -m benchmarks.support.workspace``) to try the container by hand;
- :mod:`.servers` — serve any Quart-Trio app on ``127.0.0.1:0`` in a nursery, and an
  HTTP/1.1-only httpx client;
- :mod:`.session_client` — read a durable session over SSE, NDJSON or the WebSocket,
  stopping at any byte and resuming from its cursor;
- :mod:`.redis_server` — a real ``redis-server`` on a free loopback port;
- :mod:`.reference_server` — the Node reference server of Durable Streams
  (``@durable-streams/server``, from tests/node's npm packages) on a free loopback port;
- :mod:`.mover_process` — one ``LogMover`` in a process of its own (to be SIGKILLed);
- :mod:`.namespaces` — the live processes of a PID namespace (a bwrap sandbox's);
- :mod:`.model_server` — a stand-in model provider for the real agent programs,
  speaking Anthropic Messages, OpenAI Chat Completions and Responses, and Gemini
  streaming (the wire formats in :mod:`.model_wire`), scripted to call the agent's
  shell tool and then answer in text chunks.

The tests import them from here (``tests/`` may use ``benchmarks/``; ``benchmarks/``
never imports ``tests/``, which ``tests/test_layers.py`` checks).
"""
