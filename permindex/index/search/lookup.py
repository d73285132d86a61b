"""The index's lookups on compiled kernels, and the consistent view that lets them run outside
the index's lock (Manku, Jain & Das Sarma 2007, section 3: the tables searched by prefix, the
candidates verified exactly).

* :class:`LookupPlan` -- what the kernels of :mod:`permindex.index.search.lookup_kernels` read: the
  searched tables' permutations and their runs, as two int64 arrays, and the runs' arrays in
  one typed list (three kernel arguments instead of one per array).
* :class:`ReadView` -- a consistent view of the index for a batch lookup: the plan (frozen runs
  and the memtables frozen as runs of their own), the fingerprints by row, the liveness mask and
  the row count, taken under the lock in O(tables) (the memtables' runs are built once per
  change of a memtable, O(L)). Runs are immutable, rows below ``n`` never change, and a removal
  copies the liveness mask before it clears a flag while a lookup reads the mask
  (:meth:`permindex.index.rows.RowStore.read_live`), so a lookup on a view sees the index as
  it was when the view was taken: before or after each write, never a mix.
* :class:`Lookups` -- the per-index caches (plans by k, the last view) and the two entry points
  used by :class:`permindex.index.Index`: :meth:`Lookups.one` (a single query, under the lock)
  and :meth:`Lookups.view` with :func:`batch_arrays` (a batch, its kernels run without the
  lock, on ``threads`` threads).

Thread safety: :meth:`Lookups.one` and :meth:`Lookups.view` are called with the index's lock
held; :func:`batch_arrays` runs on a view without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.index.rows import RowStore
from permindex.index.search.matches import MATCH_ORDER, Match, new_match
from permindex.index.tables.table import ChangeCounters, Run, Table

__all__ = [
    "CandidateBounds",
    "FastQuery",
    "LookupPlan",
    "Lookups",
    "ReadView",
    "ViewStamp",
    "batch_arrays",
    "kernels",
    "kernels_of_matches",
    "make_plan",
]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_EMPTY_LIVE = np.zeros(0, dtype=np.uint8)


_kernels: ModuleType | None = None
_kernels_lock = threading.Lock()


def kernels() -> ModuleType:
    """The compiled lookup kernels (:mod:`permindex.index.search.lookup_kernels`), imported, loaded
    from numba's cache (or compiled, the first time on a machine) and run once on a tiny input
    on the first call in a process, so that no lookup pays for it later."""
    global _kernels
    if _kernels is None:
        with _kernels_lock:
            if _kernels is None:
                from permindex.index.search import lookup_kernels as module

                _warm(module)
                _warm_matches()
                _kernels = module
    return _kernels


def kernels_of_matches() -> ModuleType:
    """The compiled kernels that order a batch's matches
    (:mod:`permindex.index.search.match_kernels`; their keys are gathered by
    :mod:`permindex.index.keys.kernels`), loaded and run once with :func:`kernels`."""
    kernels()
    from permindex.index.search import match_kernels

    return match_kernels


def _warm_matches() -> None:
    """Run the match kernels and the key store's kernels once on a two-match input (their code is
    then loaded)."""
    from permindex.index.keys import kernels as keys
    from permindex.index.search import match_kernels as module

    two = np.array([1, 0], dtype=np.int64)
    module.order_by_query(two, np.zeros(2, dtype=np.uint8), 2)
    keys.warm()
    module.arrange_matches(np.zeros((2, 3), dtype=np.int64), 1, np.zeros(1, dtype=np.uint64))
    module.query_offsets(two, 2)


def _warm(module: ModuleType) -> None:
    """Run the kernels once on a one-entry table (their code is then loaded and linked)."""
    tables = np.zeros((1, 6), dtype=np.int64)
    tables[0, 1] = 1  # one move: the identity
    tables[0, 2] = 1  # a 1-bit prefix
    tables[0, 4] = -1
    run = Run(
        np.zeros(1, dtype=np.uint32), np.zeros(1, dtype=np.uint16), np.zeros(3, np.uint32), 1, 1
    )
    plan = make_plan_from([(0, run)], tables, module)
    out = np.zeros((1, 3), dtype=np.int64)
    fps = np.zeros(1, dtype=np.uint64)
    module.lookup_one(0, 0, plan.tables, plan.runs, plan.arrays, fps, _EMPTY_LIVE, out)
    module.lookup_batch(fps, 0, plan.tables, plan.runs, plan.arrays, fps, _EMPTY_LIVE, out)
    module.verify_rows(0, 0, np.zeros(1, dtype=np.int64), fps, _EMPTY_LIVE, out)


def _signed(value: int) -> int:
    """A 64-bit mask as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


