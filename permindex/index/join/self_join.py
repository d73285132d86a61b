"""The self-join of a fingerprint array: every pair of positions within Hamming distance k, each
once, by the table-permutation method of Manku, Jain & Das Sarma 2007, "Detecting
Near-Duplicates for Web Crawling", section 3 (:func:`self_join`, whose docstring gives the
method; :func:`join_design` chooses what to join on).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain, combinations
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CallCancelledError, InvalidArgumentError
from permindex.index.tables.permutation import Design, argsort_prefixes
from permindex.index.tuning import DEFAULT_TUNING, Tuning

__all__ = [
    "BYTE_PAIRS",
    "BYTE_PAIR_MASKS",
    "BYTE_PAIR_TABLES",
    "JoinDesign",
    "check_stop",
    "estimate_join_work",
    "group_pairs",
    "join_design",
    "join_tables",
    "keyed_pairs",
    "self_join",
]

_COVER_SEARCH = 20_000  # most sets of tables join_tables tries
_COVER_KSETS = 200_000  # most k-sets of blocks join_tables enumerates

#: The byte-pair join (:func:`byte_pair_candidates`), for k <= 3: a :data:`JoinDesign` that is
#: not a :class:`Design`.
BYTE_PAIRS: Final = "byte-pairs"
#: What :func:`self_join` joins on: a table design, or :data:`BYTE_PAIRS`.
JoinDesign = Design | Literal["byte-pairs"]
#: The byte-pair join's tables, in order: (16-bit column c, byte b), column c being bits
#: 16c .. 16c + 15 and byte b bits 8b .. 8b + 7, b one of the two bytes of column c + 1 mod 4.
BYTE_PAIR_TABLES: Final = tuple(
    (c, b) for c in range(4) for b in (2 * ((c + 1) % 4), 2 * ((c + 1) % 4) + 1)
)
#: Each byte-pair table's key bits: a pair shares table t's key iff (a ^ b) & mask[t] == 0.
BYTE_PAIR_MASKS: Final = tuple(
    (0xFFFF << (16 * c)) | (0xFF << (8 * b)) for c, b in BYTE_PAIR_TABLES
)

_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]


def group_pairs(group_end: _I64, budget: int) -> Iterator[tuple[_I64, _I64]]:
    """All pairs of positions (i, j), i < j, in the same group of a grouped sequence, in chunks
    of about ``budget`` pairs (at least one position's pairs per chunk).

    Args:
        group_end: (n,) int64, ``group_end[i]`` the end (exclusive) of position i's group;
            groups are consecutive runs of positions.
        budget: pairs per chunk, >= 1.

    Yields:
        (i, j), two (m,) int64 arrays of positions with i < j.

    Time and memory are proportional to the number of pairs plus the positions.
    """
    size = group_end.size
    partners = group_end - np.arange(size, dtype=np.int64) - 1
    cumulative = np.cumsum(partners)
    start = 0
    while start < size:
        base = int(cumulative[start - 1]) if start else 0
        end = int(np.searchsorted(cumulative, base + budget, side="right"))
        end = min(max(end, start + 1), size)
        counts = partners[start:end]
        total = int(cumulative[end - 1]) - base
        if total:
            i = np.repeat(np.arange(start, end, dtype=np.int64), counts)
            j = i + 1 + np.arange(total, dtype=np.int64)
            j -= np.repeat(np.cumsum(counts) - counts, counts)
            yield i, j
        start = end


@functools.cache
def join_tables(design: Design, k: int) -> tuple[int, ...]:
    """The tables (ascending numbers) a self-join within Hamming distance ``k`` bits searches:
    a smallest set of ``design``'s tables such that every set of k blocks is avoided by the
    leading blocks of one of them (two fingerprints within k differ in at most k blocks, so
    they then share that table's prefix: Manku et al. 2007, section 3); among the smallest
    sets, the one with the fewest expected candidate pairs (sum of 2^-prefix bits).

    The sets are tried exhaustively by increasing size while there are at most 20,000 of them
    in all, each checked against every k-set of blocks (exact by construction); otherwise (also
    when there are over 200,000 k-sets), and when nothing smaller is found,
    :meth:`Design.tables_for` is used. E.g. (6, 2), k = 3: the
    6 tables of two triangles of blocks, where the greedy cover of ``tables_for`` takes 7.

    Raises InvalidArgumentError (from :meth:`Design.tables_for`) when not 0 <= k <= max_k.
    """
    default = design.tables_for(k)
    if k == design.max_k:  # every table: each k-set leaves exactly one table's blocks intact
        return default
    if math.comb(design.blocks, k) > _COVER_KSETS:  # e.g. (64, 1), k = 10: 1.5 * 10^11 k-sets
        return default
    perms = design.permutations
    ksets = [frozenset(d) for d in combinations(range(design.blocks), k)]
    covers = [
        sum(1 << i for i, d in enumerate(ksets) if not d & frozenset(p.leading_blocks))
        for p in perms
    ]
    everything = (1 << len(ksets)) - 1
    tried = 0
    for size in range(1, len(default)):
        tried += math.comb(len(perms), size)
        if tried > _COVER_SEARCH:
            break
        best: tuple[float, tuple[int, ...]] | None = None
        for subset in combinations(range(len(perms)), size):
            covered = 0
            for t in subset:
                covered |= covers[t]
            if covered == everything:
                score = sum(2.0 ** -perms[t].prefix_bits for t in subset)
                if best is None or score < best[0]:
                    best = (score, subset)
        if best is not None:
            return best[1]
    return default


def join_design(design: Design, k: int, n: int) -> JoinDesign:
    """What to self-join ``n`` fingerprints within ``k`` bits on: ``design`` itself, (4, 1),
    (5, 2), (6, 2) or (6, 3) when k allows, or for k <= 3 :data:`BYTE_PAIRS`, whichever a
    cost model says is cheapest (each design searching its :func:`join_tables`).

    The model (arbitrary units, only comparisons mean anything; the weights' origin is in
    benchmarks/README.md), per table, with about n^2 / 2^(key bits + 1) candidate pairs: a
    prefix of at most 16 bits, 25 per row (one radix pass) and 10 per candidate (filters
    first); 17 to 24 bits, 40 per row (two radix passes) and 40 per candidate; longer, 40 per
    row and per candidate (a count of the top bits and a sort of the rows that share them).
    The byte-pair join: 120 per row for its 8 tables of 24-bit keys and 40 per candidate.

    O(tables) time.

    Raises:
        InvalidArgumentError: (from :meth:`Design.tables_for`) k > design.max_k.
    """
    options = [design, *_join_designs(k)]

    def pairs(bits: int) -> float:
        return n * n / 2.0 ** (bits + 1)

    def cost(d: Design) -> float:
        total = 0.0
        for t in join_tables(d, k):
            bits = d.permutations[t].prefix_bits
            if bits <= 16:
                total += 25.0 * n + 10.0 * pairs(bits)
            else:
                total += 40.0 * (n + pairs(bits))
        return total

    best = min(options, key=cost)
    if k <= 3 and 120.0 * n + 8 * 40.0 * pairs(24) < cost(best):
        return BYTE_PAIRS
    return best


@functools.cache
def _join_designs(k: int) -> tuple[Design, ...]:
    """The designs :func:`join_design` weighs besides the index's own, for ``k``: made once, so
    that each builds its permutations once per process, not on every join."""
    return tuple(Design(b, t) for b, t in ((4, 1), (5, 2), (6, 2), (6, 3)) if b - t >= k)


def check_stop(should_stop: Callable[[], bool] | None) -> None:
    """Raise :class:`~permindex.errors.CallCancelledError` when ``should_stop`` (None: never)
    returns True: the check long work makes between its chunks."""
    if should_stop is not None and should_stop():
        raise CallCancelledError("the call was cancelled or its deadline passed; work stopped")


def _table_masks(design: JoinDesign, k: int) -> list[int]:
    """The key bits of each table a self-join on ``design`` within ``k`` searches, in order:
    two fingerprints share table t's key iff ``(a ^ b) & mask[t] == 0``."""
    if isinstance(design, Design):
        return [design.permutations[t].leading_mask for t in join_tables(design, k)]
    if design == BYTE_PAIRS:
        if not 0 <= k <= 3:
            raise InvalidArgumentError(f"the byte-pair join finds k <= 3; got k={k}", value=k)
        return list(BYTE_PAIR_MASKS)
    raise TypeError(f"design must be a Design or {BYTE_PAIRS!r}, not {design!r}")


def estimate_join_work(fingerprints: _U64, k: int, design: JoinDesign) -> int:
    """The candidate pairs :func:`self_join` ``(fingerprints, k, design)`` enumerates: over the
    tables it searches, the sum of size * (size - 1) / 2 over the groups of positions that
    share the table's key (prefix): the pairs the join's kernel verifies (a join on
    :data:`BYTE_PAIRS` below ``tuning.byte_pairs_min_rows`` values verifies those of
    (4, 1) instead). No candidate is listed: per table one sort of the (n,) masked values,
    O(T * n log n) time, O(n) memory.

    Raises:
        InvalidArgumentError: k < 0 or k > the design's largest k.
        TypeError: ``design`` is not a :data:`JoinDesign`.
    """
    values = np.asarray(fingerprints, dtype=np.uint64)
    masks = _table_masks(design, k)
    if values.size < 2:
        return 0
    total = 0
    for mask in masks:
        keys = np.sort(values & np.uint64(mask))
        ends = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        sizes = np.diff(ends, prepend=0, append=keys.size).astype(np.int64)
        total += int((sizes * (sizes - 1) // 2).sum())
    return total


def self_join(
    values: _U64,
    k: int,
    design: JoinDesign,
    should_stop: Callable[[], bool] | None = None,
    *,
    tuning: Tuning = DEFAULT_TUNING,
) -> tuple[_I64, _I64, _I64]:
    """Every unordered pair of positions of ``values`` within Hamming distance ``k`` bits,
    each once (Manku et al. 2007, section 3).

    Args:
        values: (n,) uint64 fingerprints; equal values are allowed (distance 0 pairs).
        k: largest Hamming distance in bits, 0 <= k <= design.max_k (3 for
            :data:`BYTE_PAIRS`).
        design: what to join on (see :func:`join_design` for a choice by cost): a
            :class:`Design`, whose :func:`join_tables` ``(k)`` tables are searched, or
            :data:`BYTE_PAIRS` (8 tables keyed by a 16-bit column and one byte of the next
            column), which below ``tuning.byte_pairs_min_rows`` values is joined on
            (4, 1) instead, whose 4 tables then cost less than its 8 (benchmarks/README.md).
        should_stop: called before each table and between kernel calls (each at most about
            16 * ``tuning.pair_budget`` candidates); when it returns True the join stops.
        tuning: the join's knobs (:class:`~permindex.index.tuning.Tuning`: ``pair_budget``,
            ``byte_pairs_min_rows`` and the ``join_threads*``).

    Returns:
        (a, b, distance): three (m,) int64 arrays, positions a != b into ``values`` (in either
        order) and their distance in bits; in no particular order.

    Raises:
        InvalidArgumentError: k < 0 or k > the design's largest k.
        CallCancelledError: ``should_stop`` returned True.

    Two fingerprints within k bits differ in at most k of a design's blocks, so they share the
    prefix (leading blocks) of at least one table when k <= blocks - leading (pigeonhole). For
    each table searched (:func:`join_tables`: a smallest set of tables that still covers every
    k blocks), the keys are sorted once and a compiled kernel verifies every pair of a run of
    equal keys exactly (popcount of the XOR), keeping a pair only in the *first* searched table
    whose key it shares (``(a ^ b) & key_mask == 0`` for no earlier table), so no pair is
    reported twice and no set is needed (:func:`_compiled_join`). The byte-pair tables are
    exact for k <= 3: of 4 columns of 16 bits, some column c holds none of the 3 differing
    bits and its successor at most one, so one of the two bytes of column c + 1 is intact.

    The first join in a process loads the kernels before its first check of ``should_stop``.
    :meth:`permindex.index.Index.pairs` and :mod:`permindex.index.join.clusters` both use it.
    """
    _table_masks(design, k)  # the design and k checked before anything is loaded
    if values.size < 2:
        return _concat_pairs(())
    if design == BYTE_PAIRS and values.size < tuning.byte_pairs_min_rows:
        design = Design(4, 1)  # 4 tables of short runs cost less than 8 tables
    values = np.ascontiguousarray(values, dtype=np.uint64)
    return _compiled_join(values, k, design, should_stop, tuning)


def keyed_pairs(
    keys: _U64,
    values: _U64,
    k: int,
    earlier: Sequence[int] = (),
    should_stop: Callable[[], bool] | None = None,
    *,
    pair_budget: int = DEFAULT_TUNING.pair_budget,
) -> tuple[_I64, _I64, _I64]:
    """One table of a self-join, on keys given by the caller: every unordered pair of positions
    (i, j) with ``keys[i] == keys[j]`` whose ``values`` are within ``k`` bits and whose XOR is
    not 0 under any of the ``earlier`` masks (the key masks of the tables searched before this
    one, so that a pair is kept only in the first table whose key it shares).

    Args:
        keys: (n,) uint64 group keys of any width (a table's prefix, or a bucket number).
        values: (n,) uint64 fingerprints.
        k: largest Hamming distance kept, bits.
        earlier: masks (uint64 ints) of the tables searched before this one.
        should_stop: checked between kernel calls of at most about 16 * ``pair_budget``
            candidates.
        pair_budget: pairs per kernel call (:class:`~permindex.index.tuning.Tuning`).

    Returns:
        (a, b, distance): three (m,) int64 arrays, positions a != b (either order), in no
        particular order. Every candidate (a pair sharing a key) is verified once, by the
        kernel of :func:`self_join` (:func:`_kernel_table`): the cost is O(n log n + sum over
        groups of size^2), so callers split large groups first.

    Raises:
        CallCancelledError: ``should_stop`` returned True.
    """
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    values = np.ascontiguousarray(values, dtype=np.uint64)
    masks = np.array([int(m) for m in earlier], dtype=np.uint64)
    if values.size < 2:
        return _concat_pairs(())
    order = np.argsort(keys, kind="stable").astype(np.int64)
    pairs = _kernel_table(keys[order], values[order], order, k, masks, should_stop, pair_budget)
    return _concat_pairs(pairs)


def _concat_pairs(parts: Iterable[tuple[_I64, _I64, _I64]]) -> tuple[_I64, _I64, _I64]:
    listed = list(parts)
    if not listed:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    a, b, d = (np.concatenate(x) for x in zip(*listed, strict=True))
    return a, b, d


def _kernel_table(
    sorted_keys: _U64,
    sorted_values: _U64,
    positions: _I64,
    k: int,
    earlier: _U64,
    should_stop: Callable[[], bool] | None,
    budget: int,
) -> Iterator[tuple[_I64, _I64, _I64]]:
    """The pairs of one table by the compiled kernel
    (:func:`permindex.index.join.kernels.group_pairs_verified`) on keys sorted ascending, in
    calls of at most 16 * ``budget`` candidates and ``budget`` pairs, ``should_stop`` checked
    between calls."""
    from permindex.index.join import kernels as join_kernels

    budget = max(1, int(budget))
    out_a = np.empty(budget, dtype=np.int64)
    out_b = np.empty(budget, dtype=np.int64)
    out_d = np.empty(budget, dtype=np.int64)
    i, j, m = 0, 1, int(sorted_keys.size)
    while i < m:
        check_stop(should_stop)
        count, i, j = join_kernels.group_pairs_verified(
            sorted_keys,
            sorted_values,
            positions,
            k,
            earlier,
            i,
            j,
            16 * budget,
            out_a,
            out_b,
            out_d,
        )
        if count:
            yield out_a[:count].copy(), out_b[:count].copy(), out_d[:count].copy()


def _table_key(values: _U64, k: int, design: JoinDesign, t: int) -> tuple[_U64, int]:
    """The key of every value in table t of those a self-join on ``design`` within ``k``
    searches, in order: ((n,) uint64 keys below 2^bits, bits). Two values share table t's key
    iff they share its masked bits (:func:`_table_masks`)."""
    if isinstance(design, Design):
        perm = design.permutations[join_tables(design, k)[t]]
        return perm.prefix_array(values), perm.prefix_bits
    c, b = BYTE_PAIR_TABLES[t]
    key = (values >> np.uint64(16 * c)) & np.uint64(0xFFFF)
    key <<= np.uint64(8)
    key |= (values >> np.uint64(8 * b)) & np.uint64(0xFF)
    return key, 24


def _sort_keys(keys: _U64, bits: int) -> tuple[_U64, _I64]:
    """(sorted keys, positions): the (n,) uint64 ``keys`` (below 2^bits) sorted ascending, ties
    in position order, and the (n,) int64 position of each. One sort of (key, position) packed
    into uint64 when both fit in 64 bits, else a stable radix argsort."""
    n = int(keys.size)
    index_bits = max(1, (n - 1).bit_length())
    if bits + index_bits <= 64:
        packed = keys << np.uint64(index_bits)
        packed |= np.arange(n, dtype=np.uint64)
        packed.sort()
        positions = (packed & np.uint64((1 << index_bits) - 1)).astype(np.int64)
        packed >>= np.uint64(index_bits)
        return packed, positions
    order = argsort_prefixes(keys, bits)
    return keys[order], order.astype(np.int64)


def _compiled_join(
    values: _U64,
    k: int,
    design: JoinDesign,
    should_stop: Callable[[], bool] | None,
    tuning: Tuning,
) -> tuple[_I64, _I64, _I64]:
    """:func:`self_join` by the compiled kernel
    (:func:`permindex.index.join.kernels.group_pairs_verified`): per searched table, the keys
    sorted once, then every pair of a run of equal keys verified (popcount of the XOR <= k, and
    not hidden by an earlier table's mask) in calls of at most 16 * ``tuning.pair_budget``
    candidates and ``tuning.pair_budget`` pairs, ``should_stop`` checked between calls.

    From ``tuning.join_threads_min_rows`` values to ``tuning.join_threads_max_rows``, the tables
    are joined in up to ``tuning.join_threads`` threads at once (the sorts and the kernel
    release the GIL), each thread then holding its table's arrays (about 24 bytes per value);
    the pairs come out in table order either way. ``should_stop`` is then called from those
    threads too, and an exception in the calling thread (Ctrl-C) stops them within one kernel
    call."""
    masks = np.array(_table_masks(design, k), dtype=np.uint64)
    tables = int(masks.size)
    check_stop(should_stop)
    left = threading.Event()  # set when the calling thread leaves (Ctrl-C, an error)

    def stop() -> bool:
        return left.is_set() or (should_stop is not None and should_stop())

    def table(t: int) -> list[tuple[_I64, _I64, _I64]]:
        check_stop(stop)
        keys, bits = _table_key(values, k, design, t)
        sorted_keys, positions = _sort_keys(keys, bits)
        del keys
        found = _kernel_table(
            sorted_keys, values[positions], positions, k, masks[:t], stop, tuning.pair_budget
        )
        return list(found)

    n = int(values.size)
    threads = min(tuning.join_threads, tables)
    if threads < 2 or not tuning.join_threads_min_rows <= n <= tuning.join_threads_max_rows:
        return _concat_pairs(chain.from_iterable(table(t) for t in range(tables)))
    futures: list[Future[list[tuple[_I64, _I64, _I64]]]] = []
    with ThreadPoolExecutor(threads, thread_name_prefix="permindex-join") as pool:
        try:
            futures.extend(pool.submit(table, t) for t in range(tables))
            return _concat_pairs(chain.from_iterable(f.result() for f in futures))
        finally:
            # Leaving early (a KeyboardInterrupt lands in this thread only, or a table
            # failed): no other table starts, and the running ones stop at their next check,
            # within one kernel call, before the pool's exit waits for them.
            left.set()
            for future in futures:
                future.cancel()
