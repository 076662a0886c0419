"""One stream's own log on disk: segment files of whole records, in a directory.

A segment is named after the log position of its first byte (``<position>.seg``, 20
digits), holds whole records (:mod:`.records`) and is appended to until it reaches the
segment size; the next record then starts a new one. Everything here blocks: it runs in
worker threads, never on the event loop. One thread writes a log at a time (the
committer's); readers may read what was written concurrently.

At open, :meth:`SegmentLog.recover` scans the last segment from the last checkpoint to
its end and truncates a torn last record. A write the disk refuses (or a sync, through
:meth:`SegmentLog.cut_back`) is cut back to the end before it, so the log holds only
whole records it reported written; one that cannot be cut back leaves the log
:attr:`~SegmentLog.broken` (recovery at the next start cuts it). The append file is
open only between :meth:`~SegmentLog.write` and :meth:`~SegmentLog.close`; a read opens
its segment for itself. A read from a position that is not a record boundary raises
:class:`InvalidStreamRequestError`; one below the first segment,
:class:`StreamGoneError`. :class:`OSError` propagates.
"""

from __future__ import annotations

import bisect
import os
import shutil
from pathlib import Path
from typing import Final

from .errors import InvalidStreamRequestError, StreamGoneError
from .records import HEADER, Record, scan

__all__ = ["DEFAULT_SEGMENT_BYTES", "SegmentLog", "fsync_directory"]

DEFAULT_SEGMENT_BYTES: Final = 64 * 1024 * 1024
_SUFFIX: Final = ".seg"
_HEADER_LENGTH: Final = 4


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` (files created or removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_name(base: int) -> str:
    return f"{base:020d}{_SUFFIX}"


class SegmentLog:
    """The segment files of one stream's own log, from position ``base`` on.

    ``end``: the position after the last whole record written.
    """

    def __init__(self, directory: Path, bases: list[int], end: int, segment_bytes: int) -> None:
        self.directory = directory
        self._bases = bases
        self.end = end
        self._segment_bytes = segment_bytes
        self._fd: int | None = None
        self._needs_directory_sync = False
        self.broken: OSError | None = None
        """Why the log could not be cut back after a failed write: it takes no more."""

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base: int, segment_bytes: int) -> SegmentLog:
        """A new, empty log at ``directory`` (made, with its parent entry synced)."""
        directory.mkdir(parents=True, exist_ok=False)
        fsync_directory(directory.parent)
        return cls(directory, [], base, segment_bytes)

    @classmethod
    def recover(
        cls, directory: Path, base: int, checkpoint: int, segment_bytes: int
    ) -> tuple[SegmentLog, list[Record]]:
        """Open the log at ``directory`` after a restart: the records after
        ``checkpoint`` (a position known whole), to replay; a torn tail is cut off."""
        directory.mkdir(parents=True, exist_ok=True)
        bases = sorted(
            int(entry.name[: -len(_SUFFIX)])
            for entry in directory.iterdir()
            if entry.name.endswith(_SUFFIX) and entry.name[: -len(_SUFFIX)].isdigit()
        )
        if not bases:
            return cls(directory, [], base, segment_bytes), []
        last = bases[-1]
        path = directory / _segment_name(last)
        start = max(checkpoint, last)
        with open(path, "r+b") as file:
            file.seek(start - last)
            records = list(scan(file.read(), start))
            end = records[-1].end if records else start
            if file.seek(0, os.SEEK_END) != end - last:
                file.truncate(end - last)
                os.fdatasync(file.fileno())
        return cls(directory, bases, end, segment_bytes), records

    # -- writing -------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Append whole records ``data`` (not yet durable: see :meth:`sync`). Raises
        the :class:`OSError` of a write the disk refused, the log cut back first."""
        end = self.end
        fd = self._append_fd()
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError:
            self.cut_back(end)
            raise
        self.end += len(data)

    def cut_back(self, end: int) -> None:
        """Drop what was written after ``end`` (in the last segment): a write or its
        sync failed. A log that cannot be cut back is :attr:`broken`."""
        self.end = end
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, end - self._bases[-1])
        except OSError as error:
            self.broken = error

    def _current_size(self) -> int:
        return self.end - self._bases[-1]

    def _append_fd(self) -> int:
        """The file the next record goes to: the last segment, or a new one once it is
        full (the full one synced and closed first)."""
        full = bool(self._bases) and self._current_size() >= self._segment_bytes
        if self._fd is not None and not full:
            return self._fd
        if self._fd is not None:
            os.fdatasync(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._bases and not full:
            self._fd = os.open(
                self.directory / _segment_name(self._bases[-1]), os.O_WRONLY | os.O_APPEND
            )
        else:
            path = self.directory / _segment_name(self.end)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._bases.append(self.end)
            self._needs_directory_sync = True
        return self._fd

    def sync(self) -> None:
        """Make everything written durable."""
        if self._fd is not None:
            os.fdatasync(self._fd)
        if self._needs_directory_sync:
            fsync_directory(self.directory)
            self._needs_directory_sync = False

    def close(self) -> None:
        """Close the file being appended to (reads go on working)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Close and delete the whole log."""
        self.close()
        self._needs_directory_sync = False
        shutil.rmtree(self.directory, ignore_errors=True)

    def drop_before(self, position: int) -> None:
        """Delete the segments that end at or below ``position`` (never the last)."""
        while len(self._bases) > 1 and self._bases[1] <= position:
            (self.directory / _segment_name(self._bases[0])).unlink(missing_ok=True)
            del self._bases[0]

    # -- reading -------------------------------------------------------------------

    @property
    def first(self) -> int | None:
        """The first position still stored (``None``: nothing written yet)."""
        return self._bases[0] if self._bases else None

    def read(self, start: int, end: int, max_bytes: int) -> list[Record]:
        """The whole records from ``start`` (a record boundary) on, before ``end``
        (another), at least one and about ``max_bytes`` of them, all in one segment."""
        bases = self._bases[:]
        index = bisect.bisect_right(bases, start) - 1
        if index < 0:
            raise StreamGoneError(f"position {start} is below the retained log")
        base = bases[index]
        limit = end if index + 1 == len(bases) else min(end, bases[index + 1])
        try:
            fd = os.open(self.directory / _segment_name(base), os.O_RDONLY)
        except FileNotFoundError:
            raise StreamGoneError(f"position {start} is below the retained log") from None
        try:
            data = os.pread(fd, min(limit - start, max(max_bytes, HEADER)), start - base)
            records = list(scan(data, start))
            if not records and len(data) >= _HEADER_LENGTH:
                length = int.from_bytes(data[:_HEADER_LENGTH], "little")
                whole = HEADER + length
                if start + whole <= limit:
                    records = list(scan(os.pread(fd, whole, start - base), start))
        finally:
            os.close(fd)
        if not records:
            raise InvalidStreamRequestError("not an offset of this stream")
        return records
