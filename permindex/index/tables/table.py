"""One table of the permutation index: every stored fingerprint under one permutation, ordered by
its prefix (Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling",
section 3), kept as a small log-structured merge tree.

Layout. The index's row store (:mod:`permindex.index.rows`) owns the fingerprints by row number
((capacity,) uint64) and the liveness mask by row (None while every row is live); a table reads
them through :class:`RowArrays` and stores, per entry, a row number and a 16-bit filter -- 5
bytes (6 from 2^24 rows on) -- and per run a directory of at most half a byte an entry:

* frozen runs (:class:`Run`): immutable arrays of rows (the low 16 bits as uint16, the rest as
  uint8, or uint16 from 2^24 rows on) sorted by the top r bits of their permuted fingerprints,
  the (m,) uint16 filters beside them, and a directory ``offsets`` of 2^r + 1 uint32 over
  those r bits (:func:`directory_bits`: 8 to 16 entries per bucket, r at most the prefix
  width). The filter of an entry is the 16 permuted bits right after the top r: two
  fingerprints within k have filters within k, so a query compares filters, read
  sequentially, and reads the fingerprints of the few that pass. When r is below the prefix
  width a bucket holds several prefixes and the filter's leading bits are prefix bits, which
  must be equal. ``benchmarks/README.md`` ("Table layout") has the bytes and the lookup speed
  against the former layout (a 32-bit filter after the prefix, 7 bytes an entry). Runs are
  listed oldest first, and each is more than ``merge_ratio`` times larger than the next (a
  knob of :class:`~permindex.index.tuning.Tuning`, 4 by default), so there are at most
  log_4(n) + 1 of them
  (between a write and the merges it triggers, which :mod:`permindex.index.table_set` runs
  outside
  the index's lock with :meth:`Table.pending_merge`, :meth:`Table.merged_runs` and
  :meth:`Table.replace_runs`, a few more);
* a memtable: a ``sortedcontainers.SortedList`` of Python ints
  ``prefix << 96 | fingerprint << 32 | row`` holding recent single additions. It is frozen into a
  run when it holds more than ``memtable_limit`` entries; a batch of at least
  ``direct_run_min`` rows (or ``memtable_limit``, if smaller) becomes a run directly.

A run is built by one compiled counting sort on its r bits
(:mod:`permindex.index.tables.run_kernels`), stable: within a bucket, entries keep the order
they came in, which a query does not need.

A table holds candidates; the lookup kernels (:mod:`permindex.index.search.lookup_kernels`) search
its runs and verify every candidate, a single query's memtable candidates included. Removal is
by tombstone: the row store clears the row's live flag and leaves the table alone; a merge
drops dead rows it meets, and :meth:`Table.compact` (called at a compaction of the row store)
renumbers rows and drops all of them. Rows are never reused before a compaction, and a row's
fingerprint never changes, so an entry can be dead but never wrong.

Costs (n entries in the table, L the memtable bound): :meth:`Table.add` O(log L) amortized plus
the share of freezes and merges, O(log n) per row amortized; :meth:`Table.memtable_lookup`
O(log L + entries of the prefix); a merge O(m + 2^r) (a counting sort) for m rows.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from permindex.index.tables.permutation import (
    FILTER_BITS,
    Permutation,
    directory_bits,
)
from permindex.index.tuning import DEFAULT_TUNING, Tuning

__all__ = [
    "DEFAULT_MEMTABLE_LIMIT",
    "MAX_ROWS",
    "ChangeCounters",
    "RowArrays",
    "RowSnapshot",
    "Run",
    "Table",
    "TableCheckError",
    "directory_bits",
]

#: Default bound of a memtable, entries; above it the memtable is frozen into a run.
DEFAULT_MEMTABLE_LIMIT = 8192
#: Row numbers are stored as uint32 (and the key store's slots hold row + 1).
MAX_ROWS = (1 << 32) - 1

_LITTLE_ENDIAN = sys.byteorder == "little"
_ROW_MASK = (1 << 32) - 1
_FP_MASK = (1 << 64) - 1
_FP_SHIFT = 32
_PREFIX_SHIFT = 96
# Python int size of a memtable entry (~128 bits) plus its pointer in the SortedList.
_MEMTABLE_ENTRY_BYTES = 52 + 8

Rows = NDArray[np.uint32]
Filters = NDArray[np.uint16]
Fingerprints = NDArray[np.uint64]
#: The index's liveness mask by row, or None when every row is live (nothing was removed or
#: replaced since the last compaction).
Live = NDArray[np.bool_] | None


class RowArrays(Protocol):
    """What a table reads of the index's rows (a
    :class:`~permindex.index.rows.RowStore`, or a :class:`RowSnapshot` of one)."""

    @property
    def fps(self) -> Fingerprints:
        """(capacity,) uint64, the fingerprint of each row."""

    @property
    def live(self) -> Live:
        """(capacity,) bool, whether each row is live; None while every row is."""

    @property
    def n(self) -> int:
        """Rows in use."""


class RowSnapshot(NamedTuple):
    """The row arrays as they were when taken under the index's lock: what a merge outside the
    lock reads (rows below ``n`` never change; a compaction meanwhile voids the merge)."""

    fps: Fingerprints
    live: Live
    n: int


class ChangeCounters:
    """How often the tables of one index (and its row arrays) changed: what the lookup caches of
    :mod:`permindex.index.search.lookup` and the merge check of
    :mod:`permindex.index.table_set` compare with the count they were made at. One object is
    shared by the index's tables and its :class:`~permindex.index.rows.RowStore`.

    Attributes:
        runs: changes of the frozen runs (a run pushed, merged or renumbered) and of the row
            arrays (a new fingerprint or liveness array: cached plans hold their addresses).
        memtable: changes of a memtable (an entry added, the memtable frozen or renumbered).
        total: ``runs + memtable``, kept as its own count so that the single-query cache
            checks one attribute.
    """

    __slots__ = ("memtable", "runs", "total")

    def __init__(self) -> None:
        self.runs = 0
        self.memtable = 0
        self.total = 0

    def __repr__(self) -> str:
        return f"ChangeCounters(runs={self.runs}, memtable={self.memtable}, total={self.total})"

    def runs_changed(self) -> None:
        """Count a change of the runs or of the row arrays."""
        self.runs += 1
        self.total += 1

    def memtable_changed(self) -> None:
        """Count a change of a memtable."""
        self.memtable += 1
        self.total += 1


class TableCheckError(AssertionError):
    """An invariant of a table or of the index does not hold (raised by ``_check``)."""


def _require(condition: bool | np.bool_, message: str) -> None:
    if not condition:
        raise TableCheckError(message)


_build: ModuleType | None = None
_build_lock = threading.Lock()


def _kernel() -> ModuleType:
    """The run-building kernel (:mod:`permindex.index.tables.run_kernels`), imported on first
    use (numba is loaded then, not by ``import permindex``)."""
    global _build
    if _build is None:
        with _build_lock:
            if _build is None:
                from permindex.index.tables import run_kernels

                _build = run_kernels
    return _build


class Run:
    """A frozen run: its entries sorted by the top r bits of their permuted fingerprints (r:
    the directory bits, :func:`directory_bits`), each entry a row number and a 16-bit filter,
    and the directory of those r bits.

    A row number is kept in two arrays, its low 16 bits (uint16) and the rest (uint8 while every
    row of the run is below 2^24, else uint16): 3 bytes per entry instead of 4 up to 16.7
    million rows. A query reads them only for the few candidates whose filter passes.

    Attributes:
        rows: (m,) uint32, the rows in directory order (ties in input order); a new array on
            each access (O(m)).
        filters: (m,) uint16, the filter (:meth:`Permutation.filter` with r bits) of each row's
            fingerprint, in the same order: the 16 permuted bits after the top r. A query
            rejects most candidates by these, read sequentially, before it reads any
            fingerprint: a filter more than k bits from the query's, or (when r is below the
            prefix width) not equal to it on the prefix bits it holds.
        offsets: (2^r + 1,) uint32; the entries whose permuted fingerprints start with the r
            bits b are ``offsets[b]:offsets[b + 1]``.
        bits: r, 1 <= r (:func:`directory_bits` stops at the prefix width; the kernels also
            read a directory past it, whose extra bits a query compares bucket by bucket).
        largest_bucket: entries of the largest prefix's range (the directory buckets a query
            scans): the most candidates one query can meet in this run.
    """

    __slots__ = ("bits", "filters", "high", "largest_bucket", "low", "offsets")

    def __init__(
        self,
        rows: Rows | NDArray[np.intp],
        filters: Filters,
        offsets: Rows,
        bits: int,
        prefix_bits: int,
        *,
        top: int | None = None,
        largest_bucket: int | None = None,
    ) -> None:
        """A run from its parts ((m,) uint32 rows, or intp ones in [0, 2^32), in directory
        order); use :meth:`build`. ``top``: the largest row, when the caller knows it (saves a
        pass); ``largest_bucket``: when known. O(m + 2^r)."""
        self.low, self.high = _split_rows(rows, top)
        self.filters = filters
        self.offsets = offsets
        self.bits = bits
        #: Entries of the largest prefix's range (computed here, O(2^r), so that reading it
        #: costs nothing later).
        self.largest_bucket = (
            _largest_range(offsets, max(0, bits - prefix_bits))
            if largest_bucket is None
            else largest_bucket
        )

    def shifted(self, first_row: int) -> Run:
        """This run with ``first_row`` added to every row (the run of the same fingerprints
        stored from row ``first_row`` on); the filters and directory are shared."""
        if first_row == 0:
            return self
        rows = self.rows
        top = int(rows.max()) + first_row if rows.size else None
        rows += np.uint32(first_row)
        run = Run.__new__(Run)
        run.low, run.high = _split_rows(rows, top)
        run.filters, run.offsets, run.bits = self.filters, self.offsets, self.bits
        run.largest_bucket = self.largest_bucket
        return run

    @property
    def rows(self) -> Rows:
        """(m,) uint32, the rows in directory order (a new array)."""
        out = self.high.astype(np.uint32)
        out <<= np.uint32(16)
        out |= self.low
        return out

    @classmethod
    def build(
        cls,
        values: Fingerprints,
        rows: Rows | None,
        permutation: Permutation,
        *,
        first_row: int = 0,
    ) -> Run:
        """The run of m >= 1 entries: ``values`` (m,) uint64 their fingerprints, ``rows`` (m,)
        uint32 their rows (None: the consecutive rows from ``first_row``), in any order, in
        ``permutation``'s table. One compiled counting sort by the top r bits
        (:func:`permindex.index.tables.run_kernels.build_run`): O(m + 2^r), no temporary of
        the run's size."""
        m = int(values.size)
        bits = directory_bits(m, permutation.prefix_bits)
        top = first_row + m - 1 if rows is None else (int(rows.max()) if m else 0)
        offsets = np.zeros((1 << bits) + 1, dtype=np.uint32)
        low = np.empty(m, dtype=np.uint16)
        narrow = top < 1 << 24
        high8 = np.empty(m if narrow else 0, dtype=np.uint8)
        high16 = np.empty(0 if narrow else m, dtype=np.uint16)
        filters = np.empty(m, dtype=np.uint16)
        _kernel().build_run(
            np.ascontiguousarray(values, dtype=np.uint64),
            _NO_ROWS if rows is None else np.ascontiguousarray(rows, dtype=np.uint32),
            first_row,
            _moves(permutation),
            bits,
            offsets,
            low,
            high8,
            high16,
            filters,
        )
        run = cls.__new__(cls)
        run.low, run.high = low, high8 if narrow else high16
        run.filters, run.offsets, run.bits = filters, offsets, bits
        run.largest_bucket = _largest_range(offsets, max(0, bits - permutation.prefix_bits))
        return run

    def __len__(self) -> int:
        return int(self.low.size)

    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return int(self.low.nbytes + self.high.nbytes + self.filters.nbytes + self.offsets.nbytes)


