"""Durable Streams servers measured side by side: sandstream's against the protocol's
Node reference server (``.venv/bin/python -m benchmarks.streams``, see ``__main__``)."""
