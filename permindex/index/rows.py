"""The row store of the index: every stored fingerprint has a row number; this module owns the
fingerprint and liveness arrays by row, the key of each row (a
:class:`~permindex.index.keys.store.KeyStore`), tombstones, compaction (renumbering the live rows)
and growing the arrays ahead of need in a background thread.

Rows are appended and never change; replacing a key's fingerprint kills its row (a tombstone)
and appends a new one. Rows are never reused before a compaction, so an entry of a table
(:mod:`permindex.index.tables.table`) can be dead but never wrong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from permindex.errors import LimitExceededError
from permindex.index.keys.rows import grown, zeroed
from permindex.index.keys.store import (
    EncodedKeys,
    KeyStore,
    ahead_capacity,
    nearly_full,
    next_capacity,
)
from permindex.index.tables.table import MAX_ROWS, ChangeCounters, TableCheckError
from permindex.index.tuning import DEFAULT_TUNING, Tuning

__all__ = ["DEFAULT_COMPACTION_MIN", "RowStore", "export_slices"]

#: Dead rows are compacted away once there are more of them than live rows and than this.
DEFAULT_COMPACTION_MIN = 1 << 16

_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]
_U8 = NDArray[np.uint8]


def _require(condition: bool | np.bool_, message: str) -> None:
    if not condition:
        raise TableCheckError(message)


class RowStore:
    """The rows of one index: fingerprint, liveness and key by row number.

    Not thread-safe on its own: the caller holds ``lock`` (the index's re-entrant lock) for
    every method but :meth:`grow_ahead`, :meth:`await_growth` and :meth:`wait_for_growth`,
    which take it themselves (never call those holding it: the growth thread needs it).

    Attributes (read by the index and its tables under the lock; written only here):
        fps: (capacity,) uint64, the fingerprint of each row (0 beyond ``n``). The array object
            is replaced on growth and compaction; the rows below ``n`` never change.
        live: (capacity,) bool, whether each row is current; None (and no memory) while every
            row is live: until the first removal or replacement after a compaction.
        times: (capacity,) uint32, the time of each row (Unix seconds: when its key was last
            added, :mod:`permindex.index.expiry`; 0 beyond ``n``), or None (no memory) for an
            index without expiry (see :meth:`keep_times`). Grown and compacted with ``fps``.
        fps_view, live_view: memoryviews of ``fps`` and ``live`` (indexing gives Python ints and
            bools: the single-query path).
        n: rows in use.
        keys: the :class:`~permindex.index.keys.store.KeyStore` (each row's key, the current row
            of each key).
        compactions: compactions so far (row numbers change at each).
        live_readers, live_epoch: how many batch lookups are searching the current ``live``
            array without the lock (:mod:`permindex.index.search.lookup`), and which array that is
            (``live_epoch`` counts the arrays): while a lookup reads it, :meth:`kill` copies the
            mask before it clears a flag (copy on write), so the lookup keeps the liveness it
            started with; with no reader it clears the flag in place.
        compaction_min: see :meth:`compaction_due`.
        on_compact: called under the lock with the (old n,) int64 remap of each compaction
            (new row, or -1 for a dropped row) after the arrays were renumbered: the tables
            renumber their entries there.
    """

    __slots__ = (
        "_grower",
        "changes",
        "compaction_min",
        "compactions",
        "fps",
        "fps_view",
        "keys",
        "live",
        "live_epoch",
        "live_readers",
        "live_view",
        "lock",
        "max_rows",
        "n",
        "on_compact",
        "times",
        "tuning",
    )

    def __init__(
        self,
        lock: threading.RLock,
        compaction_min: int = DEFAULT_COMPACTION_MIN,
        tuning: Tuning = DEFAULT_TUNING,
    ):
        self.lock = lock
        #: The index's tuning knobs (:class:`~permindex.index.tuning.Tuning`), read by its
        #: parts: the tables, the batch lookups, the join.
        self.tuning = tuning
        #: Rows this store may hold: the row format's MAX_ROWS, or a lower ``tuning.row_limit``.
        self.max_rows = MAX_ROWS if tuning.row_limit is None else min(tuning.row_limit, MAX_ROWS)
        self.compaction_min = compaction_min
        self.fps: _U64 = np.zeros(0, dtype=np.uint64)
        self.live: NDArray[np.bool_] | None = None
        self.fps_view: memoryview = self.fps.data
        self.live_view: memoryview | None = None
        self.live_readers = 0
        self.live_epoch = 0
        #: Change counters shared with the index's tables (:attr:`Table.changes`): a new
        #: ``fps`` or ``live`` array counts as a change of the runs for the lookup caches.
        self.changes = ChangeCounters()
        self.n = 0
        self.keys = KeyStore()
        self.compactions = 0
        self.on_compact: Callable[[_I64], None] | None = None
        self._grower: threading.Thread | None = None  # a growth ahead in progress
        self.times: NDArray[np.uint32] | None = None

    def keep_times(self) -> None:
        """Keep a time per row from now on (:attr:`times`, the rows so far at 0); caller holds
        the lock. O(capacity) once."""
        if self.times is None:
            self.times = zeroed(self.fps.size, np.uint32)

    @classmethod
    def of_fingerprints(cls, fingerprints: _U64) -> RowStore:
        """A store whose rows 0..n-1 hold the (n,) uint64 ``fingerprints``, all live, without
        keys: for building tables alone (benchmarks), never for an index."""
        rows = cls(threading.RLock())
        rows.fps = np.ascontiguousarray(fingerprints, dtype=np.uint64)
        rows.n = int(rows.fps.size)
        rows._views()
        return rows

    @property
    def capacity(self) -> int:
        """Rows the arrays hold before they must grow."""
        return int(self.fps.size)

    @property
    def grower(self) -> threading.Thread | None:
        """The thread growing the arrays ahead, or None."""
        return self._grower

    def _views(self) -> None:
        self.live_readers = 0  # a new array (or none): no lookup reads it yet
        self.live_epoch += 1
        self.changes.runs_changed()  # cached lookup plans hold the old arrays' addresses
        self.fps_view = self.fps.data
        self.live_view = None if self.live is None else self.live.data

    def nbytes(self) -> int:
        """Bytes of the fingerprint and liveness arrays (by capacity), keys excluded."""
        total = int(self.fps.nbytes)
        if self.times is not None:
            total += int(self.times.nbytes)
        return total if self.live is None else total + int(self.live.nbytes)

    def growth_bytes(self, rows: int, data_bytes: int) -> int:
        """How much :meth:`nbytes` and the key store's bytes may grow when ``rows`` more rows,
        each a new key, with ``data_bytes`` key bytes (terminators included) are appended: the
        arrays at the most capacity they may have after the write and the growth ahead that
        follows it (inline by :meth:`reserve`, or ahead of it in a large store; then by half
        again when a small write leaves them past 7/8 full), the liveness array
        whole while there is none (a replacement in the write creates it), and the key store's
        (:meth:`KeyStore.growth_bytes <permindex.index.keys.store.KeyStore.growth_bytes>`).
        O(log slots)."""
        capacity = int(self.fps.size)
        need = self.n + rows
        large = capacity >= self.tuning.grow_ahead_rows  # grown ahead before the write
        ways = [capacity if need <= capacity else max(next_capacity(need, capacity), 1024)]
        if large:  # grown ahead by a thread the write starts, noting it before or after it
            ways += [ahead_capacity(self.n, rows, capacity), ahead_capacity(need, rows, capacity)]
        grown_capacity = 0
        small = False
        for way in ways:
            # a growth ahead follows a write small beside the capacity it leaves (after_write)
            after = way >= self.tuning.grow_ahead_rows and 8 * rows < way
            small = small or after
            if after and nearly_full(need, way):
                way += way // 2
            grown_capacity = max(grown_capacity, min(way, self.max_rows))
        per_row = self.fps.itemsize + (0 if self.times is None else self.times.itemsize)
        extra = (grown_capacity - capacity) * per_row
        extra += grown_capacity if self.live is None else grown_capacity - capacity
        return extra + self.keys.growth_bytes(rows, data_bytes, large=large, small=small)

    # -- liveness -------------------------------------------------------------------------------

    def read_live(self) -> tuple[NDArray[np.bool_] | None, int]:
        """The liveness mask for a lookup that will read it without the lock, and the epoch to
        give back to :meth:`release_live` (caller holds the lock)."""
        if self.live is not None:
            self.live_readers += 1
        return self.live, self.live_epoch

    def release_live(self, epoch: int) -> None:
        """The end of a :meth:`read_live` reader (caller holds the lock); an epoch of a mask
        since replaced (or -1) releases nothing."""
        if epoch == self.live_epoch and self.live_readers:
            self.live_readers -= 1

    def kill(self, rows: _I64) -> None:
        """Mark ``rows`` ((m,) int64, below n) dead (tombstones), allocating the liveness mask
        on the first death (O(capacity) once)."""
        if self.live is None:
            self.live = zeroed(self.fps.size, np.bool_)
            self.live[: self.n] = True
            self._views()
        elif self.live_readers:
            self.live = self.live.copy()
            self._views()
        self.live[rows] = False

    def live_mask(self, start: int = 0, stop: int | None = None) -> NDArray[np.bool_]:
        """The liveness of rows [start, stop) (stop None: n), as a bool array (a view of
        ``live``, or a new all-True array while every row is live)."""
        end = self.n if stop is None else stop
        if self.live is None:
            return np.ones(max(0, end - start), dtype=bool)
        return self.live[start:end]

    def live_rows(self) -> _I64:
        """Every live row, ascending, (m,) int64. O(n)."""
        if self.live is None:
            return np.arange(self.n, dtype=np.int64)
        return np.flatnonzero(self.live[: self.n]).astype(np.int64)

    # -- appending ------------------------------------------------------------------------------

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more rows: compact first if row numbers would pass
        :attr:`max_rows`, then grow the arrays inline if needed (amortized O(1) per row).

        Raises:
            LimitExceededError: more than :attr:`max_rows` rows would be live.
        """
        if self.n + extra > self.max_rows:
            self.compact()
            if self.n + extra > self.max_rows:
                raise LimitExceededError(
                    f"an index holds at most {self.max_rows} fingerprints",
                    limit=self.max_rows,
                    actual=self.n + extra,
                )
        need = self.n + extra
        capacity = self.fps.size
        if need > capacity:
            capacity = min(max(next_capacity(need, capacity), 1024), self.max_rows)
            self.fps = grown(self.fps, capacity, self.n)
            if self.live is not None:
                self.live = grown(self.live, capacity, self.n)
            self.times = _grown(self.times, capacity, self.n)
            self._views()

    def append(self, data: bytes, value: int, moved_from: int = -1, when: int = 0) -> int:
        """Store the key ``data`` (UTF-8) with fingerprint ``value`` as a new row
        (the key was not stored, or was on the row ``moved_from``, already dead) at time
        ``when`` (kept only with :attr:`times`); returns the row. The caller reserved the
        room."""
        row = self.keys.append(data, moved_from=moved_from)
        assert row == self.n
        self.fps[row] = value
        if self.times is not None:
            self.times[row] = when
        if self.live is not None:
            self.live[row] = True
        self.n = row + 1
        return row

    def append_many(
        self,
        batch: EncodedKeys,
        values: _U64,
        moved_from: _I64 | None,
        times: NDArray[np.uint32] | None = None,
    ) -> int:
        """Store the m distinct keys of ``batch`` (each not stored, or stored on the row
        ``moved_from[i]``, already dead) with the (m,) uint64 ``values`` and (m,) uint32
        ``times`` (kept only with :attr:`times`; None: 0) as new consecutive rows; returns the
        first. Reserves the room itself."""
        m = int(values.size)
        self.reserve(m)
        start = self.n
        first = self.keys.append_many(batch, moved_from)
        assert first == start
        self.fps[start : start + m] = values
        if self.live is not None:
            self.live[start : start + m] = True
        if self.times is not None:
            self.times[start : start + m] = 0 if times is None else times
        self.n = start + m
        return start

    # -- compaction -----------------------------------------------------------------------------

    def compaction_due(self) -> bool:
        """Whether the dead rows outnumber both the live rows and ``compaction_min``."""
        live = len(self.keys)
        return self.n - live > max(self.compaction_min, live)

    def compact(self) -> None:
        """Renumber the live rows 0..m-1 in order (fingerprints and keys), drop the dead ones,
        then call :attr:`on_compact` with the remap. O(n) numpy work."""
        n = self.n
        live_rows = self.live_rows()
        m = int(live_rows.size)
        remap = np.full(n, -1, dtype=np.int64)
        remap[live_rows] = np.arange(m, dtype=np.int64)
        capacity = max(1024, m + m // 4)
        fps = zeroed(capacity, np.uint64)
        fps[:m] = self.fps[live_rows]
        if self.times is not None:
            times = zeroed(capacity, np.uint32)
            times[:m] = self.times[live_rows]
            self.times = times
        self.keys.compact(live_rows)
        self.fps, self.live, self.n = fps, None, m  # every row is live again
        self._views()
        self.compactions += 1
        if self.on_compact is not None:
            self.on_compact(remap)

    # -- growth ahead ---------------------------------------------------------------------------

    def fits(self, rows: int, data_bytes: int) -> bool:
        """Whether ``rows`` more rows with ``data_bytes`` more key bytes fit in the arrays and
        the key store without growing them (caller holds the lock)."""
        return self.n + rows <= self.fps.size and self.keys.fits(rows, data_bytes)

    def growth_wanted(self) -> bool:
        """Whether the arrays or the key store are close to an inline growth (caller holds the
        lock): rows above 7/8 of the capacity, or
        :meth:`~permindex.index.keys.store.KeyStore.growth_wanted`; False below
        ``tuning.grow_ahead_rows`` rows of capacity."""
        if self.fps.size < self.tuning.grow_ahead_rows:
            return False
        return nearly_full(self.n, self.fps.size) or self.keys.growth_wanted()

    def after_write(self, rows: int) -> None:
        """Upkeep after a write of ``rows`` rows, outside the lock: grow ahead unless the write
        was large (an eighth of the capacity or more: a bulk load leaves an eighth of room,
        :func:`~permindex.index.keys.store.next_capacity`, and may be all there is)."""
        if 8 * rows < self.fps.size:
            self.grow_ahead()

    def grow_ahead(self, rows: int = 0, data_bytes: int = 0) -> threading.Thread | None:
        """Start growing the arrays in a background thread when they are close to full, or when
        ``rows`` more rows with ``data_bytes`` key bytes would not fit; returns the thread
        growing them (None: no growth). Takes the lock."""
        grower = self._grower
        if grower is not None:
            return grower
        if not (rows or data_bytes):
            # the common case after a write, seen without the lock: a stale read only defers
            # the check to the next write (arrays swapped by a growth meanwhile: the locked one)
            try:
                settled = self.n < self.fps.size and not self.growth_wanted()
            except IndexError:
                settled = False
            if settled:
                return None
        with self.lock:
            if self._grower is not None:
                return self._grower
            if self.fits(rows, data_bytes) and not self.growth_wanted():
                return None
            grower = threading.Thread(
                target=self._grow, args=(rows, data_bytes), name="permindex-grow", daemon=True
            )
            self._grower = grower
            grower.start()  # under the lock, so that no one joins it before it started
        return grower

    def _grow(self, rows: int, data_bytes: int) -> None:
        """Grow the arrays (by half when above 7/8 full, and so that ``rows`` more fit) and the
        key store (:class:`~permindex.index.keys.store.Growth`) mostly without the lock: the lock
        is taken to note the state (and copy the liveness mask), released while the rows noted
        are copied and the key store's hash table is rebuilt (rows never change once appended),
        and taken again to copy what was appended meanwhile, replay the key store's changes and
        swap the arrays in. A compaction meanwhile abandons it. O(n + key bytes) off the lock,
        O(rows appended meanwhile + journal) under it, plus O(n) for the rows' times (they change
        when a key is renewed) when kept."""
        try:
            with self.lock:
                growth = self.keys.begin_growth(rows, data_bytes)
                start = self.n
                fps = self.fps
                capacity = min(ahead_capacity(start, rows, fps.size), self.max_rows)
                live = None if self.live is None else self.live[:start].copy()
                compactions = self.compactions
            if live is None:
                linked = np.arange(start, dtype=np.int64)
            else:
                linked = np.flatnonzero(live).astype(np.int64)
            KeyStore.prepare_growth(growth, linked)
            new_fps = None
            if capacity > fps.size:
                new_fps = grown(fps, capacity, start)
            with self.lock:
                if self.compactions != compactions:
                    return  # the compaction abandoned the key store's growth too
                self.keys.finish_growth(growth)
                if new_fps is not None and capacity > self.fps.size:
                    n = self.n
                    new_fps[start:n] = self.fps[start:n]
                    if self.live is not None:
                        self.live = grown(self.live, capacity, n)
                    # A row's time changes when its key is renewed: copied under the lock.
                    self.times = _grown(self.times, capacity, n)
                    self.fps = new_fps
                    self._views()
        finally:
            with self.lock:
                self._grower = None

    def await_growth(self, rows: int, data_bytes: int) -> None:
        """Before a write of ``rows`` rows with ``data_bytes`` key bytes, outside the lock: when
        the write would not fit in large arrays, have them grown by :meth:`grow_ahead`'s thread
        and wait for it (only this writer waits; queries go on). A write that still does not
        fit (another writer came first) grows the arrays under the lock (:meth:`reserve`)."""
        if self.fps.size < self.tuning.grow_ahead_rows:
            return
        grower = self.grow_ahead(rows, data_bytes)
        if grower is not None:
            with self.lock:
                fits = self.fits(rows, data_bytes)
            if not fits:
                grower.join()

    def wait_for_growth(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds) for a growth ahead in progress, if any."""
        grower = self._grower
        if grower is not None:
            grower.join(timeout)

    # -- invariants -----------------------------------------------------------------------------

    def _check(self) -> None:
        """Verify the row store's invariants in O(n) (numpy); raise
        :class:`~permindex.index.tables.table.TableCheckError` at the first broken one. Caller holds
        the lock.

        Checked: array sizes, no live flag beyond n, no liveness mask only while every row is
        live, the key store's own invariants, its rows are n and the rows it links are exactly
        the live rows, and the dead rows do not exceed the compaction bound."""
        n = self.n
        _require(self.fps.size >= n, "row arrays shorter than rows")
        keys = self.keys
        if self.live is not None:
            _require(self.live.size == self.fps.size, "liveness and fingerprints differ")
            _require(not self.live[n:].any(), "live flag set beyond the last row")
        else:
            _require(len(keys) == n, "no liveness mask, yet some rows are dead")
        if self.times is not None:
            _require(self.times.size == self.fps.size, "times and fingerprints differ")
            _require(not self.times[n:].any(), "a time set beyond the last row")
        _require(keys.rows == n, f"{keys.rows} keys by row, {n} rows")
        for problem in keys._check():
            _require(False, f"key store: {problem}")
        _require(
            np.array_equal(keys.linked_rows(), np.flatnonzero(self.live_mask())),
            "live rows are not exactly the rows the key store finds",
        )
        dead = n - len(keys)
        _require(
            dead <= max(self.compaction_min, len(keys)), f"{dead} dead rows were not compacted"
        )


def _grown(times: NDArray[np.uint32] | None, capacity: int, n: int) -> NDArray[np.uint32] | None:
    """``times`` (None: None) with its first ``n`` rows copied into a new (capacity,) array
    (:func:`~permindex.index.keys.rows.grown`)."""
    return None if times is None else grown(times, capacity, n)


#: One slice of :func:`export_slices`.
Slice = tuple[_I64, _U8, _U64, NDArray[np.uint32] | None]


def export_slices(rows: RowStore, keys: KeyStore, rows_per_slice: int) -> list[Slice] | None:
    """The live rows in slices of ``rows_per_slice`` rows, each (lengths (m,) int64, key bytes
    each followed by a NUL (b,) uint8, fingerprints (m,) uint64, times (m,) uint32 or None
    without :attr:`RowStore.times`), read from ``keys`` (the key
    store of ``rows``) taking ``rows.lock`` once per slice: the fuzzy export of
    :meth:`permindex.index.Index.export_slices`, which documents the contract. Only the rows
    below ``rows.n`` at the start are read; a compaction meanwhile starts over; after three,
    None is returned (the caller then exports under one acquisition of the lock)."""
    for _attempt in range(3):
        with rows.lock:
            stop = rows.n
            compactions = rows.compactions
        parts: list[Slice] = []
        for start in range(0, stop, rows_per_slice):
            end = min(start + rows_per_slice, stop)
            with rows.lock:
                if rows.compactions != compactions:
                    break
                live = np.flatnonzero(rows.live_mask(start, end)).astype(np.int64)
                live += start
                lengths, blob = keys.export(live)
                times = None if rows.times is None else rows.times[live]
                parts.append((lengths, blob, rows.fps[live], times))
            time.sleep(0)  # locks are not fair: let the threads waiting for it take it
        else:
            return parts
    return None
