"""The write-ahead log: every change to a server's index, appended and (by default) fsynced
before the change is applied and acknowledged -- the writer (:class:`LogWriter`) and its fsync
policies. The file format is :mod:`permindex.storage.wal_records`'s, recovery
:mod:`permindex.storage.wal_recovery`'s.

A log is a sequence of segment files in the data directory. Each change request becomes one
record, written with one ``write`` (and, under the default policy, one fsync) and replayed
together or not at all, so a batch is atomic across a crash as well. A snapshot records the
sequence number it contains (see :mod:`permindex.storage.snapshot`), and recovery replays the
records after it.

fsync policies (:data:`FSYNC_POLICIES`; in every one the record is written to the file -- the
operating system's page cache -- before the change is applied and acknowledged, so killing the
server process, even with SIGKILL, loses nothing that was acknowledged):

* ``always`` (default): one fdatasync per record, before the acknowledgement. A crash of the
  machine or a power loss loses nothing acknowledged (on a disk that honours flushes).
* ``interval``: a background thread fdatasyncs every ``fsync_interval`` seconds (default 0.1)
  when something was written. A machine crash loses at most the last interval of acknowledged
  writes (plus the time one fsync takes).
* ``never``: permindex never fsyncs the log on its own (only when a segment is sealed at a
  snapshot, and on a graceful stop); the kernel writes it back when it chooses (Linux: dirty
  pages older than 30 s by default). A machine crash loses the acknowledged writes not yet
  written back.

Failures: a record that cannot be written or fsynced (disk full, a file size limit, a read-only
or failing file system) raises :class:`~permindex.errors.StorageError`
(:class:`~permindex.errors.StorageFullError` for ENOSPC, EDQUOT and EFBIG) after the file has been
cut back to the end of the last good record, so a half-written record never stays in the log;
the caller applies nothing and the next append tries again. If even the cut fails, every append
refuses until it succeeds.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import threading
from pathlib import Path
from typing import Final, Literal

from permindex.errors import InvalidArgumentError, StorageError, StorageFullError
from permindex.storage.datadir import fsync_directory
from permindex.storage.wal_records import (
    HEADER_SIZE,
    Segment,
    list_segments,
    segment_header,
    segment_name,
)

__all__ = ["FSYNC_POLICIES", "FsyncPolicy", "LogWriter", "create_segment"]

log = logging.getLogger(__name__)

_tmp_counter = itertools.count()


#: When the write-ahead log is fsynced (what each can lose: the module docstring).
FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: Final[tuple[FsyncPolicy, ...]] = ("always", "interval", "never")


def _storage_error(error: OSError, what: str) -> StorageError:
    """The StorageError (StorageFullError for a full disk or a size limit) for ``error``."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    cls = StorageFullError if full else StorageError
    reason = error.strerror or str(error)
    hint = "free space" if full else "make it writable"
    message = (
        f"{what}: {reason} (errno {errno.errorcode.get(error.errno or 0, error.errno)}); "
        f"nothing was changed; writes resume once the data directory can be written ({hint})"
    )
    return cls(message, error.errno)


def create_segment(directory: Path, first_sequence: int) -> tuple[Segment, int]:
    """Create a segment durably (temporary file with its header, fsync, rename, directory
    fsync) and return it with a file descriptor open for writing, positioned after the header.

    Raises:
        StorageError: it could not be created; nothing is left behind.
    """
    final = directory / segment_name(first_sequence)
    temporary = directory / f".{final.name}.{os.getpid()}.{next(_tmp_counter)}.tmp"
    fd = -1
    try:
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, segment_header(first_sequence))
        os.fsync(fd)
        os.replace(temporary, final)
        fsync_directory(directory)
    except OSError as error:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise _storage_error(error, f"cannot create log segment {final}") from error
    return Segment(final, first_sequence), fd


