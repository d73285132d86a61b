"""A durable index: an :class:`~permindex.index.Index` kept in a data directory by a write-ahead
log (:mod:`permindex.storage.wal`) and snapshots (:mod:`permindex.storage.snapshot`).

Write path. Every change goes through :class:`Store` (:meth:`Store.add_many`,
:meth:`Store.check_and_add_many`, :meth:`Store.remove_many`), which holds its *write lock* for
the whole of one request and does, in this order:

1. validate the request and decide what it changes (reading the index, under the index's own
   lock, briefly);
2. encode the changes as one log record (:func:`~permindex.storage.wal_records.encode_record`)
   and append it (:meth:`~permindex.storage.wal.LogWriter.append`, from
   :meth:`Store._log_then_apply`) -- one ``write``, and one fdatasync under the default
   ``always`` policy. If that fails (disk full, read-only file system), the log is
   cut back, nothing is applied, and the caller gets :class:`~permindex.errors.StorageError`;
3. apply the changes to the index (under the index's lock).

So an acknowledged change is both logged and applied, and a refused one neither. Writers are
serialized by the write lock, which is what makes CheckAndAdd atomic: no other change can come
between its check and its add. Readers (queries, Get, Pairs) never take the write lock, so they
never wait for the disk; they see a change once step 3 ran.

Snapshots (:meth:`Store.snapshot`): under the write lock, only long enough to note the sequence
number S of the last record applied and to start a new log segment, then without it: the index is
exported in slices (:meth:`~permindex.index.Index.export_slices`, the index lock held for one slice
of :data:`EXPORT_SLICE_ROWS` rows at a time) while writes continue, and written as a snapshot
recording log sequence S. The export is fuzzy -- a key changed meanwhile may appear with its newer
value -- but every change after S is in the log, and replaying those records over the snapshot
(which recovery always does) gives exactly the final state: a replayed add, replace or remove sets
the key's state regardless of what it was. Once the snapshot is durable (file and directory
fsynced), the log segments the *previous* snapshot no longer needs are deleted: the log is kept back
to the previous generation, so ``snapshot.pmx.prev`` plus the log is a complete fallback too.

Recovery (:meth:`Store.open`): lock the directory, load the snapshot (if any), read the log
after its sequence (:func:`permindex.storage.wal_recovery.read_log`: a torn tail is cut off with
a warning; corruption before it stops the start unless ``truncate_corrupt_log``), replay it,
then continue the log. The snapshot's key section goes into the index as it is on disk
(:meth:`permindex.index.Index.from_compact`: no Python str per key; the keys are hashed while a
second thread builds the tables).

Times and expiry: every add or replace is logged with its time (Unix seconds: the ``added_at``
the caller gives, else the clock's time at the write; :func:`~permindex.index.expiry.stamps`),
and snapshots hold each key's time, so that a collection with ``expire_after``
(:class:`~permindex.index.ExpiringIndex`) recovers the times its entries had. Expiry itself is
not logged: it follows from the times, and recovery expires again what is due. A data directory
of an older format (no times), or of a collection without expiry (times 0 in its snapshots),
loads into a collection with expiry as if every entry without a time had been added at the
start, and :meth:`Store.open` then writes a snapshot at once to record that time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CorruptFileError, InvalidArgumentError, StorageError
from permindex.index import CheckAndAddResult, ExpiringIndex, Index, Match
from permindex.index.expiry import AddedAt, stamps
from permindex.index.hamming import as_fingerprint_array
from permindex.index.index import load_codes, stored_count
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.index.tables.permutation import DEFAULT_DESIGN, Design
from permindex.storage.datadir import fsync_directory
from permindex.storage.key_section import batch_repeats
from permindex.storage.snapshot import DataDir, Part, Snapshot, SnapshotInfo
from permindex.storage.wal import FsyncPolicy, LogWriter
from permindex.storage.wal_records import ADD, REMOVE, REPLACE, Record, encode_record
from permindex.storage.wal_recovery import read_log

__all__ = ["Recovery", "Store"]

log = logging.getLogger(__name__)

#: Rows per slice of a snapshot's export (the index lock is held for one slice at a time).
EXPORT_SLICE_ROWS = 1 << 14

_T = TypeVar("_T")


@dataclass(frozen=True)
class Recovery:
    """What :meth:`Store.open` loaded.

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