class LookupPlan(NamedTuple):
    """The kernels' description of the searched tables and their runs (the layout is in the
    docstring of :mod:`permindex.index.search.lookup_kernels`): ``tables`` (S, 3 + 3W) int64,
    ``runs`` (R, 3 + S) int64, and ``arrays``, the typed list of the runs' arrays (a tuple per
    run, which it keeps alive)."""

    tables: _I64
    runs: _I64
    arrays: Any


def _tables_array(tables: Sequence[Table], searched: tuple[int, ...]) -> _I64:
    perms = [tables[t].permutation for t in searched]
    width = max((len(p.permute_ops) for p in perms), default=0)
    out = np.zeros((len(perms), 3 + 3 * width), dtype=np.int64)
    for s, perm in enumerate(perms):
        out[s, 0] = _signed(perm.leading_mask)
        out[s, 1] = len(perm.permute_ops)
        out[s, 2] = perm.prefix_bits
        for i, (shift, mask, target) in enumerate(perm.permute_ops):
            out[s, 3 + 3 * i : 6 + 3 * i] = (shift, _signed(mask), target)
    return out


def _images(tables: _I64, s: int, bits: int, permute: Callable[[int], int]) -> list[int]:
    """For each searched table e before s, the image of e's leading mask in the window of a
    run of table s with ``bits`` directory bits (``permute``: table s's permutation), when it
    lies wholly in the window, else 0 (see :mod:`permindex.index.search.lookup_kernels`)."""
    sub = max(0, bits - int(tables[s, 2]))
    width = 16 + sub
    out = []
    for e in range(s):
        mask = int(tables[e, 0]) & ((1 << 64) - 1)
        image = (permute(mask) >> (48 - bits)) & ((1 << width) - 1)
        out.append(_signed(image) if image.bit_count() == mask.bit_count() else 0)
    return out


def make_plan_from(
    runs: Sequence[tuple[int, Run]],
    tables: _I64,
    module: ModuleType | None = None,
    permutations: Sequence[Callable[[int], int]] | None = None,
) -> LookupPlan:
    """The plan of ``runs`` ((position in ``tables``, run) pairs) over the ``tables`` array;
    ``module``: the lookup kernels (None: :func:`kernels`); ``permutations``: each searched
    table's ``permute`` (None: no earlier-table images, every candidate is checked).
    O(runs * tables)."""
    kernel_module = kernels() if module is None else module
    rows = np.zeros((len(runs), 3 + tables.shape[0]), dtype=np.int64)
    arrays = kernel_module.new_run_arrays()
    add = kernel_module.add_run_array
    for i, (s, run) in enumerate(runs):
        rows[i, :3] = (s, run.bits, int(run.high.dtype == np.uint16))
        if permutations is not None and s:
            rows[i, 3 : 3 + s] = _images(tables, s, run.bits, permutations[s])
        add(arrays, run.offsets, run.filters, run.low, run.high.view(np.uint8))
    return LookupPlan(tables, rows, arrays)


def make_plan(
    tables: Sequence[Table],
    searched: tuple[int, ...],
    runs_of: Callable[[Table], Sequence[Run]],
) -> LookupPlan:
    """The plan of the tables ``searched`` (indexes into ``tables``, in search order), each
    table's runs given by ``runs_of``. O(tables + runs)."""
    pairs = [(s, run) for s, t in enumerate(searched) for run in runs_of(tables[t])]
    permutations = [tables[t].permutation.permute for t in searched]
    return make_plan_from(pairs, _tables_array(tables, searched), permutations=permutations)


