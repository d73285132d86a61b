"""The self-join of a fingerprint array: every pair of positions within Hamming distance k, each
once, by the table-permutation method of Manku, Jain & Das Sarma 2007, "Detecting
Near-Duplicates for Web Crawling", section 3.

Two fingerprints within k bits differ in at most k of a design's blocks, so they share the
prefix (leading blocks) of at least one table when k <= blocks - leading (pigeonhole). For each
table the design searches (:meth:`~permindex.permutation.Design.tables_for`), the positions are
grouped by the table's prefix, every pair within a group is a candidate, each candidate is
verified exactly (popcount of the XOR) and a pair is kept only in the *first* searched table
whose prefix it shares (``(a ^ b) & leading_mask == 0`` for no earlier table), so no pair is
reported twice and no set is needed.

Two ways to find a table's candidates, chosen by prefix length:

* :func:`table_pairs_grouped`, prefixes of at most 16 bits (large groups): a radix sort by
  prefix and every pair of each group enumerated in chunks (:func:`group_pairs`), only those
  whose 16-bit filters are within k kept;
* :func:`table_pairs_sorted`, longer prefixes (mostly unique): the positions that can have a
  partner are found by counting the prefixes' top bits, sorted, and the pairs at sorted
  distance 1, 2, ... that share the prefix are emitted.

:func:`join_design` picks the design to join on by a cost model; :func:`self_join` runs the
join. :meth:`permindex.index.Index.pairs` and :mod:`permindex.clusters` both use it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from permindex.permutation import Design, Permutation, argsort_prefixes

__all__ = [
    "COUNT_BITS",
    "PAIR_BUDGET",
    "group_pairs",
    "join_design",
    "self_join",
    "table_pairs_grouped",
    "table_pairs_sorted",
]

#: Candidate pairs per numpy pass of a join (read at call time, so tests can lower it).
PAIR_BUDGET = 1 << 21
#: Largest count table (2^22 buckets) of a long-prefix join; above, every row is sorted.
COUNT_BITS = 22

_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]
_IntP = NDArray[np.intp]


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


def join_design(design: Design, k: int, n: int) -> Design:
    """The design to self-join ``n`` fingerprints within ``k`` bits on: ``design`` itself, or
    (4, 1), (5, 2), (6, 2) or (6, 3) when k allows, whichever a cost model says is cheapest
    ((6, 2) searches only 6 of its 15 tables for k = 3: :meth:`Design.tables_for`).

    The model, per searched table: a prefix of at most 16 bits costs one radix pass (about
    25 ns a row here) plus its candidate pairs, about n^2 / 2^(prefix bits + 1), at about 10 ns
    each; a longer one costs a count of its top bits and a sort of the rows that share them
    (about 40 ns a row in all) and about 40 ns per candidate pair.

    Raises InvalidArgumentError (from :meth:`Design.tables_for`) when k > design.max_k.
    """
    candidates = ((4, 1), (5, 2), (6, 2), (6, 3))
    options = [design] + [Design(b, t) for b, t in candidates if b - t >= k]

    def cost(d: Design) -> float:
        total = 0.0
        for t in d.tables_for(k):
            bits = d.permutations[t].prefix_bits
            pairs = n * n / 2.0 ** (bits + 1)
            total += 25.0 * n + 10.0 * pairs if bits <= 16 else 40.0 * (n + pairs)
        return total

    return min(options, key=cost)


def table_pairs_grouped(values: _U64, perm: Permutation, k: int) -> Iterator[tuple[_IntP, _IntP]]:
    """Candidate pairs of positions in (n,) uint64 ``values`` that share ``perm``'s prefix, for
    short prefixes (large groups): a radix sort by prefix, every pair of each group enumerated
    in chunks of about :data:`PAIR_BUDGET`, and only those whose 16-bit filters are within k
    kept (about 1 in 100 for random fingerprints and k = 3).

    Yields (i, j), two (m,) intp arrays of positions, i != j; every pair sharing the prefix
    with filters within k appears exactly once over all chunks (in one of its two orders).
    """
    prefixes = perm.prefix_array(values)
    order = argsort_prefixes(prefixes, perm.prefix_bits)
    sorted_prefixes = prefixes[order]
    del prefixes
    ends = np.flatnonzero(sorted_prefixes[1:] != sorted_prefixes[:-1]) + 1
    del sorted_prefixes
    ends = np.append(ends, values.size).astype(np.int64)
    sizes = np.diff(ends, prepend=0)
    if int(sizes.max()) < 2:
        return
    group_end = np.repeat(ends, sizes)
    filters = perm.filter_array(values[order])
    for i, j in group_pairs(group_end, PAIR_BUDGET):
        near = np.flatnonzero(np.bitwise_count(filters[i] ^ filters[j]) <= k)
        yield order[i[near]], order[j[near]]


def table_pairs_sorted(values: _U64, perm: Permutation, k: int) -> Iterator[tuple[_IntP, _IntP]]:
    """Candidate pairs of positions in (n,) uint64 ``values`` that share ``perm``'s prefix, for
    long prefixes (small groups).

    Most prefixes are unique then, so the positions whose prefix can have a partner are found
    first by counting the prefixes' top bits (about 4n buckets, up to 2^:data:`COUNT_BITS`: a
    position alone in its bucket has no partner); only those are sorted, as (prefix, position)
    packed into uint64, and the pairs at distance d = 1, 2, ... in sorted order that still
    share the prefix are emitted, each round over only the positions whose group reached d.
    Work: the count, a sort of the few candidates, and the candidate pairs.

    Yields (i, j), two (m,) intp arrays of positions, i != j; every pair sharing the prefix
    appears exactly once (``k`` is not used: no filter is applied).
    """
    n = int(values.size)
    index_bits = max(1, (n - 1).bit_length())
    if perm.prefix_bits + index_bits > 64:  # pragma: no cover - > 2^31 rows with 33-bit prefixes
        yield from table_pairs_grouped(values, perm, k)
        return
    prefixes = perm.prefix_array(values)
    bucket_bits = min(perm.prefix_bits, max(8, (4 * n).bit_length()))
    if bucket_bits <= COUNT_BITS:
        buckets = (prefixes >> np.uint64(perm.prefix_bits - bucket_bits)).astype(np.intp)
        counts = np.bincount(buckets, minlength=1 << bucket_bits)
        candidates = np.flatnonzero(counts[buckets] >= 2)
        del counts, buckets
        keys = prefixes[candidates] << np.uint64(index_bits)
        keys |= candidates.astype(np.uint64)
    else:  # a count table this large misses the caches: sorting every row is cheaper
        keys = prefixes << np.uint64(index_bits)
        keys |= np.arange(n, dtype=np.uint64)
    del prefixes
    keys.sort()
    sorted_prefixes = keys >> np.uint64(index_bits)
    positions = (keys & np.uint64((1 << index_bits) - 1)).astype(np.intp)
    del keys
    m = int(positions.size)
    active = np.flatnonzero(sorted_prefixes[1:] == sorted_prefixes[:-1])
    d = 1
    while active.size:
        yield positions[active], positions[active + d]
        d += 1
        active = active[active + d < m]
        active = active[sorted_prefixes[active + d] == sorted_prefixes[active]]


def self_join(values: _U64, k: int, design: Design) -> tuple[_I64, _I64, _I64]:
    """Every unordered pair of positions of ``values`` within Hamming distance ``k`` bits,
    each once (Manku et al. 2007, section 3).

    Args:
        values: (n,) uint64 fingerprints; equal values are allowed (distance 0 pairs).
        k: largest Hamming distance in bits, 0 <= k <= design.max_k.
        design: the table design to join on, used as given (see :func:`join_design` for a
            choice by cost); only its :meth:`Design.tables_for` ``(k)`` tables are searched.

    Returns:
        (a, b, distance): three (m,) int64 arrays, positions a != b into ``values`` (in either
        order) and their distance in bits; in no particular order.

    Raises:
        InvalidArgumentError: k < 0 or k > design.max_k (from :meth:`Design.tables_for`).
    """
    searched = design.tables_for(k)
    empty = np.empty(0, dtype=np.int64)
    if values.size < 2:
        return empty, empty.copy(), empty.copy()
    perms = design.permutations
    masks = [np.uint64(p.leading_mask) for p in perms]
    parts_a: list[_I64] = []
    parts_b: list[_I64] = []
    parts_d: list[_I64] = []
    for n_t, t in enumerate(searched):
        earlier = [masks[u] for u in searched[:n_t]]
        if perms[t].prefix_bits <= 16:
            pairs = table_pairs_grouped(values, perms[t], k)
        else:
            pairs = table_pairs_sorted(values, perms[t], k)
        for i, j in pairs:
            x = values[i] ^ values[j]
            distance = np.bitwise_count(x)
            selected = distance <= k
            for other in earlier:  # each pair only from the first table it shares
                selected &= (x & other) != 0
            chosen = np.flatnonzero(selected)
            if chosen.size:
                parts_a.append(i[chosen].astype(np.int64, copy=False))
                parts_b.append(j[chosen].astype(np.int64, copy=False))
                parts_d.append(distance[chosen].astype(np.int64))
    if not parts_a:
        return empty, empty.copy(), empty.copy()
    return np.concatenate(parts_a), np.concatenate(parts_b), np.concatenate(parts_d)
