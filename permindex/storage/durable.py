"""The one driver of a durable collection, whatever its method: an index kept in its data
directory by the write-ahead log (:mod:`permindex.storage.wal`) and snapshots. What differs
from one collection method to another -- the index type, the codec of its log records, its
snapshot format -- comes in as a :class:`CollectionFormat`; the logging, the locks, the
snapshot schedule and the recovery are written once, here.
:class:`~permindex.storage.store.Store` (SimHash) and
:class:`~permindex.storage.jaccard_store.JaccardStore` (Jaccard) are its two users.

Write path (:meth:`DurableStore._log_then_apply`, under the store's *write lock*, which the
caller holds for the whole request): the caller decides the changes; one record is encoded and
appended (:meth:`~permindex.storage.wal.LogWriter.append`: one ``write``, and one fdatasync
under the default ``always`` policy) -- if that fails, the log is cut back, nothing is applied
and the caller gets :class:`~permindex.errors.StorageError`; then the changes are applied (if
that raises, the record is taken back out of the log). So an acknowledged change is both logged
and applied, and a refused one neither.

Snapshots (:meth:`DurableStore.snapshot`): under the write lock, only long enough to note the
sequence number S of the last record applied, start a new log segment and let the format take
what it will write (:meth:`CollectionFormat.hold`); then, without the lock, the format writes
it as a snapshot recording S, and the log segments the *previous* snapshot needed are deleted
(the log is kept back to the previous generation).

Recovery (:func:`recover`): the directory is locked by the format's data directory, the format
loads its snapshot, the log after the snapshot's sequence is read
(:func:`~permindex.storage.wal_recovery.read_log`, with the format's record decoder: a torn
tail is cut off with a warning, corruption before it stops the start unless
``truncate_corrupt_log``), the format replays it, and the log is continued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, Self, TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CorruptFileError, StorageError
from permindex.index.keys.rule import validate_key
from permindex.storage.datadir import fsync_directory
from permindex.storage.key_section import batch_repeats
from permindex.storage.snapshot import SnapshotInfo
from permindex.storage.wal import FsyncPolicy, LogWriter
from permindex.storage.wal_records import ADD, REPLACE, Record
from permindex.storage.wal_recovery import read_log

__all__ = [
    "CollectionFormat",
    "CollectionIndex",
    "DataDirectory",
    "DurableStore",
    "Recovery",
    "recover",
    "set_ops",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class Recovery:
    """What a store's ``open`` loaded.

    Attributes:
        snapshot: the snapshot loaded (None: there was none).
        records: log records replayed after it.
        changes: changes in those records.
        last_sequence: the last log sequence number the directory holds.
        warnings: log damage cut off at the start (torn tail, or corruption with
            ``truncate_corrupt_log``), one sentence each.
        seconds: wall time of the whole recovery.
    """

    snapshot: SnapshotInfo | None
    records: int
    changes: int
    last_sequence: int
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


class CollectionIndex(Protocol):
    """What the driver asks of a collection's index (both :class:`~permindex.index.Index`
    and :class:`~permindex.index.jaccard.JaccardIndex` have it)."""

    def __contains__(self, key: object) -> bool: ...

    def contains_many(self, keys: Sequence[str]) -> NDArray[np.bool_]: ...

    def discard(self, key: str) -> bool: ...


class DataDirectory(Protocol):
    """What the driver asks of a collection's locked data directory: where it is, where its
    snapshot goes, the log sequence of the last snapshot loaded or written, and ``close``
    (release the lock; idempotent)."""

    @property
    def path(self) -> Path: ...

    @property
    def snapshot_path(self) -> Path: ...

    @property
    def log_sequence(self) -> int: ...

    def close(self) -> None: ...


_IndexT = TypeVar("_IndexT", bound=CollectionIndex)
_IndexT_co = TypeVar("_IndexT_co", bound=CollectionIndex, covariant=True)


class CollectionFormat(Protocol[_IndexT_co]):
    """What differs from one collection method to another, for :class:`DurableStore` and
    :func:`recover`: the index, its data directory (locked), its snapshots and the codec of its
    log records. Its methods are called by the driver, never concurrently with each other."""

    @property
    def index(self) -> _IndexT_co:
        """The collection's index."""
        ...

    @property
    def data_dir(self) -> DataDirectory:
        """The collection's locked data directory."""
        ...

    def load(self) -> SnapshotInfo | None:
        """Fill the (empty) index from the directory's snapshot and note its log sequence in
        the data directory; None when there is none. CorruptFileError for a damaged or foreign
        snapshot."""
        ...

    def decode(self, data: bytes, start: int, end: int, version: int) -> Record:
        """The body of one log record whose framing and CRC were checked, for
        :func:`~permindex.storage.wal_recovery.read_log`; BadRecord when it is malformed."""
        ...

    def replay(self, records: Sequence[Record]) -> None:
        """Apply ``records`` (as :meth:`decode` gave them) to the index, in order; ValueError or
        TypeError for a record that does not apply."""
        ...

    def encode_removes(self, sequence: int, keys: list[str]) -> bytes:
        """The framed log record number ``sequence`` that removes ``keys``."""
        ...

    def hold(self) -> Callable[[int], SnapshotInfo]:
        """Called under the write lock at a snapshot: take (or note) what the snapshot will
        hold, quickly; the callable returned then writes it outside the lock, recording the log
        sequence it is given, and notes that sequence in the data directory. OSError when it
        cannot be written (the previous snapshot stays)."""
        ...


