"""One table of the permutation index: every stored fingerprint under one permutation, ordered by
its prefix (Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling",
section 3), kept as a small log-structured merge tree.

Layout. The index's row store (:mod:`permindex.index.rows`) owns the fingerprints by row number
((capacity,) uint64) and the liveness mask by row (None while every row is live); a table reads
them through :class:`RowArrays` and stores, per entry, a row number and a 32-bit filter -- 7
bytes (8 from 2^24 rows on):

* frozen runs (:class:`Run`): immutable (m,) uint32 arrays of rows sorted by prefix with the
  (m,) uint32 filters of their fingerprints beside them (the 32 bits of the permuted value after
  the prefix: two fingerprints within k have filters within k, so a query compares filters,
  read sequentially, and reads the fingerprints of the few that pass), each with a directory
  ``offsets`` of 2^r + 1 uint32 over the top r prefix bits (r <= prefix bits, 2^r <= m / 2), so
  the rows whose prefix starts with bucket b are ``rows[offsets[b]:offsets[b + 1]]``. When r
  equals the prefix width the range is exact; otherwise it is a superset that the verification
  of the candidates (:mod:`permindex.index.search.lookup_kernels`) narrows. Runs are
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

Within a prefix, order is unspecified: a query only needs the prefix range, so a run is sorted
by the prefix alone (a radix sort on 16-bit digits).

A table holds candidates; the lookup kernels (:mod:`permindex.index.search.lookup_kernels`) search
its runs and verify every candidate, a single query's memtable candidates included. Removal is
by tombstone: the row store clears the row's live flag and leaves the table alone; a merge
drops dead rows it meets, and :meth:`Table.compact` (called at a compaction of the row store)
renumbers rows and drops all of them. Rows are never reused before a compaction, and a row's
fingerprint never changes, so an entry can be dead but never wrong.

Costs (n entries in the table, L the memtable bound): :meth:`Table.add` O(log L) amortized plus
the share of freezes and merges, O(log n) per row amortized; :meth:`Table.memtable_lookup`
O(log L + entries of the prefix); a merge O(m) numpy work (radix sort) for m rows.
"""

from __future__ import annotations

import sys
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from permindex.index.tables.permutation import Permutation, argsort_prefixes
from permindex.index.tuning import DEFAULT_TUNING, Tuning