class FastQuery(NamedTuple):
    """What :meth:`Lookups.one` reads for one k, rebuilt after any change of the tables or the
    row arrays (:meth:`Lookups._refresh_fast`); unpacked in one step on every single query."""

    #: ``lookup_one`` of the kernels, its compiled entry point
    #: (:func:`permindex.jit_numba.entry_point`).
    kernel: Any
    #: The plan of the frozen runs searched for k (:class:`LookupPlan`'s three fields).
    tables: _I64
    runs: _I64
    arrays: Any
    #: (capacity,) uint64, the fingerprints by row.
    fps: _U64
    #: (capacity,) uint8 liveness by row, or an empty array while every row is live.
    live: NDArray[np.uint8]
    #: (c, 3) int64, the kernel's output buffer.
    out: _I64
    #: True when no searched table has a memtable entry (the kernel's answer is complete).
    no_memtables: bool
    #: The key of a row (:meth:`permindex.index.keys.store.KeyStore.key`).
    key_of: Callable[[int], str]
    #: A memoryview of ``fps`` (indexing gives Python ints).
    fps_view: memoryview


class CandidateBounds(NamedTuple):
    """:meth:`Lookups.most_candidates` by k, valid while the change counters' ``total`` is
    ``seen``."""

    seen: int
    by_k: dict[int, int]


class ViewStamp(NamedTuple):
    """What a :class:`ReadView` is valid for: the change counts of the runs and memtables, the
    rows in use and the compactions, when it was made."""

    runs: int
    memtables: int
    n: int
    compactions: int


class ReadView(NamedTuple):
    """A consistent view of the index for a batch lookup (see the module docstring)."""

    plans: dict[int, LookupPlan]
    fps: _U64
    live: NDArray[np.uint8]
    n: int
    compactions: int
    memtable_runs: tuple[Run | None, ...]
    stamp: ViewStamp
    #: The liveness mask's epoch, for RowStore.release_live; -1: no mask, nothing to release.
    epoch: int = -1


