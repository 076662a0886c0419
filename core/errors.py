"""Exceptions raised by the core when it is misused (never for bad stream input)."""

from __future__ import annotations

__all__ = ["ProcessorClosedError", "SandstreamError"]


class SandstreamError(Exception):
    """Base class of every exception sandstream raises on purpose."""


class ProcessorClosedError(SandstreamError, RuntimeError):
    """``feed()`` was called after the processor was closed, cancelled or failed."""
