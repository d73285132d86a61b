"""The batch queries of the index (:meth:`permindex.index.Index.query_many` and the self-join
of :meth:`permindex.index.Index.pairs`) and the :class:`Match` they and the single query
return.

A batch runs in the compiled kernels of :mod:`permindex.index.search.lookup_kernels` on a read view
taken under the index's lock and searched without it (:func:`query_view`; Manku, Jain & Das Sarma
2007, section 3); a batch of at most ``tuning.small_batch`` fingerprints runs the single-query
kernel once per fingerprint under the lock instead (no read view to make after a write). Only
the matches become Python objects.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, pairwise
from threading import RLock
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.keys.rule import check_int
from permindex.index.rows import RowStore
from permindex.index.search.lookup import (
    Lookups,
    ReadView,
    batch_arrays,
    batch_arrays_within,
    kernels_of_matches,
)
from permindex.index.search.matches import Match, match_lists

__all__ = [
    "MAX_THREADS",
    "Found",
    "LookupOptions",
    "Match",
    "QueryColumns",
    "columns_from_matches",
    "columns_of",
    "lookup_many",
    "lookup_within",
    "matches_of",
    "order_matches",
    "query_view",
]

_U64 = NDArray[np.uint64]


#: Most threads one query_many may use (each is an OS thread for the call's duration).
MAX_THREADS = 256


class LookupOptions(NamedTuple):
    """What :func:`lookup_many` was asked: k (checked), limit (0: none), threads, and whether
    the answer is columns."""

    k: int
    limit: int
    threads: int
    columns: bool

    @classmethod
    def checked(cls, k: int, limit: int, threads: object, columns: object) -> LookupOptions:
        """The options of one call, ``threads`` (None: 1) and ``columns`` checked.

        Raises:
            TypeError: ``threads`` is not an int (or None), ``columns`` not a bool.
            InvalidArgumentError: ``threads`` outside [1, :data:`MAX_THREADS`].
        """
        count = 1 if threads is None else check_int(threads, "threads")
        if not 1 <= count <= MAX_THREADS:
            raise InvalidArgumentError(f"threads must be in [1, {MAX_THREADS}], not {threads}")
        if type(columns) is not bool:
            raise TypeError(f"columns must be True or False, not {columns!r}")
        return cls(k, limit, count, columns)


class QueryColumns(NamedTuple):
    """The matches of n queries as columns (``Index.query_many(..., columns=True)``): the
    matches of query i are positions ``offsets[i]:offsets[i + 1]`` of the other three, in
    (distance, key) order.

    Attributes:
        offsets: (n + 1,) int64, non-decreasing, ``offsets[0] == 0``, ``offsets[n] == m``.
        keys: the m keys (list of str).
        fingerprints: (m,) uint64, each key's stored fingerprint.
        distances: (m,) uint8, the Hamming distance of each to its query.

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b"], [0b0000, 0b0111])
        >>> columns = index.query_many([0, 2**64 - 1], columns=True)
        >>> columns.offsets.tolist(), columns.keys, columns.distances.tolist()
        ([0, 2, 2], ['a', 'b'], [0, 3])
    """

    offsets: NDArray[np.int64]
    keys: list[str]
    fingerprints: NDArray[np.uint64]
    distances: NDArray[np.uint8]


def lookup_many(
    lock: RLock,
    lookups: Lookups,
    queries: _U64,
    options: LookupOptions,
    query_one: Callable[[int, int], list[Match]],
) -> list[list[Match]] | QueryColumns:
    """``Index.query_many`` of the checked (q,) uint64 ``queries``: on a read view outside the
    lock (:func:`query_view`), or for at most ``tuning.small_batch`` queries under ``lock``
    (``query_one`` each, the single-query kernel). When a compaction renumbered the rows
    during the lookup on the view, it runs again holding the lock, which no compaction then
    passes."""
    k, limit, n = options.k, options.limit, int(queries.size)
    if n <= lookups.rows.tuning.small_batch:
        with lock:
            results = [query_one(q, k)[: limit or None] for q in queries.tolist()]
        return columns_from_matches(results) if options.columns else results
    lists = not options.columns
    found = query_view(lock, lookups, queries, k, limit, options.threads, lists)
    while found is None:  # renumbered meanwhile: again under the lock, which no compaction passes
        with lock:
            found = query_view(lock, lookups, queries, k, limit, options.threads, lists)
    if isinstance(found, list):  # the Match lists
        return found
    return columns_of(n, found) if options.columns else matches_of(n, found)


def lookup_within(
    lock: RLock,
    lookups: Lookups,
    queries: _U64,
    options: LookupOptions,
    max_candidates: int,
    max_matches: int,
) -> QueryColumns | None:
    """``Index.query_many(..., columns=True)`` of the checked (q,) uint64 ``queries`` when its
    work is bounded, else None: the lookup runs on a read view (more than
    ``tuning.small_batch`` queries), q times :meth:`Lookups.most_candidates` is
    at most ``max_candidates`` (checked under ``lock`` before anything is looked up), the read
    view of the last lookup is current (:meth:`Lookups.current_view`: nothing written since;
    a batch lookup after a write makes a new one, O(tables * memtable entries)), and the
    kernel counts at most ``max_matches`` matches (else None after that one pass, before any
    match is ordered or its key read). None too when a compaction renumbered the rows
    meanwhile. O(q * tables * runs + max_candidates) in the kernel, O(max_matches log
    max_matches) to order the matches.

    Raises:
        TypeError: a bound that is not an int.
        InvalidArgumentError: a negative bound.
    """
    bounds = (check_int(max_candidates, "max_candidates"), check_int(max_matches, "max_matches"))
    if min(bounds) < 0:
        raise InvalidArgumentError(
            f"max_candidates and max_matches must be >= 0, not {bounds[0]} and {bounds[1]}"
        )
    k, n = options.k, int(queries.size)
    if n <= lookups.rows.tuning.small_batch:
        return None
    rows = lookups.rows
    with lock:
        if n * lookups.most_candidates(k) > max_candidates:
            return None
        view = lookups.current_view(k)
    if view is None:  # written since the last view: making one is not bounded work
        return None
    try:
        found = batch_arrays_within(view, queries, k, max_matches)
    finally:
        with lock:
            rows.release_live(view.epoch)
    if found is None:
        return None
    if not found.shape[0]:  # no match: nothing to order
        return QueryColumns(np.zeros(n + 1, dtype=np.int64), *_no_matches()[1:])
    ordered = order_matches(lock, rows, view, found, n, options.limit)
    return None if ordered is None else columns_of(n, ordered)


#: The matches of a batch as (query positions (m,) int64, keys, fingerprints (m,) uint64,
#: distances (m,) uint8), sorted by (query, distance, key): what :func:`query_view` returns.
Found = tuple[NDArray[np.int64], list[str], _U64, NDArray[np.uint8]]


def query_view(
    lock: RLock,
    lookups: Lookups,
    queries: _U64,
    k: int,
    limit: int,
    threads: int,
    lists: bool = False,
) -> Found | list[list[Match]] | None:
    """A batch lookup on compiled kernels outside the index's lock: a read view taken under
    ``lock`` (O(tables)), the lookup kernel run without it (and without the GIL) on ``threads``
    threads, then the matches ordered (:func:`order_matches`, taking the lock again only to
    read the matched rows' keys). Returns the matches (:data:`Found`), or with ``lists`` their
    Match lists (:func:`matches_of`): every query sees the index as it was when the view was
    taken. None when a compaction renumbered the rows meanwhile (the caller looks up again
    under the lock). O(q * (tables * runs + candidates)) in the kernels, O(m log m) to order
    the m matches.

    A batch of one thread that starts while another batch lookup runs on the index is looked
    up in ``tuning.overlap_pieces`` pieces of consecutive queries on the same view, each piece
    ordered before the next one's kernel: its ordering, which holds the GIL, then runs while
    the other's kernel runs, which does not, instead of after it, one thread waiting for the
    other (benchmarks/README.md). The answer is the same."""
    n = int(queries.size)
    with lock:
        view = lookups.view(k)
        lookups.batches += 1
        tuning = lookups.rows.tuning
        least = tuning.overlap_pieces * tuning.overlap_piece
        alone = threads > 1 or lookups.batches == 1 or n < least
    try:
        return _lookup_on_view(lock, lookups.rows, view, queries, k, limit, threads, alone, lists)
    finally:
        with lock:
            lookups.batches -= 1


def _lookup_on_view(
    lock: RLock,
    rows: RowStore,
    view: ReadView,
    queries: _U64,
    k: int,
    limit: int,
    threads: int,
    whole: bool,
    lists: bool,
) -> Found | list[list[Match]] | None:
    """:func:`query_view` on ``view`` (whose liveness mask it releases after the last kernel):
    the whole batch at once, or in ``tuning.overlap_pieces`` pieces; with ``lists`` each piece's
    Match lists (:func:`matches_of`), one after the other."""
    n = int(queries.size)
    pieces = rows.tuning.overlap_pieces
    bounds = [0, n] if whole else np.linspace(0, n, pieces + 1).astype(int).tolist()
    parts: list[Found] = []
    # each piece's lists appended to the first piece's
    results: list[list[Match]] | None = None
    released = False
    try:
        for start, end in pairwise(bounds):
            found = batch_arrays(view, queries[start:end], k, threads)
            if end == n:
                with lock:
                    rows.release_live(view.epoch)
                released = True
            ordered = order_matches(lock, rows, view, found, end - start, limit)
            if ordered is None:
                return None
            if lists:
                piece = matches_of(end - start, ordered)
                if results is None:
                    results = piece
                else:
                    results += piece
                continue
            parts.append(ordered if start == 0 else (ordered[0] + start, *ordered[1:]))
    finally:
        if not released:
            with lock:
                rows.release_live(view.epoch)
    if results is not None:
        return results
    if len(parts) == 1:
        return parts[0]
    keys: list[str] = []
    for part in parts:
        keys += part[1]
    return (
        np.concatenate([part[0] for part in parts]),
        keys,
        np.concatenate([part[2] for part in parts]),
        np.concatenate([part[3] for part in parts]),
    )


def _no_matches() -> Found:
    """The :data:`Found` of a batch without a match (new arrays and list: the caller owns
    them)."""
    empty = np.empty(0, dtype=np.int64)
    return empty, [], np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint8)


def order_matches(
    lock: RLock, rows: RowStore, view: ReadView, found: NDArray[np.int64], n: int, limit: int
) -> Found | None:
    """The matches ``found`` ((m, 3) int64 rows of (query position in [0, n), row, distance),
    :func:`~permindex.index.search.lookup.batch_arrays` on ``view``) with their keys and
    fingerprints,
    sorted by (query, distance, key), at most ``limit`` per query (0: all); None when a
    compaction renumbered the rows since the view was taken. Reads the keys under ``lock``.
    O(m log m)."""
    if not found.shape[0]:  # no match: no key to read
        return _no_matches()
    # One kernel from the lookup's output to the matches ordered by (query, distance) with
    # their fingerprints and ties, instead of a dozen numpy steps (benchmarks/README.md).
    arranged = kernels_of_matches().arrange_matches(found, n, view.fps)
    return _order_arranged(lock, rows, view, arranged, limit)


def _order_arranged(
    lock: RLock,
    rows: RowStore,
    view: ReadView,
    arranged: tuple[
        NDArray[np.int64], NDArray[np.int64], NDArray[np.uint8], _U64, NDArray[np.int64]
    ],
    limit: int,
) -> Found | None:
    """:func:`order_matches` of the matches as ``arrange_matches`` gave them (query
    positions, rows, distances, fingerprints, ties)."""
    q_all, rows_all, d_all, fps_all, tie = arranged
    # Matches of one query at one distance: ordered by key below, by their bytes in a kernel
    # per run of them when they are few, else by ranking the distinct rows' keys once.
    with lock:
        if rows.compactions != view.compactions:
            return None
        if tie.size > rows.tuning.rank_ties:
            distinct, inverse = np.unique(rows_all, return_inverse=True)
            distinct_keys = rows.keys.keys(distinct)
        else:
            if tie.size:  # runs of ties ordered by their keys' bytes, in a kernel
                rows.keys.order_ties(tie, rows_all, fps_all)
            keys = rows.keys.keys(rows_all)  # a row matched by several queries decoded once
    if tie.size > rows.tuning.rank_ties:
        ranked = sorted(range(len(distinct_keys)), key=distinct_keys.__getitem__)
        rank = np.empty(len(distinct_keys), dtype=np.int64)
        rank[np.asarray(ranked, dtype=np.int64)] = np.arange(rank.size, dtype=np.int64)
        order = np.lexsort((rank[inverse], d_all, q_all))
        q_all, fps_all, d_all, inverse = (
            q_all[order],
            fps_all[order],
            d_all[order],
            inverse[order],
        )
        keys = np.array(distinct_keys, dtype=object)[inverse].tolist()
    kept = _kept(q_all, limit)
    if kept is not None:
        q_all, fps_all, d_all = q_all[kept], fps_all[kept], d_all[kept]
        keys = [keys[i] for i in kept.tolist()]
    return q_all, keys, fps_all, d_all


def _kept(queries: NDArray[np.int64], limit: int) -> NDArray[np.int64] | None:
    """The positions of the first ``limit`` matches of each query (``queries`` (m,) int64, the
    matches' query positions, sorted), or None when that is all of them (or ``limit`` is 0).
    O(m log m)."""
    if not limit or not queries.size:
        return None
    first = np.searchsorted(queries, queries, side="left")
    kept = np.flatnonzero(np.arange(queries.size) - first < limit)
    return kept if kept.size < queries.size else None


def matches_of(n: int, found: Found) -> list[list[Match]]:
    """The matches of n queries (:data:`Found`, from :func:`order_matches`) as one list of
    :class:`Match` per query (:func:`~permindex.index.search.matches.match_lists`).
    O(n + m)."""
    q_all, keys, fps, d_all = found
    return match_lists(n, q_all, keys, fps, d_all)


def columns_of(n: int, found: Found) -> QueryColumns:
    """The matches of n queries (:data:`Found`, from :func:`order_matches`) as
    :class:`QueryColumns`. O(n + m)."""
    q_all, keys, fps, d_all = found
    offsets = kernels_of_matches().query_offsets(q_all, n)
    return QueryColumns(offsets, keys, fps, d_all)


def columns_from_matches(results: list[list[Match]]) -> QueryColumns:
    """:class:`QueryColumns` of per-query Match lists (a batch of at most
    ``tuning.small_batch``). O(n + m)."""
    counts = np.array([len(r) for r in results], dtype=np.int64)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = list(chain.from_iterable(results))
    return QueryColumns(
        offsets,
        [m.key for m in flat],
        np.array([m.fingerprint for m in flat], dtype=np.uint64),
        np.array([m.distance for m in flat], dtype=np.uint8),
    )
