"""Workspace snapshots: a chat's workspace saved and restored by the container's code
against tar, and the bytes the chat store keeps per turn.

Run ``.venv/bin/python -m benchmarks.snapshots.run --help``.
"""
