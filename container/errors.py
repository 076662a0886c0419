"""Exceptions that end a container run, each with the envelope ``error`` code it maps to.

A :class:`ContainerError` raised anywhere in the run becomes the run's single terminal
line ``{"type": "error", "code": <code>, "message": <message>}`` and a non-zero exit.
Failures of one tool call are *not* exceptions: they become a failed ``step`` and the
agent loop goes on; so does a failed writeback (:class:`WritebackError`, caught there).
"""

from __future__ import annotations

from typing import ClassVar

from sandstream.core import SandstreamError

__all__ = [
    "AgentError",
    "AttachmentsError",
    "BootstrapError",
    "ConfigError",
    "ContainerError",
    "DispatchError",
    "ModelError",
    "ModelTimeoutError",
    "OutputClosedError",
    "RuntimeExceededError",
    "SetupError",
    "SnapshotChangedError",
    "SnapshotError",
    "SnapshotRestoreError",
    "SnapshotTooLargeError",
    "UnauthorizedError",
    "WritebackError",
]


class ContainerError(SandstreamError):
    """A failure that ends the run with ``error{code, message}``.

    ``code`` defaults to the class's :attr:`default_code`; ``message`` is shown to users,
    so it says what went wrong and never carries secrets (tokens, keys).
    """

    default_code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code


class DispatchError(ContainerError):
    """The dispatch JSON is missing, unreadable or invalid (``bad_dispatch``)."""

    default_code = "bad_dispatch"


class BootstrapError(ContainerError):
    """``/env`` or ``/config`` could not be fetched or decoded (``bootstrap_failed``)."""

    default_code = "bootstrap_failed"


class UnauthorizedError(BootstrapError):
    """The workspace refused a one-time token: wrong, expired or replayed (``unauthorized``)."""

    default_code = "unauthorized"


class AttachmentsError(ContainerError):
    """The turn's attachments could not be downloaded into the work dir
    (``attachments_failed``): refused, unreachable, over a bound, or not as announced."""

    default_code = "attachments_failed"


class ConfigError(ContainerError):
    """The agent config is well-formed but unusable, e.g. an unknown skill (``bad_config``)."""

    default_code = "bad_config"


class SetupError(ContainerError):
    """The setup script failed, timed out or could not start (``setup_failed``)."""

    default_code = "setup_failed"


class ModelTimeoutError(ContainerError):
    """The model provider did not answer in time (``model_timeout``)."""

    default_code = "model_timeout"


class ModelError(ContainerError):
    """The model provider failed or answered something unusable (``model_error``)."""

    default_code = "model_error"


class AgentError(ContainerError):
    """The agent loop ended without a final message (``agent_failed`` unless given)."""

    default_code = "agent_failed"


class WritebackError(SandstreamError):
    """Produced files could not be written back to ``/results``. Not a
    :class:`ContainerError`: the writeback reports it as a failed ``write_back`` step
    and the run's answer stands."""


class SnapshotError(ContainerError):
    """A workspace snapshot could not be taken or restored (``snapshot_failed``), by
    :mod:`~sandstream.container.snapshots`: a file or folder it could not read or
    write. Taking one changes nothing on disk; a restore that raises one of these has
    left its roots as they were."""

    default_code = "snapshot_failed"


class SnapshotTooLargeError(SnapshotError):
    """The files to snapshot hold more bytes than allowed."""


class SnapshotChangedError(SnapshotError):
    """A file changed while it was read for a snapshot (hashed, or packed for upload)."""


class SnapshotRestoreError(SnapshotError):
    """A snapshot could not be restored: its manifest or blob pack was refused, a root
    was not an empty folder, or a write failed."""


class RuntimeExceededError(ContainerError):
    """The run hit its runtime cap (``runtime_exceeded``)."""

    default_code = "runtime_exceeded"


class OutputClosedError(ContainerError):
    """Stdout is closed (the reader went away); nothing more can be reported."""
