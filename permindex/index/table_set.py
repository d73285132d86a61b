"""The runs of the index's tables: building a batch's sorted run for every table (in threads
for a large batch, before the index's lock is taken), writing rows into every table, merging runs
outside the lock, renumbering every table at a compaction, and the invariants that tie the
tables to the rows (each live row once per table).

One sorted table per permutation is the layout of Manku, Jain & Das Sarma 2007, section 3; each
:class:`~permindex.index.tables.table.Table` approximates it with a memtable and a few sorted runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from numpy.typing import NDArray

from permindex.index.rows import RowStore
from permindex.index.tables.table import (
    ChangeCounters,
    RowSnapshot,
    Run,
    Table,
    TableCheckError,
)

__all__ = ["TableSet"]

_U64 = NDArray[np.uint64]


class TableSet:
    """The tables of one index (one per permutation, in the design's order) over its
    :class:`~permindex.index.rows.RowStore`.

    Every method but :meth:`prepare`, :meth:`building`, :meth:`merge_pending` and
    :meth:`merge_all` is called with the index's lock held (``rows.lock``); those four take it
    themselves where they read or change a table, and sort or merge without it.

    The knobs of ``rows.tuning`` (:class:`~permindex.index.tuning.Tuning`) read here:
    ``parallel_min``, ``build_threads`` and ``merge_all_min_share``.

    Attributes:
        tables: the :class:`~permindex.index.tables.table.Table` objects (their merges deferred to
            this object, which runs them outside the lock).
        rows: the row store the tables index.
        last_write: ``time.monotonic()`` of the last write (:meth:`merge_all`'s idle test).
    """

    __slots__ = ("_changes", "_merging", "_settled", "last_write", "rows", "tables")

    def __init__(self, tables: list[Table], rows: RowStore) -> None:
        self.tables = tables
        self.rows = rows
        for table in tables:
            table.defer_merges = True  # merged by merge_pending, outside the lock
        rows.on_compact = self.renumber
        self._merging = False  # one thread merges at a time
        # The tables' run-change count (Table.changes.runs, summed) when merge_pending last found
        # no merge pending: until a run changes, none can be (a single add changes none).
        self._settled = -1
        shared = bool(tables) and all(table.changes is tables[0].changes for table in tables)
        self._changes: ChangeCounters | None = tables[0].changes if shared else None
        self.last_write = time.monotonic()

    # -- writes (under the lock) ----------------------------------------------------------------

    def add(self, row: int, value: int) -> None:
        """Insert ``row`` (fingerprint ``value``, already stored) into every table."""
        rows = self.rows
        for table in self.tables:
            table.add(row, value, rows)

    def add_many(self, start: int, count: int, prepared: list[Run] | None = None) -> None:
        """Insert the ``count`` consecutive rows from ``start`` into every table (``prepared``:
        each table's :meth:`~permindex.index.tables.table.Table.prepare_run` of exactly their
        fingerprints, in table order, or None)."""
        rows = self.rows
        for t, table in enumerate(self.tables):
            table.add_many(start, count, rows, None if prepared is None else prepared[t])

    def renumber(self, remap: NDArray[np.int64]) -> None:
        """Renumber every table after a compaction of the rows (``remap``: (old n,) int64, the
        new row of each old one, -1 for a dropped row); the row store calls it."""
        rows = self.rows
        for table in self.tables:
            table.compact(remap, rows)

    def nbytes(self) -> int:
        """Estimated bytes of every table (runs and memtable entries)."""
        return sum(table.memory_bytes() for table in self.tables)

    def growth_bytes(self, count: int, rows: int) -> int:
        """How much :meth:`nbytes` may grow when a batch of ``count`` rows is added, the index
        then holding ``rows`` rows (:meth:`~permindex.index.tables.table.Table.growth_bytes`
        of every table). O(tables + runs)."""
        return sum(table.growth_bytes(count, rows) for table in self.tables)

    # -- building runs (before the lock) --------------------------------------------------------

    def prepare(self, values: _U64) -> list[Run]:
        """Each table's run of the (n,) uint64 ``values`` (as rows 0..n-1): in other threads for
        a large batch (:meth:`building`), else in this one. O(n) per table; reads no table
        state, so the caller need not hold the lock."""
        with self.building(values) as runs:
            if runs is not None:
                return runs()
        return [table.prepare_run(values) for table in self.tables]

    @contextmanager
    def building(self, values: _U64) -> Iterator[Callable[[], list[Run]] | None]:
        """Start building each table's run of the (n,) uint64 ``values`` (radix sorts, which
        release the GIL) in up to ``tuning.build_threads`` threads named ``permindex-build``,
        when n is at least ``tuning.parallel_min`` and the batch becomes runs directly; yields a
        function that waits for the runs (in table order), or None when nothing was started.
        The caller does other work meanwhile; leaving the block waits for the threads."""
        tables = self.tables
        n = int(values.size)
        tuning = self.rows.tuning
        if n < tuning.parallel_min or not tables[0].direct_run(n):
            yield None
            return
        workers = max(1, min(tuning.build_threads, len(tables)))
        pool = ThreadPoolExecutor(workers, thread_name_prefix="permindex-build")
        try:
            futures = [pool.submit(table.prepare_run, values) for table in tables]
            yield lambda: [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # -- merging (outside the lock) -------------------------------------------------------------

    def merge_pending(self) -> None:
        """Merge the tables' runs that break the size ratio, without holding the lock while
        merging: runs are immutable and a row's fingerprint never changes, so a merge reads a
        consistent picture; the merged run replaces its two inputs under the lock, unless a
        compaction (which renumbers rows) happened meanwhile. One thread merges at a time; it
        goes on until no merge is pending, so when the write that called this returns, every
        table satisfies its ratio (if no other thread is still writing). Readers query the
        unmerged runs meanwhile, which hold the same rows."""
        rows = self.rows
        if self._run_changes() == self._settled:
            return  # no run changed since none was pending (read without the lock: a write
            # that changes runs checks again after it)
        while True:
            with rows.lock:
                if self._merging:
                    return  # another thread merges, and will pick up what this write left
                for table in self.tables:
                    pair = table.pending_merge()
                    if pair is not None:
                        break
                else:
                    self._settled = self._run_changes()
                    return
                self._merging = True
                snapshot = RowSnapshot(rows.fps, rows.live, rows.n)
                compactions = rows.compactions
            swapped = self._merge_unlocked(table, pair, snapshot, compactions)
            if not swapped and rows.compactions == compactions:  # pragma: no cover - defensive
                return

    def _run_changes(self) -> int:
        """The tables' count of run changes
        (:attr:`~permindex.index.tables.table.Table.changes`)."""
        if self._changes is not None:  # shared by the tables, as the Index has it
            return self._changes.runs
        return sum(table.changes.runs for table in self.tables)

    def merge_all(self, idle: float = 0.0, min_share: float | None = None) -> bool:
        """Merge a table's frozen runs and memtable into one sorted run when at least
        ``min_share`` (None: ``tuning.merge_all_min_share``) of its entries lie outside its
        largest run; one table at a time, each
        merged without the lock and swapped in under it (see
        :meth:`permindex.index.Index.merge_all_runs`). Stops when a write came within ``idle``
        seconds (checked before each table) or another merge is running. Returns whether a
        table was merged or its memtable frozen."""
        rows = self.rows
        share = rows.tuning.merge_all_min_share if min_share is None else min_share
        merged = False
        for table in self.tables:
            with rows.lock:
                if self._merging or time.monotonic() - self.last_write < idle:
                    break
                sizes = table.run_sizes
                total = sum(sizes) + table.memtable_size
                outside = total - max(sizes, default=0)
                if outside == 0 or outside < share * total:
                    continue
                if table.memtable_size:
                    table.freeze(rows)
                    merged = True
                runs = table.runs
                if len(runs) < 2:
                    continue
                self._merging = True
                snapshot = RowSnapshot(rows.fps, rows.live, rows.n)
                compactions = rows.compactions
            if self._merge_unlocked(table, runs, snapshot, compactions):
                merged = True
        self.merge_pending()  # what writes left meanwhile
        return merged

    def _merge_unlocked(
        self, table: Table, runs: tuple[Run, ...], snapshot: RowSnapshot, compactions: int
    ) -> bool:
        """Merge the consecutive ``runs`` of ``table`` without the lock -- the caller set
        ``_merging`` and took ``snapshot`` and ``compactions`` under it -- then, under the lock,
        clear ``_merging`` and put the merged run in their place unless a compaction renumbered
        the rows meanwhile. Whether the merged run went in."""
        lock = self.rows.lock
        try:
            merged = table.merged_runs(runs, snapshot)
        except BaseException:
            with lock:
                self._merging = False
            raise
        with lock:
            self._merging = False
            return self.rows.compactions == compactions and table.replace_runs(runs, merged)

    # -- invariants -----------------------------------------------------------------------------

    def _check(self) -> None:
        """Verify every table's own invariants
        (:meth:`~permindex.index.tables.table.Table._check`) and that in every table each live row
        appears exactly once and each dead row (a tombstone) at most once; raise
        :class:`~permindex.index.tables.table.TableCheckError` at the first broken one. O(n) numpy
        work; the caller holds the lock."""
        rows = self.rows
        n = rows.n
        live = rows.live_mask()
        for table in self.tables:
            entries = table._check(rows)
            copies = np.bincount(entries, minlength=n) if entries.size else np.zeros(n, np.int64)
            name = f"table {table.permutation.table}"
            if not bool((copies <= 1).all()):
                raise TableCheckError(f"{name}: a row appears twice")
            if not bool((copies[live] == 1).all()):
                raise TableCheckError(f"{name}: a live row is missing")