def set_ops(index: CollectionIndex, keys: list[str]) -> NDArray[np.uint8]:
    """The log op of storing each of ``keys`` in order: ADD for a key not stored before the
    call, at its first occurrence in it; REPLACE otherwise
    (:func:`~permindex.storage.key_section.batch_repeats`). Raises as the index's
    ``contains_many`` for a bad key.

    Examples:
        >>> from permindex import Index
        >>> index = Index()
        >>> index.add("a", 1)
        True
        >>> set_ops(index, ["a", "b", "b"]).tolist()  # ADD 1, REPLACE 2
        [2, 1, 2]
    """
    new = ~index.contains_many(keys)
    repeats = batch_repeats(keys)
    added = new if repeats is None else new & repeats.first
    return np.where(added, ADD, REPLACE).astype(np.uint8)


def recover(
    format: CollectionFormat[CollectionIndex],
    *,
    fsync: FsyncPolicy,
    fsync_interval: float,
    truncate_corrupt_log: bool,
) -> tuple[LogWriter, Recovery]:
    """Recover a collection whose data directory ``format.data_dir`` is locked: its snapshot
    loaded, its log read and replayed; returns the writer that continues the log and what was
    loaded. On any error the data directory is released.

    Raises:
        CorruptFileError: a corrupt, foreign or unknown-version snapshot or log segment, a gap
            in the log, corruption before the log's tail (unless ``truncate_corrupt_log``), or
            a record that does not apply; nothing is loaded.
        OSError: the directory cannot be read or written (StorageError when the log cannot be
            continued).
    """
    started = time.perf_counter()
    data_dir = format.data_dir
    try:
        info = format.load()
        if info is None:
            log.info("no snapshot in %s", data_dir.path)
        else:
            log.info("loaded %d keys from %s in %.2f s", info.count, info.path, info.seconds)
        recovered = read_log(
            data_dir.path,
            data_dir.log_sequence,
            truncate_corrupt=truncate_corrupt_log,
            decode=format.decode,
        )
        try:
            format.replay(recovered.records)
        except (ValueError, TypeError) as error:  # a record that passed its CRC check
            raise CorruptFileError(
                f"{data_dir.path}: a log record does not apply: {error}", str(data_dir.path)
            ) from error
        segment, offset = recovered.tail if recovered.tail else (None, 0)
        writer = LogWriter(
            data_dir.path,
            segment=segment,
            offset=offset,
            last_sequence=recovered.last_sequence,
            policy=fsync,
            interval=fsync_interval,
        )
    except BaseException:
        data_dir.close()
        raise
    recovery = Recovery(
        snapshot=info,
        records=len(recovered.records),
        changes=recovered.changes,
        last_sequence=recovered.last_sequence,
        warnings=recovered.warnings,
        seconds=time.perf_counter() - started,
    )
    if recovery.records:
        log.info(
            "replayed %d changes (%d log records) up to sequence %d",
            recovery.changes,
            recovery.records,
            recovery.last_sequence,
        )
    return writer, recovery


