"""A durable index: an :class:`~permindex.index.Index` kept in a data directory by a write-ahead
log (:mod:`permindex.storage.wal`) and snapshots (:mod:`permindex.storage.snapshot`).

Write path. Every change goes through :class:`Store` (:meth:`Store.add_many`,
:meth:`Store.check_and_add_many`, :meth:`Store.remove_many`), which holds its *write lock* for
the whole of one request and does, in this order:

1. validate the request and decide what it changes (reading the index, under the index's own
   lock, briefly);
2. encode the changes as one log record (:func:`~permindex.storage.wal_records.encode_record`)
   and append it (:meth:`~permindex.storage.wal.LogWriter.append`, from
   :meth:`~permindex.storage.durable.DurableStore._log_then_apply`) -- one ``write``, and one
   fdatasync under the default ``always`` policy. If that fails (disk full, read-only file
   system), the log is cut back, nothing is applied, and the caller gets
   :class:`~permindex.errors.StorageError`;
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
import time
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CorruptFileError, InvalidArgumentError
from permindex.index import CheckAndAddResult, ExpiringIndex, Index, Match
from permindex.index.expiry import AddedAt, stamps
from permindex.index.hamming import as_fingerprint_array
from permindex.index.index import load_codes, stored_count
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.index.tables.permutation import DEFAULT_DESIGN, Design
from permindex.storage.durable import DurableStore, Recovery, recover, set_ops
from permindex.storage.snapshot import DataDir, Part, Snapshot, SnapshotInfo
from permindex.storage.wal import FsyncPolicy, LogWriter
from permindex.storage.wal_records import REMOVE, Record, decode_body, encode_record

__all__ = ["Recovery", "Store"]

log = logging.getLogger(__name__)

#: Rows per slice of a snapshot's export (the index lock is held for one slice at a time).
EXPORT_SLICE_ROWS = 1 << 14


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


class _SimHashFormat:
    """A SimHash collection's :class:`~permindex.storage.durable.CollectionFormat`: an
    :class:`~permindex.index.Index` (or :class:`~permindex.index.ExpiringIndex`), snapshots of
    :mod:`permindex.storage.snapshot`, records of :mod:`permindex.storage.wal_records`.
    ``untimed``: whether the snapshot or the log loaded held an entry without a time."""

    def __init__(self, index: Index, data_dir: DataDir, export_slice_rows: int) -> None:
        self.index = index
        self.data_dir = data_dir
        self.untimed = False
        self._export_slice_rows = export_slice_rows

    def load(self) -> SnapshotInfo | None:
        snapshot = self.data_dir.load()
        if snapshot is None:
            return None
        _load_snapshot(self.index, snapshot)
        self.untimed = isinstance(self.index, ExpiringIndex) and _untimed(snapshot, [])
        return snapshot.info

    def decode(self, data: bytes, start: int, end: int, version: int) -> Record:
        return decode_body(data, start, end, version)

    def replay(self, records: Sequence[Record]) -> None:
        _replay(self.index, records)
        if isinstance(self.index, ExpiringIndex) and not self.untimed:
            self.untimed = _untimed(None, records)

    def encode_removes(self, sequence: int, keys: list[str]) -> bytes:
        n = len(keys)
        return encode_record(
            sequence, np.full(n, REMOVE, dtype=np.uint8), keys, np.zeros(n, np.uint64)
        )

    def hold(self) -> Callable[[int], SnapshotInfo]:
        # Nothing taken under the lock: the export is fuzzy, in slices, while writes go on.
        return self._write

    def _write(self, log_sequence: int) -> SnapshotInfo:
        index = self.index
        if isinstance(index, ExpiringIndex):
            parts: Sequence[Part] = index.export_timed_slices(self._export_slice_rows)
        else:
            parts = index.export_slices(self._export_slice_rows)
        return self.data_dir.save_parts(
            parts, k=index.k, design=index.design.as_tuple(), log_sequence=log_sequence
        )


class Store(DurableStore[Index]):
    """An index and its data directory: changes logged before they are applied, snapshots,
    recovery (see the module docstring; the logging, snapshots, removes and closing are
    :class:`~permindex.storage.durable.DurableStore`'s). Open one with :meth:`Store.open`.

    Attributes:
        index: the index; read from it freely (it is thread-safe), but change it only through
            the store's methods, or the change is neither logged nor serialized with the others.
        data_dir: the locked data directory.
        recovery: what was loaded at open.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as path:
        ...     with Store.open(path) as store:
        ...         _ = store.add_many(["a"], [0b1011])
        ...     with Store.open(path) as store:  # recovered from the log
        ...         store.index.get("a")
        11
    """

    def __init__(self, format: _SimHashFormat, writer: LogWriter, recovery: Recovery) -> None:
        """Use :meth:`Store.open`."""
        super().__init__(format, writer, recovery)
        index = format.index
        self._clock = index.now if isinstance(index, ExpiringIndex) else time.time

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
        continue its log (:func:`~permindex.storage.durable.recover`).

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
        # Options checked before the directory is touched.
        if expire_after is None:
            index = Index(k=k, design=design)
        else:
            index = ExpiringIndex(k=k, design=design, expire_after=expire_after, clock=clock)
        format = _SimHashFormat(index, DataDir(path), export_slice_rows)
        writer, recovery = recover(
            format, fsync=fsync, fsync_interval=fsync_interval,
            truncate_corrupt_log=truncate_corrupt_log,
        )  # fmt: skip
        store = cls(format, writer, recovery)
        if isinstance(index, ExpiringIndex) and format.untimed:
            # Entries without a time on disk count as added now: a snapshot records that time,
            # or every start until the next change would count them as added again.
            log.info("recording the times of entries loaded without one: snapshot")
            try:
                store.snapshot()
            except BaseException:
                store.close()
                raise
        return store

    # ---------------------------------------------------------------------------------- writes

    def _log_record(
        self, ops: NDArray[np.uint8], keys: list[str], values: NDArray[np.uint64],
        times: NDArray[np.uint32],
    ) -> NDArray[np.bool_]:  # fmt: skip
        """Log the record of storing ``keys`` (holding the write lock), then store them with
        the index's ``add_many`` (at ``times`` when it expires)."""
        index = self.index

        def apply() -> NDArray[np.bool_]:
            if isinstance(index, ExpiringIndex):
                return index.add_many(keys, values, added_at=times)
            return index.add_many(keys, values)

        return self._log_then_apply(
            lambda sequence: encode_record(sequence, ops, keys, values, times), apply
        )

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
            ops = set_ops(self.index, key_list)
            return self._log_record(ops, key_list, values, times)

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
                ops = set_ops(index, add_keys)
                self._log_record(ops, add_keys, values[chosen], times[chosen])
        return results


def _match_order(match: Match) -> tuple[int, str]:
    return match.distance, match.key