def _load_snapshot(index: Index, snapshot: Snapshot) -> None:
    """Fill ``index`` from ``snapshot`` (with each key's time when the index expires: 0 or none,
    the time of the load); CorruptFileError for invalid or repeated keys."""
    info = snapshot.info
    design = index.design.as_tuple()
    if (info.k, (info.blocks, info.leading)) != (index.k, design):
        log.warning(
            "%s was written with k=%d, design (%d, %d); this server runs k=%d, design %s: "
            "the tables are rebuilt with the server's options",
            info.path,
            info.k,
            info.blocks,
            info.leading,
            index.k,
            design,
        )
    try:
        # The key section as it is on disk: no Python str per key (Index.from_compact).
        codes = snapshot.codes
        if isinstance(index, ExpiringIndex):
            index.add_compact(
                snapshot.lengths, snapshot.section, snapshot.fingerprints, added_at=snapshot.times
            )
        elif codes is not None and len(index) == 0:  # the keys as the key store holds them
            if codes.longest > MAX_KEY_BYTES:
                raise ValueError(f"key lengths must be 1 to {MAX_KEY_BYTES} UTF-8 bytes")
            load_codes(
                index, codes.words, codes.lens, codes.spans, codes.bases, snapshot.fingerprints
            )
        else:
            index.add_compact(snapshot.lengths, snapshot.section, snapshot.fingerprints)
    except (ValueError, TypeError) as error:
        raise CorruptFileError(
            f"{info.path}: holds an invalid entry: {error}", str(info.path)
        ) from error
    # Counted without expiring first (len() would): entries already expired count as loaded.
    if stored_count(index) != info.count:
        raise CorruptFileError(
            f"{info.path}: holds {info.count} entries but only {len(index)} distinct keys",
            str(info.path),
        )


def _untimed(snapshot: Snapshot | None, records: Sequence[Record]) -> bool:
    """Whether ``snapshot`` or ``records`` hold an entry without a time (an older format, or
    a collection without expiry: time 0)."""
    if snapshot is not None and snapshot.info.count:
        if snapshot.times is None or not bool(snapshot.times.all()):
            return True
    return any(bool((record.times[record.ops != REMOVE] == 0).any()) for record in records)


def _replay(index: Index, records: Sequence[Record]) -> None:
    """Apply ``records`` in order: runs of adds and replaces as one ``add_many`` each (the last
    change of a key wins, as in order; at the times logged when the index expires), removes one
    by one."""
    keys: list[str] = []
    values: list[NDArray[np.uint64]] = []
    times: list[NDArray[np.uint32]] = []

    def flush() -> None:
        if keys:
            if isinstance(index, ExpiringIndex):
                index.add_many(keys, np.concatenate(values), added_at=np.concatenate(times))
            else:
                index.add_many(keys, np.concatenate(values))
            keys.clear()
            values.clear()
            times.clear()

    for record in records:
        removes = record.ops == REMOVE
        if not removes.any():
            keys.extend(record.keys)
            values.append(record.fingerprints)
            times.append(record.times)
            continue
        for i, remove in enumerate(removes.tolist()):
            if remove:
                flush()
                index.discard(record.keys[i])
            else:
                keys.append(record.keys[i])
                values.append(record.fingerprints[i : i + 1])
                times.append(record.times[i : i + 1])
    flush()