class DurableStore(Generic[_IndexT]):
    """An index and its data directory, whatever the collection method (see the module
    docstring): what both stores share -- the write lock, the log, removes, snapshots,
    closing. A collection method subclasses it with its own ``open`` and writes, and passes
    its :class:`CollectionFormat`.

    Attributes:
        index: the index; read from it freely (it is thread-safe), but change it only through
            the store's methods, or the change is neither logged nor serialized with the others.
        data_dir: the locked data directory.
        recovery: what was loaded at open.
        log_buffer_bytes: bytes of the log record being written (0 at rest: the log keeps no
            buffer between writes, each record goes to the file with one write).
    """

    def __init__(
        self, format: CollectionFormat[_IndexT], writer: LogWriter, recovery: Recovery
    ) -> None:
        """Use the subclass's ``open`` (``writer`` and ``recovery`` from :func:`recover`)."""
        self.index: _IndexT = format.index
        self.data_dir = format.data_dir
        self.recovery = recovery
        self._format = format
        self._writer = writer
        self._sequence = writer.last_sequence  # the last record logged and applied
        self._write_lock = threading.Lock()
        self._snapshot_lock = threading.Lock()
        self._closed = False
        self.log_buffer_bytes = 0

    # ---------------------------------------------------------------------------------- state

    @property
    def path(self) -> Path:
        """The data directory."""
        return self.data_dir.path

    @property
    def sequence(self) -> int:
        """Sequence number of the last change logged and applied (0: none ever)."""
        return self._sequence

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """The log's fsync policy."""
        return self._writer.policy

    # ---------------------------------------------------------------------------------- writes

    def _log_then_apply(self, encode: Callable[[int], bytes], apply: Callable[[], _T]) -> _T:
        """Append the record ``encode`` makes of the next sequence number (the caller holds the
        write lock), then ``apply`` it. Raises StorageError (nothing applied) when the store is
        closed or the append fails, and what ``encode`` raises (nothing logged); if ``apply``
        raises, the record is taken back out of the log."""
        if self._closed:
            raise StorageError("the data directory is closed (the server is stopping)")
        sequence = self._sequence + 1
        record = encode(sequence)
        self.log_buffer_bytes = len(record)
        try:
            self._writer.append(record, sequence)
        finally:
            self.log_buffer_bytes = 0
        try:
            result = apply()
        except BaseException:
            self._writer.retract(sequence)
            raise
        self._sequence = sequence
        return result

    def remove_many(self, keys: Sequence[str]) -> list[bool]:
        """Log, then remove, the keys that are stored (a key named twice is removed once).

        Returns:
            For each key in order, whether this call removed it.

        Raises:
            TypeError, InvalidArgumentError: a malformed key.
            StorageError: the log could not be written; nothing is removed.
        """
        key_list = [validate_key(key, name=f"keys[{i}]") for i, key in enumerate(keys)]
        with self._write_lock:
            removed = [key in self.index for key in key_list]
            repeats = batch_repeats(key_list)
            if repeats is not None:  # a key removed at its first occurrence only
                removed = [
                    r and first for r, first in zip(removed, repeats.first.tolist(), strict=True)
                ]
            gone = [key for key, r in zip(key_list, removed, strict=True) if r]
            if gone:

                def apply() -> None:
                    for key in gone:
                        self.index.discard(key)

                self._log_then_apply(
                    lambda sequence: self._format.encode_removes(sequence, gone), apply
                )
        return removed

    # ------------------------------------------------------------------------------ snapshots

    def snapshot(self) -> SnapshotInfo:
        """Write a snapshot now and drop the log segments it makes unnecessary (see the module
        docstring). Serialized with other snapshots; writes and queries wait only while the
        format takes what it writes.

        Returns:
            The snapshot's info (``log_sequence``: the last change it is known to contain).

        Raises:
            StorageError: a new log segment could not be started, or the store is closed.
            OSError: the snapshot could not be written; the previous one and the whole log stay.
        """
        with self._snapshot_lock:
            self._writer.sync()  # so that sealing the segment under the write lock is quick
            with self._write_lock:
                if self._closed:
                    raise StorageError("the data directory is closed (the server is stopping)")
                sequence = self._sequence
                self._writer.rotate()
                write = self._format.hold()
            previous = self.data_dir.log_sequence
            info = write(sequence)
            dropped = self._writer.drop_through(previous)
            if dropped:
                log.info("deleted %d log segments up to sequence %d", len(dropped), previous)
            return info

    # ---------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """fsync and close the log (whatever the policy), release the data directory;
        idempotent. In-flight writes finish first.

        Raises:
            StorageError: the final fsync failed (everything is closed all the same).
        """
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._writer.close()
            fsync_directory(self.path)  # the names of the last segment and snapshot
        except OSError as error:
            if isinstance(error, StorageError):
                raise
            raise StorageError(
                f"cannot fsync the data directory {self.path}: {error}", error.errno
            ) from error
        finally:
            self.data_dir.close()

    def abandon(self) -> None:
        """Close everything without a final fsync, as a crash of the process would (the page
        cache keeps what was written): for tests of recovery in one process."""
        with self._write_lock:
            self._closed = True
        self._writer.abandon()
        self.data_dir.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