__all__ = [
    "DEFAULT_MEMTABLE_LIMIT",
    "MAX_ROWS",
    "ChangeCounters",
    "MemtableArrays",
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
Filters = NDArray[np.uint32]
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


class MemtableArrays(NamedTuple):
    """A memtable as arrays, sorted by prefix (built on demand, cached until it changes)."""

    #: (m,) uint64, the entries' prefixes, non-decreasing.
    prefixes: Fingerprints
    #: (m,) uint32, the entries' rows, in the same order.
    rows: Rows


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


def directory_bits(size: int, prefix_bits: int) -> int:
    """Bits r of a run's directory: the largest r with 2^r <= size / 2 (2 to 4 rows per bucket,
    at most 2 bytes of directory per row), at least 1, at most the prefix width (exact ranges
    once the run is large enough: from 2^17 rows for 16-bit prefixes)."""
    return min(prefix_bits, max(1, size.bit_length() - 2))


class Run:
    """A frozen run: rows sorted by prefix, their filters, and the directory of their prefixes.

    A row number is kept in two arrays, its low 16 bits (uint16) and the rest (uint8 while every
    row of the run is below 2^24, else uint16): 3 bytes per entry instead of 4 up to 16.7
    million rows. A query reads them only for the few candidates whose filter passes.

    Attributes:
        rows: (m,) uint32, sorted by the prefix of their fingerprints (ties in any order); a new
            array on each access (O(m)).
        filters: (m,) uint32, the filter (:meth:`Permutation.filter`) of each row's fingerprint,
            in the same order: a query rejects most candidates by the popcount of the filters'
            XOR, reading this array sequentially, before it reads any fingerprint.
        offsets: (2^r + 1,) uint32; rows with bucket b (the top r prefix bits) are
            ``rows[offsets[b]:offsets[b + 1]]``.
        shift: prefix_bits - r; the bucket of a prefix is ``prefix >> shift``.
    """

    __slots__ = ("filters", "high", "largest_bucket", "low", "offsets", "shift")

    def __init__(
        self,
        rows: Rows | NDArray[np.intp],
        filters: Filters,
        offsets: Rows,
        shift: int,
        *,
        top: int | None = None,
        largest_bucket: int | None = None,
    ) -> None:
        """A run from its parts ((m,) uint32 rows, or intp ones in [0, 2^32)); use
        :meth:`from_sorted` or :meth:`from_unsorted`. ``top``: the largest row, when the
        caller knows it (saves a pass); ``largest_bucket``: the directory's, when known."""
        self.low, self.high = _split_rows(rows, top)
        self.filters = filters
        self.offsets = offsets
        self.shift = shift
        #: Entries of the largest directory bucket: the most candidates one query can meet in
        #: this run (computed here, O(2^r), so that reading it costs nothing later).
        self.largest_bucket = (
            int(np.diff(offsets).max(initial=0)) if largest_bucket is None else largest_bucket
        )

    def shifted(self, first_row: int) -> Run:
        """This run with ``first_row`` added to every row (the run of the same fingerprints
        stored from row ``first_row`` on); the filters and directory are shared."""
        if first_row == 0:
            return self
        rows = self.rows
        top = int(rows.max()) + first_row if rows.size else None
        rows += np.uint32(first_row)
        largest = self.largest_bucket
        return Run(rows, self.filters, self.offsets, self.shift, top=top, largest_bucket=largest)

    @property
    def rows(self) -> Rows:
        """(m,) uint32, the rows in prefix order (a new array)."""
        out = self.high.astype(np.uint32)
        out <<= np.uint32(16)
        out |= self.low
        return out

    @classmethod
    def from_sorted(
        cls, rows: Rows, filters: Filters, sorted_prefixes: Fingerprints, prefix_bits: int
    ) -> Run:
        """A run of (m,) uint32 ``rows`` and their (m,) uint32 ``filters`` already in the order
        of their (m,) uint64 prefixes ``sorted_prefixes`` (non-decreasing, below
        2^prefix_bits), m >= 1. O(2^r log m)."""
        bits = directory_bits(int(rows.size), prefix_bits)
        shift = prefix_bits - bits
        starts = np.arange((1 << bits) + 1, dtype=np.uint64) << np.uint64(shift)
        offsets = np.searchsorted(sorted_prefixes, starts).astype(np.uint32)
        return cls(
            np.ascontiguousarray(rows, dtype=np.uint32),
            np.ascontiguousarray(filters, dtype=np.uint32),
            offsets,
            shift,
        )

    @classmethod
    def from_unsorted(
        cls,
        rows: Rows | None,
        prefixes: Fingerprints | NDArray[np.uint16],
        filters: Filters,
        prefix_bits: int,
        *,
        first_row: int = 0,
    ) -> Run:
        """A run of (m,) uint32 ``rows`` in any order with their (m,) uint64 ``prefixes`` ((m,)
        uint16 ones, possibly a strided view, when prefix_bits <= 16) and (m,) uint32
        ``filters``, m >= 1 (``rows`` None: the consecutive rows from ``first_row``, which
        saves a gather): a stable radix sort by prefix, the directory counted from the
        buckets. O(m); the sort's (m,) intp order is the only temporary of 8 bytes per row
        (the row numbers' two parts are copied out of it, not computed)."""
        m = int(prefixes.size)
        bits = directory_bits(m, prefix_bits)
        shift = prefix_bits - bits
        order = argsort_prefixes(prefixes, prefix_bits)
        if prefixes.dtype == np.uint16:
            buckets: NDArray[np.integer] = prefixes >> shift if shift else prefixes
        else:
            buckets = (prefixes >> np.uint64(shift) if shift else prefixes).astype(np.intp)
        counts = np.bincount(buckets, minlength=1 << bits)
        offsets = np.zeros((1 << bits) + 1, dtype=np.uint32)
        np.cumsum(counts, out=offsets[1:])
        sorted_filters = filters[order]
        if rows is None:
            if first_row:
                order += first_row
            return cls(order, sorted_filters, offsets, shift, top=first_row + m - 1)
        return cls(rows[order], sorted_filters, offsets, shift)

    def __len__(self) -> int:
        return int(self.low.size)

    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return int(self.low.nbytes + self.high.nbytes + self.filters.nbytes + self.offsets.nbytes)


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
        "_view",
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
        # The memtable as arrays, built on demand for batch queries; None when stale.
        self._view: MemtableArrays | None = None

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
        self._view = None
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
        perm = self.permutation
        bits = perm.prefix_bits
        prefixes = (
            perm.prefix_array16(fingerprints) if bits <= 16 else perm.prefix_array(fingerprints)
        )
        return Run.from_unsorted(None, prefixes, perm.filter_array(fingerprints), bits)

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
        self._view = None
        self._memtable_changed()
        if len(self._memtable) > self.memtable_limit:
            self.freeze(rows)

    def freeze(self, rows: RowArrays) -> None:
        """Turn the memtable into a run (dead rows dropped), then merge runs as needed (unless
        :attr:`defer_merges`). O(L) numpy work."""
        view_prefixes, view_rows = self._memtable_arrays(rows)
        live = rows.live
        self._memtable.clear()
        self._memtable_rows = []
        self._view = None
        self._memtable_changed()
        keep = np.ones(view_rows.size, dtype=bool) if live is None else live[view_rows]
        if not keep.all():
            view_rows, view_prefixes = view_rows[keep], view_prefixes[keep]
        if view_rows.size:
            perm = self.permutation
            filters = perm.filter_array(rows.fps[view_rows])
            self._push(Run.from_sorted(view_rows, filters, view_prefixes, perm.prefix_bits), rows)

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
        none), sorted by prefix. Reads only these immutable runs and the rows' fingerprints
        (which never change), so it may run without the index's lock, given a
        :class:`RowSnapshot` taken under it. O(m) numpy work (radix sort) for m rows."""
        fps, live = row_arrays.fps, row_arrays.live
        rows = np.concatenate([run.rows for run in runs])
        filters = np.concatenate([run.filters for run in runs])
        keep = np.ones(rows.size, dtype=bool) if live is None else live[rows]
        if not keep.all():
            rows = rows[keep]
            filters = filters[keep]
        if rows.size == 0:
            return None
        perm = self.permutation
        values = fps[rows]
        # 16-bit prefixes: a strided view of the values, not a (m,) uint64 array more.
        prefixes = (
            perm.prefix_array16(values) if perm.prefix_bits <= 16 else perm.prefix_array(values)
        )
        del values
        return Run.from_unsorted(rows, prefixes, filters, perm.prefix_bits)

    def compact(self, remap: NDArray[np.int64], rows: RowArrays) -> None:
        """Renumber rows: entry ``row`` becomes ``remap[row]`` ((old n,) int64), or is dropped
        where that is negative. ``remap`` must be increasing on the rows it keeps; ``rows``
        holds the index's arrays after renumbering. O(n) numpy work."""
        fps = rows.fps
        bits = self.permutation.prefix_bits
        old_runs, self._runs = self._runs, []
        self.changes.runs_changed()
        for run in old_runs:
            remapped = remap[run.rows]
            kept = remapped >= 0
            new_rows = remapped[kept].astype(np.uint32)
            if new_rows.size:
                # Renumbering keeps the order; the prefixes are those of the same fingerprints.
                prefixes = self.permutation.prefix_array(fps[new_rows])
                fresh = Run.from_sorted(new_rows, run.filters[kept], prefixes, bits)
                self._push(fresh, rows)
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
        self._view = None
        self._memtable_changed()

    # -- reads ------------------------------------------------------------------------------

    def all_rows(self) -> NDArray[np.int64]:
        """Every entry's row (tombstones included), (n,) int64, runs then memtable."""
        parts = [run.rows.astype(np.int64) for run in self._runs]
        parts.append(np.array(self._memtable_rows, dtype=np.int64))
        return np.concatenate(parts)

    def _memtable_arrays(self, row_arrays: RowArrays) -> MemtableArrays:
        """The memtable as arrays sorted by prefix, cached until the memtable changes. Built
        with numpy from the row list: O(m)."""
        if self._view is None:
            rows = np.array(self._memtable_rows, dtype=np.uint32)
            prefixes = self.permutation.prefix_array(row_arrays.fps[rows])
            order = argsort_prefixes(prefixes, self.permutation.prefix_bits)
            self._view = MemtableArrays(prefixes[order], rows[order])
        return self._view

    def _memtable_changed(self) -> None:
        self._memtable_run = None
        self.changes.memtable_changed()

    def memtable_run(self, row_arrays: RowArrays) -> Run | None:
        """The memtable's entries as an immutable :class:`Run` (None when the memtable is
        empty), cached until the memtable changes: what a batch lookup on a read view searches
        (:mod:`permindex.index.search.lookup`). O(L) to build."""
        if self._memtable_run is None and self._memtable_rows:
            prefixes, rows = self._memtable_arrays(row_arrays)
            filters = self.permutation.filter_array(row_arrays.fps[rows])
            bits = self.permutation.prefix_bits
            self._memtable_run = Run.from_sorted(rows, filters, prefixes, bits)
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
        bytes, 4 from 2^24 rows on) and filter (4), and every run's directory at its largest
        (one uint32 per two entries, and one more per run, :func:`directory_bits`). The runs
        may hold less now (a smaller directory share), so this is high by up to about a byte
        an entry; a frozen memtable takes less, and the copies alive while runs merge are not
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
        entry_bytes = 7 if rows <= 1 << 24 else 8
        most = entries * (entry_bytes + 2) + 4 * (len(runs) + 1)
        return memtable + max(0, most - sum(run.nbytes() for run in runs))

    # -- invariants -------------------------------------------------------------------------

    def _check(self, row_arrays: RowArrays) -> NDArray[np.int64]:
        """Verify every invariant of the table in O(n) (numpy) against the index's rows and
        return all entries' rows ((n,) int64, tombstones included) for the index's own checks.
        Raises :class:`TableCheckError` naming the first broken invariant.

        Checked: the memtable is a valid sorted list within its bound, each entry's fingerprint
        and prefix are those of its row, its row list and cached arrays hold the same rows;
        each run is non-empty, its rows are uint32 below ``n_rows``, its filters those of the
        rows' fingerprints, sorted by prefix, its
        directory has the expected width and counts exactly its buckets; each run is more than
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
        if self._view is not None:
            view_prefixes, view_rows = self._view
            _require(
                np.array_equal(np.sort(view_rows), np.sort(fresh_rows))
                and np.array_equal(view_prefixes, perm.prefix_array(fps[view_rows]))
                and bool((view_prefixes[1:] >= view_prefixes[:-1]).all()),
                f"{name}: cached memtable view is stale",
            )
        for i, run in enumerate(self._runs):
            where = f"{name} run {i}"
            _require(len(run) > 0, f"{where}: empty run")
            wide = run.high.dtype == np.uint16
            _require(
                run.low.dtype == np.uint16
                and (wide or run.high.dtype == np.uint8)
                and run.low.size == run.high.size
                and wide == (len(run) > 0 and int(run.rows.max()) >= 1 << 24),
                f"{where}: row parts are {run.low.dtype}, {run.high.dtype}",
            )
            _require(
                run.filters.dtype == np.uint32
                and np.array_equal(run.filters, perm.filter_array(fps[run.rows])),
                f"{where}: filters are not those of the rows' fingerprints",
            )
            _require(bool((run.rows < n_rows).all()), f"{where}: row beyond {n_rows}")
            prefixes = perm.prefix_array(fps[run.rows])
            _require(bool((prefixes[1:] >= prefixes[:-1]).all()), f"{where}: not sorted")
            r = directory_bits(len(run), bits)
            _require(run.shift == bits - r, f"{where}: directory shift {run.shift} != {bits - r}")
            buckets = prefixes >> np.uint64(run.shift)
            expected = np.searchsorted(buckets, np.arange((1 << r) + 1, dtype=np.uint64))
            _require(
                run.offsets.dtype == np.uint32 and np.array_equal(run.offsets, expected),
                f"{where}: directory does not match the rows",
            )
            if i + 1 < len(self._runs):
                _require(
                    len(run) > self.tuning.merge_ratio * len(self._runs[i + 1]),
                    f"{where}: {len(run)} entries, not {self.tuning.merge_ratio}x the next run's "
                    f"{len(self._runs[i + 1])}",
                )
        return self.all_rows()