_NO_ROWS = np.zeros(0, dtype=np.uint32)


def _largest_range(offsets: Rows, sub_bits: int) -> int:
    """Entries of the largest range of 2^``sub_bits`` consecutive buckets (one prefix's) of a
    directory. O(2^r)."""
    ends = offsets[:: 1 << sub_bits] if sub_bits else offsets
    return int(np.diff(ends).max(initial=0))


def _moves(permutation: Permutation) -> NDArray[np.int64]:
    """The permutation's ``(shift, mask, target)`` moves as a (W, 3) int64 array (masks as
    int64 bits), for the kernels."""
    ops = permutation.permute_ops
    out = np.zeros((len(ops), 3), dtype=np.int64)
    for i, (shift, mask, target) in enumerate(ops):
        out[i] = (shift, mask - (1 << 64) if mask >= 1 << 63 else mask, target)
    return out


def _split_rows(
    rows: NDArray[np.integer], top: int | None = None
) -> tuple[NDArray[np.uint16], NDArray[np.uint8] | NDArray[np.uint16]]:
    """The two parts of (m,) row numbers in [0, 2^32) (uint32 or intp): the low 16 bits as
    (m,) uint16, the rest as (m,) uint8 when every row is below 2^24 (else uint16). ``top``:
    the largest row, if known. On a little-endian machine the parts are strided copies of the
    rows' own bytes (no shift, no temporary)."""
    if top is None:
        top = int(rows.max()) if rows.size else 0
    narrow = top < 1 << 24
    width = rows.dtype.itemsize
    if _LITTLE_ENDIAN and width in (4, 8) and rows.flags.c_contiguous:
        words = rows.view(np.uint16)
        low = words[:: width // 2].copy()
        high: NDArray[np.uint8] | NDArray[np.uint16] = (
            rows.view(np.uint8)[2::width].copy() if narrow else words[1 :: width // 2].copy()
        )
        return low, high
    low = rows.astype(np.uint16)  # truncation: the low 16 bits
    shifted = rows >> 16
    return low, shifted.astype(np.uint8) if narrow else shifted.astype(np.uint16)


class Table:
    """One permuted table: the rows of the index under one :class:`Permutation`, by prefix.

    Not thread-safe on its own; the index serializes access. The methods that freeze, merge,
    renumber or read the memtable as arrays are given the index's rows (:class:`RowArrays`:
    the fingerprint and liveness arrays by row), which they only read.
    """

    __slots__ = (
        "_memtable",
        "_memtable_rows",
        "_memtable_run",
        "_runs",
        "changes",
        "defer_merges",
        "memtable_limit",
        "permutation",
        "tuning",
    )

    def __init__(
        self,
        permutation: Permutation,
        memtable_limit: int = DEFAULT_MEMTABLE_LIMIT,
        changes: ChangeCounters | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ):
        self.permutation = permutation
        #: The knobs read here: ``direct_run_min`` and ``merge_ratio``.
        self.tuning = tuning
        self.memtable_limit = memtable_limit
        #: The change counters, possibly shared by the tables of one index
        #: (:class:`ChangeCounters`).
        self.changes = ChangeCounters() if changes is None else changes
        # The memtable as a run of its own (batch lookups on a read view), or None when stale.
        self._memtable_run: Run | None = None
        #: When True, a pushed run is only appended; the owner merges (:meth:`pending_merge`,
        #: :meth:`merged_runs`, :meth:`replace_runs`).
        self.defer_merges = False
        self._memtable = SortedList()
        # The memtable's rows in insertion order, so that batch queries and freezing build its
        # arrays with numpy instead of iterating over the SortedList.
        self._memtable_rows: list[int] = []
        self._runs: list[Run] = []

    def __len__(self) -> int:
        """Entries, tombstones of dead rows included."""
        return len(self._memtable) + sum(len(run) for run in self._runs)

    @property
    def memtable_size(self) -> int:
        """Entries in the memtable."""
        return len(self._memtable)

    @property
    def run_sizes(self) -> tuple[int, ...]:
        """Entries of each frozen run, oldest (largest) first."""
        return tuple(len(run) for run in self._runs)

    # -- writes -----------------------------------------------------------------------------

    def add(self, row: int, fingerprint: int, rows: RowArrays) -> None:
        """Insert ``row`` (whose fingerprint ``rows.fps[row]`` is ``fingerprint``) into the
        memtable; freeze the memtable when it grows past the bound. O(log L) amortized."""
        ops = self.permutation.prefix_ops
        if len(ops) == 1:  # one run of bits (every table of (4, 1)): no call
            source, mask, target = ops[0]
            prefix = ((fingerprint >> source) & mask) << target
        else:
            prefix = self.permutation.prefix(fingerprint)
        self._memtable.add((prefix << _PREFIX_SHIFT) | (fingerprint << _FP_SHIFT) | row)
        memtable_rows = self._memtable_rows
        memtable_rows.append(row)
        self._memtable_run = None  # what _memtable_changed does, without its call
        changes = self.changes  # changes.memtable_changed(), without its call
        changes.memtable += 1
        changes.total += 1
        if len(memtable_rows) > self.memtable_limit:
            self.freeze(rows)

    def direct_run(self, count: int) -> bool:
        """Whether a batch of ``count`` rows becomes a run of its own (else the memtable)."""
        return count >= min(self.tuning.direct_run_min, self.memtable_limit)

    def prepare_run(self, fingerprints: Fingerprints) -> Run:
        """The run of a batch of (m,) uint64 fingerprints as rows 0..m-1 (a radix sort, O(m): no
        table state is read, so the index builds it before it takes its lock, possibly in
        another thread); :meth:`add_many` shifts it."""
        return Run.build(fingerprints, None, self.permutation)

    def add_many(
        self,
        first_row: int,
        count: int,
        rows: RowArrays,
        prepared: Run | None = None,
    ) -> None:
        """Insert the ``count`` consecutive rows from ``first_row`` (fingerprints already in
        ``rows.fps``). A batch of at least min(``tuning.direct_run_min``, ``memtable_limit``) rows
        becomes a run directly (radix sort by prefix, or ``prepared``, the
        :meth:`prepare_run` of exactly these fingerprints); a smaller one goes to the
        memtable."""
        if count == 0:
            return
        fingerprints = rows.fps[first_row : first_row + count]
        perm = self.permutation
        if self.direct_run(count):
            if prepared is None:
                prepared = self.prepare_run(fingerprints)
            self._push(prepared.shifted(first_row), rows)
            return
        prefixes = perm.prefix_array(fingerprints)
        self._memtable.update(
            [
                (p << _PREFIX_SHIFT) | (f << _FP_SHIFT) | r
                for p, f, r in zip(
                    prefixes.tolist(),
                    fingerprints.tolist(),
                    range(first_row, first_row + count),
                    strict=True,
                )
            ]
        )
        self._memtable_rows.extend(range(first_row, first_row + count))
        self._memtable_changed()
        if len(self._memtable) > self.memtable_limit:
            self.freeze(rows)

    def freeze(self, rows: RowArrays) -> None:
        """Turn the memtable into a run (dead rows dropped), then merge runs as needed (unless
        :attr:`defer_merges`). O(L) work."""
        view_rows = np.array(self._memtable_rows, dtype=np.uint32)
        live = rows.live
        self._memtable.clear()
        self._memtable_rows = []
        self._memtable_changed()
        if live is not None:
            view_rows = view_rows[live[view_rows]]
        if view_rows.size:
            self._push(Run.build(rows.fps[view_rows], view_rows, self.permutation), rows)

    def _push(self, run: Run, rows: RowArrays) -> None:
        self._runs.append(run)
        self.changes.runs_changed()
        if self.defer_merges:
            return
        while (pair := self.pending_merge()) is not None:
            self.replace_runs(pair, self.merged_runs(pair, rows))

    def pending_merge(self) -> tuple[Run, Run] | None:
        """The newest adjacent (older, newer) runs that break the size ratio (the older one is
        at most ``tuning.merge_ratio`` times larger), or None."""
        runs = self._runs
        ratio = self.tuning.merge_ratio
        for i in range(len(runs) - 2, -1, -1):
            if len(runs[i]) <= ratio * len(runs[i + 1]):
                return runs[i], runs[i + 1]
        return None

    def replace_runs(self, runs: tuple[Run, ...], merged: Run | None) -> bool:
        """Replace the consecutive ``runs`` (the same objects, in order) by ``merged`` (None: by
        nothing); False, and no change, when they are no longer consecutive here."""
        current = self._runs
        width = len(runs)
        for i in range(len(current) - width + 1):
            if all(current[i + j] is run for j, run in enumerate(runs)):
                current[i : i + width] = [] if merged is None else [merged]
                self.changes.runs_changed()
                return True
        return False

    @property
    def runs(self) -> tuple[Run, ...]:
        """The frozen runs, oldest first."""
        return tuple(self._runs)

    def merged_runs(self, runs: tuple[Run, ...], row_arrays: RowArrays) -> Run | None:
        """The run holding the rows of ``runs`` that ``row_arrays.live`` says are live (None if
        none), sorted anew (:meth:`Run.build`). Reads only these immutable runs and the rows'
        fingerprints (which never change), so it may run without the index's lock, given a
        :class:`RowSnapshot` taken under it. O(m) for m rows."""
        fps, live = row_arrays.fps, row_arrays.live
        rows = np.concatenate([run.rows for run in runs])
        if live is not None:
            rows = rows[live[rows]]
        if rows.size == 0:
            return None
        return Run.build(fps[rows], rows, self.permutation)

    def compact(self, remap: NDArray[np.int64], rows: RowArrays) -> None:
        """Renumber rows: entry ``row`` becomes ``remap[row]`` ((old n,) int64), or is dropped
        where that is negative. ``remap`` must be increasing on the rows it keeps; ``rows``
        holds the index's arrays after renumbering. O(n) work."""
        fps = rows.fps
        old_runs, self._runs = self._runs, []
        self.changes.runs_changed()
        for run in old_runs:
            remapped = remap[run.rows]
            new_rows = remapped[remapped >= 0].astype(np.uint32)
            del remapped
            if new_rows.size:
                self._push(Run.build(fps[new_rows], new_rows, self.permutation), rows)
        if self._memtable:
            entries = list(self._memtable)
            old_rows = np.fromiter((e & _ROW_MASK for e in entries), np.int64, len(entries))
            new_rows_list = remap[old_rows].tolist()
            self._memtable = SortedList(
                ((e >> _FP_SHIFT) << _FP_SHIFT) | r
                for e, r in zip(entries, new_rows_list, strict=True)
                if r >= 0
            )
            remapped_rows = remap[np.array(self._memtable_rows, dtype=np.int64)]
            self._memtable_rows = remapped_rows[remapped_rows >= 0].tolist()
        self._memtable_changed()

    # -- reads ------------------------------------------------------------------------------

    def all_rows(self) -> NDArray[np.int64]:
        """Every entry's row (tombstones included), (n,) int64, runs then memtable."""
        parts = [run.rows.astype(np.int64) for run in self._runs]
        parts.append(np.array(self._memtable_rows, dtype=np.int64))
        return np.concatenate(parts)

    def _memtable_changed(self) -> None:
        self._memtable_run = None
        self.changes.memtable_changed()

    def memtable_run(self, row_arrays: RowArrays) -> Run | None:
        """The memtable's entries as an immutable :class:`Run` (None when the memtable is
        empty), cached until the memtable changes: what a batch lookup on a read view searches
        (:mod:`permindex.index.search.lookup`). O(L) to build."""
        if self._memtable_run is None and self._memtable_rows:
            rows = np.array(self._memtable_rows, dtype=np.uint32)
            self._memtable_run = Run.build(row_arrays.fps[rows], rows, self.permutation)
        return self._memtable_run

    def memtable_lookup(self, query: int, candidates: list[int]) -> None:
        """Append to ``candidates`` the row of every memtable entry with the prefix of
        ``query`` (an int in [0, 2^64)): a bisection, O(log L + entries)."""
        if self._memtable_rows:
            prefix = self.permutation.prefix(query)
            memtable = self._memtable
            lo = memtable.bisect_left(prefix << _PREFIX_SHIFT)
            hi = memtable.bisect_left((prefix + 1) << _PREFIX_SHIFT)
            for entry in memtable.islice(lo, hi):
                candidates.append(entry & _ROW_MASK)

    def memory_bytes(self) -> int:
        """Estimated bytes: run arrays plus memtable entries."""
        return sum(run.nbytes() for run in self._runs) + len(self._memtable) * (
            _MEMTABLE_ENTRY_BYTES
        )

    def growth_bytes(self, count: int, rows: int) -> int:
        """How much :meth:`memory_bytes` may grow when a batch of ``count`` rows is added, the
        index then holding ``rows`` rows: ``count`` memtable entries, and, for a batch that
        becomes a run (:meth:`direct_run`) or a memtable that freezes into one, what takes the
        runs to the most they can hold after it and its merges -- every entry at its row (3
        bytes, 4 from 2^24 rows on) and filter (2), and every run's directory at its largest
        (a uint32 per 8 entries, and 3 more per run, :func:`directory_bits`). The runs may hold
        less now (buckets of up to 16 or 32 entries), so this is high by up to about half a
        byte an entry; a frozen memtable takes less, and the copies alive while runs merge are
        not
        counted. O(runs)."""
        if count <= 0:
            return 0
        memtable = 0
        if not self.direct_run(count):
            memtable = count * _MEMTABLE_ENTRY_BYTES
            if len(self._memtable) + count <= self.memtable_limit:
                return memtable
            count += len(self._memtable)  # frozen into a run (its ints freed: not subtracted)
        runs = self._runs
        entries = sum(len(run) for run in runs) + count
        entry_bytes = FILTER_BITS // 8 + (3 if rows <= 1 << 24 else 4)
        most = entries * entry_bytes + (entries + 1) // 2 + 13 * (len(runs) + 1)
        return memtable + max(0, most - sum(run.nbytes() for run in runs))

    # -- invariants -------------------------------------------------------------------------

    def _check(self, row_arrays: RowArrays) -> NDArray[np.int64]:
        """Verify every invariant of the table in O(n) (numpy) against the index's rows and
        return all entries' rows ((n,) int64, tombstones included) for the index's own checks.
        Raises :class:`TableCheckError` naming the first broken invariant.

        Checked: the memtable is a valid sorted list within its bound, each entry's fingerprint
        and prefix are those of its row, its row list holds the same rows; each run is
        non-empty, its rows below ``n_rows`` in two parts of the width their largest needs,
        sorted by the top r bits of their permuted fingerprints (r: :func:`directory_bits`),
        its filters those of the rows' fingerprints, its directory counts exactly its buckets
        and its largest prefix range is the one it records; each run is more than
        ``tuning.merge_ratio`` times larger than the next."""
        fps, n_rows = row_arrays.fps, row_arrays.n
        perm = self.permutation
        bits = perm.prefix_bits
        name = f"table {perm.table} {perm.leading_blocks}"
        self._memtable._check()
        _require(
            len(self._memtable) <= self.memtable_limit,
            f"{name}: memtable has {len(self._memtable)} entries > limit {self.memtable_limit}",
        )
        entries = list(self._memtable)
        if entries:
            rows = np.fromiter((e & _ROW_MASK for e in entries), np.int64, len(entries))
            _require(bool((rows < n_rows).all()), f"{name}: memtable row beyond {n_rows}")
            stored = np.fromiter(((e >> _FP_SHIFT) & _FP_MASK for e in entries), np.uint64)
            _require(
                bool((stored == fps[rows]).all()),
                f"{name}: memtable entry holds a fingerprint that is not its row's",
            )
            prefixes = np.fromiter((e >> _PREFIX_SHIFT for e in entries), np.uint64)
            _require(
                bool((prefixes == perm.prefix_array(stored)).all()),
                f"{name}: memtable entry holds a wrong prefix",
            )
        fresh_rows = np.fromiter((e & _ROW_MASK for e in entries), np.uint32, len(entries))
        _require(
            np.array_equal(np.sort(np.array(self._memtable_rows, np.uint32)), np.sort(fresh_rows)),
            f"{name}: memtable row list differs from the memtable",
        )
        for i, run in enumerate(self._runs):
            where = f"{name} run {i}"
            _require(len(run) > 0, f"{where}: empty run")
            run_rows = run.rows
            wide = run.high.dtype == np.uint16
            _require(
                run.low.dtype == np.uint16
                and (wide or run.high.dtype == np.uint8)
                and run.low.size == run.high.size
                and wide == (int(run_rows.max()) >= 1 << 24),
                f"{where}: row parts are {run.low.dtype}, {run.high.dtype}",
            )
            _require(bool((run_rows < n_rows).all()), f"{where}: row beyond {n_rows}")
            r = directory_bits(len(run), bits)
            _require(run.bits == r, f"{where}: directory bits {run.bits} != {r}")
            permuted = perm.permute_array(fps[run_rows])
            _require(
                run.filters.dtype == np.uint16
                and np.array_equal(run.filters, perm.filter_array(fps[run_rows], r)),
                f"{where}: filters are not those of the rows' fingerprints",
            )
            buckets = permuted >> np.uint64(64 - r)
            _require(bool((buckets[1:] >= buckets[:-1]).all()), f"{where}: not sorted")
            expected = np.searchsorted(buckets, np.arange((1 << r) + 1, dtype=np.uint64))
            _require(
                run.offsets.dtype == np.uint32 and np.array_equal(run.offsets, expected),
                f"{where}: directory does not match the rows",
            )
            _require(
                run.largest_bucket == _largest_range(run.offsets, max(0, r - bits)),
                f"{where}: largest bucket {run.largest_bucket} is stale",
            )
            if i + 1 < len(self._runs):
                _require(
                    len(run) > self.tuning.merge_ratio * len(self._runs[i + 1]),
                    f"{where}: {len(run)} entries, not {self.tuning.merge_ratio}x the next run's "
                    f"{len(self._runs[i + 1])}",
                )
        return self.all_rows()
