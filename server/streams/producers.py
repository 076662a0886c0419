"""Idempotent producers: the epoch and sequence rules of one ``(stream, producer)``
(sans-IO).

:func:`check` says what an append stamped ``(epoch, seq)`` is, given the producer's
state: new data (:class:`Accept`), a retry of data already stored (:class:`Duplicate`),
or refused (raises :class:`StaleProducerEpochError`, :class:`ProducerSequenceGapError`,
or :class:`InvalidStreamRequestError` for a new epoch not starting at 0). Nothing here
changes state: the caller stores the accepted append and then its :class:`Accept.state`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidStreamRequestError, ProducerSequenceGapError, StaleProducerEpochError

__all__ = ["Accept", "Duplicate", "ProducerState", "check"]


@dataclass(frozen=True, slots=True)
class ProducerState:
    """The newest epoch a producer wrote with and its last accepted seq in it."""

    epoch: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class Accept:
    """New data: store it, then ``state``."""

    state: ProducerState


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Already stored: answer success without storing; ``last_seq`` is the highest
    accepted."""

    last_seq: int


def check(state: ProducerState | None, epoch: int, seq: int) -> Accept | Duplicate:
    """The verdict on an append stamped ``(epoch, seq)`` (see the module docstring)."""
    if state is None:
        if seq != 0:
            raise ProducerSequenceGapError(0, seq)
        return Accept(ProducerState(epoch, 0))
    if epoch < state.epoch:
        raise StaleProducerEpochError(state.epoch)
    if epoch > state.epoch:
        if seq != 0:
            raise InvalidStreamRequestError("a new producer epoch must start at seq 0")
        return Accept(ProducerState(epoch, 0))
    if seq <= state.last_seq:
        return Duplicate(state.last_seq)
    if seq == state.last_seq + 1:
        return Accept(ProducerState(epoch, seq))
    raise ProducerSequenceGapError(state.last_seq + 1, seq)
