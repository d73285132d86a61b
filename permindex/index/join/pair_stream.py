"""Pairs of keys within k streamed in key order from a join on distinct fingerprints
(:class:`PairStream`), with the pieces it is built from: the distinct fingerprints of n positions
(:func:`distinct_values`), the join on them (:func:`join_distinct`) and the positions that have a
near-duplicate (:func:`flagged_positions`).

Keys that share a fingerprint are joined once (one distinct value) and expanded into pairs only
as the stream is read: for the key of rank r, its later partners are the later keys of its own
group (a slice of the group, distance 0) and the keys of rank above r of each value within k (a
slice of that value's group). So 5,000 keys of one fingerprint cost O(5,000) memory before the
first pair, not the 12,497,500 pairs between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.index.join import self_join as join
from permindex.index.rows import RowStore
from permindex.index.tables.permutation import Design
from permindex.index.tuning import DEFAULT_TUNING, Tuning

__all__ = [
    "DEFAULT_CHUNK",
    "PairArrays",
    "PairStream",
    "Values",
    "distinct_values",
    "flagged_positions",
    "identical_pairs",
    "join_distinct",
    "self_join_pairs",
]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]

#: Pairs per chunk of :meth:`PairStream.chunks` by default.
DEFAULT_CHUNK: Final = 65_536


class PairArrays(NamedTuple):
    """Pairs as three (m,) int64 arrays: positions ``a`` and ``b`` (a != b) into the keys and
    fingerprints they were computed from, and their Hamming ``distance`` in bits."""

    a: _I64
    b: _I64
    distance: _I64


class Values(NamedTuple):
    """The distinct fingerprints of n positions, as :func:`distinct_values` orders them: the
    values that occur once, in position order, then the repeated ones, ascending."""

    by_value: _I64  # positions grouped by fingerprint (ascending within a value)
    first: _I64  # where each distinct value's run starts in by_value
    counts: _I64  # positions per distinct value
    distinct: _U64  # the distinct values
    value_of: _I64  # (n,) the distinct value of each position


def distinct_values(fps: _U64) -> Values:
    """The distinct values of the (n,) uint64 ``fps`` and which positions hold each: the
    values that occur once first, in position order, then the repeated ones (ascending). One
    fast sort finds the repeated values; only their positions are grouped, by one kernel's two
    passes (:func:`~permindex.index.join.kernels.group_by_value`). O(n log n) time, O(n)
    memory."""
    fps = np.ascontiguousarray(fps, dtype=np.uint64)  # native order: the kernel's one type
    n = int(fps.size)
    ordered = np.sort(fps)
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        every = np.arange(n, dtype=np.int64)
        return Values(every, every.copy(), np.ones(n, dtype=np.int64), fps.copy(), every.copy())
    repeated = np.unique(ordered[1:][same])
    from permindex.index.join import kernels as join_kernels

    d = n - int(np.count_nonzero(same))
    del ordered, same
    out = Values(
        np.empty(n, dtype=np.int64),
        np.empty(d, dtype=np.int64),
        np.empty(d, dtype=np.int64),
        np.empty(d, dtype=np.uint64),
        np.empty(n, dtype=np.int64),
    )
    join_kernels.group_by_value(fps, repeated, _hash_bits(repeated.size), *out)
    return out


def _hash_bits(count: int) -> int:
    """Bits of the hash table of :func:`distinct_values`'s kernel for ``count`` repeated values
    (Fibonacci hashing of the values): about 64 slots per value (a position without a repeated
    value passes with probability under 1/64), from 2^10 to 2^24 slots."""
    return min(max(count.bit_length() + 6, 10), 24)


def identical_pairs(counts: _I64) -> int:
    """The pairs of positions that share a value, for (m,) int64 group ``counts``."""
    return int((counts * (counts - 1) // 2).sum())


def join_distinct(
    distinct: _U64,
    k: int,
    plan: join.JoinDesign,
    should_stop: Callable[[], bool] | None = None,
    tuning: Tuning = DEFAULT_TUNING,
) -> PairArrays:
    """Every pair of positions of the (n,) uint64 *distinct* values within ``k`` bits, each
    once, in no particular order: :func:`permindex.index.join.self_join.self_join` on ``plan``
    (none for
    k = 0 or fewer than 2 values: distinct values are at least 1 bit apart).

    Raises:
        InvalidArgumentError: k above what ``plan`` finds.
        CallCancelledError: ``should_stop`` returned True (checked between chunks).
    """
    if k == 0 or distinct.size < 2:
        empty = np.zeros(0, dtype=np.int64)
        return PairArrays(empty, empty.copy(), empty.copy())
    return PairArrays(*join.self_join(distinct, k, plan, should_stop, tuning=tuning))


def flagged_positions(values: Values, pairs: PairArrays) -> _I64:
    """The positions with a near-duplicate (their value repeats or has a pair), grouped by
    value: (f,) int64."""
    involved = values.counts > 1
    involved[pairs.a] = True
    involved[pairs.b] = True
    return values.by_value[np.repeat(involved, values.counts)]


def _ranges(starts: _I64, lengths: _I64) -> _I64:
    """The concatenation of ``arange(s, s + l)`` for each start s and length l."""
    total = int(lengths.sum())
    out = np.arange(total, dtype=np.int64)
    out -= np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
    return out


class PairStream:
    """Every pair of keys within k, in key order, from the distinct-value pairs of a join.

    Args:
        ranked: (f,) int64 positions of the keys with a near-duplicate, sorted by key: the key
            of rank r is at ``ranked[r]`` (a pair's positions are these).
        value_of: (f,) int64 the distinct value (0 <= v < n_values) of each ranked key.
        pairs: the pairs of distinct values within k (:func:`join_distinct`), each once.
        n_values: the number of distinct values.
        segment_budget: slices of pairs listed per window
            (:class:`~permindex.index.tuning.Tuning`).

    Memory O(f + value pairs) once built (a CSR adjacency of the values of the ranked keys,
    renumbered 0.. in value order, and each value's keys in rank order): the values of keys
    without a near-duplicate cost nothing; :meth:`chunks` adds the pairs of one window of keys.
    """

    def __init__(
        self,
        ranked: _I64,
        value_of: _I64,
        pairs: PairArrays,
        n_values: int,
        segment_budget: int = DEFAULT_TUNING.segment_budget,
    ) -> None:
        self._segment_budget = segment_budget
        f = int(ranked.size)
        # only the values of ranked keys take part: renumber them 0..m-1 (every pair's values
        # are such values), so that no array here is as long as all n_values
        involved = np.unique(value_of)
        value_of = np.searchsorted(involved, value_of).astype(np.int64)
        pairs = PairArrays(
            np.searchsorted(involved, pairs.a).astype(np.int64),
            np.searchsorted(involved, pairs.b).astype(np.int64),
            pairs.distance,
        )
        n_values = int(involved.size)
        del involved
        self.ranked = ranked
        self._f = f
        self._value_of = value_of
        order = np.argsort(value_of, kind="stable").astype(np.int64)
        self._member_rank = order  # ranks grouped by value, ascending within a value
        self._member_at = np.empty(f, dtype=np.int64)  # rank -> its index in _member_rank
        self._member_at[order] = np.arange(f, dtype=np.int64)
        self._value_end = np.cumsum(np.bincount(value_of, minlength=n_values)).astype(np.int64)
        # (value, rank) as one sorted int64 key, to find a value's keys above a rank
        self._member_key = value_of[order] * max(f, 1) + order
        node = np.concatenate((pairs.a, pairs.b))
        by_node = np.argsort(node, kind="stable")
        self._adj_other = np.concatenate((pairs.b, pairs.a))[by_node]
        self._adj_distance = np.concatenate((pairs.distance, pairs.distance))[by_node]
        self._adj_start = np.zeros(n_values + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=n_values), out=self._adj_start[1:])
        degree = np.diff(self._adj_start)
        self._segments_before = np.cumsum(1 + degree[value_of])  # per rank, inclusive

    def __len__(self) -> int:
        """The number of pairs (counted from the groups, nothing listed)."""
        counts = np.diff(np.append(0, self._value_end))
        others = counts[self._adj_other]
        node = np.repeat(np.arange(counts.size, dtype=np.int64), np.diff(self._adj_start))
        return identical_pairs(counts) + int((counts[node] * others).sum()) // 2

    def _segments(self, lo: int, hi: int) -> tuple[_I64, _I64, _I64, _I64]:
        """The slices of the keys of ranks lo..hi-1 (key rank, start, length, distance; start
        into the members in rank order of a value), sorted by key rank, empty ones dropped."""
        ranks = np.arange(lo, hi, dtype=np.int64)
        own = self._value_of[ranks]
        own_start = self._member_at[ranks] + 1
        starts = self._adj_start[own]
        degree = self._adj_start[own + 1] - starts
        at = _ranges(starts, degree)
        key = np.repeat(ranks, degree)
        other = self._adj_other[at]
        other_start = np.searchsorted(self._member_key, other * max(self._f, 1) + key, "right")
        seg_key = np.concatenate((ranks, key))
        seg_start = np.concatenate((own_start, other_start))
        seg_end = np.concatenate((self._value_end[own], self._value_end[other]))
        zero = np.zeros(ranks.size, dtype=np.int64)
        seg_distance = np.concatenate((zero, self._adj_distance[at]))
        keep = np.flatnonzero(seg_end > seg_start)
        by_key = keep[np.argsort(seg_key[keep], kind="stable")]
        seg_start = seg_start[by_key]
        return (
            seg_key[by_key],
            seg_start,
            seg_end[by_key] - seg_start,
            seg_distance[by_key].astype(np.int64),
        )

    def _expand(self, key: _I64, start: _I64, length: _I64, distance: _I64) -> PairArrays:
        """The pairs of the slices (sorted by key rank), sorted by (key rank, partner rank)."""
        at = _ranges(start, length)
        rank_b = self._member_rank[at]
        rank_a = np.repeat(key, length)
        if key.size > 1 and bool((key[1:] == key[:-1]).any()):  # two slices of one key: merge
            order = np.argsort((rank_a - rank_a[0]) * self._f + rank_b, kind="stable")
            rank_a, rank_b = rank_a[order], rank_b[order]
            dist = np.repeat(distance, length)[order]
        else:  # one slice per key, each ascending: already in order
            dist = np.repeat(distance, length)
        return PairArrays(self.ranked[rank_a], self.ranked[rank_b], dist)

    def chunks(
        self,
        max_pairs: int = DEFAULT_CHUNK,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[PairArrays]:
        """Every pair (a, b) of positions (from ``ranked``) within k, rank of a < rank of b,
        sorted by (rank of a, rank of b), in chunks of at most ``max_pairs`` (each full but the
        last; a chunk may end inside one key's pairs).

        Lazy: keys are taken in rank order, in windows of at most ``segment_budget`` slices
        (or one key), and a window's pairs are listed in batches of keys of at most
        ``max_pairs`` pairs (or one key), so memory is O(max_pairs + the largest neighbourhood
        of one key + one window of slices) and the work is proportional to the pairs read.

        Raises:
            ValueError: ``max_pairs`` < 1.
            CallCancelledError: ``should_stop`` returned True (checked before each batch).
        """
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
        pending: list[PairArrays] = []
        held = 0
        for part in self._batches(max_pairs, should_stop):
            pending.append(part)
            held += int(part.a.size)
            if held < max_pairs:
                continue
            merged = _concat(pending)
            cut = held - held % max_pairs
            for s in range(0, cut, max_pairs):
                join.check_stop(should_stop)
                yield PairArrays(*(x[s : s + max_pairs] for x in merged))
            pending = [PairArrays(*(x[cut:] for x in merged))] if cut < held else []
            held -= cut
        if held:
            yield _concat(pending)

    def _batches(
        self, max_pairs: int, should_stop: Callable[[], bool] | None
    ) -> Iterator[PairArrays]:
        """The pairs in order, in batches of whole keys (at most ``max_pairs``, or one key)."""
        f = self._f
        lo = 0
        while lo < f:
            join.check_stop(should_stop)
            before = int(self._segments_before[lo - 1]) if lo else 0
            hi = int(np.searchsorted(self._segments_before, before + self._segment_budget, "right"))
            hi = min(max(hi, lo + 1), f)
            key, start, length, distance = self._segments(lo, hi)
            lo = hi
            if key.size == 0:
                continue
            # batches of whole keys: cut where the running count passes a multiple of max_pairs
            ends = np.flatnonzero(np.append(key[1:] != key[:-1], True)) + 1
            per_key = np.add.reduceat(length, np.append(0, ends[:-1]))
            running = np.cumsum(per_key)
            s_key = 0
            while s_key < ends.size:
                base = int(running[s_key - 1]) if s_key else 0
                e_key = int(np.searchsorted(running, base + max_pairs, "right"))
                e_key = min(max(e_key, s_key + 1), ends.size)
                s_seg = int(ends[s_key - 1]) if s_key else 0
                e_seg = int(ends[e_key - 1])
                if s_key:
                    join.check_stop(should_stop)
                yield self._expand(
                    key[s_seg:e_seg], start[s_seg:e_seg], length[s_seg:e_seg], distance[s_seg:e_seg]
                )
                s_key = e_key


def _concat(parts: list[PairArrays]) -> PairArrays:
    if len(parts) == 1:
        return parts[0]
    return PairArrays(*(np.concatenate(x) for x in zip(*parts, strict=True)))


def self_join_pairs(
    rows: RowStore,
    design: Design,
    k: int,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[tuple[str, str, int]]:
    """Every unordered pair of live rows' keys within ``k`` bits, as (key_a, key_b, distance)
    with key_a < key_b in code point order, sorted by (key_a, key_b).

    Now (the caller holds the index's lock): the self-join of :mod:`permindex.index.join.self_join`
    on the
    *distinct* live fingerprints (keys sharing a fingerprint cost one value, no candidate), on the
    design :func:`~permindex.index.join.self_join.join_design` picks for their number (the index's
    ``design`` otherwise), and the keys of the rows that have a near-duplicate. The returned
    iterator then lists the pairs lazily, in order, without the lock
    (:class:`~permindex.index.join.pair_stream.PairStream`): O(n) numpy work and memory plus the
    join's, O(f log f) to order the f keys with a near-duplicate, then O(1) per pair read.
    ``should_stop`` is checked between chunks of the join and of the listing.

    Raises:
        CallCancelledError: ``should_stop`` returned True.
    """
    live = rows.live_rows()
    values = distinct_values(rows.fps[live])
    n_values = int(values.distinct.size)
    plan = join.join_design(design, k, n_values)
    pairs = join_distinct(values.distinct, k, plan, should_stop, rows.tuning)
    flagged = flagged_positions(values, pairs)
    keys = rows.keys.keys(live[flagged])
    join.check_stop(should_stop)
    ranked = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
    budget = rows.tuning.segment_budget
    stream = PairStream(ranked, values.value_of[flagged[ranked]], pairs, n_values, budget)
    return _key_pairs(keys, stream.chunks(should_stop=should_stop))


def _key_pairs(keys: list[str], chunks: Iterator[PairArrays]) -> Iterator[tuple[str, str, int]]:
    key = keys.__getitem__
    return chain.from_iterable(
        zip(map(key, a.tolist()), map(key, b.tolist()), d.tolist(), strict=True)
        for a, b, d in chunks
    )