class Lookups:
    """The lookup caches of one index: the plans of single queries by k (frozen runs only: a
    single query searches the memtables itself) and the last :class:`ReadView` with its plans
    by k. They are checked against the tables' shared
    :class:`~permindex.index.tables.table.ChangeCounters`: the single-query plans are rebuilt
    after a change of the runs, the view after a change of the runs, a memtable, or the row
    arrays."""

    __slots__ = (
        "_candidates",
        "_changes",
        "_fast",
        "_fast_seen",
        "_one_kernel",
        "_one_out",
        "_one_plans",
        "_one_seen",
        "_view",
        "batches",
        "rows",
        "searched",
        "tables",
    )

    def __init__(
        self,
        tables: list[Table],
        rows: RowStore,
        searched: dict[int, tuple[int, ...]],
        changes: ChangeCounters,
    ) -> None:
        self.tables = tables
        self.rows = rows
        self.searched = searched
        self._changes = changes
        # Single queries (under the lock): plans of the frozen runs by k, valid for these runs
        # and row arrays; the output they write.
        self._one_plans: dict[int, LookupPlan] = {}
        self._one_seen = -1
        self._one_out = np.zeros((256, 3), dtype=np.int64)  # grown for a query with more
        one_kernel = kernels().lookup_one
        from permindex.jit_numba import entry_point  # numba is loaded by now

        self._one_kernel: Any = entry_point(one_kernel)
        # One query's state by k, valid while changes.total is _fast_seen (Lookups.one).
        self._fast: dict[int, FastQuery] = {}
        self._fast_seen = -1
        self._view: ReadView | None = None
        #: Batch lookups on a read view now running (changed under the lock; query_view).
        self.batches = 0
        self._candidates = CandidateBounds(-1, {})

    def most_candidates(self, k: int) -> int:
        """An upper bound of the candidates one query within ``k`` meets: the largest bucket
        of every frozen run of the tables it searches, plus every memtable entry of those
        tables (the caller holds the lock). Entries of removed rows count until a compaction
        drops them. O(tables * runs) after a change (each run's largest bucket is cached),
        else O(1)."""
        bounds = self._candidates.by_k
        if self._candidates.seen != self._changes.total:
            bounds = {}
            self._candidates = CandidateBounds(self._changes.total, bounds)
        total = bounds.get(k)
        if total is None:
            total = 0
            for t in self.searched[k]:
                table = self.tables[t]
                total += table.memtable_size + sum(run.largest_bucket for run in table.runs)
            bounds[k] = total
        return total

    def _refresh_one(self) -> None:
        self._one_plans.clear()
        self._one_seen = self._changes.runs

    def one(self, query: int, k: int) -> list[Match]:
        """The matches of one query within ``k``, sorted by (distance, key), the caller holding
        the index's lock: the frozen runs searched by the compiled kernel, the memtables by a
        bisection each and their candidates verified by the kernels' exact check
        (``lookup_kernels.verify_rows``); each row once. O(tables * runs + log L +
        candidates)."""
        fast = self._fast.get(k) if self._fast_seen == self._changes.total else None
        if fast is None:
            fast = self._refresh_fast(k)
        kernel, tables, runs, arrays, fps_array, live, out, no_memtables, key_of, fps = fast
        found = kernel(query, k, tables, runs, arrays, fps_array, live, out)
        if found < 0 and no_memtables:  # the common answer: one match
            found = -found - 1
            row = found >> 6
            return [new_match((key_of(row), fps[row], found & 63))]
        if found == 0 and no_memtables:
            return []
        return self._one_general(query, k, found)

    def _refresh_fast(self, k: int) -> FastQuery:
        """The state :meth:`one` reads for ``k`` (:class:`FastQuery`), rebuilt after any change
        of the tables or the row arrays."""
        if self._fast_seen != self._changes.total:
            self._fast.clear()
            self._fast_seen = self._changes.total
        if self._one_seen != self._changes.runs:  # the runs or the row arrays changed
            self._refresh_one()
        plan = self._one_plans.get(k)
        if plan is None:
            plan = make_plan(self.tables, self.searched[k], lambda table: table.runs)
            self._one_plans[k] = plan
        memtables = any(self.tables[t].memtable_size for t in self.searched[k])
        rows = self.rows
        live = _EMPTY_LIVE if rows.live is None else rows.live.view(np.uint8)
        fast = FastQuery(
            self._one_kernel,
            *plan,
            rows.fps,
            live,
            self._one_out,
            not memtables,
            rows.keys.key,
            rows.fps_view,
        )
        self._fast[k] = fast
        return fast

    def _one_general(self, query: int, k: int, found: int) -> list[Match]:
        """:meth:`one` past the kernel call when the answer is not one match without
        memtables: several matches read back from the output, the memtables searched."""
        rows = self.rows
        if found < 0:
            hits = [((-found - 1) >> 6, (-found - 1) & 63)]
        elif found == 0:
            hits = []
        else:
            if found > self._one_out.shape[0]:
                self._one_out = np.zeros((found, 3), dtype=np.int64)
                self._fast.clear()  # they hold the old output
                kernel, tables, runs, arrays, fps_array, live, out, *_ = self._refresh_fast(k)
                found = kernel(query, k, tables, runs, arrays, fps_array, live, out)
            hits = [(row, d) for _, row, d in self._one_out[:found].tolist()]
        if any(self.tables[t].memtable_size for t in self.searched[k]):
            hits = self._memtable_hits(query, k, hits)
        if not hits:
            return []
        key_of = rows.keys.key
        fps = rows.fps_view
        matches = [new_match((key_of(row), fps[row], d)) for row, d in hits]
        if len(matches) > 1:
            matches.sort(key=MATCH_ORDER)
        return matches

    def _memtable_hits(
        self, query: int, k: int, hits: list[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """``hits`` ((row, distance) pairs of the runs) with the matches among the memtables'
        candidates for ``query``, each row once."""
        candidates: list[int] = []
        for t in self.searched[k]:
            self.tables[t].memtable_lookup(query, candidates)
        if not candidates:
            return hits
        rows = self.rows
        distinct = np.unique(np.array(candidates, dtype=np.int64))
        live = _EMPTY_LIVE if rows.live is None else rows.live.view(np.uint8)
        out = np.empty((distinct.size, 3), dtype=np.int64)
        count = kernels().verify_rows(query, k, distinct, rows.fps, live, out)
        found = dict(hits)
        found.update(zip(out[:count, 1].tolist(), out[:count, 2].tolist(), strict=True))
        return list(found.items())

    def current_view(self, k: int) -> ReadView | None:
        """:meth:`view` when it costs O(1): nothing written since the last view was made and
        its plan for ``k`` made; else None (making a view is O(tables * (memtable entries +
        runs))). The caller holds the lock."""
        view = self._fresh_view()
        return None if view is None or k not in view.plans else self.view(k)

    def _stamp(self) -> ViewStamp:
        """What a view made now is valid for."""
        rows = self.rows
        changes = self._changes
        return ViewStamp(changes.runs, changes.memtable, rows.n, rows.compactions)

    def _fresh_view(self) -> ReadView | None:
        """The last view when nothing was written since it was made, else None."""
        view = self._view
        if view is None or view.stamp != self._stamp() or view.fps is not self.rows.fps:
            return None
        return view

    def view(self, k: int) -> ReadView:
        """The current :class:`ReadView` with its plan for ``k`` (caller holds the lock). A view
        with a liveness mask counts as its reader until ``rows.release_live(view.epoch)``
        (meanwhile a removal copies the mask first)."""
        rows = self.rows
        view = self._fresh_view()
        if view is None:
            memtable_runs = tuple(table.memtable_run(rows) for table in self.tables)
            view = ReadView(
                {}, rows.fps, _EMPTY_LIVE, rows.n, rows.compactions, memtable_runs, self._stamp()
            )
        live, epoch = rows.read_live()
        if live is not None:
            view = view._replace(live=live.view(np.uint8), epoch=epoch)
        if k not in view.plans:
            memtable_runs = view.memtable_runs

            def runs_of(table: Table) -> Sequence[Run]:
                extra = memtable_runs[self.tables.index(table)]
                return table.runs if extra is None else (*table.runs, extra)

            view.plans[k] = make_plan(self.tables, self.searched[k], runs_of)
        self._view = view
        return view


def batch_arrays(view: ReadView, queries: _U64, k: int, threads: int = 1) -> _I64:
    """The matches of the (q,) uint64 ``queries`` within ``k`` on ``view``, without the index's
    lock: (m, 3) int64 rows of (query position, row, distance), grouped by table then run (not
    sorted; :func:`permindex.index.search.match_kernels.arrange_matches` orders them). ``threads``
    > 1
    splits the queries into that many slices, looked up in parallel (the kernels release the
    GIL). O(q * (tables * runs + candidates))."""

    def run(part: _U64) -> _I64:
        out, count = _lookup_batch(view, part, k, max(64, 2 * part.size))
        if count > out.shape[0]:
            out, count = _lookup_batch(view, part, k, count)
        return out[:count]

    if threads <= 1 or queries.size < 2 * threads:
        return run(queries)
    bounds = np.linspace(0, queries.size, threads + 1).astype(np.int64)
    parts = [queries[bounds[i] : bounds[i + 1]] for i in range(threads)]
    with ThreadPoolExecutor(threads, thread_name_prefix="permindex-lookup") as pool:
        outs = list(pool.map(run, parts))
    for i, out in enumerate(outs):
        out[:, 0] += bounds[i]
    return np.concatenate(outs)


def batch_arrays_within(view: ReadView, queries: _U64, k: int, max_matches: int) -> _I64 | None:
    """:func:`batch_arrays` on one thread when the queries have at most ``max_matches``
    matches in all; else None, after one pass of the kernel, which counts the matches past its
    output's capacity without writing them (a second pass writes them when they are more than
    that capacity, 2q, and at most ``max_matches``). O(q * (tables * runs + candidates))."""
    out, count = _lookup_batch(view, queries, k, min(max_matches, max(64, 2 * queries.size)))
    if count > max_matches:
        return None
    if count > out.shape[0]:
        out, count = _lookup_batch(view, queries, k, count)
    return out[:count]


def _lookup_batch(view: ReadView, queries: _U64, k: int, capacity: int) -> tuple[_I64, int]:
    """``lookup_batch`` of the kernels into a new (capacity, 3) int64 output: it and the
    number of matches, which may exceed ``capacity`` (those past it are counted, not
    written)."""
    plan = view.plans[k]
    out = np.zeros((capacity, 3), dtype=np.int64)
    count = kernels().lookup_batch(
        queries, k, plan.tables, plan.runs, plan.arrays, view.fps, view.live, out
    )
    return out, int(count)