class LogWriter:
    """Appends records to the newest segment of a data directory's log, with an fsync policy.

    Thread-safe: appends, rotations and syncs are serialized by an internal lock; under the
    ``interval`` policy a daemon thread fdatasyncs the file (holding only a separate lock, so
    appends do not wait for it).

    Args:
        directory: the data directory.
        segment: the segment to append to, and ``offset``, the end of its last good record;
            or None to create one starting at ``last_sequence + 1``.
        last_sequence: the sequence number of the last record logged (0: none yet).
        policy: ``always``, ``interval`` or ``never`` (see the module docstring).
        interval: seconds between background fsyncs under ``interval``.

    Raises (from the constructor):
        StorageError: the segment cannot be created or opened for writing.
    """

    def __init__(
        self,
        directory: Path,
        *,
        segment: Segment | None,
        offset: int,
        last_sequence: int,
        policy: FsyncPolicy = "always",
        interval: float = 0.1,
    ) -> None:
        if policy not in FSYNC_POLICIES:
            raise InvalidArgumentError(
                f"fsync policy {policy!r} is not one of {', '.join(FSYNC_POLICIES)}", policy
            )
        if policy == "interval" and not interval > 0:
            raise InvalidArgumentError(f"fsync interval must be > 0 seconds, got {interval}")
        self.directory = directory
        self.policy: FsyncPolicy = policy
        self.interval = interval
        self.last_sequence = last_sequence
        self._lock = threading.Lock()  # appends, rotation, close
        self._sync_lock = threading.Lock()  # the fd while a background fsync runs
        self._dirty = False  # written since the last fsync
        self._sync_failed: OSError | None = None
        self._cut_pending = False  # a failed append's bytes may still be past _offset
        self._closed = False
        if segment is None:
            segment, fd = create_segment(directory, last_sequence + 1)
            offset = HEADER_SIZE
        else:
            try:
                fd = os.open(segment.path, os.O_WRONLY)
            except OSError as error:
                raise _storage_error(error, f"cannot open log segment {segment.path}") from error
        self.segment = segment
        self._fd = fd
        self._offset = offset
        self._previous_offset = -1  # where the last record appended began (for retract)
        self._segment_records = (last_sequence + 1) - segment.first_sequence
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if policy == "interval":
            self._thread = threading.Thread(
                target=self._sync_periodically, name="permindex-wal-sync", daemon=True
            )
            self._thread.start()

    @property
    def offset(self) -> int:
        """End of the last good record in the current segment, bytes."""
        return self._offset

    def append(self, record: bytes, sequence: int) -> None:
        """Write ``record`` (from :func:`~permindex.storage.wal_records.encode_record`,
        numbered ``sequence``, which must be :attr:`last_sequence` + 1) at the end of the log
        (``os.pwrite`` until all is written), then fdatasync it under
        the ``always`` policy.

        Raises:
            StorageError: it could not be written or synced (StorageFullError: no space, or a
                file size limit); the file is cut back to the previous record, nothing is
                logged, :attr:`last_sequence` is unchanged.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the log is closed (the server is stopping)")
            if sequence != self.last_sequence + 1:
                raise ValueError(f"record {sequence} after {self.last_sequence}")
            if self._cut_pending:
                self._cut_back("cannot cut the log back after a failed write")
            start = self._offset
            try:
                written = 0
                view = memoryview(record)
                while written < len(record):
                    written += os.pwrite(self._fd, view[written:], start + written)
                if self.policy == "always" or self._sync_failed is not None:
                    os.fdatasync(self._fd)
                    self._sync_failed = None
                else:
                    self._dirty = True
            except OSError as error:
                self._cut_pending = True
                with contextlib.suppress(StorageError):
                    self._cut_back("cannot cut the log back after a failed write")
                raise _storage_error(
                    error, f"cannot write to the log {self.segment.path}"
                ) from error
            self._previous_offset = start
            self._offset = start + len(record)
            self.last_sequence = sequence
            self._segment_records += 1

    def retract(self, sequence: int) -> None:
        """Take the last record (numbered ``sequence``) back out of the log: the caller could
        not apply it after all. The file is cut back to where the record began.

        Raises:
            StorageError: the cut failed; it is retried before the next append.
        """
        with self._lock:
            if sequence != self.last_sequence or self._previous_offset < 0:
                raise ValueError(f"record {sequence} is not the last one appended")
            self._offset = self._previous_offset
            self._previous_offset = -1
            self.last_sequence = sequence - 1
            self._segment_records -= 1
            self._cut_pending = True
            self._cut_back("cannot take a record back out of the log")

    def _cut_back(self, what: str) -> None:
        """Truncate the segment to the end of the last good record (holding ``_lock``)."""
        try:
            os.ftruncate(self._fd, self._offset)
            if self.policy == "always":
                os.fdatasync(self._fd)
        except OSError as error:
            raise _storage_error(error, f"{what} ({self.segment.path})") from error
        self._cut_pending = False

    def sync(self) -> None:
        """fdatasync the current segment now if anything was written since the last one.

        Raises:
            StorageError: the fsync failed.
        """
        with self._sync_lock:
            if self._closed or not self._dirty:
                return
            self._dirty = False
            try:
                os.fdatasync(self._fd)
            except OSError as error:
                self._dirty = True
                self._sync_failed = error
                raise _storage_error(error, f"cannot fsync the log {self.segment.path}") from error

    def _sync_periodically(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except StorageError as error:
                # Writes acknowledged since the last good fsync may not be durable; the next
                # append fsyncs itself (as under ``always``) until an fsync succeeds.
                log.error("background fsync failed: %s", error)

    def rotate(self) -> None:
        """Seal the current segment (fdatasync, close) and continue in a new one starting at
        :attr:`last_sequence` + 1 -- unless the current one holds no record yet. Called by a
        snapshot before it exports, so that the segments before it can be dropped once it is
        durable.

        Raises:
            StorageError: the current segment could not be synced or the new one created; the
                current one stays in use.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the log is closed (the server is stopping)")
            if self._segment_records == 0:
                return
            with self._sync_lock:
                try:
                    if self._dirty or self._sync_failed is not None:
                        os.fdatasync(self._fd)
                        self._dirty = False
                        self._sync_failed = None
                except OSError as error:
                    raise _storage_error(error, f"cannot seal {self.segment.path}") from error
                segment, fd = create_segment(self.directory, self.last_sequence + 1)
                os.close(self._fd)
                self._fd, self.segment = fd, segment
                self._offset = HEADER_SIZE
                self._previous_offset = -1
                self._segment_records = 0
                self._dirty = False

    def drop_through(self, sequence: int) -> list[Path]:
        """Delete the segments (never the current one) whose records all have sequence numbers
        at most ``sequence``; the deleted paths. A file that cannot be deleted is logged and
        kept (it is skipped at the next start)."""
        with self._lock:
            current = self.segment.first_sequence
        segments = [s for s in list_segments(self.directory) if s.first_sequence < current]
        deleted = []
        for i, segment in enumerate(segments):
            following = segments[i + 1].first_sequence if i + 1 < len(segments) else current
            if following <= sequence + 1:
                try:
                    segment.path.unlink()
                except OSError as error:
                    log.warning("could not delete %s: %s", segment.path, error)
                    continue
                deleted.append(segment.path)
        if deleted:
            with contextlib.suppress(OSError):
                fsync_directory(self.directory)
        return deleted

    def close(self) -> None:
        """fdatasync (whatever the policy) and close; idempotent.

        Raises:
            StorageError: the final fsync failed (the file is closed all the same).
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock, self._sync_lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._cut_pending:
                    os.ftruncate(self._fd, self._offset)
                os.fdatasync(self._fd)
            except OSError as error:
                raise _storage_error(error, f"cannot fsync the log {self.segment.path}") from error
            finally:
                os.close(self._fd)

    def abandon(self) -> None:
        """Close the file without syncing, as a crash would leave it (for tests)."""
        self._stop.set()
        with self._lock, self._sync_lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