class Store:
    """An index and its data directory: changes logged before they are applied, snapshots,
    recovery (see the module docstring). Open one with :meth:`Store.open`.

    Attributes:
        index: the index; read from it freely (it is thread-safe), but change it only through
            the store's methods, or the change is neither logged nor serialized with the others.
        data_dir: the locked data directory.
        recovery: what was loaded at open.
    """

    def __init__(
        self,
        index: Index,
        data_dir: DataDir,
        writer: LogWriter,
        recovery: Recovery,
        *,
        export_slice_rows: int = EXPORT_SLICE_ROWS,
    ) -> None:
        """Use :meth:`Store.open`."""
        self.index = index
        self.data_dir = data_dir
        self.recovery = recovery
        self._writer = writer
        self._sequence = writer.last_sequence  # the last record logged and applied
        self._write_lock = threading.Lock()
        self._snapshot_lock = threading.Lock()
        self._export_slice_rows = export_slice_rows
        self._closed = False
        self._clock = index.now if isinstance(index, ExpiringIndex) else time.time
        #: Bytes of the log record being written (0 at rest: the log keeps no buffer between
        #: writes, each record goes to the file with one write).
        self.log_buffer_bytes = 0

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        k: int = 3,
        design: Design | tuple[int, int] = DEFAULT_DESIGN,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 0.1,
        truncate_corrupt_log: bool = False,
        export_slice_rows: int = EXPORT_SLICE_ROWS,
        expire_after: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Store:
        """Lock the data directory ``path`` (created if missing), recover its contents and
        continue its log.

        Args:
            path: the data directory.
            k, design: the index's options (a snapshot written with others loads anyway, with a
                warning: the tables are rebuilt).
            fsync: the log's fsync policy, ``always``, ``interval`` or ``never``
                (:mod:`permindex.storage.wal`).
            fsync_interval: seconds between fsyncs under ``interval``.
            truncate_corrupt_log: cut the log at a corrupt record before its tail instead of
                refusing to start (the changes from there on are lost; kept in .dropped files).
            export_slice_rows: rows per slice of a snapshot's export.
            expire_after: seconds after which an entry not added again expires (an
                :class:`~permindex.index.ExpiringIndex`); None: never.
            clock: the wall clock of the writes' times and of expiry, Unix seconds.

        Raises:
            DataDirLockedError: another process owns the directory (the message names its pid).
            CorruptFileError: a corrupt, foreign or unknown-version snapshot or log segment, a
                gap in the log, or corruption before the log's tail; nothing is loaded.
            InvalidArgumentError: a bad option (k, design, fsync policy).
            OSError: the directory cannot be created, read or written (StorageError when the
                log cannot be continued).
        """
        started = time.perf_counter()
        # Options checked before the directory is touched.
        if expire_after is None:
            index = Index(k=k, design=design)
        else:
            index = ExpiringIndex(k=k, design=design, expire_after=expire_after, clock=clock)
        data_dir = DataDir(path)
        try:
            snapshot = data_dir.load()
            if snapshot is None:
                log.info("no snapshot in %s", data_dir.path)
            else:
                _load_snapshot(index, snapshot)
                info = snapshot.info
                log.info("loaded %d keys from %s in %.2f s", info.count, info.path, info.seconds)
            recovered = read_log(
                data_dir.path, data_dir.log_sequence, truncate_corrupt=truncate_corrupt_log
            )
            try:
                _replay(index, recovered.records)
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
            snapshot=snapshot.info if snapshot else None,
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
        store = cls(index, data_dir, writer, recovery, export_slice_rows=export_slice_rows)
        if isinstance(index, ExpiringIndex) and _untimed(snapshot, recovered.records):
            # Entries without a time on disk count as added now: a snapshot records that time,
            # or every start until the next change would count them as added again.
            log.info("recording the times of entries loaded without one: snapshot")
            try:
                store.snapshot()
            except BaseException:
                store.close()
                raise
        return store

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

    def _log_then_apply(
        self, ops: NDArray[np.uint8], keys: list[str], values: NDArray[np.uint64],
        apply: Callable[[], _T], times: NDArray[np.uint32] | None = None,
    ) -> _T:  # fmt: skip
        """Append one record (holding the write lock), then ``apply`` it. Raises StorageError
        (nothing applied) when the append fails; if ``apply`` raises, the record is taken back
        out of the log."""
        if self._closed:
            raise StorageError("the data directory is closed (the server is stopping)")
        sequence = self._sequence + 1
        record = encode_record(sequence, ops, keys, values, times)
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

    def _apply_add(
        self, keys: list[str], values: NDArray[np.uint64], times: NDArray[np.uint32]
    ) -> Callable[[], NDArray[np.bool_]]:
        """The index's ``add_many`` of ``keys`` at ``times`` (kept when it expires)."""
        index = self.index
        if isinstance(index, ExpiringIndex):
            return lambda: index.add_many(keys, values, added_at=times)
        return lambda: index.add_many(keys, values)

    def add_many(
        self,
        keys: Sequence[str],
        fingerprints: Sequence[int] | NDArray[np.uint64],
        *,
        added_at: AddedAt = None,
    ) -> NDArray[np.bool_]:
        """Log, then store, each (key, fingerprint) pair as :meth:`Index.add_many` (a key repeated
        in the call takes its last fingerprint), at ``added_at`` (None: now; one time, or one per
        key: :func:`~permindex.index.expiry.stamps`), logged with each.

        Returns:
            (n,) bool: True where the key was not stored before the call.

        Raises:
            TypeError, InvalidArgumentError: a malformed key, fingerprint or time, lengths
                differ.
            StorageError: the log could not be written (StorageFullError: no space).
            Nothing is logged or stored when any of these is raised.
        """
        key_list = list(keys)
        values = as_fingerprint_array(fingerprints)
        n = len(key_list)
        if values.size != n:
            raise InvalidArgumentError(
                f"got {n} keys and {values.size} fingerprints; the lengths must match"
            )
        times = stamps(added_at, n, self._clock())
        if n == 0:
            return np.zeros(0, dtype=bool)
        with self._write_lock:
            ops = _set_ops(self.index, key_list)
            apply = self._apply_add(key_list, values, times)
            return self._log_then_apply(ops, key_list, values, apply, times)

    def check_and_add_many(
        self,
        keys: Sequence[str],
        fingerprints: Sequence[int],
        k: int | None = None,
        *,
        added_at: AddedAt = None,
    ) -> list[CheckAndAddResult]:
        """For each (key, fingerprint) in order, :meth:`Index.check_and_add`: add it only if no
        *other* key is within ``k`` -- counting the documents added earlier in the same call,
        unless already expired at their ``added_at`` (as :meth:`add_many`) -- as one logged
        record and one step (no other change comes between the checks and the adds: the write
        lock is held throughout).

        Returns:
            One :class:`~permindex.index.CheckAndAddResult` per document, in order.

        Raises:
            TypeError, InvalidArgumentError: a malformed key, fingerprint, time or k.
            StorageError: the log could not be written; nothing is added (every result would
                have been as returned otherwise, but none is applied).
        """
        key_list = [validate_key(key, name=f"keys[{i}]") for i, key in enumerate(keys)]
        values = as_fingerprint_array(fingerprints)
        if values.size != len(key_list):
            raise InvalidArgumentError(
                f"got {len(key_list)} keys and {values.size} fingerprints; the lengths must match"
            )
        times = stamps(added_at, len(key_list), self._clock())
        index = self.index
        expiring = index if isinstance(index, ExpiringIndex) else None
        results: list[CheckAndAddResult] = []
        with self._write_lock:
            # Documents added by this call so far: the key's new fingerprint, and a small index
            # of them, so later documents are checked against them as if they were applied.
            pending: dict[str, int] = {}
            batch: Index | None = None
            for key, value, when in zip(key_list, values.tolist(), times.tolist(), strict=True):
                matches = [
                    m for m in index.query(value, k) if m.key != key and m.key not in pending
                ]
                if batch is not None:
                    matches += [m for m in batch.query(value, k) if m.key != key]
                    matches.sort(key=_match_order)
                if matches:
                    results.append(CheckAndAddResult(False, matches, False))
                    continue
                results.append(CheckAndAddResult(True, [], key in pending or key in index))
                pending[key] = value
                if expiring is not None and expiring.is_expired(when):
                    continue  # stored, and expired at once: matches nothing
                if batch is None:
                    batch = Index(k=index.k, design=index.design)
                batch.add(key, value)
            chosen = np.fromiter((r.added for r in results), dtype=bool, count=len(results))
            if chosen.any():
                add_keys = [key for key, r in zip(key_list, results, strict=True) if r.added]
                add_values, add_times = values[chosen], times[chosen]
                ops = _set_ops(index, add_keys)
                apply = self._apply_add(add_keys, add_values, add_times)
                self._log_then_apply(ops, add_keys, add_values, apply, add_times)
        return results

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
                n = len(gone)

                def apply() -> None:
                    for key in gone:
                        self.index.discard(key)

                self._log_then_apply(
                    np.full(n, REMOVE, dtype=np.uint8), gone, np.zeros(n, np.uint64), apply
                )
        return removed

    # ------------------------------------------------------------------------------ snapshots

    def snapshot(self) -> SnapshotInfo:
        """Write a snapshot now and drop the log segments it makes unnecessary (see the module
        docstring). Serialized with other snapshots; writes and queries go on meanwhile.

        Returns:
            The snapshot's info (``log_sequence``: the last change it is known to contain).

        Raises:
            StorageError: a new log segment could not be started.
            OSError: the snapshot could not be written; the previous one and the whole log stay.
        """
        with self._snapshot_lock:
            self._writer.sync()  # so that sealing the segment under the write lock is quick
            with self._write_lock:
                if self._closed:
                    raise StorageError("the data directory is closed (the server is stopping)")
                sequence = self._sequence
                self._writer.rotate()
            index = self.index
            if isinstance(index, ExpiringIndex):
                parts: Sequence[Part] = index.export_timed_slices(self._export_slice_rows)
            else:
                parts = index.export_slices(self._export_slice_rows)
            previous = self.data_dir.log_sequence
            info = self.data_dir.save_parts(
                parts, k=self.index.k, design=self.index.design.as_tuple(), log_sequence=sequence
            )
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _set_ops(index: Index, keys: list[str]) -> NDArray[np.uint8]:
    """The log op of storing each of ``keys`` in order: ADD for a key not stored before the
    call, at its first occurrence in it; REPLACE otherwise
    (:func:`~permindex.storage.key_section.batch_repeats`). Raises as :meth:`Index.add_many` for
    a bad key."""
    new = ~index.contains_many(keys)
    repeats = batch_repeats(keys)
    added = new if repeats is None else new & repeats.first
    return np.where(added, ADD, REPLACE).astype(np.uint8)


def _match_order(match: Match) -> tuple[int, str]:
    return match.distance, match.key
